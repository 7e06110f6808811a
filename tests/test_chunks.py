"""Tests for arrowmt.files._chunks: the chunk table's arithmetic and layout, and checks on first use."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from arrowmt import FormatError
from arrowmt.testing import (
    CHUNK_BYTES,
    HEADER_BYTES,
    CheckedArray,
    SideFile,
    SideFormat,
    chunk_count,
    chunk_crcs,
    open_side_file,
    pack_table,
    parse_table_prefix,
    table_bytes,
    write_side_file,
)
from tests.hostile_files import flip_bit

TEST_FORMAT = SideFormat("test file", b"ARROWMT-TEST\x00\x00\x00\x00", 1, "Q", "rebuild it", cache=False)
BODY = bytes(range(40))  # 40 body bytes: five 8-byte chunks, or three of 16 (the last one 8 bytes)


def test_the_chunk_size_is_one_page() -> None:
    assert CHUNK_BYTES == 4096


@pytest.mark.parametrize(
    ("body", "chunk", "count", "table"),
    [
        (0, 8, 0, 16),
        (1, 8, 1, 24),
        (8, 8, 1, 24),
        (9, 8, 2, 24),
        (16, 8, 2, 24),
        (17, 8, 3, 32),
        (40, 16, 3, 32),
        (50_404_808, 2**20, 49, 216),  # a 12.6M-pair plan in 1 MiB chunks: 49 chunks, 16 + 196 bytes padded to 8
        (50_404_808, 4096, 12_306, 49_240),  # in pages (arrowmt's chunks): 16 + 49,224 bytes
        (2**20, 2**20, 1, 24),
        (2**20 + 1, 2**20, 2, 24),
    ],
)
def test_chunk_count_and_table_bytes(body: int, chunk: int, count: int, table: int) -> None:
    assert chunk_count(body, chunk) == count
    assert table_bytes(body, chunk) == table


def test_chunk_crcs_follow_chunks_across_parts() -> None:
    """Parts are cut at chunk boundaries whatever their own sizes; the last chunk is shorter."""
    parts = [BODY[:3], memoryview(BODY[3:20]), np.frombuffer(BODY[20:], dtype=np.uint8)]
    expected = [zlib.crc32(BODY[a : a + 16]) for a in (0, 16, 32)]
    assert chunk_crcs([bytes(p) for p in parts], 16).tolist() == expected
    assert chunk_crcs([BODY], 8).tolist() == [zlib.crc32(BODY[a : a + 8]) for a in range(0, 40, 8)]
    assert chunk_crcs([b"", b""], 8).tolist() == []
    assert chunk_crcs([np.arange(5, dtype="<i8")], 16).tolist() == [
        zlib.crc32(np.arange(5, dtype="<i8").tobytes()[a : a + 16]) for a in (0, 16, 32)
    ]


def test_pack_and_parse_table() -> None:
    crcs = chunk_crcs([BODY], 16)
    raw = pack_table(crcs, 40, 16)
    assert raw == struct.pack("<QII3I", 40, 16, 0, *crcs.tolist()) + bytes(4)
    assert len(raw) == table_bytes(40, 16) == 32
    assert parse_table_prefix("f: test", raw) == (40, 16)


@pytest.mark.parametrize(
    ("chunk", "zero", "message"),
    [
        (12, 0, "found 12 and 0"),
        (4, 0, "found 4 and 0"),
        (2**31, 0, "found 2147483648 and 0"),
        (16, 1, "found 16 and 1"),
    ],
)
def test_parse_table_prefix_refuses_impossible_values(chunk: int, zero: int, message: str) -> None:
    with pytest.raises(FormatError, match=rf"f: test chunk table: expected a chunk size .* {message} \(corrupt\)"):
        parse_table_prefix("f: test", struct.pack("<QII", 40, chunk, zero))
    with pytest.raises(FormatError, match=r"f: test chunk table: expected 16 bytes, found 15"):
        parse_table_prefix("f: test", bytes(15))


def written(tmp_path: Path, chunk: int = 16) -> Path:
    return write_side_file(tmp_path / "f.bin", TEST_FORMAT, [7], [BODY[:10], BODY[10:]], chunk_bytes=chunk)


def test_layout_of_a_written_file(tmp_path: Path) -> None:
    """Header (fields, CRC-32 of fields and chunk table), chunk table, body."""
    raw = written(tmp_path).read_bytes()
    fields = TEST_FORMAT.pack([7])
    table = pack_table(chunk_crcs([BODY], 16), 40, 16)
    assert raw[: len(fields)] == fields and len(fields) == 28
    assert raw[28:32] == zlib.crc32(fields + table).to_bytes(4, "little")
    assert raw[32:HEADER_BYTES] == bytes(HEADER_BYTES - 32)
    assert raw[HEADER_BYTES : HEADER_BYTES + 32] == table
    assert raw[HEADER_BYTES + 32 :] == BODY


def opened(path: Path) -> SideFile:
    return open_side_file(path, TEST_FORMAT, lambda _path, values: 40)


def test_chunks_are_checked_on_first_use_only(tmp_path: Path) -> None:
    side = opened(written(tmp_path))
    assert side.values == (7,) and side.body_offset == HEADER_BYTES + 32
    assert side.chunks.checked.tolist() == [False, False, False]
    assert side.body(16, 17) == BODY[16:17]
    assert side.chunks.checked.tolist() == [False, True, False]
    assert side.body(15, 33) == BODY[15:33]  # chunks 0 to 2
    assert side.chunks.checked.all() and side.chunks.all_checked
    assert side.chunks.file_bytes(2) == (HEADER_BYTES + 64, HEADER_BYTES + 72)  # the last chunk: 8 bytes


def test_checked_array_positions_and_slices(tmp_path: Path) -> None:
    side = opened(written(tmp_path, chunk=8))
    words = side.array("<u4", 8, 8)  # body bytes 8..39: chunks 1 to 4
    assert len(words) == 8
    assert words.take(np.array([5, 5, 0])).tolist() == np.frombuffer(BODY, "<u4")[[7, 7, 2]].tolist()
    assert side.chunks.checked.tolist() == [False, True, False, True, False]
    assert words.slice(2, 4).tolist() == np.frombuffer(BODY, "<u4")[4:6].tolist()
    assert side.chunks.checked.tolist() == [False, True, True, True, False]
    words.slice(3, 3)  # empty: nothing to check
    assert side.chunks.checked.tolist() == [False, True, True, True, False]
    assert words.whole().tolist() == np.frombuffer(BODY, "<u4")[2:].tolist()
    assert side.chunks.checked.tolist() == [False, True, True, True, True]
    with pytest.raises(ValueError, match="8-byte items at body byte 4 would span chunks"):
        side.array("<u8", 2, 4)
    with pytest.raises(ValueError, match="16-byte items at body byte 0 would span chunks"):
        CheckedArray(np.zeros(1, dtype="V16"), 0, side.chunks)


def test_a_corrupt_chunk_is_named_with_its_file_bytes(tmp_path: Path) -> None:
    path = written(tmp_path)
    flip_bit(path, HEADER_BYTES + 32 + 20)  # body byte 20: chunk 1
    side = opened(path)
    assert side.body(0, 16) == BODY[:16]
    message = (
        rf"{path}: test file checksum: chunk 1 of 3 \(file bytes 176\.\.191\): expected CRC-32 "
        rf"{zlib.crc32(BODY[16:32]):08x} \(chunk table\), found [0-9a-f]{{8}} \(contents changed on disk\); rebuild it$"
    )
    with pytest.raises(FormatError, match=message):
        side.body(30, 40)
    assert side.chunks.checked.tolist() == [True, False, False]  # chunk 2 was not reached
    assert side.body(32, 40) == BODY[32:]
    with pytest.raises(FormatError, match=message):
        side.check_all()


def test_a_changed_chunk_table_or_header_fails_the_open(tmp_path: Path) -> None:
    for byte in (24, HEADER_BYTES + 3, HEADER_BYTES + 20, HEADER_BYTES + 31):  # a field, body bytes, a CRC, padding
        path = written(tmp_path)
        flip_bit(path, byte)
        with pytest.raises(FormatError, match=r"test file (checksum: expected CRC-32 .* \(header\)|chunk table)"):
            opened(path)


def test_an_empty_body_has_no_chunk(tmp_path: Path) -> None:
    path = write_side_file(tmp_path / "e.bin", TEST_FORMAT, [0], [])
    side = open_side_file(path, TEST_FORMAT, None)
    assert path.stat().st_size == HEADER_BYTES + 16 and side.chunks.all_checked and side.body(0, 0) == b""
    side.check_all()
