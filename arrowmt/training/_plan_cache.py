"""A batch plan (flat sample indices + batch offsets) computed once and shared through a mapped file.

Layout of a plan file (little-endian)::

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

The file is named by the key's hash and written with :func:`arrowmt.format._atomic.atomic_path`
(temporary file + rename) by one process holding an exclusive ``fcntl.flock`` on
``<name>.lock``; every other process waits on the lock, then maps the finished
file read-only, so the plan lives in shared page cache and not in each rank's
private memory. A file with a bad header, another key, another row count, the
wrong size, a wrong checksum or inconsistent contents is rebuilt.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import ArrowMTError, FormatError, InvalidParameterError
from arrowmt.format._atomic import atomic_path
from arrowmt.format._header import unpack_header

logger = logging.getLogger(__name__)

PLAN_MAGIC = b"ARROWMT-PLAN\x00\x00\x00\x00"
PLAN_VERSION = 2
HEADER_BYTES = 128
_FIELDS = struct.Struct("<16sII32sQQQQ")  # the header fields the checksum covers
_CHECKSUM = struct.Struct("<I")  # follows them
INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class PlanArrays:
    """A freshly computed plan: batch ``b`` is ``indices[offsets[b]:offsets[b + 1]]``."""

    indices: np.ndarray
    offsets: np.ndarray
    dropped: int = 0


@dataclass(frozen=True)
class PlanHeader:
    """The fixed-size header of a plan file."""

    itemsize: int
    digest: bytes
    rows: int
    n_indices: int
    n_batches: int
    dropped: int
    checksum: int = 0

    def fields(self) -> bytes:
        """The packed fields before the checksum (the first bytes the checksum covers)."""
        return _FIELDS.pack(
            PLAN_MAGIC,
            PLAN_VERSION,
            self.itemsize,
            self.digest,
            self.rows,
            self.n_indices,
            self.n_batches,
            self.dropped,
        )

    def pack(self) -> bytes:
        return (self.fields() + _CHECKSUM.pack(self.checksum)).ljust(HEADER_BYTES, b"\x00")

    def indices_bytes(self) -> int:
        """Bytes of the index array including its padding to 8."""
        return -(-self.n_indices * self.itemsize // 8) * 8

    def file_size(self) -> int:
        return HEADER_BYTES + self.indices_bytes() + 8 * (self.n_batches + 1)


def contents_checksum(header: PlanHeader, body: bytes | memoryview | mmap.mmap) -> int:
    """CRC-32 of the header fields and ``body`` (the indices with their padding, then the offsets)."""
    return zlib.crc32(body, zlib.crc32(header.fields()))


class BatchPlan:
    """A read-only, memory-mapped batch plan; picklable (the copy maps the file again)."""

    def __init__(self, path: Path, key: str, rows: int, built: bool = False) -> None:
        self.path = path
        self.key = key
        self.rows = rows
        self.built = built
        self.header, self._map = _open_checked(path, key, rows)
        self.indices = np.frombuffer(
            self._map, dtype=f"<i{self.header.itemsize}", count=self.header.n_indices, offset=HEADER_BYTES
        )
        self.offsets = np.frombuffer(
            self._map,
            dtype="<i8",
            count=self.header.n_batches + 1,
            offset=HEADER_BYTES + self.header.indices_bytes(),
        )
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
    body = indices.tobytes() + b"\x00" * (header.indices_bytes() - indices.nbytes) + offsets.tobytes()
    header = dataclasses.replace(header, checksum=contents_checksum(header, body))
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(header.pack())
        handle.write(body)


def _check_plan_arrays(plan: PlanArrays) -> None:
    """A builder must return 1-D offsets from 0 to len(indices)."""
    offsets = np.asarray(plan.offsets)
    n = int(np.asarray(plan.indices).shape[0])
    if offsets.ndim != 1 or offsets.shape[0] < 1 or int(offsets[0]) != 0 or int(offsets[-1]) != n:
        raise InvalidParameterError(
            f"plan offsets: expected a 1-D array from 0 to len(indices)={n}, got shape {offsets.shape}"
        )


# ---------------------------------------------------------------- reading and checking


def _open_checked(path: Path, key: str, rows: int) -> tuple[PlanHeader, mmap.mmap]:
    """Map ``path`` read-only after checking its header against ``key``, ``rows`` and its size."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        header = _parse_header(path, handle.read(HEADER_BYTES))
        _check_header(path, header, key, rows, size)
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    _check_checksum(path, header, mapped)
    return header, mapped


def _check_checksum(path: Path, header: PlanHeader, mapped: mmap.mmap) -> None:
    with memoryview(mapped) as view, view[HEADER_BYTES:] as body:
        found = contents_checksum(header, body)
    if found != header.checksum:
        raise FormatError(
            f"{path}: plan checksum: expected CRC-32 {header.checksum:08x} (header), found {found:08x} "
            "(contents changed on disk)"
        )


def _parse_header(path: Path, raw: bytes) -> PlanHeader:
    fields = unpack_header(path, raw, HEADER_BYTES, _FIELDS, PLAN_MAGIC, PLAN_VERSION, "plan")
    _, _, itemsize, digest, rows, n_indices, n_batches, dropped = fields
    if itemsize not in (4, 8):
        raise FormatError(f"{path}: plan index itemsize: expected 4 or 8, found {itemsize}")
    (checksum,) = _CHECKSUM.unpack_from(raw, _FIELDS.size)
    return PlanHeader(itemsize, digest, rows, n_indices, n_batches, dropped, checksum)


def _check_header(path: Path, header: PlanHeader, key: str, rows: int, size: int) -> None:
    if header.digest.hex() != key:
        raise FormatError(f"{path}: plan key: expected {key}, found {header.digest.hex()} (stale plan)")
    if header.rows != rows:
        raise FormatError(f"{path}: plan dataset rows: expected {rows}, found {header.rows} (stale plan)")
    if size != header.file_size():
        raise FormatError(
            f"{path}: plan size: expected {header.file_size()} bytes for {header.n_indices} indices and "
            f"{header.n_batches} batches, found {size} (truncated or corrupt)"
        )


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
    try:
        return BatchPlan(Path(path), key, rows)
    except FileNotFoundError as exc:
        raise FormatError(f"{path}: no plan file") from exc
    except (ValueError, struct.error) as exc:
        raise FormatError(f"{path}: unreadable plan: {exc}") from exc


# ---------------------------------------------------------------- load or build


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``lock_path`` (created if needed) for the block."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ArrowMTError(
            f"cache_dir: cannot create {lock_path} ({exc.strerror or exc}); pass a writable cache_dir"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


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
    try:
        return read_plan(path, key, rows)
    except FormatError:
        pass
    with exclusive_lock(path.with_name(path.name + ".lock")):
        try:
            return read_plan(path, key, rows)
        except FormatError as exc:
            if path.exists():
                logger.warning("rebuilding batch plan: %s", exc)
        plan = build()
        _check_plan_arrays(plan)
        write_plan(path, key, rows, plan)
        result = read_plan(path, key, rows)
    result.built = True
    return result
