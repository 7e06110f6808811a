"""Mixtures: corpora read as one dataset, epochs drawn by weight or temperature, plans shared and resumable."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from builders import lengths_dataset, multi30k_dataset
from conftest import MULTI30K
from state_helpers import check_resume, check_resume_in_fresh_process, torch_roundtrip
from test_view import random_pairs, write_rows

from arrowmt import (
    FairseqCollater,
    FormatError,
    InvalidParameterError,
    Mixture,
    MixtureBatchSampler,
    MixtureRule,
    PlainCollater,
    Split,
    Tags,
    TokenBatchSampler,
    VocabularyError,
    build_view,
    open_dataset,
    open_mixture,
)
from arrowmt.converters import convert_text
from arrowmt.copies import order_copy
from arrowmt.testing import (
    SOURCE,
    TARGET,
    plan_folder,
    resample,
    resample_counts,
    temperature_ratios,
    windowed_batch_order,
)

MAX_TOKENS = 64
SIZES = (37, 120, 9)


def corpus_lengths(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + k)
    src = rng.integers(1, 20, n)
    return src, np.clip(src + rng.integers(-3, 4, n), 1, 30)


@pytest.fixture()
def corpora(tmp_path: Path) -> dict[str, Path]:
    """Three small parallel corpora of known lengths (every token the same id)."""
    return {
        name: lengths_dataset(tmp_path / name, *corpus_lengths(k, n))
        for k, (name, n) in enumerate(zip(("a", "b", "c"), SIZES, strict=True))
    }


def joined_lengths(extra: dict[int, tuple[int, int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every corpus's lengths end to end, with ``extra[k]`` (source, target) tag tokens added to corpus k."""
    parts = []
    for k, n in enumerate(SIZES):
        src, tgt = corpus_lengths(k, n)
        plus = (extra or {}).get(k, (0, 0))
        parts.append((src + plus[0], tgt + plus[1]))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def reference_batches(
    folder: Path, src: np.ndarray, tgt: np.ndarray, rows: np.ndarray | None = None
) -> list[list[int]]:
    """The plan TokenBatchSampler makes for a single corpus of these lengths, ids mapped through ``rows``."""
    corpus = lengths_dataset(folder, src, tgt)
    plan = TokenBatchSampler(open_dataset(corpus), max_tokens=MAX_TOKENS, seed=3, cache_dir=folder / "cache").plan
    batches = [plan.batch(b) for b in range(len(plan))]
    return [(b if rows is None else rows[b]).tolist() for b in batches]


def plan_batches(sampler: MixtureBatchSampler) -> list[list[int]]:
    return [sampler.plan.batch(b).tolist() for b in range(len(sampler.plan))]


def sampler_for(mixture: Mixture, tmp_path: Path, **kw: Any) -> MixtureBatchSampler:
    return MixtureBatchSampler(mixture, max_tokens=MAX_TOKENS, seed=3, cache_dir=tmp_path / "cache", **kw)


# ---------------------------------------------------------------- the dataset


def test_mixture_reads_each_corpus_at_its_ids(tmp_path: Path) -> None:
    real = multi30k_dataset(tmp_path / "m30k", "valid")
    multi30k_dataset(real, "test")
    mixture = open_mixture({"valid": real, "test": (real, "test"), "head": (real, "valid")}, split="valid")
    assert len(mixture) == 1014 + 1000 + 1014 and mixture.offsets.tolist() == [0, 1014, 2014, 3028]
    assert mixture.names == ["valid", "test", "head"]
    test = open_dataset(real, "test")
    assert torch.equal(mixture[1014 + 5][SOURCE], test[5][SOURCE]) and mixture[1014 + 40]["id"] == 1054
    ids = [3000, 3, 1020, 2, 2100, 1014]
    batch = mixture.__getitems__(ids)
    assert batch.ids.tolist() == ids
    expected = [mixture[i] for i in ids]
    for k, sample in enumerate(batch):
        assert torch.equal(sample[SOURCE], expected[k][SOURCE]) and torch.equal(sample[TARGET], expected[k][TARGET])
    assert mixture.corpus_of(np.array(ids)).tolist() == [2, 0, 1, 0, 2, 1]
    collated = PlainCollater(mixture.special_ids)(batch)
    assert collated["id"].tolist() == ids
    clone = pickle.loads(pickle.dumps(mixture))
    assert torch.equal(clone[2100][TARGET], mixture[2100][TARGET])
    with pytest.raises(IndexError, match="mixture"):
        mixture[len(mixture)]


def test_mixture_refuses_corpora_that_do_not_fit_together(corpora: dict[str, Path], tmp_path: Path) -> None:
    mono = lengths_dataset(tmp_path / "mono", [1, 2])
    with pytest.raises(InvalidParameterError, match="columns"):
        open_mixture({"a": corpora["a"], "mono": mono})
    real = multi30k_dataset(tmp_path / "m30k", "valid")
    with pytest.raises(VocabularyError, match="dictionary"):
        open_mixture({"a": corpora["a"], "real": (real, "valid")})
    with pytest.raises(InvalidParameterError, match="corpora"):
        Mixture({})
    with pytest.raises(InvalidParameterError, match="tags"):
        open_mixture(corpora, tags={"zz": Tags((5,))})


def test_views_are_corpora_of_a_mixture(corpora: dict[str, Path], tmp_path: Path) -> None:
    build_view(corpora["b"], corpora["b"] / "short.view", max_len=10)
    mixture = open_mixture({"a": corpora["a"], "b-short": corpora["b"] / "short.view"})
    kept = open_dataset(corpora["b"]).lengths(SOURCE)
    assert len(mixture) == SIZES[0] + int(((kept <= 10) & (open_dataset(corpora["b"]).lengths(TARGET) <= 10)).sum())
    assert mixture.lengths(SOURCE)[SIZES[0] :].max() <= 10


# ---------------------------------------------------------------- plans


def test_concatenation_plans_the_corpora_as_one_corpus(corpora: dict[str, Path], tmp_path: Path) -> None:
    sampler = sampler_for(open_mixture(corpora), tmp_path)
    assert plan_batches(sampler) == reference_batches(tmp_path / "ref", *joined_lengths())
    assert sampler.epoch_counts() == dict(zip("abc", SIZES, strict=True))
    sampler.set_epoch(2)
    assert sampler.plan.key == sampler_for(open_mixture(corpora), tmp_path).plan.key  # one plan for every epoch


def test_the_sampling_rule_as_one_value_equals_its_keywords(corpora: dict[str, Path], tmp_path: Path) -> None:
    mixture = open_mixture(corpora)
    by_keywords = sampler_for(mixture, tmp_path, temperature=3.0, epoch_size=200, resample_seed=9)
    by_rule = sampler_for(mixture, tmp_path, rule=MixtureRule(temperature=3.0, epoch_size=200, resample_seed=9))
    for epoch in (1, 2):
        by_keywords.set_epoch(epoch)
        by_rule.set_epoch(epoch)
        assert plan_batches(by_rule) == plan_batches(by_keywords) and list(by_rule) == list(by_keywords)
    with pytest.raises(InvalidParameterError, match=r"rule: expected either rule= or the keywords it holds"):
        sampler_for(mixture, tmp_path, rule=MixtureRule(temperature=3.0), epoch_size=200)


def test_temperature_epoch_is_the_plan_of_the_drawn_rows(corpora: dict[str, Path], tmp_path: Path) -> None:
    sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=3.0)
    ratios = temperature_ratios(SIZES, 3.0)
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        rows, counts = resample(SIZES, ratios, None, seed=3, epoch=epoch)
        src, tgt = joined_lengths()
        assert plan_batches(sampler) == reference_batches(tmp_path / f"ref{epoch}", src[rows], tgt[rows], rows)
        assert sampler.epoch_counts() == dict(zip("abc", counts.tolist(), strict=True))
    assert counts[2] > SIZES[2]  # the small corpus is up-sampled


def test_tags_count_in_the_plan(corpora: dict[str, Path], tmp_path: Path) -> None:
    tags = {"a": Tags(source=(5, 6)), "c": Tags(target=(7,))}
    sampler = sampler_for(open_mixture(corpora, tags=tags), tmp_path)
    src, tgt = joined_lengths({0: (2, 0), 2: (0, 1)})
    assert plan_batches(sampler) == reference_batches(tmp_path / "ref", src, tgt)


def test_weights_schedule_changes_the_draw_between_epochs(corpora: dict[str, Path], tmp_path: Path) -> None:
    def schedule(epoch: int) -> dict[str, float]:
        return {"a": 1.0, "b": 1.0, "c": float(epoch)}

    sampler = sampler_for(open_mixture(corpora), tmp_path, weights=schedule, epoch_size=300)
    counts = []
    for epoch in (1, 2, 3):
        sampler.set_epoch(epoch)
        counts.append(sampler.epoch_counts())
        assert sum(counts[-1].values()) == 300
        expected = resample_counts(SIZES, np.array([1.0, 1.0, float(epoch)]), 300, 3, epoch)
        assert list(counts[-1].values()) == expected.tolist()
        ids = np.concatenate([np.asarray(b) for b in sampler])
        assert np.bincount(sampler.mixture.corpus_of(ids), minlength=3).tolist() == expected.tolist()
    assert counts[0]["c"] < counts[1]["c"] < counts[2]["c"]
    sampler.set_weights([0.0, 1.0, 0.0])
    assert sampler.epoch_counts() == counts[2]  # the current epoch keeps its draw
    sampler.set_epoch(4)
    assert sampler.epoch_counts() == {"a": 0, "b": 300, "c": 0}


def test_temperature_schedule_changes_the_draw_between_epochs(corpora: dict[str, Path], tmp_path: Path) -> None:
    """A function of the epoch as the temperature: each epoch draws with its own T (fairseq's ratios)."""
    sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=lambda epoch: 1.0 + 4.0 * (epoch - 1))
    counts = []
    for epoch in (1, 2, 3):
        sampler.set_epoch(epoch)
        ratios = temperature_ratios(SIZES, 1.0 + 4.0 * (epoch - 1))
        assert sampler.epoch_ratios(epoch).tolist() == ratios.tolist()
        counts.append(sampler.epoch_counts())
        expected = resample_counts(SIZES, ratios, None, 3, epoch)
        assert list(counts[-1].values()) == expected.tolist()
        ids = np.concatenate([np.asarray(b) for b in sampler])
        assert np.bincount(sampler.mixture.corpus_of(ids), minlength=3).tolist() == expected.tolist()
    assert counts[0]["c"] < counts[1]["c"] < counts[2]["c"]  # hotter: the small corpus drawn more


def test_set_temperature_and_set_weights_change_the_rule_from_the_next_epoch(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    """Temperature could not change mid-run (set_weights refused while a temperature was set)."""
    sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=1.0, epoch_size=300)
    sampler.set_epoch(1)
    assert len(list(sampler)) > 0  # epoch 1 drawn
    first = sampler.epoch_counts()
    assert list(first.values()) == resample_counts(SIZES, temperature_ratios(SIZES, 1.0), 300, 3, 1).tolist()
    sampler.set_temperature(100.0)
    assert sampler.epoch_counts() == first  # the current epoch keeps its draw
    sampler.set_epoch(2)
    assert len(list(sampler)) > 0
    hot = resample_counts(SIZES, temperature_ratios(SIZES, 100.0), 300, 3, 2).tolist()
    assert list(sampler.epoch_counts().values()) == hot and max(hot) - min(hot) <= 6  # nearly uniform
    sampler.set_weights([0.0, 1.0, 0.0])  # from temperature to weights
    assert sampler.temperature is None and list(sampler.epoch_counts().values()) == hot
    sampler.set_epoch(3)
    assert sampler.epoch_counts() == {"a": 0, "b": 300, "c": 0}
    assert np.unique(sampler.mixture.corpus_of(np.concatenate([np.asarray(b) for b in sampler]))).tolist() == [1]
    sampler.set_temperature(lambda epoch: 2.0)  # and back, as a schedule
    sampler.set_epoch(4)
    assert (
        list(sampler.epoch_counts().values())
        == resample_counts(SIZES, temperature_ratios(SIZES, 2.0), 300, 3, 4).tolist()
    )
    sampler.set_weights(None)  # plain concatenation
    sampler.set_epoch(5)
    assert sampler.epoch_counts() == dict(zip("abc", SIZES, strict=True))


def test_a_resumed_epoch_keeps_its_temperature_when_the_schedule_changed(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=lambda epoch: float(epoch), epoch_size=150)
    sampler.set_epoch(2)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(3)]
    state = torch_roundtrip(sampler.state_dict())
    rest = list(iterator)
    assert state["ratios"] == temperature_ratios(SIZES, 2.0).tolist()
    changed = sampler_for(open_mixture(corpora), tmp_path, temperature=lambda epoch: 50.0, epoch_size=150)
    changed.load_state_dict(state)
    assert list(changed) == rest and head
    changed.set_epoch(3)
    assert changed.epoch_ratios(3).tolist() == temperature_ratios(SIZES, 50.0).tolist()


def test_bad_temperatures_are_refused(corpora: dict[str, Path], tmp_path: Path) -> None:
    sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=lambda epoch: 0.0 if epoch == 2 else 1.0)
    with pytest.raises(InvalidParameterError, match=r"temperature schedule at epoch 2: expected a finite number > 0"):
        sampler.set_epoch(2)
        sampler.epoch_counts()
    with pytest.raises(InvalidParameterError, match=r"temperature: expected a finite number > 0, got -1"):
        sampler.set_temperature(-1)
    with pytest.raises(InvalidParameterError, match=r"temperature: expected a finite number > 0, got True"):
        sampler_for(open_mixture(corpora), tmp_path, temperature=True)


def test_plans_are_cached_shared_and_pruned(corpora: dict[str, Path], tmp_path: Path) -> None:
    first = sampler_for(open_mixture(corpora), tmp_path, temperature=2.0)
    assert first.plan.built
    second = sampler_for(open_mixture(corpora), tmp_path, temperature=2.0)
    assert not second.plan.built and second.plan.path == first.plan.path
    for epoch in range(2, 6):
        first.set_epoch(epoch)
        assert len(first.plan) > 0
    folder = plan_folder(first.mixture, first.params, tmp_path / "cache")
    assert len(list(folder.glob("plan-*.bin"))) == 2


def test_ranks_share_out_each_epoch(corpora: dict[str, Path], tmp_path: Path) -> None:
    ranks = [sampler_for(open_mixture(corpora), tmp_path, temperature=2.0, num_replicas=2, rank=r) for r in (0, 1)]
    for sampler in ranks:
        sampler.set_epoch(3)
    batches = [list(s) for s in ranks]
    assert len(batches[0]) == len(batches[1])
    every = {tuple(b) for b in plan_batches(ranks[0])}
    assert {tuple(b) for r in batches for b in r} == every


def test_bad_sampling_parameters(corpora: dict[str, Path], tmp_path: Path) -> None:
    mixture = open_mixture(corpora)
    with pytest.raises(InvalidParameterError, match="temperature"):
        sampler_for(mixture, tmp_path, weights=[1, 1, 1], temperature=2.0)
    with pytest.raises(InvalidParameterError, match="weights"):
        sampler_for(mixture, tmp_path, weights=[1, 1])
    with pytest.raises(InvalidParameterError, match="weights"):
        sampler_for(mixture, tmp_path, weights={"zz": 1.0})
    with pytest.raises(InvalidParameterError, match="epoch_size"):
        sampler_for(mixture, tmp_path, temperature=2.0, epoch_size=0)


# ---------------------------------------------------------------- resume


def make_sampler(corpora: dict[str, Path], tmp_path: Path, epoch: int) -> MixtureBatchSampler:
    sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=2.0)
    sampler.set_epoch(epoch)
    return sampler


@pytest.mark.parametrize("where", [0, 5, -1])
def test_sampler_resumes_mid_epoch(corpora: dict[str, Path], tmp_path: Path, where: int) -> None:
    length = len(make_sampler(corpora, tmp_path, 4))
    full = check_resume(lambda: make_sampler(corpora, tmp_path, 4), where % (length + 1))
    assert len(full) == length > 8


def test_a_shuffle_window_orders_each_epochs_draw_and_resumes(corpora: dict[str, Path], tmp_path: Path) -> None:
    def windowed(epoch: int) -> MixtureBatchSampler:
        sampler = sampler_for(open_mixture(corpora), tmp_path, temperature=2.0, shuffle_window=16)
        sampler.set_epoch(epoch)
        return sampler

    for epoch in (1, 4):
        sampler, plain = windowed(epoch), make_sampler(corpora, tmp_path, epoch)
        plan = [plain.plan.batch(b).tolist() for b in range(len(plain.plan))]
        order = windowed_batch_order(len(plan), 3, epoch, 16)
        assert [list(b) for b in sampler] == [plan[b] for b in order.tolist()]
    check_resume(lambda: windowed(4), 7)
    with pytest.raises(InvalidParameterError, match="shuffle_window: expected None with shuffle=False"):
        sampler_for(open_mixture(corpora), tmp_path, shuffle=False, shuffle_window=16)


def test_a_state_saved_at_the_end_of_an_epoch_keeps_that_epoch_finished(
    corpora: dict[str, Path], tmp_path: Path
) -> None:
    sampler = make_sampler(corpora, tmp_path, 3)
    epoch3 = list(sampler)
    state = sampler.state_dict()
    assert state["epoch"] == 3 and state["batches_done"] == len(sampler)
    resumed = sampler_for(open_mixture(corpora), tmp_path, temperature=2.0)  # no set_epoch before the load
    resumed.load_state_dict(state)
    resumed.set_epoch(3)  # a restarted loop sets the saved epoch again: it is not replayed
    assert (resumed.epoch, list(resumed)) == (3, []) and resumed.state_dict() == state
    resumed.set_epoch(4)
    assert list(resumed) == list(make_sampler(corpora, tmp_path, 4)) != epoch3


class Run:
    """A training loop's data side over three epochs of a weighted mixture with a schedule."""

    def __init__(self, corpora: dict[str, Path], tmp_path: Path) -> None:
        self.sampler = sampler_for(
            open_mixture(corpora), tmp_path, weights=lambda e: [1.0, 2.0, float(e)], epoch_size=200
        )
        self.epoch = 1

    def __iter__(self) -> Any:
        for epoch in range(self.epoch, 4):
            self.epoch = epoch
            self.sampler.set_epoch(epoch)
            for batch in self.sampler:
                yield epoch, tuple(batch)

    def state_dict(self) -> dict[str, Any]:
        finished = self.sampler.batches_done >= len(self.sampler)
        return {"sampler": self.sampler.state_dict(), "epoch": self.epoch + finished}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.epoch = state["epoch"]


@pytest.mark.parametrize("where", ["end_of_epoch_1", "middle_of_epoch_2"])
def test_training_loop_resumes_across_epochs(corpora: dict[str, Path], tmp_path: Path, where: str) -> None:
    epochs = [e for e, _ in Run(corpora, tmp_path)]
    first = epochs.count(1)
    step = first if where == "end_of_epoch_1" else first + epochs.count(2) // 2
    full = check_resume(lambda: Run(corpora, tmp_path), step, same_state=False)
    assert [e for e, _ in full] == epochs and len(set(epochs)) == 3


def test_state_keeps_the_epochs_ratios_when_the_schedule_changes(corpora: dict[str, Path], tmp_path: Path) -> None:
    sampler = sampler_for(open_mixture(corpora), tmp_path, weights=[1.0, 1.0, 1.0], epoch_size=150)
    sampler.set_epoch(2)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(3)]
    state = torch_roundtrip(sampler.state_dict())
    rest = list(iterator)
    assert state["ratios"] == [1.0, 1.0, 1.0]
    changed = sampler_for(open_mixture(corpora), tmp_path, weights=[5.0, 1.0, 1.0], epoch_size=150)
    changed.load_state_dict(state)
    assert list(changed) == rest and head
    changed.set_epoch(3)
    assert changed.epoch_counts()["a"] > 100  # later epochs follow the new weights


stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")


def stateful_loader(corpora: dict[str, Path], tmp_path: Path, epoch: int, workers: int) -> Any:
    mixture = open_mixture(corpora, tags={"c": Tags(source=(3,))})
    sampler = sampler_for(mixture, tmp_path, temperature=1.5)
    sampler.set_epoch(epoch)
    collate = mixture.tag_collater(FairseqCollater(mixture.special_ids))
    loader = stateful_dataloader.StatefulDataLoader(
        mixture,
        batch_sampler=sampler,
        collate_fn=collate,
        num_workers=workers,
        **({"prefetch_factor": 2} if workers else {}),
    )
    return IdsLoader(loader)


class IdsLoader:
    """A StatefulDataLoader yielding each batch's sorted ids (comparable), with the loader's state."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return (tuple(sorted(b["id"].tolist())) for b in self.loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_a_mixture(corpora: dict[str, Path], tmp_path: Path, workers: int) -> None:
    full = check_resume(lambda: stateful_loader(corpora, tmp_path, 2, workers), 4)
    assert len(full) > 8 and len(full[0]) > 0


# ---------------------------------------------------------------- the one-gather path


def test_one_gather_equals_each_corpus_reader(tmp_path: Path) -> None:
    """Splits with several shards and record batches, and views, read through the address space as by their readers."""
    first, second = random_pairs(7, 50), random_pairs(8, 30)
    write_rows(tmp_path / "sharded", "train", first, rows_per_batch=4)
    write_rows(tmp_path / "sharded", "train1", second, rows_per_batch=7)
    write_rows(tmp_path / "plain", "train", random_pairs(9, 20), rows_per_batch=3)
    build_view(tmp_path / "sharded", tmp_path / "sharded" / "v.view", max_len=2, min_len=1)
    mixture = open_mixture(
        {"sharded": tmp_path / "sharded", "plain": tmp_path / "plain", "view": tmp_path / "sharded" / "v.view"}
    )
    ids = np.random.default_rng(0).integers(0, len(mixture), 300)
    fast = mixture.__getitems__(ids.tolist())
    assert mixture._gather  # the one-gather path served it
    corpus, local = mixture.locate(ids)
    for column in (SOURCE, TARGET):
        slow = mixture._column_spans(column, corpus, local)
        for k in range(ids.shape[0]):
            assert np.array_equal(fast.columns[column].row(k), slow.row(k)), (column, k)


def test_one_gather_reads_copies_in_plan_order_as_their_originals(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"  # real text, converted (dictionaries included), and two copies in plan order
    convert_text(str(MULTI30K / "val"), corpus, src_lang="de", tgt_lang="en", progress=False)
    for seed in (2, 5):
        order_copy(corpus, tmp_path / f"ordered-{seed}", max_tokens=256, seed=seed, progress=False)

    def mixture(a: Path, b: Path) -> Mixture:
        return open_mixture({"a": a, "plain": corpus, "b": b})

    ordered, original = mixture(tmp_path / "ordered-2", tmp_path / "ordered-5"), mixture(corpus, corpus)
    ids = np.random.default_rng(1).integers(0, len(ordered), 400).tolist()
    fast, expected = ordered.__getitems__(ids), original.__getitems__(ids)
    assert ordered._gather  # the one-gather path served the copies
    for column in (SOURCE, TARGET):
        for k in range(len(ids)):
            assert np.array_equal(fast.columns[column].row(k), expected.columns[column].row(k)), (column, k)


def test_corrupt_offsets_raise_through_the_readers(tmp_path: Path) -> None:
    write_rows(tmp_path / "c", "train", random_pairs(1, 12), rows_per_batch=6)
    shard = Split(tmp_path / "c").shards[0]
    at = int(shard.layouts[SOURCE].offsets_pos[0]) + 3  # row 3's end, row 4's start
    path = shard.path
    del shard
    data = bytearray(path.read_bytes())
    data[4 * at : 4 * at + 4] = (10**6).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    mixture = open_mixture({"a": tmp_path / "c", "b": tmp_path / "c"})
    mixture.__getitems__([6, 19])  # rows of record batches the corruption does not touch (rows 0..5 share its offsets)
    with pytest.raises(FormatError, match="row 3"):
        mixture.__getitems__([1, 3, 14])


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_stateful_dataloader_resumes_a_mixture_in_a_fresh_process(corpora: dict[str, Path], tmp_path: Path) -> None:
    kwargs = {"corpora": corpora, "tmp_path": tmp_path, "epoch": 3, "workers": 2}
    full = check_resume_in_fresh_process(stateful_loader, kwargs, 5, tmp_path)
    assert len(full) > 8


def plan_in_process(corpora: dict[str, Path], cache: Path, rank: int, queue: Any) -> None:
    """One rank of two: its sampler for epoch 2, and what it found in the cache."""
    sampler = MixtureBatchSampler(
        open_mixture(corpora),
        max_tokens=MAX_TOKENS,
        seed=3,
        cache_dir=cache,
        temperature=2.0,
        num_replicas=2,
        rank=rank,
    )
    sampler.set_epoch(2)
    queue.put((rank, sampler.plan.built, str(sampler.plan.path), [tuple(b) for b in sampler]))


def test_ranks_in_two_processes_share_one_plan_file(corpora: dict[str, Path], tmp_path: Path) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=plan_in_process, args=(corpora, tmp_path / "c", r, queue)) for r in (0, 1)]
    for worker in workers:
        worker.start()
    results = sorted(queue.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert [built for _, built, _, _ in results].count(True) == 1  # one process built it, the other mapped it
    assert results[0][2] == results[1][2]
    reference = sampler_for(open_mixture(corpora), tmp_path, temperature=2.0)
    reference.set_epoch(2)
    assert {b for _, _, _, batches in results for b in batches} == {tuple(b) for b in plan_batches(reference)}
