"""Packed batches: whole sentences packed into fixed-capacity token buffers, so every batch has one shape.

A packed batch holds, in the plan's order, the next samples while their source tokens together stay within the
source buffer's capacity, their target tokens within the target buffer's, and their count within the batch's
sentence limit (the planner gives the samples in their shuffled order: sentences of every length side by side
leave the least room empty). The capacity is ``max_tokens`` for each side: a fairseq batch of padded size
``max_tokens`` holds at most that many tokens on either side, so a packed batch's buffers hold the tokens of the
fullest fairseq batch, with no padding inside them (only after the last sentence). One Python step per batch,
each a binary search of the running token totals.
"""

from __future__ import annotations

import numpy as np

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing._bucketing import CHUNK, _as_lengths, check_limit


def pack_by_size(
    indices: np.ndarray,
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray | None,
    capacity: int,
    max_sentences: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Packed batches over ``indices`` in order, as (flat indices, batch offsets) like ``batch_by_size``.

    ``src_sizes[k]`` and ``tgt_sizes[k]`` are the source and target tokens of sample ``indices[k]`` (no target:
    source only). A batch takes the next samples while their source tokens sum to at most ``capacity``, their
    target tokens too, and they number at most ``max_sentences``. Every sample lands in exactly one batch; a sample
    over ``capacity`` on either side raises InvalidParameterError naming it (the planner drops or refuses those first).
    """
    check_limit("capacity", capacity)
    check_limit("max_sentences", max_sentences)
    idx = _as_lengths("indices", indices)
    sides = [_as_lengths("src_sizes", src_sizes)] + ([] if tgt_sizes is None else [_as_lengths("tgt_sizes", tgt_sizes)])
    for name, sizes in zip(("src_sizes", "tgt_sizes"), sides, strict=False):
        if sizes.shape != idx.shape:
            raise InvalidParameterError(f"{name}: expected {idx.shape[0]} sizes (one per index), got {sizes.shape[0]}")
        if sizes.size and not 0 <= int(sizes.min()) <= int(sizes.max()) <= capacity:
            k = int(np.flatnonzero((sizes < 0) | (sizes > capacity))[0])
            raise InvalidParameterError(f"{name}[{k}]: expected 0 <= size <= capacity={capacity}, got {int(sizes[k])}")
    return idx.copy(), pack_ends(sides, capacity, max_sentences)


def pack_ends(sides: list[np.ndarray], capacity: int, max_sentences: int | None, window: int = CHUNK) -> np.ndarray:
    """Batch offsets (int64, from 0 to the samples' count) of the greedy packing of samples of token counts
    ``sides`` (one array per side, each within ``capacity``). The running totals are kept for ``window`` samples
    at a time (memory bounded whatever the corpus), widened when a batch of empty samples runs past them."""
    n = sides[0].shape[0]
    ends, start, low, high = [0], 0, 0, 0
    running: list[np.ndarray] = []
    while start < n:
        if start >= high or (high < n and high - start < window // 2):
            low, high = start, min(n, start + window)
            running = [np.r_[0, np.cumsum(side[low:high], dtype=np.int64)] for side in sides]
        limit = high if max_sentences is None else min(high, start + max_sentences)
        end = limit
        for total in running:
            fits = int(np.searchsorted(total, total[start - low] + capacity, side="right")) - 1
            end = min(end, low + fits)
        capped = max_sentences is not None and start + max_sentences <= high
        if end == high < n and not capped:
            window, high = 2 * window, start  # every sample up to the window's end fits: look further
            continue
        ends.append(end)
        start = end
    return np.array(ends, dtype=np.int64)
