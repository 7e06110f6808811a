"""Tests for arrowmt.plans._plan_cache: file layout, corruption detection, rebuild, and concurrent builders."""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import pickle
import stat
import time
from pathlib import Path

import numpy as np
import pytest

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.format._schema import CACHE_DIR_NAME
from arrowmt.plans._plan_cache import (
    HEADER_BYTES,
    PlanArrays,
    _parse_header,
    contents_checksum,
    load_or_build_plan,
    plan_key,
    plan_path,
    read_plan,
    write_plan,
)
from arrowmt.training._dataset import open_dataset
from arrowmt.training._sampler import TokenBatchSampler
from tests.builders import lengths_dataset
from tests.hostile_files import fifo_at, unblocking

ROWS = 10
KEY = plan_key({"dataset": "abc", "max_tokens": 8})
PLAN = PlanArrays(np.array([3, 1, 4, 0, 5, 9, 2]), np.array([0, 2, 3, 7]), dropped=2)


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
    assert plan.indices.tolist() == [3, 1, 4, 0, 5, 9, 2]
    assert plan.indices.dtype == np.dtype("<i4")
    assert plan.offsets.tolist() == [0, 2, 3, 7]
    assert len(plan) == 3 and plan.dropped == 2 and not plan.built
    assert [plan.batch(b).tolist() for b in range(3)] == [[3, 1], [4], [0, 5, 9, 2]]
    assert not plan.indices.flags.writeable
    # header 128 + 7 int32 padded to 32 bytes + 4 int64 offsets
    assert path.stat().st_size == HEADER_BYTES + 32 + 32
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.indices.tolist() == plan.indices.tolist()


def corrupt(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "truncated":
        raw = raw[:-8]
    elif how == "short_header":
        raw = raw[:40]
    elif how == "magic":
        raw[0:4] = b"JUNK"
    elif how == "itemsize":
        raw[20] = 3
    elif how == "offsets":
        raw[-8:] = np.array([6], dtype="<i8").tobytes()
        reseal(raw)
    elif how == "index_range":
        raw[HEADER_BYTES : HEADER_BYTES + 4] = np.array([ROWS], dtype="<i4").tobytes()
        reseal(raw)
    elif how == "version 1":
        raw[16:20] = np.array([1], dtype="<u4").tobytes()
    elif how in TAMPERING:
        TAMPERING[how](raw)
    path.write_bytes(bytes(raw))


def reseal(raw: bytearray) -> None:
    """Store the checksum of the edited contents, as a deliberate forger would: the range checks must catch it."""
    header = _parse_header(Path("forged"), bytes(raw[:HEADER_BYTES]))
    raw[88:92] = np.array([contents_checksum(header, bytes(raw[HEADER_BYTES:]))], dtype="<u4").tobytes()


def _swap_indices(raw: bytearray) -> None:
    """Swap indices 0 and 1 (3 and 1): still a permutation of valid rows, batch 0 keeps its size."""
    a, b = HEADER_BYTES, HEADER_BYTES + 4
    raw[a : a + 4], raw[b : b + 4] = raw[b : b + 4], raw[a : a + 4]


def _move_batch_boundary(raw: bytearray) -> None:
    """Offsets [0, 2, 3, 7] -> [0, 1, 3, 7]: still non-decreasing from 0 to 7."""
    at = HEADER_BYTES + 32 + 8
    raw[at : at + 8] = np.array([1], dtype="<i8").tobytes()


def _replace_index_in_range(raw: bytearray) -> None:
    """Index 4 (value 5) -> 8: another valid row."""
    at = HEADER_BYTES + 4 * 4
    raw[at : at + 4] = np.array([8], dtype="<i4").tobytes()


def _change_dropped(raw: bytearray) -> None:
    raw[80:88] = np.array([0], dtype="<u8").tobytes()


def _flip_padding_bit(raw: bytearray) -> None:
    raw[HEADER_BYTES + 28] ^= 1  # the padding after 7 int32 indices


# Changes that leave every range check satisfied: only the checksum sees them.
TAMPERING = {
    "swapped indices": _swap_indices,
    "moved batch boundary": _move_batch_boundary,
    "index replaced in range": _replace_index_in_range,
    "dropped changed": _change_dropped,
    "padding bit": _flip_padding_bit,
}


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncated", "plan size: expected 192 bytes"),
        ("short_header", "plan header: expected 128 bytes, found 40"),
        ("magic", "plan magic/version"),
        ("itemsize", "itemsize: expected 4 or 8, found 3"),
        ("offsets", "plan offsets"),
        ("index_range", r"plan indices: expected 0\.\.9, found 0\.\.10"),
    ],
)
def test_read_detects_corruption(tmp_path: Path, how: str, message: str) -> None:
    path = written(tmp_path)
    corrupt(path, how)
    with pytest.raises(FormatError, match=message):
        read_plan(path, KEY, ROWS)


@pytest.mark.parametrize("how", list(TAMPERING))
def test_checksum_detects_contents_changed_within_range(tmp_path: Path, how: str) -> None:
    path = written(tmp_path)
    corrupt(path, how)
    with pytest.raises(FormatError, match=r"plan checksum: expected CRC-32 [0-9a-f]{8} \(header\), found [0-9a-f]{8}"):
        read_plan(path, KEY, ROWS)


def test_checksum_field_itself_changed(tmp_path: Path) -> None:
    path = written(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[88] ^= 0x40  # the CRC-32 follows the 88 bytes of fields
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="plan checksum"):
        read_plan(path, KEY, ROWS)


def test_version_1_plans_are_not_read(tmp_path: Path) -> None:
    """Version 1 had no checksum; its files are refused by version, and keys differ, so they are never looked up."""
    path = written(tmp_path)
    corrupt(path, "version 1")
    with pytest.raises(FormatError, match=r"plan magic/version: expected .* v2, found .* v1"):
        read_plan(path, KEY, ROWS)
    assert plan_key({"a": 1}) == hashlib.sha256(b'{"a":1,"plan_version":2}').hexdigest()


def test_load_or_build_rebuilds_a_tampered_plan(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = written(tmp_path)
    corrupt(path, "swapped indices")
    with caplog.at_level(logging.WARNING, logger="arrowmt.plans._plan_cache"):
        plan = load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN)
    assert plan.built and plan.indices.tolist() == PLAN.indices.tolist()
    assert "rebuilding batch plan" in caplog.text and "plan checksum" in caplog.text
    assert not load_or_build_plan(tmp_path, KEY, ROWS, lambda: PLAN).built


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
