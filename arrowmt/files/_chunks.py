"""Per-chunk checksums of a side file's body: a chunk table written with the file, chunks checked on first use.

A side file's *body* (every byte after its header and chunk table) is cut into chunks of
``chunk bytes`` (:data:`CHUNK_BYTES` when arrowmt writes it; the last chunk may be
shorter). The *chunk table*, right after the 128-byte header, is (little-endian)::

    u64 body bytes, u32 chunk bytes (a power of two, 8..2**30), u32 zero,
    u32 CRC-32 (zlib) of each chunk's bytes [ceil(body bytes / chunk bytes)], zero-padded to a multiple of 8

The header's own CRC-32 covers the chunk table, padding included, so opening a side file
reads and checks 128 + 16 + 4 bytes per chunk of body (a 50 MB batch plan in 4 KiB chunks:
49 KB), not the body. :class:`ChunkChecks` then checks a chunk the first time a read touches it and
remembers, per open file, which chunks it found sound (one flag per chunk). Every item of
a body section lies inside one chunk: sections start at multiples of their item size,
which divides the chunk size.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable, Sequence

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.io import WORD, CrcPieces, WordRanges, byte_crcs, pages_resident, read_ahead, spread

SAMPLE_PAGES = 16  # pages of a side file's body sampled for residency at its first check
SWEEP_CHUNKS = 512  # a body of fewer chunks (2 MiB) is checked a chunk at a time even when resident: a sweep would
# save at most that many small checks (a few ms a process)
CHUNK_BYTES = 4096  # the chunk size arrowmt writes: one page, what a first use reads and checks (4 bytes of CRC)
MIN_CHUNK_BYTES = 8
MAX_CHUNK_BYTES = 1 << 30
TABLE_PREFIX = struct.Struct("<QII")  # body bytes, chunk bytes, zero
CRC_BYTES = 4


def chunk_count(body_bytes: int, chunk_bytes: int) -> int:
    """Chunks of a body of ``body_bytes`` (the last one may be shorter)."""
    return -(-body_bytes // chunk_bytes)


def table_bytes(body_bytes: int, chunk_bytes: int) -> int:
    """Bytes of the chunk table of a body of ``body_bytes``: prefix, one CRC-32 per chunk, padding to 8."""
    return TABLE_PREFIX.size + -(-CRC_BYTES * chunk_count(body_bytes, chunk_bytes) // 8) * 8


def chunk_crcs(parts: Sequence[bytes | memoryview], chunk_bytes: int) -> np.ndarray:
    """CRC-32 of each ``chunk_bytes`` of the concatenation of ``parts`` (uint32; nothing is concatenated)."""
    crcs: list[int] = []
    crc = filled = 0
    for part in parts:
        with memoryview(part) as view, view.cast("B") as data:
            at = 0
            while at < len(data):
                take = min(chunk_bytes - filled, len(data) - at)
                crc = zlib.crc32(data[at : at + take], crc)
                filled, at = filled + take, at + take
                if filled == chunk_bytes:
                    crcs.append(crc)
                    crc = filled = 0
    if filled:
        crcs.append(crc)
    return np.array(crcs, dtype="<u4")


def pack_table(crcs: np.ndarray, body_bytes: int, chunk_bytes: int) -> bytes:
    """The chunk table as stored (prefix, CRC-32s, zero padding)."""
    raw = TABLE_PREFIX.pack(body_bytes, chunk_bytes, 0) + np.asarray(crcs, dtype="<u4").tobytes()
    return raw.ljust(table_bytes(body_bytes, chunk_bytes), b"\x00")


def parse_table_prefix(where: str, raw: bytes) -> tuple[int, int]:
    """(body bytes, chunk bytes) from the first bytes of a chunk table; FormatError naming ``where`` if impossible."""
    if len(raw) < TABLE_PREFIX.size:
        raise FormatError(f"{where} chunk table: expected {TABLE_PREFIX.size} bytes, found {len(raw)} (truncated?)")
    body, chunk, zero = TABLE_PREFIX.unpack_from(raw)
    if not MIN_CHUNK_BYTES <= chunk <= MAX_CHUNK_BYTES or chunk & (chunk - 1) or zero:
        raise FormatError(
            f"{where} chunk table: expected a chunk size that is a power of two in {MIN_CHUNK_BYTES}.."
            f"{MAX_CHUNK_BYTES} and a zero field, found {chunk} and {zero} (corrupt)"
        )
    return body, chunk


class ChunkChecks(CrcPieces):
    """Which chunks of one open side file's body were found sound; the others are checked on first use.

    ``mapped`` is the whole file, read-only; the body starts at byte ``body_offset``;
    ``expected`` holds each chunk's CRC-32 from the chunk table (none: nothing left to
    check). A mismatch raises FormatError naming ``where`` (path and kind), the chunk and
    its file bytes, then what ``advice()`` returns (what the user should do, after doing
    what it can). The checks are :class:`~arrowmt.io.CrcPieces`' (a bitmap, each chunk once);
    the map is viewed only while a check runs, so that it can be closed.
    """

    def __init__(
        self,
        where: str,
        mapped: mmap.mmap,
        body_offset: int,
        expected: np.ndarray,
        chunk_bytes: int,
        advice: Callable[[], str],
    ) -> None:
        self.where = where
        self.mapped = mapped
        self.body_offset = body_offset
        self.chunk_bytes = chunk_bytes
        self.advice = advice
        self.address = _address(mapped)
        super().__init__(
            None,
            expected,
            self._file_bytes,
            self._failure,
            self._read_ahead,
            resident=lambda: body_resident(self),
            sweep_min=SWEEP_CHUNKS,  # a body of 2 MiB or more found resident is checked whole at its first check
        )

    def ensure_range(self, start: int, stop: int) -> None:  # type: ignore[override]
        """Check the chunks holding body bytes ``start..stop-1`` that were not checked yet."""
        if not self.all_checked and stop > start:
            super().ensure_range(start // self.chunk_bytes, (stop - 1) // self.chunk_bytes)

    def ensure_positions(self, positions: np.ndarray) -> None:
        """Check the chunks holding the body bytes at ``positions`` (int64 inside the body, any order, repeats
        allowed) that were not checked yet."""
        if not self.all_checked and positions.size:
            self.ensure(positions // self.chunk_bytes)

    def crcs(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        with memoryview(self.mapped) as view:
            return byte_crcs(view, starts, ends)

    def crc(self, start: int, end: int) -> int:
        with memoryview(self.mapped) as view, view[start:end] as data:
            return zlib.crc32(data)

    def file_bytes(self, k: int) -> tuple[int, int]:
        """(first byte, end byte) of chunk ``k`` in the file."""
        start = self.body_offset + k * self.chunk_bytes
        return start, min(start + self.chunk_bytes, len(self.mapped))

    piece_bytes = file_bytes

    def _file_bytes(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = self.body_offset + chunks * self.chunk_bytes
        return start, np.minimum(start + self.chunk_bytes, len(self.mapped))

    def _failure(self, k: int, want: int, found: int) -> FormatError:
        start, stop = self.file_bytes(k)
        advice = self.advice()
        return FormatError(
            f"{self.where} checksum: chunk {k} of {self.expected.shape[0]} (file bytes {start}..{stop - 1}): "
            f"expected CRC-32 {want:08x} (chunk table), found {found:08x} (contents changed on disk)"
            + (f"; {advice}" if advice else "")
        )

    def _read_ahead(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Ask for the pages of chunks about to be checked (a hint, through the residency gate): on a map advised
        random, a fault reads one page."""
        read_ahead([WordRanges(self.mapped, self.address, starts // WORD, -(-(ends - starts) // WORD))])


def body_resident(checks: ChunkChecks) -> bool:
    """Whether a sample of the pages of a side file's body (:data:`SAMPLE_PAGES`, spread over it) is in the page
    cache (reads nothing)."""
    first, end = checks.body_offset // WORD, len(checks.mapped) // WORD
    if end <= first:
        return False
    words = first + spread(end - first, SAMPLE_PAGES)
    return pages_resident([WordRanges(checks.mapped, checks.address, words, np.ones_like(words))])


def _address(mapped: mmap.mmap) -> int:
    """Where ``mapped`` starts in this process's memory (for residency samples; no reference to it is kept, so the
    map can still be closed)."""
    if not len(mapped):
        return 0
    probe = np.frombuffer(mapped, dtype=np.uint8, count=1)
    address = int(probe.ctypes.data)
    del probe
    return address


class CheckedArray:
    """An array of a side file's body whose values are returned only once the chunks holding them are checked.

    ``raw`` is the mapped array itself (not checked: for its address and length only);
    ``offset`` is where it starts in the body, a multiple of its item size.
    """

    def __init__(self, raw: np.ndarray, offset: int, checks: ChunkChecks) -> None:
        if offset % raw.itemsize or checks.chunk_bytes % raw.itemsize:
            raise ValueError(f"{checks.where}: {raw.itemsize}-byte items at body byte {offset} would span chunks")
        self.raw = raw
        self.offset = offset
        self.checks = checks

    def __len__(self) -> int:
        return int(self.raw.shape[0])

    def ensure(self, positions: np.ndarray) -> None:
        """Check the chunks holding items ``positions`` (in ``0..len-1``, any order, repeats allowed)."""
        if not self.checks.all_checked:
            self.checks.ensure_positions(self.offset + np.asarray(positions, dtype=np.int64) * self.raw.itemsize)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Items ``positions`` (in ``0..len-1``; a copy), checked."""
        self.ensure(positions)
        return self.raw[positions]

    def slice(self, start: int, stop: int) -> np.ndarray:
        """Items ``start..stop-1`` (``0 <= start <= stop <= len``; a read-only view of the map), checked."""
        size = self.raw.itemsize
        self.checks.ensure_range(self.offset + start * size, self.offset + stop * size)
        return self.raw[start:stop]

    def word_ranges(self, first: np.ndarray, count: np.ndarray) -> WordRanges:
        """Where items ``first[i] .. first[i] + count[i] - 1`` lie in the side file's map, as word ranges for read-ahead
        (nothing is read or checked)."""
        size = self.raw.itemsize
        start = self.checks.body_offset + self.offset + np.asarray(first, dtype=np.int64) * size
        end = start + np.asarray(count, dtype=np.int64) * size
        address = (
            self.raw.__array_interface__["data"][0] - self.checks.body_offset - self.offset
        )  # the map's first byte
        return WordRanges(self.checks.mapped, address, start // WORD, -(-end // WORD) - start // WORD)

    def whole(self) -> np.ndarray:
        """Every item (a read-only view of the map), checked."""
        return self.slice(0, len(self))
