"""Returning freed heap to the OS: after a plan build, a remote corpus's open, a pass planned, and now and then
during a remote pass."""

from __future__ import annotations

import ctypes
import sys


def release_free_heap() -> None:
    """Return the freed heap of every thread's arena to the OS (glibc's ``malloc_trim``); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim  # absent from musl
    except (OSError, AttributeError):
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
