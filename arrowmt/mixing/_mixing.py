"""Mixture arithmetic: sampling ratios, the epoch size and each epoch's resampled rows.

Pure numpy on per-corpus sizes; no file is touched, so every function is tested
on exact values. The numbers are those of fairseq 0.12's multilingual sampling
(``sampling_method.temperature_sampling``, ``SampledMultiDataset``'s
``default_virtual_size_func`` and ``get_virtual_indices``), checked against fairseq
itself in the tests:

* ratios: given weights, or ``(n_i / N) ** (1 / T)`` for temperature ``T``
  (proportional to ``n_i ** (1 / T)``); no ratios means plain concatenation;
* the epoch size ``V`` (fairseq's *virtual size*): given, or the size at which the
  largest corpus is drawn once, ``sum_i r_i / r_max * n_max``, capped at 1.5 times
  the corpora's total;
* corpus ``i`` gets ``int(V * p_i)`` rows (``p`` the normalized ratios) and the
  remainder is drawn with probabilities ``p``; its rows are drawn uniformly, without
  replacement when it has enough rows, else with replacement;
* all from ``numpy.random.RandomState([stream, seed, epoch])``, so every epoch's
  draw is a pure function of (seed, epoch) and the same in every process.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError

# fairseq's resampling stream: the first word of its RandomState seed (the SHA-1 of the class name).
RESAMPLE_STREAM = int(hashlib.sha1(b"SampledMultiDataset").hexdigest(), 16) % 2**32
MAX_SCALE_UP = 1.5  # the default epoch size is at most this many times the corpora's total


def as_sizes(sizes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Corpus sizes as a 1-D int64 array of at least one non-negative count."""
    arr = np.asarray(sizes)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu" or int(arr.min()) < 0:
        raise InvalidParameterError(f"sizes: expected at least one row count >= 0, got {sizes!r}")
    return arr.astype(np.int64)


def check_weights(weights: Sequence[float] | np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Weights as float64, one per corpus: finite, >= 0 with a finite sum, some corpus with rows weighted above 0."""
    arr = np.asarray(weights, dtype=np.float64) if _numeric(weights) else None
    if arr is None or arr.shape != sizes.shape or not np.isfinite(arr).all() or (arr < 0).any() or _overflows(arr):
        raise InvalidParameterError(
            f"weights: expected {sizes.shape[0]} finite numbers >= 0 (one per corpus) with a finite sum, "
            f"got {weights!r}"
        )
    empty = np.flatnonzero((sizes == 0) & (arr > 0))
    if empty.size:
        raise InvalidParameterError(
            f"weights[{int(empty[0])}]: expected 0 for a corpus without rows, got {arr[empty[0]]}"
        )
    if not (arr > 0).any():
        raise InvalidParameterError(f"weights: expected some corpus weighted above 0, got {weights!r}")
    return arr


def _overflows(weights: np.ndarray) -> bool:
    """Whether the sum of ``weights`` (finite) is not a finite float64 (the ratios would be nan)."""
    with np.errstate(over="ignore"):
        return not np.isfinite(weights.sum())


def _numeric(values: object) -> bool:
    try:
        return np.asarray(values).dtype.kind in "iuf"
    except (TypeError, ValueError):
        return False


def check_temperature(temperature: object, name: str = "temperature") -> float:
    """A sampling temperature is a finite number > 0 (``name`` says which one in the message)."""
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 < temperature < math.inf:
        raise InvalidParameterError(f"{name}: expected a finite number > 0, got {temperature!r}")
    return float(temperature)


def temperature_ratios(sizes: Sequence[int] | np.ndarray, temperature: float) -> np.ndarray:
    """``(n_i / N) ** (1 / T)``: proportional to ``n_i ** (1 / T)`` (T = 1: to the sizes; large T: uniform).

    One power per corpus with the C library's ``pow`` (numpy's vectorized power may
    differ in the last bit, and the ratios decide which rows are drawn).
    """
    arr = as_sizes(sizes)
    total = int(arr.sum())
    if total == 0:
        raise InvalidParameterError(f"sizes: expected some rows to sample from, got {arr.tolist()}")
    exponent = 1.0 / check_temperature(temperature)
    return np.array([(n / total) ** exponent for n in arr.tolist()], dtype=np.float64)


def default_epoch_size(sizes: Sequence[int] | np.ndarray, ratios: np.ndarray) -> int:
    """fairseq's default virtual size: ``sum_i r_i / r_max * n_max`` (the largest corpus drawn once), capped.

    ``r_max`` is the ratio of the largest corpus (the first, if several are largest);
    the cap is ``MAX_SCALE_UP`` times the total of all sizes. The sum runs left to right.
    """
    arr = as_sizes(sizes)
    largest = int(np.argmax(arr))
    if not ratios[largest] > 0:
        raise InvalidParameterError(
            f"epoch_size: the default scales to the largest corpus ({largest}), whose weight is 0; pass epoch_size"
        )
    scaled = ratios / ratios[largest] * arr[largest]
    size = float(np.cumsum(scaled)[-1])  # a running sum, as fairseq's sum() over the list
    cap = int(arr.sum()) * MAX_SCALE_UP
    return int(size if size < cap else cap)


def resample_rng(seed: int, epoch: int) -> np.random.RandomState:
    """The generator of epoch ``epoch``'s draw: ``RandomState([stream, seed % 2**32, epoch])``."""
    check_integer("epoch", epoch, 0, 2**32, high_name="2**32")
    return np.random.RandomState([RESAMPLE_STREAM, int(seed) % 2**32, int(epoch)])


def draw_counts(ratios: np.ndarray, epoch_size: int, rng: np.random.RandomState) -> np.ndarray:
    """Rows per corpus (int64, summing to ``epoch_size``): ``int(V * p_i)``, the remainder drawn with ``p``."""
    p = ratios / ratios.sum()
    counts = (epoch_size * p).astype(np.int64)
    remainder = epoch_size - int(counts.sum())
    if remainder > 0:
        counts += np.bincount(rng.choice(p.shape[0], size=remainder, p=p), minlength=p.shape[0])
    return counts


def draw_rows(sizes: np.ndarray, counts: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """Each corpus's drawn rows (local row numbers, int64), corpus after corpus.

    ``counts[i]`` rows of corpus ``i`` uniformly: without replacement when it has that
    many rows, else with replacement (one draw per corpus, in order).
    """
    parts = [rng.choice(int(n), int(c), replace=bool(c > n)) for n, c in zip(sizes, counts, strict=True)]
    return np.concatenate(parts).astype(np.int64, copy=False)


def resample(
    sizes: Sequence[int] | np.ndarray, ratios: np.ndarray, epoch_size: int | None, seed: int, epoch: int
) -> tuple[np.ndarray, np.ndarray]:
    """(global rows, counts) of epoch ``epoch``: corpus ``i``'s drawn rows offset by the sizes before it.

    Global row ``offsets[i] + r`` is row ``r`` of corpus ``i`` (corpora concatenated in order).
    """
    arr = as_sizes(sizes)
    size = default_epoch_size(arr, ratios) if epoch_size is None else check_integer("epoch_size", epoch_size, 1)
    rng = resample_rng(seed, epoch)
    counts = draw_counts(ratios, size, rng)
    rows = draw_rows(arr, counts, rng)
    rows += np.repeat(offsets_of(arr)[:-1], counts)
    return rows, counts


def resample_counts(
    sizes: Sequence[int] | np.ndarray, ratios: np.ndarray, epoch_size: int | None, seed: int, epoch: int
) -> np.ndarray:
    """The counts of :func:`resample` alone (the remainder draw comes first, so no row is drawn)."""
    arr = as_sizes(sizes)
    size = default_epoch_size(arr, ratios) if epoch_size is None else check_integer("epoch_size", epoch_size, 1)
    return draw_counts(ratios, size, resample_rng(seed, epoch))


def offsets_of(sizes: np.ndarray) -> np.ndarray:
    """``[0, n_0, n_0 + n_1, ...]``: where each corpus starts among the concatenated rows (int64)."""
    out = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def corpus_of(offsets: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The corpus of each global row: ``k`` with ``offsets[k] <= id < offsets[k + 1]`` (int64)."""
    return np.searchsorted(offsets, ids, side="right") - 1
