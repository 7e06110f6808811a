"""One split of an arrowmt folder, all its shard files joined, without torch."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._arrays import sorted_unique
from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt._heap import release_free_heap
from arrowmt.files import reading
from arrowmt.format import TOKENS, Manifest, SpecialIds, SplitMetadata, split_path
from arrowmt.io import DEFAULT_ACCESS, WordRanges, check_access
from arrowmt.reading import (
    FileStamp,
    Spans,
    SplitFile,
    check_indices,
    exclusive_cumsum,
    local_folder,
    open_split_file,
    row_numbers,
)
from arrowmt.splits._dictionaries import check_split_dictionaries, load_column_dictionary
from arrowmt.stored import row_translator

if TYPE_CHECKING:
    from arrowmt.format import Dictionary


class Split:
    """All shards of one split (``train``, ``train1``, ...) of an arrowmt folder as one sequence of rows.

    Torch-free: row counts, lengths, located spans, the content fingerprint and
    change checks. Pickling keeps only the path: other processes reopen the
    map themselves (and fail if the files changed meanwhile).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        split: str = "train",
        manifest: Manifest | None = None,
        access: str = DEFAULT_ACCESS,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
    ) -> None:
        """``manifest``: the folder's manifest when already loaded (opening many splits of one folder).

        ``access``: the maps' access advice (:mod:`arrowmt.io._advice`): ``"random"``
        (default; training reads rows all over the files), ``"sequential"``, ``"normal"``.
        ``path`` may be a URL (``s3://bucket/prefix``): the corpus is then read through a
        node-local cache in ``cache_dir`` holding at most ``cache_limit`` bytes (see
        :func:`arrowmt.reading._local.local_folder`).
        """
        self.path = local_folder(path, cache_dir, cache_limit)
        self.split = split
        self._where = f"{self.path} split {split!r}"  # how errors name it
        self.access = check_access(access)
        with reading(self.path):  # no publish into the folder while its files are opened and checked
            self.manifest = Manifest.load(self.path) if manifest is None else manifest
            names = self.manifest.shards(split)
            if not names:
                raise InvalidParameterError(
                    f"split: expected one of {self.manifest.splits()} in {self.path}, got {split!r}"
                )
            self.shards = [open_shard(self.path, self.manifest, name, self.access) for name in names]
            check_split_dictionaries(self.path, self.shards)
        if any(shard.remote is not None for shard in self.shards):  # a cache's first open: its temporaries go back
            release_free_heap()
        self.shard_names = names
        sizes = np.array([len(s) for s in self.shards], dtype=np.int64)
        self.cumulative = np.concatenate([[0], np.cumsum(sizes)])
        first = self.shards[0].metadata
        self.row_order = row_translator(self.path, self.manifest, split, len(self), first.stored_order)
        self.columns: tuple[str, ...] = tuple(first.columns)
        self._check_shards_agree(first)

    def _check_shards_agree(self, first: SplitMetadata) -> None:
        for shard in self.shards[1:]:
            if tuple(shard.metadata.columns) != self.columns:
                raise FormatError(
                    f"{shard.path}: columns {list(shard.metadata.columns)} differ from "
                    f"{self.shards[0].path}: {list(self.columns)}"
                )

    def __getstate__(self) -> dict:
        return {"path": self.path, "split": self.split, "stamps": self._stamps(), "access": self.access}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["split"], access=state.get("access", DEFAULT_ACCESS))
        if self._stamps() != state["stamps"]:
            raise FormatError(f"{self.path}: split {self.split!r} files changed since the dataset was opened")

    def _stamps(self) -> list[FileStamp]:
        """The shards' stamps, then the row order map's (a copy's batches are placed by it)."""
        order = [] if self.row_order is None else [FileStamp.of(self.row_order.identity)]
        return [*(s.stamp for s in self.shards), *order]

    def __len__(self) -> int:
        return int(self.cumulative[-1])

    def __repr__(self) -> str:
        shards = f", {len(self.shards)} shards" if len(self.shards) > 1 else ""
        return f"{type(self).__name__}({str(self.path)!r}, {self.split!r}: {len(self)} rows{shards}, {self.columns})"

    @property
    def metadata(self) -> SplitMetadata:
        return self.shards[0].metadata

    @property
    def special_ids(self) -> SpecialIds:
        return self.metadata.special_ids

    @property
    def is_monolingual(self) -> bool:
        return self.columns == (TOKENS,)

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shard number and row-within-shard of each global index."""
        indices = row_numbers(indices, self._where)
        check_indices(indices, len(self), self._where)
        if self.row_order is not None:  # a copy in plan order
            indices = self.row_order.stored(indices)
        if len(self.shards) == 1:
            return np.zeros(indices.shape, dtype=np.int64), indices
        shard = np.searchsorted(self.cumulative, indices, side="right") - 1
        return shard, indices - self.cumulative[shard]

    def lengths(self, column: str, indices: np.ndarray | None = None, dtype: type | np.dtype = np.int64) -> np.ndarray:
        """Token counts of ``indices`` (all rows when None), from the offsets alone.

        int64 unless ``dtype`` (any integer dtype holding ``2**31 - 1``, e.g. int32 to halve the memory).
        """
        if indices is None:
            parts = [s.lengths(column, dtype=dtype) for s in self.shards]
            stored = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return stored if self.row_order is None else stored[self.row_order.where.whole()]
        return self._located_lengths(column, *self.locate(indices), dtype)

    def _located_lengths(self, column: str, shard: np.ndarray, local: np.ndarray, dtype: type | np.dtype) -> np.ndarray:
        if len(self.shards) == 1:
            return self.shards[0].lengths(column, local, dtype)
        out = np.empty(shard.shape[0], dtype=dtype)
        for k in sorted_unique(shard):
            mask = shard == k
            out[mask] = self.shards[k].lengths(column, local[mask], dtype)
        return out

    def num_tokens(self, indices: np.ndarray | None = None) -> np.ndarray:
        """fairseq's size of a row (int64): max over columns of the token count (indices located once)."""
        located = None if indices is None else self.locate(indices)

        def column_lengths(column: str) -> np.ndarray:
            return self.lengths(column) if located is None else self._located_lengths(column, *located, np.int64)

        sizes = column_lengths(self.columns[0])
        for column in self.columns[1:]:
            np.maximum(sizes, column_lengths(column), out=sizes)
        return sizes

    def row_array(self, column: str, index: int) -> np.ndarray:
        """Row ``index`` of ``column`` as an int32 array viewing the map (no copy)."""
        shard, local = self.locate(np.array([index]))
        return self.shards[int(shard[0])].row(column, int(local[0]))

    def column_spans(self, column: str, indices: np.ndarray) -> Spans:
        """Where the rows ``indices`` of ``column`` are, gathered with one vectorized step per shard.

        Rows all in one shard view that shard's map (no copy); rows from several
        shards are gathered into one compact array, in ``indices`` order.
        """
        if column not in self.columns:
            raise InvalidParameterError(f"column: expected one of {list(self.columns)}, got {column!r}")
        return self.located_spans(column, *self.locate(indices))

    def located_spans(self, column: str, shard: np.ndarray, local: np.ndarray) -> Spans:
        """:meth:`column_spans` for indices already split by :meth:`locate`."""
        if len(self.shards) == 1:
            return _shard_spans(self.shards[0], column, local)
        present = sorted_unique(shard)
        if present.size == 1:
            return _shard_spans(self.shards[int(present[0])], column, local)
        if present.size == 0:
            return Spans.empty()
        return self._multi_shard_spans(column, shard, local, present)

    def _multi_shard_spans(self, column: str, shard: np.ndarray, local: np.ndarray, present: np.ndarray) -> Spans:
        order = np.argsort(shard, kind="stable")
        sorted_shard = shard[order]
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for k in present:
            rows = local[order[sorted_shard == k]]
            self.shards[int(k)]
            spans = _shard_spans(self.shards[int(k)], column, rows)
            parts.append((spans.words, spans.starts, spans.lengths))
        grouped = Spans.concat_compact(parts)
        return grouped.select(np.argsort(order, kind="stable"))

    def advise(self, access: str) -> None:
        """Read every shard with another access advice from now on (see :meth:`SplitFile.advise`): the shard files
        opened with that advice, which this process's other readers of the files keep theirs."""
        self.access = check_access(access)
        self.shards = [_advised(shard, self.access) for shard in self.shards]

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where rows ``indices`` lie in the shard maps, every column (see :meth:`SplitFile.word_ranges`)."""
        shard, local = self.locate(indices)
        if len(self.shards) == 1:
            return [self.shards[0].word_ranges(c, local, values) for c in self.columns]
        out = []
        for k in sorted_unique(shard).tolist():
            rows = local[shard == k]
            out.extend(self.shards[k].word_ranges(c, rows, values) for c in self.columns)
        return out

    def stretch_ranges(self, starts: np.ndarray, ends: np.ndarray) -> list[tuple[WordRanges, np.ndarray]] | None:
        """Where stretches of stored rows ``[starts[i], ends[i])`` lie, every column, each range with its stretch
        (see :meth:`SplitFile.stretch_ranges`); None for a split of several shards."""
        if len(self.shards) != 1:
            return None
        return [self.shards[0].stretch_ranges(c, starts, ends) for c in self.columns]

    def dictionary(self, column: str) -> Dictionary:
        """The dictionary ``column``'s ids index, loaded from the folder and checked against the hash every
        shard recorded (VocabularyError if the file is not the one the split was encoded with)."""
        if column not in self.columns:
            raise InvalidParameterError(f"column: expected one of {list(self.columns)}, got {column!r}")
        return load_column_dictionary(self.path / self.metadata.columns[column].dictionary, self.shards, column)

    def fingerprint(self) -> str:
        """Stable identity of this split's content (from the manifest's checksums)."""
        digest = hashlib.sha256()
        for name in self.shard_names:
            digest.update(f"{name}:{self.manifest.files[name].sha256};".encode())
        return digest.hexdigest()

    def check_unchanged(self) -> None:
        """Raise FormatError if any shard file was modified since opening."""
        for shard in self.shards:
            shard.check_unchanged()


def open_shard(folder: Path, manifest: Manifest, name: str, access: str = DEFAULT_ACCESS) -> SplitFile:
    """The split file ``name`` listed in ``manifest``, refused unless its size and rows are the manifest's."""
    entry = manifest.files[name]
    shard = open_split_file(split_path(folder, name), access)
    if shard.stamp.size != entry.size or len(shard) != entry.rows:
        raise FormatError(
            f"{shard.path}: expected {entry.size} bytes and {entry.rows} rows as recorded in the "
            f"manifest, got {shard.stamp.size} bytes and {len(shard)} rows "
            "(file changed after conversion)"
        )
    return shard


def _advised(shard: SplitFile, access: str) -> SplitFile:
    """The shard file opened with ``access`` advice (the same file: FormatError if it changed since ``shard``)."""
    if shard.access == access:
        return shard
    advised = open_split_file(shard.path, access)
    if advised.identity != shard.identity:
        raise FormatError(f"{shard.path}: file changed since it was opened; reopen the dataset")
    return advised


def _shard_spans(shard: SplitFile, column: str, rows: np.ndarray) -> Spans:
    """Rows ``rows`` of ``column`` in one shard, viewing its map (copied when the shard caches a remote file)."""
    starts, lengths = shard.spans(column, rows)
    if shard.remote is None:
        return Spans(shard.words, starts, lengths)
    return Spans(shard.copy_words(starts, lengths), exclusive_cumsum(lengths), lengths)


def open_split(
    path: str | os.PathLike[str],
    split: str = "train",
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
) -> Split:
    """Open split ``split`` (all its shards) of the arrowmt folder (or URL, cached in ``cache_dir``) at ``path``."""
    return Split(path, split, cache_dir=cache_dir, cache_limit=cache_limit)
