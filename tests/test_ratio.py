"""``arrowmt.length_ratio``: the one definition of a pair's length ratio, shared by the filter and the notebook."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import arrowmt

SAMPLE = Path(arrowmt.__file__).parent / "sample_data" / "multi30k"


def test_longer_over_shorter_with_empty_sides() -> None:
    ratio = arrowmt.length_ratio(np.array([3, 2, 10, 0, 0, 7]), np.array([2, 3, 4, 5, 0, 7], dtype=np.int32))
    assert ratio.dtype == np.float64
    assert ratio.tolist() == [1.5, 1.5, 2.5, np.inf, 1.0, 1.0]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (np.array([1, 2]), np.array([1])),
        (np.array([1.0]), np.array([1])),
        (np.zeros((1, 1), int), np.zeros((1, 1), int)),
    ],
)
def test_refuses_what_is_not_two_length_arrays(first: np.ndarray, second: np.ndarray) -> None:
    with pytest.raises(arrowmt.InvalidParameterError, match="first, second"):
        arrowmt.length_ratio(first, second)


def test_the_filter_drops_exactly_the_pairs_above_the_ratio(tmp_path: Path) -> None:
    """On the bundled sample, with ``</s>`` counted as the filter counts it (576 pairs above 1.5, not 888)."""
    corpus = tmp_path / "corpus"
    arrowmt.convert_text(str(SAMPLE / "train"), corpus, src_lang="de", tgt_lang="en", progress=False)
    split = arrowmt.open_split(corpus, "train")
    ratio = arrowmt.length_ratio(split.lengths("source"), split.lengths("target"))
    for threshold in (1.5, 2.0, 3.0):
        report = arrowmt.build_view(corpus, tmp_path / f"{threshold}.view", max_len_ratio=threshold)
        assert report.dropped["ratio"] == int((ratio > threshold).sum())
    assert int((ratio > 1.5).sum()) == 576
