"""The way back: write an arrowmt folder from Arrow tables of token ids (pyarrow, Hugging Face, polars).

Typical use: open a split with :func:`arrowmt.integrations.hf.load_split`, filter it
with ``datasets``, and write the result as a new arrowmt folder that reuses the
original dictionaries::

    kept = load_split("corpora/wmt", "train").filter(short_enough, keep_in_memory=True)
    convert_table({"train": kept, "valid": load_split("corpora/wmt", "valid")}, "corpora/wmt-short",
                  like="corpora/wmt")

The ids are checked like any conversion's: every column must be a list of integers
with no nulls, every id must index the column's dictionary (the first bad row is
named), the columns must have the same number of rows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._version import __version__
from arrowmt.converters._output import OutputFolder, column, special_ids_of
from arrowmt.files import file_kind
from arrowmt.format import SOURCE, TARGET, TOKENS, Dictionary, Manifest, unterminated_row
from arrowmt.reading import IPC_FILE_MAGIC, Ragged

SOURCE_FORMAT = "table"
COLUMN_SETS = ((SOURCE, TARGET), (TOKENS,))
PARQUET_MAGIC = b"PAR1"
DictionarySpec = str | os.PathLike[str] | Dictionary


@dataclass(frozen=True)
class Vocabulary:
    """What one column's ids refer to: its language, dictionary, and the file it came from (if any)."""

    lang: str | None
    dictionary: Dictionary
    file: Path | None


def convert_table(
    data: Any,
    out: str | os.PathLike[str],
    *,
    like: str | os.PathLike[str] | None = None,
    languages: Mapping[str, str | None] | None = None,
    dictionaries: Mapping[str, DictionarySpec] | None = None,
    split: str = "train",
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Write ``data`` (token-id tables) as an arrowmt folder at ``out``.

    ``data`` is one table, written as split ``split``, or a mapping ``{split: table}``
    (a ``datasets.DatasetDict`` is one). A table is a ``pyarrow.Table`` or
    ``RecordBatch``, a Hugging Face ``datasets.Dataset`` (its selection: filtered,
    shuffled or sorted rows are written in the dataset's order), or anything that
    exports an Arrow stream (``__arrow_c_stream__``, e.g. a polars ``DataFrame``).
    Columns ``source`` and ``target`` (or ``tokens``) must be lists of integers;
    other columns are ignored.

    Say what the ids mean either with ``like``, an arrowmt folder whose languages and
    dictionaries they use (the dictionaries are copied byte for byte), or with
    ``languages`` (``{"source": "de", "target": "en"}`` or ``{"tokens": None}``)
    and ``dictionaries`` (per column: a ``dict.txt`` path or a :class:`Dictionary`).
    """
    tables = _tables_by_split(data, split)
    vocabularies = _vocabularies(like, languages, dictionaries)
    roles = tuple(vocabularies)
    specials = special_ids_of(vocabularies[roles[0]].dictionary)
    prepared = {name: _read_columns(name, table, roles, specials.eos) for name, table in tables.items()}
    langs = {role: v.lang for role, v in vocabularies.items()}
    with OutputFolder.prepare(out, langs, SOURCE_FORMAT, overwrite, progress) as folder:
        names = {role: folder.add_dictionary(v.lang, v.dictionary, source=v.file) for role, v in vocabularies.items()}
        for name, raggeds in prepared.items():
            columns = {
                role: column(ragged, langs[role], names[role], vocabularies[role].dictionary, f"table {name!r}")
                for role, ragged in raggeds.items()
            }
            folder.write(name, columns, specials)
        folder.manifest.provenance = _provenance(like, tables)
        return folder.finish()


def _provenance(like: str | os.PathLike[str] | None, tables: dict[str, pa.Table]) -> dict[str, object]:
    """How the folder was made: from which tables, and the ``like`` folder's own provenance (e.g. its spm model)."""
    return {
        "converter": "arrowmt.convert_table",
        "arrowmt_version": __version__,
        "rows": {name: table.num_rows for name, table in tables.items()},
        "like": None if like is None else str(like),
        "like_provenance": None if like is None else Manifest.load(like).provenance,
    }


def _tables_by_split(data: Any, split: str) -> dict[str, pa.Table]:
    """``{split: pyarrow.Table}`` from one table or a mapping of them; split names become file names."""
    named = dict(data) if isinstance(data, Mapping) else {split: data}
    if not named:
        raise InvalidParameterError("data: expected at least one table, got an empty mapping")
    return {name: as_table(table, name) for name, table in named.items()}


def as_table(data: Any, name: str = "data") -> pa.Table:
    """A ``pyarrow.Table`` view of ``data`` (see :func:`convert_table` for what is accepted)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "with_format") and hasattr(data, "__len__"):  # datasets.Dataset: its rows, indices applied
        return data.with_format("arrow")[0 : len(data)]
    if hasattr(data, "__arrow_c_stream__"):
        return pa.table(data)
    raise InvalidParameterError(
        f"{name}: expected a pyarrow Table or RecordBatch, a datasets.Dataset or an Arrow stream "
        f"(__arrow_c_stream__), got {type(data).__name__}"
    )


def read_table_file(path: str | os.PathLike[str]) -> pa.Table:
    """A Parquet file, or an Arrow IPC file or stream (memory-mapped, fully validated), as a table."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO or device would block or never end
        kind = file_kind(path.stat().st_mode)
        raise InputDataError(f"{path}: expected a regular file (Parquet or Arrow), got {kind}")
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(IPC_FILE_MAGIC))
        if head.startswith(PARQUET_MAGIC):
            return pq.read_table(path, memory_map=True)
        source = pa.memory_map(str(path))  # the table's buffers keep the map alive
        table = (ipc.open_file(source) if head == IPC_FILE_MAGIC else ipc.open_stream(source)).read_all()
        table.validate(full=True)  # IPC readers trust the offsets; a corrupt file must not crash the process
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except pa.ArrowException as exc:
        raise InputDataError(f"{path}: expected a Parquet file or an Arrow IPC file or stream: {exc}") from exc
    return table


def _vocabularies(
    like: str | os.PathLike[str] | None,
    languages: Mapping[str, str | None] | None,
    dictionaries: Mapping[str, DictionarySpec] | None,
) -> dict[str, Vocabulary]:
    """Each column's language and dictionary, from ``like`` or from ``languages`` + ``dictionaries``."""
    if like is not None:
        if languages is not None or dictionaries is not None:
            raise InvalidParameterError(
                "like: expected either like or languages + dictionaries, got both "
                f"(like={like!r}, languages={languages!r})"
            )
        return folder_vocabularies(like)
    if languages is None or dictionaries is None:
        raise InvalidParameterError(
            "languages, dictionaries: expected both (or like=<an arrowmt folder>), "
            f"got languages={languages!r}, dictionaries={dictionaries!r}"
        )
    _check_roles("languages", tuple(languages))
    if len(set(languages.values())) != len(languages):
        raise InvalidParameterError(f"languages: expected a different language per column, got {dict(languages)}")
    if set(dictionaries) != set(languages):
        raise InvalidParameterError(
            f"dictionaries: expected one per column {list(languages)}, got {sorted(dictionaries)}"
        )
    return {role: _vocabulary(lang, dictionaries[role]) for role, lang in languages.items()}


def folder_vocabularies(folder: str | os.PathLike[str]) -> dict[str, Vocabulary]:
    """Each column's language and dictionary in the arrowmt folder ``folder`` (per its manifest)."""
    folder = Path(folder)
    manifest = Manifest.load(folder)
    _check_roles(f"like ({folder})", tuple(manifest.languages))
    return {role: _folder_vocabulary(folder, manifest, lang) for role, lang in manifest.languages.items()}


def _folder_vocabulary(folder: Path, manifest: Manifest, lang: str | None) -> Vocabulary:
    file = folder / manifest.dictionaries[lang or ""]  # Manifest.load accepts only plain file names
    return Vocabulary(lang, Dictionary.load(file), file)


def _vocabulary(lang: str | None, spec: DictionarySpec) -> Vocabulary:
    if isinstance(spec, Dictionary):
        return Vocabulary(lang, spec, None)
    return Vocabulary(lang, Dictionary.load(spec), Path(spec))


def _check_roles(name: str, roles: tuple[str, ...]) -> None:
    if roles not in COLUMN_SETS:
        raise InvalidParameterError(
            f"{name}: expected columns {' or '.join(str(list(c)) for c in COLUMN_SETS)}, got {list(roles)}"
        )


def _read_columns(split: str, table: pa.Table, roles: tuple[str, ...], eos: int) -> dict[str, Ragged]:
    """The token columns ``roles`` of ``table`` as ragged id arrays, after the schema checks; every row
    must end with ``eos`` (as every row fairseq binarizes does)."""
    missing = [role for role in roles if role not in table.column_names]
    if missing:
        raise InputDataError(f"table {split!r}: expected columns {list(roles)}, missing {missing}")
    columns = {role: _ragged(f"table {split!r} column {role!r}", table.column(role)) for role in roles}
    for role, ragged in columns.items():
        if bad := unterminated_row(ragged.values, ragged.offsets, eos):
            raise InputDataError(f"table {split!r} column {role!r}: row {bad[0]} {bad[1]}")
    return columns


def _ragged(where: str, array: pa.ChunkedArray) -> Ragged:
    """Rows of a list-of-integers column (no nulls anywhere) as offsets + values, in a few vectorized calls."""
    kind = array.type
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    if not is_list or not pa.types.is_integer(kind.value_type):
        raise InputDataError(f"{where}: expected a list of integers (token ids), got type {kind}")
    if array.null_count:
        row = _first_true(pc.is_null(array))
        raise InputDataError(f"{where}: row {row} is null (expected a list of token ids)")
    lengths = np.asarray(pc.list_value_length(array).to_numpy(), dtype=np.int64)
    flat = pc.list_flatten(array)
    if flat.null_count:
        position = _first_true(pc.is_null(flat))
        row = int(np.searchsorted(np.cumsum(lengths), position, side="right"))
        raise InputDataError(f"{where}: row {row} holds a null id (expected token ids)")
    return Ragged.from_lengths(lengths, flat.to_numpy())


def _first_true(mask: pa.ChunkedArray) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])
