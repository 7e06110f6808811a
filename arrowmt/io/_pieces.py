"""Integrity on first use: pieces of a map with recorded CRC-32s, each checked once, before its bytes are trusted.

A reader that records checksums per piece of its bytes (a split file's offsets per 1,024 rows, a side file's body
per 4 KiB chunk) asks :class:`CrcPieces` to check the pieces a read is about to use. Each piece is checked the
first time it is used, then remembered in an "already checked" bitmap:

* while every piece is checked (:attr:`CrcPieces.all_checked`), a read costs one attribute test;
* otherwise one numpy gather of the bitmap finds the pieces not checked yet, and only those are read and
  checked (one ``zlib.crc32`` call each over a view of the map, compared with the recorded values at once).

The bitmap lives in this process only. A forked DataLoader worker starts with what its parent checked; another
process (a rank, a spawned worker) checks for itself: a process trusts no check it did not make, so a stale or
forged bitmap in shared memory cannot vouch for bytes. Each process pays the checksum of the bytes it uses once
(zlib reads ~2.5 GB/s here: 12.6M pairs' offsets, 100 MB, in ~50 ms) and nothing after
(docs/reliability.md). A piece found changed raises what ``failure`` makes of it; pieces checked meanwhile by
another thread are only checked twice, and a piece is marked checked only after its check passed.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from arrowmt._arrays import sorted_unique

Bounds = Callable[[np.ndarray], "tuple[np.ndarray, np.ndarray]"]
"""``bounds(pieces)``: (first byte, end byte) of each piece in the map's bytes (int64 arrays)."""
Failure = Callable[[int, int, int], Exception]
"""``failure(piece, expected CRC, found CRC)``: the error to raise for a piece whose bytes changed."""
Ahead = Callable[[np.ndarray, np.ndarray], None]
"""``ahead(first bytes, end bytes)``: a hint that those byte ranges are read next (before several pieces)."""
GROUP = 256  # pieces checked between two read-ahead requests (1 MiB of 4 KiB chunks: a request for many MiB of a
# map advised for random access was measured 15x slower than the same bytes asked for a window at a time)


class CrcPieces:
    """Pieces of the bytes ``data`` (a uint8 view of a map) with recorded CRC-32s ``expected``, checked on first use.

    ``checked[k]`` is set once piece ``k`` was found sound; pieces with nothing recorded may be marked checked
    from the start (``checked``). ``ahead`` (optional) is told the bytes of several pieces about to be checked, so
    that a map advised for random access reads them at once instead of a page fault at a time.

    ``resident`` (optional) samples whether the pieces' bytes are in the page cache: at the first check, a set of
    at least ``sweep_min`` pieces found resident is checked whole (:meth:`sweep`), in one pass. Reads from all over
    a large file (a rank's batches, a mixture's rows) would otherwise check a piece or two at nearly every read for a
    long while; cold, each read checks only what it reads, as the lazy check is for.
    """

    def __init__(
        self,
        data: np.ndarray,
        expected: np.ndarray,
        bounds: Bounds,
        failure: Failure,
        ahead: Ahead | None = None,
        checked: np.ndarray | None = None,
        resident: Callable[[], bool] | None = None,
        sweep_min: int = 0,
    ) -> None:
        self.data = data
        self.expected = np.asarray(expected, dtype=np.uint32)
        self.bounds = bounds
        self.failure = failure
        self.ahead = ahead
        self.checked = np.zeros(self.expected.shape[0], dtype=bool) if checked is None else checked
        self.remaining = int(np.count_nonzero(~self.checked))  # pieces left to check (at least; recounted at 0)
        self.all_checked = not self.remaining
        self.resident = resident
        self.sweep_min = sweep_min
        self.swept = False  # the first check happened (a large set found resident was then checked whole)

    def sweep_if_resident(self) -> bool:
        """At the first check only: when at least ``sweep_min`` pieces are found in the page cache, check every piece
        now (:meth:`sweep`: a piece found changed stays unchecked, so only the reads that reach it fail); whether this
        call swept."""
        if self.swept:
            return False
        self.swept = True
        if self.resident is None or len(self) < self.sweep_min or not self.resident():
            return False
        self.sweep()
        return True

    def __len__(self) -> int:
        return int(self.expected.shape[0])

    def ensure(self, pieces: np.ndarray) -> None:
        """Check ``pieces`` (int64 piece numbers, any order, repeats allowed) not checked yet."""
        if self.all_checked:
            return
        todo = pieces[~self.checked[pieces]]
        if todo.size == 1:
            self.check_one(int(todo[0]))
        elif todo.size:
            self.check(sorted_unique(todo))

    def ensure_range(self, first: int, last: int) -> None:
        """Check pieces ``first..last`` (inclusive) not checked yet."""
        if self.all_checked:
            return
        if first == last:  # a read inside one piece: no array work
            if not self.checked[first]:
                self.check_one(first)
            return
        todo = np.flatnonzero(~self.checked[first : last + 1])
        if todo.size:
            self.check(todo + first)

    def ensure_all(self) -> None:
        """Check every piece not checked yet."""
        if not self.all_checked:
            self.check(np.flatnonzero(~self.checked))

    def check(self, pieces: np.ndarray) -> None:
        """Check ``pieces`` (increasing, unique) against their recorded CRC-32s; ``failure`` of the first that differs
        (those before it stay checked)."""
        if self.sweep_if_resident():
            pieces = pieces[~self.checked[pieces]]  # left: the pieces the sweep found changed
            if not pieces.size:
                return
        for group, found in self._crcs(pieces):
            bad = np.flatnonzero(found != self.expected[group])
            sound = group if not bad.size else group[: int(bad[0])]
            self._mark(sound, sound.shape[0])
            if bad.size:
                k = int(bad[0])
                raise self.failure(int(group[k]), int(self.expected[group[k]]), int(found[k]))

    def sweep(self) -> np.ndarray:
        """Check every piece not checked yet, in one pass that raises nothing: the pieces found changed stay unchecked
        (a read that uses one raises then, as it would have); returns them."""
        changed = []
        for group, found in self._crcs(np.flatnonzero(~self.checked)):
            sound = found == self.expected[group]
            self._mark(group[sound], int(np.count_nonzero(sound)))
            changed.append(group[~sound])
        return np.concatenate(changed) if changed else np.zeros(0, dtype=np.int64)

    def _crcs(self, pieces: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(pieces, CRC-32s found) :data:`GROUP` at a time, the bytes of the next group asked for ahead of each."""
        starts, ends = self.bounds(pieces)
        if self.ahead is not None and pieces.shape[0] > 1:
            self.ahead(starts[:GROUP], ends[:GROUP])
        for first in range(0, pieces.shape[0], GROUP):
            last = first + GROUP
            if self.ahead is not None and last < pieces.shape[0]:
                self.ahead(starts[last : last + GROUP], ends[last : last + GROUP])
            yield pieces[first:last], self.crcs(starts[first:last], ends[first:last])

    def check_one(self, k: int) -> None:
        """Check piece ``k`` (no array work: the common first use, one piece a read)."""
        if self.sweep_if_resident() and self.checked[k]:
            return
        start, end = self.piece_bytes(k)
        found, want = self.crc(start, end), int(self.expected[k])
        if found != want:
            raise self.failure(k, want, found)
        self._mark(k, 1)

    def _mark(self, pieces: np.ndarray | int, count: int) -> None:
        """Note ``pieces`` (``count`` of them) as found sound. :attr:`all_checked` is set only by a count of the
        bitmap itself: threads checking the same piece at once count it twice, and only repeat work."""
        self.checked[pieces] = True
        self.remaining -= count
        if self.remaining <= 0:
            self.remaining = int(np.count_nonzero(~self.checked))
            self.all_checked = not self.remaining

    def piece_bytes(self, k: int) -> tuple[int, int]:
        """(first byte, end byte) of piece ``k``."""
        starts, ends = self.bounds(np.array([k], dtype=np.int64))
        return int(starts[0]), int(ends[0])

    def crc(self, start: int, end: int) -> int:
        """The CRC-32 of bytes ``[start, end)`` of :attr:`data`."""
        return zlib.crc32(self.data[start:end])

    def crcs(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The CRC-32 of each byte range ``[starts[i], ends[i])`` of :attr:`data`."""
        return byte_crcs(self.data, starts, ends)


def byte_crcs(data: np.ndarray | memoryview, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The CRC-32 (zlib) of each byte range ``[starts[i], ends[i])`` of ``data`` (uint32; one call per range)."""
    return np.fromiter(
        (zlib.crc32(data[s:e]) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)),
        dtype=np.uint32,
        count=starts.shape[0],
    )


class ManyPieces:
    """The pieces of several sets of :class:`CrcPieces`, numbered in one sequence (set after set).

    A set is the checks of one file that share its piece numbers (a split file's columns, a view's row list). For
    readers that locate rows of many files at once (a mixture's gather): ``ensure(numbers)`` checks the pieces
    behind those numbers in every check of their set, each once, after one numpy test of an "already checked" memo
    that says no more than the sets' own bitmaps (so a batch whose pieces were all checked costs that test alone).
    """

    def __init__(self, sets: Sequence[Sequence[CrcPieces]]) -> None:
        self.sets = [list(s) for s in sets]
        counts = np.array([len(s[0]) if s else 0 for s in self.sets], dtype=np.int64)
        self.first = np.concatenate(([0], np.cumsum(counts)))  # set k's pieces start at number first[k]
        memo = [np.logical_and.reduce([c.checked for c in s]) if s else np.zeros(0, dtype=bool) for s in self.sets]
        self.checked = np.concatenate(memo) if memo else np.zeros(0, dtype=bool)
        self.all_checked = bool(self.checked.all())

    def ensure(self, numbers: np.ndarray) -> None:
        """Check the pieces ``numbers`` (any order, repeats allowed), in every check of their set, those not checked
        yet."""
        if self.all_checked:
            return
        todo = numbers[~self.checked[numbers]]
        if not todo.size:
            return
        todo = sorted_unique(todo)
        sets = np.searchsorted(self.first, todo, side="right") - 1
        for k in sorted_unique(sets).tolist():
            local = todo[sets == k] - self.first[k]
            for checks in self.sets[k]:
                checks.ensure(local)
            if all(checks.all_checked for checks in self.sets[k]):  # swept whole (or done): no need to ask again
                self.checked[self.first[k] : self.first[k + 1]] = True
        self.checked[todo] = True
        self.all_checked = bool(self.checked.all())
