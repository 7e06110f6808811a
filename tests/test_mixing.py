"""Mixture arithmetic on exact values, and against fairseq's own multilingual sampling."""

from __future__ import annotations

import hashlib
import logging

import numpy as np
import pytest

from arrowmt import InvalidParameterError
from arrowmt.mixing import _mixing as mixing
from tests.conftest import import_fairseq


def test_temperature_ratios_exact_values() -> None:
    assert mixing.temperature_ratios([100, 300], 1).tolist() == [0.25, 0.75]
    assert mixing.temperature_ratios([100, 300], 2).tolist() == [0.5, 0.75**0.5]
    assert mixing.temperature_ratios([5, 7, 9], 1e9).tolist() == pytest.approx([1, 1, 1], abs=1e-8)


def test_default_epoch_size_exact_values() -> None:
    # the largest corpus (300, ratio 0.75) drawn once: 0.25 / 0.75 * 300 + 300 = 400
    assert mixing.default_epoch_size([100, 300], np.array([0.25, 0.75])) == 400
    # uniform over sizes 10 and 1000: 1000 + 1000 = 2000, capped at 1.5 * 1010 = 1515
    assert mixing.default_epoch_size([10, 1000], np.array([1.0, 1.0])) == 1515
    with pytest.raises(InvalidParameterError, match="epoch_size"):
        mixing.default_epoch_size([10, 1000], np.array([1.0, 0.0]))


def test_counts_and_rows_exact_values() -> None:
    # 0.3 * 10 and 0.7 * 10 are exact in integers: no remainder to draw
    rows, counts = mixing.resample([4, 20], np.array([3.0, 7.0]), 10, seed=1, epoch=1)
    assert counts.tolist() == [3, 7]
    assert rows.shape == (10,) and (rows[:3] < 4).all() and (rows[3:] >= 4).all()
    assert len(set(rows[:3].tolist())) == 3  # enough rows: drawn without replacement
    up, counts = mixing.resample([2, 20], np.array([1.0, 1.0]), 20, seed=1, epoch=1)
    assert counts.tolist() == [10, 10] and set(up[:10].tolist()) <= {0, 1}  # up-sampled with replacement
    again, _ = mixing.resample([2, 20], np.array([1.0, 1.0]), 20, seed=1, epoch=1)
    other, _ = mixing.resample([2, 20], np.array([1.0, 1.0]), 20, seed=1, epoch=2)
    assert np.array_equal(up, again) and not np.array_equal(up, other)
    assert mixing.resample_counts([2, 20], np.array([1.0, 1.0]), 20, 1, 1).tolist() == [10, 10]


def test_remainder_is_drawn_with_the_ratios() -> None:
    counts = mixing.resample_counts([1000, 1000, 1000], np.array([1.0, 1.0, 1.0]), 1000, seed=3, epoch=1)
    assert counts.sum() == 1000 and sorted(counts.tolist()) == [333, 333, 334]


def test_corpus_of_and_offsets() -> None:
    offsets = mixing.offsets_of(np.array([3, 0, 2]))
    assert offsets.tolist() == [0, 3, 3, 5]
    assert mixing.corpus_of(offsets, np.array([0, 2, 3, 4])).tolist() == [0, 0, 2, 2]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: mixing.temperature_ratios([1, 2], 0), "temperature"),
        (lambda: mixing.temperature_ratios([0, 0], 1), "sizes"),
        (lambda: mixing.check_weights([1.0], np.array([1, 2])), "weights"),
        (lambda: mixing.check_weights([1.0, -1.0], np.array([1, 2])), "weights"),
        (lambda: mixing.check_weights([0.0, 0.0], np.array([1, 2])), "above 0"),
        (lambda: mixing.check_weights([1.0, 1.0], np.array([1, 0])), r"weights\[1\]"),
        (lambda: mixing.check_weights(["a", "b"], np.array([1, 2])), "weights"),
        (lambda: mixing.resample([1, 2], np.array([1.0, 1.0]), 0, 1, 1), "epoch_size"),
        (lambda: mixing.as_sizes([]), "sizes"),
    ],
)
def test_bad_parameters(call: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        call()  # type: ignore[operator]


# ---------------------------------------------------------------- against fairseq


@pytest.fixture(scope="module")
def fairseq_sampling() -> tuple:
    import_fairseq()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fairseq.data.multilingual.sampled_multi_dataset import SampledMultiDataset, default_virtual_size_func
        from fairseq.data.multilingual.sampling_method import temperature_sampling
    logging.getLogger("fairseq.data.multilingual.sampled_multi_dataset").setLevel(logging.ERROR)
    return SampledMultiDataset, default_virtual_size_func, temperature_sampling


def test_the_stream_is_fairseqs(fairseq_sampling: tuple) -> None:
    name = fairseq_sampling[0].__name__
    assert int(hashlib.sha1(name.encode()).hexdigest(), 16) % 2**32 == mixing.RESAMPLE_STREAM


@pytest.mark.parametrize("trial", range(16))
def test_ratios_epoch_size_counts_and_rows_equal_fairseqs(fairseq_sampling: tuple, trial: int) -> None:
    sampled_multi, default_size, temperature_sampling = fairseq_sampling
    rng = np.random.default_rng(trial)
    sizes = rng.integers(1, 3000, int(rng.integers(1, 30))).tolist()
    temperature = float(rng.choice([0.7, 1.0, 1.5, 2.0, 5.0]))
    theirs = np.array(temperature_sampling(sizes, temperature))
    ours = mixing.temperature_ratios(sizes, temperature)
    assert np.array_equal(theirs, ours)  # bit for bit
    datasets = [range(n) for n in sizes]
    assert mixing.default_epoch_size(sizes, ours) == default_size(datasets, theirs)
    epoch_size = default_size(datasets, theirs) if trial % 2 else int(rng.integers(1, 6000))
    seed, epoch = int(rng.integers(0, 2**31)), int(rng.integers(1, 50))
    fairseq_rng = np.random.RandomState([mixing.RESAMPLE_STREAM, seed % 2**32, epoch])
    indices, _, per_corpus = object.__new__(sampled_multi).get_virtual_indices(
        fairseq_rng, datasets, theirs, epoch_size
    )
    rows, counts = mixing.resample(sizes, ours, epoch_size, seed, epoch)
    offsets = mixing.offsets_of(np.array(sizes))
    assert np.array_equal(counts, per_corpus)
    assert np.array_equal(rows - offsets[mixing.corpus_of(offsets, rows)], indices)
