"""Pure bucketing arithmetic: fairseq's sentence order, size filter, token batches and epoch sharding.

Every function here takes and returns numpy arrays and touches no file, so each
is tested on exact values. The order, filter and batches are those of fairseq
0.12 (``LanguagePairDataset.ordered_indices``,
``data_utils.filter_paired_dataset_indices_by_size``, ``data_utils.batch_by_size``
and ``EpochBatchIterator``'s batch shuffle), checked against fairseq itself in
the tests. There is no Python loop per sentence: :func:`batch_by_size` loops once
per batch and scans each batch with numpy windows.
"""

from __future__ import annotations

import numpy as np

from arrowmt.errors import InputDataError, InvalidParameterError

MIN_WINDOW = 16


def check_limit(name: str, value: int | None) -> None:
    """A batching limit is None (no limit) or a positive integer."""
    if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
        raise InvalidParameterError(f"{name}: expected None or an integer >= 1, got {value!r}")


def check_seed(name: str, seed: int) -> None:
    """numpy's legacy seeding accepts 0 <= seed < 2**32."""
    if isinstance(seed, bool) or int(seed) != seed or not 0 <= seed < 2**32:
        raise InvalidParameterError(f"{name}: expected an integer in [0, 2**32), got {seed!r}")


def _as_lengths(name: str, lengths: np.ndarray) -> np.ndarray:
    """A 1-D int64 view/copy of ``lengths``; InvalidParameterError for other shapes."""
    arr = np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidParameterError(f"{name}: expected a 1-D integer array, got {arr.dtype} shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


# ---------------------------------------------------------------- order and filter


def ordered_indices(src_lengths: np.ndarray, tgt_lengths: np.ndarray | None, seed: int | None) -> np.ndarray:
    """fairseq ``LanguagePairDataset.ordered_indices`` under ``numpy_seed(seed)``.

    A permutation drawn with ``np.random.RandomState(seed)`` (``arange`` when
    ``seed`` is None), then a stable sort by target length, then a stable sort
    by source length. Returns int64 dataset indices.
    """
    src = _as_lengths("src_lengths", src_lengths)
    if seed is None:
        indices = np.arange(src.shape[0], dtype=np.int64)
    else:
        check_seed("seed", seed)
        indices = np.random.RandomState(seed).permutation(src.shape[0]).astype(np.int64)
    if tgt_lengths is not None:
        tgt = _as_lengths("tgt_lengths", tgt_lengths)
        if tgt.shape != src.shape:
            raise InvalidParameterError(
                f"tgt_lengths: expected {src.shape[0]} lengths (as many as src_lengths), got {tgt.shape[0]}"
            )
        indices = indices[np.argsort(tgt[indices], kind="mergesort")]
    return indices[np.argsort(src[indices], kind="mergesort")]


def filter_by_size(
    indices: np.ndarray,
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray | None,
    max_source_positions: int | None,
    max_target_positions: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``indices`` into (kept, dropped) by fairseq's positions rule, order preserved.

    Lengths are indexed by dataset index. A sample is dropped when its source is
    longer than ``max_source_positions`` or its target longer than
    ``max_target_positions``; a None limit checks nothing on that side.
    """
    idx = _as_lengths("indices", indices)
    too_long = np.zeros(idx.shape[0], dtype=bool)
    if max_source_positions is not None:
        too_long |= _as_lengths("src_lengths", src_lengths)[idx] > max_source_positions
    if tgt_lengths is not None and max_target_positions is not None:
        too_long |= _as_lengths("tgt_lengths", tgt_lengths)[idx] > max_target_positions
    return idx[~too_long], idx[too_long]


# ---------------------------------------------------------------- token batches


def emitted_length(batch_len: int, multiple: int) -> int:
    """How many entries of a full batch of ``batch_len`` fairseq emits; the rest carry over.

    ``max(multiple * (batch_len // multiple), batch_len % multiple)``.
    """
    return max(multiple * (batch_len // multiple), batch_len % multiple)


def window_is_full(
    batch_lens: np.ndarray, running_max: np.ndarray, max_tokens: int | None, max_sentences: int | None
) -> np.ndarray:
    """fairseq's ``_is_batch_full`` for a batch of ``batch_lens`` entries meeting one more sample.

    ``running_max`` is the longest of the batch and the new sample. Full when the
    batch is non-empty and either holds ``max_sentences`` entries or
    ``(batch_len + 1) * running_max > max_tokens``.
    """
    full = np.zeros(batch_lens.shape[0], dtype=bool)
    if max_tokens is not None:
        full |= (batch_lens + 1) * running_max > max_tokens
    if max_sentences is not None:
        full |= batch_lens == max_sentences
    return full & (batch_lens > 0)


def find_full_position(
    num_tokens: np.ndarray,
    start: int,
    first: int,
    max_tokens: int | None,
    max_sentences: int | None,
    window: int,
) -> int | None:
    """First position ``i >= first`` at which batch ``num_tokens[start:i]`` is full, or None.

    Scans windows of ``window`` positions (doubling each time) with a running
    maximum that starts at ``start``, so entries carried over count in the max.
    """
    n = num_tokens.shape[0]
    while first < n:
        stop = min(n, first + window)
        running_max = np.maximum.accumulate(num_tokens[start:stop])[first - start :]
        batch_lens = np.arange(first - start, stop - start, dtype=np.int64)
        hits = np.flatnonzero(window_is_full(batch_lens, running_max, max_tokens, max_sentences))
        if hits.size:
            return first + int(hits[0])
        first, window = stop, window * 2
    return None


def _check_sizes_fit(indices: np.ndarray, num_tokens: np.ndarray, max_tokens: int | None) -> None:
    """InputDataError naming the first sample longer than ``max_tokens``."""
    if max_tokens is None or num_tokens.size == 0:
        return
    over = np.flatnonzero(num_tokens > max_tokens)
    if over.size:
        k = int(over[0])
        raise InputDataError(
            f"max_tokens: sample {int(indices[k])} has {int(num_tokens[k])} tokens, expected <= "
            f"max_tokens={max_tokens} ({over.size} samples too long; filter them or raise max_tokens)"
        )


def tail_overflows(num_tokens: np.ndarray, split: int, full_at: int, max_tokens: int | None) -> bool:
    """Whether the carried entries ``[split, full_at]`` alone exceed ``max_tokens`` (padded size)."""
    if max_tokens is None or split >= full_at:
        return False
    return (full_at - split + 1) * int(num_tokens[split : full_at + 1].max()) > max_tokens


def _batch_ends(num_tokens: np.ndarray, max_tokens: int | None, max_sentences: int | None, multiple: int) -> list[int]:
    """End positions of fairseq's greedy batches, the last batch included (one step per batch)."""
    n = num_tokens.shape[0]
    ends: list[int] = []
    start, first, window = 0, 1, MIN_WINDOW
    while (full_at := find_full_position(num_tokens, start, first, max_tokens, max_sentences, window)) is not None:
        split = start + emitted_length(full_at - start, multiple)
        ends.append(split)
        if tail_overflows(num_tokens, split, full_at, max_tokens):
            ends.append(full_at)
            split = full_at
        window = max(MIN_WINDOW, 2 * (split - start))
        start, first = split, full_at + 1
    if n:
        ends.extend(_last_batch_ends(start, n, multiple))
    return ends


def _last_batch_ends(start: int, n: int, multiple: int) -> list[int]:
    """fairseq closes the last batch at its last multiple of ``multiple`` and keeps the rest apart."""
    aligned = start + emitted_length(n - start, multiple)
    return [aligned, n] if aligned < n else [n]


def batch_by_size(
    indices: np.ndarray,
    num_tokens: np.ndarray,
    max_tokens: int | None,
    max_sentences: int | None,
    required_batch_size_multiple: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """fairseq ``data_utils.batch_by_size`` as (flat_indices, batch_offsets).

    ``num_tokens[k]`` is the size of sample ``indices[k]`` (fairseq's
    ``num_tokens_vec``). Batch ``b`` is ``flat_indices[batch_offsets[b]:batch_offsets[b + 1]]``.
    Greedy over the order (fairseq 0.12's ``batch_by_size_vec``): a batch is full
    when adding the next sample would give ``(len + 1) * max_len > max_tokens`` or
    when it holds ``max_sentences``; then its first :func:`emitted_length` entries
    are emitted and the rest, with the sample that triggered the split, start the
    next batch without a further check, except that if those carried entries plus
    the new sample alone exceed ``max_tokens``, the carried entries are emitted as
    a batch of their own. The last batch is cut at its last multiple of
    ``required_batch_size_multiple``, and a final batch whose size is not a
    multiple of it is dropped (so up to ``multiple - 1`` samples, or a short
    corpus entirely, are left out). A sample longer than ``max_tokens`` raises
    InputDataError.
    """
    idx = _as_lengths("indices", indices)
    sizes = _as_lengths("num_tokens", num_tokens)
    if sizes.shape != idx.shape:
        raise InvalidParameterError(f"num_tokens: expected {idx.shape[0]} sizes (one per index), got {sizes.shape[0]}")
    check_limit("max_tokens", max_tokens)
    check_limit("max_sentences", max_sentences)
    check_limit("required_batch_size_multiple", required_batch_size_multiple)
    _check_sizes_fit(idx, sizes, max_tokens)
    ends = _batch_ends(sizes, max_tokens, max_sentences, required_batch_size_multiple)
    offsets = np.array([0, *ends], dtype=np.int64)
    if len(ends) and (int(offsets[-1] - offsets[-2]) % required_batch_size_multiple) != 0:
        offsets = offsets[:-1]
    return idx[: int(offsets[-1])].copy(), offsets


# ---------------------------------------------------------------- epochs and ranks


def epoch_batch_order(n_batches: int, seed: int, epoch: int) -> np.ndarray:
    """Batch ids in the order of epoch ``epoch``.

    fairseq's ``np.random.shuffle`` of the batch list under ``numpy_seed(seed + epoch)``.
    """
    if n_batches < 0:
        raise InvalidParameterError(f"n_batches: expected >= 0, got {n_batches}")
    check_seed("seed + epoch", seed + epoch)
    return np.random.RandomState(seed + epoch).permutation(n_batches).astype(np.int64)


def shard_length(n_batches: int, world_size: int) -> int:
    """Batches every rank gets: ``ceil(n_batches / world_size)``."""
    return -(-n_batches // world_size)


def shard_batches(order: np.ndarray, rank: int, world_size: int) -> np.ndarray:
    """Rank ``rank``'s batches: ``order[rank], order[rank + k], ...`` (k = ``world_size``).

    Every rank gets ``ceil(len(order) / k)`` batches, so DDP never waits on a rank
    that ran out. Where ``len(order)`` is not a multiple of k, the short ranks are
    padded by wrapping around to the start of ``order`` (like torch's
    ``DistributedSampler``): a few batches are seen twice in that epoch, and every
    padded step is a real batch, which any training loop handles. (fairseq pads
    with empty batches instead, which needs its dummy-batch logic.)
    """
    if world_size < 1:
        raise InvalidParameterError(f"world_size: expected >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise InvalidParameterError(f"rank: expected 0 <= rank < world_size={world_size}, got {rank}")
    n = int(np.asarray(order).shape[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    positions = rank + world_size * np.arange(shard_length(n, world_size), dtype=np.int64)
    return np.asarray(order, dtype=np.int64)[positions % n]
