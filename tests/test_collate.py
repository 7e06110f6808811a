"""Collaters (fairseq and plain), __getitems__ and DataLoader tests on real fairseq-preprocess output (Multi30k)."""

from __future__ import annotations

import itertools
import pickle
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from arrowmt import (
    ArrowMTDataset,
    Dictionary,
    FairseqCollater,
    FileEntry,
    InvalidParameterError,
    Manifest,
    PlainCollater,
    SpecialIds,
)
from arrowmt.testing import ColumnData, GatheredBatch, Ragged, split_path, write_split
from tests.conftest import fairseq_fixture

LANGS = ("de", "en")
MMAP_MAGIC = b"MMIDIDX\x00\x00"
UINT16_CODE = 8
N_ROWS = 1014
SHARD_CUT = 600  # the sharded copy holds rows [0, 600) in "valid" and [600, 1014) in "valid1"

RNG = np.random.default_rng(1234)
REAL_BATCHES = [
    list(range(10)),
    list(range(50, 140)),  # crosses record batches 0 -> 1 -> 2 (64 rows each)
    sorted(RNG.choice(N_ROWS, 48, replace=False).tolist()),
    RNG.choice(N_ROWS, 33, replace=False).tolist(),  # unsorted ids, across both shards
    list(range(590, 610)),  # crosses the shard boundary
    [1013, 0, 600, 599, 64, 63],
    [7],
    [5, 5, 9, 5],  # repeated rows
]


# ------------------------------------------------------------------ building datasets


def fixture_file(name: str) -> Path:
    """A file (or prefix) of the fixture's real fairseq-preprocess mmap output (de-en)."""
    return fairseq_fixture() / "mmap" / name


def valid_prefixes() -> dict[str, Path]:
    """language -> prefix of the fixture's ``valid`` split."""
    return {lang: fixture_file(f"valid.de-en.{lang}") for lang in LANGS}


def read_fairseq_mmap(prefix: Path) -> Ragged:
    """Rows of a fairseq mmap ``.idx``/``.bin`` pair (uint16 ids), laid out as in facts.md."""
    idx = Path(f"{prefix}.idx").read_bytes()
    assert idx[: len(MMAP_MAGIC)] == MMAP_MAGIC
    version, code, count = struct.unpack_from("<QBQ", idx, len(MMAP_MAGIC))
    assert (version, code) == (1, UINT16_CODE)
    sizes = np.frombuffer(idx, dtype="<i4", count=count, offset=26).astype(np.int64)
    pointers = np.frombuffer(idx, dtype="<i8", count=count, offset=26 + 4 * count)
    ragged = Ragged.from_lengths(sizes, np.fromfile(f"{prefix}.bin", dtype="<u2"))
    assert np.array_equal(pointers, ragged.offsets[:-1] * 2)
    return ragged


def slice_rows(ragged: Ragged, start: int, stop: int) -> Ragged:
    lo, hi = int(ragged.offsets[start]), int(ragged.offsets[stop])
    return Ragged(ragged.offsets[start : stop + 1] - lo, ragged.values[lo:hi])


def write_dataset(
    folder: Path,
    columns: dict[str, tuple[Ragged, str]],
    cuts: tuple[int, ...] = (),
    split: str = "valid",
    rows_per_batch: int = 64,
    vocab_size: int | None = None,
) -> Path:
    """Write ``columns`` (name -> (rows, language)) as an arrowmt folder, one shard per range in ``cuts``."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(next(iter(columns.values()))[0])
    bounds = [0, *cuts, n]
    manifest = Manifest(
        languages={name: lang for name, (_, lang) in columns.items()},
        dictionaries={lang: f"dict.{lang}.txt" for _, lang in columns.values()},
        source_format="fairseq-mmap",
    )
    for lang in manifest.dictionaries:
        dict_file = folder / f"dict.{lang}.txt"
        source_dict = fixture_file(f"dict.{lang}.txt")
        if source_dict.exists():
            dict_file.write_bytes(source_dict.read_bytes())
        else:  # specials and made-up words, vocab_size in all (readers check the recorded hash)
            Dictionary.build(padding_factor=vocab_size or 1).save(dict_file)
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        name = split if k == 0 else f"{split}{k}"
        data = {col: _column(folder, slice_rows(rows, lo, hi), lang) for col, (rows, lang) in columns.items()}
        path = split_path(folder, name)
        meta = write_split(path, name, data, rows_per_batch=rows_per_batch, source_format="fairseq-mmap")
        manifest.files[name] = FileEntry.of(path, meta.rows)
    manifest.save(folder)
    return folder


def _column(folder: Path, rows: Ragged, lang: str) -> ColumnData:
    dict_file = folder / f"dict.{lang}.txt"
    dictionary = Dictionary.load(dict_file)
    return ColumnData(rows, lang, dict_file.name, dictionary.sha256(), len(dictionary), f"test {lang}")


@pytest.fixture(scope="module")
def real_rows() -> dict[str, Ragged]:
    return {lang: read_fairseq_mmap(prefix) for lang, prefix in valid_prefixes().items()}


@pytest.fixture(scope="module")
def pair_ds(tmp_path_factory: pytest.TempPathFactory, real_rows: dict[str, Ragged]) -> ArrowMTDataset:
    cols = {"source": (real_rows["de"], "de"), "target": (real_rows["en"], "en")}
    return ArrowMTDataset(write_dataset(tmp_path_factory.mktemp("pair"), cols), "valid")


@pytest.fixture(scope="module")
def sharded_ds(tmp_path_factory: pytest.TempPathFactory, real_rows: dict[str, Ragged]) -> ArrowMTDataset:
    cols = {"source": (real_rows["de"], "de"), "target": (real_rows["en"], "en")}
    ds = ArrowMTDataset(write_dataset(tmp_path_factory.mktemp("sharded"), cols, cuts=(SHARD_CUT,)), "valid")
    assert ds.shard_names == ["valid", "valid1"]
    return ds


@pytest.fixture(scope="module")
def mono_ds(tmp_path_factory: pytest.TempPathFactory, real_rows: dict[str, Ragged]) -> ArrowMTDataset:
    cols = {"tokens": (real_rows["en"], "en")}
    return ArrowMTDataset(write_dataset(tmp_path_factory.mktemp("mono"), cols, cuts=(SHARD_CUT,)), "valid")


TINY_SOURCE = [[4, 5, 2], [6, 2], [7, 8, 9, 2], [5, 5, 2]]
TINY_TARGET = [[10, 2], [11, 12, 13, 2], [14, 2], [15, 16, 2]]


@pytest.fixture(scope="module")
def tiny_ds(tmp_path_factory: pytest.TempPathFactory) -> ArrowMTDataset:
    cols = {"source": (Ragged.from_rows(TINY_SOURCE), "xx"), "target": (Ragged.from_rows(TINY_TARGET), "yy")}
    return ArrowMTDataset(write_dataset(tmp_path_factory.mktemp("tiny"), cols, vocab_size=20), "valid")


@pytest.fixture(scope="module")
def tiny_mono_ds(tmp_path_factory: pytest.TempPathFactory) -> ArrowMTDataset:
    cols = {"tokens": (Ragged.from_rows(TINY_TARGET), "yy")}
    return ArrowMTDataset(write_dataset(tmp_path_factory.mktemp("tiny_mono"), cols, vocab_size=20), "valid")


# ------------------------------------------------------------------ fairseq reference


def import_fairseq() -> ModuleType:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("fairseq")
        import fairseq.data

        return fairseq.data


@pytest.fixture(scope="module")
def fairseq_data() -> ModuleType:
    return import_fairseq()


@pytest.fixture(scope="module")
def fairseq_parts(fairseq_data: ModuleType) -> SimpleNamespace:
    """fairseq's own dictionaries and MMapIndexedDatasets over the fixture files."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dicts = {lang: fairseq_data.Dictionary.load(str(fixture_file(f"dict.{lang}.txt"))) for lang in LANGS}
        data = {
            lang: fairseq_data.data_utils.load_indexed_dataset(str(prefix), dicts[lang], "mmap")
            for lang, prefix in valid_prefixes().items()
        }
    return SimpleNamespace(dicts=dicts, data=data)


def fairseq_pair(fairseq_data: ModuleType, parts: SimpleNamespace, **kw: Any) -> Any:
    src, tgt = parts.data["de"], parts.data["en"]
    return fairseq_data.LanguagePairDataset(src, src.sizes, parts.dicts["de"], tgt, tgt.sizes, parts.dicts["en"], **kw)


def fairseq_collate(dataset: Any, batch: list[int]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dataset.collater([dataset[i] for i in batch])


def assert_same(actual: Any, expected: Any, where: str = "batch") -> None:
    """Equal nested dicts (same keys in the same order), tensors equal in dtype, shape and values."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert list(actual) == list(expected), where
        for key in expected:
            assert_same(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), where
        assert actual.dtype == expected.dtype, f"{where}: {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{where}: {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert torch.equal(actual, expected), where
    else:
        assert type(actual) is type(expected) and actual == expected, f"{where}: {actual!r} != {expected!r}"


def long(rows: list[list[int]] | list[int]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64)


# ------------------------------------------------------------------ the fixture itself


def test_real_rows_match_fairseq_reader(
    real_rows: dict[str, Ragged], pair_ds: ArrowMTDataset, fairseq_parts: SimpleNamespace
) -> None:
    assert len(pair_ds) == N_ROWS == len(fairseq_parts.data["de"])
    assert pair_ds.shards[0].layouts["source"].offsets_pos.shape[0] == 16  # 1014 rows / 64
    for i in (0, 63, 64, 500, N_ROWS - 1):
        assert pair_ds[i]["source"].tolist() == fairseq_parts.data["de"][i].tolist()
        assert pair_ds[i]["target"].tolist() == fairseq_parts.data["en"][i].tolist()
    assert np.array_equal(pair_ds.lengths("source"), fairseq_parts.data["de"].sizes)


# ------------------------------------------------------------------ fairseq equality


@pytest.mark.parametrize("batch", REAL_BATCHES, ids=lambda b: f"{len(b)}rows@{b[0]}")
@pytest.mark.parametrize("which", ["single", "sharded"])
def test_fairseq_mode_equals_language_pair_dataset(
    batch: list[int],
    which: str,
    request: pytest.FixtureRequest,
    fairseq_data: ModuleType,
    fairseq_parts: SimpleNamespace,
) -> None:
    ds: ArrowMTDataset = request.getfixturevalue(f"{'pair' if which == 'single' else 'sharded'}_ds")
    expected = fairseq_collate(fairseq_pair(fairseq_data, fairseq_parts), batch)
    collate = FairseqCollater(ds.special_ids)
    assert_same(collate(ds.__getitems__(batch)), expected)
    assert_same(collate([ds[i] for i in batch]), expected)


@pytest.mark.parametrize(
    "options",
    [
        {"left_pad_source": False, "left_pad_target": True},
        {"input_feeding": False},
        {"pad_to_multiple": 8},
        {"left_pad_source": True, "left_pad_target": True, "pad_to_multiple": 3},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_fairseq_mode_options_equal_language_pair_dataset(
    options: dict[str, Any],
    sharded_ds: ArrowMTDataset,
    fairseq_data: ModuleType,
    fairseq_parts: SimpleNamespace,
) -> None:
    reference = fairseq_pair(fairseq_data, fairseq_parts, **options)
    collate = FairseqCollater(sharded_ds.special_ids, **options)
    for batch in REAL_BATCHES[:5]:
        assert_same(collate(sharded_ds.__getitems__(batch)), fairseq_collate(reference, batch))


def test_fairseq_collate_of_fairseq_samples(fairseq_data: ModuleType, fairseq_parts: SimpleNamespace) -> None:
    """The list-of-samples path also takes fairseq's own int64 samples."""
    reference = fairseq_pair(fairseq_data, fairseq_parts)
    batch = REAL_BATCHES[2]
    samples = [reference[i] for i in batch]
    assert_same(FairseqCollater()(samples), fairseq_collate(reference, batch))


@pytest.fixture()
def fairseq_lm(fairseq_data: ModuleType, fairseq_parts: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> Any:
    """fairseq's language-model dataset: TokenBlockDataset(break_mode="eos") + MonolingualDataset."""
    # fairseq 0.12 still spells np.compat.long, which numpy 2 removed.
    monkeypatch.setattr(np, "compat", SimpleNamespace(long=np.int64), raising=False)
    data, vocab = fairseq_parts.data["en"], fairseq_parts.dicts["en"]
    blocks = fairseq_data.TokenBlockDataset(
        data, data.sizes, None, pad=vocab.pad(), eos=vocab.eos(), break_mode="eos", include_targets=True
    )
    return fairseq_data.MonolingualDataset(blocks, blocks.sizes, vocab, targets=["future"])


@pytest.mark.parametrize("batch", REAL_BATCHES, ids=lambda b: f"{len(b)}rows@{b[0]}")
def test_fairseq_mode_monolingual_equals_monolingual_dataset(
    batch: list[int], mono_ds: ArrowMTDataset, fairseq_lm: Any
) -> None:
    expected = fairseq_collate(fairseq_lm, batch)
    collate = FairseqCollater(mono_ds.special_ids)
    assert_same(collate(mono_ds.__getitems__(batch)), expected)
    assert_same(collate([mono_ds[i] for i in batch]), expected)


# ------------------------------------------------------------------ hand-written expectations


def test_fairseq_mode_documented_behaviour(tiny_ds: ArrowMTDataset) -> None:
    # source lengths 3, 2, 4, 3 -> descending, ties in batch order: rows 2, 0, 3, 1
    expected = {
        "id": long([2, 0, 3, 1]),
        "nsentences": 4,
        "ntokens": 11,
        "net_input": {
            "src_tokens": long([[7, 8, 9, 2], [1, 4, 5, 2], [1, 5, 5, 2], [1, 1, 6, 2]]),
            "src_lengths": long([4, 3, 3, 2]),
            "prev_output_tokens": long([[2, 14, 1, 1], [2, 10, 1, 1], [2, 15, 16, 1], [2, 11, 12, 13]]),
        },
        "target": long([[14, 2, 1, 1], [10, 2, 1, 1], [15, 16, 2, 1], [11, 12, 13, 2]]),
    }
    collate = FairseqCollater(tiny_ds.special_ids)
    assert_same(collate(tiny_ds.__getitems__([0, 1, 2, 3])), expected)
    assert_same(collate([tiny_ds[i] for i in range(4)]), expected)


def test_fairseq_mode_left_padded_target(tiny_ds: ArrowMTDataset) -> None:
    out = FairseqCollater(left_pad_target=True, pad_to_multiple=3)(tiny_ds.__getitems__([1, 0]))
    assert_same(out["id"], long([0, 1]))
    assert_same(out["net_input"]["src_tokens"], long([[4, 5, 2], [1, 6, 2]]))
    assert_same(out["target"], long([[1, 1, 1, 1, 10, 2], [1, 1, 11, 12, 13, 2]]))
    assert_same(out["net_input"]["prev_output_tokens"], long([[1, 1, 1, 1, 2, 10], [1, 1, 2, 11, 12, 13]]))


def test_fairseq_mode_monolingual_documented_behaviour(tiny_mono_ds: ArrowMTDataset) -> None:
    expected = {
        "id": long([1, 0, 3]),
        "nsentences": 3,
        "ntokens": 9,
        "net_input": {
            "src_tokens": long([[2, 11, 12, 13], [2, 10, 1, 1], [2, 15, 16, 1]]),
            "src_lengths": long([4, 2, 3]),
        },
        "target": long([[11, 12, 13, 2], [10, 2, 1, 1], [15, 16, 2, 1]]),
    }
    assert_same(FairseqCollater(tiny_mono_ds.special_ids)(tiny_mono_ds.__getitems__([1, 0, 3])), expected)


def test_plain_mode(tiny_ds: ArrowMTDataset) -> None:
    expected = {
        "id": long([3, 1, 2]),
        "source": long([[5, 5, 2, 1], [6, 2, 1, 1], [7, 8, 9, 2]]),
        "source_lengths": long([3, 2, 4]),
        "target": long([[15, 16, 2, 1], [11, 12, 13, 2], [14, 2, 1, 1]]),
        "target_lengths": long([3, 4, 2]),
    }
    collate = PlainCollater(tiny_ds.special_ids)
    assert_same(collate(tiny_ds.__getitems__([3, 1, 2])), expected)
    assert_same(collate([tiny_ds[i] for i in (3, 1, 2)]), expected)
    left = PlainCollater(SpecialIds(pad=0), left_pad_source=True)(tiny_ds.__getitems__([1, 2]))
    assert_same(left["source"], long([[0, 0, 6, 2], [7, 8, 9, 2]]))
    assert_same(left["target"], long([[11, 12, 13, 2], [14, 2, 0, 0]]))


def test_plain_mode_monolingual(tiny_mono_ds: ArrowMTDataset) -> None:
    out = PlainCollater(pad_to_multiple=8)(tiny_mono_ds.__getitems__([0, 2]))
    assert_same(out["id"], long([0, 2]))
    assert_same(out["tokens"], long([[10, 2] + [1] * 6, [14, 2] + [1] * 6]))
    assert_same(out["lengths"], long([2, 2]))
    assert list(out) == ["id", "tokens", "lengths"]


def test_empty_batches(tiny_ds: ArrowMTDataset, tiny_mono_ds: ArrowMTDataset) -> None:
    assert FairseqCollater()(tiny_ds.__getitems__([])) == {}
    assert FairseqCollater()([]) == {}
    assert FairseqCollater()(tiny_mono_ds.__getitems__([])) == {}
    plain = PlainCollater()(tiny_ds.__getitems__([]))
    assert list(plain) == ["id", "source", "source_lengths", "target", "target_lengths"]
    assert plain["id"].shape == (0,) and plain["source"].shape == (0, 0) and plain["target"].shape == (0, 0)
    assert plain["source"].dtype == torch.int64
    assert list(PlainCollater()([])) == ["id"]


def test_empty_rows_do_not_crash(tmp_path: Path) -> None:
    cols = {
        "source": (Ragged.from_rows([[], [4, 2]]), "xx"),
        "target": (Ragged.from_rows([[5, 2], []]), "yy"),
    }
    ds = ArrowMTDataset(write_dataset(tmp_path / "d", cols, vocab_size=10), "valid")
    out = FairseqCollater()(ds.__getitems__([0, 1]))
    assert_same(out["id"], long([1, 0]))
    assert_same(out["net_input"]["src_tokens"], long([[4, 2], [1, 1]]))
    assert_same(out["target"], long([[1, 1], [5, 2]]))
    assert_same(out["net_input"]["prev_output_tokens"], long([[1, 1], [2, 5]]))
    assert out["ntokens"] == 2


def test_collaters_reject_bad_parameters() -> None:
    for collater in (FairseqCollater, PlainCollater):
        with pytest.raises(InvalidParameterError, match="pad_to_multiple: expected an integer >= 1, got 0"):
            collater(pad_to_multiple=0)
        with pytest.raises(InvalidParameterError, match=r"special_ids\.pad: expected an integer >= 0, got -1"):
            collater(SpecialIds(pad=-1))
        with pytest.raises(InvalidParameterError, match="special_ids: expected a SpecialIds"):
            collater(1)  # type: ignore[arg-type]


def test_fairseq_collater_rejects_batch_without_pair_columns() -> None:
    with pytest.raises(InvalidParameterError, match=r"batch: expected columns \['source', 'target'\]"):
        FairseqCollater()([{"id": 0, "words": torch.tensor([4, 2])}])


def test_collaters_take_the_dataset_ids_and_their_own_padding_sides(tiny_ds: ArrowMTDataset) -> None:
    plain = PlainCollater(tiny_ds.special_ids)
    assert plain.special_ids == tiny_ds.special_ids
    assert (plain.left_pad_source, plain.left_pad_target) == (False, False)
    fairseq_like = FairseqCollater(tiny_ds.special_ids)
    assert (fairseq_like.left_pad_source, fairseq_like.left_pad_target) == (True, False)
    assert fairseq_like.input_feeding


# ------------------------------------------------------------------ __getitems__ and zero copy


def test_getitems_equals_getitem(sharded_ds: ArrowMTDataset) -> None:
    for batch in REAL_BATCHES:
        gathered = sharded_ds.__getitems__(batch)
        assert isinstance(gathered, GatheredBatch)
        assert gathered.ids.tolist() == batch
        for k, i in enumerate(batch):
            item = sharded_ds[i]
            assert gathered[k]["id"] == i
            for column in ("source", "target"):
                assert torch.equal(gathered[k][column], item[column])
            assert gathered.columns["source"].lengths[k] == item["source"].shape[0]


def test_getitems_single_shard_views_the_map(pair_ds: ArrowMTDataset) -> None:
    gathered = pair_ds.__getitems__([5, 900, 3])
    words = pair_ds.shards[0].words
    assert gathered.columns["source"].words is words
    assert np.shares_memory(gathered[1]["target"].numpy(), words)


def test_getitems_rejects_bad_indices(sharded_ds: ArrowMTDataset) -> None:
    with pytest.raises(
        IndexError, match=rf"split 'valid'.*: row {N_ROWS} out of range \(expected 0 <= row < {N_ROWS}\)"
    ):
        sharded_ds.__getitems__([0, N_ROWS])
    with pytest.raises(InvalidParameterError, match=r"column: expected one of \['source', 'target'\], got 'x'"):
        sharded_ds.column_spans("x", np.array([0]))


def test_getitem_is_zero_copy_without_warnings(sharded_ds: ArrowMTDataset) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in (0, SHARD_CUT - 1, SHARD_CUT, N_ROWS - 1):
            shard = sharded_ds.shards[0 if i < SHARD_CUT else 1]
            words = shard.words
            base, size = words.ctypes.data, words.nbytes
            for column in ("source", "target"):
                tensor = sharded_ds[i][column]
                assert tensor.dtype == torch.int32
                assert base <= tensor.data_ptr() < base + size
                assert np.shares_memory(tensor.numpy(), words)
    assert [str(w.message) for w in caught] == []


def test_gathered_batch_pickles_compactly(sharded_ds: ArrowMTDataset) -> None:
    gathered = sharded_ds.__getitems__(REAL_BATCHES[1])
    blob = pickle.dumps(gathered)
    assert len(blob) < 20_000 < sharded_ds.shards[0].words.nbytes
    again = pickle.loads(blob)
    assert_same(FairseqCollater()(again), FairseqCollater()(gathered))


def test_pickles_stay_small(sharded_ds: ArrowMTDataset) -> None:
    assert len(pickle.dumps(sharded_ds)) < 10_000
    collate = PlainCollater(sharded_ds.special_ids, pad_to_multiple=8)
    blob = pickle.dumps(collate)
    assert len(blob) < 1_000
    again = pickle.loads(blob)
    assert repr(again) == repr(collate)
    reopened = pickle.loads(pickle.dumps(sharded_ds))
    assert_same(again(reopened.__getitems__(REAL_BATCHES[3])), collate(sharded_ds.__getitems__(REAL_BATCHES[3])))


# ------------------------------------------------------------------ DataLoader


def loader_batches(ds: ArrowMTDataset, **kw: Any) -> Iterator[dict[str, Any]]:
    loader = DataLoader(ds, batch_sampler=REAL_BATCHES, collate_fn=FairseqCollater(ds.special_ids), **kw)
    return iter(loader)


def test_dataloader_in_process(sharded_ds: ArrowMTDataset) -> None:
    collate = FairseqCollater(sharded_ds.special_ids)
    got = list(loader_batches(sharded_ds, num_workers=0))
    assert len(got) == len(REAL_BATCHES)
    for batch, out in zip(REAL_BATCHES, got, strict=True):
        assert_same(out, collate([sharded_ds[i] for i in batch]))


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_match_in_process(sharded_ds: ArrowMTDataset, context: str) -> None:
    expected = list(loader_batches(sharded_ds, num_workers=0))
    got = list(loader_batches(sharded_ds, num_workers=2, multiprocessing_context=context))
    assert len(got) == len(expected)
    for out, ref in zip(got, expected, strict=True):
        assert_same(out, ref)


def test_default_collate_still_works(tiny_ds: ArrowMTDataset) -> None:
    """Without a collater, DataLoader batches of ds[i] behave as before __getitems__ existed."""
    got = list(DataLoader(tiny_ds, batch_size=1))
    assert len(got) == 4
    assert got[2]["id"].tolist() == [2]
    assert got[2]["source"].tolist() == [[7, 8, 9, 2]]
    assert got[2]["source"].dtype == torch.int32


def test_fairseq_mode_pad_ids_inside_source_rows(tmp_path: Path) -> None:
    """fairseq orders by the count of non-pad tokens, not the row length; arrowmt must follow it."""
    source = [[4, 1, 1, 2], [5, 5, 2], [6, 2]]  # non-pad counts 2, 3, 2
    target = [[10, 2], [11, 12, 2], [13, 2]]
    cols = {"source": (Ragged.from_rows(source), "xx"), "target": (Ragged.from_rows(target), "yy")}
    ds = ArrowMTDataset(write_dataset(tmp_path, cols, vocab_size=20), "valid")
    expected = {
        "id": long([1, 0, 2]),
        "nsentences": 3,
        "ntokens": 7,
        "net_input": {
            "src_tokens": long([[1, 5, 5, 2], [4, 1, 1, 2], [1, 1, 6, 2]]),
            "src_lengths": long([3, 2, 2]),
            "prev_output_tokens": long([[2, 11, 12], [2, 10, 1], [2, 13, 1]]),
        },
        "target": long([[11, 12, 2], [10, 2, 1], [13, 2, 1]]),
    }
    collate = FairseqCollater(ds.special_ids)
    assert_same(collate(ds.__getitems__([0, 1, 2])), expected)
    assert_same(collate([ds[i] for i in range(3)]), expected)
