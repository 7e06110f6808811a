"""Full structural check of an arrowmt folder: every offset, every id, every checksum."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from arrowmt.errors import ArrowMTError, FormatError
from arrowmt.manifest import Manifest, file_sha256, split_path
from arrowmt.reader import SplitFile
from arrowmt.vocab import Dictionary


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
        file = split_path(folder, name)
        try:
            if file_sha256(file) != entry.sha256:
                raise FormatError(f"{file}: SHA-256 differs from the manifest (file changed or corrupt)")
            split = SplitFile(file)
            _check_split(split, vocab_sizes)
            report.files += 1
            report.rows += len(split)
            report.tokens += sum(c.tokens for c in split.metadata.columns.values())
        except (ArrowMTError, OSError) as exc:
            report.problems.append(str(exc))
    return report


def _dictionary_sizes(folder: Path, manifest: Manifest, report: VerifyReport) -> dict[str, tuple[int, str]]:
    sizes = {}
    for name in sorted(set(manifest.dictionaries.values())):
        try:
            d = Dictionary.load(folder / name)
            sizes[name] = (len(d), d.sha256())
        except (ArrowMTError, OSError) as exc:
            report.problems.append(str(exc))
    return sizes


def _check_split(split: SplitFile, vocab_sizes: dict[str, tuple[int, str]]) -> None:
    _validate_with_pyarrow(split.path)
    for name, info in split.metadata.columns.items():
        size, sha = vocab_sizes.get(info.dictionary, (info.vocab_size, info.dictionary_sha256))
        if sha != info.dictionary_sha256 or size != info.vocab_size:
            raise FormatError(
                f"{split.path}: column {name!r} was encoded with a dictionary of {info.vocab_size} symbols "
                f"(sha256 {info.dictionary_sha256[:12]}), but {info.dictionary} has {size} (sha256 {sha[:12]})"
            )
        _check_column(split, name, info.vocab_size, info.tokens)


def _validate_with_pyarrow(path: Path) -> None:
    with pa.memory_map(str(path)) as source:
        for k, batch in enumerate(ipc.open_stream(source)):
            try:
                batch.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise FormatError(f"{path}: record batch {k} fails full validation: {exc}") from exc


def _check_column(split: SplitFile, name: str, vocab_size: int, tokens: int) -> None:
    layout = split.layouts[name]
    total = 0
    for b, (off_pos, val_pos) in enumerate(zip(layout.offsets_pos, layout.values_pos)):
        n = min(split.rows_per_batch, len(split) - b * split.rows_per_batch)
        offsets = split.words[off_pos : off_pos + n + 1]
        first_row = b * split.rows_per_batch
        if (np.diff(offsets) < 0).any():
            row = first_row + int(np.flatnonzero(np.diff(offsets) < 0)[0])
            raise FormatError(f"{split.path}: row {row} ({name}): offsets decrease (expected non-decreasing)")
        values = split.words[val_pos + offsets[0] : val_pos + offsets[-1]]
        bad = (values < 0) | (values >= vocab_size)
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            row = first_row + int(np.searchsorted(offsets - offsets[0], at, side="right") - 1)
            raise FormatError(
                f"{split.path}: row {row} ({name}): token id {int(values[at])} outside the dictionary "
                f"(expected 0..{vocab_size - 1})"
            )
        total += int(offsets[-1] - offsets[0])
    if total != tokens:
        raise FormatError(f"{split.path}: column {name!r}: expected {tokens} tokens (metadata), got {total}")
