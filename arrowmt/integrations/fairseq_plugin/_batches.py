"""fairseq ``EpochBatchIterator``s over arrowmt batch plans: the batches native ``--task translation`` builds.

fairseq's ``FairseqTask.get_batch_iterator`` makes an epoch's batches in three
steps: the dataset's ordered indices under ``numpy_seed(seed + epoch)``, the
``max_positions`` filter, ``batch_by_size``. ``epoch`` is the epoch the iterator
is created at (1 in a fresh run, the resumed epoch after a restart), or every
epoch with ``rebuild_batches``. Its ``EpochBatchIterator`` then shuffles the
batches per epoch with ``seed + epoch``, gives rank r of k batches r, r + k, ...
(short ranks get empty batches) and saves and resumes its position.

Here the three steps are an arrowmt plan (:func:`arrowmt.plans._plan.load_plan`:
built once, then memory-mapped from a cache file shared by every rank and
run), and the rest is fairseq's own ``EpochBatchIterator``, built with the
arguments native fairseq gives it. The batches, their order on every rank, and
resuming are therefore fairseq's. With ``--arrow-shuffle-window N`` (off by default)
only the shuffle changes: each epoch's batches are ordered by
:func:`arrowmt.plans.windowed_batch_order` (as ``TokenBatchSampler(shuffle_window=N)``),
then dealt to the ranks and resumed by fairseq as before; a copy made by ``arrowmt order``
with the task's plan options is then read ahead a window at a time.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from fairseq.data import iterators

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing import every_rank, window_end_steps
from arrowmt.integrations.fairseq_plugin._dataset import ArrowPairDataset
from arrowmt.integrations.workers import advise_workers
from arrowmt.io import DEFAULT_DEPTH, PassRanges, Prefetcher, RowSource, check_depth, prefetch_source
from arrowmt.plans import (
    BatchSpec,
    BlockSpec,
    PlanParams,
    WindowShuffle,
    batch_order,
    column_lengths,
    load_plan,
    plan_shapes,
)
from arrowmt.stored import stored_copy, stretch_ranges

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IteratorOptions:
    """The keyword arguments of fairseq's ``FairseqTask.get_batch_iterator``, with its defaults."""

    max_tokens: int | None = None
    max_sentences: int | None = None
    max_positions: Any = None
    ignore_invalid_inputs: bool = False
    required_batch_size_multiple: int = 1
    seed: int = 1
    num_shards: int = 1
    shard_id: int = 0
    num_workers: int = 0
    epoch: int = 1
    data_buffer_size: int = 0
    disable_iterator_cache: bool = False
    skip_remainder_batch: bool = False
    grouped_shuffling: bool = False
    update_epoch_batch_itr: bool = False


@dataclass(frozen=True)
class LoaderOptions:
    """Task options fairseq's ``get_batch_iterator`` reads from the config, and arrowmt's plan cache and read-ahead."""

    reuse_dataloader: bool = True
    persistent_workers: bool = True
    rebuild_batches: bool = False
    cache_dir: str | os.PathLike[str] | None = None
    prefetch: int = DEFAULT_DEPTH
    shuffle_window: int | None = None


def loader_options(cfg: Any) -> LoaderOptions:
    """The :class:`LoaderOptions` of a task's config (fairseq's defaults where the config has none)."""
    return LoaderOptions(
        reuse_dataloader=getattr(cfg, "reuse_dataloader", True),
        persistent_workers=getattr(cfg, "persistent_workers", True),
        rebuild_batches=getattr(cfg, "rebuild_batches", False),
        cache_dir=cfg.arrow_plan_cache_dir or None,
        prefetch=check_depth(getattr(cfg, "arrow_prefetch", DEFAULT_DEPTH)),
        shuffle_window=batch_order(True, getattr(cfg, "arrow_shuffle_window", None)).window,
    )


def cached_iterator(
    task: Any, dataset: Any, opts: IteratorOptions, build: Callable[[], iterators.EpochBatchIterator]
) -> iterators.EpochBatchIterator:
    """``build()``, kept per dataset in ``task`` exactly when fairseq's ``FairseqTask.get_batch_iterator`` keeps it."""
    reuse = not opts.disable_iterator_cache and not opts.update_epoch_batch_itr
    reuse = reuse and task.can_reuse_epoch_itr(dataset)
    if reuse and dataset in task.dataset_to_epoch_iter:
        return task.dataset_to_epoch_iter[dataset]
    dataset.set_epoch(opts.epoch)
    itr = build()
    if reuse:
        task.dataset_to_epoch_iter[dataset] = itr
    return itr


def _limit(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return int(value)


def position_limits(max_positions: Any) -> tuple[int | None, int | None]:
    """(max source, max target) positions from fairseq's ``max_positions`` (None, a number or a pair)."""
    if max_positions is None or isinstance(max_positions, (int, float)):
        return _limit(max_positions), _limit(max_positions)
    if isinstance(max_positions, dict) or len(max_positions) != 2:
        raise InvalidParameterError(
            f"max_positions: expected None, a number or a (source, target) pair, got {max_positions!r}"
        )
    return _limit(max_positions[0]), _limit(max_positions[1])


def pair_spec(opts: IteratorOptions, seed: int | None, reverse: bool = False,
              batch_shapes: int | None = None) -> PlanParams:  # fmt: skip
    """fairseq's batching arguments as the spec of a pair plan whose order is seeded with ``seed`` (None: no
    shuffle); the one place the translation tasks turn fairseq's options into arrowmt's."""
    max_source, max_target = position_limits(opts.max_positions)
    limits = {"max_source_positions": max_source, "max_target_positions": max_target}
    return PlanParams(**_budget(opts), **limits, seed=seed, reverse=reverse, batch_shapes=batch_shapes)


def block_batch_spec(opts: IteratorOptions, seed: int) -> BatchSpec:
    """fairseq's batching arguments as the spec of a plan of language-model blocks (the source limit applies)."""
    return BlockSpec(**_budget(opts), max_positions=position_limits(opts.max_positions)[0], seed=seed)


def _budget(opts: IteratorOptions) -> dict[str, Any]:
    """fairseq's ``batch_by_size`` options and its ``ignore_invalid_inputs``, by arrowmt's names."""
    return {
        "max_tokens": opts.max_tokens,
        "max_sentences": opts.max_sentences,
        "required_batch_size_multiple": opts.required_batch_size_multiple,
        "skip_invalid_size_inputs": opts.ignore_invalid_inputs,
    }


def plan_params(dataset: ArrowPairDataset, opts: IteratorOptions, epoch: int) -> PlanParams:
    """The plan fairseq's ``make_batches(dataset, epoch)`` computes, as arrowmt plan parameters."""
    return pair_spec(opts, opts.seed + epoch if dataset.shuffle else None, dataset.reverse, dataset.batch_shapes)


class PlannedBatches:
    """fairseq's ``make_batches(dataset, epoch)``: the batches of the arrowmt plan for that epoch's order."""

    def __init__(self, opts: IteratorOptions, cache_dir: str | os.PathLike[str] | None) -> None:
        self.opts = opts
        self.cache_dir = cache_dir
        self.plan: object = None  # the last plan made: the frozen batches' (read ahead by stretches in a copy)

    def __call__(self, dataset: ArrowPairDataset, epoch: int) -> list[np.ndarray]:
        params = plan_params(dataset, self.opts, epoch)
        plan = self.plan = load_plan(dataset.arrow, params, self.cache_dir)
        if params.batch_shapes is not None and dataset.collate.shapes is None:  # the same in every epoch
            shapes = plan_shapes(column_lengths(dataset.arrow), params, f"{dataset.arrow.path} {dataset.split}")
            dataset.collate = replace(dataset.collate, shapes=tuple(shapes))
            logger.info("translation_arrow: split %s: batches padded to %d shapes %s", dataset.split, len(shapes),
                        shapes)  # fmt: skip
        logger.info(
            "translation_arrow: split %s: %d batches planned by arrowmt for epoch %d (order seed %s), plan %s",
            dataset.split,
            len(plan),
            epoch,
            params.seed,
            plan.path,
        )
        return [plan.batch(b) for b in range(len(plan))]


class SampledBatches(PlannedBatches):
    """``make_batches(dataset, epoch)`` for a split read in sampled segmentations: the plan of that epoch's copy
    (each pair in its sample of the epoch), in fairseq's order for the epoch; called anew every epoch."""

    def __call__(self, dataset: ArrowPairDataset, epoch: int) -> list[np.ndarray]:
        params = plan_params(dataset, self.opts, epoch)
        plan = self.plan = dataset.arrow.epoch_plans(params).for_epoch(epoch)
        logger.info("translation_arrow: split %s: %d batches of sampled segmentations planned for epoch %d",
                    dataset.split, len(plan), epoch)  # fmt: skip
        return [plan.batch(b) for b in range(len(plan))]


def batch_iterator(
    dataset: Any,
    opts: IteratorOptions,
    loader: LoaderOptions,
    make_batches: Callable[[Any, int], list[np.ndarray]] | None = None,
) -> iterators.EpochBatchIterator:
    """fairseq's ``EpochBatchIterator`` over the planned batches, with the arguments native fairseq passes.

    ``make_batches(dataset, epoch)`` plans an epoch's batches (default: :class:`PlannedBatches`).
    """
    make_batches = make_batches or PlannedBatches(opts, loader.cache_dir)
    advise_workers(opts.num_workers, "fairseq-train --num-workers", "--num-workers 0")
    batch_sampler = make_batches if loader.rebuild_batches else make_batches(dataset, opts.epoch)
    return ReadAheadEpochBatchIterator(
        loader.prefetch,
        loader.shuffle_window,
        make_batches,
        dataset=dataset,
        collate_fn=dataset.collater,
        batch_sampler=batch_sampler,
        seed=opts.seed,
        num_shards=opts.num_shards,
        shard_id=opts.shard_id,
        num_workers=opts.num_workers,
        epoch=opts.epoch,
        buffer_size=opts.data_buffer_size,
        skip_remainder_batch=opts.skip_remainder_batch,
        grouped_shuffling=opts.grouped_shuffling,
        reuse_dataloader=loader.reuse_dataloader,
        persistent_workers=loader.persistent_workers,
    )


@dataclass(frozen=True)
class WindowReads:
    """An epoch dealt from a windowed order of the batches of a copy in plan order: where every rank's batches of some
    steps lie, and the steps that end windows (read ahead a window at a time, see :mod:`arrowmt.bucketing._deal`)."""

    copy: Any  # the split stored by ``plan``
    plan: Any
    order: np.ndarray  # plan batch ids in the epoch's order
    starts: np.ndarray  # where the second, third, ... window of the order begin
    ranks: int

    def at(self, step: int, steps: int) -> tuple[PassRanges, np.ndarray]:
        """(pass ranges, group ends) of the ``steps`` steps from ``step`` on, counted from there."""
        start = self.ranks * step  # fairseq deals position r + k * s to rank r at step s
        dealt = every_rank(self.order, start, self.ranks)
        return stretch_ranges(self.copy, self.plan, dealt), window_end_steps(self.starts, start, self.ranks, steps)


class ReadAheadBatches(list):
    """An epoch's batches (a list, as fairseq makes them) whose iteration reads each batch's rows ahead.

    fairseq's ``EpochBatchIterator`` hands the list (or a slice of it, after a resume) to a
    ``DataLoader`` as its batch sampler; iterating it in the main process runs arrowmt's
    :class:`~arrowmt.io._prefetch.Prefetcher` over the batches that follow. With ``reads``
    (a windowed epoch of a copy in plan order) it asks for a window's batches at once.
    """

    def __init__(
        self, batches: list[Any], source: RowSource, depth: int, reads: WindowReads | None = None, step: int = 0
    ) -> None:
        super().__init__(batches)
        self.source, self.depth, self.reads, self.step = source, depth, reads, step

    def __getitem__(self, index: Any) -> Any:
        item = super().__getitem__(index)
        if not isinstance(index, slice):
            return item
        first, _, stride = index.indices(len(self))
        reads = self.reads if stride == 1 else None
        return ReadAheadBatches(item, self.source, self.depth, reads, self.step + first)

    def __iter__(self) -> Iterator[Any]:
        n = len(self)

        def rows(q: int) -> np.ndarray:
            return np.asarray(list.__getitem__(self, q), dtype=np.int64)

        ranges, ends = (None, None) if self.reads is None else self.reads.at(self.step, n)
        ahead = Prefetcher.over_pass(self.source, self.depth, np.arange(n), rows, pass_ranges=ranges, group_ends=ends)
        for position in range(n):
            ahead.step(position)
            yield list.__getitem__(self, position)


class ReadAheadEpochBatchIterator(iterators.EpochBatchIterator):
    """fairseq's ``EpochBatchIterator`` whose epoch batches read their rows ahead (``prefetch`` batches; 0: off).

    Only the iteration of each epoch's list of batches changes (:class:`ReadAheadBatches`):
    which batches, sharding and resuming stay fairseq's, and their order too unless
    ``shuffle_window`` (then :func:`arrowmt.plans.windowed_batch_order` under fairseq's seed and
    epoch). ``plans``: what planned the batches (its ``plan``, when a copy in plan order stores
    it, locates a window's batches).
    """

    def __init__(self, prefetch: int, shuffle_window: int | None = None, plans: Any = None, **kwargs: Any) -> None:
        self.read_ahead = prefetch_source(kwargs.get("dataset"), prefetch)
        self.prefetch = prefetch
        self.window_order = None if shuffle_window is None else WindowShuffle(shuffle_window)
        self.plans = plans
        super().__init__(**kwargs)
        if shuffle_window is not None and self.grouped_shuffling:
            raise InvalidParameterError(
                f"grouped_shuffling: expected False with --arrow-shuffle-window {shuffle_window}, got True"
            )

    def ordered_batches(self, epoch: int, fix_batches_to_gpus: bool, shuffle: bool) -> list[Any]:
        if self.window_order is None or not shuffle:
            batches, reads = super().ordered_batches(epoch, fix_batches_to_gpus, shuffle), None
        else:
            batches, reads = self._windowed(self.window_order, epoch, fix_batches_to_gpus)
        if self.read_ahead is None:
            return batches
        return ReadAheadBatches(batches, self.read_ahead, self.prefetch, reads)

    def _windowed(
        self, windows: WindowShuffle, epoch: int, fix_batches_to_gpus: bool
    ) -> tuple[list[Any], WindowReads | None]:
        """This rank's batches of epoch ``epoch`` in the windowed order (dealt as fairseq deals), and their reads."""
        if fix_batches_to_gpus:
            raise InvalidParameterError(
                f"fix_batches_to_gpus: expected False with --arrow-shuffle-window {windows.window}"
            )
        frozen = self.frozen_batches
        order = windows.order(len(frozen), self.seed, epoch)
        ordered = [frozen[b] for b in order.tolist()]
        batches = list(iterators.ShardedIterator(ordered, self.num_shards, self.shard_id, fill_value=[]))
        stored = stored_copy(getattr(self.plans, "plan", None), getattr(self.dataset, "arrow", None))
        if stored is None or self.read_ahead is None:  # no copy read by its plan, or no read-ahead: nothing to locate
            return batches, None
        starts = windows.window_starts(len(frozen), self.seed, epoch)
        return batches, WindowReads(*stored, order, starts, self.num_shards)
