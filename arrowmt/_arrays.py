"""Array helpers the read path shares (numpy only)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def row_blocks(rows: int, size: int) -> Iterator[np.ndarray]:
    """The row numbers ``0 .. rows - 1`` as consecutive int64 arrays of at most ``size`` (work on a split a block at
    a time, its temporaries bounded by the block)."""
    for first in range(0, rows, size):
        yield np.arange(first, min(first + size, rows), dtype=np.int64)


def groups_by(ids: np.ndarray, size: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(k, positions, ids[positions] - k * size)`` for each ``k = id // size`` the int64 ``ids`` name, increasing
    (index ``e * rows + r``: row ``r`` of epoch ``e``). One group, found without a search, when every id has the
    same ``k`` (a planned batch: one epoch's rows); none for no ids."""
    group = ids // size
    if group.shape[0] == 0:
        return []
    first = int(group[0])
    if first == group.min() == group.max():
        return [(first, np.arange(ids.shape[0]), ids - first * size)]
    return [(k, where, ids[where] - k * size) for k in sorted_unique(group).tolist()
            for where in [np.flatnonzero(group == k)]]  # fmt: skip


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


def grown(
    array: np.ndarray, height: int | None, fill: int, mark: int | None = None, left_pad: bool = False
) -> np.ndarray:
    """``array`` with rows of ``fill`` added up to ``height`` rows (None: as it is), each holding ``mark`` (None:
    none) where a row's first token goes (its last column when ``left_pad``): the rows a collater adds to pad a
    batch to one of a sampler's ``batch_shapes()``."""
    extra = 0 if height is None else height - array.shape[0]
    if extra <= 0:
        return array
    more = np.full((extra, *array.shape[1:]), fill, dtype=array.dtype)
    if mark is not None:
        more[:, -1 if left_pad else 0] = mark
    return np.concatenate([array, more])
