"""A batch plan (flat sample indices + batch offsets) computed once and shared through a mapped file.

A plan file is a side file (:mod:`arrowmt.format._sidefile`: one header, CRC-32,
atomic write, build-once lock, read-only map). Layout (little-endian)::

    header (128 bytes): magic b"ARROWMT-PLAN\\0\\0\\0\\0", u32 version (2), u32 index itemsize (4 or 8),
                        32-byte SHA-256 of the key, u64 dataset rows, u64 index count,
                        u64 batch count, u64 samples dropped, u32 CRC-32 of the contents, zero padding
    indices:            int32 or int64 [index count], zero-padded to a multiple of 8 bytes
    offsets:            int64 [batch count + 1]

The CRC-32 (zlib) covers the header fields before it, the indices with their padding
and the offsets: every byte that decides a batch. Reading a plan checks it (about 14 ms
per 50 MB, i.e. per 12.6M int32 indices), so a plan whose contents changed on disk,
even to values that are still in range (swapped indices, edited offsets or ``dropped``),
is refused with FormatError; :func:`load_or_build_plan` then logs a warning and rebuilds
it. A checksum catches accidental changes (bit rot, a stray write, an editor); whoever
can write the cache folder can also rewrite the checksum, so it is no defence against
a deliberate forgery (the range checks still keep every index inside the dataset).
Version 1 files (no checksum) are never read: the version is part of the key, so a
version 2 reader looks for another file name and builds its plan once.

The file is named by the key's hash and built by one process under the side-file lock
(:func:`arrowmt.format._sidefile.load_or_build`); every other process waits on the
lock, then maps the finished file read-only, so the plan lives in shared page cache and
not in each rank's private memory. A file with a bad header, another key, another row
count, the wrong size, a wrong checksum or inconsistent contents is rebuilt; a FIFO,
folder or device at the plan's path is refused (FormatError), never opened.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.format import (
    HEADER_BYTES,
    PLAN_FORMAT,
    SideFile,
    checksum,
    load_or_build,
    open_side_file,
    write_side_file,
)

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

    def fields(self) -> bytes:
        """The packed fields before the checksum (the first bytes the checksum covers)."""
        return PLAN_FORMAT.pack(self.values())

    def indices_bytes(self) -> int:
        """Bytes of the index array including its padding to 8."""
        return -(-self.n_indices * self.itemsize // 8) * 8

    def file_size(self) -> int:
        return HEADER_BYTES + self.indices_bytes() + 8 * (self.n_batches + 1)


def contents_checksum(header: PlanHeader, body: bytes | memoryview) -> int:
    """CRC-32 of the header fields and ``body`` (the indices with their padding, then the offsets)."""
    return checksum(header.fields(), [body])


class BatchPlan:
    """A read-only, memory-mapped batch plan; picklable (the copy maps the file again)."""

    def __init__(self, path: Path, key: str, rows: int, built: bool = False) -> None:
        self.path = path
        self.key = key
        self.rows = rows
        self.built = built
        side = open_side_file(path, PLAN_FORMAT, _plan_size, lambda side: _check_header(side, key, rows))
        self.header = PlanHeader(*side.values)
        self._map = side.map
        self.indices = side.array(f"<i{self.header.itemsize}", self.header.n_indices, 0)
        self.offsets = side.array("<i8", self.header.n_batches + 1, self.header.indices_bytes())
        _check_contents(path, self.indices, self.offsets, rows)

    def __len__(self) -> int:
        return self.header.n_batches

    @property
    def dropped(self) -> int:
        """Samples left out of the plan because they were too long."""
        return self.header.dropped

    def batch(self, b: int) -> np.ndarray:
        """Sample indices of batch ``b`` (a read-only view of the map)."""
        return self.indices[self.offsets[b] : self.offsets[b + 1]]

    def __reduce__(self) -> tuple[type[BatchPlan], tuple[Path, str, int]]:
        return (BatchPlan, (self.path, self.key, self.rows))


def plan_key(params: Mapping[str, object]) -> str:
    """Hex SHA-256 naming a plan: canonical JSON of ``params`` plus the plan format version."""
    text = json.dumps({"plan_version": PLAN_VERSION, **params}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_path(cache_dir: str | os.PathLike[str], key: str) -> Path:
    """Where the plan for ``key`` is stored inside ``cache_dir``."""
    return Path(cache_dir) / f"plan-{key[:32]}.bin"


# ---------------------------------------------------------------- writing


def write_plan(path: Path, key: str, rows: int, plan: PlanArrays) -> None:
    """Write ``plan`` atomically at ``path`` (indices as int32 when the dataset allows), with its checksum."""
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


def _plan_size(path: Path, values: tuple) -> int:
    """The file size a plan header implies; FormatError for an index itemsize other than 4 or 8."""
    header = PlanHeader(*values)
    if header.itemsize not in (4, 8):
        raise FormatError(f"{path}: plan index itemsize: expected 4 or 8, found {header.itemsize}")
    return header.file_size()


def _parse_header(path: Path, raw: bytes) -> PlanHeader:
    """The header of the plan file ``path`` from its first bytes ``raw``."""
    header = PlanHeader(*PLAN_FORMAT.unpack(path, raw))
    _plan_size(path, header.values())
    return header


def _check_header(side: SideFile, key: str, rows: int) -> None:
    header = PlanHeader(*side.values)
    if header.digest.hex() != key:
        raise FormatError(f"{side.path}: plan key: expected {key}, found {header.digest.hex()} (stale plan)")
    if header.rows != rows:
        raise FormatError(f"{side.path}: plan dataset rows: expected {rows}, found {header.rows} (stale plan)")


def _check_contents(path: Path, indices: np.ndarray, offsets: np.ndarray, rows: int) -> None:
    """Offsets run from 0 to the index count without decreasing; indices lie in [0, rows)."""
    if int(offsets[0]) != 0 or int(offsets[-1]) != indices.shape[0] or bool((np.diff(offsets) < 0).any()):
        raise FormatError(
            f"{path}: plan offsets: expected non-decreasing from 0 to {indices.shape[0]}, "
            f"found {int(offsets[0])}..{int(offsets[-1])} (corrupt)"
        )
    low, high = (int(indices.min()), int(indices.max())) if indices.size else (0, -1)
    if low < 0 or high >= rows:
        raise FormatError(f"{path}: plan indices: expected 0..{rows - 1}, found {low}..{high} (corrupt)")


def read_plan(path: str | os.PathLike[str], key: str, rows: int) -> BatchPlan:
    """Map the plan at ``path``; FormatError if it is missing, corrupt or for another key/dataset."""
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
