"""The ``translation_multi_simple_epoch_arrow`` task: fairseq's ``translation_multi_simple_epoch`` reading one
arrowmt folder of several language pairs (``arrowmt convert fairseq`` on a multilingual data-bin).

Everything but the data is fairseq's own task: the options (``--lang-pairs``,
``--sampling-method``, ``--sampling-temperature``, ``--sampling-weights``,
``--encoder-langtok``, ``--decoder-langtok``, ``--lang-dict``/``--langs``, ...),
the dictionaries (loaded from the folder's ``dict.{lang}.txt`` and given the language
tokens), models, generation. The data side is arrowmt's:

* each pair's split ``{split}.{src}-{tgt}`` is memory-mapped (or read through a view
  file, ``--arrow-train-views``) and the pairs form a :class:`~arrowmt.training._mixture.Mixture`
  whose tags are the language tokens fairseq would prepend;
* each training epoch's rows are drawn as ``SampledMultiDataset`` draws them (same
  ratios, same epoch size, same ``RandomState``: fairseq seeds it with 2, not ``--seed``),
  and the epoch's batches (fairseq's order under ``numpy_seed(seed)``, size filter,
  ``batch_by_size``) are one memory-mapped plan file shared by every rank;
* validation splits are the pairs concatenated in length order, as fairseq's
  ``ConcatDataset``;
* fairseq's own ``EpochBatchIterator`` (built with the arguments the native task gives
  it) shuffles, shards, checkpoints and resumes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from fairseq import utils
from fairseq.data import iterators
from fairseq.data.multilingual.multilingual_data_manager import MultilingualDatasetManager
from fairseq.tasks import register_task
from fairseq.tasks.translation_multi_simple_epoch import TranslationMultiSimpleEpochTask

from arrowmt._errors import InvalidParameterError, VocabularyError
from arrowmt.format import SOURCE, TARGET
from arrowmt.integrations.fairseq_plugin._batches import IteratorOptions, ReadAheadEpochBatchIterator, pair_spec
from arrowmt.integrations.fairseq_plugin._config import (
    CACHE_DIR_HELP,
    CACHE_LIMIT_HELP,
    SEGMENTATION_HELP,
    SPM_ALPHA_HELP,
)
from arrowmt.integrations.fairseq_plugin._mixture_dataset import ArrowMixtureDataset, ArrowMixtureSamplesDataset
from arrowmt.integrations.fairseq_plugin._task import (
    check_symbols,
    checked_segmentation,
    data_folder,
    is_sharded,
    sampled_dictionaries,
    with_segmentation,
)
from arrowmt.io import DEFAULT_DEPTH, check_depth
from arrowmt.mixing import Sampling, load_mixture_plan, temperature_ratios
from arrowmt.plans import PlanParams, ShiftedPlan
from arrowmt.segments import check_segmentation
from arrowmt.training import (
    ArrowMTDataset,
    ArrowMTSampledDataset,
    ArrowMTViewDataset,
    FairseqCollater,
    Mixture,
    Tags,
    open_dataset,
    open_view_dataset,
)

logger = logging.getLogger(__name__)

MULTI_TASK_NAME = "translation_multi_simple_epoch_arrow"
FAIRSEQ_RESAMPLE_SEED = 2  # SampledMultiDataset's default seed; the native task never passes --seed to it
MAIN_DATA = "main"  # fairseq's data category of --lang-pairs (keys "main:de-en" of --sampling-weights)


@register_task(MULTI_TASK_NAME)
class TranslationMultiSimpleEpochArrowTask(TranslationMultiSimpleEpochTask):
    """``translation_multi_simple_epoch`` over an arrowmt folder holding every pair as ``{split}.{src}-{tgt}``."""

    @staticmethod
    def add_args(parser: Any) -> None:
        TranslationMultiSimpleEpochTask.add_args(parser)
        parser.add_argument(
            "--arrow-plan-cache-dir",
            default="",
            help="folder for arrowmt's shared batch-plan files (default: .arrowmt-cache inside the data folder)",
        )
        parser.add_argument("--arrow-cache-dir", default="", help=CACHE_DIR_HELP)
        parser.add_argument("--arrow-cache-limit", default="", help=CACHE_LIMIT_HELP)
        parser.add_argument(
            "--arrow-prefetch",
            type=int,
            default=DEFAULT_DEPTH,
            help="batches whose rows arrowmt reads ahead from disk while a batch is used (0: off)",
        )
        parser.add_argument(
            "--arrow-train-views",
            default="",
            help="read pairs' training split through arrowmt view files: PAIR=VIEW[,PAIR=VIEW...]",
        )
        parser.add_argument("--arrow-segmentation", default="fixed", help=SEGMENTATION_HELP)
        parser.add_argument("--arrow-spm-alpha", type=float, default=None, help=SPM_ALPHA_HELP)

    @classmethod
    def setup_task(cls, args: Any, **kwargs: Any) -> TranslationMultiSimpleEpochArrowTask:
        """fairseq's setup; with ``--arrow-segmentation sampled`` the dictionaries are the samples' (each
        ``dict.<lang>.txt`` of the folder extended by the pieces only samples use)."""
        load = cls.load_dictionary
        if check_segmentation("arrow_segmentation", getattr(args, "arrow_segmentation", "fixed")) == "sampled":
            forms = sampled_dictionaries(Path(_data_path(args)))
            data = Path(utils.split_paths(args.data)[0])

            def load(path: str) -> Any:  # the folder's dict.<lang>.txt, as the samples extend it
                return cls.load_dictionary(str(forms / Path(path).name) if Path(path).parent == data else path)

        langs, dicts, training = MultilingualDatasetManager.prepare(load, args, **kwargs)
        return cls(args, langs, dicts, training)

    def __init__(self, args: Any, langs: list[str], dicts: dict[str, Any], training: bool) -> None:
        _check_supported(args)
        super().__init__(args, langs, dicts, training)
        self.views = _parse_views(args.arrow_train_views)
        self.segmentation = check_segmentation("arrow_segmentation", getattr(args, "arrow_segmentation", "fixed"))
        if self.views and self.segmentation != "fixed":
            raise InvalidParameterError(
                f"arrow_segmentation: {self.segmentation!r} reads the pairs' splits, not views "
                f"({args.arrow_train_views})"
            )

    # -- data

    def has_sharded_data(self, split: str) -> bool:
        return is_sharded(self.args.data)

    def state_dict(self) -> dict[str, Any]:
        """fairseq's task state, and the segmentation the model trains on (checked when a checkpoint is loaded)."""
        return with_segmentation(super().state_dict(), self.segmentation)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(checked_segmentation(state_dict, self.segmentation))

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        """Every pair's ``split`` memory-mapped, as one tagged mixture."""
        folder = Path(_data_path(self.args))
        train = split == self.args.train_subset
        corpora = {pair: self._corpus(folder, split, pair, train) for pair in self.lang_pairs}
        mixture = Mixture(corpora, [self._tags(pair) for pair in self.lang_pairs])
        collater = FairseqCollater(
            mixture.special_ids, left_pad_source=self.args.left_pad_source, left_pad_target=self.args.left_pad_target
        )
        if train and self.segmentation == "sampled":  # each epoch's rows in their samples of the epoch
            cache = self.args.arrow_plan_cache_dir or None
            alpha = getattr(self.args, "arrow_spm_alpha", None)
            samples = [ArrowMTSampledDataset(c, cache_dir=cache, alpha=alpha)  # type: ignore[arg-type]
                       for c in corpora.values()]  # fmt: skip
            self._check_vocabulary(samples[0], mixture.path, mixture.special_ids)
            self.datasets[split] = ArrowMixtureSamplesDataset(mixture, samples, split, collater)
        else:
            self._check_vocabulary(mixture.corpora[0], mixture.path, mixture.special_ids)
            self.datasets[split] = ArrowMixtureDataset(mixture, split, collater, sampled=self.training and train)
        logger.info("%s: split %s: %s memory-mapped from %s", MULTI_TASK_NAME, split, mixture, folder)

    def _corpus(
        self, folder: Path, split: str, pair: str, train: bool
    ) -> ArrowMTDataset | ArrowMTSampledDataset | ArrowMTViewDataset:
        if train and pair in self.views:
            return open_view_dataset(self.views[pair], folder)
        name = f"{split}.{pair}"
        try:
            return open_dataset(folder, name)
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                f"lang_pairs: expected split {name!r} in {folder} (convert a multilingual data-bin with "
                f"'arrowmt convert fairseq', or text with 'arrowmt convert text --lang-pairs'): {exc}"
            ) from exc

    def _tags(self, pair: str) -> Tags:
        """The language tokens fairseq prepends to this pair's source and target (``--langtoks`` main)."""
        src, tgt = pair.split("-")
        src_spec, tgt_spec = self.args.langtoks[MAIN_DATA]
        source = self.data_manager.get_encoder_langtok(src, tgt, src_spec)
        target = self.data_manager.get_decoder_langtok(tgt, tgt_spec)
        return Tags(() if source is None else (source,), () if target is None else (target,))

    def _check_vocabulary(self, corpus: Any, path: Path, ids: Any) -> None:
        """VocabularyError unless the task's dictionaries index the ids ``corpus`` (the first pair) gives."""
        for column, dictionary in ((SOURCE, self.source_dictionary), (TARGET, self.target_dictionary)):
            info = corpus.metadata.columns[column]
            if (ids.pad, ids.eos) != (dictionary.pad(), dictionary.eos()) or info.vocab_size > len(dictionary):
                raise VocabularyError(
                    f"{path}: column {column!r} was converted with {info.dictionary} of {info.vocab_size} "
                    f"symbols, pad {ids.pad}, eos {ids.eos}; the task's dictionary has {len(dictionary)} symbols, "
                    f"pad {dictionary.pad()}, eos {dictionary.eos()}"
                )
            check_symbols(dictionary, info, f"{path} column {column!r}")

    # -- batches

    def get_batch_iterator(  # noqa: PLR0913  # fairseq's FairseqTask.get_batch_iterator
        self,
        dataset: Any,
        max_tokens: int | None = None,
        max_sentences: int | None = None,
        max_positions: Any = None,
        ignore_invalid_inputs: bool = False,
        required_batch_size_multiple: int = 1,
        seed: int = 1,
        num_shards: int = 1,
        shard_id: int = 0,
        num_workers: int = 0,
        epoch: int = 1,
        data_buffer_size: int = 0,
        disable_iterator_cache: bool = False,
        skip_remainder_batch: bool = False,
        grouped_shuffling: bool = False,
        update_epoch_batch_itr: bool = False,
    ) -> iterators.EpochBatchIterator:
        """fairseq's iterator over each epoch's arrowmt plan, with the arguments the native task passes."""
        if not isinstance(dataset, ArrowMixtureDataset):
            return super().get_batch_iterator(
                dataset, max_tokens, max_sentences, max_positions, ignore_invalid_inputs,
                required_batch_size_multiple, seed, num_shards, shard_id, num_workers, epoch, data_buffer_size,
                disable_iterator_cache, skip_remainder_batch, grouped_shuffling, update_epoch_batch_itr,
            )  # fmt: skip
        sampled = dataset.sampled
        opts = IteratorOptions(
            max_tokens, max_sentences, max_positions, ignore_invalid_inputs, required_batch_size_multiple
        )
        # SampledMultiDataset shuffles; the validation ConcatDataset does not
        params = pair_spec(opts, seed if sampled else None)
        ratios = self._sampling_ratios(dataset.mixture) if sampled else None
        plans = EpochPlans(params, ratios, self.args.virtual_data_size if sampled else None, self._cache_dir())
        return ReadAheadEpochBatchIterator(
            check_depth(self.args.arrow_prefetch),
            dataset=dataset,
            collate_fn=dataset.collater,
            batch_sampler=plans,
            seed=seed,
            num_shards=num_shards,
            shard_id=shard_id,
            num_workers=num_workers,
            epoch=epoch,
        )

    def _sampling_ratios(self, mixture: Mixture) -> np.ndarray | None:
        """fairseq's ratios: ``--sampling-weights(-from-file)``, else by ``--sampling-method`` (concat: None)."""
        weights = self.args.sampling_weights
        if self.args.sampling_weights_from_file:
            with open(self.args.sampling_weights_from_file, encoding="utf-8") as handle:
                weights = json.load(handle)
        if weights:
            return np.array([weights[f"{MAIN_DATA}:{pair}"] for pair in mixture.names], dtype=np.float64)
        method = self.args.sampling_method
        if method == "uniform":
            return np.ones(len(mixture.names), dtype=np.float64)
        if method == "temperature":
            return temperature_ratios(mixture.sizes, float(self.args.sampling_temperature))
        return None

    def _cache_dir(self) -> str | None:
        return self.args.arrow_plan_cache_dir or None


class EpochPlans:
    """fairseq's callable ``batch_sampler``: every batch of an epoch's mixture plan (fairseq shuffles and shards)."""

    def __init__(self, params: PlanParams, ratios: np.ndarray | None, epoch_size: int | None, cache_dir: Any) -> None:
        self.params = params
        self.ratios = ratios
        self.epoch_size = epoch_size
        self.cache_dir = cache_dir

    def __call__(self, dataset: ArrowMixtureDataset, epoch: int) -> list[np.ndarray]:
        sampling = Sampling(self.ratios, self.epoch_size, FAIRSEQ_RESAMPLE_SEED, int(epoch))
        plan = load_mixture_plan(dataset.epoch_mixture(epoch), self.params, sampling, dataset.plans_in(self.cache_dir))
        logger.info(
            "%s: split %s epoch %d: %d batches planned by arrowmt, plan %s",
            MULTI_TASK_NAME,
            dataset.split,
            epoch,
            len(plan),
            plan.path,
        )
        if shift := dataset.shift(epoch):
            plan = ShiftedPlan(plan, shift)
        return [plan.batch(b) for b in range(len(plan))]


def _data_path(args: Any) -> str:
    paths = utils.split_paths(args.data) if args.data else []
    if len(paths) != 1:
        raise InvalidParameterError(f"data: expected one arrowmt folder, got {args.data!r}")
    return str(data_folder(paths[0], args))


def _parse_views(spec: str) -> dict[str, str]:
    views = {}
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        pair, sep, path = entry.partition("=")
        if not sep or not pair or not path:
            raise InvalidParameterError(f"arrow_train_views: expected PAIR=VIEW entries, got {entry!r}")
        views[pair] = path
    return views


def _check_supported(args: Any) -> None:
    """InvalidParameterError for native options arrowmt's data side does not implement."""
    unsupported = {
        "virtual_epoch_size": args.virtual_epoch_size is not None,
        "lang_tok_replacing_bos_eos": args.lang_tok_replacing_bos_eos,
        "extra_data": bool(args.extra_data),
        "extra_lang_pairs": bool(args.extra_lang_pairs),
        "enable_lang_ids": args.enable_lang_ids,
        "load_alignments": args.load_alignments,
        "truncate_source": args.truncate_source,
        "sampling_method": args.sampling_method == "RoundRobin",
    }
    for name, used in unsupported.items():
        if used:
            raise InvalidParameterError(f"{name}: not supported by {MULTI_TASK_NAME}, got {getattr(args, name)!r}")
