"""Pure block arithmetic: fairseq's token blocks over a monolingual corpus, and their order.

Every function takes and returns numpy arrays and touches no file, so each is
tested on exact values (and against fairseq's own ``TokenBlockDataset``). Rows
are concatenated into one flat token sequence; a block is a half-open range
``[start, end)`` of it. The block boundaries are those of fairseq 0.12's
``TokenBlockDataset`` (``slice_indices``) for its four break modes:

* ``none``: ``[i * B, min((i + 1) * B, total))``, cutting through rows;
* ``complete``: greedy runs of whole rows of at most B tokens (a longer row is a
  block of its own);
* ``complete_doc``: the same inside each document; a row of exactly
  ``document_sep_len`` tokens separates documents and belongs to no block,
  and blocks of fewer than 2 tokens are dropped;
* ``eos``: one block per row (B is ignored).

A block's next-token training pair (``include_targets``) depends on where it
starts inside its row (:func:`offsets_in_rows`): ``source`` is the block shifted
right by one token, whose first token is ``eos`` when the block starts a row
and the token before the block otherwise; ``past_target`` is shifted by two,
``[pad, eos]`` or ``[eos, previous]`` at a row start.
"""

from __future__ import annotations

import numpy as np

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing import check_limit, filter_by_size, shuffled_range, sort_key, stable_order

BREAK_MODES = ("none", "complete", "complete_doc", "eos")
HEADS = 2  # tokens before a block that its shifted views can need (source: 1, past target: 2)
WINDOW = 1 << 18  # rows per step of the greedy packing (bounds its temporaries)


def check_break_mode(mode: str | None) -> str:
    """fairseq's ``sample_break_mode`` (None means ``none``), validated."""
    mode = "none" if mode is None else str(mode)  # fairseq's options may be string enums
    if mode not in BREAK_MODES:
        raise InvalidParameterError(f"break_mode: expected one of {list(BREAK_MODES)}, got {mode!r}")
    return mode


def _as_sizes(sizes: np.ndarray) -> np.ndarray:
    """``sizes`` checked to be 1-D non-negative integers, in their own dtype (an empty array as int64)."""
    arr = np.asarray(sizes)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidParameterError(f"sizes: expected a 1-D integer array, got {arr.dtype} shape {arr.shape}")
    if arr.size == 0 or arr.dtype == np.uint64:
        arr = arr.astype(np.int64)
    if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
        k = int(np.argmin(arr))
        raise InvalidParameterError(f"sizes[{k}]: expected a row length >= 0, got {int(arr[k])}")
    return arr


def row_starts(sizes: np.ndarray) -> np.ndarray:
    """Flat position of every row and the total: ``[0, s0, s0 + s1, ..., total]`` (int64, n + 1)."""
    out = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def none_bounds(total: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Break mode ``none``: ``ceil(total / block_size)`` blocks of ``block_size`` tokens, the last shorter."""
    check_limit("block_size", block_size)
    starts = np.arange(0, total, block_size, dtype=np.int64)
    return starts, np.minimum(starts + block_size, total)


def packed_bounds(
    sizes: np.ndarray, block_size: int, document_sep_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Break modes ``complete`` (``document_sep_len`` None) and ``complete_doc``: (starts, ends).

    A block takes whole rows while its tokens stay within ``block_size`` and
    always at least one row. With ``document_sep_len``, a row of exactly that
    many tokens ends the document (no block crosses it, it belongs to no block)
    and blocks of fewer than 2 tokens are dropped. Rows without tokens change no
    block (fairseq cannot read them at all), so they are left out first. One
    numpy ``searchsorted`` per window of rows finds every row's greedy block end;
    only the chain of block starts is followed one block at a time.
    """
    check_limit("block_size", block_size)
    arr = _as_sizes(sizes)
    starts_all = row_starts(arr)
    separator = None if document_sep_len is None else arr == _check_sep_len(document_sep_len)
    content = arr > 0 if separator is None else (arr > 0) & ~separator
    if bool(content.all()):
        first, last = starts_all[:-1], starts_all[1:]
        doc = None if separator is None else np.zeros(arr.shape[0], dtype=np.int64)
    else:
        rows = np.flatnonzero(content)
        first, last = starts_all[rows], starts_all[rows + 1]
        doc = None if separator is None else np.cumsum(separator)[rows]
    del starts_all, content, separator
    begin, end = _greedy_chain(first, last, doc, block_size)
    if document_sep_len is not None:
        keep = end - begin > 1
        begin, end = begin[keep], end[keep]
    return begin, end


def _check_sep_len(document_sep_len: int) -> int:
    if isinstance(document_sep_len, bool) or int(document_sep_len) != document_sep_len or document_sep_len < 0:
        raise InvalidParameterError(f"document_sep_len: expected an integer >= 0, got {document_sep_len!r}")
    return int(document_sep_len)


def _greedy_chain(
    first: np.ndarray, last: np.ndarray, doc: np.ndarray | None, block_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Blocks of consecutive rows (flat ``first``/``last`` positions, optional document ids), greedily packed."""
    m = first.shape[0]
    begins: list[int] = []
    ends: list[int] = []
    k = 0
    while k < m:
        window, stop = k, min(m, k + WINDOW)
        nxt = _next_starts(first, last, doc, block_size, window, stop)
        while k < stop:
            j = int(nxt[k - window])
            begins.append(int(first[k]))
            ends.append(int(last[j - 1]))
            k = j
    return np.array(begins, dtype=np.int64), np.array(ends, dtype=np.int64)


def _next_starts(
    first: np.ndarray, last: np.ndarray, doc: np.ndarray | None, block_size: int, a: int, b: int
) -> np.ndarray:
    """For rows ``a..b-1``: the row after the block that would start there (one past its last row)."""
    nxt = np.searchsorted(last, first[a:b] + block_size, side="right")
    np.maximum(nxt, np.arange(a + 1, b + 1, dtype=nxt.dtype), out=nxt)
    if doc is not None:
        np.minimum(nxt, np.searchsorted(doc, doc[a:b], side="right"), out=nxt)
    return nxt


def eos_bounds(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Break mode ``eos``: one block per row."""
    starts = row_starts(_as_sizes(sizes))
    return starts[:-1], starts[1:]


def block_bounds(
    sizes: np.ndarray, block_size: int | None, break_mode: str | None, document_sep_len: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """fairseq ``TokenBlockDataset``'s ``slice_indices`` as (starts, ends), int64 flat token positions."""
    mode = check_break_mode(break_mode)
    if mode == "eos":
        return eos_bounds(sizes)
    if block_size is None:
        raise InvalidParameterError(f"block_size: expected an integer >= 1 for break mode {mode!r}, got None")
    if mode == "none":
        return none_bounds(int(_as_sizes(sizes).sum()), block_size)
    return packed_bounds(sizes, block_size, document_sep_len if mode == "complete_doc" else None)


def offsets_in_rows(row_start: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """How far each flat position lies inside its row (0 at a row start; ``row_start`` from :func:`row_starts`)."""
    positions = np.asarray(positions, dtype=np.int64)
    row = np.searchsorted(row_start, positions, side="right") - 1
    return positions - row_start[np.maximum(row, 0)]


def shifted_heads(offsets: np.ndarray, before: np.ndarray, eos: int, pad: int, shift: int) -> np.ndarray:
    """The first ``shift`` (1 or 2) tokens of a block's source (1) or past target (2), per block.

    ``before[:, k]`` is the token ``shift - k`` positions before the block start,
    read only where the block's row offset is at least that far; the tokens
    before the row start are ``eos`` then, further back, ``pad``.
    """
    offsets = np.asarray(offsets, dtype=np.int64)[:, None]
    back = np.arange(shift, 0, -1, dtype=np.int64)[None, :]  # how far before the start each head cell is
    fill = np.where(back - offsets == 1, eos, pad)
    return np.where(offsets >= back, before, fill)


def lm_order(sizes: np.ndarray, seed: int | None) -> np.ndarray:
    """fairseq ``MonolingualDataset.ordered_indices`` under ``numpy_seed(seed)``.

    ``np.lexsort([permutation, sizes])``: by size, ties in the order of a
    seeded permutation's values (``arange`` when ``seed`` is None). The inverse
    permutation lists the indices by that value, so one stable sort by size
    gives the same order, int32 below 2**31 blocks.
    """
    arr = _as_sizes(sizes)
    perm = shuffled_range(arr.shape[0], seed)
    by_value = np.empty_like(perm)
    by_value[perm] = np.arange(perm.shape[0], dtype=perm.dtype)
    del perm
    return stable_order(by_value, sort_key(arr), in_place=True)


def lm_filter(order: np.ndarray, sizes: np.ndarray, max_positions: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(kept, dropped) blocks of ``order``: fairseq drops a block longer than ``max_positions``."""
    return filter_by_size(order, sizes, None, max_positions, None)
