"""The dataset folder's manifest (``arrowmt.json``): splits, shard files, sizes and checksums."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from arrowmt._errors import FormatError
from arrowmt.format._atomic import write_bytes_atomic
from arrowmt.format._schema import FORMAT_NAME, FORMAT_VERSION, MANIFEST_NAME, SPLIT_SUFFIX

HASH_CHUNK = 1 << 24


@dataclass(frozen=True)
class FileEntry:
    """One split (or shard) file as recorded after conversion."""

    file: str
    rows: int
    size: int
    sha256: str


@dataclass
class Manifest:
    """What a dataset folder holds; written last by converters, so its presence means 'complete'."""

    languages: dict[str, str | None]
    dictionaries: dict[str, str]
    source_format: str
    files: dict[str, FileEntry] = field(default_factory=dict)
    provenance: dict[str, object] = field(default_factory=dict)  # how the corpus was made (converter options)
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), sort_keys=True, indent=2) + "\n").encode("utf-8")

    def save(self, folder: str | os.PathLike[str]) -> Path:
        path = Path(folder) / MANIFEST_NAME
        write_bytes_atomic(path, self.to_json())
        return path

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> Manifest:
        path = Path(folder) / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            files = {name: FileEntry(**entry) for name, entry in data.pop("files").items()}
            manifest = cls(files=files, **data)
        except FileNotFoundError as exc:
            raise FormatError(f"{path}: missing; {Path(folder)} is not a converted arrowmt dataset") from exc
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise FormatError(f"{path}: malformed manifest: {exc}") from exc
        if manifest.format != FORMAT_NAME or manifest.format_version != FORMAT_VERSION:
            raise FormatError(
                f"{path}: expected format {FORMAT_NAME!r} version {FORMAT_VERSION}, "
                f"got {manifest.format!r} version {manifest.format_version!r}"
            )
        return manifest

    def shards(self, split: str) -> list[str]:
        """File-level names making up ``split``, as fairseq loads them: ``train``, ``train1``, ``train2``, ...

        Numbering starts at 1 and stops at the first missing number (``train`` + ``train2``
        without ``train1`` is just ``train``); a split that does not exist has no shards.
        """
        if split not in self.files:
            return []
        names = [split]
        while (name := f"{split}{len(names)}") in self.files:
            names.append(name)
        return names

    def splits(self) -> list[str]:
        """Top-level split names: every file-level name that is not a shard of another split."""
        claimed = {shard for name in self.files for shard in self.shards(name)[1:]}
        return sorted(name for name in self.files if name not in claimed)


def split_path(folder: str | os.PathLike[str], name: str) -> Path:
    """Path of the file holding split (or shard) ``name`` inside ``folder``."""
    return Path(folder) / f"{name}{SPLIT_SUFFIX}"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in large chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path, rows: int) -> FileEntry:
    """Manifest entry for a freshly written split file."""
    return FileEntry(file=path.name, rows=rows, size=path.stat().st_size, sha256=file_sha256(path))
