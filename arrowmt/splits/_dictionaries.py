"""A folder's dictionary files, checked against the split files encoded with them.

Each column of a split file records the dictionary its ids index: the file name, the
number of symbols and ``dictionary_sha256`` (:meth:`Dictionary.sha256`). A dictionary
replaced after conversion (by hand, or by a conversion killed while it published a new
dataset over an old one) would silently turn the ids into another corpus's words, so
every reader compares the two: :class:`~arrowmt.splits._split.Split` when it opens (a
present dictionary that differs is refused; a missing one is reported by whoever loads
it), :func:`load_column_dictionary` when a dictionary is used, exports on their copies,
``verify`` and the fairseq plugin on the dictionaries they hold.

Dictionaries are small, and each file state (:class:`FileIdentity`) is hashed once per
process (files changed in the last ``RACY_NS`` are hashed every time, as timestamps
advance in coarse ticks).
"""

from __future__ import annotations

import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from arrowmt._errors import VocabularyError
from arrowmt._heap import release_free_heap
from arrowmt.files import file_kind
from arrowmt.format import ColumnInfo, text_symbols_digest
from arrowmt.reading import RACY_NS, FileIdentity, SplitFile

if TYPE_CHECKING:
    from arrowmt.format import Dictionary

Digest = tuple[int, str]
"""A dictionary's number of symbols and :meth:`Dictionary.sha256`."""

MAX_REMEMBERED = 256
_DIGESTS: dict[FileIdentity, Digest] = {}


REPLACED_HINT = "replaced after conversion, or a conversion was stopped while publishing here: convert again"


def mismatch_error(
    path: Path | str, digest: Digest, where: str, info: ColumnInfo, hint: str = REPLACED_HINT
) -> VocabularyError | None:
    """The error when the dictionary ``path`` (``digest``) is not the one ``where`` (a split file's column)
    was encoded with, else None."""
    size, sha256 = digest
    if (size, sha256) == (info.vocab_size, info.dictionary_sha256):
        return None
    return VocabularyError(
        f"{path}: expected the dictionary {where} was encoded with ({info.vocab_size} symbols, sha256 "
        f"{info.dictionary_sha256[:12]}...), got {size} symbols, sha256 {sha256[:12]}... ({hint})"
    )


def column_place(split_file: Path, column: str) -> str:
    """How errors name one column of a split file."""
    return f"{split_file} column {column!r}"


def check_split_dictionaries(folder: Path, shards: Iterable[SplitFile]) -> None:
    """VocabularyError unless every column's dictionary file in ``folder``, where present, is the one it was
    encoded with (missing files are left to whoever loads them)."""
    for shard in shards:
        for column, info in shard.metadata.columns.items():
            path = folder / info.dictionary  # a plain file name: the reader checked it
            digest = file_digest(path)
            if digest is not None and (error := mismatch_error(path, digest, column_place(shard.path, column), info)):
                raise error


def load_column_dictionary(path: Path, shards: Iterable[SplitFile], column: str) -> Dictionary:
    """The dictionary file ``path``, refused (VocabularyError) unless ``column`` of every one of ``shards``
    was encoded with it."""
    digest, dictionary = _loaded_digest(path)
    for shard in shards:
        if error := mismatch_error(path, digest, column_place(shard.path, column), shard.metadata.columns[column]):
            raise error
    return dictionary


def file_digest(path: Path) -> Digest | None:
    """The digest of the dictionary file ``path`` (once per file state); None when it is missing.

    The plain layout converters write is hashed from the bytes (numpy only, see
    :func:`text_symbols_digest`); anything else is loaded as :meth:`Dictionary.load` loads it.
    """
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise VocabularyError(f"{path}: cannot read dictionary: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block the reader
        raise VocabularyError(f"{path}: expected a dictionary file, got {file_kind(st.st_mode)}")
    identity = FileIdentity.of_stat(st)
    if identity in _DIGESTS:
        return _DIGESTS[identity]
    started = time.time_ns()
    digest = _digest(path)
    release_free_heap()  # the digest's temporaries (a few MiB per 30k symbols) go back, not kept by every rank
    if identity.ctime_ns < started - RACY_NS and FileIdentity.of_stat(path.stat()) == identity:
        if len(_DIGESTS) >= MAX_REMEMBERED:
            _DIGESTS.pop(next(iter(_DIGESTS)))
        _DIGESTS[identity] = digest
    return digest


def _digest(path: Path) -> Digest:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise VocabularyError(f"{path}: cannot read dictionary: {exc.strerror or exc}") from exc
    digest = text_symbols_digest(data)
    return _loaded_digest(path)[0] if digest is None else digest


def _loaded_digest(path: Path) -> tuple[Digest, Dictionary]:
    """The dictionary file ``path`` loaded, and its digest. Only here is ``pyarrow.compute`` imported (with the
    dictionary's module): a process that only reads corpora never needs it, and it costs ~2 MiB per process."""
    from arrowmt.format import Dictionary

    dictionary = Dictionary.load(path)
    return (len(dictionary), dictionary.sha256()), dictionary
