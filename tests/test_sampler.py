"""Tests for arrowmt.training._sampler.TokenBatchSampler: fairseq batches, ranks, epochs, resume, plan cache."""

from __future__ import annotations

import logging
import pickle
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch.distributed as dist
from builders import fixture_lengths, lengths_dataset, multi30k_dataset
from state_helpers import check_resume
from torch.utils.data import DataLoader

from arrowmt import (
    ArrowMTDataset,
    InputDataError,
    InvalidParameterError,
    PlanParams,
    SamplerOptions,
    TokenBatchSampler,
)
from arrowmt.testing import (
    CACHE_DIR_NAME,
    PlanSampler,
    batch_by_size,
    build_plan,
    ordered_indices,
    release_free_heap,
    sides,
)


@pytest.fixture(scope="module")
def valid_ds(tmp_path_factory: pytest.TempPathFactory) -> ArrowMTDataset:
    """The real Multi30k valid split (1014 pairs) as an arrowmt dataset."""
    folder = multi30k_dataset(tmp_path_factory.mktemp("valid") / "arrowmt", "valid")
    return ArrowMTDataset(folder, "valid")


@pytest.fixture()
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def sampler_factory(ds: ArrowMTDataset, cache: Path, epoch: int | None = None, **kw: object) -> Callable:
    def make() -> TokenBatchSampler:
        sampler = TokenBatchSampler(ds, cache_dir=cache, **kw)  # type: ignore[arg-type]
        if epoch is not None:
            sampler.set_epoch(epoch)
        return sampler

    return make


CONFIGS = {
    "single": {"max_tokens": 512},
    "no_shuffle": {"max_tokens": 512, "shuffle": False},
    "rank0_of_3": {"max_tokens": 400, "num_replicas": 3, "rank": 0},
    "rank2_of_3": {"max_tokens": 400, "num_replicas": 3, "rank": 2},
    "rank1_of_4_no_shuffle": {"max_tokens": 300, "num_replicas": 4, "rank": 1, "shuffle": False},
    "multiple_8_max_sentences": {"max_tokens": 1024, "max_sentences": 40, "required_batch_size_multiple": 8},
    "epoch2": {"max_tokens": 512, "epoch": 2},
    "epoch3_rank1_of_2": {"max_tokens": 512, "epoch": 3, "num_replicas": 2, "rank": 1, "seed": 7},
}


@pytest.mark.parametrize("name", CONFIGS)
def test_resume_mid_epoch_continues_identically(valid_ds: ArrowMTDataset, cache: Path, name: str) -> None:
    kw = dict(CONFIGS[name])
    make = sampler_factory(valid_ds, cache, **kw)
    length = len(make())
    assert length >= 4
    full = check_resume(make, length // 2)
    assert len(full) == length
    check_resume(make, 0)
    check_resume(make, length)


def test_batches_are_fairseq_batches(valid_ds: ArrowMTDataset, cache: Path) -> None:
    src, tgt = sides({column: valid_ds.lengths(column) for column in valid_ds.columns})
    order = ordered_indices(src, tgt, 1)
    flat, offsets = batch_by_size(order, np.maximum(src, tgt)[order], 512, None, 8)
    sampler = TokenBatchSampler(valid_ds, max_tokens=512, required_batch_size_multiple=8, cache_dir=cache)
    assert np.array_equal(sampler.plan.indices, flat)
    assert np.array_equal(sampler.plan.offsets, offsets)
    assert sorted(map(tuple, sampler)) == sorted(
        tuple(flat[offsets[b] : offsets[b + 1]].tolist()) for b in range(len(offsets) - 1)
    )


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_ranks_cover_every_batch_once_plus_equal_padding(valid_ds: ArrowMTDataset, cache: Path, world: int) -> None:
    samplers = [TokenBatchSampler(valid_ds, 300, num_replicas=world, rank=r, cache_dir=cache) for r in range(world)]
    n = len(samplers[0].plan)
    assert {len(s) for s in samplers} == {-(-n // world)}
    yielded = [list(s) for s in samplers]
    assert {len(y) for y in yielded} == {len(samplers[0])}
    ids = Counter(int(b) for s in samplers for b in s.epoch_batch_ids())
    assert set(ids) == set(range(n))
    assert sum(c - 1 for c in ids.values()) == world * len(samplers[0]) - n
    samples = [i for y in yielded for batch in y for i in batch]
    assert set(samples) == set(range(len(valid_ds)))  # max_tokens fits all; multiple 1 drops nothing
    plan_samples = samplers[0].plan.indices
    assert np.unique(plan_samples).shape[0] == plan_samples.shape[0] == len(valid_ds)


def test_ranks_are_disjoint_when_batches_divide_evenly(valid_ds: ArrowMTDataset, cache: Path) -> None:
    n = len(TokenBatchSampler(valid_ds, 300, cache_dir=cache).plan)
    world = next(k for k in (2, 3, 4, 5, 6, 7) if n % k == 0)
    per_rank = [
        {i for b in TokenBatchSampler(valid_ds, 300, num_replicas=world, rank=r, cache_dir=cache) for i in b}
        for r in range(world)
    ]
    assert sum(len(s) for s in per_rank) == len(set().union(*per_rank)) == len(valid_ds)


def test_order_is_deterministic_per_seed_and_epoch(valid_ds: ArrowMTDataset, cache: Path) -> None:
    def run(epoch: int, seed: int = 1) -> list[list[int]]:
        sampler = TokenBatchSampler(valid_ds, 512, seed=seed, cache_dir=cache)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert run(1) == run(1)
    assert run(2) == run(2)
    assert run(1) != run(2)
    assert run(1) != run(1, seed=2)
    assert sorted(run(1)) == sorted(run(2))  # same batches, other order


def test_unshuffled_order_is_the_plan_order(valid_ds: ArrowMTDataset, cache: Path) -> None:
    sampler = TokenBatchSampler(valid_ds, 512, shuffle=False, cache_dir=cache)
    sampler.set_epoch(5)
    plan = sampler.plan
    assert list(sampler) == [plan.batch(b).tolist() for b in range(len(plan))]


def test_plan_cache_is_reused_and_corrupt_cache_rebuilt(valid_ds: ArrowMTDataset, cache: Path) -> None:
    first = TokenBatchSampler(valid_ds, 512, cache_dir=cache)
    path = first.plan.path
    mtime = path.stat().st_mtime_ns
    second = TokenBatchSampler(valid_ds, 512, cache_dir=cache)
    assert (first.plan.built, second.plan.built) == (True, False)
    assert path.stat().st_mtime_ns == mtime
    other = TokenBatchSampler(valid_ds, 1024, cache_dir=cache)
    assert other.plan.built and other.plan.path != path
    expected = list(first)
    path.write_bytes(path.read_bytes()[:-16])
    rebuilt = TokenBatchSampler(valid_ds, 512, cache_dir=cache)
    assert rebuilt.plan.built and list(rebuilt) == expected


def test_default_cache_lives_in_the_dataset_folder(tmp_path: Path) -> None:
    ds = ArrowMTDataset(lengths_dataset(tmp_path / "ds", [3, 1, 2, 5]))
    sampler = TokenBatchSampler(ds, max_tokens=6)
    assert sampler.plan.path.parent == tmp_path / "ds" / CACHE_DIR_NAME
    assert sorted(sorted(b) for b in sampler) == [[0], [1, 2], [3]]


def test_too_long_samples_error_or_are_skipped_with_a_warning(tmp_path: Path) -> None:
    ds = ArrowMTDataset(lengths_dataset(tmp_path / "ds", [2, 9, 3, 2, 1], [2, 2, 8, 2, 1]))
    cache = tmp_path / "cache"
    with pytest.raises(InputDataError, match=r"max_tokens: sample 1 has 9 tokens, expected <= max_tokens=8"):
        TokenBatchSampler(ds, max_tokens=8, cache_dir=cache)
    with pytest.raises(InputDataError, match=r"max_target_positions: sample 2 has 8 tokens, expected <= "):
        TokenBatchSampler(ds, max_tokens=100, max_source_positions=9, max_target_positions=7, cache_dir=cache)
    with pytest.raises(InputDataError, match=r"max_source_positions: sample 1 has 9 tokens"):
        TokenBatchSampler(ds, max_tokens=100, max_source_positions=8, cache_dir=cache)
    with pytest.warns(UserWarning, match=r"ds: 2 of 5 samples \(40\.0%\) exceed max_tokens/.* and are skipped"):
        sampler = TokenBatchSampler(ds, max_tokens=7, skip_invalid_size_inputs=True, cache_dir=cache)
    assert sorted(i for b in sampler for i in b) == [0, 3, 4]
    with pytest.warns(UserWarning, match=r"1 of 5 samples \(20\.0%\)"):
        positions = TokenBatchSampler(
            ds, max_tokens=100, max_target_positions=7, skip_invalid_size_inputs=True, cache_dir=cache
        )
    assert sorted(i for b in positions for i in b) == [0, 1, 3, 4]


def test_skipping_at_most_one_percent_is_logged_not_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One too-long sample of 100 is logged; one of 99 (over 1%) warns."""
    for rows, warns in ((100, False), (99, True)):
        ds = ArrowMTDataset(lengths_dataset(tmp_path / str(rows), [9] + [2] * (rows - 1)))
        caplog.clear()
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
            warnings.simplefilter("always")
            sampler = TokenBatchSampler(ds, max_tokens=8, skip_invalid_size_inputs=True, cache_dir=tmp_path / "c")
        assert len(sampler.plan.indices) == rows - 1
        share = f"1 of {rows} samples ({1 / rows:.1%}) exceed"
        assert [share in str(w.message) for w in caught] == ([True] if warns else [])
        assert (share in caplog.text) is not warns


def test_monolingual_dataset(tmp_path: Path) -> None:
    ds = ArrowMTDataset(lengths_dataset(tmp_path / "mono", [4, 1, 3, 1, 2]))
    sampler = TokenBatchSampler(ds, max_tokens=4, shuffle=False, cache_dir=tmp_path / "c")
    assert list(sampler) == [[1, 3], [4], [2], [0]]
    plan = build_plan(ds, sampler_params(max_tokens=4))
    assert plan.indices.tolist() == [1, 3, 4, 2, 0]


def sampler_params(**kw: object) -> PlanParams:
    defaults = {
        "max_tokens": 4096,
        "max_sentences": None,
        "required_batch_size_multiple": 1,
        "max_source_positions": None,
        "max_target_positions": None,
        "seed": None,
        "skip_invalid_size_inputs": False,
    }
    return PlanParams(**{**defaults, **kw})  # type: ignore[arg-type]


def fairseq_plan(src: np.ndarray, tgt: np.ndarray, params: PlanParams) -> tuple[np.ndarray, np.ndarray, int]:
    """(flat indices, batch offsets, dropped) from fairseq 0.12's own order, position filter and batch_by_size."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("fairseq")
        from fairseq.data import Dictionary, LanguagePairDataset, data_utils

        n, d = src.shape[0], Dictionary()
        pairs = LanguagePairDataset(list(range(n)), src, d, list(range(n)), tgt, d, shuffle=params.seed is not None)
        with data_utils.numpy_seed(params.seed):
            order = pairs.ordered_indices()
        ignored: list[int] = []
        if params.max_source_positions is not None:
            limits = (params.max_source_positions, params.max_target_positions)
            order, ignored = data_utils.filter_paired_dataset_indices_by_size(src, tgt, order, limits)
        batches = data_utils.batch_by_size(
            order,
            pairs.num_tokens,
            num_tokens_vec=pairs.num_tokens_vec(order),
            max_tokens=params.max_tokens,
            max_sentences=params.max_sentences,
            required_batch_size_multiple=params.required_batch_size_multiple,
        )
    sizes = [len(b) for b in batches]
    flat = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches]) if batches else np.zeros(0, np.int64)
    return flat, np.concatenate([[0], np.cumsum(sizes)]), len(ignored)


@pytest.fixture(scope="module")
def train_ds(tmp_path_factory: pytest.TempPathFactory) -> ArrowMTDataset:
    """The real Multi30k train split (29000 pairs) as an arrowmt dataset."""
    return ArrowMTDataset(multi30k_dataset(tmp_path_factory.mktemp("train") / "arrowmt", "train"), "train")


@pytest.mark.parametrize(
    "kw",
    [
        {"seed": 1},
        {"max_tokens": 1000, "max_sentences": 64, "required_batch_size_multiple": 8, "seed": 7},
        {"max_tokens": 300, "required_batch_size_multiple": 3},
        {"max_tokens": 512, "max_source_positions": 20, "max_target_positions": 25, "seed": 3},
    ],
)
def test_build_plan_is_fairseqs_plan_on_the_fixture(train_ds: ArrowMTDataset, kw: dict) -> None:
    """The whole plan, byte for byte, against fairseq's pipeline on fairseq's own sizes of the fixture."""
    params = sampler_params(skip_invalid_size_inputs=True, **kw)
    src, tgt = (x.astype(np.int64) for x in fixture_lengths("train"))
    flat, offsets, dropped = fairseq_plan(src, tgt, params)
    plan = build_plan(train_ds, params)
    assert plan.indices.dtype == np.int32 and plan.offsets.dtype == np.int64
    assert np.array_equal(plan.indices, flat)
    assert np.array_equal(plan.offsets, offsets)
    assert plan.dropped == dropped
    assert dropped > 0 if "max_source_positions" in kw else dropped == 0
    release_free_heap()  # harmless to call any time


def test_completed_epoch_then_next_epoch_starts_fresh(valid_ds: ArrowMTDataset, cache: Path) -> None:
    make = sampler_factory(valid_ds, cache, max_tokens=512)
    sampler = make()
    epoch1 = list(sampler)
    state = sampler.state_dict()
    assert state["batches_done"] == len(sampler) and state["epoch"] == 1
    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the saved epoch is finished: it stays so (a restarted loop does not replay it)
    assert list(resumed) == [] and resumed.state_dict() == state
    resumed.set_epoch(2)
    expected = make()
    expected.set_epoch(2)
    assert list(resumed) == list(expected) != epoch1


def test_set_epoch_after_an_interrupted_pass_restarts_it(valid_ds: ArrowMTDataset, cache: Path) -> None:
    sampler = TokenBatchSampler(valid_ds, 512, cache_dir=cache)
    full = list(sampler)
    iterator = iter(sampler)
    next(iterator)
    sampler.set_epoch(1)
    assert list(sampler) == full
    assert sampler.state_dict()["batches_done"] == len(full)


def test_load_state_dict_rejects_incompatible_state(valid_ds: ArrowMTDataset, cache: Path) -> None:
    state = TokenBatchSampler(valid_ds, 512, num_replicas=2, rank=0, cache_dir=cache).state_dict()
    with pytest.raises(InvalidParameterError, match=r"state_dict\['rank'\]: expected 1"):
        TokenBatchSampler(valid_ds, 512, num_replicas=2, rank=1, cache_dir=cache).load_state_dict(state)
    other = TokenBatchSampler(valid_ds, 600, num_replicas=2, rank=0, cache_dir=cache)
    with pytest.raises(InvalidParameterError, match=r"state_dict\['plan_key'\]"):
        other.load_state_dict(state)
    with pytest.raises(InvalidParameterError, match=r"state_dict\['seed'\]: expected 2 \(this sampler\), got 1"):
        TokenBatchSampler(valid_ds, 512, seed=2, shuffle=False, num_replicas=2, cache_dir=cache).load_state_dict(
            {**state, "plan_key": TokenBatchSampler(valid_ds, 512, shuffle=False, cache_dir=cache).plan_key}
        )
    same = TokenBatchSampler(valid_ds, 512, num_replicas=2, rank=0, cache_dir=cache)
    with pytest.raises(InvalidParameterError, match=r"missing \['plan_key'\]"):
        same.load_state_dict({k: v for k, v in state.items() if k != "plan_key"})
    with pytest.raises(
        InvalidParameterError, match=rf"state_dict\['batches_done'\]: expected an integer in \[0, {len(same) + 1}\)"
    ):
        same.load_state_dict({**state, "batches_done": len(same) + 1})
    with pytest.raises(InvalidParameterError, match=r"state_dict\['epoch'\]: expected an integer"):
        same.load_state_dict({**state, "epoch": -1})
    with pytest.raises(InvalidParameterError, match=r"state_dict\['start'\]: expected an integer in \[0, "):
        same.load_state_dict({**state, "start": len(same.plan) + 1})
    with pytest.raises(InvalidParameterError, match=r"state_dict\['num_replicas'\]: expected an integer >= 1"):
        same.load_state_dict({**state, "num_replicas": 0})


def test_a_state_without_start_still_loads(valid_ds: ArrowMTDataset, cache: Path) -> None:
    """States saved before the ``start`` key existed resume as they did."""
    make = sampler_factory(valid_ds, cache, max_tokens=512)
    full = list(make())
    first = make()
    iterator = iter(first)
    next(iterator), next(iterator)
    old = {k: v for k, v in first.state_dict().items() if k != "start"}
    resumed = make()
    resumed.load_state_dict(old)
    assert list(resumed) == full[2:]


def test_bad_parameters(valid_ds: ArrowMTDataset, cache: Path) -> None:
    with pytest.raises(InvalidParameterError, match=r"rank: expected an integer in \[0, num_replicas=2\), got 2"):
        TokenBatchSampler(valid_ds, 512, num_replicas=2, rank=2, cache_dir=cache)
    with pytest.raises(InvalidParameterError, match="max_tokens: expected None or an integer >= 1, got 0"):
        TokenBatchSampler(valid_ds, 0, cache_dir=cache)
    for epoch in (-1, 2**32):  # what a saved state may record: an epoch set is always one a state can load
        with pytest.raises(InvalidParameterError, match=r"epoch: expected an integer in \[0, 2\*\*32\)"):
            TokenBatchSampler(valid_ds, 512, cache_dir=cache).set_epoch(epoch)
    last = TokenBatchSampler(valid_ds, 512, cache_dir=cache)
    last.set_epoch(2**32 - 1)
    TokenBatchSampler(valid_ds, 512, cache_dir=cache).load_state_dict(last.state_dict())


def test_options_and_spec_as_values_equal_the_keywords(valid_ds: ArrowMTDataset, cache: Path) -> None:
    """``spec=`` and ``options=`` give the sampler the fairseq-named keywords give; either, not both; an unknown
    keyword is named with the names taken."""
    keywords = {"max_sentences": 40, "max_source_positions": 60, "seed": 7, "num_replicas": 2, "rank": 1,
                "cache_dir": cache, "skip_invalid_size_inputs": True, "shuffle_window": 16}  # fmt: skip
    by_keywords = TokenBatchSampler(valid_ds, 512, **keywords)
    spec = PlanParams(max_tokens=512, max_sentences=40, max_source_positions=60, skip_invalid_size_inputs=True)
    options = SamplerOptions(seed=7, num_replicas=2, rank=1, cache_dir=cache, shuffle_window=16)
    by_values = TokenBatchSampler(valid_ds, spec=spec, options=options)
    assert by_values.plan_key == by_keywords.plan_key and list(by_values) == list(by_keywords)
    assert by_values.state_dict() == by_keywords.state_dict()
    with pytest.raises(InvalidParameterError, match=r"spec: expected either spec= or the keywords it holds, got both"):
        TokenBatchSampler(valid_ds, spec=spec, max_sentences=40)
    with pytest.raises(InvalidParameterError, match=r"options: expected either options= or .*\['seed'\]"):
        TokenBatchSampler(valid_ds, options=options, seed=7)
    with pytest.raises(InvalidParameterError, match=r"TokenBatchSampler: unexpected option 'max_positions' \(expected"):
        TokenBatchSampler(valid_ds, max_positions=5)


def test_works_with_dataloader_and_pickle(valid_ds: ArrowMTDataset, cache: Path) -> None:
    sampler = TokenBatchSampler(valid_ds, 512, cache_dir=cache)
    loader = DataLoader(valid_ds, batch_sampler=sampler, collate_fn=lambda rows: [r["id"] for r in rows])
    assert list(loader) == list(sampler)
    copy = pickle.loads(pickle.dumps(sampler))
    assert list(copy) == list(sampler)


def test_rank_and_world_default_to_the_process_group(valid_ds: ArrowMTDataset, tmp_path: Path) -> None:
    assert TokenBatchSampler(valid_ds, 512, cache_dir=tmp_path / "c").num_replicas == 1
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sampler = TokenBatchSampler(valid_ds, 512, cache_dir=tmp_path / "c")
        assert (sampler.num_replicas, sampler.rank) == (1, 0)
    finally:
        dist.destroy_process_group()


class MinimalPlan:
    """A user's plan with only what the Plan protocol asks for: no ``peek``."""

    key = "minimal"

    def __init__(self, batches: list[list[int]]) -> None:
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def batch(self, b: int) -> np.ndarray:
        return np.array(self.batches[b], dtype=np.int64)


@pytest.mark.parametrize(
    ("world", "start", "ends"),
    [(1, 0, [15, 31, 47, 63, 79, 95, 99]), (3, 0, [5, 10, 15, 21, 26, 31, 33]), (3, 20, [3, 9, 14, 19, 25, 26])],
)
def test_read_ahead_groups_end_with_the_windows(world: int, start: int, ends: list[int]) -> None:
    """100 batches, windows of 16 starting at positions 16, 32, ..., 96: a rank's read-ahead groups (through a remote
    cache) end at the step of its deal that holds each window's last position (position p is step (p - start) // 3),
    and at its last step; a deal that began at position 20 (an elastic resume) counts from there."""
    sampler = PlanSampler(MinimalPlan([[b] for b in range(100)]), num_replicas=world, rank=0, shuffle_window=16)
    sampler.start = start
    assert sampler._window_ends(len(sampler)).tolist() == ends


def test_a_plan_without_peek_is_read_ahead_with_its_batches(tmp_path: Path) -> None:
    """``peek`` is optional: a plan without it is read ahead through ``batch`` (the same batches either way)."""
    dataset = ArrowMTDataset(multi30k_dataset(tmp_path / "d"), "valid")
    plan = MinimalPlan([[0, 1], [2], [3, 4, 5], [6]])
    sampler = PlanSampler(plan, seed=1, shuffle=False, source=dataset, prefetch=2)
    assert list(sampler) == plan.batches
