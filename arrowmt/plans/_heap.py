"""Returning the heap freed by a plan build to the OS."""

from __future__ import annotations

import ctypes
import sys


def release_free_heap() -> None:
    """Return the heap freed by a plan build to the OS (glibc's ``malloc_trim``); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim  # absent from musl
    except (OSError, AttributeError):
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
