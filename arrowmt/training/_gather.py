"""Vectorized padding of rows gathered from a flat token array.

Every function here works on ``words`` (a flat integer array, typically the
int32 view of a memory-mapped split file) plus the start position and length of
each wanted row. No Python loop runs per row or per token: each result comes
from one numpy gather (one contiguous window per row).

The spans are not checked here: they come from the reader, which checked them
against the file (``arrowmt.reading._spans.as_spans`` checks spans of other origin).
"""

from __future__ import annotations

import numpy as np


def padded_width(lengths: np.ndarray, multiple: int = 1) -> int:
    """Width of a padded batch: the longest row rounded up to ``multiple`` (>= 1, fairseq's ``pad_to_multiple``)."""
    longest = int(np.maximum.reduce(lengths, axis=None)) if lengths.size else 0
    return -(-longest // multiple) * multiple


def valid_mask(lengths: np.ndarray, width: int, left_pad: bool) -> np.ndarray:
    """Boolean ``(B, width)`` mask of the cells holding tokens when rows are padded to ``width``."""
    cols = np.arange(width, dtype=np.int64)[None, :]
    lengths = np.asarray(lengths, dtype=np.int64)[:, None]
    if left_pad:
        return cols >= width - lengths
    return cols < lengths


def gather_padded(
    words: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, pad: int, left_pad: bool
) -> np.ndarray:
    """The rows as an int64 ``(B, width)`` matrix filled with ``pad`` (rows at the right end when ``left_pad``).

    The spans must be rows of ``words`` no longer than ``width`` (unchecked).
    """
    cells = _gather_cells(words, starts, lengths, width, left_pad, 0)
    return _fill(cells, _pad_cells(lengths, width, left_pad), pad)


def gather_padded_shifted(
    words: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, pad: int, first: int, left_pad: bool
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gather_padded` and the same rows as ``[first] + row[:-1]`` in the same cells, from one gather.

    An empty row stays all ``pad`` in both (spans unchecked).
    """
    cells = _gather_cells(words, starts, lengths, width, left_pad, 1)
    if left_pad:
        cells[np.arange(lengths.shape[0]), width - lengths] = first
    else:
        cells[:, 0] = first
    pads = _pad_cells(lengths, width, left_pad)
    return _fill(cells[:, 1:], pads, pad), _fill(cells[:, :-1], pads, pad)


def _fill(cells: np.ndarray, pads: np.ndarray, pad: int) -> np.ndarray:
    """``cells`` as a fresh C-ordered int64 matrix with ``pad`` where ``pads`` is set."""
    out = cells.astype(np.int64, order="C")
    np.putmask(out, pads, pad)
    return out


def _gather_cells(
    words: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, left_pad: bool, before: int
) -> np.ndarray:
    """The ``(B, before + width)`` words around each row as padded: cell ``(i, before + j)`` is cell ``(i, j)``.

    Pad cells hold whatever lies there (mask them); the ``before`` extra cells
    hold the words just before each padded row. Usually each row is one
    contiguous window copy; windows reaching outside ``words`` fall back to a
    clipped per-cell gather.
    """
    span = width + before
    first = np.asarray(starts + lengths - span if left_pad else starts - before, dtype=np.int64)
    if words.shape[0] == 0:
        return np.zeros((first.shape[0], span), dtype=words.dtype)
    windows = _windows(words, first, span)
    if windows is None:
        return words.take(first[:, None] + np.arange(span, dtype=np.int64), mode="clip")
    _prefetch(words, first, span)
    return windows[first]


def _windows(words: np.ndarray, first: np.ndarray, span: int) -> np.ndarray | None:
    """``words`` as overlapping rows ``words[p : p + span]`` (no copy), or None if some ``first`` has no such row."""
    size = words.shape[0]
    if size < span or not words.flags.c_contiguous:
        return None
    # Negative starts wrap to huge unsigned values, so one max checks both ends.
    if first.size and np.maximum.reduce(first.view(np.uint64)) > size - span:
        return None
    step = words.itemsize
    return np.ndarray((size - span + 1, span), dtype=words.dtype, buffer=words, strides=(step, step))


def _prefetch(words: np.ndarray, first: np.ndarray, span: int) -> None:
    """Read one word per cache line of each window, all in one gather.

    Rows of a memory-mapped corpus are far apart, so nearly every line misses
    the cache. The row-by-row window copy waits for those misses one row at a
    time; a flat gather of independent loads lets them overlap.
    """
    step = max(1, 64 // words.itemsize)
    probes = np.arange(0, span + step - 1, step, dtype=np.int64)
    probes[-1] = span - 1
    words.take(np.add.outer(first, probes), mode="clip")


_TABLE_WIDTH = 1024
_PAD_TABLES: dict[bool, np.ndarray] = {}


def _pad_cells(lengths: np.ndarray, width: int, left_pad: bool) -> np.ndarray:
    """``~valid_mask(lengths, width, left_pad)``, by row lookups in a cached staircase table up to 1024 wide."""
    if width > _TABLE_WIDTH:
        return ~valid_mask(lengths, width, left_pad)
    table = _PAD_TABLES.get(left_pad)
    if table is None or table.shape[1] < width:
        size = 1 << max(width - 1, 63).bit_length()
        table = ~valid_mask(np.arange(size + 1), size, left_pad)
        table.flags.writeable = False
        _PAD_TABLES[left_pad] = table
    size = table.shape[1]
    # Row k is a row of length k padded to ``size``; a left-padded row keeps its last ``width`` cells.
    return table[lengths, size - width :] if left_pad else table[lengths, :width]
