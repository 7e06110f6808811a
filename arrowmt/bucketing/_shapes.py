"""Shape-bucketed padded batches: at most ``n`` tensor shapes an epoch, for models that take padded ``[B, L]`` batches.

A row's size is fairseq's, the larger of its source and target lengths. The sizes are cut into ``n`` ranges; the
rows of a range form a bucket, whose shape is ``(B, Ls, Lt)``: its longest source, its longest target, and as many
rows as the token budget allows at that width (``B * max(Ls, Lt) <= max_tokens``, at most ``max_sentences``, rounded
down to ``multiple``). A bucket's rows, in the plan's (shuffled) order, are cut into batches of ``B`` rows; its last
batch is padded to ``B`` rows by the collater. The cuts minimise the padding, rows and lengths together, by dynamic
programming over the distinct sizes (one numpy step per distinct size and bucket).
"""

from __future__ import annotations

import numpy as np

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing._bucketing import CHUNK, _as_lengths, check_limit

Shape = tuple[int, int, int]  # (rows, source length, target length)


def choose_shapes(src: np.ndarray, tgt: np.ndarray, n: int, max_tokens: int, max_sentences: int | None = None,
                  multiple: int = 1) -> tuple[np.ndarray, list[Shape]]:  # fmt: skip
    """(upper size of each bucket, each bucket's shape): at most ``n`` buckets over the rows of lengths ``src`` and
    ``tgt`` whose padded tokens (rows padded to the bucket's lengths, last batches to its rows) are fewest. The rows
    are read :data:`CHUNK` at a time into tables by size (memory bounded by ``max_tokens``, not the corpus)."""
    check_limit("batch_shapes", n)
    check_limit("max_tokens", max_tokens)
    count, top_src, top_tgt = _size_tables(_as_lengths("src", src), _as_lengths("tgt", tgt), max_tokens)
    values = np.flatnonzero(count)
    if not values.size:
        return values, []
    count, top_src, top_tgt = count[values], top_src[values], top_tgt[values]
    cuts = _best_cuts(count, top_src, top_tgt, min(n, values.shape[0]), max_tokens, max_sentences, multiple)
    shapes, first = [], 0
    for last in cuts:
        ls, lt = int(top_src[first : last + 1].max()), int(top_tgt[first : last + 1].max())
        shapes.append((int(rows_at(np.array([max(ls, lt)]), max_tokens, max_sentences, multiple)[0]), ls, lt))
        first = last + 1
    return values[cuts], shapes


def _size_tables(src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> tuple[np.ndarray, ...]:
    """Per size ``0..max_tokens`` (the larger of a row's lengths): its rows, their longest source and target."""
    count = np.zeros(max_tokens + 1, dtype=np.int64)
    top_src, top_tgt = np.zeros_like(count), np.zeros_like(count)
    for first in range(0, src.shape[0], CHUNK):
        s, t = src[first : first + CHUNK], tgt[first : first + CHUNK]
        size = np.maximum(s, t)
        if int(size.max()) > max_tokens:
            raise InvalidParameterError(f"max_tokens: expected every row within max_tokens={max_tokens}, got a row "
                                        f"of {int(size.max())}")  # fmt: skip
        count += np.bincount(size, minlength=max_tokens + 1)
        np.maximum.at(top_src, size, s)
        np.maximum.at(top_tgt, size, t)
    return count, top_src, top_tgt


def rows_at(width: np.ndarray, max_tokens: int, max_sentences: int | None, multiple: int) -> np.ndarray:
    """Rows of a batch of each ``width`` (fairseq's padded size ``rows * width <= max_tokens``), within
    ``max_sentences`` and rounded down to ``multiple`` when that leaves one at least."""
    rows = np.maximum(max_tokens // np.maximum(width, 1), 1)
    if max_sentences is not None:
        rows = np.minimum(rows, max_sentences)
    return np.where(rows >= multiple, rows - rows % multiple, rows)


def _best_cuts(count: np.ndarray, top_src: np.ndarray, top_tgt: np.ndarray, n: int, max_tokens: int,
               max_sentences: int | None, multiple: int) -> list[int]:  # fmt: skip
    """The last distinct size of each bucket, minimising the buckets' padded tokens (the rows of each distinct
    size: ``count``, longest source and target ``top_src``, ``top_tgt``)."""
    m = count.shape[0]
    cumulative = np.r_[0, np.cumsum(count)]
    best = np.full((n + 1, m + 1), np.inf)
    best[0, 0] = 0.0
    choice = np.zeros((n + 1, m + 1), dtype=np.int64)
    for j in range(1, m + 1):  # a bucket (i, j]: distinct sizes i .. j-1
        ls = np.maximum.accumulate(top_src[:j][::-1])[::-1]  # longest source of sizes i .. j-1, for each i
        lt = np.maximum.accumulate(top_tgt[:j][::-1])[::-1]
        rows = rows_at(np.maximum(ls, lt), max_tokens, max_sentences, multiple)
        cells = cumulative[j] - cumulative[:j]
        cost = -(-cells // rows) * rows * (ls + lt)  # padded tokens, real ones included (the same for any cut)
        for k in range(1, n + 1):
            total = best[k - 1, :j] + cost
            i = int(np.argmin(total))
            best[k, j], choice[k, j] = total[i], i
    k = int(np.argmin(best[1:, m])) + 1
    cuts, j = [], m
    while j > 0:
        cuts.append(j - 1)
        j = int(choice[k, j])
        k -= 1
    return cuts[::-1]


def shape_batches(indices: np.ndarray, src: np.ndarray, tgt: np.ndarray, uppers: np.ndarray,
                  shapes: list[Shape]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(flat indices, batch offsets): the rows ``indices`` (lengths ``src[k]``, ``tgt[k]`` of ``indices[k]``) in
    their buckets (the first whose upper size holds the row), each bucket in the given order cut into batches of its
    shape's rows, bucket after bucket."""
    size = np.maximum(_as_lengths("src", src), _as_lengths("tgt", tgt))
    bucket = np.searchsorted(uppers, size)
    if size.size and int(bucket.max()) >= len(shapes):
        raise InvalidParameterError(
            f"uppers: expected every row within the last bucket, got a row of {int(size.max())}"
        )
    order = np.argsort(bucket, kind="stable")
    counts = np.bincount(bucket, minlength=len(shapes))
    offsets = [np.zeros(1, dtype=np.int64)]
    start = 0
    for (rows, _, _), count in zip(shapes, counts.tolist(), strict=True):
        ends = np.minimum(np.arange(rows, count + rows, rows, dtype=np.int64), count)[: -(-count // rows)]
        offsets.append(start + ends)
        start += count
    return np.asarray(indices)[order].copy(), np.concatenate(offsets)
