"""Build small arrowmt dataset folders for tests: from the real fairseq fixture or from given lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arrowmt import FileEntry, FormatError, Manifest
from arrowmt.testing import (
    SOURCE,
    TARGET,
    ColumnData,
    Ragged,
    file_sha256,
    read_indexed,
    split_path,
    write_split,
)
from tests.conftest import fairseq_fixture

PAIR = "de-en"
NUM_SPECIALS = 4
SYNTHETIC_VOCAB = 8
SYNTHETIC_ID = 4


def fairseq_mmap() -> Path:
    """The fixture's fairseq-preprocess mmap output (de-en), built once a session."""
    return fairseq_fixture() / "mmap"


def fixture_prefix(split: str, lang: str) -> Path:
    """Prefix of the fairseq mmap ``.idx``/``.bin`` pair of ``split`` in language ``lang``."""
    return fairseq_mmap() / f"{split}.{PAIR}.{lang}"


def head(ragged: Ragged, limit: int | None) -> Ragged:
    """The first ``limit`` rows of ``ragged`` (all when None), sharing its values."""
    if limit is None or limit >= len(ragged):
        return ragged
    offsets = ragged.offsets[: limit + 1]
    return Ragged(offsets, ragged.values[: int(offsets[-1])])


def fixture_lengths(split: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(de, en) token counts of the fixture's ``split`` (fairseq's ``src_sizes``, ``tgt_sizes``)."""
    de = head(read_indexed(fixture_prefix(split, "de")), limit)
    en = head(read_indexed(fixture_prefix(split, "en")), limit)
    return de.lengths(), en.lengths()


def _dictionary_column(ragged: Ragged, lang: str, origin: str) -> ColumnData:
    """A fixture column with its real dictionary's name, checksum and size (4 specials + lines)."""
    dict_path = fairseq_mmap() / f"dict.{lang}.txt"
    lines = dict_path.read_text(encoding="utf-8").count("\n")
    return ColumnData(ragged, lang, dict_path.name, file_sha256(dict_path), NUM_SPECIALS + lines, origin)


def write_columns(
    folder: Path, split: str, columns: dict[str, ColumnData], source_format: str, rows_per_batch: int | None = None
) -> Path:
    """Write one split file into ``folder`` and a manifest listing it (merged with an existing one).

    ``rows_per_batch`` (default: the writer's) sets the record-batch size.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = split_path(folder, split)
    batching = {} if rows_per_batch is None else {"rows_per_batch": rows_per_batch}
    meta = write_split(path, split, columns, source_format=source_format, **batching)
    try:
        manifest = Manifest.load(folder)
    except FormatError:
        manifest = Manifest(
            languages={name: col.lang for name, col in columns.items()},
            dictionaries={name: col.dictionary_file for name, col in columns.items()},
            source_format=source_format,
        )
    manifest.files[split] = FileEntry.of(path, meta.rows)
    manifest.save(folder)
    return folder


def multi30k_dataset(folder: Path, split: str = "valid", limit: int | None = None) -> Path:
    """An arrowmt folder holding the fixture's ``split`` (de source, en target), first ``limit`` rows."""
    columns = {}
    for role, lang in ((SOURCE, "de"), (TARGET, "en")):
        prefix = fixture_prefix(split, lang)
        columns[role] = _dictionary_column(head(read_indexed(prefix), limit), lang, str(prefix))
    return write_columns(folder, split, columns, "fairseq-mmap")


def synthetic_ragged(lengths: np.ndarray | list[int]) -> Ragged:
    """Rows of the given lengths, every token the same ordinary id."""
    sizes = np.asarray(lengths, dtype=np.int64)
    return Ragged.from_lengths(sizes, np.full(int(sizes.sum()), SYNTHETIC_ID, dtype=np.int32))


def lengths_dataset(
    folder: Path,
    src_lengths: list[int] | np.ndarray,
    tgt_lengths: list[int] | np.ndarray | None = None,
    split: str = "train",
) -> Path:
    """An arrowmt folder whose rows have exactly these lengths (monolingual when no target)."""
    roles = {SOURCE: src_lengths, TARGET: tgt_lengths} if tgt_lengths is not None else {"tokens": src_lengths}
    columns = {
        role: ColumnData(synthetic_ragged(lengths), None, "dict.txt", "0" * 64, SYNTHETIC_VOCAB, f"synthetic {role}")
        for role, lengths in roles.items()
    }
    return write_columns(folder, split, columns, "synthetic")
