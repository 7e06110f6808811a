"""Full structural check of an arrowmt folder: every offset, every id, every checksum.

Each split file gets every check that applies, so a corrupted file reports both its
checksum mismatch and *where* it is broken (record batch, row, column). Files are
opened through :class:`SplitFile`, whose validation on open makes the per-offset
reads here safe; pyarrow's full validation runs last, as a backstop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from arrowmt._errors import ArrowMTError, FormatError
from arrowmt.format._manifest import FileEntry, Manifest, file_sha256, split_path
from arrowmt.format._metadata import ColumnInfo
from arrowmt.format._reader import SplitFile
from arrowmt.format._vocab import Dictionary

VocabSizes = dict[str, tuple[int, str]]
"""Dictionary file name -> (number of symbols, content SHA-256)."""


@dataclass
class VerifyReport:
    """What ``verify`` checked and any problems found (empty ``problems`` means the folder is sound)."""

    files: int = 0
    rows: int = 0
    tokens: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_dataset(path: str | os.PathLike[str]) -> VerifyReport:
    """Check every file of the folder at ``path``; collect problems rather than stopping at the first."""
    folder = Path(path)
    report = VerifyReport()
    manifest = Manifest.load(folder)
    vocab_sizes = _dictionary_sizes(folder, manifest, report)
    for name, entry in sorted(manifest.files.items()):
        _verify_file(split_path(folder, name), entry, vocab_sizes, report)
    return report


def _verify_file(file: Path, entry: FileEntry, vocab_sizes: VocabSizes, report: VerifyReport) -> None:
    if not file.is_file():
        report.problems.append(f"{file}: listed in the manifest ({entry.rows} rows) but missing")
        return
    problems = _checksum_problems(file, entry)
    try:
        split = SplitFile(file)
        _check_split(split, entry, vocab_sizes)
    except (ArrowMTError, OSError) as exc:
        problems.append(str(exc))
    report.problems.extend(problems)
    if not problems:
        report.files += 1
        report.rows += len(split)
        report.tokens += sum(c.tokens for c in split.metadata.columns.values())


def _checksum_problems(file: Path, entry: FileEntry) -> list[str]:
    try:
        size = file.stat().st_size
        if size != entry.size:
            return [f"{file}: expected {entry.size} bytes (manifest), got {size} (file changed or truncated)"]
        if file_sha256(file) != entry.sha256:
            return [f"{file}: SHA-256 differs from the manifest (file changed or corrupt)"]
    except OSError as exc:
        return [f"{file}: cannot read: {exc.strerror or exc}"]
    return []


def _dictionary_sizes(folder: Path, manifest: Manifest, report: VerifyReport) -> VocabSizes:
    sizes = {}
    for name in sorted(set(manifest.dictionaries.values())):
        try:
            d = Dictionary.load(folder / name)
            sizes[name] = (len(d), d.sha256())
        except (ArrowMTError, OSError) as exc:
            report.problems.append(str(exc))
    return sizes


def _check_split(split: SplitFile, entry: FileEntry, vocab_sizes: VocabSizes) -> None:
    if len(split) != entry.rows:
        raise FormatError(f"{split.path}: expected {entry.rows} rows (manifest), got {len(split)} (metadata)")
    for name, info in split.metadata.columns.items():
        _check_dictionary(split.path, name, info, vocab_sizes)
        _check_column(split, name, info.vocab_size, info.tokens)
    _validate_with_pyarrow(split.path)


def _check_dictionary(path: Path, name: str, info: ColumnInfo, vocab_sizes: VocabSizes) -> None:
    size, sha = vocab_sizes.get(info.dictionary, (info.vocab_size, info.dictionary_sha256))
    if sha != info.dictionary_sha256 or size != info.vocab_size:
        raise FormatError(
            f"{path}: column {name!r} was encoded with a dictionary of {info.vocab_size} symbols "
            f"(sha256 {info.dictionary_sha256[:12]}), but {info.dictionary} has {size} (sha256 {sha[:12]})"
        )


def _validate_with_pyarrow(path: Path) -> None:
    try:
        with pa.memory_map(str(path)) as source:
            for k, batch in enumerate(ipc.open_stream(source)):
                _validate_batch(path, k, batch)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise FormatError(f"{path}: pyarrow cannot read the stream: {exc}") from exc


def _validate_batch(path: Path, k: int, batch: pa.RecordBatch) -> None:
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise FormatError(f"{path}: record batch {k} fails full validation: {exc}") from exc


def _check_column(split: SplitFile, name: str, vocab_size: int, tokens: int) -> None:
    total = 0
    for batch in split.batch_offsets(name):
        offsets = batch.offsets.astype(np.int64)
        where = _BatchPlace(split.path, name, batch.batch, batch.first_row)
        _check_offsets(where, offsets, batch.values_len)
        values = split.words[batch.values_pos : batch.values_pos + int(offsets[-1])]
        _check_ids(where, offsets, values, vocab_size)
        total += int(offsets[-1])
    if total != tokens:
        raise FormatError(f"{split.path}: column {name!r}: expected {tokens} tokens (metadata), got {total}")


@dataclass(frozen=True)
class _BatchPlace:
    """Where a record batch of one column sits, for error messages."""

    path: Path
    column: str
    batch: int
    first_row: int

    def batch_error(self, detail: str) -> FormatError:
        return FormatError(f"{self.path}: record batch {self.batch}, column {self.column!r}: {detail}")

    def row_error(self, local: int, detail: str) -> FormatError:
        return FormatError(f"{self.path}: row {self.first_row + local} ({self.column}): {detail}")


def _check_offsets(where: _BatchPlace, offsets: np.ndarray, values_len: int) -> None:
    """Batch-local offsets: start at 0, stay within the values, never decrease, use every value."""
    if offsets[0] != 0:
        raise where.batch_error(f"first offset is {int(offsets[0])}, expected 0 (offsets are batch-local)")
    outside = np.flatnonzero((offsets < 0) | (offsets > values_len))
    if outside.size:
        i = int(outside[0])
        raise where.row_error(i - 1, f"end offset {int(offsets[i])} is outside the values (expected 0..{values_len})")
    falling = np.flatnonzero(np.diff(offsets) < 0)
    if falling.size:
        i = int(falling[0])
        raise where.row_error(
            i, f"offsets decrease {int(offsets[i])} -> {int(offsets[i + 1])} (expected non-decreasing)"
        )
    if offsets[-1] != values_len:
        raise where.batch_error(f"offsets use {int(offsets[-1])} values, the values buffer has {values_len}")


def _check_ids(where: _BatchPlace, offsets: np.ndarray, values: np.ndarray, vocab_size: int) -> None:
    bad = (values < 0) | (values >= vocab_size)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        local = int(np.searchsorted(offsets, at, side="right") - 1)
        raise where.row_error(
            local, f"token id {int(values[at])} outside the dictionary (expected 0..{vocab_size - 1})"
        )
