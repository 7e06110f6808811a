"""The row order of a plan: the rows of its batches one batch after another, for a copy stored that way."""

from __future__ import annotations

import numpy as np

from arrowmt._errors import InvalidParameterError


def plan_order(indices: np.ndarray, rows: int) -> np.ndarray:
    """Every row of ``range(rows)`` once: the plan's ``indices`` (its batches back to back) first, then the rows
    it leaves out (too long), in increasing order (int64)."""
    indices = np.asarray(indices, dtype=np.int64)
    planned = np.zeros(rows, dtype=bool)
    planned[indices] = True
    if np.count_nonzero(planned) != indices.size:
        raise InvalidParameterError(f"indices: expected each of {rows} rows at most once, got repeats")
    return np.concatenate([indices, np.flatnonzero(~planned)])
