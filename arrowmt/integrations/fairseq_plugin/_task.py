"""The ``translation_arrow`` task: fairseq's ``TranslationTask`` reading an arrowmt folder.

Everything else (models, criterions, BLEU during validation, generation) is
``TranslationTask``'s; only the data side is arrowmt's: dictionaries and the
language pair from the folder (either direction of it), memory-mapped splits,
arrowmt's collater and memory-mapped batch plans equal to the batches fairseq
builds (see :mod:`arrowmt.integrations.fairseq_plugin._batches`).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from fairseq import utils
from fairseq.data import Dictionary
from fairseq.data.iterators import EpochBatchIterator
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationTask

from arrowmt._errors import InvalidParameterError, VocabularyError
from arrowmt.format import MANIFEST_NAME, SOURCE, TARGET, ColumnInfo, Manifest, symbols_sha256
from arrowmt.integrations.fairseq_plugin._batches import (
    IteratorOptions,
    SampledBatches,
    batch_iterator,
    cached_iterator,
    loader_options,
)
from arrowmt.integrations.fairseq_plugin._config import TranslationArrowConfig
from arrowmt.integrations.fairseq_plugin._dataset import ArrowPairDataset
from arrowmt.integrations.fairseq_plugin._order_copy import write_order_copy
from arrowmt.plans import refuse_changing_lengths
from arrowmt.reading import local_folder
from arrowmt.segments import BUILD_HINT, FORMS_DIR, check_segmentation, sampled_folder
from arrowmt.splits import mismatch_error
from arrowmt.training import ArrowMTDataset, ArrowMTSampledDataset, FairseqCollater, open_dataset, open_view_dataset

logger = logging.getLogger(__name__)

TASK_HINT = "the task reads its dictionaries from the first --data folder; every folder must use them"

TASK_NAME = "translation_arrow"


def allow_fairseq_checkpoints() -> None:
    """Let torch's weights-only ``torch.load`` (the default since torch 2.6) read fairseq checkpoints.

    fairseq 0.12 calls ``torch.load`` without ``weights_only`` and keeps the
    model's legacy arguments in an ``argparse.Namespace``, the one non-tensor
    class in its checkpoints; without this, resuming (``checkpoint_last.pt``)
    fails with ``Unsupported global: GLOBAL argparse.Namespace``. Allowlisting a
    plain attribute holder keeps every other class refused.
    """
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:
        add_safe_globals([argparse.Namespace])


allow_fairseq_checkpoints()


@register_task(TASK_NAME, dataclass=TranslationArrowConfig)
class TranslationArrowTask(TranslationTask):
    """Translate with data from an arrowmt folder (``--data``), batched by arrowmt."""

    cfg: TranslationArrowConfig

    def __init__(self, cfg: TranslationArrowConfig, src_dict: Dictionary, tgt_dict: Dictionary) -> None:
        _check_supported(cfg)
        super().__init__(cfg, src_dict, tgt_dict)

    @classmethod
    def setup_task(cls, cfg: TranslationArrowConfig, **kwargs: Any) -> TranslationArrowTask:
        """Language pair and dictionaries from the first data folder's manifest."""
        folder = Path(_data_paths(cfg)[0])
        manifest = Manifest.load(folder)
        cfg.source_lang, cfg.target_lang = _language_pair(manifest, cfg, folder)
        dictionaries, names = _dictionaries_of(folder, manifest, cfg)
        src_dict = cls.load_dictionary(str(dictionaries / _dictionary_file(names, cfg.source_lang)))
        tgt_dict = cls.load_dictionary(str(dictionaries / _dictionary_file(names, cfg.target_lang)))
        logger.info(
            "%s: arrowmt folder %s, %s-%s, dictionaries of %d and %d types",
            TASK_NAME,
            folder,
            cfg.source_lang,
            cfg.target_lang,
            len(src_dict),
            len(tgt_dict),
        )
        return cls(cfg, src_dict, tgt_dict)

    def has_sharded_data(self, split: str) -> bool:
        return is_sharded(self.cfg.data)

    def state_dict(self) -> dict[str, Any]:
        """fairseq's task state, and the segmentation the model trains on (checked when a checkpoint is loaded)."""
        return with_segmentation(super().state_dict(), self.cfg.arrow_segmentation)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(checked_segmentation(state_dict, self.cfg.arrow_segmentation))

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        """Open ``split`` (all its shards) memory-mapped; training cycles through colon-separated folders."""
        paths = _data_paths(self.cfg)
        folder = paths[(epoch - 1) % len(paths)] if split == self.cfg.train_subset else paths[0]
        view = self.cfg.arrow_train_view if split == self.cfg.train_subset else ""
        segmentation = self.cfg.arrow_segmentation if split == self.cfg.train_subset else "fixed"
        if view and segmentation != "fixed":
            raise InvalidParameterError(f"arrow_segmentation: {segmentation!r} reads a split, not a view ({view})")
        shapes = self.cfg.arrow_batch_shapes if split == self.cfg.train_subset else None  # valid: fairseq's own
        if shapes is not None and (self.cfg.arrow_order_copy or int(self.cfg.required_seq_len_multiple) != 1):
            raise InvalidParameterError(
                f"arrow_batch_shapes: expected without --arrow-order-copy and with --required-seq-len-multiple 1 (the "
                f"shapes fix the widths), got --arrow-order-copy {self.cfg.arrow_order_copy or '(none)'}, "
                f"--required-seq-len-multiple {self.cfg.required_seq_len_multiple}"
            )
        if view:
            arrow = open_view_dataset(view, folder)
        elif segmentation == "sampled":  # each epoch's copy in its samples goes with the batch plans
            arrow = ArrowMTSampledDataset(open_dataset(folder, split), cache_dir=self.cfg.arrow_plan_cache_dir or None,
                                          alpha=self.cfg.arrow_spm_alpha)  # fmt: skip
        else:
            arrow = open_dataset(folder, split)
        if segmentation != "fixed":
            refuse_changing_lengths(shapes, arrow)
        reverse = _is_reverse(arrow, self.cfg)
        _check_dictionaries(arrow, reverse, self.src_dict, self.tgt_dict)
        collater = self._collater(arrow)
        self.datasets[split] = ArrowPairDataset(arrow, self.src_dict, self.tgt_dict, collater, reverse=reverse,
                                                batch_shapes=shapes)  # fmt: skip
        logger.info(
            "%s: split %s: %d pairs memory-mapped from %s (%s-%s%s)",
            TASK_NAME,
            split,
            len(arrow),
            folder,
            self.cfg.source_lang,
            self.cfg.target_lang,
            ", reverse direction of the folder" if reverse else "",
        )

    def _collater(self, arrow: ArrowMTDataset) -> FairseqCollater:
        return FairseqCollater(
            arrow.special_ids,
            left_pad_source=self.cfg.left_pad_source,
            left_pad_target=self.cfg.left_pad_target,
            pad_to_multiple=int(self.cfg.required_seq_len_multiple),
        )

    def get_batch_iterator(self, dataset: Any, *args: Any, **kwargs: Any) -> EpochBatchIterator:
        """fairseq's iterator over arrowmt batch plans (other datasets: ``TranslationTask``'s own).

        Cached per dataset exactly when fairseq's ``FairseqTask.get_batch_iterator`` caches.
        """
        if not isinstance(dataset, ArrowPairDataset):
            return super().get_batch_iterator(dataset, *args, **kwargs)
        opts = IteratorOptions(*args, **kwargs)
        if self.cfg.arrow_order_copy and dataset is self.datasets.get(self.cfg.train_subset):
            write_order_copy(self.cfg, dataset, opts, _data_paths(self.cfg))
        loader = loader_options(self.cfg)
        if isinstance(dataset.arrow, ArrowMTSampledDataset):  # a plan per epoch, from that epoch's samples
            loader, make = replace(loader, rebuild_batches=True), SampledBatches(opts, None)
            return cached_iterator(self, dataset, opts, lambda: batch_iterator(dataset, opts, loader, make))
        return cached_iterator(self, dataset, opts, lambda: batch_iterator(dataset, opts, loader))


SEGMENTATION_STATE = "arrowmt_segmentation"  # in a checkpoint's task state: what the model's dictionaries are


def with_segmentation(state: dict[str, Any], segmentation: str) -> dict[str, Any]:
    """A task's state, with the segmentation its model trains on."""
    return {**state, SEGMENTATION_STATE: segmentation}


def checked_segmentation(state: dict[str, Any], segmentation: str) -> dict[str, Any]:
    """A checkpoint's task state without arrowmt's entry; InvalidParameterError when its model was trained on
    another segmentation (its embeddings are sized by the other dictionaries: fairseq would fail on their size)."""
    trained = state.get(SEGMENTATION_STATE, segmentation)
    if trained != segmentation:
        raise InvalidParameterError(
            f"arrow_segmentation: the checkpoint's model was trained with --arrow-segmentation {trained} (its "
            f"dictionaries are the {'samples' if trained == 'sampled' else 'corpus'}'s), this run reads "
            f"{segmentation!r}; pass --arrow-segmentation {trained}"
        )
    return {k: v for k, v in state.items() if k != SEGMENTATION_STATE}


def _data_paths(cfg: TranslationArrowConfig) -> list[str]:
    """The ``--data`` folders; a URL (``s3://...``) becomes the local folder caching it (``--arrow-cache-dir``)."""
    paths = utils.split_paths(cfg.data) if cfg.data else []
    if not paths:
        raise InvalidParameterError(f"data: expected the path of a converted arrowmt folder, got {cfg.data!r}")
    return [str(data_folder(path, cfg)) for path in paths]


def is_sharded(data: str) -> bool:
    """Whether ``--data`` names several folders (fairseq's own test, a ``:`` anywhere, takes ``s3://`` for two)."""
    return len(utils.split_paths(data)) > 1 if data else False


def data_folder(path: str, cfg: Any) -> Path:
    """``path``, or for a URL the folder caching it as ``--arrow-cache-dir``/``--arrow-cache-limit`` say."""
    cache_dir = getattr(cfg, "arrow_cache_dir", "") or None
    return local_folder(path, cache_dir, getattr(cfg, "arrow_cache_limit", "") or None)


def _check_supported(cfg: TranslationArrowConfig) -> None:
    """InvalidParameterError for translation options arrowmt's data path does not implement."""
    unsupported = {
        "load_alignments": cfg.load_alignments,
        "truncate_source": cfg.truncate_source,
        "num_batch_buckets": cfg.num_batch_buckets > 0,
        "upsample_primary": cfg.upsample_primary > 1,
    }
    for name, used in unsupported.items():
        if used:
            instead = " (--arrow-batch-shapes N: at most N shapes, less padding)" if name == "num_batch_buckets" else ""
            raise InvalidParameterError(f"{name}: not supported by {TASK_NAME}, got {getattr(cfg, name)!r}{instead}")


def _language_pair(manifest: Manifest, cfg: TranslationArrowConfig, folder: Path) -> tuple[str, str]:
    """The task's (source, target) languages: the folder's pair, reversed when ``-s``/``-t`` ask for it.

    Either option alone picks the direction it names; neither gives the converted direction.
    """
    src, tgt = manifest.languages.get(SOURCE), manifest.languages.get(TARGET)
    if src is None or tgt is None:
        raise InvalidParameterError(
            f"data: expected a parallel corpus with source and target languages in {folder}, "
            f"got languages {manifest.languages}"
        )
    given = (cfg.source_lang, cfg.target_lang)
    for pair in ((src, tgt), (tgt, src)):
        if all(g in (None, lang) for g, lang in zip(given, pair, strict=True)):
            return pair
    raise InvalidParameterError(
        f"source_lang/target_lang: expected {src}/{tgt} or {tgt}/{src} (the pair converted in {folder}), "
        f"got {given[0]}/{given[1]}"
    )


def _dictionary_file(manifest: Manifest, lang: str) -> str:
    return manifest.dictionaries.get(lang, f"dict.{lang}.txt")


def _dictionaries_of(folder: Path, manifest: Manifest, cfg: TranslationArrowConfig) -> tuple[Path, Manifest]:
    """Where the task's dictionaries are, and the manifest naming them: the folder's, or with
    ``--arrow-segmentation sampled`` its samples' (the folder's extended by the pieces only samples use)."""
    if check_segmentation("arrow_segmentation", cfg.arrow_segmentation) == "fixed":
        return folder, manifest
    forms = sampled_dictionaries(folder)
    return forms, Manifest.load(forms)


def sampled_dictionaries(folder: Path) -> Path:
    """The folder whose ``dict.<lang>.txt`` the sampled segmentations of the corpus in ``folder`` use (its own,
    extended by the pieces only samples use); InvalidParameterError when the corpus holds none."""
    forms = sampled_folder(folder) / FORMS_DIR
    if not (forms / MANIFEST_NAME).is_file():
        raise InvalidParameterError(
            f"arrow_segmentation: sampled, but {folder} holds no sampled segmentations (build them with {BUILD_HINT})"
        )
    return forms


def _is_reverse(arrow: ArrowMTDataset, cfg: TranslationArrowConfig) -> bool:
    """Whether the task reads the split in reverse (its target column as source); the split must hold the pair."""
    langs = arrow.metadata.languages
    pair = (langs.get(SOURCE), langs.get(TARGET))
    task = (cfg.source_lang, cfg.target_lang)
    if pair not in (task, task[::-1]):
        raise InvalidParameterError(
            f"data: split {arrow.split!r} in {arrow.path}: expected languages "
            f"{task[0]}-{task[1]} (either direction), got {langs}"
        )
    return pair != task


def _check_dictionaries(arrow: ArrowMTDataset, reverse: bool, src_dict: Dictionary, tgt_dict: Dictionary) -> None:
    """The split's ids come from dictionaries like the task's (source and target swapped when ``reverse``)."""
    pairs = ((SOURCE, src_dict), (TARGET, tgt_dict))
    if reverse:
        pairs = ((TARGET, src_dict), (SOURCE, tgt_dict))
    for column, dictionary in pairs:
        _check_dictionary(arrow, column, dictionary)


def _check_dictionary(arrow: ArrowMTDataset, column: str, dictionary: Dictionary) -> None:
    info = arrow.metadata.columns[column]
    ids = arrow.special_ids
    expected = (info.vocab_size, ids.bos, ids.pad, ids.eos, ids.unk)
    got = (len(dictionary), dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk())
    if expected[1:] != got[1:] or got[0] < expected[0]:  # a larger dictionary may extend it (sampled pieces)
        raise VocabularyError(
            f"{arrow.path}: split {arrow.split!r} column {column!r} was converted with a dictionary of "
            f"(size, bos, pad, eos, unk) = {expected}, the task's {info.dictionary} gives {got}"
        )
    check_symbols(dictionary, info, f"{arrow.path} split {arrow.split!r} column {column!r}")


def check_symbols(dictionary: Dictionary, info: ColumnInfo, where: str) -> None:
    """VocabularyError unless the task's ``dictionary`` starts with the symbols ``where`` was encoded with
    (the same SHA-256 as the split file records; symbols the task adds after them, like language tokens, aside)."""
    symbols = dictionary.symbols[: info.vocab_size]
    digest = (len(symbols), symbols_sha256(symbols))
    if error := mismatch_error(f"the task's dictionary ({info.dictionary})", digest, where, info, TASK_HINT):
        raise error
