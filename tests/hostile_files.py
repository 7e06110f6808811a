"""Helpers for tests that put hostile things where arrowmt expects its own files (FIFOs, flipped bits)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType


def fifo_at(path: Path) -> Path:
    """Replace whatever is at ``path`` by a FIFO (opening it for reading would block: nobody writes)."""
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail with TimeoutError if the block takes longer than ``seconds`` (instead of hanging the test run)."""

    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise TimeoutError(f"still running after {seconds} s (blocked?)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def flip_bit(path: Path, byte: int, bit: int = 0) -> None:
    """Flip one bit of ``path`` in place (same inode), as bit rot would."""
    with open(path, "r+b") as handle:
        handle.seek(byte)
        value = handle.read(1)[0]
        handle.seek(byte)
        handle.write(bytes([value ^ (1 << bit)]))
