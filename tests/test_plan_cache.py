"""Tests for arrowmt.plans._plan_cache: file layout, corruption detection, rebuild, and concurrent builders."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import pickle
import stat
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from arrowmt import FormatError, InvalidParameterError, TokenBatchSampler, open_dataset
from arrowmt.files import _chunks
from arrowmt.plans import _plan_cache
from arrowmt.testing import (
    CACHE_DIR_NAME,
    CHUNK_BYTES,
    HEADER_BYTES,
    PlanArrays,
    load_or_build_plan,
    plan_key,
    plan_path,
    read_plan,
    table_bytes,
    write_plan,
)
from tests.builders import lengths_dataset
from tests.hostile_files import body_start, fifo_at, reseal, unblocking

ROWS = 10
KEY = plan_key({"dataset": "abc", "max_tokens": 8})
PLAN = PlanArrays(np.array([3, 1, 4, 0, 5, 9, 2]), np.array([0, 2, 3, 7]), dropped=2)
BODY = HEADER_BYTES + 24  # 64 body bytes: one chunk, the table's 16-byte prefix and one CRC-32 padded to 8
CRC_AT = 88  # the header's CRC-32 follows the 88 bytes of fields


def written(tmp_path: Path, key: str = KEY) -> Path:
    path = plan_path(tmp_path, key)
    write_plan(path, key, ROWS, PLAN)
    return path


def test_plan_key_is_canonical_and_distinct() -> None:
    assert plan_key({"a": 1, "b": None}) == plan_key({"b": None, "a": 1})
    assert plan_key({"a": 1}) != plan_key({"a": 2})
    assert plan_path("/c", KEY) == Path("/c") / f"plan-{KEY[:32]}.bin"


def test_write_then_read_roundtrip(tmp_path: Path) -> None:
    path = written(tmp_path)
    plan = read_plan(path, KEY, ROWS)
    assert [plan.batch(b).tolist() for b in range(3)] == [[3, 1], [4], [0, 5, 9, 2]]
    assert plan.indices.tolist() == [3, 1, 4, 0, 5, 9, 2]
    assert plan.indices.dtype == np.dtype("<i4")
    assert plan.offsets.tolist() == [0, 2, 3, 7]
    assert len(plan) == 3 and plan.dropped == 2 and plan.samples == 7 and not plan.built
    assert not plan.indices.flags.writeable and not plan.batch(0).flags.writeable
    # header 128 + chunk table 24 + 7 int32 padded to 32 bytes + 4 int64 offsets
    assert table_bytes(64, CHUNK_BYTES) == 24 and body_start(path.read_bytes()) == BODY
    assert path.stat().st_size == BODY + 32 + 32
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.indices.tolist() == plan.indices.tolist()
    with pytest.raises(IndexError, match=r"plan batch 3: expected 0\.\.2"):
        plan.batch(3)


def corrupt(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "truncated":
        raw = raw[:-8]
    elif how == "short_header":
        raw = raw[:40]
    elif how == "short_table":
        raw = raw[: HEADER_BYTES + 8]
    elif how == "magic":
        raw[0:4] = b"JUNK"
    elif how == "itemsize":
        raw[20] = 3
    elif how == "chunk_size":
        raw[HEADER_BYTES + 8 : HEADER_BYTES + 12] = (3 << 20).to_bytes(4, "little")
    elif how == "body_bytes":
        raw[HEADER_BYTES : HEADER_BYTES + 8] = (72).to_bytes(8, "little")
        reseal_header(raw)
    elif how == "version 1":
        raw[16:20] = np.array([1], dtype="<u4").tobytes()
    elif how == "version 2":
        raw[16:20] = np.array([2], dtype="<u4").tobytes()
    elif how in TAMPERING:
        TAMPERING[how](raw)
    elif how in FORGERIES:
        FORGERIES[how](raw)
        reseal(raw)
    path.write_bytes(bytes(raw))


def reseal_header(raw: bytearray) -> None:
    """The header's CRC-32 of the edited header and chunk table (the body's chunks are not resealed)."""
    raw[CRC_AT : CRC_AT + 4] = zlib.crc32(bytes(raw[:CRC_AT]) + bytes(raw[HEADER_BYTES:BODY])).to_bytes(4, "little")


def _swap_indices(raw: bytearray) -> None:
    """Swap indices 0 and 1 (3 and 1): still a permutation of valid rows, batch 0 keeps its size."""
    a, b = BODY, BODY + 4
    raw[a : a + 4], raw[b : b + 4] = raw[b : b + 4], raw[a : a + 4]


def _move_batch_boundary(raw: bytearray) -> None:
    """Offsets [0, 2, 3, 7] -> [0, 1, 3, 7]: still non-decreasing from 0 to 7."""
    at = BODY + 32 + 8
    raw[at : at + 8] = np.array([1], dtype="<i8").tobytes()


def _replace_index_in_range(raw: bytearray) -> None:
    """Index 4 (value 5) -> 8: another valid row."""
    at = BODY + 4 * 4
    raw[at : at + 4] = np.array([8], dtype="<i4").tobytes()


def _flip_padding_bit(raw: bytearray) -> None:
    raw[BODY + 28] ^= 1  # the padding after 7 int32 indices


def _flip_table_bit(raw: bytearray) -> None:
    raw[BODY - 8] ^= 1  # the chunk's CRC-32 in the chunk table


def _change_dropped(raw: bytearray) -> None:
    raw[80:88] = np.array([0], dtype="<u8").tobytes()


def _end_past_indices(raw: bytearray) -> None:
    """Offsets [0, 2, 3, 7] -> [0, 2, 9, 7]: batches 1 and 2 read past the indices."""
    raw[BODY + 32 + 16 : BODY + 32 + 24] = np.array([9], dtype="<i8").tobytes()


def _last_offset_short(raw: bytearray) -> None:
    """Offsets [0, 2, 3, 7] -> [0, 2, 3, 6]: every batch valid alone, index 6 in none."""
    raw[-8:] = np.array([6], dtype="<i8").tobytes()


def _index_out_of_range(raw: bytearray) -> None:
    raw[BODY : BODY + 4] = np.array([ROWS], dtype="<i4").tobytes()


# Changes of the body that leave every range check satisfied: only the chunk's checksum sees them, when read.
TAMPERING = {
    "swapped indices": _swap_indices,
    "moved batch boundary": _move_batch_boundary,
    "index replaced in range": _replace_index_in_range,
    "padding bit": _flip_padding_bit,
}
# Changes of the header or chunk table: the header's checksum refuses them at open.
HEADER_TAMPERING = {"dropped changed": _change_dropped, "chunk table bit": _flip_table_bit}
# Changes with checksums recomputed, as a forger would: the range checks catch them.
FORGERIES = {
    "end past indices": _end_past_indices,
    "last offset short": _last_offset_short,
    "index out of range": _index_out_of_range,
}
TAMPERING.update(HEADER_TAMPERING)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncated", "plan size: expected 216 bytes"),
        ("short_header", "plan header: expected 128 bytes, found 40"),
        ("short_table", r"plan chunk table: expected 16 bytes, found 8 \(truncated\?\)"),
        ("magic", "plan magic/version"),
        ("itemsize", "itemsize: expected 4 or 8, found 3"),
        ("chunk_size", "chunk table: expected a chunk size that is a power of two in 8..1073741824 .* found 3145728"),
        ("body_bytes", "plan chunk table: expected 64 body bytes \\(from its header fields\\), found 72"),
        *(
            (how, r"plan checksum: expected CRC-32 [0-9a-f]{8} \(header\), found [0-9a-f]{8}")
            for how in HEADER_TAMPERING
        ),
    ],
)
def test_open_detects_a_bad_header_or_chunk_table(tmp_path: Path, how: str, message: str) -> None:
    path = written(tmp_path)
    corrupt(path, how)
    with pytest.raises(FormatError, match=message):
        read_plan(path, KEY, ROWS)


@pytest.mark.parametrize("how", [h for h in TAMPERING if h not in HEADER_TAMPERING])
def test_a_changed_body_opens_but_no_batch_is_served_from_it(tmp_path: Path, how: str) -> None:
    """Opening reads the header and chunk table only; the first read of the chunk refuses it, and removes the
    cache file so that the next load rebuilds it."""
    path = written(tmp_path)
    corrupt(path, how)
    plan = read_plan(path, KEY, ROWS)
    assert (len(plan), plan.samples) == (3, 7)
    message = (
        rf"{path}: plan checksum: chunk 0 of 1 \(file bytes {BODY}\.\.{BODY + 63}\): expected CRC-32 [0-9a-f]{{8}} "
        r"\(chunk table\), found [0-9a-f]{8} \(contents changed on disk\); removed it: a cache file, rebuilt"
    )
    with pytest.raises(FormatError, match=message):
        plan.batch(0)
    assert not path.exists()
    with pytest.raises(FormatError, match="plan checksum: chunk 0 of 1"):
        plan.batch(2)  # still refused: the chunk was not found sound
    assert load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN).built


@pytest.mark.parametrize(
    ("how", "batch", "message"),
    [
        ("end past indices", 1, r"plan batch 1: expected offsets 0 <= start <= end <= 7, found 2\.\.9 \(corrupt\)"),
        ("index out of range", 0, r"plan batch 0 indices: expected 0\.\.9, found 1\.\.10 \(corrupt\)"),
    ],
)
def test_forged_batches_fail_the_range_checks_when_read(tmp_path: Path, how: str, batch: int, message: str) -> None:
    path = written(tmp_path)
    corrupt(path, how)
    plan = read_plan(path, KEY, ROWS)
    with pytest.raises(FormatError, match=message):
        plan.batch(batch)
    assert path.exists()  # the checksums match: nothing says the bytes changed on disk


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("end past indices", r"plan offsets: expected non-decreasing from 0 to 7, found 0\.\.7"),
        ("last offset short", r"plan offsets: expected non-decreasing from 0 to 7, found 0\.\.6"),
        ("index out of range", r"plan indices: expected 0\.\.9, found 0\.\.10"),
    ],
)
def test_the_whole_plan_is_checked_when_read_whole(tmp_path: Path, how: str, message: str) -> None:
    path = written(tmp_path)
    corrupt(path, how)
    plan = read_plan(path, KEY, ROWS)
    with pytest.raises(FormatError, match=message):
        plan.check_all()
    with pytest.raises(FormatError, match=message):
        plan.indices  # noqa: B018


def test_checksum_field_itself_changed(tmp_path: Path) -> None:
    path = written(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[CRC_AT] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="plan checksum"):
        read_plan(path, KEY, ROWS)


@pytest.mark.parametrize("version", [1, 2])
def test_plans_of_older_versions_are_not_read(tmp_path: Path, version: int) -> None:
    """Version 1 had no checksum, version 2 one over the whole file; their files are refused by version, and keys
    differ, so they are never looked up."""
    path = written(tmp_path)
    corrupt(path, f"version {version}")
    with pytest.raises(FormatError, match=rf"plan magic/version: expected .* v3, found .* v{version}"):
        read_plan(path, KEY, ROWS)
    assert plan_key({"a": 1}) == hashlib.sha256(b'{"a":1,"plan_version":3}').hexdigest()


def test_load_or_build_rebuilds_a_plan_with_a_bad_header(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = written(tmp_path)
    corrupt(path, "dropped changed")
    with caplog.at_level(logging.WARNING, logger="arrowmt.plans._plan_cache"):
        plan = load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN)
    assert plan.built and plan.indices.tolist() == PLAN.indices.tolist() and plan.dropped == 2
    assert "rebuilding batch plan" in caplog.text and "plan checksum" in caplog.text
    assert not load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN).built


# ---------------------------------------------------------------- a plan of several chunks


def big_plan(rows: int = 1_000_000, size: int = 1000) -> PlanArrays:
    """600,000 int32 indices in batches of ``size``: 2.4 MB of indices, then the offsets (588 chunks)."""
    indices = np.random.default_rng(0).permutation(rows)[:600_000]
    return PlanArrays(indices, np.arange(0, 600_001, size))


@pytest.fixture()
def cold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans not found in the page cache when opened, larger than those checked whole wherever they are: their chunks
    are checked one by one as batches are read."""
    monkeypatch.setattr(_chunks, "body_resident", lambda checks: False)
    monkeypatch.setattr(_plan_cache, "PLAN_SWEEP_BYTES", 0)


def test_a_plan_not_in_the_page_cache_is_checked_whole_at_its_first_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank reads batches from all over its plan, so its pages are never all resident: a plan up to
    PLAN_SWEEP_BYTES is checked whole at its first batch wherever it is (no check per batch after)."""
    monkeypatch.setattr(_chunks, "body_resident", lambda checks: False)
    plan_arrays, rows = big_plan(), 1_000_000
    path = plan_path(tmp_path, KEY)
    write_plan(path, KEY, rows, plan_arrays)
    assert path.stat().st_size <= _plan_cache.PLAN_SWEEP_BYTES
    plan = read_plan(path, KEY, rows)
    assert plan.batch(10).tolist() == plan_arrays.indices[10_000:11_000].tolist()
    assert plan._side.chunks.all_checked and plan._side.contents_checked


def test_a_corrupt_chunk_fails_only_the_batches_in_it(tmp_path: Path, cold: None) -> None:
    """Batches whose bytes lie in other chunks are served; those touching the corrupt chunk never are."""
    plan_arrays, rows = big_plan(), 1_000_000
    path = plan_path(tmp_path, KEY)
    write_plan(path, KEY, rows, plan_arrays)
    body = body_start(path.read_bytes())
    assert path.stat().st_size == body + 2_400_000 + 8 * 601 and body == HEADER_BYTES + 16 + 588 * 4
    assert CHUNK_BYTES == 4096  # chunk k: indices 1024k..1024k+1023; the offsets start in chunk 585
    flip = body + 256 * CHUNK_BYTES + 1000  # in chunk 256: indices 262,144..263,167, batches 262 and 263
    raw = bytearray(path.read_bytes())
    raw[flip] ^= 1
    path.write_bytes(bytes(raw))
    plan = read_plan(path, KEY, rows)
    assert len(plan) == 600 and plan._side.chunks.checked.shape == (588,) and not plan._side.chunks.checked.any()
    assert plan.batch(10).tolist() == plan_arrays.indices[10_000:11_000].tolist()  # chunks 9, 10 (585: offsets)
    assert np.flatnonzero(plan._side.chunks.checked).tolist() == [9, 10, 585]
    assert plan.batch(599).tolist() == plan_arrays.indices[599_000:].tolist()  # chunks 584, 585 (offsets: 587)
    start = body + 256 * CHUNK_BYTES
    message = rf"plan checksum: chunk 256 of 588 \(file bytes {start}\.\.{start + CHUNK_BYTES - 1}\)"
    with pytest.raises(FormatError, match=message):
        plan.batch(262)  # indices 262,000..262,999 straddle chunks 255 and 256
    assert not path.exists()
    assert plan.batch(261).tolist() == plan_arrays.indices[261_000:262_000].tolist()  # chunks 254, 255
    assert not plan._side.chunks.checked[256]
    rebuilt = load_or_build_plan(tmp_path, KEY, rows, big_plan)
    assert rebuilt.built and rebuilt.batch(262).tolist() == plan_arrays.indices[262_000:263_000].tolist()


def test_a_resident_plan_is_checked_whole_at_its_first_batch_and_still_refuses_a_corrupt_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the page cache, the first read of the plan checks every chunk at once (nothing left to check per batch
    after); a corrupt chunk is left unchecked, so only the batches in it are refused, when read."""
    monkeypatch.setattr(_chunks, "body_resident", lambda checks: True)
    monkeypatch.setattr(_chunks, "SWEEP_CHUNKS", 500)  # this plan's 588 chunks are swept (as a 12.6M-pair plan's 12k)
    plan_arrays, rows = big_plan(), 1_000_000
    path = plan_path(tmp_path, KEY)
    write_plan(path, KEY, rows, plan_arrays)
    sound = read_plan(path, KEY, rows)
    assert sound.batch(10).tolist() == plan_arrays.indices[10_000:11_000].tolist()
    assert sound._side.chunks.all_checked  # every chunk, at the first batch
    flip = body_start(path.read_bytes()) + 256 * CHUNK_BYTES + 1000  # chunk 256: batches 262 and 263
    raw = bytearray(path.read_bytes())
    raw[flip] ^= 1
    path.write_bytes(bytes(raw))
    plan = read_plan(path, KEY, rows)
    assert plan.batch(10).tolist() == plan_arrays.indices[10_000:11_000].tolist() and path.exists()
    assert np.flatnonzero(~plan._side.chunks.checked).tolist() == [256]
    with pytest.raises(FormatError, match=r"plan checksum: chunk 256 of 588"):
        plan.batch(263)
    assert not path.exists()  # removed when a batch in it was read: rebuilt next time
    assert plan.batch(261).tolist() == plan_arrays.indices[261_000:262_000].tolist()


def test_opening_reads_only_the_header_and_chunk_table(tmp_path: Path) -> None:
    """Every byte of the body replaced by garbage: the plan still opens (nothing of the body is read), and every
    batch is refused."""
    rows = 1_000_000
    path = plan_path(tmp_path, KEY)
    write_plan(path, KEY, rows, big_plan())
    raw = bytearray(path.read_bytes())
    body = body_start(raw)
    raw[body:] = bytes(len(raw) - body)
    path.write_bytes(bytes(raw))
    plan = read_plan(path, KEY, rows)
    assert (len(plan), plan.samples) == (600, 600_000)
    for b in (0, 300, 599):
        with pytest.raises(FormatError, match="plan checksum: chunk"):
            plan.batch(b)


def test_read_detects_stale_key_rows_and_missing(tmp_path: Path) -> None:
    path = written(tmp_path)
    other = plan_key({"dataset": "other"})
    with pytest.raises(FormatError, match=r"plan key: expected \w+, found \w+ \(stale plan\)"):
        read_plan(path, other, ROWS)
    with pytest.raises(FormatError, match="plan dataset rows: expected 11, found 10"):
        read_plan(path, KEY, ROWS + 1)
    with pytest.raises(FormatError, match="no plan file"):
        read_plan(tmp_path / "nothing.bin", KEY, ROWS)


def test_load_or_build_builds_once_then_maps(tmp_path: Path) -> None:
    calls: list[int] = []

    def build() -> PlanArrays:
        calls.append(1)
        return PLAN

    first = load_or_build_plan(tmp_path, KEY, ROWS, build)
    mtime = plan_path(tmp_path, KEY).stat().st_mtime_ns
    second = load_or_build_plan(tmp_path, KEY, ROWS, build)
    assert (first.built, second.built, len(calls)) == (True, False, 1)
    assert second.indices.tolist() == PLAN.indices.tolist()
    assert plan_path(tmp_path, KEY).stat().st_mtime_ns == mtime


def test_load_or_build_rebuilds_a_corrupt_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    corrupt(written(tmp_path), "truncated")
    with caplog.at_level(logging.WARNING, logger="arrowmt.plans._plan_cache"):
        plan = load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN)
    assert plan.built and plan.offsets.tolist() == [0, 2, 3, 7]
    assert "rebuilding batch plan" in caplog.text


def test_load_or_build_rejects_a_bad_builder(tmp_path: Path) -> None:
    bad = PlanArrays(np.arange(3), np.array([0, 2]))
    with pytest.raises(InvalidParameterError, match="plan offsets: expected a 1-D array from 0 to len"):
        load_or_build_plan(tmp_path, KEY, ROWS, lambda: bad)
    assert not plan_path(tmp_path, KEY).exists()


def slow_build() -> PlanArrays:
    time.sleep(0.3)
    return PLAN


def build_in_child(cache_dir: str) -> tuple[bool, list[int], list[int]]:
    plan = load_or_build_plan(cache_dir, KEY, ROWS, slow_build)
    return plan.built, plan.indices.tolist(), plan.offsets.tolist()


def test_concurrent_builders_share_one_file(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(build_in_child, [str(tmp_path)] * 4)
    assert sum(built for built, _, _ in results) == 1
    assert {(tuple(i), tuple(o)) for _, i, o in results} == {((3, 1, 4, 0, 5, 9, 2), (0, 2, 3, 7))}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [plan_path(tmp_path, KEY).name, plan_path(tmp_path, KEY).name + ".lock"]
    )


# ---------------------------------------------------------------- what is at the plan's path


def test_a_fifo_at_the_plan_path_is_refused_not_opened(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the plan cache must never open one."""
    path = fifo_at(plan_path(tmp_path, KEY))
    with unblocking(path):
        with pytest.raises(FormatError, match=r"plan-\w+\.bin \(plan\): expected a regular file, got a FIFO"):
            read_plan(path, KEY, ROWS)
        with pytest.raises(FormatError, match=r"\(batch plan\): expected a regular file, got a FIFO"):
            load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN)  # refused, not built over
    assert stat.S_ISFIFO(path.lstat().st_mode)


def test_a_fifo_at_the_plan_path_fails_the_sampler_at_once(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [3, 4, 5, 6], [3, 4, 5, 6])
    TokenBatchSampler(open_dataset(corpus), max_tokens=16, seed=1)
    (plan,) = (corpus / CACHE_DIR_NAME).glob("plan-*.bin")
    fifo_at(plan)
    with unblocking(plan), pytest.raises(FormatError, match="expected a regular file, got a FIFO"):
        TokenBatchSampler(open_dataset(corpus), max_tokens=16, seed=1)


def test_a_folder_at_the_plan_path_is_refused(tmp_path: Path) -> None:
    plan_path(tmp_path, KEY).mkdir(parents=True)
    with pytest.raises(FormatError, match=r"\(batch plan\): expected a regular file, got a folder"):
        load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN)


def test_a_sampler_hands_out_the_batches_before_a_corrupt_chunk_then_raises(tmp_path: Path) -> None:
    """Read-ahead looks 16 batches ahead: a corrupt chunk there stops it quietly; the batch itself raises."""
    corpus = lengths_dataset(tmp_path / "c", np.ones(600_000, dtype=np.int64), np.ones(600_000, dtype=np.int64))
    sampler = TokenBatchSampler(open_dataset(corpus), max_tokens=1000, shuffle=False)  # 1,000 pairs per batch
    plan = sampler.plan
    assert (len(plan), plan.samples) == (600, 600_000) and plan.path.stat().st_size > 2 * CHUNK_BYTES
    clean = [plan.batch(b).tolist() for b in range(300)]
    body = body_start(plan.path.read_bytes())
    raw = bytearray(plan.path.read_bytes())
    raw[body + 256 * CHUNK_BYTES + 4 * 1000] ^= 1  # chunk 256 holds indices 262,144..263,167: batches 262, 263
    plan.path.write_bytes(bytes(raw))  # a new file: the plan mapped above keeps the old one
    again = TokenBatchSampler(open_dataset(corpus), max_tokens=1000, shuffle=False)
    assert not again.plan.built and again.prefetch == 8
    ahead = again._prefetcher(again.epoch_batch_ids(), 0)
    assert ahead is not None and ahead.batch_at(261).tolist() == clean[261] and ahead.batch_at(262) is None
    assert not plan.path.exists()  # found corrupt by the read-ahead: removed
    served = []
    removed = r"plan checksum: chunk 256 of 588 .*; it has been removed since it was opened"
    with pytest.raises(FormatError, match=removed):
        for batch in again:
            served.append(batch)
    assert served == clean[:262]
    rebuilt = TokenBatchSampler(open_dataset(corpus), max_tokens=1000, shuffle=False)
    assert rebuilt.plan.built and rebuilt.plan.batch(262).tolist() == clean[262]
