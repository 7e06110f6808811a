"""Resume without bookkeeping: TokenBatchSampler under DataLoader and torchdata's StatefulDataLoader
(prefetching workers, a fresh process), across epochs, and elastic resume onto another number of ranks."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import multi30k_dataset
from state_helpers import SamplerLoader, check_resume, check_resume_in_fresh_process, interrupt, torch_roundtrip
from torch.utils.data import DataLoader

from arrowmt import (
    ArrowMTDataset,
    InvalidParameterError,
    PlainCollater,
    SpecialIds,
    TokenBatchSampler,
    load_loader_state,
)
from arrowmt.testing import epoch_batch_order, sampler_state, saved_workers, shard_batches, windowed_batch_order

stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")
StatefulDataLoader = stateful_dataloader.StatefulDataLoader
# torchdata 0.11's StatefulDataLoader calls torch.set_vital, which torch >= 2.10 deprecates (not ours to fix).
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")

MAX_TOKENS = 512
SEED = 5
WORKERS = 2
PREFETCH = 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The real Multi30k valid split (1014 pairs) as an arrowmt folder."""
    return str(multi30k_dataset(tmp_path_factory.mktemp("valid") / "arrowmt", "valid"))


@pytest.fixture()
def cache(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


class BatchIds:
    """collate_fn: the ids of a plain training batch, as a tuple (equal for equal batches; picklable)."""

    def __init__(self, special_ids: SpecialIds) -> None:
        self.collate = PlainCollater(special_ids)

    def __call__(self, rows: Any) -> tuple[int, ...]:
        return tuple(self.collate(rows)["id"].tolist())


def make_sampler(
    corpus: str,
    cache: str,
    epoch: int = 1,
    num_replicas: int = 1,
    rank: int = 0,
    ds: ArrowMTDataset | None = None,
    window: int | None = None,
) -> TokenBatchSampler:
    ds = ArrowMTDataset(corpus, "valid") if ds is None else ds
    sampler = TokenBatchSampler(
        ds, MAX_TOKENS, seed=SEED, num_replicas=num_replicas, rank=rank, cache_dir=cache, shuffle_window=window
    )
    sampler.set_epoch(epoch)
    return sampler


def stateful_loader(
    corpus: str,
    cache: str,
    epoch: int = 1,
    num_workers: int = WORKERS,
    num_replicas: int = 1,
    rank: int = 0,
    window: int | None = None,
) -> Any:
    """A StatefulDataLoader over the sampler of ``epoch`` (set before any state is loaded, as a training loop does)."""
    ds = ArrowMTDataset(corpus, "valid")
    sampler = make_sampler(corpus, cache, epoch, num_replicas, rank, ds, window)
    prefetch = {"prefetch_factor": PREFETCH} if num_workers else {}
    return StatefulDataLoader(
        ds, batch_sampler=sampler, collate_fn=BatchIds(ds.special_ids), num_workers=num_workers, **prefetch
    )


def plain_loader(corpus: str, cache: str, epoch: int = 1) -> SamplerLoader:
    ds = ArrowMTDataset(corpus, "valid")
    sampler = make_sampler(corpus, cache, epoch, ds=ds)
    return SamplerLoader(DataLoader(ds, batch_sampler=sampler, collate_fn=BatchIds(ds.special_ids)))


def epoch_length(corpus: str, cache: str) -> int:
    return len(make_sampler(corpus, cache))


# ------------------------------------------------------------------ one process


@pytest.mark.parametrize("where", ["start", "midpoint", "end"])
def test_dataloader_without_workers_resumes_from_the_sampler_state(corpus: str, cache: str, where: str) -> None:
    length = epoch_length(corpus, cache)
    consume = {"start": 0, "midpoint": length // 2, "end": length}[where]
    full = check_resume(lambda: plain_loader(corpus, cache, epoch=2), consume)
    assert len(full) == length >= 8


@pytest.mark.parametrize("where", ["first", "midpoint", "last"])
def test_stateful_dataloader_with_prefetching_workers_resumes_at_the_next_batch(
    corpus: str, cache: str, where: str
) -> None:
    length = epoch_length(corpus, cache)
    consume = {"first": 1, "midpoint": length // 2, "last": length - 1}[where]
    full = check_resume(lambda: stateful_loader(corpus, cache, epoch=3), consume)
    assert len(full) == length and len(set(full)) == length


def test_stateful_dataloader_state_records_the_yielded_batch_not_the_prefetched_ones(corpus: str, cache: str) -> None:
    loader = stateful_loader(corpus, cache)
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    assert loader.batch_sampler.batches_done > 3  # the workers were handed batches ahead of training
    sampler_state = loader.state_dict()["_snapshot"]["_main_snapshot"]["_index_sampler_state"]
    assert sampler_state["batches_done"] == 3 and sampler_state["epoch"] == 1


# ------------------------------------------------------------------ a fresh process


def test_stateful_dataloader_resumes_in_a_fresh_process(corpus: str, cache: str, tmp_path: Path) -> None:
    length = epoch_length(corpus, cache)
    kwargs = {"corpus": corpus, "cache": cache, "epoch": 2}
    full = check_resume_in_fresh_process(stateful_loader, kwargs, length // 2, tmp_path)
    assert len(full) == length


# ------------------------------------------------------------------ across epochs


class TrainingRun:
    """A training loop's data side over ``epochs`` epochs: its checkpoint is the loader state and the epoch."""

    def __init__(self, corpus: str, cache: str, epochs: int, num_workers: int = WORKERS) -> None:
        self.loader = stateful_loader(corpus, cache, num_workers=num_workers)
        self.sampler = self.loader.batch_sampler
        self.epochs = epochs
        self.epoch = 1

    def __iter__(self) -> Any:
        for epoch in range(self.epoch, self.epochs + 1):
            self.epoch = epoch
            self.sampler.set_epoch(epoch)
            for batch in self.loader:
                yield epoch, batch

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict(), "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["loader"])
        self.epoch = state["epoch"]


@pytest.mark.parametrize("step", ["end_of_epoch_1", "middle_of_epoch_2"])
def test_a_training_loop_resumes_across_epochs(corpus: str, cache: str, step: str) -> None:
    length = epoch_length(corpus, cache)
    consume = length if step == "end_of_epoch_1" else length + length // 3
    full = check_resume(lambda: TrainingRun(corpus, cache, epochs=3), consume, same_state=False)
    assert [epoch for epoch, _ in full] == [1] * length + [2] * length + [3] * length
    assert full[:length] != full[length : 2 * length]


@pytest.mark.parametrize("order", ["set_epoch_then_load", "load_then_set_epoch"])
def test_a_state_saved_after_a_finished_epoch_starts_the_next_epoch(corpus: str, cache: str, order: str) -> None:
    loader = stateful_loader(corpus, cache, epoch=1)
    epoch1 = list(loader)
    state = torch_roundtrip(loader.state_dict())
    expected = list(stateful_loader(corpus, cache, epoch=2))
    resumed = stateful_loader(corpus, cache, epoch=1)
    if order == "set_epoch_then_load":
        resumed.batch_sampler.set_epoch(2)
        resumed.load_state_dict(state)
    else:
        resumed.load_state_dict(state)
        resumed.batch_sampler.set_epoch(2)
    assert list(resumed) == expected != epoch1


def test_a_state_saved_after_a_finished_epoch_leaves_that_epoch_done(corpus: str, cache: str) -> None:
    """Resuming into the saved epoch itself gives an empty epoch (not a replay), then the next one."""
    loader = stateful_loader(corpus, cache, epoch=1)
    list(loader)
    state = torch_roundtrip(loader.state_dict())
    resumed = stateful_loader(corpus, cache, epoch=1)
    resumed.load_state_dict(state)
    assert list(resumed) == []
    resumed.batch_sampler.set_epoch(2)
    assert list(resumed) == list(stateful_loader(corpus, cache, epoch=2))


# ------------------------------------------------------------------ elastic resume


def batch_lists(sampler: TokenBatchSampler, ids: np.ndarray) -> list[list[int]]:
    return [sampler.plan.batch(int(b)).tolist() for b in ids]


@pytest.mark.parametrize(("new_world", "window"), [(2, None), (3, None), (3, 8)])
def test_elastic_resume_from_4_ranks_deals_the_rest_of_the_epoch(
    corpus: str, cache: str, new_world: int, window: int | None
) -> None:
    old = [make_sampler(corpus, cache, epoch=2, num_replicas=4, rank=r, window=window) for r in range(4)]
    steps = len(old[0]) // 2
    before = [list(itertools.islice(iter(s), steps)) for s in old]
    states = [torch_roundtrip(s.state_dict()) for s in old]
    new = [make_sampler(corpus, cache, 2, new_world, r, window=window) for r in range(new_world)]
    for r, sampler in enumerate(new):
        sampler.load_state_dict(states[r % 4])
    after = [list(s) for s in new]

    n = len(old[0].plan)
    order = epoch_batch_order(n, SEED, 2) if window is None else windowed_batch_order(n, SEED, 2, window)
    for r, sampler in enumerate(new):
        assert after[r] == batch_lists(sampler, shard_batches(order, r, new_world, 4 * steps))
    assert len({len(a) for a in after}) == 1  # every rank the same number of steps
    trained = Counter(tuple(b) for batches in before + after for b in batches)
    planned = [tuple(b) for b in batch_lists(new[0], np.arange(n))]
    assert set(trained) == set(planned)
    padding = new_world * len(after[0]) - (n - 4 * steps)
    assert sum(trained.values()) == n + padding and padding < new_world
    assert [b for b in planned if trained[b] > 1] == sorted(
        (planned[int(i)] for i in order[:padding]), key=planned.index
    )


def test_a_shuffle_window_sampler_resumes_through_a_stateful_dataloader(corpus: str, cache: str) -> None:
    """The same batches as fairseq's shuffle, in windows of 16 positions; resumed at the next batch."""
    length = epoch_length(corpus, cache)
    full = check_resume(lambda: stateful_loader(corpus, cache, epoch=3, window=16), length // 2)
    shuffled = list(stateful_loader(corpus, cache, epoch=3))
    assert sorted(full) == sorted(shuffled) and full != shuffled
    sampler = make_sampler(corpus, cache, epoch=3, window=16)
    assert [tuple(b) for b in sampler] == [
        tuple(sampler.plan.batch(int(b)).tolist()) for b in windowed_batch_order(len(sampler.plan), SEED, 3, 16)
    ]


def test_a_state_resumes_only_with_its_shuffle_window(corpus: str, cache: str) -> None:
    windowed = make_sampler(corpus, cache, window=16)
    list(itertools.islice(iter(windowed), 2))
    with pytest.raises(InvalidParameterError, match=r"state_dict\['shuffle_window'\]: expected None .* got 16"):
        make_sampler(corpus, cache).load_state_dict(windowed.state_dict())
    old = {k: v for k, v in make_sampler(corpus, cache).state_dict().items() if k != "shuffle_window"}
    with pytest.raises(InvalidParameterError, match=r"state_dict\['shuffle_window'\]: expected 16 .* got None"):
        make_sampler(corpus, cache, window=16).load_state_dict(old)  # saved before the key existed: None
    make_sampler(corpus, cache).load_state_dict(old)
    with pytest.raises(InvalidParameterError, match=r"state_dict\['shuffle_window'\]: expected an integer >= 1"):
        make_sampler(corpus, cache, window=1).load_state_dict({**windowed.state_dict(), "shuffle_window": True})


@pytest.mark.parametrize(
    ("window", "shuffle", "match"),
    [(0, True, "expected an integer >= 1, got 0"), (4, False, "expected None with shuffle=False, got 4")],
)
def test_a_bad_shuffle_window_is_one_clear_error(
    corpus: str, cache: str, window: int, shuffle: bool, match: str
) -> None:
    with pytest.raises(InvalidParameterError, match=f"shuffle_window: .*{match}"):
        TokenBatchSampler(ArrowMTDataset(corpus, "valid"), MAX_TOKENS, shuffle=shuffle, shuffle_window=window)


def test_elastic_resume_then_resume_again_mid_deal(corpus: str, cache: str) -> None:
    old = make_sampler(corpus, cache, epoch=1, num_replicas=4, rank=1)
    list(itertools.islice(iter(old), 3))
    saved = torch_roundtrip(old.state_dict())

    def make() -> TokenBatchSampler:
        sampler = make_sampler(corpus, cache, epoch=1, num_replicas=3, rank=2)
        sampler.load_state_dict(saved)
        return sampler

    full = check_resume(make, len(make()) // 2)
    order = epoch_batch_order(len(old.plan), SEED, 1)
    assert full == batch_lists(old, shard_batches(order, 2, 3, 12))
    assert make().state_dict()["start"] == 12


def test_elastic_resume_through_stateful_dataloaders(corpus: str, cache: str) -> None:
    old = [stateful_loader(corpus, cache, num_workers=0, num_replicas=4, rank=r) for r in range(4)]
    steps = len(old[0].batch_sampler) // 2
    before = [list(itertools.islice(iter(loader), steps)) for loader in old]
    states = [torch_roundtrip(loader.state_dict()) for loader in old]
    new = [stateful_loader(corpus, cache, num_workers=0, num_replicas=2, rank=r) for r in range(2)]
    for r, loader in enumerate(new):
        loader.load_state_dict(states[r])
    after = [list(loader) for loader in new]
    n = len(old[0].batch_sampler.plan)
    remaining = n - 4 * steps
    trained = Counter(b for batches in before + after for b in batches)
    assert len(trained) == n and sum(trained.values()) == n + (2 * len(after[0]) - remaining)


# ------------------------------------------------------------------ another number of workers


@pytest.mark.parametrize(("saved", "resumed"), [(2, 0), (2, 1), (0, 2), (2, 2)])
def test_load_loader_state_resumes_with_another_number_of_workers(
    corpus: str, cache: str, saved: int, resumed: int
) -> None:
    """torchdata's own load_state_dict fails with a bare AssertionError when num_workers changes; the helper
    continues at the next batch, then the next epoch is the usual one."""
    full = list(stateful_loader(corpus, cache, epoch=3, num_workers=0))
    consume = len(full) // 2
    iterator, state = interrupt(lambda: stateful_loader(corpus, cache, epoch=3, num_workers=saved), full, consume)
    del iterator
    assert saved_workers(state) == saved
    loader = stateful_loader(corpus, cache, epoch=3, num_workers=resumed)
    load_loader_state(loader, state)
    loader.batch_sampler.set_epoch(3)  # as a training loop does after loading: keeps the resumed position
    assert list(loader) == full[consume:]
    loader.batch_sampler.set_epoch(4)
    assert list(loader) == list(stateful_loader(corpus, cache, epoch=4, num_workers=0))


def test_sampler_state_counts_the_batches_after_the_last_snapshot(corpus: str, cache: str) -> None:
    """With snapshot_every_n_steps=3 the saved snapshot lags the yielded batches: they are counted in."""
    ds = ArrowMTDataset(corpus, "valid")
    sampler = make_sampler(corpus, cache, 2, ds=ds)
    kwargs = {"collate_fn": BatchIds(ds.special_ids), "num_workers": WORKERS, "snapshot_every_n_steps": 3}
    loader = StatefulDataLoader(ds, batch_sampler=sampler, **kwargs)
    full = list(stateful_loader(corpus, cache, epoch=2, num_workers=0))
    iterator = iter(loader)
    assert list(itertools.islice(iterator, 7)) == full[:7]
    state = torch_roundtrip(loader.state_dict())
    del iterator
    assert state["_steps_since_snapshot"] == 1 and sampler_state(state)["batches_done"] == 7
    resumed = stateful_loader(corpus, cache, epoch=2, num_workers=0)
    load_loader_state(resumed, state)
    assert list(resumed) == full[7:]


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"_snapshot": {"_main_snapshot": {}}}, r"state: expected a StatefulDataLoader state_dict\(\) with _snapshot"),
        ({"_num_yielded": 3}, r"state: expected the state_dict\(\) of a StatefulDataLoader over a stateful batch"),
        ([1, 2], r"state: expected a StatefulDataLoader state_dict\(\), got list"),
    ],
)
def test_sampler_state_refuses_what_is_not_a_loader_state(state: Any, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        sampler_state(state)


def test_load_loader_state_refuses_a_loader_without_a_stateful_sampler(corpus: str, cache: str) -> None:
    state = torch_roundtrip(stateful_loader(corpus, cache, num_workers=0).state_dict())
    ds = ArrowMTDataset(corpus, "valid")
    plain = StatefulDataLoader(ds, batch_size=4, num_workers=2, collate_fn=BatchIds(ds.special_ids))
    with pytest.raises(InvalidParameterError, match="loader: expected a DataLoader whose batch_sampler has"):
        load_loader_state(plain, state)
