"""Freeing a block of a local cache file without changing its size: ``fallocate(PUNCH_HOLE | KEEP_SIZE)``."""

from __future__ import annotations

import ctypes
import os

from arrowmt._errors import StorageError

_PUNCH_HOLE = 0x02
_KEEP_SIZE = 0x01
_FALLOCATE = None


def _fallocate() -> ctypes._CFuncPtr:
    global _FALLOCATE
    if _FALLOCATE is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        libc.fallocate.restype = ctypes.c_int
        _FALLOCATE = libc.fallocate
    return _FALLOCATE


def punch_hole(fd: int, start: int, length: int, where: str) -> None:
    """Give the disk space of bytes ``[start, start + length)`` back; they read as zeros afterwards."""
    if _fallocate()(fd, _PUNCH_HOLE | _KEEP_SIZE, start, length) != 0:
        err = ctypes.get_errno()
        raise StorageError(
            f"{where}: cannot free cached bytes {start}-{start + length}: {os.strerror(err)} "
            "(the cache_dir file system must support hole punching: ext4, xfs, btrfs, tmpfs)"
        )
