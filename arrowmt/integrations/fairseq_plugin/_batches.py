"""fairseq ``EpochBatchIterator``s whose batches are arrowmt ``TokenBatchSampler`` plans.

Training: the sampler plans fairseq's batches once (shared memory-mapped plan
file), shuffles them per epoch with ``seed + epoch`` and gives this rank
(fairseq's ``shard_id`` of ``num_shards``) its share, every rank the same
number; fairseq's iterator gets that list through a callable ``batch_sampler``
with its own shuffling and sharding turned off. Its checkpoint state (epoch,
batches consumed) then resumes exactly, because the list is a pure function of
(seed, epoch, rank, world size).

Evaluation (any split other than the training subset): the plan in length
order, sharded by fairseq as usual (each batch once, short shards padded with
empty batches), so validation statistics count every sample once.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from fairseq.data import iterators

from arrowmt._errors import InvalidParameterError
from arrowmt.integrations.fairseq_plugin._dataset import ArrowPairDataset
from arrowmt.training._sampler import TokenBatchSampler

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
    """How fairseq's iterator keeps its DataLoader (task options ``reuse_dataloader``/``persistent_workers``)."""

    reuse_dataloader: bool = True
    persistent_workers: bool = True
    cache_dir: str | os.PathLike[str] | None = None


class RankEpochBatches:
    """fairseq's callable ``batch_sampler``: this rank's batches of an epoch, as the sampler gives them."""

    def __init__(self, sampler: TokenBatchSampler) -> None:
        self.sampler = sampler

    def __call__(self, dataset: object, epoch: int) -> list[np.ndarray]:
        self.sampler.set_epoch(epoch)
        return [self.sampler.plan.batch(int(b)) for b in self.sampler.epoch_batches()]


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


def make_sampler(
    dataset: ArrowPairDataset, opts: IteratorOptions, loader: LoaderOptions, training: bool
) -> TokenBatchSampler:
    """The arrowmt sampler for ``dataset``: sharded and shuffled when ``training``, one length-ordered plan else."""
    max_source, max_target = position_limits(opts.max_positions)
    return TokenBatchSampler(
        dataset.arrow,
        max_tokens=opts.max_tokens,
        max_sentences=opts.max_sentences,
        required_batch_size_multiple=opts.required_batch_size_multiple,
        max_source_positions=max_source,
        max_target_positions=max_target,
        seed=opts.seed,
        shuffle=training,
        num_replicas=opts.num_shards if training else 1,
        rank=opts.shard_id if training else 0,
        cache_dir=loader.cache_dir,
        skip_invalid_size_inputs=opts.ignore_invalid_inputs,
    )


def training_iterator(
    dataset: ArrowPairDataset, opts: IteratorOptions, loader: LoaderOptions
) -> iterators.EpochBatchIterator:
    """Iterator over this rank's share of the sampler's epoch batches (fairseq shards and shuffles nothing)."""
    if opts.grouped_shuffling:
        logger.warning("translation_arrow: --grouped-shuffling is ignored; arrowmt shuffles whole batches per epoch")
    sampler = make_sampler(dataset, opts, loader, training=True)
    logger.info(
        "translation_arrow: split %s: %d batches planned by arrowmt TokenBatchSampler, %d per shard "
        "(shard %d of %d, seed %d), plan %s",
        dataset.split,
        len(sampler.plan),
        len(sampler),
        sampler.rank,
        sampler.num_replicas,
        opts.seed,
        sampler.plan.path,
    )
    return _epoch_iterator(dataset, opts, loader, RankEpochBatches(sampler), shards=(1, 0), shuffle=False)


def evaluation_iterator(
    dataset: ArrowPairDataset, opts: IteratorOptions, loader: LoaderOptions
) -> iterators.EpochBatchIterator:
    """Iterator over the length-ordered plan, sharded by fairseq (every batch once, empty fill)."""
    sampler = make_sampler(dataset, opts, loader, training=False)
    batches = [sampler.plan.batch(b) for b in range(len(sampler.plan))]
    logger.info("translation_arrow: split %s: %d batches planned by arrowmt", dataset.split, len(batches))
    shards = (opts.num_shards, opts.shard_id)
    return _epoch_iterator(dataset, opts, loader, batches, shards=shards, shuffle=True)


def _epoch_iterator(
    dataset: ArrowPairDataset,
    opts: IteratorOptions,
    loader: LoaderOptions,
    batch_sampler: Any,
    shards: tuple[int, int],
    shuffle: bool,
) -> iterators.EpochBatchIterator:
    return iterators.EpochBatchIterator(
        dataset=dataset,
        collate_fn=dataset.collater,
        batch_sampler=batch_sampler,
        seed=opts.seed,
        num_shards=shards[0],
        shard_id=shards[1],
        num_workers=opts.num_workers,
        epoch=opts.epoch,
        buffer_size=opts.data_buffer_size,
        disable_shuffling=not shuffle,
        skip_remainder_batch=opts.skip_remainder_batch,
        reuse_dataloader=loader.reuse_dataloader,
        persistent_workers=loader.persistent_workers,
    )
