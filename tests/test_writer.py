"""The writer's batch sizing (pure arithmetic, exact values) and what it writes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import arrowmt.writing._writer as writer
from arrowmt import InputDataError, InvalidParameterError
from arrowmt.testing import ColumnData, Ragged, SplitFile, choose_rows_per_batch, read_indexed, write_split
from tests.conftest import fairseq_fixture


def _offsets(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _column(ragged: Ragged, vocab: int = 100) -> ColumnData:
    return ColumnData(ragged, "xx", "dict.xx.txt", "0" * 64, vocab, "test input")


@pytest.mark.parametrize(
    ("lengths", "requested", "limit", "expected"),
    [
        ([5, 5, 5, 5], 4, 20, 4),  # all four rows fit exactly
        ([5, 5, 5, 5], 4, 19, 2),  # 20 > 19: halve to 2 rows (10 values)
        ([5, 5, 5, 6], 4, 10, 1),  # rows 2-3 hold 11 > 10: halve again
        ([1] * 10, 8, 5, 4),  # 8 -> 4 rows (4 values); the last batch holds 2
        ([3, 0, 0, 3], 3, 3, 3),  # windows start at multiples of 3: [3,0,0] and [3] hold 3 each
        ([3, 0, 1, 3], 3, 3, 1),  # [3,0,1] holds 4; 3 // 2 = 1 row per batch
        ([], 65536, 10, 65536),  # empty split: nothing to split
    ],
)
def test_choose_rows_per_batch_exact(lengths: list[int], requested: int, limit: int, expected: int) -> None:
    assert choose_rows_per_batch([_offsets(lengths)], requested, limit) == expected


def test_choose_rows_per_batch_considers_every_column() -> None:
    assert choose_rows_per_batch([_offsets([1, 1, 1, 1]), _offsets([1, 1, 9, 1])], 4, 10) == 2


def test_single_row_over_limit_and_bad_request() -> None:
    with pytest.raises(InputDataError, match="a single row holds 11 tokens; at most 10"):
        choose_rows_per_batch([_offsets([2, 11])], 4, 10)
    with pytest.raises(InvalidParameterError, match="rows_per_batch: expected >= 1, got 0"):
        choose_rows_per_batch([_offsets([1])], 0)


def test_list_value_limit_splits_record_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column past the per-array value limit (2^31-1 in real life) is cut into smaller batches."""
    ragged = read_indexed(fairseq_fixture() / "mmap" / "valid.de-en.de")
    monkeypatch.setattr(writer, "MAX_LIST_VALUES", 1000)
    meta = write_split(tmp_path / "valid.arrow", "valid", {"source": _column(ragged, 18728)})
    assert meta.rows_per_batch == 64  # 65536 halved until every 64-row window holds <= 1000 values
    with pa.memory_map(str(tmp_path / "valid.arrow")) as source:
        batches = list(ipc.open_stream(source))
    assert max(len(b.column(0).values) for b in batches) <= 1000
    split = SplitFile(tmp_path / "valid.arrow")
    for i in range(len(ragged)):
        np.testing.assert_array_equal(split.row("source", i), ragged.row(i))


def test_bad_ids_name_origin_row_and_range(tmp_path: Path) -> None:
    ragged = Ragged.from_rows([[4, 5, 2], [7, 100, 2]])
    with pytest.raises(InputDataError, match=r"test input: row 1 \(source\): token id 100 .* \(expected 0\.\.99\)"):
        write_split(tmp_path / "x.arrow", "x", {"source": _column(ragged)})
    negative = Ragged.from_rows([[4, -1, 2]])
    with pytest.raises(InputDataError, match=r"row 0 \(source\): token id -1"):
        write_split(tmp_path / "x.arrow", "x", {"source": _column(negative)})
    assert not (tmp_path / "x.arrow").exists()
    assert list(tmp_path.iterdir()) == []


def test_row_count_mismatch_and_no_columns(tmp_path: Path) -> None:
    cols = {"source": _column(Ragged.from_rows([[1], [2]])), "target": _column(Ragged.from_rows([[1]]))}
    with pytest.raises(InputDataError, match=r"source\): 2 rows, test input \(target\): 1 rows"):
        write_split(tmp_path / "x.arrow", "x", cols)
    with pytest.raises(InvalidParameterError, match="at least one column"):
        write_split(tmp_path / "x.arrow", "x", {})


def test_empty_split_round_trips(tmp_path: Path) -> None:
    meta = write_split(tmp_path / "e.arrow", "e", {"tokens": _column(Ragged.from_rows([]))})
    assert meta.rows == 0
    split = SplitFile(tmp_path / "e.arrow")
    assert len(split) == 0 and split.lengths("tokens").shape == (0,)


def test_ragged_rejects_inconsistent_offsets() -> None:
    with pytest.raises(InvalidParameterError, match="offsets: expected to start at 0 and end at len"):
        Ragged(np.array([0, 2, 5]), np.zeros(4, dtype=np.int32))
    with pytest.raises(InvalidParameterError, match="1-D array of length >= 1"):
        Ragged(np.zeros((0,), dtype=np.int64), np.zeros(0, dtype=np.int32))
