"""What the kernel reads from a memory-mapped file, and when: access advice and exact read-ahead.

**Access advice** (``madvise``) for a whole map:

- ``"random"`` (the default for corpus maps): a page fault reads just its page. Batches
  read short rows from all over a file; the kernel's default read-around (up to
  ``read_ahead_kb``, 128 KiB to 8 MiB) would read 30 to 2,000 times the bytes a
  row needs, and evict what the next batches need, as soon as the file does not fit
  in the page cache;
- ``"sequential"``: aggressive read-ahead, for passes over whole files (verify,
  export, info, conversion);
- ``"normal"``: the kernel's default.

**Read-ahead** (``MADV_WILLNEED``) of exact byte ranges: :func:`will_need` asks the
kernel to start reading the pages that hold given word ranges, merged into runs of
adjacent pages, and returns at once; a later access finds the pages in the page cache
(or waits only for their I/O already in flight). The advice is only a hint: a failed
or refused read-ahead changes nothing, and a read error surfaces at the access itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._errors import InvalidParameterError
from arrowmt.io._advisor import advise_later

if TYPE_CHECKING:
    from arrowmt.storage import BlockFile, BlockStore

PAGE = mmap.PAGESIZE
WORD = 4  # bytes of an int32 token or offset
ACCESS_MODES = ("random", "sequential", "normal")
DEFAULT_ACCESS = "random"
_ADVICE = {
    "random": getattr(mmap, "MADV_RANDOM", None),
    "sequential": getattr(mmap, "MADV_SEQUENTIAL", None),
    "normal": getattr(mmap, "MADV_NORMAL", None),
}
_WILLNEED = getattr(mmap, "MADV_WILLNEED", None)


def check_access(value: object, name: str = "access") -> str:
    """``value`` if it is one of :data:`ACCESS_MODES`, else InvalidParameterError naming ``name``."""
    if not isinstance(value, str) or value not in ACCESS_MODES:
        raise InvalidParameterError(f"{name}: expected one of {list(ACCESS_MODES)}, got {value!r}")
    return value


def advise(mapped: mmap.mmap, access: str) -> None:
    """Apply ``access`` advice to the whole of ``mapped`` (a no-op where the platform lacks it)."""
    option = _ADVICE[check_access(access)]
    if option is None or len(mapped) == 0:
        return
    with contextlib.suppress(OSError):  # advice is a hint; a kernel that refuses it reads as before
        mapped.madvise(option)


@dataclass(frozen=True)
class WordRanges:
    """Word ranges ``[starts[i], starts[i] + lengths[i])`` of the int32 view of one map."""

    mapped: mmap.mmap
    address: int  # of the map's first byte in this process
    starts: np.ndarray
    lengths: np.ndarray
    remote: BlockFile | None = None  # the cache of a remote file: read-ahead fetches its blocks

    def byte_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``[start, end)`` bytes of each range."""
        first = np.asarray(self.starts, dtype=np.int64) * WORD
        return first, first + np.asarray(self.lengths, dtype=np.int64) * WORD


def page_runs(first_byte: np.ndarray, end_byte: np.ndarray, page: int = PAGE) -> tuple[np.ndarray, np.ndarray]:
    """The pages holding byte ranges ``[first_byte[i], end_byte[i])``, merged into runs of adjacent pages.

    Returns (first page of each run, pages in the run), runs in increasing order.
    Empty ranges hold no page.
    """
    first_byte = np.asarray(first_byte, dtype=np.int64)
    end_byte = np.asarray(end_byte, dtype=np.int64)
    keep = end_byte > first_byte
    first = first_byte[keep] // page
    last = (end_byte[keep] - 1) // page
    if first.size == 0:
        none = np.zeros(0, dtype=np.int64)
        return none, none
    order = np.argsort(first, kind="stable")
    first, last = first[order], np.maximum.accumulate(last[order])
    opens = np.ones(first.shape[0], dtype=bool)
    opens[1:] = first[1:] > last[:-1] + 1  # a gap of at least one page before this range
    begin = np.flatnonzero(opens)
    run_last = last[np.append(begin[1:] - 1, first.shape[0] - 1)]
    return first[begin], run_last - first[begin] + 1


def word_page_runs(ranges: WordRanges) -> tuple[np.ndarray, np.ndarray]:
    """:func:`page_runs` of word ranges, clipped to the map."""
    first = np.asarray(ranges.starts, dtype=np.int64) * WORD
    end = np.minimum(first + np.asarray(ranges.lengths, dtype=np.int64) * WORD, len(ranges.mapped))
    return page_runs(first, end)


def spread(count: int, picks: int) -> np.ndarray:
    """At most ``picks`` of the indices ``0 .. count - 1``, evenly spread, the first and the last among them."""
    if count <= picks:
        return np.arange(count, dtype=np.int64)
    return np.arange(picks, dtype=np.int64) * (count - 1) // max(picks - 1, 1)


def sample_pages(ranges: WordRanges, count: int) -> np.ndarray:
    """The pages holding the first word of at most ``count`` of the non-empty ranges, evenly spread over them (a
    residency sample that needs no sort or merge of the ranges' pages)."""
    filled = np.flatnonzero(np.asarray(ranges.lengths) > 0)
    chosen = filled[spread(filled.shape[0], count)]
    return np.asarray(ranges.starts, dtype=np.int64)[chosen] * WORD // PAGE


def will_need(
    ranges: Iterable[WordRanges], ahead: int | None = None, later: bool = False, planned: bool = False
) -> int:
    """Start reading the pages of every range (``MADV_WILLNEED``), without waiting; returns the pages asked for.

    ``later``: the pages are for batches still to come; the calls are made on this process's
    read-ahead thread (:mod:`arrowmt.io._advisor`) instead of this one.

    Ranges of a remote file's cache are fetched in the background instead (``ahead``: in how
    many batches they are needed; the cache keeps blocks needed sooner in preference to those
    needed later; ``planned``: the cache knows their uses already, ``ahead`` is the last).

    Ranges of several maps (a mixture's corpora, both columns) are merged into page runs of
    this process's address space at once (:func:`will_need_many`) instead of map by map.
    """
    asked = 0
    ranges = list(ranges)
    for part in ranges:
        if part.remote is not None:
            part.remote.prefetch(*part.byte_bounds(), ahead, planned)
    ranges = [part for part in ranges if part.remote is None]
    if _WILLNEED is None or not ranges:
        return asked
    if (later or len(ranges) > 1) and _libc_madvise() is not None:
        return will_need_many(ranges, later)
    for part in ranges:
        first, count = word_page_runs(part)
        size = len(part.mapped)
        for page, pages in zip((first * PAGE).tolist(), (count * PAGE).tolist(), strict=True):
            if page >= size:
                continue
            try:
                part.mapped.madvise(_WILLNEED, page, pages)
            except OSError:
                return asked  # a hint the kernel refuses: the accesses read on demand
        asked += int(count.sum())
    return asked


def plan_use(ranges: Iterable[WordRanges], ahead: int) -> list[BlockStore]:
    """Tell the caches of remote files among ``ranges`` that they are needed ``ahead`` batches from now (nothing is
    fetched: a cache keeps blocks needed sooner); those caches, each once (none: no range is remote)."""
    return plan_range_uses((part, np.full(len(part.starts), ahead, dtype=np.int64)) for part in ranges)


def plan_uses(batches: Iterable[tuple[int, list[WordRanges]]]) -> None:
    """:func:`plan_use` of many batches, ``(ahead, ranges)`` each, in one computation per remote file."""
    found: dict[BlockFile, tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]] = {}
    for ahead, ranges in batches:
        for part in ranges:
            if part.remote is not None:
                firsts, ends, aheads = found.setdefault(part.remote, ([], [], []))
                first, end = part.byte_bounds()
                firsts.append(first)
                ends.append(end)
                aheads.append(np.full(first.shape, ahead, dtype=np.int64))
    for remote, (firsts, ends, aheads) in found.items():
        remote.plan_uses(np.concatenate(firsts), np.concatenate(ends), np.concatenate(aheads))


def plan_range_uses(parts: Iterable[tuple[WordRanges, np.ndarray]]) -> list[BlockStore]:
    """:func:`plan_use` with a step per range: ``(ranges, aheads)``, range ``i`` needed ``aheads[i]`` batches from
    now; the caches of the remote ones, each once."""
    stores: dict[int, BlockStore] = {}
    for part, aheads in parts:
        if part.remote is not None:
            part.remote.plan_uses(*part.byte_bounds(), aheads)
            stores.setdefault(id(part.remote.store), part.remote.store)
    return list(stores.values())


def will_need_many(ranges: list[WordRanges], later: bool = False) -> int:
    """:func:`will_need` of ranges in several maps: one vectorized merge of their absolute page runs, then one
    ``madvise`` per run (maps are page-aligned and never overlap; a run over two adjacent maps is advised as is),
    here or (``later``) on the read-ahead thread."""
    firsts, ends = [], []
    for part in ranges:
        first = part.address + np.asarray(part.starts, dtype=np.int64) * WORD
        end = first + np.asarray(part.lengths, dtype=np.int64) * WORD
        firsts.append(first)
        ends.append(np.minimum(end, part.address + len(part.mapped)))
    first_page, count = page_runs(np.concatenate(firsts), np.concatenate(ends))
    madvise = _libc_madvise()
    assert madvise is not None and _WILLNEED is not None
    if later and (taken := advise_later(first_page * PAGE, count * PAGE, _WILLNEED)) is not None:
        return int(count.sum()) if taken else 0
    asked = 0
    for page, pages in zip(first_page.tolist(), count.tolist(), strict=True):
        if madvise(page * PAGE, pages * PAGE, _WILLNEED) != 0:
            break  # a hint the kernel refuses: the accesses read on demand
        asked += pages
    return asked


_LIBC = None


def _libc() -> ctypes.CDLL | None:
    """The C library with ``mincore`` and ``madvise`` declared (None where absent)."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(None, use_errno=True)
            _LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
            _LIBC.mincore.restype = ctypes.c_int
            _LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _LIBC.madvise.restype = ctypes.c_int
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC or None


def _mincore() -> ctypes._CFuncPtr | None:
    libc = _libc()
    return libc.mincore if libc else None


def _libc_madvise() -> ctypes._CFuncPtr | None:
    libc = _libc()
    return libc.madvise if libc else None


def resident_pages(ranges: WordRanges, pages: np.ndarray) -> int | None:
    """How many of ``pages`` (page numbers of the map of ``ranges``), in order, are in the page cache before the first
    that is not (``len(pages)``: all are); None where unknown."""
    if ranges.remote is not None:
        return pages.shape[0] if ranges.remote.resident(*ranges.byte_bounds()) else 0
    mincore = _mincore()
    if mincore is None:
        return None
    flag = ctypes.c_ubyte()
    found = 0
    limit = len(ranges.mapped)
    for page in np.asarray(pages, dtype=np.int64).tolist():
        if page * PAGE >= limit:
            continue
        if mincore(ranges.address + page * PAGE, PAGE, ctypes.byref(flag)) != 0:
            return None
        if not flag.value & 1:
            return found  # the first page missing: the rest is not asked
        found += 1
    return found
