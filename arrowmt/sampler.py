"""A resumable, distributed token-budget batch sampler with fairseq's batches, over an ArrowMTDataset.

The batch plan (fairseq's order, size filter and ``batch_by_size``) is computed
once per (dataset content, parameters) and shared as a memory-mapped file (see
:mod:`arrowmt.plan_cache`). Each epoch the batches are shuffled with
``seed + epoch`` and rank r takes batches r, r + k, ... of that order, every rank
the same number (short ranks wrap around, see :func:`arrowmt.bucketing.shard_batches`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler

from arrowmt.bucketing import (
    batch_by_size,
    check_limit,
    check_seed,
    compact_counts,
    epoch_batch_order,
    filter_by_size,
    ordered_indices,
    shard_batches,
    shard_length,
)
from arrowmt.dataset import ArrowMTDataset
from arrowmt.errors import InputDataError, InvalidParameterError
from arrowmt.plan_cache import CACHE_DIR_NAME, BatchPlan, PlanArrays, load_or_build_plan, plan_key
from arrowmt.schema import SOURCE, TARGET

logger = logging.getLogger(__name__)

STATE_KEYS = ("epoch", "seed", "batches_done", "plan_key", "num_replicas", "rank")
CHECKED_STATE_KEYS = ("seed", "plan_key", "num_replicas", "rank")
LIMIT_FIELDS = (
    "max_tokens",
    "max_sentences",
    "required_batch_size_multiple",
    "max_source_positions",
    "max_target_positions",
)


@dataclass(frozen=True)
class PlanParams:
    """Everything the batch plan depends on besides the dataset's content."""

    max_tokens: int | None
    max_sentences: int | None
    required_batch_size_multiple: int
    max_source_positions: int | None
    max_target_positions: int | None
    seed: int | None
    skip_invalid_size_inputs: bool

    def __post_init__(self) -> None:
        for name in LIMIT_FIELDS:
            check_limit(name, getattr(self, name))
        if self.seed is not None:
            check_seed("seed", self.seed)


def column_lengths(dataset: ArrowMTDataset) -> dict[str, np.ndarray]:
    """Every column's token counts, each read once, in the narrowest unsigned dtype holding them."""
    return {column: compact_counts(dataset.lengths(column, dtype=np.int32)) for column in dataset.columns}


def side_lengths(
    dataset: ArrowMTDataset, lengths: Mapping[str, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(source lengths, target lengths or None): ``tokens`` is the source of a monolingual split.

    Taken from ``lengths`` (see :func:`column_lengths`) when given, else read (int64).
    """

    def get(column: str) -> np.ndarray:
        return dataset.lengths(column) if lengths is None else lengths[column]

    if SOURCE in dataset.columns:
        return get(SOURCE), get(TARGET) if TARGET in dataset.columns else None
    return get(dataset.columns[0]), None


def row_sizes(lengths: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """fairseq's size of each of ``rows`` (``ArrowMTDataset.num_tokens``): the max over columns of its length."""
    columns = list(lengths.values())
    sizes = columns[0][rows].astype(np.result_type(*columns), copy=False)
    for other in columns[1:]:
        np.maximum(sizes, other[rows], out=sizes)
    return sizes


def _too_long_error(name: str, limit: int, index: int, size: int, count: int) -> InputDataError:
    return InputDataError(
        f"{name}: sample {index} has {size} tokens, expected <= {name}={limit} ({count} samples too long; "
        "pass skip_invalid_size_inputs=True to drop them)"
    )


def _position_error(dropped: np.ndarray, src: np.ndarray, tgt: np.ndarray | None, params: PlanParams) -> InputDataError:
    """The error for the first dropped sample: its source if that is too long, else its target."""
    index, count = int(dropped[0]), int(dropped.size)
    src_limit, tgt_limit = params.max_source_positions, params.max_target_positions
    if tgt is None or tgt_limit is None or (src_limit is not None and src[index] > src_limit):
        return _too_long_error("max_source_positions", src_limit or 0, index, int(src[index]), count)
    return _too_long_error("max_target_positions", tgt_limit, index, int(tgt[index]), count)


def _filter_positions(
    order: np.ndarray, src: np.ndarray, tgt: np.ndarray | None, params: PlanParams
) -> tuple[np.ndarray, int]:
    """Remove samples over the position limits; InputDataError unless skipping is allowed."""
    kept, dropped = filter_by_size(order, src, tgt, params.max_source_positions, params.max_target_positions)
    if dropped.size and not params.skip_invalid_size_inputs:
        raise _position_error(dropped, src, tgt, params)
    return kept, int(dropped.size)


def _filter_tokens(kept: np.ndarray, num_tokens: np.ndarray, params: PlanParams) -> tuple[np.ndarray, np.ndarray, int]:
    """Remove samples over ``max_tokens``: (kept, their sizes, dropped count)."""
    if params.max_tokens is None or num_tokens.size == 0 or num_tokens.max() <= params.max_tokens:
        return kept, num_tokens, 0
    over = num_tokens > params.max_tokens
    if over.any() and not params.skip_invalid_size_inputs:
        k = int(np.flatnonzero(over)[0])
        raise _too_long_error("max_tokens", params.max_tokens, int(kept[k]), int(num_tokens[k]), int(over.sum()))
    return kept[~over], num_tokens[~over], int(over.sum())


def build_plan(dataset: ArrowMTDataset, params: PlanParams) -> PlanArrays:
    """fairseq's batches for ``dataset``: ordered indices, size filter, ``batch_by_size``.

    Each column's lengths are read once, narrow (uint8/uint16 for usual lengths), and
    indices are int32 below 2**31 rows; every intermediate is released as soon as it is used.
    """
    lengths = column_lengths(dataset)
    src, tgt = side_lengths(dataset, lengths)
    order = ordered_indices(src, tgt, params.seed)
    kept, dropped = _filter_positions(order, src, tgt, params)
    del order, src, tgt
    sizes = row_sizes(lengths, kept)
    del lengths
    kept, sizes, over = _filter_tokens(kept, sizes, params)
    flat, offsets = batch_by_size(
        kept, sizes, params.max_tokens, params.max_sentences, params.required_batch_size_multiple
    )
    return PlanArrays(flat, offsets, dropped + over)


def default_world() -> tuple[int, int]:
    """(world size, rank) of the initialized default process group, else (1, 0)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class TokenBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices, fairseq's token-budget batches, for one rank; resumable.

    Use as ``DataLoader(dataset, batch_sampler=sampler, ...)`` and call
    ``set_epoch(epoch)`` (epochs start at 1, as in fairseq) before each epoch.
    ``state_dict()`` records how many batches ``__iter__`` has yielded in the
    current epoch; with a prefetching DataLoader that runs ahead of training,
    save the state of batches actually consumed (e.g. set ``batches_done`` to
    your own step count) to resume without skipping batches.
    """

    def __init__(
        self,
        dataset: ArrowMTDataset,
        max_tokens: int | None = 4096,
        max_sentences: int | None = None,
        required_batch_size_multiple: int = 1,
        max_source_positions: int | None = None,
        max_target_positions: int | None = None,
        seed: int = 1,
        shuffle: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        skip_invalid_size_inputs: bool = False,
    ) -> None:
        check_seed("seed", seed)
        self.seed = seed
        self.shuffle = shuffle
        self.num_replicas, self.rank = _resolve_world(num_replicas, rank)
        params = PlanParams(
            max_tokens,
            max_sentences,
            required_batch_size_multiple,
            max_source_positions,
            max_target_positions,
            seed if shuffle else None,
            skip_invalid_size_inputs,
        )
        self.plan = _load_plan(dataset, params, cache_dir)
        self.epoch = 1
        self.batches_done = 0
        self._resume_from = 0
        self._rank_batches: tuple[int, np.ndarray] | None = None

    @property
    def plan_key(self) -> str:
        return self.plan.key

    def __len__(self) -> int:
        return shard_length(len(self.plan), self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (unless it is the epoch a loaded state resumes in the middle of)."""
        if isinstance(epoch, bool) or int(epoch) != epoch or epoch < 0:
            raise InvalidParameterError(f"epoch: expected an integer >= 0, got {epoch!r}")
        if epoch == self.epoch and 0 < self._resume_from < len(self):
            return
        self.epoch = int(epoch)
        self.batches_done = 0
        self._resume_from = 0

    def epoch_batches(self) -> np.ndarray:
        """This rank's batch ids for the current epoch (computed once per epoch)."""
        if self._rank_batches is None or self._rank_batches[0] != self.epoch:
            n = len(self.plan)
            order = epoch_batch_order(n, self.seed, self.epoch) if self.shuffle else np.arange(n, dtype=np.int64)
            self._rank_batches = (self.epoch, shard_batches(order, self.rank, self.num_replicas))
        return self._rank_batches[1]

    def __iter__(self) -> Iterator[list[int]]:
        ids = self.epoch_batches()
        start, self._resume_from = self._resume_from, 0
        self.batches_done = start
        return self._generate(ids, start)

    def _generate(self, ids: np.ndarray, start: int) -> Iterator[list[int]]:
        for position in range(start, ids.shape[0]):
            self.batches_done = position + 1
            yield self.plan.batch(int(ids[position])).tolist()

    def state_dict(self) -> dict[str, Any]:
        """Where this sampler stands: restore with :meth:`load_state_dict` on an identical sampler."""
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "batches_done": self.batches_done,
            "plan_key": self.plan_key,
            "num_replicas": self.num_replicas,
            "rank": self.rank,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` continues epoch ``state['epoch']`` after ``batches_done`` batches.

        A state saved at the end of an epoch resumes to an exhausted epoch (``__iter__``
        yields nothing); the next ``set_epoch`` then starts that or any epoch fresh.
        """
        _check_state(state, self.state_dict(), len(self))
        self.epoch = int(state["epoch"])
        self.batches_done = int(state["batches_done"])
        self._resume_from = self.batches_done


def _resolve_world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    world, default_rank = default_world()
    num_replicas = world if num_replicas is None else num_replicas
    rank = default_rank if rank is None else rank
    if isinstance(num_replicas, bool) or int(num_replicas) != num_replicas or num_replicas < 1:
        raise InvalidParameterError(f"num_replicas: expected an integer >= 1, got {num_replicas!r}")
    if isinstance(rank, bool) or int(rank) != rank or not 0 <= rank < num_replicas:
        raise InvalidParameterError(f"rank: expected an integer in [0, num_replicas={num_replicas}), got {rank!r}")
    return int(num_replicas), int(rank)


def _load_plan(dataset: ArrowMTDataset, params: PlanParams, cache_dir: str | os.PathLike[str] | None) -> BatchPlan:
    key = plan_key({"dataset": dataset.fingerprint(), "rows": len(dataset), **asdict(params)})
    folder = Path(cache_dir) if cache_dir is not None else Path(dataset.path) / CACHE_DIR_NAME
    plan = load_or_build_plan(folder, key, len(dataset), lambda: build_plan(dataset, params))
    if plan.built:
        release_free_heap()
    if plan.dropped:
        logger.warning(
            "%s: %d samples exceed max_tokens/max_source_positions/max_target_positions and are skipped",
            dataset.path,
            plan.dropped,
        )
    return plan


def release_free_heap() -> None:
    """Return the heap freed by a plan build to the OS (glibc's ``malloc_trim``); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim  # absent from musl
    except (OSError, AttributeError):
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)


def _check_state(state: dict[str, Any], current: dict[str, Any], length: int) -> None:
    """InvalidParameterError naming the first key that is missing or differs from this sampler."""
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise InvalidParameterError(f"state_dict: expected keys {list(STATE_KEYS)}, missing {missing}")
    for name in CHECKED_STATE_KEYS:
        if state[name] != current[name]:
            raise InvalidParameterError(
                f"state_dict[{name!r}]: expected {current[name]!r} (this sampler), got {state[name]!r}; "
                "resume with the same dataset, batching parameters, seed and world size"
            )
    for name, high in (("epoch", 2**32), ("batches_done", length)):
        value = state[name]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
            raise InvalidParameterError(f"state_dict[{name!r}]: expected an integer in 0..{high}, got {value!r}")
