"""Split files are plain Arrow IPC streams: pyarrow and duckdb read them without arrowmt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest

from arrowmt import ArrowMTDataset, convert_fairseq, open_dataset
from tests.conftest import fairseq_fixture

duckdb = pytest.importorskip("duckdb")

SPLITS = ("train", "valid", "test")
COLUMNS = ("source", "target")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("interop") / "corpus"
    convert_fairseq(fairseq_fixture() / "mmap", out, progress=False)
    return out


@pytest.fixture()
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    yield connection
    connection.close()


def read_plain(path: Path) -> pa.Table:
    """What a user without arrowmt writes: memory-map the file, read the IPC stream."""
    with pa.memory_map(str(path)) as source:
        return ipc.open_stream(source).read_all()


def all_values(ds: ArrowMTDataset, column: str) -> np.ndarray:
    return np.concatenate([ds.row(column, i).numpy() for i in range(len(ds))])


@pytest.mark.parametrize("split", SPLITS)
def test_pyarrow_reads_split_zero_copy(corpus: Path, split: str) -> None:
    allocated = pa.total_allocated_bytes()
    table = read_plain(corpus / f"{split}.arrow")
    assert pa.total_allocated_bytes() == allocated
    ds = open_dataset(corpus, split)
    assert table.num_rows == len(ds)
    assert table.column_names == list(COLUMNS)
    meta = json.loads(table.schema.metadata[b"arrowmt"])
    assert meta["rows"] == len(ds)
    for column in COLUMNS:
        assert table.schema.field(column).type == pa.list_(pa.int32())
        lengths = pc.list_value_length(table.column(column)).to_numpy()
        np.testing.assert_array_equal(lengths, ds.lengths(column))
        values = pc.list_flatten(table.column(column)).to_numpy()
        np.testing.assert_array_equal(values, all_values(ds, column))
        assert meta["columns"][column]["tokens"] == values.size


def test_pyarrow_row_equals_arrowmt_row(corpus: Path) -> None:
    table = read_plain(corpus / "train.arrow")
    ds = open_dataset(corpus, "train")
    for i in (0, 1, 12345, len(ds) - 1):
        for column in COLUMNS:
            assert table.column(column)[i].as_py() == ds.row(column, i).tolist()


@pytest.mark.parametrize("split", SPLITS)
def test_duckdb_per_row_lengths(corpus: Path, con: duckdb.DuckDBPyConnection, split: str) -> None:
    table = read_plain(corpus / f"{split}.arrow")
    numbered = table.append_column("row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    con.register("corpus", numbered)
    got = con.execute("SELECT len(source) AS s, len(target) AS t FROM corpus ORDER BY row").fetchnumpy()
    ds = open_dataset(corpus, split)
    np.testing.assert_array_equal(got["s"], ds.lengths("source"))
    np.testing.assert_array_equal(got["t"], ds.lengths("target"))


def test_duckdb_totals_and_length_histogram(corpus: Path, con: duckdb.DuckDBPyConnection) -> None:
    con.register("train", read_plain(corpus / "train.arrow"))
    ds = open_dataset(corpus, "train")
    totals = con.execute("SELECT count(*), sum(len(source)), sum(len(target)) FROM train").fetchone()
    assert totals == (len(ds), int(ds.lengths("source").sum()), int(ds.lengths("target").sum()))
    rows = con.execute("SELECT len(target) AS n, count(*) AS c FROM train GROUP BY n ORDER BY n").fetchall()
    histogram = np.bincount(ds.lengths("target"))
    assert rows == [(n, int(histogram[n])) for n in np.flatnonzero(histogram)]


def test_duckdb_token_counts_match_bincount(corpus: Path, con: duckdb.DuckDBPyConnection) -> None:
    con.register("valid", read_plain(corpus / "valid.arrow"))
    query = "SELECT tok, count(*) AS c FROM (SELECT unnest(source) AS tok FROM valid) GROUP BY tok ORDER BY tok"
    rows = con.execute(query).fetchall()
    counts = np.bincount(all_values(open_dataset(corpus, "valid"), "source"))
    assert rows == [(int(t), int(counts[t])) for t in np.flatnonzero(counts)]


def test_duckdb_streams_record_batch_reader(corpus: Path, con: duckdb.DuckDBPyConnection) -> None:
    ds = open_dataset(corpus, "train")
    with pa.memory_map(str(corpus / "train.arrow")) as source:
        con.register("stream", ipc.open_stream(source))
        got = con.execute("SELECT count(*), max(len(source)), min(len(target)) FROM stream").fetchone()
    assert got == (len(ds), int(ds.lengths("source").max()), int(ds.lengths("target").min()))
