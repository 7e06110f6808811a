"""Access advice and plan-driven read-ahead: page arithmetic, the schedule, restart after resume, failures."""

from __future__ import annotations

import mmap
import pickle
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from builders import multi30k_dataset
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from arrowmt import ArrowMTDataset, InvalidParameterError, PlainCollater, Split, TokenBatchSampler
from arrowmt.io import _advice, _prefetch, _residency
from arrowmt.testing import PAGE, Prefetcher, WordRanges, check_access, page_runs, will_need


class FakeMap:
    """Records ``madvise`` calls; ``fail`` makes each call raise (a kernel that refuses, EIO)."""

    def __init__(self, size: int, fail: bool = False) -> None:
        self.size, self.fail, self.calls = size, fail, []

    def __len__(self) -> int:
        return self.size

    def madvise(self, option: int, start: int = 0, length: int = 0) -> None:
        if self.fail:
            raise OSError(5, "Input/output error")
        self.calls.append((option, start, length))


def ranges(starts: list[int], lengths: list[int], size: int = 100 * PAGE, fail: bool = False) -> WordRanges:
    return WordRanges(FakeMap(size, fail), 0, np.array(starts), np.array(lengths))  # type: ignore[arg-type]


# ---------------------------------------------------------------- page arithmetic


def test_page_runs_merge_adjacent_and_overlapping_pages() -> None:
    first, count = page_runs(
        np.array([0, 10, 4095, 3 * PAGE, 5 * PAGE + 1, 9 * PAGE]),
        np.array([1, 20, 4097, 3 * PAGE + 8, 5 * PAGE + 2, 9 * PAGE]),  # the last range is empty
        page=4096,
    )
    assert first.tolist() == [0, 3, 5]
    assert count.tolist() == [2, 1, 1]


def test_page_runs_of_unsorted_ranges_spanning_pages() -> None:
    first, count = page_runs(np.array([7 * 4096, 100, 2 * 4096 - 4]), np.array([7 * 4096 + 9000, 200, 2 * 4096 + 4]))
    assert first.tolist() == [0, 7]
    assert count.tolist() == [3, 3]


def test_page_runs_of_nothing() -> None:
    first, count = page_runs(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert first.size == count.size == 0


def test_will_need_asks_for_exact_page_runs_clipped_to_the_map() -> None:
    words = PAGE // 4
    part = ranges([0, 1, 3 * words, 10 * words], [2, 2, words + 1, 1000], size=10 * PAGE + 8)
    assert will_need([part]) == 4  # pages 0, 3-4 and 10 (the last range is cut at the map's end)
    willneed = mmap.MADV_WILLNEED
    assert part.mapped.calls == [(willneed, 0, PAGE), (willneed, 3 * PAGE, 2 * PAGE), (willneed, 10 * PAGE, PAGE)]


def test_a_refused_read_ahead_is_only_a_lost_hint() -> None:
    assert will_need([ranges([0], [4], fail=True)]) == 0


def test_ranges_of_several_maps_are_merged_as_page_runs_of_the_address_space(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(_advice, "_libc_madvise", lambda: lambda *call: calls.append(call) or 0)
    words = PAGE // 4
    first = WordRanges(FakeMap(4 * PAGE), 10 * PAGE, np.array([0, 3 * words]), np.array([2, 1]))  # type: ignore[arg-type]
    second = WordRanges(FakeMap(4 * PAGE), 14 * PAGE, np.array([0, 3 * words]), np.array([1, 5 * words]))  # type: ignore[arg-type]
    assert will_need([first, second]) == 1 + 2 + 1  # page 10; 13-14 across the two maps; 17, cut at the map's end
    willneed = mmap.MADV_WILLNEED
    assert calls == [(10 * PAGE, PAGE, willneed), (13 * PAGE, 2 * PAGE, willneed), (17 * PAGE, PAGE, willneed)]
    assert first.mapped.calls == second.mapped.calls == []  # type: ignore[attr-defined]


def test_a_refused_run_of_several_maps_ends_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_advice, "_libc_madvise", lambda: lambda *call: -1)
    parts = [WordRanges(FakeMap(PAGE), k * PAGE, np.array([0]), np.array([1])) for k in (1, 5)]  # type: ignore[arg-type]
    assert will_need(parts) == 0


def test_residency_of_a_batch_over_many_corpora_is_sampled_in_some(monkeypatch: pytest.MonkeyPatch) -> None:
    sampled: list[int] = []
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: sampled.append(part.address) or len(pages))
    parts = [WordRanges(FakeMap(PAGE), k * PAGE, np.array([0]), np.array([1])) for k in range(100)]  # type: ignore[arg-type]
    assert _residency.Residency().resident(parts)
    assert len(sampled) == _residency.SAMPLE_PAGES and sampled[0] == 0 and sampled[-1] == 99 * PAGE


# ---------------------------------------------------------------- advice


@pytest.mark.parametrize("bad", ["RANDOM", "", None, 3])
def test_access_must_be_a_known_mode(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"access: expected one of \['random', 'sequential', 'normal'\]"):
        check_access(bad)


@pytest.fixture(scope="module")
def valid_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return multi30k_dataset(tmp_path_factory.mktemp("valid") / "arrowmt", "valid")


def test_maps_are_random_access_by_default_and_sequential_when_asked(
    valid_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    advised: list[str] = []
    real = _advice.advise
    monkeypatch.setattr("arrowmt.reading._reader.advise", lambda m, a: (advised.append(a), real(m, a)))
    split = Split(valid_folder, "valid")
    assert (split.access, advised) == ("random", ["random"])
    split.advise("sequential")
    assert (split.access, advised) == ("sequential", ["random", "sequential"])
    copy = pickle.loads(pickle.dumps(split))  # a worker's copy keeps the advice
    assert copy.access == "sequential" and advised[-1] == "sequential"
    with pytest.raises(InvalidParameterError, match="access"):
        Split(valid_folder, "valid", access="backwards")


def test_open_dataset_and_open_blocks_take_the_access_advice(valid_folder: Path) -> None:
    import arrowmt

    assert arrowmt.open_dataset(valid_folder, "valid").access == "random"
    ds = arrowmt.open_dataset(valid_folder, "valid", access="normal")
    assert ds.access == "normal" and pickle.loads(pickle.dumps(ds)).access == "normal"
    with pytest.raises(InvalidParameterError, match=r"access: expected one of .* got 'fast'"):
        arrowmt.open_blocks(valid_folder, "valid", access="fast")


def test_sequential_readers_ask_for_sequential_read_ahead(valid_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import arrowmt

    advised: list[str] = []
    monkeypatch.setattr("arrowmt.reading._reader.advise", lambda m, a: advised.append(a))
    arrowmt.verify_dataset(valid_folder)
    arrowmt.summarize(valid_folder)
    assert advised and set(advised) == {"sequential"}


def test_word_ranges_locate_offsets_without_reading_and_tokens_by_reading(valid_folder: Path) -> None:
    split = Split(valid_folder, "valid")
    rows = np.array([5, 0, 700])
    shard = split.shards[0]
    for column, offsets, tokens in zip(
        split.columns, split.word_ranges(rows, values=False), split.word_ranges(rows, values=True), strict=True
    ):
        assert offsets.lengths.tolist() == [2, 2, 2]
        start = shard.words[offsets.starts]
        end = shard.words[offsets.starts + 1]
        spans_start, spans_length = shard.spans(column, rows)
        assert (end - start).tolist() == spans_length.tolist() == tokens.lengths.tolist()
        assert tokens.starts.tolist() == spans_start.tolist()


# ---------------------------------------------------------------- the schedule


class RecordingSource:
    """A row source whose batch ``q`` is row ``q``, on page ``q``; records what was asked, in order: the rows of one
    batch as a number, those of several batches located at once as a list."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int | list[int]]] = []

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        rows = indices.tolist()
        self.asked.append(("values" if values else "offsets", rows[0] if len(rows) == 1 else rows))
        return [ranges([row * PAGE // 4 for row in rows], [1] * len(rows), size=1000 * PAGE)]


def batches(n: int):
    return lambda q: np.array([q]) if q < n else None


def test_schedule_reads_tokens_of_the_next_depth_batches_and_offsets_of_the_depth_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Batches are located and asked for GROUP at a time (here 3): the tokens of a group once the position comes
    within ``depth`` (2) batches of it, its offsets once within twice that."""
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: 0)  # nothing in the page cache
    monkeypatch.setattr(_prefetch, "GROUP", 3)
    source = RecordingSource()
    ahead = Prefetcher(source, 2, batches(8))
    assert source.asked == [("values", 0)]  # is the corpus remote? (no)
    asked = []
    for position in range(8):
        source.asked.clear()
        ahead.step(position)
        asked.append(source.asked[:])
    assert asked == [
        [("values", [0, 1, 2]), ("offsets", [3, 4, 5])],
        [("values", [3, 4, 5])],
        [("offsets", [6, 7])],
        [],
        [("values", [6, 7])],
        [],  # nothing past the epoch's last batch
        [],
        [],
    ]
    assert ahead.pages == 3 + 3 + 3 + 2 + 2


class FakeStore:
    """A cache's clock: counts the batches handed out."""

    def __init__(self) -> None:
        self.now = 0

    def tick(self) -> None:
        self.now += 1


class FakeRemote:
    """A remote file's cache: records what the plan says it needs (``plan_uses``, a range at a time) and what is
    fetched ahead, each with the clock's time then."""

    def __init__(self) -> None:
        self.store = FakeStore()
        self.planned: list[tuple[list[int], int, int]] = []
        self.fetched: list[tuple[list[int], int | None, int]] = []

    def plan_uses(self, starts: np.ndarray, ends: np.ndarray, aheads: np.ndarray) -> None:
        for start, ahead in zip(starts.tolist(), aheads.tolist(), strict=True):
            self.planned.append(([start], ahead, self.store.now))

    def prefetch(self, starts: np.ndarray, ends: np.ndarray, ahead: int | None, planned: bool = False) -> None:
        self.fetched.append((starts.tolist(), ahead, self.store.now))

    def resident(self, starts: np.ndarray, ends: np.ndarray) -> bool:
        return False


class RemoteSource:
    """Batch ``q`` is row ``q``: word ``100 q`` of a remote file."""

    def __init__(self) -> None:
        self.remote = FakeRemote()

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        starts = np.array([100 * int(indices[0])])
        return [WordRanges(FakeMap(1000 * PAGE), 0, starts, np.array([1]), self.remote)]  # type: ignore[arg-type]


def test_a_remote_pass_is_planned_whole_then_read_further_ahead() -> None:
    """A resumed pass at position 3 of 8: the cache learns in how many batches each batch left is needed; each batch
    handed out after the first moves its clock one step (nothing is planned again); read-ahead goes at least
    REMOTE_DEPTH batches deep."""
    source = RemoteSource()
    ahead = Prefetcher(source, 2, batches(8), start=3)
    assert ahead.depth == _prefetch.REMOTE_DEPTH and ahead.clocks == [source.remote.store]
    assert source.remote.planned == [([400 * q], q - 3, 0) for q in range(3, 8)]
    source.remote.planned.clear()
    ahead.step(3)
    assert source.remote.planned == [] and source.remote.store.now == 0  # the first batch: the clock unmoved
    assert source.remote.fetched == [([400 * q], q - 3, 0) for q in range(3, 8)]  # values: up to the epoch's end
    ahead.step(4)
    assert source.remote.store.now == 1 and source.remote.planned == []
    assert Prefetcher(source, 0, batches(8)).depth == 0 and source.remote.planned == []  # off: nothing planned


def test_a_long_remote_pass_is_planned_by_a_thread_that_stops_when_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start batch and the first chunk are planned before the first batch; a thread plans the rest, chunk after
    chunk, each use due at its own step however far the clock has moved meanwhile; closing stops it (the chunk it
    was reading is not planned: another pass owns the clock)."""
    monkeypatch.setattr(_prefetch, "PASS_CHUNK", 4)
    source, gate, plain = RemoteSource(), threading.Event(), batches(100)

    def batch_at(q: int) -> np.ndarray | None:
        if q >= 9 and threading.current_thread().name == "arrowmt-pass-plan":
            assert gate.wait(10)  # the planner waits here until the clock has moved
        return plain(q)

    ahead = Prefetcher(source, 2, batch_at)
    planned = source.remote.planned
    assert [(starts[0] // 400, when, now) for starts, when, now in planned[:5]] == [(q, q, 0) for q in range(5)]
    for _ in range(1000):
        if len(planned) >= 9:
            break
        time.sleep(0.01)
    for position in range(3):
        ahead.step(position)  # the clock moves twice
    ahead.close()
    gate.set()
    assert ahead.planner is not None
    ahead.planner.join(10)
    assert not ahead.planner.is_alive() and source.remote.store.now == 2
    assert [(starts[0] // 400, when + now) for starts, when, now in planned] == [(q, q) for q in range(9)]


def test_planning_threads_are_stopped_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon thread still running while the interpreter finalizes can abort the process: the exit hook closes
    every prefetcher whose pass is being planned and waits for its thread."""
    monkeypatch.setattr(_prefetch, "PASS_CHUNK", 2)
    entered, plain = threading.Event(), batches(10**6)

    def slow(q: int) -> np.ndarray | None:
        if threading.current_thread().name == "arrowmt-pass-plan":
            entered.set()
            time.sleep(0.001)
        return plain(q)

    ahead = Prefetcher(RemoteSource(), 2, slow)
    assert entered.wait(10) and ahead.planner is not None and ahead.planner.is_alive()
    _prefetch._stop_planning()
    assert ahead.closed and not ahead.planner.is_alive() and ahead not in set(Prefetcher.planning)


def test_schedule_starts_at_a_resumed_position(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: 0)
    monkeypatch.setattr(_prefetch, "GROUP", 2)
    source = RecordingSource()
    Prefetcher(source, 1, batches(10), start=7).step(7)
    assert source.asked == [("values", 7), ("values", [7, 8]), ("offsets", 9)]


def test_schedule_backs_off_while_the_pages_are_resident(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first group is found resident: from then on one batch is sampled at a time, with skips of 4, 8, 16, ...
    up to MAX_SKIP, and no page is asked for; at the first miss every batch is asked for again, a group at a time."""
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: len(pages))  # all in the page cache
    monkeypatch.setattr(_prefetch, "GROUP", 4)
    source = RecordingSource()
    ahead = Prefetcher(source, 1, batches(1000))
    source.asked.clear()
    for position in range(300):
        ahead.step(position)
    assert [q for kind, q in source.asked if kind == "values"] == [[0, 1, 2, 3], 4, 9, 18, 35, 68, 133, 198, 263]
    assert ahead.pages == 0 and all(kind == "values" for kind, _ in source.asked)
    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: 0)  # evicted: ask for every batch again
    source.asked.clear()
    for position in range(300, 340):
        ahead.step(position)
    values = [q for kind, q in source.asked if kind == "values"]
    assert values[:2] == [328, [329, 330, 331, 332]] and values[-1] == [337, 338, 339, 340] and ahead.streak == 0


@pytest.mark.parametrize("bad", [-1, 1025, 2.5, "8"])
def test_prefetch_depth_is_checked(valid_folder: Path, tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="prefetch"):
        TokenBatchSampler(ArrowMTDataset(valid_folder, "valid"), 512, cache_dir=tmp_path, prefetch=bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- in the samplers and loaders


@pytest.fixture()
def cold(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """Pretend nothing is in the page cache; returns every range read ahead (token ranges' starts)."""
    asked: list[np.ndarray] = []
    real = _prefetch.will_need

    def record(parts: list[WordRanges], *hints: int | None, later: bool = False) -> int:
        asked.extend(p.starts for p in parts)
        return real(parts, *hints, later=later)

    monkeypatch.setattr(_residency, "resident_pages", lambda part, pages: 0)
    monkeypatch.setattr(_prefetch, "will_need", record)
    return asked


def test_read_ahead_never_changes_a_batch(valid_folder: Path, tmp_path: Path, cold: list[np.ndarray]) -> None:
    ds = ArrowMTDataset(valid_folder, "valid")
    with_ahead = TokenBatchSampler(ds, 512, cache_dir=tmp_path, prefetch=4)
    without = TokenBatchSampler(ds, 512, cache_dir=tmp_path, prefetch=0)
    assert list(with_ahead) == list(without)
    assert cold and without.prefetcher is None and with_ahead.prefetcher.pages > 0


def test_read_ahead_runs_with_dataloader_workers(valid_folder: Path, tmp_path: Path, cold: list[np.ndarray]) -> None:
    ds = ArrowMTDataset(valid_folder, "valid")
    sampler = TokenBatchSampler(ds, 512, cache_dir=tmp_path, prefetch=4)
    collate = PlainCollater(ds.special_ids)
    plain = [b["source"].tolist() for b in DataLoader(ds, batch_sampler=list(sampler), collate_fn=collate)]
    loaded = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=2)
    assert [b["source"].tolist() for b in loaded] == plain
    assert sampler.prefetcher.pages > 0  # the main process read ahead while the workers gathered


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 under torch >= 2.10
def test_read_ahead_restarts_at_the_resumed_position(
    valid_folder: Path, tmp_path: Path, cold: list[np.ndarray]
) -> None:
    ds = ArrowMTDataset(valid_folder, "valid")

    def loader() -> StatefulDataLoader:
        sampler = TokenBatchSampler(ds, 512, cache_dir=tmp_path, prefetch=3)
        return StatefulDataLoader(ds, batch_sampler=sampler, collate_fn=PlainCollater(ds.special_ids))

    first = loader()
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    cold.clear()
    next(iter(resumed))
    sampler = resumed.batch_sampler
    order = sampler.epoch_batch_ids()
    group = np.concatenate([sampler.plan.batch(int(order[q])) for q in range(5, 5 + _prefetch.GROUP)])
    assert cold[0].tolist() == ds.word_ranges(group, True)[0].starts.tolist()  # source column of the group from 5 on


# ---------------------------------------------------------------- the fairseq plugin's iterator


def _epoch_ids(itr, epoch_itr_kwargs: dict | None = None, take: int | None = None) -> list[list[int]]:
    out = []
    for k, ids in enumerate(itr.next_epoch_itr(shuffle=True, **(epoch_itr_kwargs or {}))):
        if take is not None and k >= take:
            break
        out.append(ids)
    return out


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")  # fairseq's DataLoader on CPU
def test_plugin_iterator_reads_ahead_and_keeps_fairseqs_batches(
    valid_folder: Path, tmp_path: Path, cold: list[np.ndarray]
) -> None:
    pytest.importorskip("fairseq")
    from fairseq.data import iterators

    from arrowmt.testing import ReadAheadBatches, ReadAheadEpochBatchIterator

    ds = ArrowMTDataset(valid_folder, "valid")
    plan = TokenBatchSampler(ds, 300, cache_dir=tmp_path, prefetch=0).plan
    batches = [plan.batch(b) for b in range(len(plan))]

    def make(read_ahead: bool, state: dict | None = None):
        kw = {"dataset": ds, "collate_fn": lambda rows: [r["id"] for r in rows], "batch_sampler": batches}
        kw.update(seed=3, num_shards=2, shard_id=1, epoch=1)
        itr = ReadAheadEpochBatchIterator(4, **kw) if read_ahead else iterators.EpochBatchIterator(**kw)
        if state is not None:
            itr.load_state_dict(state)
        return itr

    assert _epoch_ids(make(True)) == _epoch_ids(make(False))
    assert cold
    interrupted = make(True)
    epoch = interrupted.next_epoch_itr(shuffle=True)
    first = [next(epoch) for _ in range(5)]
    state = interrupted.state_dict()
    resumed = make(True, state)
    cold.clear()
    rest = list(resumed.next_epoch_itr(shuffle=True))
    assert first + rest == _epoch_ids(make(False))
    assert isinstance(resumed.epoch_batch_sampler.batches, ReadAheadBatches)  # the resumed slice reads ahead too
    group = np.concatenate([np.array(ids) for ids in rest[: _prefetch.GROUP]])
    assert cold and cold[0].tolist() == ds.word_ranges(group, True)[0].starts.tolist()  # from the resumed batch on


# ---------------------------------------------------------------- what other datasets read ahead


def _tokens(parts: list[WordRanges]) -> list[list[int]]:
    """The words each range names, read through the map's int32 view."""
    out = []
    for part in parts:
        words = np.frombuffer(part.mapped, dtype=np.int32)
        out.extend(words[s : s + n].tolist() for s, n in zip(part.starts.tolist(), part.lengths.tolist(), strict=True))
    return out


def _positions(parts: list[WordRanges]) -> set[tuple[int, int]]:
    """(map address, word position) of every word the ranges name."""
    return {
        (part.address, int(p))
        for part in parts
        for s, n in zip(part.starts.tolist(), part.lengths.tolist(), strict=True)
        for p in range(s, s + n)
    }


@pytest.mark.parametrize(("mode", "shards"), [("none", 1), ("complete", 2)])
def test_block_read_ahead_names_each_blocks_tokens(tmp_path: Path, mode: str, shards: int) -> None:
    from lm_data import mono_corpus

    from arrowmt import open_blocks

    rng = np.random.default_rng(5)
    rows = [[*rng.integers(4, 900, int(n)).tolist(), 2] for n in rng.integers(1, 40, 300)]
    blocks = open_blocks(mono_corpus(tmp_path / "mono", rows, 64, shards), "train", 50, mode, cache_dir=tmp_path)
    ids = np.array([0, 7, len(blocks) - 1, 3])
    named = _positions(blocks.word_ranges(ids, True))
    stream = blocks.stream
    seg = stream.segments(*blocks.bounds(ids))
    shard = stream.shard[seg.piece]
    needed = _positions(
        [
            blocks.split.shards[k].ranges(seg.words_start(stream)[shard == k], seg.length[shard == k])
            for k in np.unique(shard).tolist()
        ]
    )
    assert needed and needed <= named
    (table,) = blocks.word_ranges(ids, False)  # locating blocks reads their table entries, not the corpus's offsets
    body, n = blocks.table._side.body_offset, len(blocks)
    starts, ends = blocks.bounds(ids)
    for k, i in enumerate(ids.tolist()):  # start, end (int64 each) and row offset (a byte) of block i
        assert (table.starts[k], table.lengths[k]) == ((body + 8 * i) // 4, 2)
        assert (table.starts[4 + k], table.lengths[4 + k]) == ((body + 8 * n + 8 * i) // 4, 2)
        assert table.starts[8 + k] == (body + 16 * n + i) // 4 and table.lengths[8 + k] == 1
        words = np.frombuffer(table.mapped, dtype="<i8", count=1, offset=4 * int(table.starts[k]))
        assert words.tolist() == [starts[k]] and np.frombuffer(
            table.mapped, dtype="<i8", count=1, offset=4 * int(table.starts[4 + k])
        ).tolist() == [ends[k]]


def test_mixture_read_ahead_names_each_corpus_rows(tmp_path: Path) -> None:
    from builders import lengths_dataset

    from arrowmt import open_mixture

    sizes = {"a": 30, "b": 50}
    folders = {k: lengths_dataset(tmp_path / k, np.arange(1, n + 1), np.arange(n, 0, -1)) for k, n in sizes.items()}
    mixture = open_mixture(folders)
    ids = np.array([3, 45, 0, 79])
    named = _tokens(mixture.word_ranges(ids, True))
    batch = mixture.__getitems__(ids)
    expected = [batch.columns[c].row(k).tolist() for k in range(len(ids)) for c in mixture.columns]
    assert sorted(map(tuple, named)) == sorted(map(tuple, expected))


# ---------------------------------------------------------------- offsets checksums


def test_offsets_checks_read_their_pieces_ahead_together() -> None:
    """Pieces about to be checked for the first time are asked for together (their bytes, one request), file by file;
    a piece already checked, or a single one left, asks for nothing."""
    from arrowmt.testing import ManyOffsetChecks, OffsetChecks, offsets_crc

    words = np.concatenate([np.arange(b, b + 5, dtype=np.int32) for b in range(6)])  # 6 batches of 4 rows
    expected = np.array([[offsets_crc(words[5 * b : 5 * b + 5])] for b in range(6)], dtype=np.uint32)
    asked: list[list[int]] = []

    def checks() -> OffsetChecks:
        rows = np.full(6, 4)  # one piece each
        ahead = lambda first, end: asked.append((first // 20).tolist())  # noqa: E731  (the batch of each byte range)
        return OffsetChecks(Path("f"), ("a",), rows, rows, expected, words, [5 * np.arange(6)], ahead)

    one = checks()
    one.ensure("a", np.array([4, 1, 4, 2]), np.array([0, 3, 1, 2]))
    one.ensure("a", np.array([2, 5]), np.array([0, 0]))  # 2 is checked: one piece left, nothing to read together
    assert asked == [[1, 2, 4]] and one.pieces["a"].checked.tolist() == [False, True, True, False, True, True]
    asked.clear()
    many = ManyOffsetChecks([checks(), checks()])
    many.ensure(np.array([7, 0, 3, 9, 11, 3]))  # file 0: pieces 0 and 3; file 1: pieces 1, 3 and 5
    assert asked == [[0, 3], [1, 3, 5]] and many.checked.tolist() == [k in (0, 3, 7, 9, 11) for k in range(12)]
