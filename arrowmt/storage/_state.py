"""The cache's shared state: one memory-mapped file per cached corpus, read and written by every process of a node.

Layout (little-endian): 8-byte magic, u64 block count, then per block a u8 ``present``
(the block is in the local file and was verified), padded to 8 bytes, a u32 ``generation``
(bumped each time the block is filled or evicted), an i64 ``next_use`` (the plan step
at which a process of the node next needs it; :data:`NO_USE` when none is known) and an
i64 ``later_use`` (the use after that one, or :data:`NO_USE`): a block shared by two
batches (a batch's first or last block, in a copy stored in plan order) is still known to
be needed after its first use. :func:`add_use` and :func:`use_keys` say how they change.
A process reads a block's bytes only while its generation is unchanged from before the
read to after the copy (a sequence lock), so an eviction by another process between the
two is seen and the read is done again.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from arrowmt._errors import StorageError

MAGIC = b"AMTCACH2"  # version 2: next_use and later_use
HEADER = struct.Struct("<8sQ")
NO_USE = np.iinfo(np.int64).max


def _padded(n: int, to: int = 8) -> int:
    return -(-n // to) * to


def state_size(blocks: int) -> int:
    return HEADER.size + _padded(blocks) + _padded(4 * blocks) + 16 * blocks


def use_keys(next_use: np.ndarray, later_use: np.ndarray, now: int) -> np.ndarray:
    """The first of the two known uses still to come at ``now`` (:data:`NO_USE`: none)."""
    return np.where(next_use >= now, next_use, np.where(later_use >= now, later_use, NO_USE))


def add_use(
    next_use: np.ndarray, later_use: np.ndarray, step: int | np.ndarray, now: int
) -> tuple[np.ndarray, np.ndarray]:
    """The two earliest uses still to come at ``now`` among the known ones and ``step`` (repeats counted once;
    :data:`NO_USE` where fewer)."""
    first = use_keys(next_use, later_use, now)
    second = np.where((next_use >= now) & (later_use >= now), later_use, NO_USE)
    low, high = np.minimum(first, step), np.maximum(first, step)
    return low, np.where(high == low, second, np.minimum(high, second))


class CacheState:
    """The shared arrays of one cached corpus (see the module); created zeroed by the first process."""

    def __init__(self, path: Path, blocks: int) -> None:
        self.path = path
        size = state_size(blocks)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StorageError(f"{path}: cannot open the cache state: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the first process sizes and stamps it; the others wait, then check it
            self._init(fd, path, blocks, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)  # explicitly: the map keeps a duplicate of fd, which would hold the lock
            os.close(fd)
        at = HEADER.size
        self.present = np.frombuffer(self._map, dtype=np.uint8, count=blocks, offset=at)
        at += _padded(blocks)
        self.generation = np.frombuffer(self._map, dtype=np.uint32, count=blocks, offset=at)
        at += _padded(4 * blocks)
        self.next_use = np.frombuffer(self._map, dtype=np.int64, count=blocks, offset=at)
        self.later_use = np.frombuffer(self._map, dtype=np.int64, count=blocks, offset=at + 8 * blocks)

    def add_use(self, blocks: np.ndarray, step: int | np.ndarray, now: int) -> None:
        """``blocks`` (unique) are needed at ``step`` (one, or one each), the plan being at ``now`` (see
        :func:`add_use`)."""
        self.next_use[blocks], self.later_use[blocks] = add_use(
            self.next_use[blocks], self.later_use[blocks], step, now
        )

    def keys(self, blocks: np.ndarray, now: int) -> np.ndarray:
        """The next use of ``blocks`` at ``now`` (see :func:`use_keys`)."""
        return use_keys(self.next_use[blocks], self.later_use[blocks], now)

    @staticmethod
    def _init(fd: int, path: Path, blocks: int, size: int) -> None:
        """Size and stamp a new (empty) state file; check an existing one (the caller holds its ``flock``)."""
        st = os.fstat(fd)
        if st.st_size == 0:
            os.ftruncate(fd, size)
            os.pwrite(fd, HEADER.pack(MAGIC, blocks), 0)
            os.pwrite(fd, np.full(2 * blocks, NO_USE, dtype=np.int64).tobytes(), size - 16 * blocks)
            return
        magic, count = HEADER.unpack(os.pread(fd, HEADER.size, 0))
        if magic != MAGIC or count != blocks or st.st_size != size:
            raise StorageError(
                f"{path}: cache state of another corpus or version (expected {blocks} blocks, {size} bytes; "
                f"found {count} blocks, {st.st_size} bytes); remove the cache folder {path.parent.parent}"
            )
