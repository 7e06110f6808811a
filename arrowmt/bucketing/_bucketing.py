"""Pure bucketing arithmetic: fairseq's sentence order, size filter, token batches and epoch sharding.

Every function here takes and returns numpy arrays and touches no file, so each
is tested on exact values. The order, filter and batches are those of fairseq
0.12 (``LanguagePairDataset.ordered_indices``,
``data_utils.filter_paired_dataset_indices_by_size``, ``data_utils.batch_by_size``
and ``EpochBatchIterator``'s batch shuffle), checked against fairseq itself in
the tests. There is no Python loop per sentence: :func:`batch_by_size` loops once
per batch and scans each batch with numpy windows.

The epoch arithmetic (:func:`shard_batches`, :func:`resume_start`) works on any array of
planned batch ids, so every sampler deals its epochs, and resumes them elastically onto
another number of ranks, the same way. The parameter checks (limits, seeds, ranks, too-long
samples) live here once, for every planner.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from arrowmt._checks import check_integer, check_optional_integer
from arrowmt._errors import InputDataError, InvalidParameterError

logger = logging.getLogger(__name__)

MIN_WINDOW = 16
CHUNK = 1 << 20  # elements per step of the chunked loops that bound temporaries
LOW_32 = np.uint64(0xFFFFFFFF)
SKIPPED_WARN_SHARE = 0.01  # a plan that skips more than this share of its samples for size warns (else logs)


def check_limit(name: str, value: int | None) -> None:
    """A batching limit is None (no limit) or an integer >= 1."""
    check_optional_integer(name, value, 1)


def check_seed(name: str, seed: int) -> None:
    """numpy's legacy seeding accepts 0 <= seed < 2**32."""
    check_integer(name, seed, 0, 2**32, high_name="2**32")


def check_rank(num_replicas: int, rank: int) -> None:
    """``num_replicas >= 1`` processes share the work and ``rank`` is one of them."""
    check_integer("num_replicas", num_replicas, 1)
    check_integer("rank", rank, 0, num_replicas, high_name=f"num_replicas={num_replicas}")


def _as_lengths(name: str, lengths: np.ndarray) -> np.ndarray:
    """``lengths`` as a 1-D integer array, its own dtype kept; InvalidParameterError for other shapes.

    uint64 (and an empty non-integer array) becomes int64, so arithmetic with int64 stays integer.
    """
    arr = np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidParameterError(f"{name}: expected a 1-D integer array, got {arr.dtype} shape {arr.shape}")
    if arr.dtype.kind not in "iu" or arr.dtype == np.uint64:
        return arr.astype(np.int64)
    return arr


def index_dtype(n: int) -> np.dtype:
    """The dtype of indices into ``n`` rows: int32 below ``2**31`` rows (half of int64's memory), else int64."""
    return np.dtype(np.int32 if n <= 2**31 else np.int64)


def smallest_uint(high: int) -> np.dtype:
    """The narrowest unsigned integer dtype holding ``0..high``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if high <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def compact_counts(counts: np.ndarray) -> np.ndarray:
    """Non-negative integers in :func:`smallest_uint` of their maximum (the same values, fewer bytes).

    ``counts`` itself when it is empty, already that narrow, or holds a negative value.
    """
    arr = _as_lengths("counts", counts)
    if arr.size == 0 or int(arr.min()) < 0:
        return arr
    dtype = smallest_uint(int(arr.max()))
    return arr if dtype.itemsize >= arr.dtype.itemsize else arr.astype(dtype)


def sort_key(values: np.ndarray) -> np.ndarray:
    """``values - values.min()`` in :func:`smallest_uint` of their span: the same order in fewer bytes.

    A narrow key is cheaper to gather and fits :func:`stable_order`'s packed sort (and
    numpy's stable sort of 8- and 16-bit keys is a radix sort, about 10x faster than int64's).
    """
    arr = _as_lengths("values", values)
    if arr.size == 0:
        return arr.astype(np.uint8)
    low = int(arr.min())
    dtype = smallest_uint(int(arr.max()) - low)
    if low == 0 and arr.dtype == dtype:
        return arr
    key = np.empty(arr.shape, dtype=dtype)
    np.subtract(arr, arr.dtype.type(low), out=key, casting="unsafe")  # exact modulo 2**bits
    return key


def order_keys(src: np.ndarray, tgt: np.ndarray | None) -> list[np.ndarray]:
    """Sort keys whose successive stable sorts order by (source, target): the primary key last.

    One key ``src * (tgt span + 1) + tgt`` (shifted to start at 0) when it fits 32 bits,
    else the target key then the source key (each from :func:`sort_key`).
    """
    src_key = sort_key(src)
    if tgt is None:
        return [src_key]
    tgt_key = sort_key(tgt)
    if src_key.size:
        width = int(tgt_key.max()) + 1
        high = int(src_key.max()) * width + width - 1
        if smallest_uint(high).itemsize <= 4:
            dtype = smallest_uint(high)
            key = src_key.astype(dtype)
            key *= dtype.type(width)
            key += tgt_key
            return [key]
    return [tgt_key, src_key]


def stable_order(indices: np.ndarray, key: np.ndarray, in_place: bool = False) -> np.ndarray:
    """``indices[np.argsort(key[indices], kind="stable")]``, in about half the memory and time.

    Sorts ``key[indices] << 32 | position`` as uint64 in place: the values are distinct, so
    numpy's (SIMD) quicksort gives the stable order, and it needs no n-sized scratch array as
    argsort does. Falls back to argsort for a key that is not unsigned 32-bit or narrower, or
    for ``2**32`` or more indices (non-negative integers). With ``in_place`` the result
    overwrites ``indices`` (and is returned), saving one more array.
    """
    n = indices.shape[0]
    if key.dtype.kind != "u" or key.dtype.itemsize > 4 or n >= 2**32:
        ordered = indices[np.argsort(key[indices], kind="stable")]
    else:
        ordered = np.empty(n, dtype=np.uint64)
        for a in range(0, n, CHUNK):
            part = ordered[a : a + CHUNK]
            part[...] = key[indices[a : a + CHUNK]]
            part <<= np.uint64(32)
            part |= np.arange(a, a + part.shape[0], dtype=np.uint64)
        del key  # the caller may have passed its only reference
        ordered.sort()
        for a in range(0, n, CHUNK):
            part = ordered[a : a + CHUNK]
            part[...] = indices[(part & LOW_32).astype(np.intp)]
    out = indices if in_place else np.empty_like(indices)
    out[...] = ordered
    return out


def shuffled_range(n: int, seed: int | None) -> np.ndarray:
    """``np.random.RandomState(seed).permutation(n)`` (``arange(n)`` when seed is None) as :func:`index_dtype`.

    The legacy shuffle draws the same swaps whatever the array's dtype, so shuffling an
    int32 range gives numpy's (and fairseq's) permutation bit for bit in half the memory.
    """
    indices = np.arange(n, dtype=index_dtype(n))
    if seed is not None:
        check_seed("seed", seed)
        np.random.RandomState(seed).shuffle(indices)
    return indices


# ---------------------------------------------------------------- order and filter


def ordered_indices(src_lengths: np.ndarray, tgt_lengths: np.ndarray | None, seed: int | None) -> np.ndarray:
    """fairseq ``LanguagePairDataset.ordered_indices`` under ``numpy_seed(seed)``.

    A permutation drawn with ``np.random.RandomState(seed)`` (``arange`` when
    ``seed`` is None), then a stable sort by target length, then a stable sort
    by source length. Returns dataset indices as :func:`index_dtype` (int32 below
    ``2**31`` rows). Both sorts are one :func:`stable_order` on a combined narrow key
    (:func:`order_keys`) where it fits: the same order.
    """
    src = _as_lengths("src_lengths", src_lengths)
    tgt = None if tgt_lengths is None else _as_lengths("tgt_lengths", tgt_lengths)
    if tgt is not None and tgt.shape != src.shape:
        raise InvalidParameterError(
            f"tgt_lengths: expected {src.shape[0]} lengths (as many as src_lengths), got {tgt.shape[0]}"
        )
    indices = shuffled_range(src.shape[0], seed)
    keys = order_keys(src, tgt)
    while keys:
        stable_order(indices, keys.pop(0), in_place=True)
    return indices


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
    ``max_target_positions``; a None limit checks nothing on that side. When
    nothing is dropped, kept is ``indices`` itself (as an integer array).
    """
    idx = _as_lengths("indices", indices)
    too_long: np.ndarray | None = None
    for name, lengths, limit in (
        ("src_lengths", src_lengths, max_source_positions),
        ("tgt_lengths", tgt_lengths, max_target_positions),
    ):
        if lengths is None or limit is None:
            continue
        arr = _as_lengths(name, lengths)
        if arr.size == 0 or arr.max() <= limit:  # no row at all is too long
            continue
        over = arr[idx] > limit
        too_long = over if too_long is None else np.logical_or(too_long, over, out=too_long)
    if too_long is None:
        return idx, idx[:0].copy()
    return idx[~too_long], idx[too_long]


# ---------------------------------------------------------------- token batches


def emitted_length(batch_len: int, multiple: int) -> int:
    """How many entries of a full batch of ``batch_len`` fairseq emits; the rest carry over.

    ``max(multiple * (batch_len // multiple), batch_len % multiple)``.
    """
    return max(multiple * (batch_len // multiple), batch_len % multiple)


def first_full_position(
    num_tokens: np.ndarray,
    start: int,
    first: int,
    max_tokens: int | None,
    max_sentences: int | None,
    window: int,
) -> int | None:
    """First position ``i >= first`` (> ``start``) at which batch ``num_tokens[start:i]`` is full, or None.

    Full (fairseq's ``_is_batch_full``) when the batch holds ``max_sentences`` entries or
    ``(batch_len + 1) * running_max > max_tokens``, the running maximum starting at
    ``start`` so carried-over entries count. With sizes >= 0, ``(batch_len + 1) *
    running_max`` never decreases along the order, so the first position over
    ``max_tokens`` in a window is one ``searchsorted``; the batch holds
    ``max_sentences`` at the single position ``start + max_sentences``.
    """
    n = num_tokens.shape[0]
    cap = start + max_sentences if max_sentences is not None and first <= start + max_sentences < n else None
    end = n if cap is None else cap
    if max_tokens is not None:
        while first < end:
            stop = min(end, first + window)
            padded = np.maximum.accumulate(num_tokens[start:stop])[first - start :] * np.arange(
                first - start + 1, stop - start + 1, dtype=np.int64
            )
            k = int(np.searchsorted(padded, max_tokens, side="right"))
            if k < padded.shape[0]:
                return first + k
            first, window = stop, window * 2
    return cap


def too_long_error(name: str, limit: int, index: int, size: int, count: int) -> InputDataError:
    """The one message for samples over a length limit: the first one, and how many there are."""
    return InputDataError(
        f"{name}: sample {index} has {size} tokens, expected <= {name}={limit} ({count} samples too long; "
        "pass skip_invalid_size_inputs=True to drop them)"
    )


def drop_too_long(
    indices: np.ndarray, sizes: np.ndarray, name: str, limit: int | None, skip: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """(kept indices, their sizes, dropped count) without the samples whose size exceeds ``limit``.

    ``sizes[k]`` is the size of sample ``indices[k]``; order is kept and a None limit keeps
    everything. Unless ``skip``, a sample over the limit raises :func:`too_long_error` naming
    the first one instead.
    """
    if limit is None or sizes.size == 0 or sizes.max() <= limit:
        return indices, sizes, 0
    over = sizes > limit
    count = int(np.count_nonzero(over))
    if not skip:
        k = int(np.argmax(over))
        raise too_long_error(name, limit, int(indices[k]), int(sizes[k]), count)
    keep = ~over
    return indices[keep], sizes[keep], count


def report_skipped(where: str, kept: int, skipped: int, what: str, limits: str) -> None:
    """Tell that ``skipped`` of ``kept + skipped`` samples exceed ``limits`` and are skipped.

    More than :data:`SKIPPED_WARN_SHARE` of them is a ``UserWarning`` (a wrong limit, such as
    ``max_positions`` below the block size, would otherwise train on a fraction of the data
    unnoticed); fewer are logged.
    """
    if not skipped:
        return
    total = kept + skipped
    message = f"{where}: {skipped} of {total} {what} ({skipped / total:.1%}) exceed {limits} and are skipped"
    if skipped > SKIPPED_WARN_SHARE * total:
        warnings.warn(f"{message}; raise the limits to keep them", UserWarning, stacklevel=2)
    else:
        logger.warning(message)


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
    while (full_at := first_full_position(num_tokens, start, first, max_tokens, max_sentences, window)) is not None:
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
    if sizes.size and int(sizes.min()) < 0:
        k = int(np.argmin(sizes))
        raise InvalidParameterError(f"num_tokens[{k}]: expected a size >= 0, got {int(sizes[k])}")
    check_limit("max_tokens", max_tokens)
    check_limit("max_sentences", max_sentences)
    check_limit("required_batch_size_multiple", required_batch_size_multiple)
    drop_too_long(idx, sizes, "max_tokens", max_tokens, skip=False)
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
    check_integer("n_batches", n_batches, 0)
    check_seed("seed + epoch", seed + epoch)
    return np.random.RandomState(seed + epoch).permutation(n_batches).astype(np.int64)


WINDOW_CHUNKS = 16  # runs of consecutive plan batches a shuffle window draws from
ORDER_PIECE = 1 << 14  # batch ids a windowed order places at a time (whole windows; bounds its arrays)


def window_chunk(window: int) -> int:
    """Plan batches per run of a ``shuffle_window`` of ``window`` batches (checked): ``ceil(window / 16)``; the window
    shuffles :data:`WINDOW_CHUNKS` such runs together (:func:`window_batches`)."""
    return -(-check_integer("shuffle_window", window, 1) // WINDOW_CHUNKS)


def window_batches(window: int) -> int:
    """Batches in a whole window of a ``shuffle_window`` of ``window``: ``16 * window_chunk(window)``."""
    return WINDOW_CHUNKS * window_chunk(window)


def windowed_batch_order(n_batches: int, seed: int, epoch: int, window: int) -> np.ndarray:
    """Batch ids in the order of epoch ``epoch``, shuffled within windows (``shuffle_window``; not fairseq's order).

    The plan's batches are cut into runs of :func:`window_chunk` consecutive ids (the last
    may be shorter); the runs are shuffled, and each :data:`WINDOW_CHUNKS` runs in a row are
    one window whose batches are shuffled together. Every batch once per epoch; deterministic
    in (``seed + epoch``). In a copy stored in plan order (``arrowmt order``) a run's batches
    are one stretch of the files, so a window reads 16 stretches instead of a row here and there.
    """
    rng, runs, chunk = _shuffled_runs(n_batches, seed, epoch, window)
    order = np.empty(n_batches, dtype=np.int64)
    piece = WINDOW_CHUNKS * max(1, ORDER_PIECE // (WINDOW_CHUNKS * chunk))  # runs placed at once: whole windows
    at = 0
    for first in range(0, runs.shape[0], piece):  # the draws follow one another: as one draw for the whole epoch
        ids, windows = _window_ids(runs[first : first + piece], chunk, n_batches)
        order[at : at + ids.shape[0]] = ids[np.lexsort((rng.random_sample(ids.shape[0]), windows))]
        at += ids.shape[0]
    return order


def _window_ids(runs: np.ndarray, chunk: int, n_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """The batch ids of ``runs`` (whole windows, in order) and the window of each, counted from the first."""
    ids = (runs[:, None] * chunk + np.arange(chunk, dtype=np.int64)).ravel()
    windows = np.repeat(np.arange(runs.shape[0], dtype=np.int64) // WINDOW_CHUNKS, chunk)
    kept = ids < n_batches  # the last run's missing tail
    return ids[kept], windows[kept]


def window_starts(n_batches: int, seed: int, epoch: int, window: int) -> np.ndarray:
    """Positions of :func:`windowed_batch_order` (same arguments) where its second, third, ... window begins (from the
    shuffled runs' lengths alone: no batch is placed)."""
    _, runs, chunk = _shuffled_runs(n_batches, seed, epoch, window)
    lengths = np.where(runs == runs.shape[0] - 1, n_batches - (runs.shape[0] - 1) * chunk, chunk)  # the last: short
    sizes = np.add.reduceat(lengths, np.arange(0, runs.shape[0], WINDOW_CHUNKS)) if runs.size else lengths
    return np.cumsum(sizes)[:-1]


def _shuffled_runs(n_batches: int, seed: int, epoch: int, window: int) -> tuple[np.random.RandomState, np.ndarray, int]:
    """(the epoch's generator after its first draw, the runs' numbers in the epoch's order, batches per run)."""
    check_integer("n_batches", n_batches, 0)
    check_seed("seed + epoch", seed + epoch)
    chunk = min(window_chunk(window), max(n_batches, 1))  # a run longer than the plan is the plan (same order)
    rng = np.random.RandomState(seed + epoch)
    return rng, rng.permutation(-(-n_batches // chunk)).astype(np.int64), chunk


def shard_length(n_batches: int, num_replicas: int, start: int = 0) -> int:
    """Batches every rank gets when ``order[start:]`` of ``n_batches`` is dealt: ``ceil((n - start) / k)``."""
    return -(-max(n_batches - start, 0) // num_replicas)


def shard_batches(order: np.ndarray, rank: int, num_replicas: int, start: int = 0) -> np.ndarray:
    """Rank ``rank``'s deal of ``order[start:]``: ``order[start + rank]``, ``order[start + rank + k]``, ...

    ``order`` is any array of planned batch ids (an epoch's order) and ``k`` is
    ``num_replicas``. Every rank gets :func:`shard_length` batches, so DDP never waits
    on a rank that ran out: where ``len(order) - start`` is not a multiple of k, the
    short ranks are padded by wrapping around to the start of ``order`` (like torch's
    ``DistributedSampler``); a few batches are seen twice in that epoch, and every
    padded step is a real batch, which any training loop handles. (fairseq pads
    with empty batches instead, which needs its dummy-batch logic.) ``start`` is the
    number of positions of ``order`` already trained (see :func:`resume_start`).
    """
    check_rank(num_replicas, rank)
    n = int(np.asarray(order).shape[0])
    check_integer("start", start, 0, n + 1)
    count = shard_length(n, num_replicas, start)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.asarray(order, dtype=np.int64)
    dealt = order[start + rank :: num_replicas]  # a view of the order (an epoch's is 8 bytes a batch)
    if dealt.shape[0] >= count:
        return dealt[:count]
    positions = start + rank + num_replicas * np.arange(count, dtype=np.int64)  # wrapped: padded from the start
    return order[positions % n]


def resume_start(n_batches: int, start: int, num_replicas: int, steps: int) -> int:
    """Positions of an epoch's order trained once each of ``num_replicas`` ranks took ``steps`` batches
    of the deal that began at ``start`` (:func:`shard_batches`): where the next deal begins, at most ``n_batches``.

    Dealing ``order[resume_start(...):]`` to any number of ranks then trains every batch of the
    epoch exactly once, apart from the wrapped padding of each deal's last step.
    """
    return min(n_batches, start + num_replicas * steps)
