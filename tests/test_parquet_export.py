"""``arrowmt export parquet``: Parquet files duckdb and polars scan lazily, and the documented one-liners."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arrowmt
from arrowmt import (
    Dictionary,
    Manifest,
    OutputExistsError,
    convert_fairseq,
    convert_table,
    export_parquet,
    open_split,
    verify_dataset,
)
from arrowmt.testing import main
from tests.conftest import ROOT, fairseq_fixture

duckdb = pytest.importorskip("duckdb")

INTEROP = ROOT / "docs" / "interop.md"
DOC_SECTIONS = ("## SQL and dataframes", "## The way back")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("parquet") / "corpus"
    convert_fairseq(fairseq_fixture() / "mmap", out, progress=False)
    return out


@pytest.fixture(scope="module")
def exported(corpus: Path) -> Path:
    out = corpus.parent / "exported"
    export_parquet(corpus, out, text=True, progress=False)
    return out


def test_every_split_is_one_parquet_file_with_ids_tokens_and_text(corpus: Path, exported: Path) -> None:
    splits = Manifest.load(corpus).splits()
    assert sorted(p.name for p in exported.glob("*.parquet")) == sorted(f"{s}.parquet" for s in splits)
    assert (exported / "dict.de.txt").read_bytes() == (corpus / "dict.de.txt").read_bytes()
    dicts = {"source": Dictionary.load(corpus / "dict.de.txt"), "target": Dictionary.load(corpus / "dict.en.txt")}
    for split in splits:
        table = pq.read_table(exported / f"{split}.parquet")
        ds = open_split(corpus, split)
        assert table.column_names == ["id", "source", "target", "source_text", "target_text"]
        assert table.column("id").to_pylist() == list(range(len(ds)))
        for column, dictionary in dicts.items():
            assert table.schema.field(column).type == pa.list_(pa.int32())
            rows = table.column(column).to_pylist()
            texts = table.column(f"{column}_text").to_pylist()
            for i in (0, 1, len(ds) // 2, len(ds) - 1):
                ids = ds.row_array(column, i)
                assert rows[i] == ids.tolist()
                assert texts[i] == dictionary.decode(ids[ids != dictionary.eos])
            assert np.array_equal(np.array([len(r) for r in rows]), ds.lengths(column))


def test_without_text_only_ids_and_one_row_group_per_record_batch(corpus: Path, tmp_path: Path) -> None:
    files = export_parquet(corpus, tmp_path / "ids", progress=False)
    assert [f.name for f in files] == [f"{s}.parquet" for s in Manifest.load(corpus).splits()]
    meta = pq.ParquetFile(tmp_path / "ids" / "train.parquet").metadata
    assert pq.read_schema(tmp_path / "ids" / "train.parquet").names == ["id", "source", "target"]
    shard = open_split(corpus, "train").shards[0]
    assert meta.num_row_groups == -(-len(shard) // shard.rows_per_batch)


def test_shards_are_joined_in_order_with_global_ids(corpus: Path, tmp_path: Path) -> None:
    valid = open_split(corpus, "valid")
    first = pa.table({c: pa.array([valid.row_array(c, i).tolist() for i in range(5)], pa.list_(pa.int32()))
                      for c in ("source", "target")})  # fmt: skip
    second = pa.table({c: pa.array([valid.row_array(c, i).tolist() for i in range(5, 8)], pa.list_(pa.int32()))
                       for c in ("source", "target")})  # fmt: skip
    convert_table({"train": first, "train1": second}, tmp_path / "sharded", like=corpus, progress=False)
    assert open_split(tmp_path / "sharded").shard_names == ["train", "train1"]
    export_parquet(tmp_path / "sharded", tmp_path / "out", progress=False)
    table = pq.read_table(tmp_path / "out" / "train.parquet")
    assert table.column("id").to_pylist() == list(range(8))
    assert table.column("source").to_pylist() == [valid.row_array("source", i).tolist() for i in range(8)]


def test_existing_output_needs_overwrite_and_other_files_stay(corpus: Path, tmp_path: Path) -> None:
    export_parquet(corpus, tmp_path / "o", progress=False)
    with pytest.raises(OutputExistsError, match="overwrite"):
        export_parquet(corpus, tmp_path / "o", progress=False)
    (tmp_path / "o" / "mine.parquet").write_bytes(b"not arrowmt's")
    (tmp_path / "o" / "train.parquet").write_bytes(b"replaced")
    export_parquet(corpus, tmp_path / "o", overwrite=True, progress=False)
    assert (tmp_path / "o" / "mine.parquet").read_bytes() == b"not arrowmt's"
    assert pq.read_table(tmp_path / "o" / "train.parquet").num_rows == len(open_split(corpus, "train"))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_cli_export_parquet(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["export", "parquet", str(corpus), str(tmp_path / "cli"), "--quiet"]) == 0
    assert f"wrote 3 Parquet file(s) to {tmp_path / 'cli'}" in capsys.readouterr().out
    assert main(["export", "parquet", str(corpus), str(tmp_path / "cli"), "--quiet"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert arrowmt.export_parquet is export_parquet


def doc_blocks() -> list[tuple[str, str]]:
    """(language, code) of every fenced block in the interop sections this test covers, in order."""
    text = INTEROP.read_text(encoding="utf-8")
    blocks = []
    for heading in DOC_SECTIONS:
        start = text.index(heading)
        end = text.find("\n## ", start + 1)
        blocks += FENCE.findall(text[start : end if end > 0 else None])
    return blocks


@pytest.fixture()
def in_folder_with_corpus(corpus: Path, tmp_path: Path) -> Iterator[Path]:
    """A working folder holding ``corpus`` (a symlink to the converted fixture), as the docs assume."""
    (tmp_path / "corpus").symlink_to(corpus)
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


def test_documented_one_liners_run(in_folder_with_corpus: Path, corpus: Path) -> None:
    pytest.importorskip("polars")
    pytest.importorskip("datasets")
    blocks = doc_blocks()
    assert [lang for lang, _ in blocks] == ["bash", "python", "python", "python", "bash", "python"]
    namespace: dict[str, object] = {}
    for lang, code in blocks:
        if lang == "bash":
            for line in code.strip().splitlines():
                words = shlex.split(line, comments=True)
                assert words[0] == "arrowmt"
                assert main([*words[1:], "--quiet"]) == 0, line
        else:
            exec(compile(code, str(INTEROP), "exec"), namespace)
    assert namespace["suspicious"] and all(len(row) == 3 for row in namespace["suspicious"])
    assert namespace["dogs"].height > 0
    assert namespace["df"].height == len(open_split(corpus, "train"))
    for folder in ("filtered", "filtered-polars", "filtered-hf"):
        assert verify_dataset(in_folder_with_corpus / folder).ok
        train = open_split(in_folder_with_corpus / folder, "train")
        assert 0 < len(train) < len(open_split(corpus, "train"))
        assert train.lengths("source").max() <= 25
    assert not list(corpus.glob("cache-*"))
