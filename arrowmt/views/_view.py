"""Views: a filtered subset of one split, stored as a memory-mapped row list next to the corpus.

A view file holds the corpus rows it keeps, in corpus order, as little-endian
uint32 (uint64 past ``2**32`` rows): 4 bytes per kept row plus a header, mapped
read-only, so every process shares its pages. :class:`View` reads a split
through it with the :class:`~arrowmt.splits._split.Split` interface (rows,
lengths, located spans, fingerprint), so it goes wherever a split goes: datasets,
samplers, mixtures, the fairseq plugin.

A view file is a side file (:mod:`arrowmt.files._sidefile`: a header and chunk table,
a CRC-32 per 4 KiB chunk of the contents, atomic write, read-only map). Layout
(little-endian)::

    header (128 bytes): magic b"ARROWMT-VIEW\\0\\0\\0\\0", u32 version (3), u32 row itemsize (4 or 8),
                        32-byte SHA-256 fingerprint of the split (Split.fingerprint),
                        32-byte SHA-256 of the row bytes, u64 corpus rows, u64 kept rows,
                        u64 description bytes, u32 CRC-32 of the header fields and the chunk
                        table, zero padding
    chunk table:        u64 body bytes, u32 chunk bytes, u32 zero, a CRC-32 per chunk of the body
                        (arrowmt.files._chunks), zero-padded to a multiple of 8 bytes
    description:        UTF-8 JSON {"split", "filters", "dropped"}, zero-padded to a multiple of 8
    rows:               u32 or u64 [kept rows], strictly increasing, each < corpus rows

Opening a view checks: that the path is a regular file, the header (magic, version,
sizes), its CRC-32 (header fields and chunk table), the description (its chunks' CRC-32
first), and that the corpus is the one the view was made from. The row list is read
where it is used, each 4 KiB chunk's CRC-32 checked on first use (a flipped bit in a row
number that keeps the order is refused), and every row served is checked below the
corpus rows; :attr:`View.rows` (every row at once) and ``verify`` also check that the
rows strictly increase. A version 2 file (written before the chunk table: one CRC-32
over the whole file) is still read, its checksum checked when it is opened; a version 1
file (no checksum) is refused: rebuild it with ``arrowmt filter``. The SHA-256 of the
rows is the view's identity (:meth:`View.fingerprint`, part of the keys of batch plans
over it); the CRC-32s are what check the bytes.

The file names no path: the corpus is given when the view is opened (by default
the folder holding the view file, or that folder's parent).

Filters (:func:`build_view`): a row list, a length range and a length ratio on
every column's stored token count (``</s>`` included), and exact duplicate
removal: each side's tokens are hashed with a vectorized polynomial hash
(prefix sums over each record batch, so no loop runs per row), pairs whose
hashes agree are compared token by token, and a pair is dropped only if an
identical pair comes earlier in the corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._checks import check_optional_integer
from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.files import VIEW_FORMAT, CheckedArray, SideFile, canonical_json, open_side_file, write_side_file
from arrowmt.format import MANIFEST_NAME, plain_name_error
from arrowmt.io import WordRanges
from arrowmt.reading import FileIdentity, Spans, SplitFile, check_indices, local_only, take_flat
from arrowmt.splits import OverSplit, Split
from arrowmt.storage import DOWNLOAD_FIRST, local_only_path
from arrowmt.stored import refuse_stored_order
from arrowmt.views._ratio import length_ratio

if TYPE_CHECKING:
    from arrowmt.format import Dictionary

VIEW_SUFFIX = ".view"
MAX_DESCRIPTION_BYTES = 1 << 20
CHECK_CHUNK = 1 << 22  # rows per step when checking the order of a mapped row list
VERIFY_CHUNK = 1 << 20  # duplicate candidates compared token by token per step
HASH_BASE = np.uint32(0x9E3779B1)  # odd, so invertible modulo 2**32
REASONS = ("not_listed", "length", "ratio", "duplicate")


# ---------------------------------------------------------------- filters


@dataclass(frozen=True)
class ViewFilters:
    """Which rows a view keeps; every limit applies to each column's stored token count (``</s>`` included).

    ``max_len_ratio``: a pair is dropped when its longer side has more than
    ``max_len_ratio`` times the tokens of its shorter side. ``dedup``: a pair is
    dropped when an identical pair (every column equal) comes earlier among the
    rows the other filters keep.
    """

    max_len: int | None = None
    min_len: int | None = None
    max_len_ratio: float | None = None
    dedup: bool = False

    def __post_init__(self) -> None:
        check_optional_integer("max_len", self.max_len, 1)
        check_optional_integer("min_len", self.min_len, 0)
        if self.max_len is not None and self.min_len is not None and self.min_len > self.max_len:
            raise InvalidParameterError(f"min_len: expected <= max_len={self.max_len}, got {self.min_len}")
        ratio = self.max_len_ratio
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio >= 1):
            raise InvalidParameterError(f"max_len_ratio: expected None or a number >= 1, got {ratio!r}")


@dataclass(frozen=True)
class ViewReport:
    """What :func:`build_view` wrote: rows kept, rows dropped per reason (first reason that applies), time."""

    path: Path
    split: str
    corpus_rows: int
    kept: int
    dropped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def bytes_per_kept_row(self) -> float:
        return self.path.stat().st_size / max(self.kept, 1)


def select_rows(
    source: Split, filters: ViewFilters, rows: np.ndarray | None = None
) -> tuple[np.ndarray, dict[str, int]]:
    """Boolean mask of the rows of ``source`` the filters keep, and the rows dropped per reason.

    Reasons apply in order (not listed in ``rows``, length, ratio, duplicate); each
    dropped row counts under the first.
    """
    n = len(source)
    keep = np.ones(n, dtype=bool) if rows is None else listed_mask(rows, n)
    dropped = {"not_listed": n - int(np.count_nonzero(keep))}
    lengths = [source.lengths(column, dtype=np.int32) for column in source.columns]  # validates every offset
    dropped["length"] = _apply(keep, _length_ok(lengths, filters.min_len, filters.max_len))
    dropped["ratio"] = _apply(keep, _ratio_ok(source, lengths, filters.max_len_ratio))
    if filters.dedup:
        dropped["duplicate"] = _apply(keep, ~duplicate_mask(source, keep, lengths))
    return keep, {reason: dropped.get(reason, 0) for reason in REASONS}


def listed_mask(rows: np.ndarray, n: int) -> np.ndarray:
    """Boolean mask of the row numbers ``rows`` (any order, repeats allowed) among ``n`` rows."""
    listed = np.asarray(rows)
    if listed.ndim != 1 or (listed.size and listed.dtype.kind not in "iu"):
        raise InvalidParameterError(f"rows: expected a 1-D array of row numbers, got {listed.dtype} {listed.shape}")
    listed = listed.astype(np.int64, copy=False)
    try:
        check_indices(listed, n, "rows")
    except IndexError as exc:  # a parameter here, not a read
        raise InvalidParameterError(str(exc)) from None
    mask = np.zeros(n, dtype=bool)
    mask[listed] = True
    return mask


def _apply(keep: np.ndarray, ok: np.ndarray | None) -> int:
    """``keep &= ok``; how many kept rows that dropped."""
    if ok is None:
        return 0
    before = int(np.count_nonzero(keep))
    keep &= ok
    return before - int(np.count_nonzero(keep))


def _length_ok(lengths: list[np.ndarray], low: int | None, high: int | None) -> np.ndarray | None:
    if low is None and high is None:
        return None
    ok = np.ones(lengths[0].shape[0], dtype=bool)
    for column in lengths:
        if low is not None:
            ok &= column >= low
        if high is not None:
            ok &= column <= high
    return ok


def _ratio_ok(source: Split, lengths: list[np.ndarray], ratio: float | None) -> np.ndarray | None:
    if ratio is None:
        return None
    if len(lengths) != 2:
        raise InvalidParameterError(
            f"max_len_ratio: expected a parallel split (two columns), got columns {list(source.columns)}"
        )
    return length_ratio(lengths[0], lengths[1]) <= float(ratio)


# ---------------------------------------------------------------- exact duplicates


def duplicate_mask(source: Split, candidates: np.ndarray, lengths: list[np.ndarray]) -> np.ndarray:
    """Rows among ``candidates`` (a mask) equal in every column to an earlier candidate row.

    A 64-bit key per row (two 32-bit column hashes, or a hash and the length) is
    sorted with the row's position packed into its low bits; rows whose keys agree
    are compared token by token with the earliest of them.
    """
    out = np.zeros(candidates.shape[0], dtype=bool)
    rows = np.flatnonzero(candidates)
    if rows.size < 2:
        return out
    keys = _row_keys(source, rows, lengths)
    duplicates, firsts = _equal_key_pairs(keys)
    if duplicates.size:
        same = _rows_equal(source, rows[duplicates], rows[firsts])
        out[rows[duplicates[same]]] = True
    return out


def _row_keys(source: Split, rows: np.ndarray, lengths: list[np.ndarray]) -> np.ndarray:
    """uint64 key of each of ``rows``: the first column's hash in one half, the second's (or the length) in the other.

    The hashes are written straight into the halves of one key array (no per-column temporaries).
    """
    keys = np.empty(len(source), dtype=np.uint64)
    halves = keys.view(np.uint32).reshape(-1, 2)
    column_hashes(source, source.columns[0], out=halves[:, 1])
    if len(source.columns) > 1:
        column_hashes(source, source.columns[1], out=halves[:, 0])
    else:
        halves[:, 0] = lengths[0]
    return keys if rows.shape[0] == keys.shape[0] else keys[rows]


def _equal_key_pairs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions, first positions): each position whose key equals an earlier one, and the earliest with that key.

    One in-place sort of ``key prefix | position`` finds the (few) positions sharing a
    key prefix; only those are ordered by their full key.
    """
    m = keys.shape[0]
    bits = np.uint64(max(1, (m - 1).bit_length()))
    packed = keys >> bits
    packed <<= bits
    packed |= np.arange(m, dtype=np.uint64)
    packed.sort()
    prefix = packed >> bits
    shared = np.zeros(m, dtype=bool)
    same = prefix[1:] == prefix[:-1]
    shared[1:] |= same
    shared[:-1] |= same
    del prefix, same
    positions = (packed[shared] & ((np.uint64(1) << bits) - np.uint64(1))).astype(np.int64)
    del packed
    order = np.lexsort((positions, keys[positions]))
    positions = positions[order]
    full = keys[positions]
    starts = np.ones(positions.shape[0], dtype=bool)
    starts[1:] = full[1:] != full[:-1]
    first = positions[np.maximum.accumulate(np.where(starts, np.arange(positions.shape[0]), 0))]
    later = ~starts
    return positions[later], first[later]


def _rows_equal(source: Split, rows: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Whether row ``rows[k]`` equals row ``others[k]`` in every column (chunked, vectorized)."""
    equal = np.ones(rows.shape[0], dtype=bool)
    for a in range(0, rows.shape[0], VERIFY_CHUNK):
        part = slice(a, a + VERIFY_CHUNK)
        for column in source.columns:
            equal[part] &= _spans_equal(
                source.column_spans(column, rows[part]), source.column_spans(column, others[part])
            )
    return equal


def _spans_equal(left: Spans, right: Spans) -> np.ndarray:
    """Row-wise equality of two equally long lists of rows."""
    equal = left.lengths == right.lengths
    keep = np.flatnonzero(equal)
    lengths = left.lengths[keep]
    mine = take_flat(left.words, left.starts[keep], lengths)
    theirs = take_flat(right.words, right.starts[keep], lengths)
    differs = np.flatnonzero(mine != theirs)
    if differs.size:
        row_of_token = np.repeat(np.arange(keep.shape[0]), lengths)
        equal[keep[row_of_token[differs]]] = False
    return equal


def column_hashes(source: Split, column: str, out: np.ndarray | None = None) -> np.ndarray:
    """A 32-bit polynomial hash of every row of ``column`` (uint32, all rows of all shards).

    Row ``t_0 .. t_{L-1}`` hashes to ``sum t_j * B**j`` modulo ``2**32``: each record
    batch's tokens are multiplied by powers of ``B`` and prefix-summed once, and a
    row's hash is the difference of two prefix sums times ``B**-start``. Offsets must
    have been checked (``Split.lengths`` does). Written into ``out`` (any uint32 array
    of the split's length, strided views included) when given.
    """
    out = np.empty(len(source), dtype=np.uint32) if out is None else out
    for k, shard in enumerate(source.shards):
        first = int(source.cumulative[k])
        for batch, hashes in _shard_hashes(shard, column):
            out[first + batch : first + batch + hashes.shape[0]] = hashes
    return out


def _shard_hashes(shard: SplitFile, column: str) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, hashes) of each record batch of one shard."""
    batches = list(shard.batch_offsets(column))
    if not batches:
        return
    span = max(int(b.offsets[-1]) - int(b.offsets[0]) for b in batches)
    powers = _powers(HASH_BASE, span + 1)
    inverse = _powers(np.uint32(pow(int(HASH_BASE), -1, 2**32)), span + 1)
    prefix = np.empty(span + 1, dtype=np.uint32)
    for batch in batches:
        relative = batch.offsets.astype(np.int64)
        relative -= relative[0]
        size = int(relative[-1])
        begin = batch.values_pos + int(batch.offsets[0])
        terms = prefix[1 : size + 1]
        np.multiply(shard.words_range(begin, size).view(np.uint32), powers[:size], out=terms)
        prefix[0] = 0
        np.cumsum(terms, dtype=np.uint32, out=terms)
        hashes = np.diff(prefix[relative])
        hashes *= inverse[relative[:-1]]
        yield batch.first_row, hashes


def _powers(base: np.uint32, n: int) -> np.ndarray:
    """``base**j`` modulo ``2**32`` for ``j < n`` (uint32)."""
    out = np.full(n, base, dtype=np.uint32)
    out[0] = 1
    return np.cumprod(out, dtype=np.uint32, out=out)


# ---------------------------------------------------------------- writing


def build_view(
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    split: str = "train",
    max_len: int | None = None,
    min_len: int | None = None,
    max_len_ratio: float | None = None,
    dedup: bool = False,
    rows: np.ndarray | None = None,
    overwrite: bool = False,
) -> ViewReport:
    """Write the view file ``out`` over split ``split`` of the arrowmt folder ``corpus``.

    Keeps the rows listed in ``rows`` (all when None) whose every column has
    ``min_len..max_len`` tokens, whose sides differ by at most ``max_len_ratio`` times,
    and (``dedup``) that no identical earlier pair repeats. ``out`` is written
    atomically; an existing file is replaced only with ``overwrite``.
    """
    started = time.perf_counter()
    filters = ViewFilters(max_len, min_len, max_len_ratio, bool(dedup))
    source = Split(local_only(corpus, "corpus", "build_view (`arrowmt filter`)"), split, access="sequential")
    refuse_stored_order(source.manifest, source.path, "filter")
    keep, dropped = select_rows(source, filters, rows)
    kept = np.flatnonzero(keep)
    del keep
    description = {"split": split, "filters": asdict(filters), "listed_rows": rows is not None, "dropped": dropped}
    path = write_view(out, source, kept, description, overwrite)
    return ViewReport(path, split, len(source), int(kept.shape[0]), dropped, time.perf_counter() - started)


def write_view(
    out: str | os.PathLike[str], source: Split, kept: np.ndarray, description: dict, overwrite: bool = False
) -> Path:
    """Write the view file ``out``: ``kept`` (strictly increasing rows of ``source``) and ``description``."""
    n = len(source)
    itemsize = 4 if n <= 2**32 else 8
    rows = np.ascontiguousarray(kept, dtype=f"<u{itemsize}")
    _check_rows(Path(out), rows, n)
    text = canonical_json(description)
    values = (
        itemsize,
        bytes.fromhex(source.fingerprint()),
        hashlib.sha256(memoryview(rows).cast("B")).digest(),
        n,
        rows.shape[0],
        len(text),
    )
    return write_side_file(out, VIEW_FORMAT, values, [text.ljust(_padded(len(text)), b"\x00"), rows], overwrite)


def _padded(size: int) -> int:
    return -(-size // 8) * 8


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class ViewHeader:
    """The fixed-size header of a view file."""

    itemsize: int
    corpus_fingerprint: str
    rows_sha256: str
    corpus_rows: int
    kept: int
    description_bytes: int

    def body_bytes(self) -> int:
        """Bytes after the header (and chunk table): the padded description, then the rows."""
        return _padded(self.description_bytes) + self.kept * self.itemsize


def _view_body_size(path: Path, values: tuple) -> int:
    """The body bytes a view header implies; FormatError for fields no writer produces."""
    itemsize, _, _, corpus_rows, kept, text = values
    if itemsize not in (4, 8) or kept > corpus_rows or text > MAX_DESCRIPTION_BYTES:
        raise FormatError(
            f"{path}: view header: expected row itemsize 4 or 8, kept <= corpus rows and a description of at "
            f"most {MAX_DESCRIPTION_BYTES} bytes, found {itemsize}, {kept} > {corpus_rows}?, {text} bytes"
        )
    return _header_of(values).body_bytes()


def _header_of(values: tuple) -> ViewHeader:
    itemsize, fingerprint, digest, corpus_rows, kept, text = values
    return ViewHeader(itemsize, fingerprint.hex(), digest.hex(), corpus_rows, kept, text)


def _check_rows(path: Path, rows: np.ndarray, n: int) -> None:
    """Rows strictly increase and lie below ``n`` (checked in chunks: no row-sized temporary)."""
    for a in range(0, rows.shape[0], CHECK_CHUNK):
        part = rows[a : a + CHECK_CHUNK + 1]
        bad = np.flatnonzero(part[1:] <= part[:-1])
        if bad.size:
            k = a + int(bad[0]) + 1
            raise FormatError(
                f"{path}: view row {k}: expected rows in strictly increasing order, found {int(rows[k - 1])} "
                f"then {int(rows[k])}"
            )
    _check_below(path, rows[-1:], n)


def _check_below(path: Path, rows: np.ndarray, n: int) -> None:
    """Every one of ``rows`` lies below ``n`` (the split's rows)."""
    if rows.size and int(rows.max()) >= n:
        raise FormatError(f"{path}: view rows: expected < {n} (the split's rows), found {int(rows.max())}")


def default_corpus(view_path: Path) -> Path:
    """The arrowmt folder a view file belongs to when none is given: its folder, or that folder's parent."""
    for folder in (view_path.parent, view_path.parent.parent):
        if (folder / MANIFEST_NAME).is_file():
            return folder
    raise InvalidParameterError(
        f"corpus: {view_path} lies neither in an arrowmt folder nor in a folder inside one; pass corpus="
    )


class View(OverSplit):
    """Split ``split`` of an arrowmt folder seen through a view file: only the rows the view keeps.

    Row ``i`` of the view is corpus row ``rows[i]`` (``rows`` increasing). It offers
    what :class:`~arrowmt.splits._split.Split` offers (``len``, ``columns``,
    ``lengths``, ``locate``, ``located_spans``, ``column_spans``, ``row_array``,
    ``num_tokens``, ``fingerprint``, ``check_unchanged``, ``metadata``); ``path``
    is the corpus folder, so batch plans are cached in the corpus as for the
    split. Pickling keeps the two paths: other processes map the files again and
    fail if either changed.
    """

    def __init__(self, path: str | os.PathLike[str], corpus: str | os.PathLike[str] | None = None) -> None:
        self.view_path = local_only_path(path, "path", "a local view file", DOWNLOAD_FIRST)
        corpus_path = default_corpus(self.view_path) if corpus is None else local_only(corpus, "corpus", "a view")
        side, self.description, self._rows = _open_view(self.view_path)
        self.identity, self.header, self._side = FileIdentity.of_stat(side.stat), _header_of(side.values), side
        self.corpus = Split(corpus_path, str(self.description["split"]))
        self._check_corpus()

    def _check_corpus(self) -> None:
        fingerprint, rows = self.corpus.fingerprint(), len(self.corpus)
        if (fingerprint, rows) != (self.header.corpus_fingerprint, self.header.corpus_rows):
            raise FormatError(
                f"{self.view_path}: made from a split {self.split!r} of {self.header.corpus_rows} rows with "
                f"fingerprint {self.header.corpus_fingerprint[:16]}..., but {self.path} has {rows} rows, "
                f"fingerprint {fingerprint[:16]}... (another corpus, or converted again: rebuild the view)"
            )

    # -- what a Split offers (its facts: OverSplit's)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> np.ndarray:
        """Every kept corpus row, increasing (a read-only view of the map): reads and checks the whole row list."""
        self.check_all()
        return self._rows.raw

    def check_all(self) -> None:
        """Check the whole row list (once): every chunk's CRC-32, rows strictly increasing below the corpus rows."""
        self._side.check_whole(lambda: _check_rows(self.view_path, self._rows.raw, self.header.corpus_rows))

    @property
    def mapped_rows(self) -> np.ndarray:
        """The row list as mapped, unchecked: for where it lies in memory; read it after :meth:`check_chunks`."""
        return self._rows.raw

    @property
    def checked_rows(self) -> CheckedArray:
        """The row list read through its chunk checks (where each row lies in the file's chunks, and their checks):
        for readers that check many views' rows at once (a mixture's gather)."""
        return self._rows

    def check_chunks(self, indices: np.ndarray) -> bool:
        """Check the chunks holding view rows ``indices`` (in range) on their first use; whether every chunk is."""
        self._rows.ensure(indices)
        return self._rows.checks.all_checked

    def __repr__(self) -> str:
        name, kept = type(self).__name__, f"{len(self)} of {len(self.corpus)} rows"
        return f"{name}({str(self.view_path)!r}, {kept} of {self.path} {self.split!r})"

    def corpus_rows(self, indices: np.ndarray) -> np.ndarray:
        """The corpus row of each view index (int64), bounds-checked."""
        indices = np.asarray(indices, dtype=np.int64)
        check_indices(indices, len(self), f"view {self.view_path}")
        rows = self._rows.take(indices).astype(np.int64)
        _check_below(self.view_path, rows, self.header.corpus_rows)
        return rows

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shard number and row-within-shard of each view index."""
        return self.corpus.locate(self.corpus_rows(indices))

    def located_spans(self, column: str, shard: np.ndarray, local: np.ndarray) -> Spans:
        return self.corpus.located_spans(column, shard, local)

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where the view's rows ``indices`` lie in the corpus maps (see :meth:`Split.word_ranges`)."""
        return self.corpus.word_ranges(self.corpus_rows(indices), values)

    def advise(self, access: str) -> None:
        """The corpus maps' access advice (see :meth:`Split.advise`)."""
        self.corpus.advise(access)

    def column_spans(self, column: str, indices: np.ndarray) -> Spans:
        return self.corpus.column_spans(column, self.corpus_rows(indices))

    def row_array(self, column: str, index: int) -> np.ndarray:
        return self.corpus.row_array(column, int(self.corpus_rows(np.array([index]))[0]))

    def lengths(self, column: str, indices: np.ndarray | None = None, dtype: type | np.dtype = np.int64) -> np.ndarray:
        """Token counts of ``indices`` (all view rows when None)."""
        if indices is None:
            return self.corpus.lengths(column, dtype=dtype)[self.rows]
        return self.corpus.lengths(column, self.corpus_rows(indices), dtype)

    def num_tokens(self, indices: np.ndarray | None = None) -> np.ndarray:
        rows = self.rows.astype(np.int64) if indices is None else self.corpus_rows(indices)
        return self.corpus.num_tokens(rows)

    def dictionary(self, column: str) -> Dictionary:
        """The dictionary ``column``'s ids index: the corpus's (see :meth:`Split.dictionary`)."""
        return self.corpus.dictionary(column)

    def stretch_ranges(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """None: a view's rows are not stored in stretches of a plan (views of copies in plan order are refused)."""
        return None

    def fingerprint(self) -> str:
        """Identity of the rows seen: the split's fingerprint and the view's row checksum."""
        text = f"view:{self.header.corpus_fingerprint}:{self.header.rows_sha256}"
        return hashlib.sha256(text.encode()).hexdigest()

    def check_unchanged(self) -> None:
        """FormatError if the view file or any shard file changed since opening."""
        now = FileIdentity.of(self.view_path)
        if now != self.identity:
            raise FormatError(f"{self.view_path}: view file changed since it was opened; reopen the view")
        self.corpus.check_unchanged()

    def __getstate__(self) -> dict:
        return {"view": self.view_path, "identity": self.identity, "corpus": self.corpus.__getstate__()}

    def __setstate__(self, state: dict) -> None:
        View.__init__(self, state["view"], state["corpus"]["path"])
        if self.identity != state["identity"]:
            raise FormatError(f"{self.view_path}: view file changed since the view was opened; reopen the view")
        if self.corpus.__getstate__() != state["corpus"]:
            raise FormatError(f"{self.path}: split {self.split!r} files changed since the view was opened")


def _open_view(path: Path) -> tuple[SideFile, dict, CheckedArray]:
    """Map the view file read-only after checking its header, size, chunk table and description."""
    side = open_side_file(path, VIEW_FORMAT, _view_body_size)
    header = _header_of(side.values)
    rows = side.array(f"<u{header.itemsize}", header.kept, _padded(header.description_bytes))
    return side, _description(side, header), rows


def _description(side: SideFile, header: ViewHeader) -> dict:
    return _parse_description(side.path, side.body(0, header.description_bytes))


def _parse_description(path: Path, raw: bytes) -> dict:
    try:
        description = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise FormatError(f"{path}: view description: expected UTF-8 JSON, got JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{path}: view description: expected UTF-8 JSON, got {exc}") from exc
    if not isinstance(description, dict) or not isinstance(description.get("split"), str):
        raise FormatError(
            f"{path}: view description: expected an object with a 'split' name, got {str(description)[:80]!r}"
        )
    if error := plain_name_error(description["split"]):
        raise FormatError(f"{path}: view description: 'split': {error}")
    return description


def open_view(path: str | os.PathLike[str], corpus: str | os.PathLike[str] | None = None) -> View:
    """Open the view file ``path`` over ``corpus`` (default: the arrowmt folder holding it, or its parent)."""
    return View(path, corpus)
