"""The Hugging Face bridge on a real converted corpus (Multi30k de-en), with the real ``datasets``."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from arrowmt.converters._fairseq_binary import read_indexed
from arrowmt.converters._fairseq_folder import convert_fairseq

from arrowmt._errors import MissingDependencyError, OutputExistsError
from arrowmt.format._manifest import Manifest, file_entry, split_path
from arrowmt.format._ragged import Ragged
from arrowmt.format._vocab import Dictionary
from arrowmt.format._writer import ColumnData, write_split
from arrowmt.integrations import hf
from arrowmt.training._dataset import ArrowMTDataset, open_dataset

datasets = pytest.importorskip("datasets")

FIXTURE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "fairseq-multi30k-de-en" / "mmap"
SPLIT_ROWS = {"train": 29000, "valid": 1014, "test": 1000}
SHARD_BOUNDS = ((0, 10000), (10000, 20000), (20000, 29000))
LANGS = {"source": "de", "target": "en"}
REFERENCE_DE = "zwei junge weiße männer sind im freien in der nähe vieler büsche ."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared fixture converted by ``convert_fairseq``: one file per split."""
    out = tmp_path_factory.mktemp("hf") / "corpus"
    convert_fairseq(FIXTURE, out, progress=False)
    return out


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The train split written as three shards ``train``, ``train1``, ``train2`` (small record batches)."""
    out = tmp_path_factory.mktemp("hf") / "sharded"
    out.mkdir()
    dicts = {lang: _copy_dictionary(lang, out) for lang in LANGS.values()}
    manifest = Manifest(
        languages=dict(LANGS), dictionaries={lang: f"dict.{lang}.txt" for lang in dicts}, source_format="test"
    )
    full = {role: read_indexed(FIXTURE / f"train.de-en.{lang}") for role, lang in LANGS.items()}
    for k, (lo, hi) in enumerate(SHARD_BOUNDS):
        name = "train" if k == 0 else f"train{k}"
        columns = {role: _column(_rows(full[role], lo, hi), lang, dicts[lang]) for role, lang in LANGS.items()}
        meta = write_split(split_path(out, name), name, columns, rows_per_batch=4096)
        manifest.files[name] = file_entry(split_path(out, name), meta.rows)
    manifest.save(out)
    return out


def _copy_dictionary(lang: str, out: Path) -> Dictionary:
    shutil.copyfile(FIXTURE / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
    return Dictionary.load(out / f"dict.{lang}.txt")


def _rows(ragged: Ragged, lo: int, hi: int) -> Ragged:
    offsets = ragged.offsets[lo : hi + 1]
    return Ragged(offsets - offsets[0], ragged.values[int(offsets[0]) : int(offsets[-1])])


def _column(ragged: Ragged, lang: str, dictionary: Dictionary) -> ColumnData:
    return ColumnData(ragged, lang, f"dict.{lang}.txt", dictionary.sha256(), len(dictionary), f"train.{lang}")


def _hf_column(ds: datasets.Dataset, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, flat values) of a whole HF column, read through Arrow."""
    chunked = ds.data.table.column(column)
    lengths = pc.list_value_length(chunked).to_numpy()
    values = pc.list_flatten(chunked).to_numpy()
    return lengths.astype(np.int64), values


def _reference(lengths_values: Ragged) -> tuple[np.ndarray, np.ndarray]:
    return lengths_values.lengths(), np.asarray(lengths_values.values)


def _assert_same_rows(ds: datasets.Dataset, ref: ArrowMTDataset) -> None:
    """Every row of every column equal, through Arrow in bulk and through ``ds[i]`` for a sample."""
    assert len(ds) == len(ref)
    for column in ref.columns:
        lengths, values = _hf_column(ds, column)
        np.testing.assert_array_equal(lengths, ref.lengths(column))
        flat = np.concatenate([ref.row(column, i).numpy() for i in range(len(ref))])
        np.testing.assert_array_equal(values, flat)
    for i in [*np.random.default_rng(0).integers(0, len(ref), 20).tolist(), 0, len(ref) - 1]:
        row = ds[i]
        for column in ref.columns:
            assert row[column] == ref.row(column, i).tolist()


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """Address ranges of this process's memory maps of ``path`` (from /proc/self/maps)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5] == str(path):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((lo, hi))
    return ranges


def _buffers(table: pa.Table) -> list[pa.Buffer]:
    return [buf for col in table.columns for chunk in col.chunks for buf in chunk.buffers() if buf is not None]


def _assert_memory_mapped(ds: datasets.Dataset, files: list[Path]) -> None:
    """The table is made of MemoryMappedTable blocks over ``files`` whose buffers lie inside their maps."""
    assert [Path(f["filename"]) for f in ds.cache_files] == files
    blocks = [ds.data] if isinstance(ds.data, datasets.table.MemoryMappedTable) else ds.data.blocks
    blocks = [b for row in blocks for b in (row if isinstance(row, list) else [row])]
    assert [Path(b.path) for b in blocks] == files
    if not Path("/proc/self/maps").exists():
        return
    for block in blocks:
        assert isinstance(block, datasets.table.MemoryMappedTable)
        ranges = _mapped_ranges(Path(block.path).resolve())
        assert ranges, f"{block.path} is not memory-mapped"
        for buf in _buffers(block.table):
            assert any(lo <= buf.address and buf.address + buf.size <= hi for lo, hi in ranges)


def test_load_split_is_zero_copy(corpus: Path) -> None:
    before = sorted(p.name for p in corpus.iterdir())
    allocated = pa.total_allocated_bytes()
    ds = hf.load_split(corpus, "train")
    assert pa.total_allocated_bytes() == allocated
    assert isinstance(ds.data, datasets.table.MemoryMappedTable)
    _assert_memory_mapped(ds, [(corpus / "train.arrow").resolve()])
    assert sorted(p.name for p in corpus.iterdir()) == before
    assert ds.split == "train"


def test_load_split_rows_equal_open_dataset(corpus: Path) -> None:
    for split in SPLIT_ROWS:
        _assert_same_rows(hf.load_split(corpus, split), open_dataset(corpus, split))


def test_rows_equal_fairseq_binary(corpus: Path) -> None:
    ds = hf.load_split(corpus, "valid")
    for role, lang in LANGS.items():
        lengths, values = _hf_column(ds, role)
        ref_lengths, ref_values = _reference(read_indexed(FIXTURE / f"valid.de-en.{lang}"))
        np.testing.assert_array_equal(lengths, ref_lengths)
        np.testing.assert_array_equal(values, ref_values)


def test_row0_decodes_to_reference(corpus: Path) -> None:
    ids = np.array(hf.load_split(corpus, "train")[0]["source"])
    dictionary = Dictionary.load(corpus / "dict.de.txt")
    assert dictionary.decode(ids[ids != dictionary.eos]) == REFERENCE_DE


def test_shards_concatenated_in_order(sharded: Path) -> None:
    ds = hf.load_split(sharded, "train")
    files = [(sharded / n).resolve() for n in ("train.arrow", "train1.arrow", "train2.arrow")]
    _assert_memory_mapped(ds, files)
    assert isinstance(ds.data, datasets.table.ConcatenationTable)
    _assert_same_rows(ds, open_dataset(sharded, "train"))
    for role, lang in LANGS.items():
        lengths, values = _hf_column(ds, role)
        ref_lengths, ref_values = _reference(read_indexed(FIXTURE / f"train.de-en.{lang}"))
        np.testing.assert_array_equal(lengths, ref_lengths)
        np.testing.assert_array_equal(values, ref_values)


def test_dataset_dict_splits_and_features(corpus: Path) -> None:
    dd = hf.load_dataset_dict(corpus)
    assert isinstance(dd, datasets.DatasetDict)
    assert sorted(dd) == sorted(SPLIT_ROWS)
    features = datasets.Features({c: datasets.List(datasets.Value("int32")) for c in LANGS})
    for split, rows in SPLIT_ROWS.items():
        assert dd[split].num_rows == rows
        assert dd[split].features == features
        assert dd[split].split == split
        assert dd[split].data.table.schema.field("source").type == pa.list_(pa.int32())


def test_with_format_numpy(corpus: Path) -> None:
    ds = hf.load_split(corpus, "test").with_format("numpy")
    ref = open_dataset(corpus, "test")
    for i in (0, 17, len(ref) - 1):
        row = ds[i]
        for column in LANGS:
            assert isinstance(row[column], np.ndarray)
            np.testing.assert_array_equal(row[column], ref.row(column, i).numpy())
    batch = ds[:3]["target"]
    for i in range(3):
        np.testing.assert_array_equal(batch[i], ref.row("target", i).numpy())


@pytest.mark.parametrize("link", ["hardlink", "symlink", "copy"])
def test_export_load_from_disk_round_trip(sharded: Path, tmp_path: Path, link: hf.LinkMode) -> None:
    out = tmp_path / "hf-train"
    result = hf.export_for_load_from_disk(sharded, "train", out, link=link)
    assert result.methods == (link,) * 3
    assert [p.name for p in result.files] == [f"data-0000{k}-of-00003.arrow" for k in range(3)]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*(p.name for p in result.files), "state.json", "dataset_info.json"]
    )
    _check_file_kind(result.files, [split_path(sharded, n) for n in ("train", "train1", "train2")], link)
    allocated = pa.total_allocated_bytes()
    loaded = datasets.load_from_disk(str(out))
    assert pa.total_allocated_bytes() == allocated
    assert isinstance(loaded, datasets.Dataset)
    assert loaded.split == "train"
    assert loaded.features == hf.token_features(("source", "target"))
    state = json.loads((out / "state.json").read_text(encoding="utf-8"))
    assert state["_fingerprint"] == open_dataset(sharded, "train").fingerprint()[:16]
    _assert_memory_mapped(loaded, list(result.files))
    _assert_same_rows(loaded, open_dataset(sharded, "train"))


def _check_file_kind(files: tuple[Path, ...], sources: list[Path], link: str) -> None:
    for made, source in zip(files, sources, strict=True):
        assert made.read_bytes() == source.read_bytes()
        assert made.is_symlink() == (link == "symlink")
        assert os.path.samefile(made, source) == (link != "copy")


def test_export_single_split_and_rows(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "valid"
    hf.export_for_load_from_disk(corpus, "valid", out)
    loaded = datasets.load_from_disk(str(out))
    _assert_same_rows(loaded, open_dataset(corpus, "valid"))


def test_export_hardlink_falls_back_to_copy(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(hf.os, "link", refuse)
    result = hf.export_for_load_from_disk(corpus, "test", tmp_path / "out")
    assert result.methods == ("copy",)
    assert not os.path.samefile(result.files[0], corpus / "test.arrow")
    assert len(datasets.load_from_disk(str(tmp_path / "out"))) == SPLIT_ROWS["test"]
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".arrowmt-tmp-")]


def test_export_refuses_non_empty_folder_unless_overwrite(sharded: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    hf.export_for_load_from_disk(sharded, "train", out)
    with pytest.raises(OutputExistsError):
        hf.export_for_load_from_disk(corpus, "train", out)
    result = hf.export_for_load_from_disk(corpus, "train", out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "data-00000-of-00001.arrow",
        "dataset_info.json",
        "state.json",
    ]
    assert len(datasets.load_from_disk(str(out))) == SPLIT_ROWS["train"]
    assert result.files == (out / "data-00000-of-00001.arrow",)


def test_export_rejects_unknown_link(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="link"):
        hf.export_for_load_from_disk(corpus, "test", tmp_path / "x", link="reflink")  # type: ignore[arg-type]


def test_missing_datasets_names_install_hint(monkeypatch: pytest.MonkeyPatch, corpus: Path) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'arrowmt\[hf\]'"):
        hf.load_split(corpus, "test")
