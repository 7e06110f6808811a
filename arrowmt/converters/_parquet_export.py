"""Export an arrowmt folder to Parquet, for SQL and dataframe tools (duckdb, polars, pandas, Spark).

The split files are Arrow IPC *streams* (what Hugging Face ``datasets`` maps); duckdb's
``FROM 'x.arrow'`` and polars' ``scan_ipc`` want other formats. Parquet is read lazily by
all of them: ``OUT/<split>.parquet`` holds an ``id`` column (the row's index in the split,
as :func:`arrowmt.open_dataset` numbers it, shards joined) and the token columns as
``list<int32>``; with ``text=True`` also ``<column>_text``: the row's symbols joined by
spaces, without ``</s>``. One row group per record batch of the split files, so memory
stays bounded by one batch. :func:`arrowmt.convert_table` reads such a file back.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from arrowmt._errors import FormatError
from arrowmt.files import StagedOutput, atomic_path, progress_bar, reading
from arrowmt.format import TOKEN_TYPE, Manifest
from arrowmt.reading import Ragged, local_only
from arrowmt.splits import Split, check_split_dictionaries
from arrowmt.stored import refuse_stored_order

PARQUET_SUFFIX = ".parquet"
ID_COLUMN = "id"
TEXT_SUFFIX = "_text"


def export_parquet(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    text: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> list[Path]:
    """Write every split of the arrowmt folder ``path`` as ``out/<split>.parquet``; return the files.

    The folder's dictionaries are copied beside them. Everything is staged beside ``out``
    and published at once (see :class:`StagedOutput`); with ``overwrite``, files of the
    same names are replaced and nothing else in ``out`` is touched.
    """
    folder = local_only(path, "path", "export")
    with reading(folder):  # the manifest and every split from one publish
        manifest = Manifest.load(folder)
        refuse_stored_order(manifest, folder, "export")
        splits = [Split(folder, split, manifest, access="sequential") for split in manifest.splits()]
    with StagedOutput.begin(out, overwrite) as staged:
        names = _copy_dictionaries(folder, manifest, staged.path)
        for split in splits:
            check_split_dictionaries(staged.path, split.shards)  # the copies are the splits' dictionaries
            names.append(_export_split(split, staged.path, text, progress))
        staged.publish(names)
    return [staged.target / name for name in names if name.endswith(PARQUET_SUFFIX)]


def _copy_dictionaries(folder: Path, manifest: Manifest, dest: Path) -> list[str]:
    names = sorted(set(manifest.dictionaries.values()))
    for name in names:
        with atomic_path(dest / name) as tmp:
            shutil.copyfile(folder / name, tmp)
    return names


def parquet_schema(split: Split, text_columns: tuple[str, ...]) -> pa.Schema:
    """``id`` (int64), the token columns (``list<int32>``) and the requested ``<column>_text`` strings."""
    fields = [pa.field(ID_COLUMN, pa.int64(), nullable=False)]
    fields += [pa.field(name, TOKEN_TYPE, nullable=False) for name in split.columns]
    fields += [pa.field(name + TEXT_SUFFIX, pa.large_string(), nullable=False) for name in text_columns]
    return pa.schema(fields)


def _export_split(split: Split, dest: Path, text: bool, progress: bool) -> str:
    """Write ``<split>.parquet`` into ``dest`` and return its name (``text``: with the columns' symbols)."""
    target = dest / f"{split.split}{PARQUET_SUFFIX}"
    symbols = {name: pa.array(split.dictionary(name).symbols, pa.large_string()) for name in split.columns if text}
    schema = parquet_schema(split, tuple(symbols))
    eos = split.special_ids.eos
    bar = progress_bar(len(split), f"export {target.name}", "rows", progress)
    with atomic_path(target) as tmp, pq.ParquetWriter(str(tmp), schema) as writer, bar:
        for rows in _row_chunks(split):
            writer.write_table(_chunk(split, rows, symbols, eos, schema))
            bar.update(rows.shape[0])
    return target.name


def _row_chunks(split: Split) -> Iterator[np.ndarray]:
    """Global row numbers, one record batch of one shard at a time (each fits one Arrow list array)."""
    for k, shard in enumerate(split.shards):
        first = int(split.cumulative[k])
        for start in range(0, len(shard), shard.rows_per_batch):
            yield np.arange(first + start, first + min(start + shard.rows_per_batch, len(shard)), dtype=np.int64)


def _chunk(split: Split, rows: np.ndarray, symbols: dict[str, pa.Array], eos: int, schema: pa.Schema) -> pa.Table:
    """Rows ``rows`` as a table of ``schema`` (offsets checked by ``column_spans``, one gather per column)."""
    arrays = {ID_COLUMN: pa.array(rows)}
    tokens = {}
    for name in split.columns:
        spans = split.column_spans(name, rows).compact()
        tokens[name] = Ragged.from_lengths(spans.lengths, spans.words)
        arrays[name] = _list_array(tokens[name])
    for name, table in symbols.items():
        arrays[name + TEXT_SUFFIX] = _text(split, name, tokens[name], table, eos)
    return pa.table(arrays, schema=schema)


def _list_array(ragged: Ragged) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(ragged.offsets.astype(np.int32)), pa.array(ragged.values))


def _text(split: Split, name: str, ragged: Ragged, symbols: pa.Array, eos: int) -> pa.Array:
    """Each row's symbols joined by spaces, ``</s>`` left out (one take and one join for all rows)."""
    values = ragged.values
    if values.size and (int(values.min()) < 0 or int(values.max()) >= len(symbols)):
        raise FormatError(
            f"{split.path}: split {split.split!r} column {name!r}: token ids {int(values.min())}..{int(values.max())} "
            f"outside its dictionary (expected 0..{len(symbols) - 1}); run arrowmt verify"
        )
    keep = values != eos
    row_of = np.repeat(np.arange(len(ragged)), ragged.lengths())
    lengths = np.bincount(row_of[keep], minlength=len(ragged))
    kept = Ragged.from_lengths(lengths, values[keep])
    words = pa.LargeListArray.from_arrays(pa.array(kept.offsets), symbols.take(pa.array(kept.values)))
    return pc.binary_join(words, pa.scalar(" ", pa.large_string()))
