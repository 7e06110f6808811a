"""Tests for arrowmt.bucketing._bucketing: exact values on hand-made inputs and equality with fairseq 0.12."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from builders import fixture_lengths
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arrowmt import InputDataError, InvalidParameterError
from arrowmt.bucketing import every_rank, own, window_end_steps
from arrowmt.testing import (
    batch_by_size,
    check_integer,
    check_limit,
    check_optional_integer,
    check_rank,
    check_seed,
    compact_counts,
    drop_too_long,
    emitted_length,
    epoch_batch_order,
    filter_by_size,
    first_full_position,
    index_dtype,
    order_keys,
    ordered_indices,
    resume_start,
    shard_batches,
    shard_length,
    shuffled_range,
    smallest_uint,
    sort_key,
    stable_order,
    tail_overflows,
    too_long_error,
    window_chunk,
    window_starts,
    windowed_batch_order,
)


def as_lists(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    return [flat[offsets[b] : offsets[b + 1]].tolist() for b in range(offsets.shape[0] - 1)]


# ---------------------------------------------------------------- order and filter


SRC = np.array([3, 1, 2, 1, 2, 1])
TGT = np.array([1, 2, 1, 1, 3, 2])


def test_ordered_indices_unshuffled_sorts_by_target_then_source_stably() -> None:
    assert ordered_indices(SRC, TGT, None).tolist() == [3, 1, 5, 2, 4, 0]
    assert ordered_indices(SRC, None, None).tolist() == [1, 3, 5, 2, 4, 0]


def test_ordered_indices_seeded_starts_from_the_legacy_permutation() -> None:
    # np.random.RandomState(0).permutation(6) == [5, 2, 1, 3, 0, 4]
    assert ordered_indices(SRC, TGT, 0).tolist() == [3, 5, 1, 2, 4, 0]
    assert ordered_indices(SRC, TGT, 0).dtype == np.int32  # index_dtype: int32 below 2**31 rows


def test_ordered_indices_rejects_mismatched_lengths() -> None:
    with pytest.raises(InvalidParameterError, match="tgt_lengths: expected 6"):
        ordered_indices(SRC, TGT[:5], 1)
    with pytest.raises(InvalidParameterError, match="seed"):
        ordered_indices(SRC, TGT, -1)


def reference_order(src: np.ndarray, tgt: np.ndarray | None, seed: int | None) -> np.ndarray:
    """The plain formula ``ordered_indices`` computes: permutation, mergesort by target, then by source."""
    src = np.asarray(src, dtype=np.int64)
    order = np.arange(src.shape[0]) if seed is None else np.random.RandomState(seed).permutation(src.shape[0])
    if tgt is not None:
        order = order[np.argsort(np.asarray(tgt, dtype=np.int64)[order], kind="mergesort")]
    return order[np.argsort(src[order], kind="mergesort")]


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(-(2**40), 2**40), st.integers(-(2**40), 2**40)), max_size=60),
    bound=st.sampled_from([3, 300, 70_000, 2**40]),
    seed=st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    paired=st.booleans(),
)
def test_ordered_indices_equals_the_plain_formula(
    pairs: list[tuple[int, int]], bound: int, seed: int | None, paired: bool
) -> None:
    # Narrow keys (one combined key, or two when the spans are too wide) give the same order.
    src = np.array([a % bound for a, _ in pairs], dtype=np.int64) - bound // 3
    tgt = np.array([b % bound for _, b in pairs], dtype=np.int64) if paired else None
    assert ordered_indices(src, tgt, seed).tolist() == reference_order(src, tgt, seed).tolist()


def test_index_dtype_and_smallest_uint() -> None:
    assert [index_dtype(n) for n in (0, 5, 2**31, 2**31 + 1)] == [np.int32, np.int32, np.int32, np.int64]
    highs = [0, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1]
    assert [smallest_uint(h) for h in highs] == [np.uint8] * 2 + [np.uint16] * 2 + [np.uint32] * 2 + [np.uint64] * 2


def test_compact_counts_keeps_values_in_fewer_bytes() -> None:
    out = compact_counts(np.array([0, 3, 300], dtype=np.int32))
    assert (out.dtype, out.tolist()) == (np.uint16, [0, 3, 300])
    assert compact_counts(np.array([2, 250], dtype=np.int64)).dtype == np.uint8
    wide = np.array([1, 2**40])
    assert compact_counts(wide) is wide  # uint64 would be no narrower
    same = np.array([1, 2], dtype=np.uint8)
    assert compact_counts(same) is same
    negative = np.array([-1, 5])
    assert compact_counts(negative) is negative
    assert compact_counts(np.zeros(0, dtype=np.int32)).shape == (0,)


def test_sort_key_shifts_to_zero_in_the_narrowest_dtype() -> None:
    key = sort_key(np.array([5, -3, 7]))
    assert (key.dtype, key.tolist()) == (np.uint8, [8, 0, 10])
    key = sort_key(np.array([-(2**31), 2**31 - 1], dtype=np.int32))
    assert (key.dtype, key.tolist()) == (np.uint32, [0, 2**32 - 1])
    assert sort_key(np.array([0, 70_000])).dtype == np.uint32
    assert sort_key(np.array([100, 400])).tolist() == [0, 300]
    same = np.array([0, 9], dtype=np.uint8)
    assert sort_key(same) is same
    assert sort_key(np.zeros(0, dtype=np.int64)).dtype == np.uint8


def test_order_keys_combine_source_and_target_when_they_fit() -> None:
    # source - 1 = [2, 0, 1, 0, 1, 0], target - 1 = [0, 1, 0, 0, 2, 1]: key = 3 * source + target
    (key,) = order_keys(SRC, TGT)
    assert (key.dtype, key.tolist()) == (np.uint8, [6, 1, 3, 0, 5, 1])
    (key,) = order_keys(SRC, None)
    assert key.tolist() == [2, 0, 1, 0, 1, 0]
    wide = np.array([0, 60_000, 5])
    (key,) = order_keys(wide, wide)
    assert (key.dtype, key.tolist()) == (np.uint32, [0, 60_000 * 60_001 + 60_000, 5 * 60_001 + 5])
    too_wide = np.array([0, 2**20, 3])
    tgt_key, src_key = order_keys(too_wide, too_wide + 1)
    assert (tgt_key.tolist(), src_key.tolist()) == ([0, 2**20, 3], [0, 2**20, 3])


@pytest.mark.parametrize(("n", "seed"), [(0, 1), (1, 1), (6, 0), (1000, 7), (200_003, 2**32 - 1)])
def test_shuffled_range_is_the_legacy_permutation_as_int32(n: int, seed: int) -> None:
    ours = shuffled_range(n, seed)
    assert ours.dtype == np.int32
    assert np.array_equal(ours, np.random.RandomState(seed).permutation(n))
    assert shuffled_range(4, None).tolist() == [0, 1, 2, 3]
    with pytest.raises(InvalidParameterError, match="seed"):
        shuffled_range(3, 2**32)


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=80),
    dtype=st.sampled_from([np.uint8, np.uint16, np.uint32, np.uint64, np.int64]),
    seed=st.integers(0, 2**16),
)
def test_stable_order_equals_a_stable_argsort(keys: list[int], dtype: type, seed: int) -> None:
    info = np.iinfo(dtype)
    key = np.array([k % (int(info.max) + 1) + int(info.min) for k in keys], dtype=dtype)
    indices = np.random.RandomState(seed).permutation(key.shape[0]).astype(np.int32)
    expected = indices[np.argsort(key[indices], kind="stable")]
    assert stable_order(indices, key).tolist() == expected.tolist()
    out = stable_order(indices, key, in_place=True)
    assert out is indices and indices.tolist() == expected.tolist()


def test_stable_order_exact() -> None:
    key = np.array([2, 0, 2, 1, 0], dtype=np.uint8)
    assert stable_order(np.array([4, 3, 2, 1, 0]), key).tolist() == [4, 1, 3, 2, 0]


def test_filter_by_size_keeps_order_and_reports_dropped() -> None:
    indices = np.array([5, 0, 4, 1])
    kept, dropped = filter_by_size(indices, SRC, TGT, 2, 2)
    assert kept.tolist() == [5, 1]
    assert dropped.tolist() == [0, 4]
    kept, dropped = filter_by_size(indices, SRC, TGT, None, 2)
    assert (kept.tolist(), dropped.tolist()) == ([5, 0, 1], [4])
    kept, dropped = filter_by_size(indices, SRC, None, 2, 1)
    assert (kept.tolist(), dropped.tolist()) == ([5, 4, 1], [0])
    kept, dropped = filter_by_size(indices, SRC, TGT, 3, 3)  # nothing too long: kept is the input
    assert kept is indices and dropped.tolist() == [] and dropped.dtype == indices.dtype
    kept, dropped = filter_by_size(indices.astype(np.int32), SRC.astype(np.uint8), TGT.astype(np.uint8), 2, 2)
    assert (kept.dtype, kept.tolist(), dropped.tolist()) == (np.int32, [5, 1], [0, 4])


# ---------------------------------------------------------------- batch arithmetic


@pytest.mark.parametrize(
    ("length", "multiple", "expected"),
    [(10, 4, 8), (3, 4, 3), (8, 8, 8), (5, 1, 5), (9, 8, 8), (15, 8, 8), (1, 3, 1)],
)
def test_emitted_length(length: int, multiple: int, expected: int) -> None:
    assert emitted_length(length, multiple) == expected


# ------------------------------------------------ reference scans (the rule as written)


def window_is_full(  # reference: fairseq's rule, one window at a time
    batch_lens: np.ndarray, running_max: np.ndarray, max_tokens: int | None, max_sentences: int | None
) -> np.ndarray:
    """fairseq's ``_is_batch_full`` for a batch of ``batch_lens`` entries meeting one more sample.

    ``running_max`` is the longest of the batch and the new sample. Full when the
    batch is non-empty and either holds ``max_sentences`` entries or
    ``(batch_len + 1) * running_max > max_tokens``.
    """
    full = np.zeros(batch_lens.shape[0], dtype=bool)
    if max_tokens is not None:
        full |= (batch_lens + 1) * running_max > max_tokens
    if max_sentences is not None:
        full |= batch_lens == max_sentences
    return full & (batch_lens > 0)


def find_full_position(  # reference: the direct scan first_full_position must equal
    num_tokens: np.ndarray,
    start: int,
    first: int,
    max_tokens: int | None,
    max_sentences: int | None,
    window: int,
) -> int | None:
    """First position ``i >= first`` at which batch ``num_tokens[start:i]`` is full, or None.

    Scans windows of ``window`` positions (doubling each time) with a running
    maximum that starts at ``start``, so entries carried over count in the max.
    """
    n = num_tokens.shape[0]
    while first < n:
        stop = min(n, first + window)
        running_max = np.maximum.accumulate(num_tokens[start:stop])[first - start :]
        batch_lens = np.arange(first - start, stop - start, dtype=np.int64)
        hits = np.flatnonzero(window_is_full(batch_lens, running_max, max_tokens, max_sentences))
        if hits.size:
            return first + int(hits[0])
        first, window = stop, window * 2
    return None


def test_window_is_full() -> None:
    lens = np.array([0, 1, 2, 3])
    running = np.array([5, 5, 5, 6])
    assert window_is_full(lens, running, 12, None).tolist() == [False, False, True, True]
    assert window_is_full(lens, running, None, 2).tolist() == [False, False, True, False]
    assert window_is_full(lens, running, None, None).tolist() == [False] * 4


def test_find_full_position_grows_its_window() -> None:
    sizes = np.ones(100, dtype=np.int64)
    assert find_full_position(sizes, 0, 1, 50, None, 2) == 50
    assert find_full_position(sizes, 10, 12, None, 7, 1) == 17
    assert find_full_position(sizes, 0, 1, 1000, None, 2) is None


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=2, max_size=120),
    data=st.data(),
    max_tokens=st.one_of(st.none(), st.integers(1, 500)),
    max_sentences=st.one_of(st.none(), st.integers(1, 40)),
    window=st.integers(1, 64),
)
def test_first_full_position_equals_find_full_position(
    sizes: list[int], data: st.DataObject, max_tokens: int | None, max_sentences: int | None, window: int
) -> None:
    arr = np.array(sizes, dtype=data.draw(st.sampled_from([np.uint8, np.int32, np.int64])))
    start = data.draw(st.integers(0, len(sizes) - 2))
    first = data.draw(st.integers(start + 1, len(sizes)))
    expected = find_full_position(arr, start, first, max_tokens, max_sentences, window)
    assert first_full_position(arr, start, first, max_tokens, max_sentences, window) == expected


def test_first_full_position_exact() -> None:
    sizes = np.array([1, 1, 4, 1, 1, 1, 9])
    assert first_full_position(sizes, 0, 1, 8, None, 2) == 2  # 3 * 4 > 8
    assert first_full_position(sizes, 3, 4, 8, None, 1) == 6  # 4 * 9 > 8
    assert first_full_position(sizes, 3, 4, 100, 2, 1) == 5  # holds max_sentences=2 at position 5
    assert first_full_position(sizes, 3, 4, 100, 5, 1) is None  # would fill past the end
    assert first_full_position(sizes, 0, 1, None, None, 4) is None


def test_tail_overflows() -> None:
    sizes = np.array([1, 1, 1, 7, 7])
    assert tail_overflows(sizes, 2, 3, 13)
    assert not tail_overflows(sizes, 2, 3, 14)
    assert not tail_overflows(sizes, 3, 3, 1)
    assert not tail_overflows(sizes, 2, 3, None)


def test_batch_by_size_token_budget() -> None:
    flat, offsets = batch_by_size(np.array([4, 3, 2, 1, 0]), np.array([2, 2, 3, 3, 5]), 6, None)
    assert as_lists(flat, offsets) == [[4, 3], [2, 1], [0]]
    assert offsets.dtype == np.int64 and flat.dtype == np.int64


def test_batch_by_size_max_sentences() -> None:
    _, offsets = batch_by_size(np.arange(5), np.ones(5, dtype=np.int64), None, 2)
    assert offsets.tolist() == [0, 2, 4, 5]


def test_batch_by_size_carries_the_remainder_over() -> None:
    # Full at [9, 8, 7] + 6 (4 * 4 > 12): emit 2, carry 7; [7, 6] then takes 5 (3 * 4 = 12).
    # The last batch [5] is not a multiple of 2 and is dropped, as fairseq 0.12 does.
    flat, offsets = batch_by_size(np.array([9, 8, 7, 6, 5]), np.array([1, 1, 1, 4, 4]), 12, None, 2)
    assert as_lists(flat, offsets) == [[9, 8], [7, 6]]


def test_batch_by_size_splits_a_carry_over_that_alone_overflows() -> None:
    # Carried [7] + 6 gives 2 * 7 > 13, so [7] becomes a batch of its own.
    flat, offsets = batch_by_size(np.array([9, 8, 7, 6, 5]), np.array([1, 1, 1, 7, 7]), 13, None, 2)
    assert as_lists(flat, offsets) == [[9, 8], [7], [6]]


def test_batch_by_size_last_batch_cut_at_multiple() -> None:
    flat, offsets = batch_by_size(np.arange(7), np.ones(7, dtype=np.int64), None, None, 4)
    assert as_lists(flat, offsets) == [[0, 1, 2, 3]]
    flat, offsets = batch_by_size(np.arange(8), np.ones(8, dtype=np.int64), None, None, 4)
    assert as_lists(flat, offsets) == [list(range(8))]
    flat, offsets = batch_by_size(np.arange(3), np.ones(3, dtype=np.int64), 100, None, 4)
    assert offsets.tolist() == [0] and flat.tolist() == []


def test_batch_by_size_rejects_negative_sizes() -> None:
    with pytest.raises(InvalidParameterError, match=r"num_tokens\[1\]: expected a size >= 0, got -3"):
        batch_by_size(np.array([0, 1]), np.array([2, -3]), 10, None)


def test_batch_by_size_empty() -> None:
    flat, offsets = batch_by_size(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 10, None)
    assert flat.tolist() == [] and offsets.tolist() == [0]


def test_batch_by_size_errors_name_parameter_and_values() -> None:
    with pytest.raises(InputDataError, match=r"max_tokens: sample 7 has 11 tokens, expected <= max_tokens=10"):
        batch_by_size(np.array([3, 7]), np.array([2, 11]), 10, None)
    with pytest.raises(InvalidParameterError, match="num_tokens: expected 2"):
        batch_by_size(np.array([3, 7]), np.array([2]), 10, None)
    with pytest.raises(InvalidParameterError, match="required_batch_size_multiple: expected None or an integer"):
        batch_by_size(np.array([3]), np.array([2]), 10, None, 0)
    with pytest.raises(InvalidParameterError, match="max_sentences"):
        batch_by_size(np.array([3]), np.array([2]), 10, -1)


# ---------------------------------------------------------------- epochs and ranks


def test_epoch_batch_order_exact_and_deterministic() -> None:
    assert epoch_batch_order(6, 1, 1).tolist() == [4, 1, 3, 2, 5, 0]
    assert epoch_batch_order(6, 1, 2).tolist() == [3, 5, 4, 1, 0, 2]
    assert epoch_batch_order(6, 1, 1).tolist() == epoch_batch_order(6, 1, 1).tolist()
    assert epoch_batch_order(0, 1, 1).tolist() == []


def test_windowed_batch_order_exact() -> None:
    """Windows of 32 positions, each drawn from 16 runs of 2 consecutive ids; the last window is short."""
    first = windowed_batch_order(40, 1, 1, 32)
    assert first.tolist() == [
        10, 18, 6, 2, 7, 25, 5, 9, 14, 3, 21, 34, 28, 11, 35, 32,
        0, 12, 33, 19, 8, 24, 4, 20, 15, 22, 36, 29, 1, 37, 13, 23,
        38, 26, 27, 31, 17, 39, 30, 16,
    ]  # fmt: skip
    assert sorted({int(b) // 2 for b in first[:32]}) == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 14, 16, 17, 18]
    assert sorted({int(b) // 2 for b in first[32:]}) == [8, 13, 15, 19]
    assert windowed_batch_order(40, 1, 2, 32).tolist() != first.tolist()
    assert windowed_batch_order(40, 1, 1, 32).tolist() == first.tolist()
    assert windowed_batch_order(0, 1, 1, 32).tolist() == []
    assert [window_chunk(w) for w in (1, 16, 17, 512)] == [1, 1, 2, 32]
    assert window_starts(40, 1, 1, 32).tolist() == [32]  # 16 runs of 2, then 4
    assert window_starts(40, 1, 1, 16).tolist() == [16, 32]


def one_shot_windowed_order(n: int, seed: int, epoch: int, window: int) -> np.ndarray:
    """Reference: the windowed order placed in one computation (runs shuffled, then one draw for the whole epoch)."""
    rng = np.random.RandomState(seed + epoch)
    chunk = min(-(-window // 16), max(n, 1))
    runs = rng.permutation(-(-n // chunk))
    ids = (runs[:, None] * chunk + np.arange(chunk)).ravel()
    windows = np.repeat(np.arange(runs.size) // 16, chunk)
    kept = ids < n
    return ids[kept][np.lexsort((rng.random_sample(int(kept.sum())), windows[kept]))]


@pytest.mark.parametrize(("n", "window"), [(40_000, 1), (88_000, 16), (50_000, 2_000), (16_385, 1), (33_000, 300)])
def test_a_windowed_order_placed_window_by_window_is_the_one_shot_order(n: int, window: int) -> None:
    """The order is placed a few windows at a time (bounded arrays), over several pieces here: the same order."""
    for epoch in (1, 2):
        assert np.array_equal(windowed_batch_order(n, 5, epoch, window), one_shot_windowed_order(n, 5, epoch, window))


def test_a_window_larger_than_the_plan_is_one_run() -> None:
    """Bounded by the plan, not the window: one run of all the batches, the same order as a window just as long."""
    assert windowed_batch_order(10, 1, 1, 10**15).tolist() == windowed_batch_order(10, 1, 1, 160).tolist()
    assert window_starts(10, 1, 1, 10**15).tolist() == []


@given(st.integers(0, 300), st.integers(1, 200), st.integers(0, 50))
@settings(max_examples=60, deadline=None)
def test_windowed_batch_order_is_a_permutation_of_runs(n: int, window: int, epoch: int) -> None:
    order = windowed_batch_order(n, 7, epoch, window)
    assert sorted(order.tolist()) == list(range(n))
    chunk = window_chunk(window)
    runs: set[int] = set()
    start = 0  # where the window being walked begins: it ends where its 16 runs (the last window: fewer) are whole
    for at, b in enumerate(order.tolist(), 1):
        runs.add(b // chunk)
        assert len(runs) <= 16
        if len(runs) == 16 and sum(min(chunk, n - r * chunk) for r in runs) == at - start:
            runs, start = set(), at
    assert sum(min(chunk, n - r * chunk) for r in runs) == n - start


@pytest.mark.parametrize("window", [0, -3, 1.5, "8", True])
def test_a_bad_shuffle_window_is_refused(window: object) -> None:
    with pytest.raises(InvalidParameterError, match="shuffle_window"):
        windowed_batch_order(10, 1, 1, window)  # type: ignore[arg-type]


def test_shard_batches_strides_and_wraps() -> None:
    order = np.array([4, 0, 3, 1, 2])
    assert [shard_batches(order, r, 2).tolist() for r in range(2)] == [[4, 3, 2], [0, 1, 4]]
    assert [shard_batches(order, r, 3).tolist() for r in range(3)] == [[4, 1], [0, 2], [3, 4]]
    assert [shard_batches(order, r, 7).tolist() for r in range(7)] == [[4], [0], [3], [1], [2], [4], [0]]
    assert shard_batches(order, 1, 5).tolist() == [0]
    assert shard_batches(np.zeros(0, dtype=np.int64), 0, 2).tolist() == []
    assert shard_length(5, 2) == 3 and shard_length(4, 2) == 2 and shard_length(0, 3) == 0


def test_shard_batches_rejects_bad_rank() -> None:
    with pytest.raises(InvalidParameterError, match=r"rank: expected an integer in \[0, num_replicas=2\), got 2"):
        shard_batches(np.arange(3), 2, 2)
    with pytest.raises(InvalidParameterError, match="num_replicas: expected an integer >= 1, got 0"):
        shard_batches(np.arange(3), 0, 0)
    with pytest.raises(InvalidParameterError, match=r"start: expected an integer in \[0, 4\), got 4"):
        shard_batches(np.arange(3), 0, 1, start=4)


def test_shard_batches_from_a_start_deal_the_rest_and_wrap_to_the_order_start() -> None:
    order = np.array([4, 0, 3, 1, 2, 6, 5])
    assert [shard_batches(order, r, 2, start=4).tolist() for r in range(2)] == [[2, 5], [6, 4]]
    assert [shard_batches(order, r, 3, start=2).tolist() for r in range(3)] == [[3, 6], [1, 5], [2, 4]]
    assert [shard_batches(order, r, 2, start=7).tolist() for r in range(2)] == [[], []]
    assert shard_batches(order, 0, 1, start=0).tolist() == order.tolist()
    assert shard_length(7, 2, start=4) == 2 and shard_length(7, 3, start=7) == 0 and shard_length(7, 4) == 2


def test_resume_start_counts_the_trained_prefix() -> None:
    assert resume_start(23, 0, 4, 3) == 12
    assert resume_start(23, 12, 2, 4) == 20
    assert resume_start(23, 20, 3, 1) == 23  # the deal's wrapped padding trains nothing new
    assert resume_start(23, 0, 4, 6) == 23  # a finished epoch
    assert resume_start(0, 0, 2, 0) == 0


def trained(order: np.ndarray, deals: list[tuple[int, int]]) -> list[list[int]]:
    """Batches trained per step by a run whose world changes: ``deals`` is (world size, steps) in turn."""
    steps: list[list[int]] = []
    start = 0
    for world, count in deals:
        shares = [shard_batches(order, r, world, start) for r in range(world)]
        assert {len(share) for share in shares} == {shard_length(order.shape[0], world, start)}
        steps += [[int(share[k]) for share in shares] for k in range(count)]
        start = resume_start(order.shape[0], start, world, count)
    return steps


def test_elastic_resume_4_to_2_ranks_trains_each_batch_once_exact() -> None:
    order = epoch_batch_order(23, 1, 1)
    steps = trained(order, [(4, 3), (2, 6)])
    assert steps[:3] == [order[0:4].tolist(), order[4:8].tolist(), order[8:12].tolist()]
    assert steps[3:] == [order[p : p + 2].tolist() for p in range(12, 22, 2)] + [[int(order[22]), int(order[0])]]
    flat = [b for step in steps for b in step]
    assert sorted(flat[:-1]) == list(range(23))  # every batch once, then one padding batch (the order's first)


def test_elastic_resume_4_to_3_ranks_trains_each_batch_once_exact() -> None:
    order = epoch_batch_order(23, 1, 1)
    steps = trained(order, [(4, 2), (3, 5)])
    assert steps[2:] == [order[p : p + 3].tolist() for p in range(8, 23, 3)]
    flat = [b for step in steps for b in step]
    assert len(flat) == 23 and sorted(flat) == list(range(23))  # 15 left, 5 steps of 3: no padding at all


def test_elastic_resume_twice_and_at_the_end_of_an_epoch() -> None:
    order = np.arange(10)
    steps = trained(order, [(4, 1), (2, 1), (3, 2)])
    assert steps == [[0, 1, 2, 3], [4, 5], [6, 7, 8], [9, 0, 1]]
    after_the_end = resume_start(10, 0, 3, 4)
    assert after_the_end == 10 and shard_length(10, 2, after_the_end) == 0
    assert [shard_batches(order, r, 2, after_the_end).tolist() for r in range(2)] == [[], []]


# ---------------------------------------------------------------- parameter checks


def test_integer_checks_share_one_message_style() -> None:
    assert check_integer("n", np.int64(3), 0) == 3
    assert check_optional_integer("n", None, 1) is None
    for bad in (True, 2.0, "3", -1):
        with pytest.raises(InvalidParameterError, match=rf"n: expected an integer >= 0, got {bad!r}"):
            check_integer("n", bad, 0)
    with pytest.raises(InvalidParameterError, match=r"k: expected an integer in \[1, cap=4\), got 4"):
        check_integer("k", 4, 1, 4, high_name="cap=4")
    with pytest.raises(InvalidParameterError, match="max_tokens: expected None or an integer >= 1, got 0"):
        check_limit("max_tokens", 0)
    with pytest.raises(InvalidParameterError, match=r"seed: expected an integer in \[0, 2\*\*32\), got -1"):
        check_seed("seed", -1)
    with pytest.raises(InvalidParameterError, match=r"rank: expected an integer in \[0, num_replicas=3\), got 3"):
        check_rank(3, 3)


def test_drop_too_long_keeps_order_or_names_the_first_sample() -> None:
    indices, sizes = np.array([7, 3, 9, 1]), np.array([5, 12, 4, 11])
    kept, kept_sizes, dropped = drop_too_long(indices, sizes, "max_tokens", 10, skip=True)
    assert (kept.tolist(), kept_sizes.tolist(), dropped) == ([7, 9], [5, 4], 2)
    assert drop_too_long(indices, sizes, "max_tokens", None, skip=False)[0] is indices
    assert drop_too_long(indices, sizes, "max_tokens", 12, skip=False)[2] == 0
    message = r"max_tokens: sample 3 has 12 tokens, expected <= max_tokens=10 \(2 samples too long; pass skip_"
    with pytest.raises(InputDataError, match=message):
        drop_too_long(indices, sizes, "max_tokens", 10, skip=False)
    assert str(too_long_error("max_source_positions", 5, 8, 6, 1)).startswith(
        "max_source_positions: sample 8 has 6 tokens, expected <= max_source_positions=5 (1 samples too long"
    )


# ---------------------------------------------------------------- equality with fairseq


@pytest.fixture(scope="module")
def fairseq() -> SimpleNamespace:
    """The fairseq pieces that define order, batches and sharding, imported quietly."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("fairseq")
        from fairseq.data import Dictionary, LanguagePairDataset, data_utils, iterators

        return SimpleNamespace(
            Dictionary=Dictionary,
            LanguagePairDataset=LanguagePairDataset,
            data_utils=data_utils,
            iterators=iterators,
        )


def fairseq_batches(
    fs: SimpleNamespace, indices: np.ndarray, sizes: np.ndarray, mt: int | None, ms: int | None, mult: int
) -> list[list[int]]:
    indices = np.asarray(indices, dtype=np.int64)  # fairseq's Cython batch_by_size takes int64 only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = fs.data_utils.batch_by_size(
            indices,
            lambda i: int(sizes[i]),
            num_tokens_vec=sizes[indices],
            max_tokens=mt,
            max_sentences=ms,
            required_batch_size_multiple=mult,
        )
    return [np.asarray(b).tolist() for b in batches]


def fairseq_order(fs: SimpleNamespace, src: np.ndarray, tgt: np.ndarray | None, seed: int | None) -> np.ndarray:
    d = fs.Dictionary()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = fs.LanguagePairDataset(
            list(range(len(src))),
            src,
            d,
            None if tgt is None else list(range(len(tgt))),
            tgt,
            d,
            shuffle=seed is not None,
        )
        with fs.data_utils.numpy_seed(seed):
            return pairs.ordered_indices()


@pytest.fixture(scope="module")
def train_lengths() -> tuple[np.ndarray, np.ndarray]:
    return fixture_lengths("train")


@pytest.mark.parametrize("seed", [1, 7, None])
def test_ordered_indices_match_fairseq_on_real_lengths(
    fairseq: SimpleNamespace, train_lengths: tuple[np.ndarray, np.ndarray], seed: int | None
) -> None:
    src, tgt = train_lengths
    assert np.array_equal(ordered_indices(src, tgt, seed), fairseq_order(fairseq, src, tgt, seed))
    assert np.array_equal(ordered_indices(src, None, seed), fairseq_order(fairseq, src, None, seed))


@pytest.mark.parametrize(
    ("max_tokens", "max_sentences", "multiple"),
    [
        (4096, None, 1),
        (4096, None, 8),
        (1000, 64, 8),
        (300, None, 3),
        (None, 100, 1),
        (45, 5, 2),
        (2000, 37, 4),
    ],
)
def test_batch_by_size_matches_fairseq_on_real_lengths(
    fairseq: SimpleNamespace,
    train_lengths: tuple[np.ndarray, np.ndarray],
    max_tokens: int | None,
    max_sentences: int | None,
    multiple: int,
) -> None:
    src, tgt = train_lengths
    order = ordered_indices(src, tgt, 1)
    sizes = np.maximum(src, tgt)
    flat, offsets = batch_by_size(order, sizes[order], max_tokens, max_sentences, multiple)
    assert as_lists(flat, offsets) == fairseq_batches(fairseq, order, sizes, max_tokens, max_sentences, multiple)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=200),
    budget=st.one_of(st.none(), st.integers(1, 400)),
    max_sentences=st.one_of(st.none(), st.integers(1, 30)),
    multiple=st.integers(1, 8),
    seed=st.integers(0, 2**16),
    sort=st.booleans(),
)
def test_batch_by_size_matches_fairseq_on_random_inputs(
    fairseq: SimpleNamespace,
    sizes: list[int],
    budget: int | None,
    max_sentences: int | None,
    multiple: int,
    seed: int,
    sort: bool,
) -> None:
    lengths = np.array(sizes, dtype=np.int64)
    max_tokens = None if budget is None else max(1, int(lengths.max()) + budget - 1)
    order = np.random.RandomState(seed).permutation(lengths.shape[0]).astype(np.int64)
    if sort:
        order = order[np.argsort(lengths[order], kind="mergesort")]
    flat, offsets = batch_by_size(order, lengths[order], max_tokens, max_sentences, multiple)
    assert as_lists(flat, offsets) == fairseq_batches(fairseq, order, lengths, max_tokens, max_sentences, multiple)


@pytest.mark.parametrize(("n_batches", "world"), [(10, 1), (10, 3), (12, 4), (3, 5)])
def test_epoch_order_and_shards_match_fairseq(fairseq: SimpleNamespace, n_batches: int, world: int) -> None:
    """fairseq shuffles the batch list under numpy_seed(seed + epoch) and shards with ShardedIterator."""
    seed, epoch = 3, 2
    batches = list(range(n_batches))
    with fairseq.data_utils.numpy_seed(seed + epoch):
        np.random.shuffle(batches)
    order = epoch_batch_order(n_batches, seed, epoch)
    assert order.tolist() == batches
    for rank in range(world):
        theirs = list(fairseq.iterators.ShardedIterator(batches, world, rank, fill_value=None))
        ours = shard_batches(order, rank, world).tolist()
        assert len(ours) == len(theirs)
        real = [b for b in theirs if b is not None]
        assert ours[: len(real)] == real


def test_a_deal_gives_every_rank_its_positions_exact_values() -> None:
    """Two ranks dealt an order of five batches from position 1: step s holds positions 1 + 2s and 2 + 2s; the
    position past the end (a deal's padding) is left out."""
    order = np.array([40, 41, 42, 43, 44])
    batches, steps = every_rank(order, 1, 2)(0, 3)
    assert batches.tolist() == [41, 42, 43, 44] and steps.tolist() == [0, 0, 1, 1]
    batches, steps = every_rank(order, 1, 2)(1, 5)
    assert batches.tolist() == [43, 44] and steps.tolist() == [1, 1]
    batches, positions = own(np.array([7, 8, 9]))(1, 5)
    assert batches.tolist() == [8, 9] and positions.tolist() == [1, 2]


def test_the_steps_that_end_windows_exact_values() -> None:
    """Windows begin at positions 0, 4 and 8 of a deal to two ranks from position 2: the first window's last
    position (3) is step 0, the second's (7) step 2; the last step ends the pass."""
    assert window_end_steps(np.array([4, 8]), 2, 2, 6).tolist() == [0, 2, 5]
    assert window_end_steps(np.array([4, 8]), 9, 2, 3).tolist() == [2]  # every window began before the deal
