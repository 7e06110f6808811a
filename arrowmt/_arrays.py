"""Array helpers the read path shares (numpy only)."""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D integer array, increasing: ``np.unique`` without its first call's import of
    ``numpy.ma`` (about 1 MiB of private memory in every reading process)."""
    ordered = np.sort(values)
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
