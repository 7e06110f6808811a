"""The ``language_modeling_arrow`` task: fairseq's ``language_modeling`` reading a monolingual arrowmt folder.

Models, criterions, ``fairseq-eval-lm`` and generation are ``LanguageModelingTask``'s;
the data side is arrowmt's: the dictionary from the folder, memory-mapped splits cut
into fairseq's token blocks (``--tokens-per-sample``, ``--sample-break-mode``, a block
table cached once per corpus and parameters) and batch plans equal to the batches
native fairseq builds: ``MonolingualDataset``'s order under ``numpy_seed(seed + epoch)``,
the ``max_positions`` filter and ``batch_by_size``, then fairseq's own
``EpochBatchIterator`` (its shuffling, sharding and resume).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from fairseq.data import Dictionary, TruncatedDictionary, iterators
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingTask

from arrowmt._errors import InvalidParameterError
from arrowmt.blocks import cache_folder, load_block_plan
from arrowmt.format import TOKENS, Manifest
from arrowmt.integrations.fairseq_plugin._batches import (
    IteratorOptions,
    batch_iterator,
    block_batch_spec,
    cached_iterator,
    loader_options,
)
from arrowmt.integrations.fairseq_plugin._lm_config import LanguageModelingArrowConfig
from arrowmt.integrations.fairseq_plugin._lm_dataset import ArrowBlocksLMDataset
from arrowmt.integrations.fairseq_plugin._order_copy import write_block_order_copy
from arrowmt.integrations.fairseq_plugin._task import _check_dictionary, _data_paths, is_sharded
from arrowmt.splits import Split
from arrowmt.training import BlockDataset

logger = logging.getLogger(__name__)

LM_TASK_NAME = "language_modeling_arrow"


@register_task(LM_TASK_NAME, dataclass=LanguageModelingArrowConfig)
class LanguageModelingArrowTask(LanguageModelingTask):
    """Train a language model on a monolingual arrowmt folder (``--data``), blocks and batches by arrowmt."""

    @classmethod
    def setup_dictionary(cls, args: Any, **kwargs: Any) -> tuple[Dictionary, Dictionary]:
        """The folder's dictionary (and its ``--output-dictionary-size`` truncation)."""
        folder = Path(_data_paths(args)[0])
        manifest = Manifest.load(folder)
        if TOKENS not in manifest.languages:
            raise InvalidParameterError(
                f"data: expected a monolingual arrowmt folder (column {TOKENS!r}) in {folder}, "
                f"got columns {sorted(manifest.languages)}"
            )
        lang = manifest.languages[TOKENS]
        dictionary = Dictionary.load(str(folder / manifest.dictionaries.get(lang or "", "dict.txt")))
        logger.info("%s: arrowmt folder %s, dictionary of %d types", LM_TASK_NAME, folder, len(dictionary))
        output = dictionary
        if args.output_dictionary_size >= 0:
            output = TruncatedDictionary(dictionary, args.output_dictionary_size)
        return dictionary, output

    def has_sharded_data(self, split: str) -> bool:
        return is_sharded(self.args.data)

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> ArrowBlocksLMDataset:
        """Open ``split`` (all its shards) memory-mapped, in blocks; colon-separated folders one per epoch."""
        if self.args.shorten_method != "none":
            raise InvalidParameterError(
                f"shorten_method: not supported by {LM_TASK_NAME} (blocks are never shortened), "
                f"got {self.args.shorten_method!r}"
            )
        paths = _data_paths(self.args)
        folder = paths[(epoch - 1) % len(paths)]
        arrow = Split(folder, split)
        blocks = BlockDataset(
            arrow, self.args.tokens_per_sample, self.args.sample_break_mode, cache_dir=self._cache_dir()
        )
        _check_dictionary(arrow, TOKENS, self.dictionary)
        pad_to_bsz = None
        if self.args.pad_to_fixed_bsz:
            pad_to_bsz = self.args.batch_size_valid if "valid" in split else self.args.batch_size
        dataset = ArrowBlocksLMDataset(
            blocks,
            self.dictionary,
            self.output_dictionary,
            self.targets,
            add_bos_token=self.args.add_bos_token,
            fixed_pad_length=self.args.tokens_per_sample if self.args.pad_to_fixed_length else None,
            pad_to_bsz=pad_to_bsz,
        )
        self.datasets[split] = dataset
        logger.info(
            "%s: split %s: %d rows memory-mapped from %s, %d blocks (%s, %s tokens per sample)",
            LM_TASK_NAME,
            split,
            len(arrow),
            folder,
            len(blocks),
            blocks.break_mode,
            self.args.tokens_per_sample,
        )
        return dataset

    def _cache_dir(self) -> str | os.PathLike[str] | None:
        return loader_options(self.args).cache_dir

    def get_batch_iterator(self, dataset: Any, *args: Any, **kwargs: Any) -> iterators.EpochBatchIterator:
        """fairseq's iterator over arrowmt's block batch plans (other datasets: fairseq's own).

        Cached per dataset exactly when fairseq's ``FairseqTask.get_batch_iterator`` caches.
        """
        if not isinstance(dataset, ArrowBlocksLMDataset):
            return super().get_batch_iterator(dataset, *args, **kwargs)
        opts = IteratorOptions(*args, **kwargs)
        if self.args.arrow_order_copy and dataset is self.datasets.get(self.args.train_subset):
            spec = block_batch_spec(opts, opts.seed + opts.epoch)
            write_block_order_copy(self.args, dataset.blocks, spec, _data_paths(self.args))
        loader = loader_options(self.args)
        make_batches = PlannedBlockBatches(opts, loader.cache_dir)
        return cached_iterator(self, dataset, opts, lambda: batch_iterator(dataset, opts, loader, make_batches))


class PlannedBlockBatches:
    """fairseq's ``make_batches(dataset, epoch)`` for a language model: the arrowmt block plan of that epoch."""

    def __init__(self, opts: IteratorOptions, cache_dir: str | os.PathLike[str] | None) -> None:
        self.opts = opts
        self.cache_dir = cache_dir

    def __call__(self, dataset: ArrowBlocksLMDataset, epoch: int) -> list[np.ndarray]:
        params = block_batch_spec(self.opts, self.opts.seed + epoch)
        split = dataset.blocks.split
        folder = cache_folder(split, self.cache_dir)
        where = f"{split.path} split {split.split!r}"
        plan = load_block_plan(dataset.blocks.table, params, folder, where, dataset.blocks.params)
        logger.info(
            "%s: split %s: %d batches of %d blocks planned by arrowmt for epoch %d (order seed %d), plan %s",
            LM_TASK_NAME,
            dataset.split,
            len(plan),
            len(dataset.blocks),
            epoch,
            params.seed,
            plan.path,
        )
        return [plan.batch(b) for b in range(len(plan))]
