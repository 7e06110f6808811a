"""Plan-driven read-ahead: as batch ``p`` of an epoch is handed out, the pages of the next batches are asked for.

A sampler knows every batch of the epoch before it is used. :class:`Prefetcher` turns that
into I/O: at each position ``p`` it asks the kernel (``MADV_WILLNEED``, see
:mod:`arrowmt.io._advice`) for the exact pages of

- the tokens of batches ``p .. p + depth`` (reading their offsets, as a gather does),
- the offsets of batches ``p + depth + 1 .. p + 2 * depth`` (found without reading; for
  LM blocks, their block table entries), and
- the plan's pages of batches ``p + 2 * depth + 1 .. p + 3 * depth`` (a plan file: its
  batches are read in a shuffled order, a page each),

so that the plan is in memory when the offsets are asked for, the offsets when the tokens
are located, and the tokens when the collater gathers them. Batches are located and asked
for :data:`GROUP` at a time (each stage runs up to ``GROUP - 1`` batches further ahead):
the many small numpy calls of locating rows cost per call, not per row. A request returns
at once: the calls to the kernel are made on a read-ahead thread
(:mod:`arrowmt.io._advisor`) where the system allows, the rows arrive while the earlier
batches are used, and the disk serves many rows of a batch at once instead of one page
fault after another.

When the corpus is in the page cache the requests are wasted work, so the prefetcher asks
its residency gate (:mod:`arrowmt.io._residency`) before it locates anything:
while recent samples found the pages resident it does nothing for the batch (no row is
located), and otherwise it locates one batch and samples whether its pages are resident
(``mincore``, a few pages); at the first page found missing it goes back to asking for
every batch. Read-ahead is only a hint: it never changes a batch, and a read error surfaces
at the read itself.

Torch-free; the samplers own one each (``prefetch=`` the depth, 0 to turn it off).
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from arrowmt._checks import check_integer
from arrowmt._errors import FormatError
from arrowmt._heap import release_free_heap
from arrowmt.io._advice import WordRanges, plan_range_uses, plan_use, plan_uses, will_need
from arrowmt.io._residency import Residency

if TYPE_CHECKING:
    from arrowmt.storage import BlockStore

logger = logging.getLogger(__name__)

DEFAULT_DEPTH = 8
REMOTE_DEPTH = 64  # the least depth for a remote corpus: a range request takes tens of milliseconds
MAX_DEPTH = 1024
PASS_CHUNK = 16  # batches of a pass planned in one computation (arrays small enough to be reused, not kept)
GROUP = 8  # local batches located and asked for at once (per-call costs shared; a remote batch goes alone)
TRIM_EVERY = 4096  # a remote pass hands the freed heap back every this many batches (glibc keeps fragments)


STOP_WAIT_S = 5.0  # at exit, how long to wait for a planning thread to stop


@atexit.register
def _stop_planning() -> None:
    """Stop the planning threads before the interpreter finalizes: a daemon thread still running then is ended
    inside whatever C++ code it is in, which aborts the process ('terminate called without an active exception')."""
    prefetchers = list(Prefetcher.planning)
    for prefetcher in prefetchers:
        prefetcher.close()
    for prefetcher in prefetchers:
        if prefetcher.planner is not None:
            prefetcher.planner.join(STOP_WAIT_S)


class RowSource(Protocol):
    """What a prefetcher reads ahead from: where rows (or blocks) lie in memory-mapped files."""

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]: ...


BatchAt = Callable[[int], "np.ndarray | None"]  # the row ids of the batch at an epoch position, None past the end
# The word ranges of the batches at epoch positions first .. first + count - 1 (fewer at the epoch's end), each range
# with its batch's position: a pass planned at once (None: the source cannot say without a batch at a time).
PassRanges = Callable[[int, int], "list[tuple[WordRanges, np.ndarray]] | None"]
Dealt = Callable[[int, int], "tuple[np.ndarray, np.ndarray]"]  # (first step, count) -> (plan batch ids, their steps)
# The word ranges of the plan holding the batches at epoch positions first .. first + count - 1 (read ahead of them).
PlanRanges = Callable[[int, int], "list[WordRanges]"]
PASS_PIECE = 1024  # batches of a pass planned at once by PassRanges (bounds the arrays of one computation: ~0.5 MB)


def _rows_at(ids: np.ndarray, batch: Callable[[int], np.ndarray]) -> BatchAt:
    """The rows of the batch at each position of a pass over ``ids`` (None past the end, or where a corrupt plan
    chunk ends the read-ahead)."""

    def rows_at(q: int) -> np.ndarray | None:
        if q >= ids.shape[0]:
            return None
        try:
            return batch(int(ids[q]))
        except FormatError:
            return None

    return rows_at


def _ranges_at(ids: np.ndarray, word_ranges: Callable[[np.ndarray], list[WordRanges]]) -> PlanRanges:
    """Where the plan holds the batches at positions ``first .. first + count - 1`` of a pass over ``ids``."""

    def plan_ranges(first: int, count: int) -> list[WordRanges]:
        try:
            return word_ranges(ids[first : first + count])
        except FormatError:  # a corrupt chunk of offsets: handing out that batch raises
            return []

    return plan_ranges


def check_depth(value: object) -> int:
    """``prefetch``: how many batches ahead to read (0: off)."""
    return check_integer("prefetch", value, 0, MAX_DEPTH)


def prefetch_source(dataset: object, depth: int) -> RowSource | None:
    """``dataset`` if read-ahead applies to it (depth > 0 and it can name its rows' ranges), else None."""
    return dataset if depth and callable(getattr(dataset, "word_ranges", None)) else None  # type: ignore[return-value]


class Prefetcher:
    """Read-ahead for one pass over an epoch's batches (see the module); ``step(p)`` as batch ``p`` is handed out."""

    planning: ClassVar[weakref.WeakSet[Prefetcher]] = weakref.WeakSet()  # those whose pass a thread is planning

    def __init__(
        self,
        source: RowSource,
        depth: int,
        batch_at: BatchAt,
        start: int = 0,
        plan_at: BatchAt | None = None,
        pass_ranges: PassRanges | None = None,
        plan_ranges: PlanRanges | None = None,
        group_ends: np.ndarray | None = None,
    ) -> None:
        """``batch_at``: the batch at an epoch position; ``plan_at``: the same, for planning a remote pass ahead
        (nothing noted of the batch's use; default ``batch_at``); ``pass_ranges``: where many batches' rows lie at
        once (a copy in plan order: a stretch a batch), which plans a remote pass whole before the first batch;
        ``plan_ranges``: where a plan file holds the batches at some positions (read ahead of their offsets);
        ``group_ends``: the last positions of groups of remote batches asked for at once by their stretches (a shuffle
        window's, sorted, the pass's last position included: a window's runs merge into long range requests; a group
        at most :data:`MAX_DEPTH` batches, asked for once the read-ahead's depth reaches its first; None: one batch
        at a time)."""
        self.source = source
        self.plan_ranges = plan_ranges
        self.plans_done = start - 1  # the last position whose plan pages were asked for (or skipped)
        self.depth = check_depth(depth)
        self.batch_at = batch_at
        self.plan_at = batch_at if plan_at is None else plan_at
        self.pass_ranges = pass_ranges
        self.group_ends = group_ends
        self.values_done = start - 1  # the last position whose tokens were asked for (or skipped)
        self.offsets_done = start - 1  # the last position whose offsets were asked for (or skipped)
        self.streak = 0  # batches of this pass found resident in a row
        self.pages = 0  # pages asked for so far
        self.position = start  # the batch handed out now
        self.skipped = False  # batches were skipped since the last request (the pages were found resident lately)
        self.gate = Residency()  # this pass's own: a sample of the rows it asked for itself says nothing of the rest
        self.closed = False
        self.planner: threading.Thread | None = None  # plans the rest of a remote pass
        self.remote = False  # every range is read through a remote cache (set by _plan_pass)
        self.clocks = self._plan_pass(start) if self.depth else []  # the remote caches read through

    @classmethod
    def over_pass(cls, source: RowSource, depth: int, ids: np.ndarray, batch: Callable[[int], np.ndarray],
                  start: int = 0, *, peek: Callable[[int], np.ndarray] | None = None,
                  word_ranges: Callable[[np.ndarray], list[WordRanges]] | None = None,
                  pass_ranges: PassRanges | None = None,
                  group_ends: np.ndarray | None = None) -> Prefetcher:  # fmt: skip
        """Read-ahead of a pass over the batches ``ids`` (position ``p`` holds batch ``ids[p]``, whose rows are
        ``batch(id)``) from position ``start``: ``peek`` gives a batch's rows for planning without noting a use
        (default ``batch``); ``word_ranges`` where a plan file holds given batches (None: nothing to read ahead of a
        plan held in memory); ``pass_ranges`` and ``group_ends`` as :class:`Prefetcher` takes them. A batch whose
        plan chunk is corrupt ends the read-ahead there: handing it out raises."""
        plan_ranges = None if word_ranges is None else _ranges_at(ids, word_ranges)
        return cls(source, depth, _rows_at(ids, batch), start, plan_at=_rows_at(ids, peek or batch),
                   pass_ranges=pass_ranges, plan_ranges=plan_ranges, group_ends=group_ends)  # fmt: skip

    def _plan_pass(self, start: int) -> list[BlockStore]:
        """For a corpus read through a remote cache: tell the cache the first position of this pass that needs each
        block, so that it frees blocks needed later first (across epochs, it keeps the cached blocks this pass
        needs), and read further ahead (:data:`REMOTE_DEPTH`). With :attr:`pass_ranges` (a copy in plan order) the
        whole pass is planned now; otherwise the first :data:`PASS_CHUNK` batches are, and the rest of the pass by a
        thread, chunk after chunk in the pass's order (a 12.6M-pair epoch is 88k batches: seconds of work that the
        first batch need not wait for; every use not yet planned is later than every use planned, but blocks whose
        use is not yet planned may be freed meanwhile). Nothing is read locally.
        The caches, whose clocks :meth:`step` moves (none: the corpus is local)."""
        rows = self.plan_at(start)
        ranges = [] if rows is None else self.source.word_ranges(rows, True)
        clocks = plan_use(ranges, 0)
        if not clocks:
            return []
        self.remote = all(part.remote is not None for part in ranges)
        self.depth = max(self.depth, REMOTE_DEPTH)
        if self._plan_ranges(start + 1):
            return clocks
        rest = self._plan_chunk(start + 1)
        if rest is not None:
            self.planner = threading.Thread(target=self._plan_rest, args=(rest,), name="arrowmt-pass-plan", daemon=True)
            Prefetcher.planning.add(self)
            self.planner.start()
        return clocks

    def _plan_ranges(self, first: int) -> bool:
        """Plan the pass from ``first`` on with :attr:`pass_ranges`, :data:`PASS_PIECE` batches at a time (a 12.6M-pair
        epoch in well under a second, so every use is known before the first eviction); False when it cannot."""
        if self.pass_ranges is None:
            return False
        while (parts := self.pass_ranges(first, PASS_PIECE)) is not None:
            plan_range_uses((part, positions - self.position) for part, positions in parts)
            last = max((int(positions[-1]) for _, positions in parts if positions.size), default=first - 1)
            if last + 1 - first < PASS_PIECE:
                release_free_heap()  # the pieces' arrays are freed, but glibc keeps large freed heap unless asked
                return True
            first = last + 1
        return False

    def _plan_chunk(self, first: int) -> int | None:
        """Tell the caches when the batches at ``first .. first + PASS_CHUNK - 1`` are needed; the next position to
        plan (None: the pass is planned, or the prefetcher closed)."""
        chunk, q = [], first
        while q < first + PASS_CHUNK and not self.closed and (rows := self.plan_at(q)) is not None:
            chunk.append((q, self.source.word_ranges(rows, True)))
            q += 1
        if self.closed:  # another pass owns the clocks now
            return None
        now = self.position  # the caches' clocks have moved once per batch handed out since the pass began
        plan_uses([(p - now, ranges) for p, ranges in chunk if p >= now])
        return q if len(chunk) == PASS_CHUNK else None

    def _plan_rest(self, position: int | None) -> None:
        try:
            while position is not None:
                position = self._plan_chunk(position)
        except Exception as exc:  # a hint: the read that needs what failed here raises itself
            logger.debug("arrowmt: planning the rest of the pass stopped: %s", exc)
        release_free_heap()  # this thread's arena kept the chunks' freed arrays

    def close(self) -> None:
        """Stop planning this pass (another pass begins, or this one was left)."""
        self.closed = True
        type(self).planning.discard(self)  # through the instance: the module's names may be gone at exit

    def step(self, position: int) -> None:
        """Batch ``position`` is being handed out: ask for what the next batches need."""
        if position != self.position:  # the caches' clocks move: blocks used before are the first they may free
            for clock in self.clocks:
                clock.tick()
            if self.clocks and position % TRIM_EVERY == 0:
                release_free_heap()  # the fetch and read threads' freed buffers, left in pieces over the heap
        self.position = position
        if self.remote:
            if not self._ask_stretches(position):
                self._ask_values(position)  # a remote cache keeps the offsets from the open on
            return
        if not self.gate.due():  # found resident lately: nothing located, nothing asked for this batch
            self.skipped = True
            return
        if self.skipped:  # the batches skipped meanwhile count as asked for: the next sample is the next batch due
            self.skipped = False
            self._skip_to(position + self.depth - 1)
        if self._ask_values(position) and not self.streak:  # while the pages are found resident, so are the offsets'
            self._ask_offsets(position)
            self._ask_plans(position)

    def _skip_to(self, last: int) -> None:
        """Take the batches up to ``last`` as asked for (their pages were found resident lately)."""
        self.values_done = max(self.values_done, last)
        self.offsets_done = max(self.offsets_done, last + self.depth)
        self.plans_done = max(self.plans_done, last + 2 * self.depth)

    def _ask_values(self, position: int) -> bool:
        """Ask for the tokens of the batches up to ``position + depth``, :data:`GROUP` at a time; False past the epoch's
        end (nothing more to ask). A batch goes alone when remote (asked with its own distance) or while the pages
        are found resident (a sample then locates one batch, not a group: in the page cache, as often as before)."""
        group = 1 if self.remote or self.streak else GROUP
        while self.values_done < position + self.depth:
            q = self.values_done + 1
            rows = self._rows(q, group)
            if not rows:
                self.values_done = self.offsets_done = self.plans_done = q + 3 * self.depth
                return False
            self._values(q, rows)
        return True

    def _ask_offsets(self, position: int) -> None:
        """Ask for the offsets of the batches up to ``position + 2 * depth`` whose tokens were not asked for yet."""
        while self.offsets_done < position + 2 * self.depth:
            q = max(self.offsets_done, self.values_done) + 1
            rows = self._rows(q, GROUP)
            if rows:
                self.pages += will_need(self.source.word_ranges(np.concatenate(rows), False), later=True)
            self.offsets_done = q + GROUP - 1

    def _ask_plans(self, position: int) -> None:
        """Ask for the plan's pages of the batches up to ``position + 3 * depth`` whose offsets were not asked for."""
        while self.plan_ranges is not None and self.plans_done < position + 3 * self.depth:
            q = max(self.plans_done, self.offsets_done) + 1
            self.pages += will_need(self.plan_ranges(q, GROUP), later=True)
            self.plans_done = q + GROUP - 1

    def _rows(self, first: int, count: int) -> list[np.ndarray]:
        """The rows of the batches at ``first .. first + count - 1``, fewer at the epoch's end."""
        found = []
        for q in range(first, first + count):
            rows = self.batch_at(q)
            if rows is None:
                break
            found.append(rows)
        return found

    def _ask_stretches(self, position: int) -> bool:
        """A copy read by its stored plan through a remote cache: ask for the next batches by their stretches
        (a group at a time, see :attr:`group_ends`; a few ranges instead of one per row; the cache skips what it holds,
        and keeps the offsets from the open on); False when the source cannot say where its batches lie."""
        while self.values_done < position + self.depth:
            q = self.values_done + 1
            count = self._group(q)
            ranges = self._stretch_ranges(q, count)
            if ranges is None:
                return False
            if ranges:  # a group's uses are planned with the pass: fetched for its last batch, nothing planned anew
                self.pages += will_need(ranges, q + count - 1 - position, planned=self.group_ends is not None)
            self.values_done = q + count - 1
        return True

    def _group(self, q: int) -> int:
        """How many batches from position ``q`` are asked for together: to the end of ``q``'s group."""
        if self.group_ends is None:
            return 1
        at = int(np.searchsorted(self.group_ends, q))
        end = int(self.group_ends[at]) if at < self.group_ends.shape[0] else q
        return min(end - q + 1, MAX_DEPTH)

    def _stretch_ranges(self, q: int, count: int) -> list[WordRanges] | None:
        """The ranges of the ``count`` batches from ``q`` (empty past the pass's end; None without
        :attr:`pass_ranges`)."""
        parts = None if self.pass_ranges is None else self.pass_ranges(q, count)
        return None if parts is None else [part for part, positions in parts if positions.size]

    def _values(self, q: int, batches: list[np.ndarray]) -> None:
        """Ask for the tokens of the batches from position ``q`` on (one location and one request for them all),
        unless a sample finds their pages resident (local maps)."""
        ranges = self.source.word_ranges(batches[0] if len(batches) == 1 else np.concatenate(batches), True)
        if not self.remote and self.gate.resident(ranges):
            self.streak += 1
        else:
            self.streak = 0
            self.pages += will_need(ranges, q - self.position, later=True)
        self.values_done = q + len(batches) - 1
