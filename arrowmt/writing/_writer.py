"""Write token columns to an arrowmt split file (Arrow IPC stream, uncompressed, atomic).

Two ways in: :func:`write_split` writes columns held in memory; :func:`open_split_writer`
streams rows in pieces of any size (a converter's chunks) into record batches of exactly
``rows_per_batch`` rows, in bounded memory. The split's metadata (rows, tokens per
column, rows per batch) sits in the stream's schema, before the first batch, so the
streaming writer is opened with it and checks at the end that the rows match it.
Both produce the same bytes for the same rows, whatever the pieces. Each record batch
carries the CRC-32 of each column's offsets (see :mod:`arrowmt.reading._offsets_crc`), which
readers check before they first use the batch's rows.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from tqdm import tqdm

from arrowmt._checks import check_integer
from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt.files import atomic_path, progress_bar
from arrowmt.format import (
    DEFAULT_ROWS_PER_BATCH,
    MAX_LIST_VALUES,
    ColumnInfo,
    SpecialIds,
    SplitMetadata,
    id_outside,
    token_schema,
)
from arrowmt.reading import PIECE_ROWS as OFFSETS_PIECE_ROWS
from arrowmt.reading import Ragged, encode_offsets_crcs

PIECE_ROWS = 1 << 18  # rows read at a time from a RowSource


class RowSource(Protocol):
    """Rows of one column read block by block (e.g. from a large file), never all in memory at once."""

    @property
    def tokens(self) -> int: ...

    def __len__(self) -> int: ...

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        """Row lengths, ``block_rows`` rows at a time."""
        ...

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        """The rows, ``block_rows`` at a time."""
        ...


@dataclass(frozen=True)
class ColumnData:
    """One column to write: its rows (in memory, or read block by block) and where its ids come from."""

    ragged: Ragged | RowSource
    lang: str | None
    dictionary_file: str
    dictionary_sha256: str
    vocab_size: int
    origin: str


def choose_rows_per_batch(
    offsets: list[np.ndarray], requested: int = DEFAULT_ROWS_PER_BATCH, limit: int = MAX_LIST_VALUES
) -> int:
    """Largest power-of-two fraction of ``requested`` rows whose batches hold <= ``limit`` values per column."""
    return _halve_until_fits([_window_of_offsets(off) for off in offsets], requested, limit)


def choose_rows_per_batch_streaming(
    columns: Iterable[Callable[[], Iterable[np.ndarray]]],
    requested: int = DEFAULT_ROWS_PER_BATCH,
    limit: int = MAX_LIST_VALUES,
) -> int:
    """:func:`choose_rows_per_batch` from row lengths read in pieces.

    Each element of ``columns`` returns, on every call, a fresh iterator over one column's row
    lengths in order (pieces of any size), so that huge columns never sit in memory at once;
    a column is read again only in the rare case that a batch must be halved.
    """
    return _halve_until_fits([_window_of_pieces(lengths) for lengths in columns], requested, limit)


def _halve_until_fits(windows: list[Callable[[int], int]], requested: int, limit: int) -> int:
    """``windows[c](rows)``: the most values any batch of ``rows`` rows of column ``c`` holds."""
    if requested < 1:
        raise InvalidParameterError(f"rows_per_batch: expected >= 1, got {requested}")
    rows = requested
    while rows > 1 and any(window(rows) > limit for window in windows):
        rows //= 2
    worst = max((window(rows) for window in windows), default=0)
    if worst > limit:
        raise InputDataError(f"a single row holds {worst} tokens; at most {limit} fit one Arrow list array")
    return rows


def _window_of_offsets(offsets: np.ndarray) -> Callable[[int], int]:
    def window(rows: int) -> int:
        """Largest number of values in any batch of ``rows`` consecutive rows starting at a multiple of rows."""
        n = offsets.shape[0] - 1
        if n <= 0:
            return 0
        starts = np.arange(0, n, rows)
        ends = np.minimum(starts + rows, n)
        return int((offsets[ends] - offsets[starts]).max())

    return window


def _window_of_pieces(lengths: Callable[[], Iterable[np.ndarray]]) -> Callable[[int], int]:
    def window(rows: int) -> int:
        """As :func:`_window_of_offsets`, over row lengths arriving in pieces (one piece in memory at a time)."""
        worst, seen, total, batch_start = 0, 0, 0, 0  # rows seen, values seen, values before the current batch
        for piece in lengths():
            cumulative = total + np.cumsum(piece, dtype=np.int64)
            ends = np.arange(rows - seen % rows, cumulative.shape[0] + 1, rows)  # batch ends inside this piece
            if ends.size:
                bounds = np.concatenate(([batch_start], cumulative[ends - 1]))
                worst = max(worst, int(np.diff(bounds).max()))
                batch_start = int(bounds[-1])
            seen += cumulative.shape[0]
            total = int(cumulative[-1]) if cumulative.size else total
        return max(worst, total - batch_start)

    return window


def write_split(
    path: str | os.PathLike[str],
    split: str,
    columns: dict[str, ColumnData],
    *,
    special_ids: SpecialIds | None = None,
    source_format: str = "unknown",
    rows_per_batch: int = DEFAULT_ROWS_PER_BATCH,
    overwrite: bool = True,
    progress: bool = False,
    piece_rows: int = OFFSETS_PIECE_ROWS,
    stored_order: dict[str, str] | None = None,
) -> SplitMetadata:
    """Write ``columns`` as one split file at ``path`` atomically and return its metadata.

    Columns held in memory are written as they are; if any column is a :class:`RowSource`, every
    column is read :data:`PIECE_ROWS` rows at a time (memory bounded whatever the split's size).
    ``piece_rows``: rows per offsets checksum piece (:mod:`arrowmt.reading._offsets_crc`). ``stored_order``: what a
    copy in plan order records of it (:func:`arrowmt.stored._row_order.order_marker`).
    """
    rows = check_same_rows(split, {name: len(col.ragged) for name, col in columns.items()}, _origins(columns))
    in_memory = {name: col.ragged for name, col in columns.items() if isinstance(col.ragged, Ragged)}
    if len(in_memory) == len(columns):
        rpb = choose_rows_per_batch([r.offsets for r in in_memory.values()], rows_per_batch, limit=MAX_LIST_VALUES)
        tokens = {name: int(ragged.offsets[-1]) for name, ragged in in_memory.items()}
        pieces: Iterable[dict[str, Ragged]] = [in_memory]
    else:
        sources = {name: _as_source(col.ragged) for name, col in columns.items()}
        readers = [lambda source=source: source.lengths(PIECE_ROWS) for source in sources.values()]
        rpb = choose_rows_per_batch_streaming(readers, rows_per_batch, limit=MAX_LIST_VALUES)
        tokens = {name: source.tokens for name, source in sources.items()}
        blocks = zip(*(source.pieces(PIECE_ROWS) for source in sources.values()), strict=True)
        pieces = (dict(zip(sources, block, strict=True)) for block in blocks)
    infos = {name: column_info(name, col, tokens[name]) for name, col in columns.items()}
    meta = SplitMetadata(
        split=split,
        rows=rows,
        rows_per_batch=rpb,
        columns=infos,
        special_ids=special_ids or SpecialIds(),
        source_format=source_format,
        stored_order=stored_order,
    )
    with open_split_writer(
        path, meta, origins=_origins(columns), overwrite=overwrite, progress=progress, piece_rows=piece_rows
    ) as writer:
        for piece in pieces:
            writer.write(piece)
    return meta


def _as_source(rows: Ragged | RowSource) -> RowSource:
    return _RaggedRows(rows) if isinstance(rows, Ragged) else rows


class _RaggedRows:
    """A Ragged seen as a RowSource (to be read alongside one)."""

    def __init__(self, ragged: Ragged) -> None:
        self.ragged = ragged
        self.tokens = int(ragged.offsets[-1])

    def __len__(self) -> int:
        return len(self.ragged)

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        for start in range(0, len(self.ragged), block_rows):
            yield np.diff(self.ragged.offsets[start : start + block_rows + 1])

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        for start in range(0, len(self.ragged), block_rows):
            offsets, values = _rows_of(self.ragged, start, min(start + block_rows, len(self.ragged)))
            yield Ragged(offsets, values)


def _origins(columns: dict[str, ColumnData]) -> dict[str, str]:
    return {name: col.origin for name, col in columns.items()}


def check_same_rows(split: str, counts: dict[str, int], origins: dict[str, str]) -> int:
    """The common row count of a split's columns (``counts``: rows per column); InputDataError if they differ."""
    if not counts:
        raise InvalidParameterError(f"columns: expected at least one column for split {split!r}, got none")
    if len(set(counts.values())) != 1:
        detail = ", ".join(f"{origins.get(n, split)} ({n}): {c} rows" for n, c in counts.items())
        raise InputDataError(f"split {split!r}: columns must have the same number of rows, got {detail}")
    return next(iter(counts.values()))


def column_info(name: str, col: ColumnData, tokens: int) -> ColumnInfo:
    """The metadata of column ``name`` holding ``tokens`` ids in all."""
    return ColumnInfo(
        role=name,
        lang=col.lang,
        dictionary=col.dictionary_file,
        dictionary_sha256=col.dictionary_sha256,
        vocab_size=col.vocab_size,
        tokens=tokens,
    )


# ----- streaming ----------------------------------------------------------------------------------


@contextlib.contextmanager
def open_split_writer(
    path: str | os.PathLike[str],
    meta: SplitMetadata,
    *,
    origins: dict[str, str] | None = None,
    overwrite: bool = True,
    progress: bool = False,
    piece_rows: int = OFFSETS_PIECE_ROWS,
) -> Iterator[SplitWriter]:
    """Open a split file for streaming: yields a :class:`SplitWriter`; the file appears atomically on exit.

    ``meta`` is final (it goes into the schema first); leaving the block checks that the rows
    and tokens written match it. On any error, nothing is left at ``path``.
    ``origins`` names each column's source in error messages.
    """
    check_same_rows(meta.split, {name: meta.rows for name in meta.columns}, origins or {})
    schema = token_schema(tuple(meta.columns), meta.to_json())
    options = ipc.IpcWriteOptions(compression=None)
    bar = progress_bar(total=meta.rows, desc=f"write {meta.split}", unit="rows", enabled=progress)
    with (
        atomic_path(path, overwrite) as tmp,
        pa.OSFile(str(tmp), "wb") as sink,
        ipc.new_stream(sink, schema, options=options) as stream,
        bar,
    ):
        writer = SplitWriter(stream, schema, meta, origins or {}, bar, piece_rows)
        yield writer
        writer.finish()


class SplitWriter:
    """Cuts the rows it is given, in pieces of any size, into record batches of ``meta.rows_per_batch`` rows."""

    def __init__(
        self,
        stream: ipc.RecordBatchStreamWriter,
        schema: pa.Schema,
        meta: SplitMetadata,
        origins: dict[str, str],
        bar: tqdm,
        piece_rows: int = OFFSETS_PIECE_ROWS,
    ) -> None:
        self._stream = stream
        self._piece_rows = check_integer("piece_rows", piece_rows, 1, 2**31)
        self._schema = schema
        self._meta = meta
        self._origins = origins
        self._bar = bar
        self._pending = {name: _PendingRows() for name in meta.columns}
        self._written = 0
        self._tokens = dict.fromkeys(meta.columns, 0)

    def write(self, columns: dict[str, Ragged]) -> None:
        """Append the same number of rows to every column; full batches are written at once."""
        if set(columns) != set(self._meta.columns):
            raise InvalidParameterError(
                f"columns: expected {sorted(self._meta.columns)} for split {self._meta.split!r}, got {sorted(columns)}"
            )
        check_same_rows(self._meta.split, {name: len(r) for name, r in columns.items()}, self._origins)
        for name, ragged in columns.items():
            self._pending[name].add(ragged)
        rpb = self._meta.rows_per_batch
        while self._pending_rows() >= rpb:
            self._write_batch(rpb)

    def finish(self) -> None:
        """Write the last, shorter batch and check the totals against the metadata."""
        if self._pending_rows():
            self._write_batch(self._pending_rows())
        if self._written != self._meta.rows:
            raise InputDataError(
                f"split {self._meta.split!r}: expected {self._meta.rows} rows (as its metadata says), "
                f"got {self._written}"
            )
        for name, info in self._meta.columns.items():
            if self._tokens[name] != info.tokens:
                raise InputDataError(
                    f"split {self._meta.split!r}: column {name!r}: expected {info.tokens} tokens "
                    f"(as its metadata says), got {self._tokens[name]}"
                )

    def _pending_rows(self) -> int:
        return next(iter(self._pending.values())).rows

    def _write_batch(self, rows: int) -> None:
        """One record batch of ``rows`` rows, recording each column's offsets CRC-32s."""
        arrays, stored = [], {}
        for name in self._meta.columns:
            offsets, raw = self._pending[name].take(rows)
            stored[name] = offsets.astype("<i4")
            arrays.append(self._list_array(name, stored[name], raw))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
        self._stream.write_batch(batch, custom_metadata=encode_offsets_crcs(stored, self._piece_rows))
        self._written += rows
        self._bar.update(rows)

    def _list_array(self, name: str, offsets: np.ndarray, raw: np.ndarray) -> pa.ListArray:
        """Rows as a ``list<int32>`` array (int32 ``offsets`` from 0), every id checked against the dictionary."""
        self._check_ids(name, raw, offsets)
        self._tokens[name] += int(raw.shape[0])
        values = raw.astype(np.int32, copy=False)
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    def _check_ids(self, name: str, raw: np.ndarray, offsets: np.ndarray) -> None:
        """Every id must index the column's dictionary; name the first offending row if not."""
        info = self._meta.columns[name]
        if bad := id_outside(raw, offsets, info.vocab_size, f"the dictionary {info.dictionary}"):
            origin = self._origins.get(name, self._meta.split)
            raise InputDataError(f"{origin}: row {self._written + bad[0]} ({name}): {bad[1]}")


class _PendingRows:
    """Rows received but not yet written, as a queue of pieces."""

    def __init__(self) -> None:
        self._pieces: deque[tuple[Ragged, int]] = deque()  # (piece, first row not yet taken)
        self.rows = 0

    def add(self, ragged: Ragged) -> None:
        if len(ragged):
            self._pieces.append((ragged, 0))
            self.rows += len(ragged)

    def take(self, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``rows`` rows as (offsets starting at 0, values)."""
        parts = []
        needed = rows
        while needed:
            piece, start = self._pieces[0]
            stop = min(start + needed, len(piece))
            parts.append(_rows_of(piece, start, stop))
            needed -= stop - start
            if stop == len(piece):
                self._pieces.popleft()
            else:
                self._pieces[0] = (piece, stop)
        self.rows -= rows
        if len(parts) == 1:
            return parts[0]
        return _concatenate(parts)


def _rows_of(ragged: Ragged, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    offsets = ragged.offsets[start : stop + 1]
    base = int(offsets[0])
    return offsets - base, np.asarray(ragged.values[base : int(offsets[-1])])


def _concatenate(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.concatenate([np.diff(offsets) for offsets, _ in parts])
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    dtype = np.result_type(*(values.dtype for _, values in parts))
    return offsets, np.concatenate([values.astype(dtype, copy=False) for _, values in parts])
