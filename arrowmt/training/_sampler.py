"""Resumable, elastic, distributed samplers over a batch plan; ``TokenBatchSampler`` plans fairseq's batches.

Words: a *plan batch* is one planned list of sample indices (``plan.batch(b)``, ``b`` its
batch id); this module yields plan batches as lists; a collater turns each into a
*training batch* of padded tensors.

Each epoch the plan's batch ids are shuffled with ``seed + epoch`` (the *epoch order*)
and dealt to the ranks: rank r of k takes positions r, r + k, ... of it, every rank the
same number (short ranks wrap around, see :func:`arrowmt.bucketing._bucketing.shard_batches`).

Resume. ``state_dict()`` is where this rank stands: after the sampler has yielded k
batches it says k, at the moment the k-th one is handed out. torchdata's
``StatefulDataLoader`` saves exactly that state for the batch it yields (it snapshots the
sampler in the main process as it draws each batch, however far its workers prefetch),
so ``loader.state_dict()`` after step k restores, in a fresh process, to batch k + 1.
A plain ``DataLoader`` without workers draws one batch per step, so ``sampler.state_dict()``
is exact there too; with workers it runs ahead (use ``StatefulDataLoader``).

Elastic resume. A state saved with N ranks loads into a sampler of M ranks: the N ranks
trained the first ``N * batches_done`` positions of the epoch order, and the rest of the
order is dealt to the M ranks (``start`` in the state records where that deal began), so
over the epoch every planned batch is trained once, apart from each deal's wrapped padding.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError
from arrowmt._heap import release_free_heap
from arrowmt.bucketing import every_rank, own, resume_start, shard_batches, shard_length, window_end_steps
from arrowmt.io import DEFAULT_DEPTH, PassRanges, Prefetcher, RowSource, prefetch_source
from arrowmt.plans import (
    FixedPlan,
    Plan,
    PlanParams,
    PlanProvider,
    as_provider,
    column_lengths,
    load_plan,
    plan_shapes,
    refuse_changing_lengths,
)
from arrowmt.splits import Split
from arrowmt.stored import ROWS, refuse_stored_order, stored_copy, stretch_ranges
from arrowmt.training._options import DEFAULT_MAX_TOKENS, SamplerOptions, Walk, sampler_arguments, walk_of

logger = logging.getLogger(__name__)

STATE_KEYS = ("epoch", "seed", "batches_done", "plan_key", "num_replicas", "rank")
START_KEY = "start"  # added later: states without it began their deal at position 0
WINDOW_KEY = "shuffle_window"  # added later: states without it were saved with None (fairseq's shuffle)
MATCHED_STATE_KEYS = ("seed", "plan_key")
EPOCH_LIMIT, EPOCH_LIMIT_NAME = 2**32, "2**32"


class PlanSampler(Sampler[list[int]]):
    """Yields one rank's plan batches of each epoch as lists of dataset indices; resumable and elastic.

    Use as ``DataLoader(dataset, batch_sampler=sampler, ...)`` (or torchdata's
    ``StatefulDataLoader``) and call ``set_epoch(epoch)`` (epochs start at 1, as in
    fairseq) before each epoch. Iterating again without ``set_epoch`` repeats the epoch.

    ``plan`` is one plan for every epoch, or a provider of each epoch's plan
    (:class:`~arrowmt.plans._provider.EpochPlans`: a mixture's, drawn per epoch).

    ``shuffle_window`` (None: fairseq's shuffle of every batch) shuffles each epoch within
    windows of that many batches (rounded up to a multiple of 16), each 16 runs of consecutive plan batches
    (:func:`~arrowmt.bucketing._bucketing.windowed_batch_order`): the same batches, in a less
    random order, that a copy stored in plan order (``arrowmt order``) reads in long
    stretches, as object-storage readers shuffle shards.
    """

    def __init__(
        self,
        plan: Plan | PlanProvider,
        seed: int = 1,
        shuffle: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        source: RowSource | None = None,
        prefetch: int = DEFAULT_DEPTH,
        shuffle_window: int | None = None,
    ) -> None:
        self._begin(plan, walk_of(seed, shuffle, shuffle_window, num_replicas, rank, prefetch), source)

    def _begin(self, plan: Plan | PlanProvider, walk: Walk, source: RowSource | None) -> None:
        """Start walking ``plan`` (the constructors of its kinds check their options into ``walk`` first)."""
        self.walk = walk
        self.dataset = source  # what the plan's batch ids index (None: not known)
        self.source = prefetch_source(source, walk.prefetch)  # what the plan's batches read (None: no read-ahead)
        self.prefetcher: Prefetcher | None = None  # the advanced iterator's
        self.plans = as_provider(plan)
        self.epoch = 1
        self.start = 0  # position in the epoch order where this rank's deal begins
        self.batches_done = 0  # batches of that deal handed out
        self._resume = False  # a loaded position waits for the next advanced iterator
        self._ended = False  # the loaded position is the epoch's end: nothing to yield until another epoch
        self._chosen_epoch: int | None = None  # the last set_epoch argument
        self._pass = 0  # which __iter__ call may update batches_done
        self._order: tuple[tuple[int, str], np.ndarray] | None = None  # ((epoch, plan key), that epoch's order)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the live prefetcher (it refers to this pass's epoch order)."""
        return {**self.__dict__, "prefetcher": None}

    @property
    def seed(self) -> int:
        return self.walk.seed

    @property
    def shuffle(self) -> bool:
        return self.walk.order.shuffled

    @property
    def shuffle_window(self) -> int | None:
        return self.walk.order.window

    @property
    def prefetch(self) -> int:
        return self.walk.prefetch

    @property
    def num_replicas(self) -> int:
        return self.walk.world.size

    @property
    def rank(self) -> int:
        return self.walk.world.rank

    @property
    def plan(self) -> Plan:
        """The current epoch's plan."""
        return self.plans.for_epoch(self.epoch)

    @plan.setter
    def plan(self, plan: Plan) -> None:
        """Walk ``plan`` in every epoch from now on."""
        self.plans = FixedPlan(plan)

    @property
    def plan_key(self) -> str:
        return self.plan.key

    def __repr__(self) -> str:
        order = self.walk.order.describe()
        return (
            f"{type(self).__name__}(epoch {self.epoch}: {self.batches_done} of {len(self)} batches done, rank "
            f"{self.rank} of {self.num_replicas}; {len(self.plan)} batches planned, seed {self.seed}, {order})"
        )

    def __len__(self) -> int:
        """Batches this rank gets in the current epoch (from the deal's start)."""
        return shard_length(len(self.plan), self.num_replicas, self.start)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``, unless a loaded state is in that very epoch (then continue from it)."""
        epoch = check_integer("epoch", epoch, 0, EPOCH_LIMIT, high_name=EPOCH_LIMIT_NAME)  # what a state may record
        self._chosen_epoch = epoch
        if epoch == self.epoch and (self._resume or self._ended):
            return
        self._move_to(epoch, 0, 0, resume=False)

    def epoch_order(self) -> np.ndarray:
        """Every plan batch id in the current epoch's order (computed once per epoch)."""
        plan = self.plan
        if self._order is None or self._order[0] != (self.epoch, plan.key):
            self._order = None  # the last epoch's order goes before this one is made
            self._order = ((self.epoch, plan.key), self.walk.order.order(len(plan), self.seed, self.epoch))
        return self._order[1]

    def epoch_batch_ids(self) -> np.ndarray:
        """This rank's plan batch ids for the current epoch, from the deal's start."""
        return shard_batches(self.epoch_order(), self.rank, self.num_replicas, self.start)

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's plan batches of the epoch: from a loaded position, else from the start.

        A loaded position is used up by the first iterator that is advanced (torchdata's
        ``StatefulDataLoader`` creates iterators it never advances); one at the epoch's end
        yields nothing until ``set_epoch`` picks another epoch.
        """
        if self._ended:
            return iter(())
        if not self._resume:
            self.start = self.batches_done = 0
        self._pass += 1
        return self._generate(self._pass)

    def _generate(self, token: int) -> Iterator[list[int]]:
        if token == self._pass:
            self._resume = False
        ids = self.epoch_batch_ids()
        plan = self.plan  # the epoch's, for the whole pass
        ahead = self._prefetcher(ids, self.batches_done)
        done = False
        try:
            for position in range(self.batches_done, ids.shape[0]):
                if token == self._pass:  # an abandoned earlier iterator must not move the state
                    self.batches_done = position + 1
                if ahead is not None:
                    ahead.step(position)
                yield plan.batch(int(ids[position])).tolist()
            done = True
        finally:  # the pass ended, or was left: its planner stops
            if ahead is not None:
                ahead.close()
        if done:  # (not when left: a generator closed at exit finds the module's names gone)
            release_free_heap()  # its freed temporaries, which glibc keeps in pieces over the heap

    def _prefetcher(self, ids: np.ndarray, start: int) -> Prefetcher | None:
        """Read-ahead of this pass's batches from position ``start`` (None when off)."""
        if self.source is None:
            return None
        plan = self.plan
        if self.prefetcher is not None:
            self.prefetcher.close()
        ranges = self._pass_ranges(ids)
        ends = None if ranges is None else self._window_ends(len(ids))
        self.prefetcher = Prefetcher.over_pass(
            self.source,
            self.prefetch,
            ids,
            plan.batch,
            start,
            peek=getattr(plan, "peek", None),  # nothing noted of a batch's use (optional)
            word_ranges=getattr(plan, "word_ranges", None),
            pass_ranges=ranges,
            group_ends=ends,
        )
        return self.prefetcher

    def _pass_ranges(self, ids: np.ndarray) -> PassRanges | None:
        """For a copy read by the plan it is stored by: where the batches at many positions lie, a stretch each
        (None otherwise). With a shuffle window, the batches every rank takes at those steps: a window's runs are
        asked for whole by each rank (the node's cache fetches each block once), not in one rank's pieces."""
        stored = stored_copy(self.plan, self.source)
        if stored is None:
            return None
        window = self.shuffle_window is not None
        dealt = every_rank(self.epoch_order(), self.start, self.num_replicas) if window else own(ids)
        return stretch_ranges(*stored, dealt)

    def _window_ends(self, steps: int) -> np.ndarray | None:
        """The steps of this deal (``steps`` of them) that end a window of the epoch order, the last step included:
        the step holding a window's last position (it may hold the next window's first few too). None: no windows."""
        starts = self.walk.order.window_starts(len(self.plan), self.seed, self.epoch)
        return None if starts is None else window_end_steps(starts, self.start, self.num_replicas, steps)

    def state_dict(self) -> dict[str, Any]:
        """Where this rank stands: restore with :meth:`load_state_dict` (any world size, same plan and seed)."""
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "batches_done": self.batches_done,
            "plan_key": self.plan_key,
            "num_replicas": self.num_replicas,
            "rank": self.rank,
            START_KEY: self.start,
            WINDOW_KEY: self.shuffle_window,
        }

    def _identity(self, plan: Plan) -> dict[str, Any]:
        """What a loaded state must match: this sampler's seed, shuffle window and world, and ``plan``'s key."""
        return {
            "seed": self.seed,
            "plan_key": plan.key,
            "num_replicas": self.num_replicas,
            "rank": self.rank,
            WINDOW_KEY: self.shuffle_window,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the next ``__iter__`` continues epoch ``state['epoch']`` after the batches it records.

        With the saved world size, each rank loads its own state and continues its deal.
        With another world size, every rank may load any rank's state: the rest of the
        epoch order is dealt anew to this world. A state saved at the end of an epoch
        resumes to that finished epoch (``__iter__`` yields nothing, ``set_epoch`` of the
        same epoch keeps it so) until ``set_epoch`` picks another epoch; if ``set_epoch``
        already picked another epoch before the state was loaded (as a training loop
        restarted with ``StatefulDataLoader`` does), that epoch starts afresh.
        """
        plan = self.plans.for_epoch(_state_epoch(state, self.epoch))  # the plan of the saved epoch
        saved = _checked_state(state, self._identity(plan), len(plan))
        epoch, start, done = saved["epoch"], saved[START_KEY], saved["batches_done"]
        if saved["num_replicas"] != self.num_replicas:
            start, done = resume_start(len(plan), start, saved["num_replicas"], done), 0
            logger.info(
                "resuming epoch %d with %d ranks (saved with %d): dealing its order from position %d",
                epoch,
                self.num_replicas,
                saved["num_replicas"],
                start,
            )
        ended = done >= shard_length(len(plan), self.num_replicas, start)
        if ended and self._chosen_epoch not in (None, epoch):
            return  # set_epoch chose another epoch than the saved, finished one: it starts afresh
        self._move_to(epoch, start, done, resume=not ended)
        self._ended = ended

    def _move_to(self, epoch: int, start: int, done: int, resume: bool) -> None:
        self.epoch, self.start, self.batches_done, self._resume = epoch, start, done, resume
        self._ended = False


class TokenBatchSampler(PlanSampler):
    """fairseq's token-budget batches of ``dataset`` (see :class:`PlanSampler` for epochs, ranks and resume).

    The plan (fairseq's order, size filter and ``batch_by_size``) is computed once per
    (dataset content, parameters) and shared as a memory-mapped file in ``cache_dir``
    (default ``<corpus>/.arrowmt-cache``). While a batch is used, the rows of the next
    ``prefetch`` batches are read ahead (:mod:`arrowmt.io._prefetch`; 0 turns it off).
    """

    def __init__(
        self,
        dataset: Split,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        *,
        spec: PlanParams | None = None,
        options: SamplerOptions | None = None,
        **keywords: Any,
    ) -> None:
        """``keywords``: fairseq's batching options by arrowmt's names (``max_sentences``,
        ``required_batch_size_multiple``, ``max_source_positions``, ``max_target_positions``,
        ``skip_invalid_size_inputs``) and the options every sampler shares (:class:`SamplerOptions`: ``seed``,
        ``shuffle``, ``shuffle_window``, ``num_replicas``, ``rank``, ``prefetch``, ``cache_dir``); or the same as
        two values, ``spec=PlanParams(...)`` and ``options=SamplerOptions(...)``."""
        args = sampler_arguments(PlanParams, "TokenBatchSampler", max_tokens, keywords, spec, options)
        manifest = getattr(dataset, "manifest", None)  # a split or a view (a mixture checks each of its sources)
        if manifest is not None:
            refuse_stored_order(manifest, dataset.path, "batch", dataset.split, reads=(ROWS,))
        epoch_plans = getattr(dataset, "epoch_plans", None)  # sampled segmentations: a plan per epoch, in its copy
        if epoch_plans:
            refuse_changing_lengths(args.spec.batch_shapes, dataset)
        plan = epoch_plans(args.spec) if epoch_plans else load_plan(dataset, args.spec, args.options.cache_dir)
        self.spec = args.spec
        self._begin(plan, args.walk, dataset)

    def batch_shapes(self) -> list[tuple[int, int, int]]:
        """The (rows, source length, target length) of every shape this sampler's batches take with
        ``batch_shapes=N`` (at most N; give them to ``FairseqCollater(shapes=...)``, which pads each batch to one)."""
        if self.spec.batch_shapes is None:
            raise InvalidParameterError("batch_shapes: this sampler's batches have no fixed shapes (batch_shapes=None)")
        where = f"{self.dataset!r}"
        return plan_shapes(column_lengths(self.dataset), self.spec, where)  # type: ignore[arg-type]


def _state_epoch(state: dict[str, Any], default: int) -> int:
    """The epoch ``state`` records when it is a valid one, else ``default`` (:func:`_checked_state` says why)."""
    try:
        return _state_integer(state, "epoch", 0, EPOCH_LIMIT, EPOCH_LIMIT_NAME)
    except (KeyError, InvalidParameterError):
        return default


def _checked_state(state: dict[str, Any], current: dict[str, Any], n_batches: int) -> dict[str, int]:
    """The position ``state`` records, as ints; InvalidParameterError naming the first bad key.

    ``seed``, ``plan_key`` and ``shuffle_window`` (None in a state without it) must be this sampler's; with its world
    size, so must ``rank``.
    """
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise InvalidParameterError(f"state_dict: expected keys {list(STATE_KEYS)}, missing {missing}")
    window = state.get(WINDOW_KEY)
    saved = {**state, WINDOW_KEY: None if window is None else _state_integer(state, WINDOW_KEY, 1)}
    for name in (*MATCHED_STATE_KEYS, WINDOW_KEY):
        if saved[name] != current[name]:
            raise InvalidParameterError(
                f"state_dict[{name!r}]: expected {current[name]!r} (this sampler), got {saved[name]!r}; "
                "resume with the same dataset, batching parameters, seed and shuffle_window"
            )
    world = _state_integer(state, "num_replicas", 1)
    rank = _state_integer(state, "rank", 0, world, f"num_replicas={world}")
    if world == current["num_replicas"] and rank != current["rank"]:
        raise InvalidParameterError(
            f"state_dict['rank']: expected {current['rank']} (this sampler), got {rank}; "
            "with the world size it was saved with, each rank loads its own state"
        )
    start = _state_integer({START_KEY: 0, **state}, START_KEY, 0, n_batches + 1)
    return {
        "epoch": _state_integer(state, "epoch", 0, EPOCH_LIMIT, EPOCH_LIMIT_NAME),
        "num_replicas": world,
        START_KEY: start,
        "batches_done": _state_integer(state, "batches_done", 0, shard_length(n_batches, world, start) + 1),
    }


def _state_integer(
    state: dict[str, Any], name: str, low: int, high: int | None = None, high_name: str | None = None
) -> int:
    return check_integer(f"state_dict[{name!r}]", state[name], low, high, high_name=high_name)
