"""The way back: arrowmt folders written from pyarrow tables, HF datasets, polars frames and table files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import arrowmt
from arrowmt import (
    Dictionary,
    FormatError,
    InputDataError,
    InvalidParameterError,
    Manifest,
    OutputExistsError,
    Split,
    convert_fairseq,
    convert_table,
    open_split,
    verify_dataset,
)
from arrowmt.testing import main, read_table_file
from tests.conftest import fairseq_fixture

COLUMNS = ("source", "target")
IDS = pa.list_(pa.int32())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("from-table") / "corpus"
    convert_fairseq(fairseq_fixture() / "mmap", out, progress=False)
    return out


def read_split(corpus: Path, split: str) -> pa.Table:
    with pa.memory_map(str(corpus / f"{split}.arrow")) as source:
        return ipc.open_stream(source).read_all()


def rows_of(split: Split, column: str) -> list[list[int]]:
    return [split.row_array(column, i).tolist() for i in range(len(split))]


def small_table(source: list[list[int]], target: list[list[int]] | None = None) -> pa.Table:
    target = [[5, 2]] * len(source) if target is None else target
    return pa.table({"source": pa.array(source, IDS), "target": pa.array(target, IDS)})


def test_pyarrow_table_round_trip_keeps_rows_and_dictionaries(corpus: Path, tmp_path: Path) -> None:
    tables = {split: read_split(corpus, split) for split in ("train", "valid")}
    manifest = convert_table(tables, tmp_path / "back", like=corpus, progress=False)
    assert sorted(manifest.files) == ["train", "valid"]
    assert manifest.source_format == "table"
    assert manifest.provenance["converter"] == "arrowmt.convert_table"
    assert manifest.provenance["rows"] == {split: t.num_rows for split, t in tables.items()}
    assert manifest.provenance["like"] == str(corpus)
    assert manifest.provenance["like_provenance"] == Manifest.load(corpus).provenance
    assert manifest.languages == {"source": "de", "target": "en"}
    for name in ("dict.de.txt", "dict.en.txt"):
        assert (tmp_path / "back" / name).read_bytes() == (corpus / name).read_bytes()
    for split in ("train", "valid"):
        original, back = open_split(corpus, split), open_split(tmp_path / "back", split)
        assert back.special_ids == original.special_ids
        for column in COLUMNS:
            assert np.array_equal(back.lengths(column), original.lengths(column))
            flat = np.concatenate([back.row_array(column, i) for i in range(len(back))])
            assert np.array_equal(flat, np.concatenate([original.row_array(column, i) for i in range(len(original))]))
            assert (
                back.metadata.columns[column].dictionary_sha256 == original.metadata.columns[column].dictionary_sha256
            )
    assert verify_dataset(tmp_path / "back").ok


def test_hf_filtered_and_shuffled_dataset_is_written_in_its_order(corpus: Path, tmp_path: Path) -> None:
    hf = pytest.importorskip("arrowmt.integrations.hf")
    ds = hf.load_split(corpus, "valid")
    kept = ds.filter(lambda b: [len(s) <= 10 for s in b["source"]], batched=True, keep_in_memory=True)
    shuffled = kept.shuffle(seed=3, keep_in_memory=True)
    assert 0 < len(shuffled) < len(ds)
    convert_table(shuffled, tmp_path / "short", like=corpus, split="valid", progress=False)
    back = open_split(tmp_path / "short", "valid")
    assert rows_of(back, "source") == shuffled["source"]
    assert rows_of(back, "target") == shuffled["target"]
    assert back.lengths("source").max() <= 10
    assert not list(corpus.glob("cache-*"))  # keep_in_memory: nothing written into the corpus


def test_dataset_dict_writes_every_split(corpus: Path, tmp_path: Path) -> None:
    hf = pytest.importorskip("arrowmt.integrations.hf")
    manifest = convert_table(hf.load_dataset_dict(corpus), tmp_path / "all", like=corpus, progress=False)
    assert manifest.splits() == Manifest.load(corpus).splits()
    assert {n: e.rows for n, e in manifest.files.items()} == {n: e.rows for n, e in Manifest.load(corpus).files.items()}


def test_explicit_languages_and_dictionaries_path_or_object(corpus: Path, tmp_path: Path) -> None:
    de = Dictionary.load(corpus / "dict.de.txt")
    table = small_table([[10, 11, 2], [12, 2]])
    manifest = convert_table(
        table,
        tmp_path / "out",
        languages={"source": "de", "target": "en"},
        dictionaries={"source": de, "target": corpus / "dict.en.txt"},
        progress=False,
    )
    assert manifest.dictionaries == {"de": "dict.de.txt", "en": "dict.en.txt"}
    assert Dictionary.load(tmp_path / "out" / "dict.de.txt") == de
    assert (tmp_path / "out" / "dict.en.txt").read_bytes() == (corpus / "dict.en.txt").read_bytes()
    assert rows_of(open_split(tmp_path / "out"), "source") == [[10, 11, 2], [12, 2]]


def test_monolingual_tokens_and_any_integer_list_type(tmp_path: Path) -> None:
    dictionary = Dictionary([*Dictionary().symbols, "a", "b"])
    chunks = pa.chunked_array(
        [pa.array([[4, 5, 2]], pa.large_list(pa.uint8())), pa.array([[2], [5, 2]], pa.large_list(pa.uint8()))]
    )
    table = pa.table({"tokens": chunks, "note": ["x", "y", "z"]})  # extra columns are ignored
    convert_table(
        table.slice(1), tmp_path / "lm", languages={"tokens": None}, dictionaries={"tokens": dictionary}, progress=False
    )
    split = open_split(tmp_path / "lm")
    assert split.columns == ("tokens",)
    assert rows_of(split, "tokens") == [[2], [5, 2]]  # an empty line is </s> alone
    assert (tmp_path / "lm" / "dict.txt").is_file()


def test_polars_dataframe_through_the_arrow_stream_interface(corpus: Path, tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    df = pl.from_arrow(read_split(corpus, "valid")).filter(pl.col("target").list.len() > 12)
    convert_table(df, tmp_path / "pl", like=corpus, progress=False)
    back = open_split(tmp_path / "pl")
    assert len(back) == df.height > 0
    assert rows_of(back, "target") == df["target"].to_list()


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ([[4, 2], [4, 99999, 2]], r"table 'train': row 1 \(source\): token id 99999 outside the dictionary"),
        ([[4, 2], [-1, 2]], r"row 1 \(source\): token id -1 outside the dictionary"),
        ([[4, 2], None], r"table 'train' column 'source': row 1 is null"),
        ([[4, 2], [4, None, 2]], r"table 'train' column 'source': row 1 holds a null id"),
    ],
)
def test_bad_ids_are_refused_naming_the_row(corpus: Path, tmp_path: Path, source: list, message: str) -> None:
    with pytest.raises(InputDataError, match=message):
        convert_table(small_table(source), tmp_path / "bad", like=corpus, progress=False)
    assert not (tmp_path / "bad" / "arrowmt.json").exists()


def test_schema_problems_are_refused(corpus: Path, tmp_path: Path) -> None:
    floats = pa.table({"source": pa.array([[4.0, 2.0]]), "target": pa.array([[4, 2]], IDS)})
    with pytest.raises(
        InputDataError, match=r"column 'source': expected a list of integers .* got type list<item: double>"
    ):
        convert_table(floats, tmp_path / "a", like=corpus, progress=False)
    with pytest.raises(InputDataError, match=r"expected columns \['source', 'target'\], missing \['target'\]"):
        convert_table(pa.table({"source": pa.array([[4, 2]], IDS)}), tmp_path / "b", like=corpus, progress=False)


def test_parameter_problems_are_refused(corpus: Path, tmp_path: Path) -> None:
    table = small_table([[4, 2]])
    en = corpus / "dict.en.txt"
    with pytest.raises(InvalidParameterError, match="got both"):
        convert_table(table, tmp_path / "o", like=corpus, languages={"source": "de", "target": "en"}, progress=False)
    with pytest.raises(InvalidParameterError, match="expected both"):
        convert_table(table, tmp_path / "o", languages={"source": "de", "target": "en"}, progress=False)
    with pytest.raises(InvalidParameterError, match="a different language per column"):
        convert_table(table, tmp_path / "o", languages={"source": "en", "target": "en"},
                      dictionaries={"source": en, "target": en}, progress=False)  # fmt: skip
    with pytest.raises(
        InvalidParameterError, match=r"languages: expected columns \['source', 'target'\] or \['tokens'\]"
    ):
        convert_table(table, tmp_path / "o", languages={"src": "de"}, dictionaries={"src": en}, progress=False)
    with pytest.raises(InvalidParameterError, match=r"dictionaries: expected one per column"):
        convert_table(table, tmp_path / "o", languages={"tokens": "en"}, dictionaries={"source": en}, progress=False)
    for name in ("../x", "a/b", "", ".hidden"):
        with pytest.raises(InvalidParameterError, match=r"name: expected a plain file name ending in '\.arrow'"):
            convert_table({name: table}, tmp_path / "o", like=corpus, progress=False)
    with pytest.raises(InvalidParameterError, match="got list"):
        convert_table([[4, 2]], tmp_path / "o", like=corpus, progress=False)
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_existing_output_needs_overwrite_and_survives_a_failed_rewrite(corpus: Path, tmp_path: Path) -> None:
    convert_table(small_table([[4, 2]]), tmp_path / "o", like=corpus, progress=False)
    before = sorted(p.name for p in (tmp_path / "o").iterdir())
    with pytest.raises(InputDataError, match="outside the dictionary"):
        convert_table(small_table([[10**6, 2]]), tmp_path / "o", like=corpus, overwrite=True, progress=False)
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == before
    assert rows_of(open_split(tmp_path / "o"), "source") == [[4, 2]]
    with pytest.raises(OutputExistsError, match="overwrite"):
        convert_table(small_table([[5, 2]]), tmp_path / "o", like=corpus, progress=False)
    convert_table(small_table([[5, 2]]), tmp_path / "o", like=corpus, overwrite=True, progress=False)
    assert rows_of(open_split(tmp_path / "o"), "source") == [[5, 2]]


def test_like_folder_with_a_path_as_dictionary_name_is_refused(corpus: Path, tmp_path: Path) -> None:
    like = tmp_path / "like"
    convert_table(small_table([[4, 2]]), like, like=corpus, progress=False)
    manifest = Manifest.load(like)
    manifest.dictionaries["de"] = str(corpus / "dict.de.txt")
    manifest.save(like)
    with pytest.raises(FormatError, match=r"dictionaries\['de'\]: expected a plain file name"):
        convert_table(small_table([[4, 2]]), tmp_path / "o", like=like, progress=False)


def test_read_table_file_parquet_ipc_file_and_stream(corpus: Path, tmp_path: Path) -> None:
    table = read_split(corpus, "valid")
    pq.write_table(table, tmp_path / "t.parquet")
    with pa.OSFile(str(tmp_path / "t.arrows"), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    for name in ("t.parquet", "t.arrows"):
        assert read_table_file(tmp_path / name).select(list(COLUMNS)).equals(table.select(list(COLUMNS)))
    assert read_table_file(corpus / "valid.arrow").equals(table)
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputDataError, match=r"junk\.parquet: expected a Parquet file or an Arrow IPC"):
        read_table_file(tmp_path / "junk.parquet")
    with pytest.raises(InputDataError, match=r"missing\.parquet: cannot read"):
        read_table_file(tmp_path / "missing.parquet")
    os.mkfifo(tmp_path / "pipe.arrow")  # opening it would block until a writer came
    with pytest.raises(InputDataError, match=r"pipe\.arrow: expected a regular file .*, got a FIFO"):
        read_table_file(tmp_path / "pipe.arrow")
    with pytest.raises(InputDataError, match=r"expected a regular file \(Parquet or Arrow\), got a folder"):
        read_table_file(tmp_path)


def test_read_table_file_refuses_a_corrupt_ipc_stream(corpus: Path, tmp_path: Path) -> None:
    data = bytearray((corpus / "valid.arrow").read_bytes())
    table = read_split(corpus, "valid")
    offsets = table.column("source").chunk(0).offsets.to_numpy()
    where = bytes(data).find(offsets[:8].astype("<i4").tobytes())
    assert where > 0
    data[where + 8 : where + 12] = np.array([10**8], dtype="<i4").tobytes()  # one offset far past the values
    (tmp_path / "bad.arrow").write_bytes(bytes(data))
    with pytest.raises(InputDataError, match=r"bad\.arrow: expected a Parquet file or an Arrow IPC file or stream"):
        read_table_file(tmp_path / "bad.arrow")


def test_cli_convert_table_names_splits_by_file_stem(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    table = read_split(corpus, "valid")
    pq.write_table(table.slice(0, 100), tmp_path / "train.parquet")
    pq.write_table(table.slice(100, 20), tmp_path / "valid.parquet")
    assert main(["convert", "table", str(tmp_path / "out"), str(tmp_path / "train.parquet"),
                 str(tmp_path / "valid.parquet"), "--like", str(corpus), "--quiet"]) == 0  # fmt: skip
    assert "wrote 2 split file(s), 120 rows" in capsys.readouterr().out
    assert {n: e.rows for n, e in Manifest.load(tmp_path / "out").files.items()} == {"train": 100, "valid": 20}
    assert main(["convert", "table", str(tmp_path / "one"), str(tmp_path / "valid.parquet"), "--split", "test",
                 "--like", str(corpus), "--quiet"]) == 0  # fmt: skip
    assert Manifest.load(tmp_path / "one").splits() == ["test"]
    code = main(["convert", "table", str(tmp_path / "two"), str(tmp_path / "train.parquet"),
                 str(tmp_path / "valid.parquet"), "--split", "x", "--like", str(corpus)])  # fmt: skip
    assert code == 2
    assert "--split: expected a single FILE, got 2 files" in capsys.readouterr().err


def test_public_api_exports_convert_table() -> None:
    assert arrowmt.convert_table is convert_table
    assert "convert_table" in arrowmt.__all__
