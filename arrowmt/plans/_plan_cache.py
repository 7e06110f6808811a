"""A batch plan (flat sample indices + batch offsets) computed once and shared through a mapped file.

A plan file is a side file (:mod:`arrowmt.files._sidefile`: header, chunk table,
per-chunk CRC-32s, atomic write, build-once lock, read-only map). Layout (little-endian)::

    header (128 bytes): magic b"ARROWMT-PLAN\\0\\0\\0\\0", u32 version (3), u32 index itemsize (4 or 8),
                        32-byte SHA-256 of the key, u64 dataset rows, u64 index count,
                        u64 batch count, u64 samples dropped, u32 CRC-32 of the header fields and
                        the chunk table, zero padding
    chunk table:        u64 body bytes, u32 chunk bytes, u32 zero, a CRC-32 per chunk of the body
                        (arrowmt.files._chunks), zero-padded to a multiple of 8 bytes
    indices:            int32 or int64 [index count], zero-padded to a multiple of 8 bytes
    offsets:            int64 [batch count + 1]

Opening a plan reads and checks its header and chunk table only (49 KB for 12.6M int32
indices: a CRC-32 per page): the header's fields against the key and the dataset's rows, the sizes, the
header's CRC-32. :meth:`BatchPlan.batch` reads two offsets and one batch's indices, and
checks the CRC-32 of each 4 KiB chunk they lie in the first time it is used, then that
``0 <= start <= end <= index count`` and that the indices lie in ``[0, rows)``. So a rank
that walks its share of the batches reads and checks only the chunks those batches touch,
and no batch is served from bytes that changed on disk, even to values still in range
(swapped indices, edited offsets). ``indices``, ``offsets`` and :meth:`BatchPlan.check_all`
read and check the whole plan (every chunk, offsets non-decreasing from 0 to the index
count, every index in range). A checksum catches accidental changes (bit rot, a stray
write, an editor); whoever can write the cache folder can also rewrite the checksums, so
they are no defence against a deliberate forgery (the range checks still keep every index
inside the dataset). Versions 1 (no checksum) and 2 (one CRC-32 over the whole file,
checked at open) are never read: the version is part of the key, so a version 3 reader
looks for another file name and builds its plan once.

The file is named by the key's hash and built by one process under the side-file lock
(:func:`arrowmt.files._sidefile.load_or_build`); every other process waits on the
lock, then maps the finished file read-only, so the plan lives in shared page cache and
not in each rank's private memory. A file with a bad header or chunk table, another key,
another row count or the wrong size is rebuilt when it is loaded; a FIFO, folder or
device at the plan's path is refused (FormatError), never opened. A chunk found corrupt
later, while batches are read, raises FormatError naming the file and the chunk, and
removes the file (under its lock, if it is still the one opened), so the next start
rebuilds it; the batches of chunks found sound stay readable meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.files import (
    PLAN_FORMAT,
    SideFile,
    canonical_json,
    check_contents,
    checked_batch,
    load_or_build,
    open_side_file,
    write_side_file,
)
from arrowmt.io import WordRanges
from arrowmt.reading import indices_within

logger = logging.getLogger(__name__)

PLAN_VERSION = PLAN_FORMAT.version
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class PlanArrays:
    """A freshly computed plan: batch ``b`` is ``indices[offsets[b]:offsets[b + 1]]``."""

    indices: np.ndarray
    offsets: np.ndarray
    dropped: int = 0


@dataclass(frozen=True)
class PlanHeader:
    """The header fields of a plan file (after magic and version)."""

    itemsize: int
    digest: bytes
    rows: int
    n_indices: int
    n_batches: int
    dropped: int

    def values(self) -> tuple[int, bytes, int, int, int, int]:
        return (self.itemsize, self.digest, self.rows, self.n_indices, self.n_batches, self.dropped)

    def indices_bytes(self) -> int:
        """Bytes of the index array including its padding to 8."""
        return -(-self.n_indices * self.itemsize // 8) * 8

    def body_bytes(self) -> int:
        """Bytes after the header and chunk table: the indices with their padding, then the offsets."""
        return self.indices_bytes() + 8 * (self.n_batches + 1)


# A plan of at most this many bytes is checked whole at its first batch, found in the page cache or not (about a
# second of CPU at this size; 12.6M pairs' plan, 49 MiB: 0.04 s): a rank reads batches from all over it, so its
# share of the pages is never all resident, and checking each batch as it is read (~26 us) cost 0.29 s an epoch of
# rank 0 of 8.
PLAN_SWEEP_BYTES = 1 << 30


class BatchPlan:
    """A read-only, memory-mapped batch plan, checked as it is read; picklable (the copy maps the file again)."""

    def __init__(self, path: Path, key: str, rows: int, built: bool = False) -> None:
        self.path = path
        self.key = key
        self.rows = rows
        self.built = built
        side = open_side_file(
            path, PLAN_FORMAT, _plan_body_size, lambda side: _check_header(side, key, rows), discard_corrupt=True
        )
        self.header = PlanHeader(*side.values)
        self._side = side
        self._indices = side.array(f"<i{self.header.itemsize}", self.header.n_indices, 0)
        self._offsets = side.array("<i8", self.header.n_batches + 1, self.header.indices_bytes())

    def __len__(self) -> int:
        return self.header.n_batches

    @property
    def dropped(self) -> int:
        """Samples left out of the plan because they were too long."""
        return self.header.dropped

    @property
    def samples(self) -> int:
        """Sample indices in the plan, all batches together (from the header: nothing read)."""
        return self.header.n_indices

    @property
    def indices(self) -> np.ndarray:
        """Every batch's indices, batch after batch (a read-only view of the map): reads and checks the whole plan."""
        self.check_all()
        return self._indices.raw

    @property
    def offsets(self) -> np.ndarray:
        """Where each batch starts in :attr:`indices`, and their end: reads and checks the whole plan."""
        self.check_all()
        return self._offsets.raw

    def check_all(self) -> None:
        """Check every chunk's CRC-32, that offsets run from 0 to the index count, and every index (once)."""
        self._side.check_whole(self._check_contents)

    def _check_contents(self) -> None:
        check_contents(self.path, self._indices.raw, self._offsets.raw, self.rows)

    def batch(self, b: int) -> np.ndarray:
        """Sample indices of batch ``b`` (a read-only view of the map), from chunks checked on their first use, with
        its bounds and indices checked; nothing to check when the whole plan was checked at its first batch (a large
        plan found in the page cache, :meth:`~arrowmt.files._sidefile.SideFile.trusted_whole`)."""
        if self._side.trusted_whole(self._check_contents, PLAN_SWEEP_BYTES) and 0 <= b < self.header.n_batches:
            offsets = self._offsets.raw
            return self._indices.raw[offsets[b] : offsets[b + 1]]
        return checked_batch(self.path, b, self._offsets, self._indices, self.header.n_indices, self.rows)

    def word_ranges(self, batches: np.ndarray) -> list[WordRanges]:
        """Where the indices of plan batches ``batches`` lie in the file, for read-ahead: their offsets are read (a
        page holds 512 batches' offsets), their indices are not. Offsets out of order (a corrupt chunk, raised when the
        batch is read) name nothing."""
        ids = indices_within(batches, len(self))
        start = np.clip(self._offsets.take(ids), 0, self.header.n_indices)
        end = np.clip(self._offsets.take(ids + 1), start, self.header.n_indices)
        return [self._indices.word_ranges(start, end - start)]

    def __reduce__(self) -> tuple[type[BatchPlan], tuple[Path, str, int]]:
        return (BatchPlan, (self.path, self.key, self.rows))


PLAN_PREFIX, PLAN_SUFFIX = "plan-", ".bin"  # a plan file's name: prefix, the key's first 32 hex digits, suffix
PLAN_GLOB = f"{PLAN_PREFIX}*{PLAN_SUFFIX}"


def plan_key(params: Mapping[str, object]) -> str:
    """Hex SHA-256 naming a plan: canonical JSON of ``params`` plus the plan format version."""
    return hashlib.sha256(canonical_json({"plan_version": PLAN_VERSION, **params})).hexdigest()


def plan_path(cache_dir: str | os.PathLike[str], key: str) -> Path:
    """Where the plan for ``key`` is stored inside ``cache_dir``."""
    return Path(cache_dir) / f"{PLAN_PREFIX}{key[:32]}{PLAN_SUFFIX}"


# ---------------------------------------------------------------- writing


def write_plan(path: Path, key: str, rows: int, plan: PlanArrays) -> None:
    """Write ``plan`` atomically at ``path`` (indices as int32 when the dataset allows), with its checksums."""
    offsets = np.ascontiguousarray(plan.offsets, dtype="<i8")
    itemsize = 4 if rows <= INT32_LIMIT else 8
    indices = np.ascontiguousarray(plan.indices, dtype=f"<i{itemsize}")
    header = PlanHeader(itemsize, bytes.fromhex(key), rows, indices.shape[0], offsets.shape[0] - 1, plan.dropped)
    padding = b"\x00" * (header.indices_bytes() - indices.nbytes)
    write_side_file(path, PLAN_FORMAT, header.values(), [indices, padding, offsets])


def _check_plan_arrays(plan: PlanArrays) -> None:
    """A builder must return 1-D offsets from 0 to len(indices)."""
    offsets = np.asarray(plan.offsets)
    n = int(np.asarray(plan.indices).shape[0])
    if offsets.ndim != 1 or offsets.shape[0] < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != n:
        raise InvalidParameterError(
            f"plan offsets: expected a 1-D array from 0 to len(indices)={n}, got shape {offsets.shape}"
        )


# ---------------------------------------------------------------- reading and checking


def _plan_body_size(path: Path, values: tuple) -> int:
    """The body bytes a plan header implies; FormatError for an index itemsize other than 4 or 8."""
    header = PlanHeader(*values)
    if header.itemsize not in (4, 8):
        raise FormatError(f"{path}: plan index itemsize: expected 4 or 8, found {header.itemsize}")
    return header.body_bytes()


def _check_header(side: SideFile, key: str, rows: int) -> None:
    header = PlanHeader(*side.values)
    if header.digest.hex() != key:
        raise FormatError(f"{side.path}: plan key: expected {key}, found {header.digest.hex()} (stale plan)")
    if header.rows != rows:
        raise FormatError(f"{side.path}: plan dataset rows: expected {rows}, found {header.rows} (stale plan)")


def read_plan(path: str | os.PathLike[str], key: str, rows: int) -> BatchPlan:
    """Map the plan at ``path``; FormatError if it is missing, for another key/dataset, or its header or chunk table
    is corrupt (its body is checked as batches are read)."""
    return BatchPlan(Path(path), key, rows)


# ---------------------------------------------------------------- load or build


def load_or_build_plan(
    cache_dir: str | os.PathLike[str],
    key: str,
    rows: int,
    build: Callable[[], PlanArrays],
) -> BatchPlan:
    """The plan for ``key``: mapped from ``cache_dir`` if valid, else built once under a lock.

    Concurrent callers (DDP ranks, several jobs) all get the same file: the first
    to take the lock builds and writes it, the others find it valid after
    waiting. ``BatchPlan.built`` tells whether this call built it.
    """
    path = plan_path(cache_dir, key)

    def write() -> None:
        plan = build()
        _check_plan_arrays(plan)
        write_plan(path, key, rows, plan)

    result, built = load_or_build(path, "batch plan", lambda: read_plan(path, key, rows), write)
    result.built = built
    return result


def keep_recent(folder: Path, current: Path, keep: int) -> None:
    """Mark the plan ``current`` as just used and remove all but the ``keep`` most recently used plans of
    ``folder`` (and their locks): the per-epoch plans of a mixture or of sampled segmentations."""
    os.utime(current)
    plans = sorted(folder.glob(PLAN_GLOB), key=lambda p: p.stat().st_mtime_ns if p.exists() else 0, reverse=True)
    for old in plans[keep:]:
        if old != current:
            old.unlink(missing_ok=True)
            old.with_name(old.name + ".lock").unlink(missing_ok=True)
