"""A resumable, distributed token-budget batch sampler with fairseq's batches, over an ArrowMTDataset.

The batch plan (fairseq's order, size filter and ``batch_by_size``) is computed
once per (dataset content, parameters) and shared as a memory-mapped file (see
:mod:`arrowmt.training._plan_cache`). Each epoch the batches are shuffled with
``seed + epoch`` and rank r takes batches r, r + k, ... of that order, every rank
the same number (short ranks wrap around, see :func:`arrowmt.training._bucketing.shard_batches`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from arrowmt._errors import InvalidParameterError
from arrowmt.format._split import Split
from arrowmt.training._bucketing import check_seed, epoch_batch_order, shard_batches, shard_length
from arrowmt.training._plan import PlanParams, load_plan
from arrowmt.training._world import resolve_world

STATE_KEYS = ("epoch", "seed", "batches_done", "plan_key", "num_replicas", "rank")
CHECKED_STATE_KEYS = ("seed", "plan_key", "num_replicas", "rank")


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
        dataset: Split,
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
        self.num_replicas, self.rank = resolve_world(num_replicas, rank)
        params = PlanParams(
            max_tokens,
            max_sentences,
            required_batch_size_multiple,
            max_source_positions,
            max_target_positions,
            seed if shuffle else None,
            skip_invalid_size_inputs,
        )
        self.plan = load_plan(dataset, params, cache_dir)
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
