"""Shared output steps of every converter: stage the folder, write splits, copy dictionaries, publish."""

from __future__ import annotations

import logging
import os
import shutil
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.files import StagedOutput, atomic_path
from arrowmt.format import (
    CACHE_DIR_NAME,
    DICTIONARY_SUFFIX,
    MANIFEST_NAME,
    SPLIT_SUFFIX,
    Dictionary,
    FileEntry,
    Manifest,
    SpecialIds,
    manifest_path,
    plain_name_error,
    read_json,
)
from arrowmt.reading import PIECE_ROWS, Ragged, SplitFile, index_name
from arrowmt.writing import ColumnData, RowSource, write_block_indexes, write_split

logger = logging.getLogger(__name__)


@dataclass
class OutputFolder:
    """An arrowmt folder being written, published complete or not at all.

    Every file goes into a staging folder, :attr:`path` (beside the output folder
    :attr:`out`); :meth:`finish` moves them into :attr:`out` with renames, the manifest
    last, then deletes the files the previous manifest there listed that the new one
    does not (and arrowmt's plan cache). Nothing else in :attr:`out` is touched. Until
    :meth:`finish`, :attr:`out` is unchanged: a failure, Ctrl-C or SIGKILL leaves the
    previous dataset readable (or no folder at all). Use it as a context manager (or
    call :meth:`abort`) to remove the staging folder at once on failure; otherwise it is
    removed when the object is collected, at exit, or by the next run after a SIGKILL.
    """

    staged: StagedOutput
    manifest: Manifest
    progress: bool = False
    earlier: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def prepare(
        cls,
        path: str | Path,
        languages: dict[str, str | None],
        source_format: str,
        overwrite: bool,
        progress: bool,
    ) -> OutputFolder:
        """Check ``path`` may be written (``overwrite`` replaces an earlier dataset there) and start staging."""
        staged = StagedOutput.begin(path, overwrite)
        manifest = Manifest(languages=languages, dictionaries={}, source_format=source_format)
        folder = cls(staged, manifest, progress, earlier_files(staged.target))
        weakref.finalize(folder, staged.abort)
        return folder

    @property
    def path(self) -> Path:
        """The staging folder: where split files are written (by other processes too, see :meth:`record`)."""
        return self.staged.path

    @property
    def out(self) -> Path:
        """The output folder the dataset is published to."""
        return self.staged.target

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    @staticmethod
    def dictionary_name(lang: str | None) -> str:
        """The file name of ``lang``'s dictionary: ``dict.<lang>.txt`` (``dict.txt`` without a language)."""
        name = f"dict.{lang}.txt" if lang else "dict.txt"
        if error := plain_name_error(name, DICTIONARY_SUFFIX):
            raise InvalidParameterError(f"lang: {error}")
        return name

    def add_dictionary(self, lang: str | None, dictionary: Dictionary, source: Path | None = None) -> str:
        """Store ``dict.<lang>.txt`` (byte copy of ``source`` when given, else saved) and return its name."""
        name = self.dictionary_name(lang)
        target = self.path / name
        if source is not None:
            with atomic_path(target) as tmp:
                shutil.copyfile(source, tmp)
        else:
            dictionary.save(target)
        return self.record_dictionary(lang)

    def record_dictionary(self, lang: str | None) -> str:
        """Record ``lang``'s dictionary, which another writer (a worker process) saved at
        ``path / dictionary_name(lang)``; return its name."""
        name = self.dictionary_name(lang)
        if not (self.path / name).is_file():
            raise InvalidParameterError(f"lang: expected {self.path / name} to be written first, it is missing")
        self.manifest.dictionaries[lang or ""] = name
        return name

    def split_file(self, name: str) -> Path:
        """Where split (or shard) ``name`` is written in the staging folder; the name is checked first."""
        file = f"{name}{SPLIT_SUFFIX}"
        if error := plain_name_error(file, SPLIT_SUFFIX):
            raise InvalidParameterError(f"name: {error} (the split name + {SPLIT_SUFFIX!r})")
        return self.path / file

    def write(
        self,
        name: str,
        columns: dict[str, ColumnData],
        special_ids: SpecialIds,
        piece_rows: int = PIECE_ROWS,
        stored_order: dict[str, str] | None = None,
    ) -> None:
        """Write one split (or shard) file and record it (``piece_rows``: rows per offsets checksum piece;
        ``stored_order``: what a copy in plan order records of it, see :func:`arrowmt.stored.order_marker`)."""
        path = self.split_file(name)
        meta = write_split(
            path,
            name,
            columns,
            special_ids=special_ids,
            source_format=self.manifest.source_format,
            progress=self.progress,
            piece_rows=piece_rows,
            stored_order=stored_order,
        )
        self.manifest.files[name] = FileEntry.of(path, meta.rows)

    def record(self, name: str) -> FileEntry:
        """Record split ``name`` that another writer (a worker process) put at :meth:`split_file`.

        The file is opened and validated like any split file before it is listed.
        """
        path = self.split_file(name)
        if not path.is_file():
            raise InvalidParameterError(f"name: expected {path} to be written first, it is missing")
        rows = len(SplitFile(path))
        self.manifest.files[name] = entry = FileEntry.of(path, rows)
        return entry

    def finish(self) -> Manifest:
        """Write the manifest, publish the dataset (manifest last) and drop the previous one's leftovers.

        Leftovers are the files the previous manifest listed, except its dictionaries when
        the folder also holds fairseq binarized files (``*.idx``): fairseq names its
        dictionaries the same way, so those may be the data-bin's own.
        """
        indexes = write_block_indexes(self.path, self.manifest)  # for reading it from object storage
        self.manifest.save(self.path)
        names = [*sorted(self.manifest.file_names()), *indexes, MANIFEST_NAME]
        stale = self.earlier
        if self.out.is_dir() and any(self.out.glob("*.idx")):
            stale = frozenset(name for name in stale if not name.endswith(DICTIONARY_SUFFIX))
        self.staged.publish(names, remove=stale, remove_dirs=(CACHE_DIR_NAME,))
        return self.manifest

    def abort(self) -> None:
        """Give up: remove the staging folder; the output folder stays as it was (idempotent)."""
        self.staged.abort()


def earlier_files(out: str | os.PathLike[str]) -> frozenset[str]:
    """The files the dataset already in ``out`` lists in its manifest (none if there is no readable one)."""
    path = manifest_path(out)
    if not os.path.lexists(path):
        return frozenset()
    try:
        names = Manifest.parse(read_json(path, "manifest"), path).file_names()
    except FormatError as exc:
        logger.warning("%s; files it may list are left in place", exc)
        return frozenset()
    return frozenset(names | {index_name(name) for name in names if name.endswith(SPLIT_SUFFIX)})


def special_ids_of(dictionary: Dictionary) -> SpecialIds:
    """Special-symbol ids as a dictionary defines them."""
    return SpecialIds(bos=dictionary.bos, pad=dictionary.pad, eos=dictionary.eos, unk=dictionary.unk)


def column(
    ragged: Ragged | RowSource, lang: str | None, dict_name: str, dictionary: Dictionary, origin: str
) -> ColumnData:
    """A ColumnData for ``ragged`` encoded with ``dictionary``."""
    return ColumnData(
        ragged=ragged,
        lang=lang,
        dictionary_file=dict_name,
        dictionary_sha256=dictionary.sha256(),
        vocab_size=len(dictionary),
        origin=origin,
    )
