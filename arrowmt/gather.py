"""Vectorized row gathering from a flat token array: concatenated rows and padded matrices.

Every function here works on ``words`` (a flat integer array, typically the
int32 view of a memory-mapped split file) plus the start position and length of
each wanted row. No Python loop runs per row or per token: each result comes
from one numpy fancy-indexing step.
"""

from __future__ import annotations

import numpy as np

from arrowmt.errors import InvalidParameterError


def _as_spans(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``starts``/``lengths`` as int64 1-D arrays, checked to be rows inside ``words``."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if words.ndim != 1:
        raise InvalidParameterError(f"words: expected a 1-D array, got shape {words.shape}")
    if starts.ndim != 1 or starts.shape != lengths.shape:
        raise InvalidParameterError(
            f"starts, lengths: expected two 1-D arrays of the same length, "
            f"got shapes {starts.shape} and {lengths.shape}"
        )
    if starts.size:
        _check_bounds(words.shape[0], starts, lengths)
    return starts, lengths


def _check_bounds(size: int, starts: np.ndarray, lengths: np.ndarray) -> None:
    if lengths.min() < 0:
        k = int(np.argmin(lengths))
        raise InvalidParameterError(f"lengths[{k}]: expected >= 0, got {int(lengths[k])}")
    if starts.min() < 0:
        k = int(np.argmin(starts))
        raise InvalidParameterError(f"starts[{k}]: expected >= 0, got {int(starts[k])}")
    ends = starts + lengths
    if ends.max() > size:
        k = int(np.argmax(ends))
        raise InvalidParameterError(f"starts[{k}] + lengths[{k}]: expected <= len(words) = {size}, got {int(ends[k])}")


def flat_positions(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Positions of every token of every row, rows concatenated in order (int64)."""
    first = np.zeros(lengths.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1], out=first[1:])
    return np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def take_flat(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The rows ``words[starts[i] : starts[i] + lengths[i]]`` concatenated, in the dtype of ``words``."""
    starts, lengths = _as_spans(words, starts, lengths)
    return words[flat_positions(starts, lengths)]


def padded_width(lengths: np.ndarray, width: int | None = None, multiple: int = 1) -> int:
    """Width of a padded batch: ``width`` if given (checked), else the longest row rounded up to ``multiple``.

    ``multiple`` rounds like fairseq's ``pad_to_multiple``.
    """
    if multiple < 1:
        raise InvalidParameterError(f"multiple: expected >= 1, got {multiple}")
    longest = int(lengths.max()) if lengths.size else 0
    if width is None:
        return -(-longest // multiple) * multiple
    if width < longest:
        raise InvalidParameterError(f"width: expected >= the longest row ({longest}), got {width}")
    return int(width)


def valid_mask(lengths: np.ndarray, width: int, left_pad: bool) -> np.ndarray:
    """Boolean ``(B, width)`` mask of the cells holding tokens when rows are padded to ``width``."""
    cols = np.arange(width, dtype=np.int64)[None, :]
    lengths = np.asarray(lengths, dtype=np.int64)[:, None]
    if left_pad:
        return cols >= width - lengths
    return cols < lengths


def take_padded(
    words: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    pad: int,
    left_pad: bool,
    width: int | None = None,
) -> np.ndarray:
    """The rows as an int64 ``(B, W)`` matrix filled with ``pad``; W is the longest row unless given.

    Rows sit at the right end of each line when ``left_pad`` (fairseq's source
    side), at the left end otherwise.
    """
    starts, lengths = _as_spans(words, starts, lengths)
    w = padded_width(lengths, width)
    out = np.full((lengths.shape[0], w), pad, dtype=np.int64)
    # Within each line the token cells are contiguous and in order, so the
    # masked cells in row-major order are exactly the concatenated rows.
    out[valid_mask(lengths, w, left_pad)] = words[flat_positions(starts, lengths)]
    return out


def shift_right(padded: np.ndarray, lengths: np.ndarray, first: int, pad: int, left_pad: bool) -> np.ndarray:
    """Each row of a padded matrix as ``[first] + row[:-1]``, in the same cells (fairseq's eos move).

    ``lengths`` are the row lengths ``padded`` was built with. An empty row
    stays all ``pad``.
    """
    if padded.ndim != 2 or padded.shape[0] != np.shape(lengths)[0]:
        raise InvalidParameterError(
            f"padded: expected shape (len(lengths), W) = ({np.shape(lengths)[0]}, W), got {padded.shape}"
        )
    width = padded.shape[1]
    lengths = np.asarray(lengths, dtype=np.int64)
    shifted = np.full_like(padded, first)
    shifted[:, 1:] = padded[:, :-1]
    mask = valid_mask(lengths, width, left_pad)
    rows = np.flatnonzero(lengths > 0)
    head = width - lengths[rows] if left_pad else np.zeros(rows.shape[0], dtype=np.int64)
    shifted[rows, head] = first
    return np.where(mask, shifted, padded.dtype.type(pad))
