"""Memory-mapped reading of one arrowmt split file, with cheap structural validation on open.

The file is mapped once (copy-on-write, so numpy and torch views are writable
without copying and the page-cache pages stay shared between processes). Every
list column's offsets and values buffers are located inside that map, so a row
is two integer reads and a slice: no pyarrow object is touched after opening.

Opening reads O(record batches) numbers: each batch's buffers must lie inside the
file and its offsets must run from 0 to the batch's value count. Middle offsets are
checked on every access (:meth:`SplitFile.spans`), or all at once by
:meth:`SplitFile.check_offsets`; the offsets checksum of each piece of 1,024 rows
of a record batch (recorded at conversion, :mod:`arrowmt.reading._offsets_crc`) is
checked the first time any of its rows is used; :func:`ensure_offsets_checked` does that once per
file state before a file is handed to a library that trusts offsets (pyarrow,
Hugging Face ``datasets``).
"""

from __future__ import annotations

import mmap
import os
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.format import (
    ALIGNMENT,
    DICTIONARY_SUFFIX,
    METADATA_KEY,
    TOKEN_TYPE,
    ColumnInfo,
    SplitMetadata,
    plain_name_error,
)
from arrowmt.io import (
    DEFAULT_ACCESS,
    WORD,
    WordRanges,
    advise,
    check_access,
    pages_resident,
    read_ahead,
    will_need,
)
from arrowmt.reading._offsets_crc import OffsetChecks
from arrowmt.reading._spans import flat_positions, take_flat
from arrowmt.storage import is_mirror

if TYPE_CHECKING:
    from arrowmt.storage import BlockFile

IPC_FILE_MAGIC = b"ARROW1"


@dataclass(frozen=True)
class ColumnLayout:
    """Where each record batch of one column lives, in int32 units from the start of the file."""

    offsets_pos: np.ndarray
    values_pos: np.ndarray
    values_len: np.ndarray


@dataclass(frozen=True)
class BatchOffsets:
    """One record batch of one column: batch number, first row, offsets (a view), values place in ``words``."""

    batch: int
    first_row: int
    offsets: np.ndarray
    values_pos: int
    values_len: int


@dataclass(frozen=True)
class FileIdentity:
    """Which file, in which state: device, inode, size, modification and status-change times.

    Any write, truncation, ``utime``, ``chmod`` or new hard link changes ``ctime_ns``;
    an atomic replacement changes the inode. So an equal identity means the same bytes,
    unless the file was written twice within one timestamp tick (the kernel's coarse
    clock, milliseconds): see :data:`RACY_NS`.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of_stat(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        """The identity of ``path`` now (symbolic links followed)."""
        return cls.of_stat(_stat_or_error(path))


@dataclass(frozen=True)
class FileStamp:
    """Size and modification time of a file when it was opened."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, identity: FileIdentity) -> FileStamp:
        """The stamp of a file whose identity is ``identity``."""
        return cls(identity.size, identity.mtime_ns)

    def change_to(self, now: FileStamp) -> str:
        """How the file changed between this stamp and ``now``, for error messages."""
        return f"size {self.size} -> {now.size} bytes, mtime_ns {self.mtime_ns} -> {now.mtime_ns}"


class SplitFile:
    """One split file, memory-mapped and validated; picklable by path.

    ``access`` is the map's access advice (:mod:`arrowmt.io._advice`): ``"random"``
    (the default: a page fault reads just its page), ``"sequential"`` for whole-file passes,
    or ``"normal"`` (the kernel's read-around).
    """

    def __init__(self, path: str | os.PathLike[str], access: str = DEFAULT_ACCESS) -> None:
        self.path = Path(path)
        self.access = check_access(access)
        self._open()

    def _open(self) -> None:
        self.remote = _attached(self.path)  # the block cache when the file caches a remote one
        self.identity, self._map = _map_file(self.path)
        advise(self._map, self.access)
        self.stamp = FileStamp.of(self.identity)
        self.words = np.frombuffer(self._map, dtype=np.int32, count=len(self._map) // 4)
        schema, batches, batch_metadata = _read_stream(self.path, self._map)
        self.metadata = _parse_metadata(self.path, schema)
        self.columns = tuple(self.metadata.columns)
        _check_schema(self.path, schema, self.columns)
        _check_batch_sizes(self.path, batches, self.metadata)
        _check_batches_valid(self.path, batches, self.columns)
        base = pa.py_buffer(self._map).address
        self.layouts = {
            name: _column_layout(self.path, name, [b.column(k) for b in batches], base, self.words)
            for k, name in enumerate(self.columns)
        }
        batch_rows = [b.num_rows for b in batches]
        offsets_at = [self.layouts[c].offsets_pos for c in self.columns]
        self.offset_checks = OffsetChecks.of(
            self.path,
            self.columns,
            batch_metadata,
            batch_rows,
            self.words,
            offsets_at,
            self._offsets_ahead,
            self._words_resident,
        )

    def __reduce__(self) -> tuple[object, tuple[Path, str, FileStamp]]:
        """Pickled by path: the copy is this process's shared open file (:func:`open_split_file`), refused if the
        file changed since."""
        return (_reopened, (self.path, self.access, self.stamp))

    def __len__(self) -> int:
        return self.metadata.rows

    @property
    def rows_per_batch(self) -> int:
        return self.metadata.rows_per_batch

    def check_unchanged(self) -> None:
        """Raise FormatError if the file on disk was replaced, resized or touched since opening."""
        now = _stamp_or_error(self.path)
        if now != self.stamp:
            raise FormatError(
                f"{self.path}: file changed under the live memory map ({self.stamp.change_to(now)}); reopen the dataset"
            )

    def advise(self, access: str) -> None:
        """Change the map's access advice (see the class); later reopenings (pickles) keep it."""
        self.access = check_access(access)
        advise(self._map, self.access)

    def word_ranges(self, column: str, rows: np.ndarray, values: bool) -> WordRanges:
        """Where ``rows`` of ``column`` lie in the map, for read-ahead (rows are bounds-checked).

        ``values=False``: each row's two offsets, found without reading the file;
        ``values=True``: each row's tokens (reads the offsets, as a gather does).
        """
        if values:
            starts, lengths = self.spans(column, rows)
        else:
            rows = np.asarray(rows, dtype=np.int64)
            check_indices(rows, len(self), self.path)
            batch, local = np.divmod(rows, self.rows_per_batch)
            starts = self.layouts[column].offsets_pos[batch] + local
            lengths = np.full(starts.shape, 2, dtype=np.int64)
        return self.ranges(starts, lengths)

    def ranges(self, starts: np.ndarray, lengths: np.ndarray) -> WordRanges:
        """The word ranges ``[starts[i], starts[i] + lengths[i])`` of this file's map, for read-ahead."""
        return WordRanges(self._map, self.words.ctypes.data, starts, lengths, self.remote)

    def words_range(self, start: int, length: int) -> np.ndarray:
        """Words ``[start, start + length)``: a view of the map, or a fetched copy when the file is remote."""
        if self.remote is None:
            return self.words[start : start + length]
        return self.copy_words(np.array([start], dtype=np.int64), np.array([length], dtype=np.int64))

    def copy_words(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The word ranges ``[starts[i], starts[i] + lengths[i])`` concatenated (a copy; fetched first when remote)."""
        if self.remote is None:
            return take_flat(self.words, starts, lengths)
        from arrowmt.reading._mirror import guarded_copy  # loaded by _attached already

        return guarded_copy(self.remote, self.words, starts, lengths)

    def stretch_ranges(self, column: str, starts: np.ndarray, ends: np.ndarray) -> tuple[WordRanges, np.ndarray]:
        """Where the tokens of each stretch of rows ``[starts[i], ends[i])`` lie, for planning ahead: a range per
        record batch a stretch touches (its tokens there, from the first row's first to the last row's last), and
        each range's stretch. A hint: offsets are read unchecked, every range is kept inside its record batch's
        values, and an empty stretch (or one past the end) is one empty range."""
        layout, words, top = self.layouts[column], self.words, max(len(self) - 1, 0)
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        first_batch, first_local = np.divmod(np.clip(starts, 0, top), self.rows_per_batch)
        last_batch, last_local = np.divmod(np.clip(ends - 1, np.clip(starts, 0, top), top), self.rows_per_batch)
        spanned = last_batch - first_batch + 1  # record batches each stretch touches
        owner = np.repeat(np.arange(starts.shape[0], dtype=np.int64), spanned)
        batch = flat_positions(first_batch, spanned)
        low = layout.values_pos[batch]
        high = low + layout.values_len[batch]
        head = batch == first_batch[owner]  # the first record batch of its stretch: from the first row's tokens
        tail = batch == last_batch[owner]  # the last: to the last row's end
        begin = np.where(head, low + words[layout.offsets_pos[batch] + first_local[owner]], low)
        finish = np.where(tail, low + words[layout.offsets_pos[batch] + last_local[owner] + 1], high)
        begin = np.clip(begin, low, high)
        real = (ends > starts) & (starts < len(self))  # an empty stretch, or one past the end: an empty range
        lengths = np.where(real[owner], np.clip(finish, begin, high) - begin, 0)
        return self.ranges(begin, lengths), owner

    def spans(self, column: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start positions (in ``words``) and lengths of ``rows`` of ``column``, bounds-checked."""
        rows = np.asarray(rows, dtype=np.int64)
        check_indices(rows, len(self), self.path)
        layout = self.layouts[column]
        batch, local = np.divmod(rows, self.rows_per_batch)
        at = layout.offsets_pos[batch] + local
        start, end = self.words[at], self.words[1:][at]
        limit = layout.values_len[batch]
        # As uint32 a negative offset wraps past any limit, so two compares check 0 <= start <= end <= limit.
        bad = (start.view(np.uint32) > end.view(np.uint32)) | (end.view(np.uint32) > limit)
        if np.count_nonzero(bad):
            self._raise_bad_offsets(column, rows, start, end, limit, bad)
        self.offset_checks.ensure(column, batch, local)  # each piece's checksum, on its first use
        return layout.values_pos[batch] + start, np.subtract(end, start, dtype=np.int64)

    def lengths(self, column: str, rows: np.ndarray | None = None, dtype: type | np.dtype = np.int64) -> np.ndarray:
        """Token counts of ``rows`` (all rows when None), read from the offsets only.

        ``dtype`` is int64 or any integer dtype holding ``2**31 - 1`` (a count fits int32).
        All rows are one ``np.diff`` of each record batch's offsets, checked as :meth:`spans`
        checks them (FormatError naming the first bad row).
        """
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu" or np.iinfo(dtype).max < 2**31 - 1:
            raise InvalidParameterError(f"dtype: expected an integer dtype holding 2**31 - 1, got {dtype}")
        if rows is not None:
            return self.spans(column, rows)[1].astype(dtype, copy=False)
        out = np.empty(len(self), dtype=dtype)
        self.will_need_offsets(column)
        for batch in self.batch_offsets(column):
            counts = self.batch_lengths(column, batch)
            out[batch.first_row : batch.first_row + counts.shape[0]] = counts
        return out

    def check_offsets(self) -> None:
        """Check every offset of every column (vectorized per record batch); FormatError naming the first bad row.

        After this, any Arrow reader reads exactly the rows arrowmt reads: every row lies
        inside its batch's values, which the open checked lie inside the file.
        """
        for column in self.columns:
            self.will_need_offsets(column)
            for batch in self.batch_offsets(column):
                self.batch_lengths(column, batch)

    def batch_lengths(self, column: str, batch: BatchOffsets) -> np.ndarray:
        """Row lengths of one record batch of :meth:`batch_offsets`, after checking every offset.

        FormatError (naming the first bad row) unless ``0 <= start <= end <= values`` for every row,
        then unless the offsets' CRC-32 is the one recorded at conversion (files that record it).
        """
        offsets = batch.offsets
        counts = np.diff(offsets)
        # As uint32 a negative offset wraps past any limit; with all offsets in 0..limit the diff is exact.
        if int(offsets.view(np.uint32).max()) > batch.values_len or (counts.size and int(counts.min()) < 0):
            first = batch.first_row
            self.spans(column, np.arange(first, first + counts.shape[0]))  # raises FormatError naming the row
            raise FormatError(
                f"{self.path}: record batch {batch.batch} ({column}): offsets are invalid; the file is corrupt"
            )
        self.offset_checks.ensure_one(column, batch.batch)
        return counts

    def will_need_offsets(self, column: str, batches: np.ndarray | None = None) -> None:
        """Start reading the offsets of ``column`` in record batches ``batches`` (default: all; one read-ahead
        per record batch) before a pass over them."""
        count = self.layouts[column].offsets_pos.shape[0]
        batches = np.arange(count) if batches is None else np.asarray(batches, dtype=np.int64)
        self.will_need_rows_offsets(column, batches, np.zeros_like(batches), np.full_like(batches, self.rows_per_batch))

    def will_need_rows_offsets(self, column: str, batches: np.ndarray, first: np.ndarray, rows: np.ndarray) -> None:
        """Start reading the offsets of ``rows`` rows (fewer at the file's end) from row ``first`` of each record
        batch of ``batches``."""
        rows = np.minimum(rows, np.maximum(len(self) - batches * self.rows_per_batch - first, 0))
        will_need([self.ranges(self.layouts[column].offsets_pos[batches] + first, rows + 1)])

    def _words_resident(self, words: np.ndarray) -> bool:
        """Whether the pages holding ``words`` are in the page cache (False through a remote cache: its blocks are
        fetched as reads need them)."""
        return self.remote is None and pages_resident([self.ranges(words, np.ones_like(words))])

    def _offsets_ahead(self, first: np.ndarray, end: np.ndarray) -> None:
        """Ask for the offsets bytes ``[first[i], end[i])`` about to be checked (a hint, through the residency gate)."""
        read_ahead([self.ranges(first // WORD, -(-(end - first) // WORD))])

    def stored_offsets(self, column: str, b: int) -> np.ndarray:
        """Record batch ``b``'s offsets of ``column`` as stored (an unchecked view of the map)."""
        pos = int(self.layouts[column].offsets_pos[b])
        return self.words[pos : pos + min(self.rows_per_batch, len(self) - b * self.rows_per_batch) + 1]

    def batch_offsets(self, column: str) -> Iterator[BatchOffsets]:
        """Each record batch of ``column``: its rows' offsets (an unchecked view) and where its values are.

        :meth:`batch_lengths` checks a batch's offsets (range and checksum) before its rows are used.
        """
        layout, n, rpb = self.layouts[column], len(self), self.rows_per_batch
        places = zip(layout.offsets_pos.tolist(), layout.values_pos.tolist(), layout.values_len.tolist(), strict=True)
        for b, (pos, values_pos, values_len) in enumerate(places):
            count = min(rpb, n - b * rpb)
            yield BatchOffsets(b, b * rpb, self.words[pos : pos + count + 1], values_pos, values_len)

    def row(self, column: str, i: int) -> np.ndarray:
        """Row ``i`` of ``column`` as a writable int32 view of the map (no copy; a copy when the file is remote)."""
        start, length = self.spans(column, np.array([i]))
        if self.remote is not None:
            return self.copy_words(start, length)
        s = int(start[0])
        return self.words[s : s + int(length[0])]

    def _raise_bad_offsets(
        self,
        column: str,
        rows: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        limit: np.ndarray,
        bad: np.ndarray,
    ) -> None:
        k = int(np.flatnonzero(bad)[0])
        raise FormatError(
            f"{self.path}: row {int(rows[k])} ({column}): offsets {int(start[k])}..{int(end[k])} are "
            f"invalid (expected 0 <= start <= end <= {int(limit[k])}); the file is corrupt"
        )


_OFFSETS_CHECKED: set[FileIdentity] = set()
RACY_NS = 2_000_000_000  # files changed this recently are checked every time (timestamp granularity)
_OPEN: weakref.WeakValueDictionary[tuple[Path, FileIdentity, str], SplitFile] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


def open_split_file(path: str | os.PathLike[str], access: str = DEFAULT_ACCESS) -> SplitFile:
    """The split file at ``path``, opened once per process while it is unchanged: every reader of the file (datasets,
    views, mixtures, block datasets, copies, unpickled copies in DataLoader workers) shares one :class:`SplitFile`,
    so one map, one validation and one set of offsets checks (what a piece was found to hold is checked once for
    them all).

    Shared by path, :class:`FileIdentity` and access advice; a file that changes in any way has another identity
    and is opened anew. A file changed less than :data:`RACY_NS` ago is not shared (its timestamps could hide a
    second change within the same tick): each open then maps and validates it, as an open always did. Nothing is
    kept once no reader holds the file.
    """
    path, access = Path(path), check_access(access)
    started = time.time_ns()
    key = (path, FileIdentity.of(path), access)
    with _OPEN_LOCK:
        shared = _OPEN.get(key)
    if shared is not None:
        return shared
    opened = SplitFile(path, access)
    if opened.identity == key[1] and opened.identity.ctime_ns < started - RACY_NS:
        with _OPEN_LOCK:
            opened = _OPEN.setdefault(key, opened)
    return opened


def _reopened(path: Path, access: str, stamp: FileStamp) -> SplitFile:
    """A pickled :class:`SplitFile`: this process's open file at ``path``, refused if it changed since ``stamp``."""
    opened = open_split_file(path, access)
    if opened.stamp != stamp:
        raise FormatError(
            f"{path}: file changed since it was first opened ({stamp.change_to(opened.stamp)}); reopen the dataset"
        )
    return opened


def ensure_offsets_checked(split: SplitFile) -> None:
    """:meth:`SplitFile.check_offsets` once per file state in this process (remembered by :class:`FileIdentity`).

    Call it before handing the file to a library that trusts Arrow offsets (pyarrow's
    readers, Hugging Face ``datasets``): a corrupt middle offset would make them read
    outside the file (segfault, SIGBUS) or return other rows. The memo lives in memory
    only (nothing is written); a new process checks again, which costs one pass over
    the offsets (4 bytes per row and column: about 2 ms per million rows of a pair in
    the page cache). A file changed in any way (write, ``utime``, ``chmod``, new hard
    link, replacement) has another identity and is checked again. File timestamps
    advance in coarse ticks, so a file changed less than ``RACY_NS`` before the check is
    not remembered (as git treats "racily clean" files): a second write within the same
    tick could keep its identity.
    """
    if split.identity in _OFFSETS_CHECKED:
        return
    started = time.time_ns()
    split.check_offsets()
    if split.identity.ctime_ns < started - RACY_NS:
        _OFFSETS_CHECKED.add(split.identity)


def _stamp_or_error(path: Path) -> FileStamp:
    st = _stat_or_error(path)
    return FileStamp(st.st_size, st.st_mtime_ns)


def _stat_or_error(path: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError as exc:
        raise FormatError(f"{path}: no such split file (removed since it was opened?)") from exc
    except OSError as exc:
        raise FormatError(f"{path}: cannot stat: {exc.strerror or exc}") from exc


def _map_file(path: Path) -> tuple[FileIdentity, mmap.mmap]:
    """Map ``path`` copy-on-write; the identity comes from the same open file, so size and map agree."""
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            _check_head(path, st.st_size, handle.read(len(IPC_FILE_MAGIC)))
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
    except FileNotFoundError as exc:
        raise FormatError(f"{path}: no such split file") from exc
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: cannot map: {getattr(exc, 'strerror', None) or exc}") from exc
    if len(mapped) != st.st_size:
        mapped.close()
        raise FormatError(f"{path}: file size changed while opening ({st.st_size} -> {len(mapped)} bytes)")
    return FileIdentity.of_stat(st), mapped


def _check_head(path: Path, size: int, head: bytes) -> None:
    if size < 8:
        raise FormatError(f"{path}: {size} bytes is too small for an Arrow IPC stream (expected >= 8)")
    if head == IPC_FILE_MAGIC:
        raise FormatError(f"{path}: this is an Arrow IPC *file* (Feather v2); arrowmt splits are Arrow IPC streams")


def _read_stream(
    path: Path, mapped: mmap.mmap
) -> tuple[pa.Schema, list[pa.RecordBatch], list[pa.KeyValueMetadata | None]]:
    """The schema, the record batches and each batch's custom metadata (its offsets checksum)."""
    try:
        reader = ipc.open_stream(pa.BufferReader(pa.py_buffer(mapped)))
        batches, metadata = [], []
        for batch, custom in reader.iter_batches_with_custom_metadata():
            batches.append(batch)
            metadata.append(custom)
        return reader.schema, batches, metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise FormatError(f"{path}: not a readable Arrow IPC stream (truncated or corrupt): {exc}") from exc


def _parse_metadata(path: Path, schema: pa.Schema) -> SplitMetadata:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise FormatError(
            f"{path}: Arrow stream has no arrowmt metadata (schema key {METADATA_KEY.decode()!r}); "
            "it was not written by arrowmt"
        )
    try:
        meta = SplitMetadata.from_json(raw, str(path))
    except RecursionError as exc:
        raise FormatError(f"{path}: arrowmt metadata is nested too deeply to be arrowmt metadata") from exc
    _check_metadata_values(path, meta)
    return meta


def _check_metadata_values(path: Path, meta: SplitMetadata) -> None:
    """Values the reader, ``verify`` and the collater compute with must have the documented types."""
    if not isinstance(meta.columns, dict) or not meta.columns:
        raise FormatError(f"{path}: metadata 'columns': expected at least one column, got {meta.columns!r}")
    _expect_int(path, "rows", meta.rows, 0)
    _expect_int(path, "rows_per_batch", meta.rows_per_batch, 1)
    for key, value in vars(meta.special_ids).items():
        _expect_int(path, f"special_ids.{key}", value, 0)
    for name, info in meta.columns.items():
        _expect_int(path, f"columns.{name}.vocab_size", info.vocab_size, 0)
        _expect_int(path, f"columns.{name}.tokens", info.tokens, 0)
        for key in ("dictionary", "dictionary_sha256"):
            if not isinstance(getattr(info, key), str):
                raise FormatError(
                    f"{path}: metadata 'columns.{name}.{key}': expected a string, got {getattr(info, key)!r}"
                )
        _check_names(path, name, info)


def _check_names(path: Path, name: str, info: ColumnInfo) -> None:
    """A column's language and dictionary become parts of file names (exports): plain names only."""
    names = (("lang", info.lang, ""), ("dictionary", info.dictionary, DICTIONARY_SUFFIX))
    for key, value, suffix in names:
        if (value is not None or key != "lang") and (error := plain_name_error(value, suffix)):
            raise FormatError(f"{path}: metadata 'columns.{name}.{key}': {error}")


def _expect_int(path: Path, key: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise FormatError(f"{path}: metadata {key!r}: expected an integer >= {minimum}, got {value!r}")


def _check_schema(path: Path, schema: pa.Schema, columns: tuple[str, ...]) -> None:
    try:
        actual = tuple(schema.names)
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: schema column names are not valid UTF-8 (corrupt file): {exc}") from exc
    if actual != columns:
        raise FormatError(f"{path}: schema columns: expected {list(columns)}, got {list(actual)}")
    for fld in schema:
        if fld.type != TOKEN_TYPE:
            raise FormatError(f"{path}: column {fld.name!r}: expected type {TOKEN_TYPE}, got {fld.type}")


def _check_batch_sizes(path: Path, batches: list[pa.RecordBatch], meta: SplitMetadata) -> None:
    rpb = meta.rows_per_batch
    expected_batches = -(-meta.rows // rpb)
    if len(batches) != expected_batches:
        raise FormatError(
            f"{path}: expected {expected_batches} record batches for {meta.rows} rows "
            f"at {rpb} rows each, got {len(batches)}"
        )
    for k, batch in enumerate(batches):
        want = min(rpb, meta.rows - k * rpb)
        if batch.num_rows != want:
            raise FormatError(f"{path}: record batch {k}: expected {want} rows, got {batch.num_rows}")


def _check_batches_valid(path: Path, batches: list[pa.RecordBatch], columns: tuple[str, ...]) -> None:
    """pyarrow's cheap validation: lengths, buffer sizes, first/last offsets (reads no token data).

    It must run before any array attribute that trusts those numbers (null counts,
    child arrays): pyarrow does not check them when reading a stream.
    """
    for k, batch in enumerate(batches):
        for name, array in zip(columns, batch.columns, strict=True):
            _validate(f"{path}: record batch {k}, column {name!r}", array)
        _validate(f"{path}: record batch {k}", batch)


def _validate(where: str, data: pa.Array | pa.RecordBatch) -> None:
    try:
        data.validate()
    except (pa.ArrowException, ValueError) as exc:
        raise FormatError(f"{where} is corrupt: {exc}") from exc


def _column_layout(path: Path, name: str, arrays: list[pa.ListArray], base: int, words: np.ndarray) -> ColumnLayout:
    located = [_locate(path, name, k, arr, base, words) for k, arr in enumerate(arrays)]
    table = np.array(located, dtype=np.int64).reshape(-1, 3)
    return ColumnLayout(table[:, 0].copy(), table[:, 1].copy(), table[:, 2].copy())


def _locate(path: Path, name: str, k: int, arr: pa.ListArray, base: int, words: np.ndarray) -> tuple[int, int, int]:
    where = f"{path}: record batch {k}, column {name!r}"
    nulls = arr.null_count + arr.values.null_count
    if nulls:
        raise FormatError(f"{where}: expected no nulls, got {nulls}")
    _, offsets_buf, _, values_buf = arr.buffers()
    n_values = len(arr.values)
    off_pos = _word_position(where, "offsets", offsets_buf, base, words, arr.offset, len(arr) + 1)
    val_pos = _word_position(where, "values", values_buf, base, words, arr.values.offset, n_values)
    first, last = int(words[off_pos]), int(words[off_pos + len(arr)])
    if first != 0 or last != n_values:
        raise FormatError(
            f"{where}: offsets run {first}..{last}, expected 0..{n_values} "
            "(batch-local offsets covering every value; the file is corrupt)"
        )
    return off_pos, val_pos, n_values


def _word_position(
    where: str, what: str, buf: pa.Buffer | None, base: int, words: np.ndarray, first: int, count: int
) -> int:
    """Index in ``words`` of element ``first`` of ``buf``, checking ``count`` elements fit in the file."""
    if count == 0:
        return 0
    if buf is None:
        raise FormatError(f"{where}: {what} buffer missing (expected {count} int32 values)")
    delta = buf.address - base
    if not 0 <= delta <= words.nbytes:
        raise FormatError(
            f"{where}: {what} buffer is not inside the mapped file (compressed or re-encoded stream?); "
            "arrowmt splits are uncompressed"
        )
    if delta % ALIGNMENT:
        raise FormatError(f"{where}: {what} buffer starts at byte {delta}, expected a multiple of 4")
    pos = delta // ALIGNMENT + first
    if buf.size < (first + count) * 4 or pos + count > words.shape[0]:
        raise FormatError(
            f"{where}: {what} buffer holds {buf.size} bytes, expected {(first + count) * 4} inside the file"
        )
    return pos


def row_numbers(indices: object, where: str) -> np.ndarray:
    """``indices`` as an int64 array; IndexError naming ``where`` for values that are not int64 row numbers."""
    try:
        return np.asarray(indices, dtype=np.int64)
    except (OverflowError, TypeError, ValueError) as exc:
        raise IndexError(f"{where}: expected int64 row numbers, got {str(indices)[:80]} ({exc})") from None


def indices_within(indices: np.ndarray, n: int) -> np.ndarray:
    """``indices`` (as int64) without those outside ``0 <= i < n``: for hints, which name nothing for a bad index
    and leave the error to the read (:func:`check_indices`)."""
    indices = np.asarray(indices, dtype=np.int64)
    return indices[(indices >= 0) & (indices < n)]


def check_indices(indices: np.ndarray, n: int, where: object) -> None:
    """IndexError naming ``where`` (its ``str``, made only then) and the first index outside ``0 <= i < n`` (int64
    ``indices``).

    One reduction on the fast path: viewed as uint64, negative indices wrap past any ``n``.
    """
    if indices.size and np.maximum.reduce(indices.view(np.uint64), axis=None) >= n:
        bad = indices[(indices < 0) | (indices >= n)][0]
        raise IndexError(f"{where}: row {int(bad)} out of range (expected 0 <= row < {n})")


def _attached(path: Path) -> BlockFile | None:
    """The block cache's file of split file ``path`` when its folder mirrors a remote corpus, else None. The
    mirror's code (the block store, block indexes) is loaded for a mirror only: reading a local corpus never pays
    for it (memory in every rank)."""
    if not is_mirror(path.parent):
        return None
    from arrowmt.reading._mirror import attached_file

    return attached_file(path)
