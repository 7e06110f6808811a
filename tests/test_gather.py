"""Exact-value tests for arrowmt.training._gather and the Spans / GatheredBatch containers.

``take_padded`` and ``shift_right`` here are the plain references (checked spans, one step
at a time) that the library's one-gather ``gather_padded``/``gather_padded_shifted`` are held to.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from arrowmt import InvalidParameterError
from arrowmt.testing import (
    GatheredBatch,
    Spans,
    as_spans,
    gather_padded,
    gather_padded_shifted,
    padded_width,
    take_flat,
    valid_mask,
)

# rows: [10 11 12] at 0, [] at 3, [20 21] at 5, [30] at 9
WORDS = np.array([10, 11, 12, 99, 99, 20, 21, 99, 99, 30], dtype=np.int32)
STARTS = np.array([0, 3, 5, 9])
LENGTHS = np.array([3, 0, 2, 1])


def take_padded(
    words: np.ndarray, starts: np.ndarray, lengths: np.ndarray, pad: int, left_pad: bool, width: int | None = None
) -> np.ndarray:
    """Checked spans padded to ``width`` (default: the longest row) with the library's gather."""
    starts, lengths = as_spans(words, starts, lengths)
    width = padded_width(lengths) if width is None else width
    if width < padded_width(lengths):
        raise InvalidParameterError(f"width: expected >= the longest row ({padded_width(lengths)}), got {width}")
    return gather_padded(words, starts, lengths, width, pad, left_pad)


def shift_right(padded: np.ndarray, lengths: np.ndarray, first: int, pad: int, left_pad: bool) -> np.ndarray:
    """Reference: each row of a padded matrix as ``[first] + row[:-1]`` in the same cells (fairseq's eos move)."""
    width = padded.shape[1]
    out = np.full_like(padded, pad)
    for i, length in enumerate(np.asarray(lengths).tolist()):
        if length:
            cells = slice(width - length, width) if left_pad else slice(0, length)
            row = padded[i, cells]
            out[i, cells] = np.concatenate([[first], row[:-1]])
    return out


def test_take_flat_concatenates_rows_in_order() -> None:
    out = take_flat(WORDS, STARTS, LENGTHS)
    assert out.dtype == np.int32
    assert out.tolist() == [10, 11, 12, 20, 21, 30]


def test_take_flat_any_order_and_repeats() -> None:
    out = take_flat(WORDS, np.array([9, 0, 9, 6]), np.array([1, 2, 1, 1]))
    assert out.tolist() == [30, 10, 11, 30, 21]


def test_take_flat_empty() -> None:
    out = take_flat(WORDS, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert out.shape == (0,) and out.dtype == np.int32
    assert take_flat(np.zeros(0, dtype=np.int32), np.array([0]), np.array([0])).tolist() == []


def test_take_padded_right() -> None:
    out = take_padded(WORDS, STARTS, LENGTHS, pad=1, left_pad=False)
    assert out.dtype == np.int64
    assert out.tolist() == [[10, 11, 12], [1, 1, 1], [20, 21, 1], [30, 1, 1]]


def test_take_padded_left() -> None:
    out = take_padded(WORDS, STARTS, LENGTHS, pad=1, left_pad=True)
    assert out.tolist() == [[10, 11, 12], [1, 1, 1], [1, 20, 21], [1, 1, 30]]


def test_take_padded_given_width() -> None:
    right = take_padded(WORDS, STARTS[2:], LENGTHS[2:], pad=0, left_pad=False, width=4)
    left = take_padded(WORDS, STARTS[2:], LENGTHS[2:], pad=0, left_pad=True, width=4)
    assert right.tolist() == [[20, 21, 0, 0], [30, 0, 0, 0]]
    assert left.tolist() == [[0, 0, 20, 21], [0, 0, 0, 30]]


def test_take_padded_empty_and_all_empty_rows() -> None:
    assert take_padded(WORDS, np.zeros(0), np.zeros(0), pad=1, left_pad=True).shape == (0, 0)
    out = take_padded(WORDS, np.array([3, 4]), np.array([0, 0]), pad=1, left_pad=False)
    assert out.shape == (2, 0)


def test_take_padded_width_too_small() -> None:
    with pytest.raises(InvalidParameterError, match=r"width: expected >= the longest row \(3\), got 2"):
        take_padded(WORDS, STARTS, LENGTHS, pad=1, left_pad=False, width=2)


@pytest.mark.parametrize(
    ("starts", "lengths", "message"),
    [
        ([0, 8], [1, 3], r"starts\[1\] \+ lengths\[1\]: expected <= len\(words\) = 10, got 11"),
        ([0, -1], [1, 1], r"starts\[1\]: expected >= 0, got -1"),
        ([0, 1], [-2, 1], r"lengths\[0\]: expected >= 0, got -2"),
        ([0, 1], [1], r"starts, lengths: expected two 1-D arrays of the same length"),
    ],
)
def test_take_rejects_rows_outside_words(starts: list[int], lengths: list[int], message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        take_flat(WORDS, np.array(starts), np.array(lengths))
    with pytest.raises(InvalidParameterError, match=message):
        take_padded(WORDS, np.array(starts), np.array(lengths), pad=1, left_pad=True)


def test_take_rejects_2d_words() -> None:
    with pytest.raises(InvalidParameterError, match=r"words: expected a 1-D array, got shape \(2, 5\)"):
        take_flat(WORDS.reshape(2, 5), np.array([0]), np.array([1]))


def test_padded_width_rounds_like_fairseq() -> None:
    lengths = np.array([3, 5, 1])
    assert padded_width(lengths) == 5
    assert padded_width(lengths, multiple=8) == 8
    assert padded_width(lengths, multiple=5) == 5
    assert padded_width(np.array([9]), multiple=8) == 16
    assert padded_width(np.zeros(0, dtype=np.int64), multiple=8) == 0


def test_valid_mask() -> None:
    assert valid_mask(np.array([2, 0, 3]), 3, left_pad=False).astype(int).tolist() == [
        [1, 1, 0],
        [0, 0, 0],
        [1, 1, 1],
    ]
    assert valid_mask(np.array([2, 0, 3]), 3, left_pad=True).astype(int).tolist() == [
        [0, 1, 1],
        [0, 0, 0],
        [1, 1, 1],
    ]


def test_shift_right_moves_first_token_in_front() -> None:
    right = take_padded(WORDS, STARTS, LENGTHS, pad=1, left_pad=False)
    assert shift_right(right, LENGTHS, 2, 1, left_pad=False).tolist() == [
        [2, 10, 11],
        [1, 1, 1],
        [2, 20, 1],
        [2, 1, 1],
    ]
    left = take_padded(WORDS, STARTS, LENGTHS, pad=1, left_pad=True, width=4)
    assert shift_right(left, LENGTHS, 2, 1, left_pad=True).tolist() == [
        [1, 2, 10, 11],
        [1, 1, 1, 1],
        [1, 1, 2, 20],
        [1, 1, 1, 2],
    ]


@pytest.mark.parametrize("left_pad", [False, True])
@pytest.mark.parametrize("width", [None, 4, 6])
def test_gather_padded_shifted_equals_padding_then_shifting(left_pad: bool, width: int | None) -> None:
    width = padded_width(LENGTHS) if width is None else width
    rows, shifted = gather_padded_shifted(WORDS, STARTS, LENGTHS, width, 1, 2, left_pad)
    expected = take_padded(WORDS, STARTS, LENGTHS, pad=1, left_pad=left_pad, width=width)
    assert rows.dtype == shifted.dtype == np.int64
    assert rows.tolist() == expected.tolist()
    assert shifted.tolist() == shift_right(expected, LENGTHS, 2, 1, left_pad).tolist()


def test_spans_select_compact_and_pickle() -> None:
    spans = Spans(WORDS, STARTS, LENGTHS)
    picked = spans.select(np.array([2, 0]))
    assert picked.words is WORDS
    assert [picked.row(i).tolist() for i in range(2)] == [[20, 21], [10, 11, 12]]
    small = spans.compact()
    assert small.words.tolist() == [10, 11, 12, 20, 21, 30]
    assert small.starts.tolist() == [0, 3, 3, 5]
    again = pickle.loads(pickle.dumps(spans))
    assert again.words.tolist() == [10, 11, 12, 20, 21, 30]
    assert [again.row(i).tolist() for i in range(4)] == [[10, 11, 12], [], [20, 21], [30]]


def test_spans_concat_compact_keeps_part_order() -> None:
    other = np.array([7, 8, 9], dtype=np.int32)
    spans = Spans.concat_compact([(WORDS, np.array([5]), np.array([2])), (other, np.array([1, 0]), [2, 1])])
    assert [spans.row(i).tolist() for i in range(3)] == [[20, 21], [8, 9], [7]]
    assert spans.lengths.tolist() == [2, 2, 1]


def test_gathered_batch_is_a_sequence_of_samples() -> None:
    batch = GatheredBatch(np.array([5, 6]), {"source": Spans(WORDS, STARTS[:2], LENGTHS[:2])})
    assert len(batch) == 2
    first, second = list(batch)
    assert first["id"] == 5 and first["source"].tolist() == [10, 11, 12]
    assert second["id"] == 6 and second["source"].tolist() == []
    assert batch[-1]["id"] == 6
    with pytest.raises(IndexError):
        batch[2]


def test_gathered_batch_checks_row_counts() -> None:
    with pytest.raises(InvalidParameterError, match=r"columns\['source'\]: expected 3 rows \(one per id\), got 2"):
        GatheredBatch(np.array([1, 2, 3]), {"source": Spans(WORDS, STARTS[:2], LENGTHS[:2])})


def test_gathered_batch_from_samples() -> None:
    samples = [
        {"id": 3, "source": torch.tensor([4, 5], dtype=torch.int64), "target": None},
        {"id": 1, "source": torch.tensor([6], dtype=torch.int64), "target": None},
    ]
    batch = GatheredBatch.from_samples(samples)
    assert batch.ids.tolist() == [3, 1]
    assert list(batch.columns) == ["source"]
    assert batch.columns["source"].lengths.tolist() == [2, 1]
    assert batch[0]["source"].tolist() == [4, 5]
    assert GatheredBatch.from_samples(batch) is batch
    assert len(GatheredBatch.from_samples([])) == 0
