"""Text conversion at corpus scale: newline-aligned chunks, tokenized once, spilled, then encoded and written.

Pass 1 (:func:`tokenize_chunk`, one task per chunk of one text file): read the chunk, check
UTF-8, tokenize it (whitespace or sentencepiece), number its distinct tokens locally
(``dictionary_encode``), write the rows of local ids and the chunk's small vocabulary to a
spill file, and return the chunk's counts (to build the dictionaries) and sizes.

Pass 2 (:func:`encode_chunk`, one task per chunk): map the chunk's local vocabulary through
the final dictionary (a lookup of the chunk's distinct tokens only), append ``</s>`` and
write the ids beside the spill. Then :func:`write_file` (one task per output file) streams
the encoded rows of both columns into record batches: a copy, no lookups.

So every file is tokenized exactly once and no process holds more than a few chunks.
Plain files are cut into byte ranges that every worker reads itself; a gzip file is read
once, in order, by the process that plans the chunks, which ships each chunk's text.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from arrowmt._errors import OutputWriteError, VocabularyError
from arrowmt.converters._output import special_ids_of
from arrowmt.converters._text import (
    GZIP_ERRORS,
    BadBytes,
    BadUtf8,
    SentencePieceModel,
    encode_token_ids,
    gzip_error,
    read_error,
    split_lines,
    token_ids,
)
from arrowmt.format import DEFAULT_ROWS_PER_BATCH, MAX_LIST_VALUES, ColumnInfo, Dictionary, SpecialIds, SplitMetadata
from arrowmt.reading import Ragged
from arrowmt.writing import choose_rows_per_batch_streaming, open_split_writer

DEFAULT_CHUNK_BYTES = 32 << 20
SCAN_BYTES = 1 << 16
SPILL_COLUMN = "tokens"


# ----- cutting files into chunks ----------------------------------------------------------------


@dataclass(frozen=True)
class TextChunk:
    """A run of whole lines of one text file: bytes ``start:start+length`` of its (decompressed) text.

    ``data`` holds the text of a gzip chunk (read by the planner); a plain file's chunk is read
    by the worker. ``disk_bytes`` is the part of the file on disk it stands for (progress).
    """

    path: str
    index: int
    start: int
    length: int
    disk_bytes: int
    data: bytes | None = None

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        try:
            with open(self.path, "rb") as handle:
                return os.pread(handle.fileno(), self.length, self.start)
        except OSError as exc:
            raise read_error(self.path, exc) from exc


def text_chunks(path: Path, chunk_bytes: int) -> Iterator[TextChunk]:
    """The chunks of a text file, about ``chunk_bytes`` each, cut after a newline (gzip: decompressed)."""
    if path.suffix == ".gz":
        return _gzip_chunks(path, chunk_bytes)
    return _plain_chunks(path, chunk_bytes)


def _plain_chunks(path: Path, chunk_bytes: int) -> Iterator[TextChunk]:
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start, index = 0, 0
            while start < size:
                stop = _line_start_after(handle, start + chunk_bytes, size)
                yield TextChunk(str(path), index, start, stop - start, stop - start)
                start, index = stop, index + 1
    except OSError as exc:
        raise read_error(path, exc) from exc


def _line_start_after(handle: object, position: int, size: int) -> int:
    """The first line start at or after ``position`` (``size`` if none): just past the next newline."""
    fd = handle.fileno()  # type: ignore[attr-defined]
    scan = position - 1  # a line starts at ``position`` if the byte before it is a newline
    while scan < size:
        block = os.pread(fd, SCAN_BYTES, scan)
        found = block.find(b"\n")
        if found >= 0:
            return scan + found + 1
        scan += len(block)
    return size


def _gzip_chunks(path: Path, chunk_bytes: int) -> Iterator[TextChunk]:
    try:
        with open(path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as text:
            carry, start, index, disk = b"", 0, 0, 0
            while True:
                block = text.read(chunk_bytes)
                data = carry + block
                cut = len(data) if not block else data.rfind(b"\n") + 1
                if block and cut == 0:  # no newline yet: one line longer than a chunk
                    carry = data
                    continue
                if cut:
                    used = raw.tell() - disk
                    disk += used
                    yield TextChunk(str(path), index, start, cut, used, data[:cut])
                    start, index = start + cut, index + 1
                carry = data[cut:]
                if not block:
                    return
    except GZIP_ERRORS as exc:
        raise gzip_error(path, exc) from None
    except OSError as exc:
        raise read_error(path, exc) from exc


# ----- pass 1: tokenize, count, spill -----------------------------------------------------------


@dataclass(frozen=True)
class TokenizeTask:
    """Tokenize ``chunk`` (with ``spm`` when given), write its rows of local ids to ``spill``;
    ``count``: also return the counts of its tokens."""

    chunk: TextChunk
    spill: str
    count: bool
    spm: SentencePieceModel | None = None


@dataclass(frozen=True)
class TokenizedChunk:
    """What pass 1 learned about one chunk: lines, tokens (without ``</s>``) and (when counted) its
    distinct tokens with their counts. ``bad`` says where invalid UTF-8 starts."""

    rows: int
    tokens: int
    vocabulary: pa.Array | None = None
    counts: np.ndarray | None = None
    bad: BadBytes | None = None


def tokenize_chunk(task: TokenizeTask) -> TokenizedChunk:
    """Pass 1 for one chunk (runs in a worker)."""
    data = task.chunk.read()
    try:
        lines = split_lines(data, keep_newlines=task.spm is None)
    except BadUtf8 as exc:
        return TokenizedChunk(0, 0, bad=exc.bad)
    del data
    rows = token_ids(task.spm.piece_text(lines) if task.spm is not None else lines)
    del lines
    _write_spill(task.spill, rows)
    local = rows.flatten()
    if not task.count:
        return TokenizedChunk(len(rows), len(local))
    counts = np.bincount(local.indices.to_numpy(), minlength=len(local.dictionary)).astype(np.int64)
    return TokenizedChunk(len(rows), len(local), local.dictionary, counts)


def _write_spill(path: str, rows: pa.ListArray) -> None:
    schema = pa.schema([pa.field(SPILL_COLUMN, rows.type, nullable=False)])
    try:
        with pa.OSFile(path, "wb") as sink, ipc.new_stream(sink, schema) as writer:
            writer.write_batch(pa.record_batch([rows], schema=schema))
    except OSError as exc:  # pyarrow's message names no file ("Error writing bytes to file")
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OutputWriteError(f"{path}: writing the conversion's temporary data failed: {reason}") from exc


def _read_spill(path: str) -> pa.ListArray:
    """The spilled rows (memory-mapped: the process reads only the pages it touches)."""
    with pa.memory_map(path) as source:
        return ipc.open_stream(source).read_next_batch().column(0)


# ----- pass 2: encode each chunk ---------------------------------------------------------------


@dataclass(frozen=True)
class EncodeTask:
    """Map the spilled chunk ``spill`` through the dictionary saved at ``dictionary_file`` (its SHA-256
    ``dictionary_sha256``), append ``</s>`` to every row and write the ids to ``encoded``."""

    spill: str
    encoded: str
    dictionary_file: str
    dictionary_sha256: str


@dataclass(frozen=True)
class EncodedChunk:
    """A chunk's ids as written: rows, ids (``</s>`` included, as fairseq counts tokens), ids that are ``<unk>``
    because the token is not in the dictionary (fairseq's "replaced")."""

    rows: int
    tokens: int
    unknown: int


def encode_chunk(task: EncodeTask) -> EncodedChunk:
    """Pass 2 for one chunk (runs in a worker): only the chunk's distinct tokens are looked up."""
    dictionary = _saved_dictionary(task.dictionary_file, task.dictionary_sha256)
    encoded = encode_token_ids(_read_spill(task.spill), dictionary)
    ragged = encoded.ragged
    _write_spill(task.encoded, pa.ListArray.from_arrays(pa.array(ragged.offsets), pa.array(ragged.values)))
    return EncodedChunk(encoded.n_lines, encoded.n_tokens, encoded.n_unk)


def _saved_dictionary(path: str, sha256: str) -> Dictionary:
    """The dictionary a conversion saved: the one this process built (:func:`build_dictionary`), else loaded
    once per process and checked against ``sha256``."""
    dictionary = _DICTIONARIES.get(sha256)
    if dictionary is None:
        dictionary = Dictionary.load(path)
        if dictionary.sha256() != sha256:
            raise VocabularyError(f"{path}: expected the dictionary with SHA-256 {sha256}, got {dictionary.sha256()}")
        _remember(sha256, dictionary)
    return dictionary


_DICTIONARIES: dict[str, Dictionary] = {}  # by SHA-256: the dictionaries this process built or loaded
KEPT_DICTIONARIES = 4


def _remember(sha256: str, dictionary: Dictionary) -> None:
    if len(_DICTIONARIES) >= KEPT_DICTIONARIES:
        _DICTIONARIES.pop(next(iter(_DICTIONARIES)))
    _DICTIONARIES[sha256] = dictionary


# ----- between passes 1 and 2: each dictionary ----------------------------------------------------


@dataclass(frozen=True)
class DictionaryTask:
    """Build a dictionary as ``fairseq-preprocess`` does from counts merged over the train text (distinct
    ``symbols``, their ``counts``, ``lines`` counted) and save it at every path of ``paths``."""

    symbols: pa.Array
    counts: np.ndarray
    lines: int
    threshold: int
    nwords: int
    padding_factor: int
    paths: tuple[str, ...]


@dataclass(frozen=True)
class BuiltDictionary:
    """A dictionary as saved: its SHA-256, size and special ids."""

    sha256: str
    size: int
    special_ids: SpecialIds


def build_dictionary(task: DictionaryTask) -> BuiltDictionary:
    """Build and save one dictionary (runs in a worker, which keeps it for the chunks it encodes next)."""
    dictionary = Dictionary.from_counts(
        task.symbols, task.counts, task.lines,
        threshold=task.threshold, nwords=task.nwords, padding_factor=task.padding_factor,
    )  # fmt: skip
    for path in task.paths:
        dictionary.save(path)
    sha256 = dictionary.sha256()
    _remember(sha256, dictionary)
    return BuiltDictionary(sha256, len(dictionary), special_ids_of(dictionary))


# ----- pass 3: write each output file -----------------------------------------------------------


@dataclass(frozen=True)
class SpillSlice:
    """Rows ``start:stop`` of the encoded chunk ``path``."""

    path: str
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class ColumnPlan:
    """One column of an output file: its metadata (tokens are counted when written), origin, rows."""

    info: ColumnInfo
    origin: str
    slices: tuple[SpillSlice, ...]


@dataclass(frozen=True)
class WriteTask:
    """Write the split file ``path`` (file-level split ``name``) from encoded chunks."""

    path: str
    name: str
    rows: int
    columns: dict[str, ColumnPlan]
    special_ids: SpecialIds
    source_format: str


def write_file(task: WriteTask) -> str:
    """Write one output file (runs in a worker): it appears atomically, complete or not at all. Returns its name."""
    meta = _metadata(task)
    origins = {role: plan.origin for role, plan in task.columns.items()}
    readers = {role: _EncodedRows() for role in task.columns}
    with open_split_writer(task.path, meta, origins=origins) as writer:
        for segment in _aligned_segments([plan.slices for plan in task.columns.values()]):
            writer.write({role: readers[role].rows(part) for role, part in zip(task.columns, segment, strict=True)})
    return task.name


def _metadata(task: WriteTask) -> SplitMetadata:
    """The file's metadata from the encoded row lengths alone (rows per batch as :func:`write_split` picks it)."""
    columns = {role: _with_tokens(plan) for role, plan in task.columns.items()}
    readers = [lambda plan=plan: _row_lengths(plan.slices) for plan in task.columns.values()]
    rpb = choose_rows_per_batch_streaming(readers, DEFAULT_ROWS_PER_BATCH, MAX_LIST_VALUES)
    return SplitMetadata(task.name, task.rows, rpb, columns, task.special_ids, task.source_format)


def _with_tokens(plan: ColumnPlan) -> ColumnInfo:
    tokens = sum(int(lengths.sum()) for lengths in _row_lengths(plan.slices))
    info = plan.info
    return ColumnInfo(info.role, info.lang, info.dictionary, info.dictionary_sha256, info.vocab_size, tokens)


def _row_lengths(slices: tuple[SpillSlice, ...]) -> Iterator[np.ndarray]:
    """Row lengths (``</s>`` included), slice by slice."""
    for part in slices:
        offsets = _read_spill(part.path).offsets.to_numpy()
        yield np.diff(offsets[part.start : part.stop + 1]).astype(np.int64)


def _aligned_segments(columns: list[tuple[SpillSlice, ...]]) -> Iterator[list[SpillSlice]]:
    """Cut every column's slices at the union of their boundaries, so each step has equal rows everywhere."""
    cursors = [list(slices) for slices in columns]
    while cursors and cursors[0]:
        step = min(slices[0].rows for slices in cursors)
        segment = []
        for slices in cursors:
            head = slices[0]
            segment.append(SpillSlice(head.path, head.start, head.start + step))
            if head.rows == step:
                slices.pop(0)
            else:
                slices[0] = SpillSlice(head.path, head.start + step, head.stop)
        yield segment


class _EncodedRows:
    """Rows of encoded chunks, the current chunk kept mapped."""

    def __init__(self) -> None:
        self._path: str | None = None
        self._rows: pa.ListArray | None = None

    def rows(self, part: SpillSlice) -> Ragged:
        if part.path != self._path:
            self._rows, self._path = _read_spill(part.path), part.path
        assert self._rows is not None
        offsets = self._rows.offsets.to_numpy()[part.start : part.stop + 1].astype(np.int64)
        return Ragged(offsets - offsets[0], self._rows.values.to_numpy()[offsets[0] : offsets[-1]])
