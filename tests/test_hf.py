"""The Hugging Face bridge on a real converted corpus (Multi30k de-en), with the real ``datasets``."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

from arrowmt import (
    ArrowMTDataset,
    BlockBatchSampler,
    Dictionary,
    FairseqCollater,
    FileEntry,
    FormatError,
    InvalidParameterError,
    Manifest,
    MissingDependencyError,
    OutputExistsError,
    OutputWriteError,
    PlainCollater,
    TokenBatchSampler,
    convert_fairseq,
    open_dataset,
)
from arrowmt.integrations import hf
from arrowmt.testing import ColumnData, Ragged, SplitFile, read_indexed, split_path, write_split
from tests.builders import fairseq_mmap as fixture_mmap

datasets = pytest.importorskip("datasets")

SPLIT_ROWS = {"train": 29000, "valid": 1014, "test": 1000}
SHARD_BOUNDS = ((0, 10000), (10000, 20000), (20000, 29000))
LANGS = {"source": "de", "target": "en"}
REFERENCE_DE = "zwei junge weiße männer sind im freien in der nähe vieler büsche ."


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared fixture converted by ``convert_fairseq``: one file per split."""
    out = tmp_path_factory.mktemp("hf") / "corpus"
    convert_fairseq(fixture_mmap(), out, progress=False)
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
    full = {role: read_indexed(fixture_mmap() / f"train.de-en.{lang}") for role, lang in LANGS.items()}
    for k, (lo, hi) in enumerate(SHARD_BOUNDS):
        name = "train" if k == 0 else f"train{k}"
        columns = {role: _column(_rows(full[role], lo, hi), lang, dicts[lang]) for role, lang in LANGS.items()}
        meta = write_split(split_path(out, name), name, columns, rows_per_batch=4096)
        manifest.files[name] = FileEntry.of(split_path(out, name), meta.rows)
    manifest.save(out)
    return out


def _copy_dictionary(lang: str, out: Path) -> Dictionary:
    shutil.copyfile(fixture_mmap() / f"dict.{lang}.txt", out / f"dict.{lang}.txt")
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


def _assert_memory_mapped(ds: datasets.Dataset, files: list[Path], targets: list[Path] | None = None) -> None:
    """The table is made of MemoryMappedTable blocks over ``files`` whose buffers lie inside their maps.

    ``targets``: the corpus files ``files`` are symbolic links to (``load_split``).
    """
    assert [Path(f["filename"]) for f in ds.cache_files] == files
    if targets is not None:
        assert [f.resolve() for f in files] == [t.resolve() for t in targets]
        assert all(f.is_symlink() for f in files)
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


@pytest.fixture(autouse=True)
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF's cache folder for this test (instead of ``~/.cache/huggingface/datasets``)."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return cache


def _links_folder(hf_cache: Path) -> Path:
    (folder,) = (hf_cache / hf.CACHE_SUBDIR).iterdir()
    return folder


def _folder_state(folder: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry of ``folder`` (recursively) with its inode, size and mtime."""
    return {
        str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
    }


def test_load_split_is_zero_copy(corpus: Path, hf_cache: Path) -> None:
    before = _folder_state(corpus)
    allocated = pa.total_allocated_bytes()
    ds = hf.load_split(corpus, "train")
    assert pa.total_allocated_bytes() == allocated
    assert isinstance(ds.data, datasets.table.MemoryMappedTable)
    links = _links_folder(hf_cache)
    assert links.name.startswith("corpus-train-")
    _assert_memory_mapped(ds, [links / "data-00000-of-00001.arrow"], [corpus / "train.arrow"])
    assert _folder_state(corpus) == before
    assert ds.split == "train"


def test_load_split_rows_equal_open_dataset(corpus: Path) -> None:
    for split in SPLIT_ROWS:
        _assert_same_rows(hf.load_split(corpus, split), open_dataset(corpus, split))


def test_rows_equal_fairseq_binary(corpus: Path) -> None:
    ds = hf.load_split(corpus, "valid")
    for role, lang in LANGS.items():
        lengths, values = _hf_column(ds, role)
        ref_lengths, ref_values = _reference(read_indexed(fixture_mmap() / f"valid.de-en.{lang}"))
        np.testing.assert_array_equal(lengths, ref_lengths)
        np.testing.assert_array_equal(values, ref_values)


def test_row0_decodes_to_reference(corpus: Path) -> None:
    ids = np.array(hf.load_split(corpus, "train")[0]["source"])
    dictionary = Dictionary.load(corpus / "dict.de.txt")
    assert dictionary.decode(ids[ids != dictionary.eos]) == REFERENCE_DE


def test_shards_concatenated_in_order(sharded: Path, tmp_path: Path) -> None:
    ds = hf.load_split(sharded, "train", cache_dir=tmp_path / "mine")
    files = [sharded / n for n in ("train.arrow", "train1.arrow", "train2.arrow")]
    (links,) = (tmp_path / "mine").iterdir()
    _assert_memory_mapped(ds, [links / f"data-0000{k}-of-00003.arrow" for k in range(3)], files)
    assert isinstance(ds.data, datasets.table.ConcatenationTable)
    _assert_same_rows(ds, open_dataset(sharded, "train"))
    for role, lang in LANGS.items():
        lengths, values = _hf_column(ds, role)
        ref_lengths, ref_values = _reference(read_indexed(fixture_mmap() / f"train.de-en.{lang}"))
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


def test_export_overwrite_removes_only_earlier_listed_files(sharded: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    hf.export_for_load_from_disk(sharded, "train", out)
    earlier = sorted(p.name for p in out.glob("data-*.arrow"))
    assert len(earlier) > 1
    (out / "data-00007-of-00009.arrow").write_bytes(b"not ours")  # a file the earlier export did not list
    (out / "notes.txt").write_text("keep me")
    hf.export_for_load_from_disk(corpus, "train", out, overwrite=True)
    assert (out / "data-00007-of-00009.arrow").read_bytes() == b"not ours"
    assert (out / "notes.txt").read_text() == "keep me"
    assert not any((out / name).exists() for name in earlier if name != "data-00000-of-00001.arrow")


def test_failed_export_leaves_the_earlier_export_intact(
    sharded: Path, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    hf.export_for_load_from_disk(sharded, "train", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args: object, **kwargs: object) -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hf, "_json_bytes", fail)
    with pytest.raises(OSError, match="No space"):
        hf.export_for_load_from_disk(corpus, "train", out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left beside it


def test_export_rejects_unknown_link(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="link"):
        hf.export_for_load_from_disk(corpus, "test", tmp_path / "x", link="reflink")  # type: ignore[arg-type]


def test_missing_datasets_names_install_hint(monkeypatch: pytest.MonkeyPatch, corpus: Path) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'arrowmt\[hf\]'"):
        hf.load_split(corpus, "test")


# ---------------------------------------------------------------- corrupt files never reach datasets

# (column, record batch, offset index, new value from (old, values in the batch)) of valid.arrow (1014 rows,
# one record batch): each corruption makes datasets crash (SIGSEGV/SIGBUS) or return other rows.
CORRUPT_OFFSETS = {
    "middle int32 max": ("source", 0, 500, lambda old, n: 2**31 - 1),
    "middle past values": ("target", 0, 7, lambda old, n: n + 1000),
    "middle negative": ("source", 0, 3, lambda old, n: -100),
    "middle decreasing": ("target", 0, 900, lambda old, n: old - 40),
    "first not zero": ("source", 0, 0, lambda old, n: 3),
    "last short of values": ("target", 0, 1014, lambda old, n: n - 2),
}


def _corrupt_copy(corpus: Path, folder: Path, case: str) -> Path:
    """A copy of ``corpus`` whose valid.arrow has one offset changed (in place, as disk corruption would)."""
    shutil.copytree(corpus, folder)
    column, batch, index, new_value = CORRUPT_OFFSETS[case]
    path = split_path(folder, "valid")
    shard = SplitFile(path)
    pos = int(shard.layouts[column].offsets_pos[batch]) + index
    value = new_value(int(shard.words[pos]), int(shard.layouts[column].values_len[batch]))
    del shard
    with open(path, "r+b") as handle:
        handle.seek(pos * 4)
        handle.write(np.array([value], dtype="<i4").tobytes())
    return folder


READ_ALL_ROWS = r"""
import json, sys
from arrowmt._errors import FormatError
from arrowmt.integrations import hf
for folder in sys.argv[2:]:
    print(json.dumps({"folder": folder}), flush=True)
    try:
        ds = hf.load_split(folder, "valid", cache_dir=sys.argv[1])
        rows = [ds[i] for i in range(len(ds))]
        print(json.dumps({"read": len(rows)}), flush=True)
    except FormatError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
"""


def test_corrupt_offsets_raise_format_error_not_a_crash(corpus: Path, tmp_path: Path) -> None:
    """Every corruption: load_split raises FormatError; run in a subprocess, where a crash fails the test cleanly."""
    folders = [_corrupt_copy(corpus, tmp_path / f"case{k}", case) for k, case in enumerate(CORRUPT_OFFSETS)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    command = [sys.executable, "-X", "faulthandler", "-c", READ_ALL_ROWS, str(tmp_path / "c"), *map(str, folders)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"crashed ({done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}"
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    results = dict(zip((a["folder"] for a in answers[::2]), answers[1::2], strict=True))
    for folder, case in zip(folders, CORRUPT_OFFSETS, strict=True):
        error = results[str(folder)].get("error", "")
        assert str(split_path(folder, "valid")) in error and "corrupt" in error, (case, results[str(folder)])


def test_corrupt_offsets_checked_before_every_entry_point(corpus: Path, tmp_path: Path) -> None:
    """In-process: the check runs before datasets maps anything, so nothing here can crash."""
    folder = _corrupt_copy(corpus, tmp_path / "bad", "middle int32 max")
    where = rf"{split_path(folder, 'valid')}: row 499 \(source\): offsets \d+\.\.2147483647 are invalid"
    with pytest.raises(FormatError, match=where):
        hf.load_split(folder, "valid")
    with pytest.raises(FormatError, match=where):
        hf.load_dataset_dict(folder)
    with pytest.raises(FormatError, match=where):
        hf.export_for_load_from_disk(folder, "valid", tmp_path / "export")
    assert not (tmp_path / "export").exists()
    assert len(hf.load_split(folder, "test")) == SPLIT_ROWS["test"]  # the sound splits still load


def test_file_changed_between_check_and_mapping(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "c"
    shutil.copytree(corpus, folder)
    from_file = datasets.Dataset.from_file

    def touch_then_map(filename: str, **kwargs: object) -> datasets.Dataset:
        st = Path(filename).stat()
        os.utime(filename, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        return from_file(filename, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "from_file", touch_then_map)
    with pytest.raises(FormatError, match=rf"{split_path(folder, 'test')}: file changed while it was being loaded"):
        hf.load_split(folder, "test")


# ---------------------------------------------------------------- HF's cache files stay out of the corpus


def _source_length(row: dict[str, list[int]]) -> dict[str, int]:
    return {"n": len(row["source"])}


def test_map_filter_shuffle_leave_the_corpus_untouched(corpus: Path, hf_cache: Path) -> None:
    before = _folder_state(corpus)
    ds = hf.load_split(corpus, "valid")
    lengths = ds.map(_source_length)
    short = ds.filter(lambda row: len(row["target"]) < 12)
    shuffled = ds.shuffle(seed=3)
    assert lengths["n"] == open_dataset(corpus, "valid").lengths("source").tolist()
    assert 0 < len(short) < len(ds) and len(shuffled) == len(ds)
    assert _folder_state(corpus) == before
    links = _links_folder(hf_cache)
    written = sorted(p.name for p in links.glob("cache-*.arrow"))
    assert len(written) == 3, written
    for result in (lengths, short, shuffled):
        assert {Path(f["filename"]).parent for f in result.cache_files} == {links}
    again = hf.load_split(corpus, "valid").map(_source_length)
    assert again.cache_files == lengths.cache_files  # HF reuses its cache for the unchanged corpus


def test_cache_dir_parameter_and_unwritable_cache_dir(corpus: Path, tmp_path: Path, hf_cache: Path) -> None:
    ds = hf.load_split(corpus, "test", cache_dir=tmp_path / "mine")
    ds.map(lambda row: {"n": len(row["target"])})
    (links,) = (tmp_path / "mine").iterdir()
    assert len(list(links.glob("cache-*.arrow"))) == 1
    assert not hf_cache.exists()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OutputWriteError, match=rf"cache_dir: cannot create {blocker}/.*pass a writable cache_dir"):
        hf.load_split(corpus, "test", cache_dir=blocker)


def test_reconversion_keeps_hf_cache_files(tmp_path: Path, hf_cache: Path) -> None:
    """``--overwrite`` replaces the corpus; HF's cache files (and files it never wrote) survive it."""
    out = tmp_path / "corpus"
    convert_fairseq(fixture_mmap(), out, progress=False)
    ds = hf.load_split(out, "test")
    mapped = ds.map(lambda row: {"n": len(row["source"])})
    in_corpus = ds.map(lambda row: {"m": 1}, cache_file_name=str(out / "cache-mine.arrow"))  # the user's choice
    cache_files = [Path(mapped.cache_files[0]["filename"]), Path(in_corpus.cache_files[0]["filename"])]
    convert_fairseq(fixture_mmap(), out, overwrite=True, progress=False)
    assert all(f.is_file() for f in cache_files), cache_files
    again = hf.load_split(out, "test")  # the links now see the new files: checked again, same rows
    assert again["source"] == ds["source"]


# ---------------------------------------------------------------- HF rows with arrowmt's batching (issue 19)


def test_collaters_refuse_hf_rows_without_an_id_and_say_what_to_use(corpus: Path) -> None:
    """PlainCollater on HF rows raised KeyError: 'id'; with an id given by map(with_indices) they collate as ours."""
    ds = hf.load_split(corpus, "valid")
    ours = open_dataset(corpus, "valid")
    rows = [ds[i] for i in (3, 0, 7)]
    for collate in (PlainCollater(ours.special_ids), FairseqCollater(ours.special_ids)):
        with pytest.raises(
            InvalidParameterError, match=r"batch: expected samples with an 'id'.*arrowmt \(open_dataset"
        ):
            collate(rows)
    numbered = ds.map(lambda row, i: {"id": i}, with_indices=True, keep_in_memory=True)
    theirs = PlainCollater(ours.special_ids)([numbered[i] for i in (3, 0, 7)])
    expected = PlainCollater(ours.special_ids)([ours[i] for i in (3, 0, 7)])
    assert theirs.keys() == expected.keys()
    assert all(torch.equal(theirs[key], expected[key]) for key in expected)


def test_samplers_refuse_a_hf_dataset_and_say_what_to_use(corpus: Path, tmp_path: Path) -> None:
    """TokenBatchSampler(hf_dataset) raised AttributeError: ... 'fingerprint'."""
    ds = hf.load_split(corpus, "valid")
    hint = r"got datasets\.arrow_dataset\.Dataset; Hugging Face datasets carry no arrowmt row ids"
    with pytest.raises(InvalidParameterError, match=r"dataset: expected an arrowmt dataset \(arrowmt\.open_dataset"):
        TokenBatchSampler(ds, max_tokens=1024, cache_dir=tmp_path)
    with pytest.raises(InvalidParameterError, match=hint):
        TokenBatchSampler(ds, max_tokens=1024, cache_dir=tmp_path)
    with pytest.raises(
        InvalidParameterError, match=r"dataset: expected a BlockDataset \(arrowmt\.open_blocks.*" + hint
    ):
        BlockBatchSampler(ds, num_replicas=1, rank=0)
    with pytest.raises(InvalidParameterError, match=r"got builtins\.list \(it has no fingerprint, lengths, columns"):
        TokenBatchSampler([[1, 2]], max_tokens=1024, cache_dir=tmp_path)  # type: ignore[arg-type]
    assert len(TokenBatchSampler(open_dataset(corpus, "valid"), max_tokens=1024, cache_dir=tmp_path)) > 0
