"""Shared output steps of every converter: prepare the folder, write splits, copy dictionaries, manifest."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from arrowmt.format._atomic import atomic_path, prepare_output_dir, remove_unlisted
from arrowmt.format._manifest import Manifest, file_entry, split_path
from arrowmt.format._metadata import SpecialIds
from arrowmt.format._ragged import Ragged
from arrowmt.format._schema import CACHE_DIR_NAME, MANIFEST_NAME, SPLIT_SUFFIX
from arrowmt.format._vocab import Dictionary
from arrowmt.format._writer import ColumnData, write_split

# What an earlier conversion may have left that the new one does not rewrite.
EARLIER_OUTPUT = (f"*{SPLIT_SUFFIX}", "dict*.txt", CACHE_DIR_NAME)


@dataclass
class OutputFolder:
    """An arrowmt folder being written: split files first, the manifest last (its presence = complete)."""

    path: Path
    manifest: Manifest
    progress: bool = False

    @classmethod
    def prepare(
        cls,
        path: str | Path,
        languages: dict[str, str | None],
        source_format: str,
        overwrite: bool,
        progress: bool,
    ) -> OutputFolder:
        """Check ``path`` may be written (``overwrite`` replaces an earlier dataset there) and clear stale files."""
        out = prepare_output_dir(path, overwrite)
        if overwrite:
            (out / MANIFEST_NAME).unlink(missing_ok=True)  # incomplete until the new manifest is written
        manifest = Manifest(languages=languages, dictionaries={}, source_format=source_format)
        return cls(out, manifest, progress)

    def add_dictionary(self, lang: str | None, dictionary: Dictionary, source: Path | None = None) -> str:
        """Store ``dict.<lang>.txt`` (byte copy of ``source`` when given, else saved) and return its name."""
        name = f"dict.{lang}.txt" if lang else "dict.txt"
        target = self.path / name
        if source is not None:
            with atomic_path(target) as tmp:
                shutil.copyfile(source, tmp)
        else:
            dictionary.save(target)
        self.manifest.dictionaries[lang or ""] = name
        return name

    def write(self, name: str, columns: dict[str, ColumnData], special_ids: SpecialIds) -> None:
        """Write one split (or shard) file and record it."""
        path = split_path(self.path, name)
        meta = write_split(
            path,
            name,
            columns,
            special_ids=special_ids,
            source_format=self.manifest.source_format,
            progress=self.progress,
        )
        self.manifest.files[name] = file_entry(path, meta.rows)

    def finish(self) -> Manifest:
        """Write the manifest (only now is the folder a complete dataset), then drop earlier output."""
        self.manifest.save(self.path)
        keep = {e.file for e in self.manifest.files.values()} | set(self.manifest.dictionaries.values())
        remove_unlisted(self.path, EARLIER_OUTPUT, keep)
        return self.manifest


def special_ids_of(dictionary: Dictionary) -> SpecialIds:
    """Special-symbol ids as a dictionary defines them."""
    return SpecialIds(bos=dictionary.bos, pad=dictionary.pad, eos=dictionary.eos, unk=dictionary.unk)


def column(ragged: Ragged, lang: str | None, dict_name: str, dictionary: Dictionary, origin: str) -> ColumnData:
    """A ColumnData for ``ragged`` encoded with ``dictionary``."""
    return ColumnData(
        ragged=ragged,
        lang=lang,
        dictionary_file=dict_name,
        dictionary_sha256=dictionary.sha256(),
        vocab_size=len(dictionary),
        origin=origin,
    )
