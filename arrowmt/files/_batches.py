"""A batch plan's two arrays checked: batch ``b`` is ``indices[offsets[b]:offsets[b + 1]]`` (plan files, and the plan
a copy in plan order is stored by), every message naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.files._chunks import CheckedArray


def check_batch_offsets(path: Path, offsets: np.ndarray, total: int) -> None:
    """FormatError naming ``path`` unless the batch ``offsets`` run from 0 to ``total`` without decreasing."""
    falls = np.flatnonzero(np.diff(offsets) < 0)
    if int(offsets[0]) != 0 or int(offsets[-1]) != total or falls.size:
        where = f", batch {int(falls[0])} ends before it starts" if falls.size else ""
        raise FormatError(
            f"{path}: plan offsets: expected non-decreasing from 0 to {total}, "
            f"found {int(offsets[0])}..{int(offsets[-1])}{where} (corrupt)"
        )


def checked_batch(
    path: Path, b: int, offsets: CheckedArray, indices: CheckedArray, total: int, rows: int
) -> np.ndarray:
    """Batch ``b`` of a plan stored as ``offsets`` into its first ``total`` ``indices`` (a read-only view of the
    map), once the chunks it reads are checked and its bounds and indices are in range (FormatError naming
    ``path`` otherwise; IndexError for a ``b`` outside the plan)."""
    n = len(offsets) - 1
    if not 0 <= b < n:
        raise IndexError(f"{path}: plan batch {b}: expected 0..{n - 1}")
    start, end = offsets.slice(b, b + 2).tolist()
    if not 0 <= start <= end <= total:
        raise FormatError(
            f"{path}: plan batch {b}: expected offsets 0 <= start <= end <= {total}, found {start}..{end} (corrupt)"
        )
    batch = indices.slice(start, end)
    # One reduction checks both ends: viewed unsigned, a negative index is larger than any row count.
    if start < end and int(np.maximum.reduce(batch.view(f"u{batch.itemsize}"))) >= rows:
        raise FormatError(
            f"{path}: plan batch {b} indices: expected 0..{rows - 1}, "
            f"found {int(batch.min())}..{int(batch.max())} (corrupt)"
        )
    return batch


def check_contents(path: Path, indices: np.ndarray, offsets: np.ndarray, rows: int) -> None:
    """Offsets run from 0 to the index count without decreasing; indices lie in [0, rows)."""
    check_batch_offsets(path, offsets, indices.shape[0])
    low, high = (int(indices.min()), int(indices.max())) if indices.size else (0, -1)
    if low < 0 or high >= rows:
        raise FormatError(f"{path}: plan indices: expected 0..{rows - 1}, found {low}..{high} (corrupt)")
