"""The one read path: pieces checked once, read-ahead that switches itself off while resident, one open file per
process, split files of format version 1 still read, and the read-ahead loader."""

from __future__ import annotations

import mmap
import os
import pickle
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.ipc as ipc
import pytest
import torch
from torch.utils.data import DataLoader

from arrowmt import FileEntry, FormatError, InvalidParameterError, Manifest, Split, build_view
from arrowmt.io import PAGE, CrcPieces, Residency, WordRanges, _residency
from arrowmt.reading import _reader
from arrowmt.testing import (
    METADATA_KEY,
    OFFSETS_CRC_KEY,
    OFFSETS_PIECES_BINARY_KEY,
    SplitFile,
    SplitMetadata,
    encode_legacy_offsets_crcs,
    open_split_file,
    split_path,
)
from arrowmt.training import (
    FairseqCollater,
    Mixture,
    MixtureBatchSampler,
    PlainCollater,
    ReadAheadLoader,
    TokenBatchSampler,
    open_dataset,
    open_view_dataset,
)
from tests.builders import lengths_dataset, multi30k_dataset
from tests.state_helpers import check_resume

# ---------------------------------------------------------------- pieces checked once


def pieces_of(data: bytes, size: int) -> tuple[np.ndarray, list[tuple[list[int], list[int]]], CrcPieces]:
    """Pieces of ``size`` bytes of ``data`` with their true CRCs; the read-ahead requests are recorded."""
    count = -(-len(data) // size)
    expected = np.array([zlib.crc32(data[k * size : (k + 1) * size]) for k in range(count)], dtype=np.uint32)
    asked: list[tuple[list[int], list[int]]] = []

    def bounds(pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return pieces * size, np.minimum((pieces + 1) * size, len(data))

    def failure(k: int, want: int, found: int) -> Exception:
        return FormatError(f"piece {k}: expected {want:08x}, found {found:08x}")

    array = np.frombuffer(bytearray(data), dtype=np.uint8)
    checks = CrcPieces(array, expected, bounds, failure, lambda s, e: asked.append((s.tolist(), e.tolist())))
    return array, asked, checks


def test_pieces_are_checked_once_each_and_read_ahead_together() -> None:
    _, asked, checks = pieces_of(bytes(range(256)) * 4, 100)  # 11 pieces, the last of 24 bytes
    checks.ensure(np.array([7, 2, 7, 10]))
    assert checks.checked.tolist() == [k in (2, 7, 10) for k in range(11)]
    assert asked == [([200, 700, 1000], [300, 800, 1024])]  # the three pieces asked for together
    checks.ensure_range(3, 3)  # one piece: nothing asked ahead
    checks.ensure(np.array([2, 3, 7]))  # all checked: nothing read
    assert len(asked) == 1 and not checks.all_checked
    checks.ensure_all()
    assert checks.all_checked and checks.checked.all()


def test_a_changed_piece_fails_and_the_pieces_before_it_stay_checked() -> None:
    data, _, checks = pieces_of(bytes(1000), 100)
    data[550] = 1
    with pytest.raises(FormatError, match="piece 5: expected"):
        checks.ensure(np.array([1, 5, 8]))
    assert checks.checked.tolist() == [k == 1 for k in range(10)]
    with pytest.raises(FormatError, match="piece 5"):  # never marked checked: refused again
        checks.ensure_range(4, 6)
    assert checks.checked.tolist() == [k in (1, 4) for k in range(10)]


def test_many_pieces_are_read_ahead_a_group_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from arrowmt.io import _pieces

    monkeypatch.setattr(_pieces, "GROUP", 4)
    _, asked, checks = pieces_of(bytes(1000), 100)
    checks.ensure_all()
    assert [s for s, _ in asked] == [[0, 100, 200, 300], [400, 500, 600, 700], [800, 900]]


# ---------------------------------------------------------------- read-ahead switches itself off while resident


def fake_ranges(pages: int = 4) -> WordRanges:
    return WordRanges(mmap.mmap(-1, pages * PAGE), 0, np.arange(pages) * (PAGE // 4), np.ones(pages, dtype=np.int64))


def test_the_gate_skips_more_and_more_requests_while_resident_and_none_after_a_miss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resident = [True]
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: len(pages) if resident[0] else 0)
    gate, ranges = Residency(), fake_ranges()
    prepared = []
    for request in range(200):
        if gate.due():
            prepared.append(request)
            gate.resident([ranges])
    assert prepared == [0, 1, 6, 15, 32, 65, 130, 195]  # skips of 4, 8, 16, 32, then 64 at most
    resident[0] = False
    prepared.clear()
    for request in range(200, 300):
        if gate.due():
            prepared.append(request)
            gate.resident([ranges])
    assert prepared[0] == 260 and prepared[1:] == list(range(261, 300))  # the miss: every request again


def test_read_ahead_asks_nothing_while_the_pages_are_resident(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    monkeypatch.setattr(_residency, "will_need", lambda ranges: asked.append(len(ranges)) or 1)
    monkeypatch.setattr(_residency, "RESIDENCY", Residency())
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: len(pages))
    assert [_residency.read_ahead([fake_ranges()]) for _ in range(10)] == [0] * 10 and asked == []
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: 0)
    for _ in range(100):
        _residency.read_ahead([fake_ranges()])
    assert asked  # evicted: asked again


def test_a_batch_read_in_the_page_cache_asks_the_kernel_for_nothing(tmp_path: Path) -> None:
    """A real corpus read twice: the second pass finds its pages resident and skips read-ahead (no page asked)."""
    folder = multi30k_dataset(tmp_path / "c", "valid")
    ds = open_dataset(folder, "valid")
    sampler = TokenBatchSampler(ds, 256, cache_dir=tmp_path / "cache", prefetch=4)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=PlainCollater(ds.special_ids))
    first = [b["source"].tolist() for b in loader]
    again = [b["source"].tolist() for b in loader]
    assert first == again and sampler.prefetcher is not None
    assert sampler.prefetcher.pages == 0  # just written: every page resident
    assert sampler.prefetcher.gate.sampled < len(first) // 4  # the second pass: sampled less and less often


# ---------------------------------------------------------------- one open file per process


@pytest.fixture()
def shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files are shared however recently they were written (tests write their files just before opening them)."""
    monkeypatch.setattr(_reader, "RACY_NS", -(10**15))


def test_every_reader_of_a_file_shares_one_open_file(tmp_path: Path, shared: None) -> None:
    folder = multi30k_dataset(tmp_path / "c", "valid")
    path = split_path(folder, "valid")
    first, second = open_split_file(path), Split(folder, "valid").shards[0]
    assert second is first and open_dataset(folder, "valid").shards[0] is first
    assert pickle.loads(pickle.dumps(first)) is first  # a worker's unpickled copy: the same open file
    assert open_split_file(path, "sequential") is not first  # other advice: another map
    views = [tmp_path / f"v{k}.view" for k in range(3)]
    for k, view in enumerate(views):
        build_view(folder, view, split="valid", rows=np.arange(k, 900, 3))
    datasets = [open_view_dataset(view, folder) for view in views]
    assert all(d.corpus.shards[0] is first for d in datasets)
    first.check_offsets()
    assert first.offset_checks.all_checked and datasets[0].corpus.shards[0].offset_checks.all_checked


def test_a_changed_file_is_opened_anew(tmp_path: Path, shared: None) -> None:
    folder = lengths_dataset(tmp_path / "c", [3] * 20, [2] * 20)
    path = split_path(folder, "train")
    first = open_split_file(path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: another identity
    again = open_split_file(path)
    assert again is not first and again.identity != first.identity
    with pytest.raises(FormatError, match="file changed since it was first opened"):
        pickle.loads(pickle.dumps(first))


def test_a_recent_file_is_not_shared(tmp_path: Path) -> None:
    """Written within the timestamps' granularity: each open maps and validates it (a second write in the same tick
    could keep its identity)."""
    path = split_path(lengths_dataset(tmp_path / "c", [3] * 20, [2] * 20), "train")
    assert open_split_file(path) is not open_split_file(path)


def test_a_mixture_of_views_of_one_corpus_checks_its_file_once(tmp_path: Path, shared: None) -> None:
    folder = multi30k_dataset(tmp_path / "c", "valid")
    corpora = {}
    for k in range(4):
        build_view(folder, tmp_path / f"v{k}.view", split="valid", rows=np.arange(k, 1000, 4))
        corpora[f"v{k}"] = open_view_dataset(tmp_path / f"v{k}.view", folder)
    mixture = Mixture(corpora)
    sampler = MixtureBatchSampler(mixture, 300, cache_dir=tmp_path / "cache", temperature=2.0, seed=3)
    collate = FairseqCollater(mixture.special_ids)
    gathered = [collate(mixture.__getitems__(ids)) for ids in sampler]
    assert mixture._gather and len(mixture._gather.offset_checks.sets) == 1  # one file behind four views
    for ids, batch in zip(list(sampler)[:5], gathered, strict=False):
        corpus, local = mixture.locate(np.array(ids))
        rows = [corpora[mixture.names[c]].corpus_rows(np.array([r]))[0] for c, r in zip(corpus, local, strict=True)]
        plain = open_dataset(folder, "valid").__getitems__(rows)
        assert torch.equal(collate(plain)["target"], batch["target"])


# ---------------------------------------------------------------- files of split format version 1


def as_version_1(folder: Path, split: str) -> Path:
    """The split file rewritten as arrowmt wrote it before version 2: JSON checksums, ``format_version`` 1."""
    path = split_path(folder, split)
    with ipc.open_stream(str(path)) as reader:
        schema = reader.schema
        batches = list(reader)
    meta = SplitMetadata.from_json(schema.metadata[METADATA_KEY], str(path))
    old = schema.with_metadata({METADATA_KEY: meta.to_json().replace(b'"format_version":2', b'"format_version":1')})
    out = path.with_name("old.arrow")
    with ipc.new_stream(str(out), old) as writer:
        for batch in batches:
            offsets = {name: batch.column(name).offsets.to_numpy() for name in old.names}
            writer.write_batch(batch, custom_metadata=encode_legacy_offsets_crcs(offsets))
    out.replace(path)
    manifest = Manifest.load(folder)
    manifest.files[split] = FileEntry.of(path, manifest.files[split].rows)
    manifest.save(folder)
    return path


def test_a_version_1_file_is_read_and_checked_as_before(tmp_path: Path) -> None:
    folder = multi30k_dataset(tmp_path / "c", "valid")
    before = [open_dataset(folder, "valid")[k]["target"].tolist() for k in (0, 500, 1013)]
    path = as_version_1(folder, "valid")
    with ipc.open_stream(str(path)) as reader:
        custom = [dict(m) for _, m in reader.iter_batches_with_custom_metadata()]
    assert all(OFFSETS_CRC_KEY in m and OFFSETS_PIECES_BINARY_KEY not in m for m in custom)
    split = SplitFile(path)
    assert split.metadata.format_version == 1 and split.offset_checks.present.all()
    assert [open_dataset(folder, "valid")[k]["target"].tolist() for k in (0, 500, 1013)] == before
    first = int(split.layouts["target"].offsets_pos[0])
    words = np.memmap(path, dtype=np.int32, mode="r+")
    words[first + 3] += 1 if words[first + 3] < words[first + 4] else -1  # an offset moved within its neighbours
    words.flush()
    del words
    with pytest.raises(FormatError, match=r"record batch 0 \(target\): offsets checksum of rows 0\.\."):
        SplitFile(path).row("target", 2)


def test_the_writer_records_binary_checksums_in_version_2(tmp_path: Path) -> None:
    path = split_path(multi30k_dataset(tmp_path / "c", "valid"), "valid")
    split = SplitFile(path)
    assert split.metadata.format_version == 2
    with ipc.open_stream(str(path)) as reader:
        assert all(list(m) == [OFFSETS_PIECES_BINARY_KEY] for _, m in reader.iter_batches_with_custom_metadata())


# ---------------------------------------------------------------- the read-ahead loader


def ids_and_sums(batch: Any) -> list[int]:
    out = PlainCollater()(batch)
    return [*out["id"].tolist(), int(out["source"].sum()), int(out["target"].sum())]


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return multi30k_dataset(tmp_path_factory.mktemp("valid") / "c", "valid")


def test_the_loader_yields_the_dataloaders_batches(valid: Path, tmp_path: Path) -> None:
    ds = open_dataset(valid, "valid")
    sampler = TokenBatchSampler(ds, 300, cache_dir=tmp_path, seed=5)
    plain = list(DataLoader(ds, batch_sampler=sampler, collate_fn=ids_and_sums))
    loader = ReadAheadLoader(ds, sampler, ids_and_sums, depth=3)
    assert len(loader) == len(plain) and list(loader) == plain
    sampler.set_epoch(2)
    assert list(loader) == list(DataLoader(ds, batch_sampler=sampler, collate_fn=ids_and_sums)) != plain


def test_the_loader_resumes_exactly_whatever_it_read_ahead(valid: Path, tmp_path: Path) -> None:
    ds = open_dataset(valid, "valid")

    def loader() -> ReadAheadLoader:
        sampler = TokenBatchSampler(ds, 300, cache_dir=tmp_path, seed=5)
        sampler.set_epoch(3)
        return ReadAheadLoader(ds, sampler, ids_and_sums, depth=8)

    full = check_resume(loader, consume=7)
    check_resume(loader, consume=len(full))  # saved after the last batch: nothing left of the epoch


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 under torch >= 2.10
def test_loader_states_load_into_stateful_dataloaders_and_back(valid: Path, tmp_path: Path) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from arrowmt.training import load_loader_state

    ds = open_dataset(valid, "valid")

    def sampler() -> TokenBatchSampler:
        return TokenBatchSampler(ds, 300, cache_dir=tmp_path, seed=5)

    full = list(ReadAheadLoader(ds, sampler(), ids_and_sums))
    mine = ReadAheadLoader(ds, sampler(), ids_and_sums)
    it = iter(mine)
    assert [next(it) for _ in range(4)] == full[:4]
    theirs = stateful.StatefulDataLoader(ds, batch_sampler=sampler(), collate_fn=ids_and_sums, num_workers=2)
    load_loader_state(theirs, mine.state_dict())
    assert list(theirs) == full[4:]
    theirs = stateful.StatefulDataLoader(ds, batch_sampler=sampler(), collate_fn=ids_and_sums, num_workers=2)
    it = iter(theirs)
    assert [next(it) for _ in range(6)] == full[:6]
    back = ReadAheadLoader(ds, sampler(), ids_and_sums)
    back.load_state_dict(theirs.state_dict())
    assert list(back) == full[6:]


def test_an_error_reading_a_batch_is_raised_in_the_training_loop(valid: Path, tmp_path: Path) -> None:
    ds = open_dataset(valid, "valid")
    sampler = TokenBatchSampler(ds, 300, cache_dir=tmp_path)

    def failing(batch: Any) -> Any:
        raise InvalidParameterError("collate: expected something else")

    with pytest.raises(InvalidParameterError, match="collate: expected something else"):
        list(ReadAheadLoader(ds, sampler, failing))


def test_a_left_iteration_stops_its_thread(valid: Path, tmp_path: Path) -> None:
    import threading

    ds = open_dataset(valid, "valid")
    loader = ReadAheadLoader(ds, TokenBatchSampler(ds, 300, cache_dir=tmp_path), ids_and_sums, depth=2)
    it = iter(loader)
    next(it)
    it.close()  # the loop was left (break): the thread is stopped and joined
    assert not [t for t in threading.enumerate() if t.name == "arrowmt-read-ahead"]
    with pytest.raises(InvalidParameterError, match="depth"):
        ReadAheadLoader(ds, loader.batch_sampler, ids_and_sums, depth=0)
    assert ReadAheadLoader(ds, loader.batch_sampler, ids_and_sums).pin_memory == torch.cuda.is_available()
