"""Write token columns to an arrowmt split file (Arrow IPC stream, uncompressed, atomic)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt.format._atomic import atomic_path
from arrowmt.format._metadata import ColumnInfo, SpecialIds, SplitMetadata
from arrowmt.format._progress import progress_bar
from arrowmt.format._ragged import Ragged
from arrowmt.format._schema import DEFAULT_ROWS_PER_BATCH, MAX_LIST_VALUES, token_schema


@dataclass(frozen=True)
class ColumnData:
    """One column to write: its rows and where its ids come from."""

    ragged: Ragged
    lang: str | None
    dictionary_file: str
    dictionary_sha256: str
    vocab_size: int
    origin: str


def choose_rows_per_batch(
    offsets: list[np.ndarray], requested: int = DEFAULT_ROWS_PER_BATCH, limit: int = MAX_LIST_VALUES
) -> int:
    """Largest power-of-two fraction of ``requested`` rows whose batches hold <= ``limit`` values per column."""
    if requested < 1:
        raise InvalidParameterError(f"rows_per_batch: expected >= 1, got {requested}")
    rows = requested
    while rows > 1 and any(_max_window(off, rows) > limit for off in offsets):
        rows //= 2
    worst = max((_max_window(off, rows) for off in offsets), default=0)
    if worst > limit:
        raise InputDataError(f"a single row holds {worst} tokens; at most {limit} fit one Arrow list array")
    return rows


def _max_window(offsets: np.ndarray, rows: int) -> int:
    """Largest number of values in any batch of ``rows`` consecutive rows starting at a multiple of rows."""
    n = offsets.shape[0] - 1
    if n <= 0:
        return 0
    starts = np.arange(0, n, rows)
    ends = np.minimum(starts + rows, n)
    return int((offsets[ends] - offsets[starts]).max())


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
) -> SplitMetadata:
    """Write ``columns`` as one split file at ``path`` atomically and return its metadata."""
    rows = _common_row_count(split, columns)
    rpb = choose_rows_per_batch([c.ragged.offsets for c in columns.values()], rows_per_batch, limit=MAX_LIST_VALUES)
    infos = {name: _column_info(name, col) for name, col in columns.items()}
    meta = SplitMetadata(
        split=split,
        rows=rows,
        rows_per_batch=rpb,
        columns=infos,
        special_ids=special_ids or SpecialIds(),
        source_format=source_format,
    )
    schema = token_schema(tuple(columns), meta.to_json())
    options = ipc.IpcWriteOptions(compression=None)
    bar = progress_bar(total=rows, desc=f"write {split}", unit="rows", enabled=progress)
    with (
        atomic_path(path, overwrite) as tmp,
        pa.OSFile(str(tmp), "wb") as sink,
        ipc.new_stream(sink, schema, options=options) as writer,
        bar,
    ):
        for batch in _record_batches(columns, schema, rows, rpb):
            writer.write_batch(batch)
            bar.update(batch.num_rows)
    return meta


def _common_row_count(split: str, columns: dict[str, ColumnData]) -> int:
    if not columns:
        raise InvalidParameterError(f"columns: expected at least one column for split {split!r}, got none")
    counts = {name: len(col.ragged) for name, col in columns.items()}
    if len(set(counts.values())) != 1:
        detail = ", ".join(f"{columns[n].origin} ({n}): {c} rows" for n, c in counts.items())
        raise InputDataError(f"split {split!r}: columns must have the same number of rows, got {detail}")
    return next(iter(counts.values()))


def _column_info(name: str, col: ColumnData) -> ColumnInfo:
    return ColumnInfo(
        role=name,
        lang=col.lang,
        dictionary=col.dictionary_file,
        dictionary_sha256=col.dictionary_sha256,
        vocab_size=col.vocab_size,
        tokens=int(col.ragged.offsets[-1]),
    )


def _record_batches(columns: dict[str, ColumnData], schema: pa.Schema, rows: int, rpb: int) -> Iterator[pa.RecordBatch]:
    for start in range(0, rows, rpb):
        stop = min(start + rpb, rows)
        arrays = [_list_slice(name, col, start, stop) for name, col in columns.items()]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _list_slice(name: str, col: ColumnData, start: int, stop: int) -> pa.ListArray:
    """Rows ``start:stop`` of a column as a ``list<int32>`` array with offsets rebased to 0."""
    offsets = col.ragged.offsets[start : stop + 1]
    base, end = int(offsets[0]), int(offsets[-1])
    raw = np.asarray(col.ragged.values[base:end])
    _check_ids(name, col, raw, base)
    values = raw.astype(np.int32, copy=False)
    local = (offsets - base).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(local), pa.array(values))


def _check_ids(name: str, col: ColumnData, raw: np.ndarray, base: int) -> None:
    """Every id must index the column's dictionary; name the first offending row if not."""
    if raw.size == 0:
        return
    if raw.min() >= 0 and raw.max() < col.vocab_size:
        return
    bad = int(np.flatnonzero((raw < 0) | (raw >= col.vocab_size))[0])
    row = int(np.searchsorted(col.ragged.offsets, base + bad, side="right") - 1)
    raise InputDataError(
        f"{col.origin}: row {row} ({name}): token id {int(raw[bad])} is outside the dictionary "
        f"{col.dictionary_file} (expected 0..{col.vocab_size - 1})"
    )
