"""Helpers for tests that put hostile things where arrowmt expects its own files (FIFOs, flipped bits, forgeries)."""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from arrowmt.testing import (
    BLOCKS_FORMAT,
    HEADER_BYTES,
    PLAN_FORMAT,
    TABLE_PREFIX,
    VIEW_FORMAT,
    chunk_crcs,
    pack_table,
    parse_table_prefix,
    table_bytes,
)


def fifo_at(path: Path) -> Path:
    """Replace whatever is at ``path`` by a FIFO (opening it for reading would block: nobody writes)."""
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


@contextmanager
def unblocking(fifo: Path, seconds: float = 10) -> Iterator[None]:
    """Fail instead of hanging if the block opens ``fifo`` for reading and waits there.

    A watchdog thread opens the FIFO for writing after ``seconds`` (which releases a
    reader blocked in ``open``); the block's exit then fails the test. A signal would
    not do: another thread (torch's) may take it while the main thread stays blocked.
    """
    done = threading.Event()
    fired: list[bool] = []

    def watch() -> None:
        while not done.wait(seconds):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # succeeds only while a reader waits
            except OSError:
                continue
            fired.append(True)
            os.close(fd)

    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        done.set()
        watchdog.join()
    assert not fired, f"{fifo} was opened for reading and blocked (released after {seconds} s)"


def flip_bit(path: Path, byte: int, bit: int = 0) -> None:
    """Flip one bit of ``path`` in place (same inode), as bit rot would."""
    with open(path, "r+b") as handle:
        handle.seek(byte)
        value = handle.read(1)[0]
        handle.seek(byte)
        handle.write(bytes([value ^ (1 << bit)]))


def body_start(raw: bytes | bytearray) -> int:
    """Where the body of the side file ``raw`` (its bytes) starts: after its header and chunk table."""
    body, chunk = parse_table_prefix("test", bytes(raw[HEADER_BYTES : HEADER_BYTES + TABLE_PREFIX.size]))
    return HEADER_BYTES + table_bytes(body, chunk)


def reseal(raw: bytearray) -> None:
    """Store checksums that match the edited side file ``raw`` (its bytes), as a deliberate forger would."""
    fmt = next(f for f in (PLAN_FORMAT, BLOCKS_FORMAT, VIEW_FORMAT) if raw.startswith(f.magic))
    start = body_start(raw)
    body, chunk = parse_table_prefix("test", bytes(raw[HEADER_BYTES : HEADER_BYTES + TABLE_PREFIX.size]))
    table = pack_table(chunk_crcs([bytes(raw[start:])], chunk), body, chunk)
    raw[HEADER_BYTES:start] = table
    fields = fmt.layout.size
    raw[fields : fields + 4] = zlib.crc32(bytes(raw[:fields]) + table).to_bytes(4, "little")
