"""The dataset folder's manifest (``arrowmt.json``): splits, shard files, sizes and checksums."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from arrowmt.atomic import write_bytes_atomic
from arrowmt.errors import FormatError
from arrowmt.schema import FORMAT_NAME, FORMAT_VERSION, MANIFEST_NAME, SPLIT_SUFFIX

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
        """File-level split names making up ``split``: ``train``, ``train1``, ``train2``, ... in order."""
        pattern = re.compile(re.escape(split) + r"(\d*)")
        found = [(m.group(1), name) for name in self.files if (m := pattern.fullmatch(name))]
        return [name for _, name in sorted(found, key=lambda kv: int(kv[0] or 0))]

    def splits(self) -> list[str]:
        """Top-level split names (shards folded into their base name)."""
        return sorted({_base_split(name, self.files) for name in self.files})


def _base_split(name: str, files: dict[str, FileEntry]) -> str:
    """``train3`` belongs to ``train`` when ``train`` exists; otherwise the name stands alone."""
    base = re.sub(r"\d+$", "", name)
    return base if base and base in files else name


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
