"""Raw text to token ids, vectorized: reading, whitespace tokenization, dictionary lookup.

The results match fairseq's binarizer (``Dictionary.encode_line`` with ``tokenize_line``):
tokens are the whitespace-separated pieces of a line (Python's ``str.split()``, which
Arrow's ``utf8_split_whitespace`` matches character for character) and every row ends
with ``</s>``. Lines end at ``\\n`` only; one trailing ``\\r`` is removed (CRLF files). A lone
``\\r`` inside a line stays in the line (fairseq's universal-newline reading would start a
new line there).

Text is handled in byte chunks that end after a newline (:func:`split_lines`), so a file of
any size is read piece by piece; :func:`read_lines` reads a whole (small) file.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._errors import InputDataError, InvalidParameterError, VocabularyError
from arrowmt._optional import require
from arrowmt.format import Dictionary
from arrowmt.reading import Ragged

PathLike = str | os.PathLike[str]
LineArray = pa.Array | pa.ChunkedArray
MAX_STRING_BYTES = 2**31 - 1
MAX_INT32 = 2**31 - 1
# White space that str.split() cuts at and Arrow's ascii_split_whitespace does not (an RE2 character class)
UNSPLIT_WHITESPACE = "[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
NEWLINE = 0x0A
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


@dataclass(frozen=True)
class Encoded:
    """Encoded lines: ``ragged`` rows of int32 ids, as fairseq's binarizer counts them.

    ``n_tokens`` is the number of ids written (``</s>`` included, fairseq's "tokens");
    ``n_unk`` the number of tokens not in the dictionary that became ``<unk>``
    (fairseq's "replaced"; a literal ``<unk>`` in the text is not counted).
    """

    ragged: Ragged
    n_tokens: int
    n_unk: int

    @property
    def n_lines(self) -> int:
        return len(self.ragged)


# ----- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BadBytes:
    """Where invalid UTF-8 starts in a chunk of text: byte ``offset`` in the chunk, 0-based ``line``
    of the chunk, ``column`` (byte within that line) and the offending ``byte`` (None when Arrow
    rejects what Python accepts)."""

    offset: int
    line: int
    column: int
    byte: int | None

    def error(self, path: PathLike, first_line: int = 0, first_byte: int = 0) -> InputDataError:
        """The error for a chunk of ``path`` that starts at line ``first_line`` (0-based), byte ``first_byte``."""
        if self.byte is None:
            return InputDataError(f"{path}: expected UTF-8 text, got bytes Arrow rejects as UTF-8")
        line = first_line + self.line + 1
        return InputDataError(
            f"{path}:{line}: expected UTF-8 text, got invalid byte 0x{self.byte:02x} "
            f"at byte offset {first_byte + self.offset} (byte {self.column + 1} of line {line})"
        )


class BadUtf8(Exception):
    """Raised by :func:`split_lines`; carries where the chunk stops being UTF-8."""

    def __init__(self, bad: BadBytes) -> None:
        super().__init__(bad)
        self.bad = bad


def read_lines(path: PathLike) -> pa.StringArray:
    """All lines of a UTF-8 text file (gzip when the name ends in ``.gz``), newlines removed.

    Reads the whole file at once (conversion reads in chunks instead). A final line without
    a newline counts. Returns a ``large_string`` array instead when the text exceeds 2 GiB.
    Invalid UTF-8 raises InputDataError with line and byte offset.
    """
    source = Path(path)
    data = read_text_bytes(source)
    try:
        return split_lines(data, keep_newlines=False)
    except BadUtf8 as exc:
        raise exc.bad.error(source) from None


def read_text_bytes(path: Path) -> bytes:
    """The bytes of a text file, decompressed when its name ends in ``.gz``."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except GZIP_ERRORS as exc:
        raise gzip_error(path, exc) from None
    except OSError as exc:
        raise read_error(path, exc) from exc


def gzip_error(path: PathLike, exc: BaseException) -> InputDataError:
    return InputDataError(f"{path}: expected a complete gzip file, got a corrupt one ({exc})")


def read_error(path: PathLike, exc: OSError) -> InputDataError:
    return InputDataError(f"{path}: cannot read: {exc.strerror or exc}")


def split_lines(data: bytes, keep_newlines: bool = False) -> pa.Array:
    """The lines of ``data`` (UTF-8 text) as a string array, without copying the text when ``keep_newlines``.

    A final line without a newline counts. ``keep_newlines=True`` leaves each line's ``\\n``
    (and ``\\r``) in place: whitespace tokenization is the same, and no copy is made.
    Otherwise the ``\\n`` and one ``\\r`` before it are removed. Raises :class:`BadUtf8`.
    """
    bytes_view = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(bytes_view == NEWLINE) + 1
    partial = len(data) > 0 and data[-1] != NEWLINE
    large = len(data) > MAX_STRING_BYTES
    offsets = np.zeros(ends.shape[0] + 1 + partial, dtype=np.int64 if large else np.int32)
    offsets[1 : ends.shape[0] + 1] = ends
    if partial:
        offsets[-1] = len(data)
    string_type = pa.large_string() if large else pa.string()
    binary = pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        offsets.shape[0] - 1,
        [None, pa.py_buffer(offsets), pa.py_buffer(data)],
    )
    try:
        lines = binary.cast(string_type)
    except pa.ArrowInvalid:
        raise BadUtf8(_locate_bad_utf8(data)) from None
    if keep_newlines:
        return lines
    return _strip_carriage_returns(pc.utf8_rtrim(lines, characters="\n"))


def _locate_bad_utf8(data: bytes) -> BadBytes:
    """Locate the first invalid byte (only on the error path, so a full decode is fine)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start
    else:  # Arrow rejected what Python accepts: report without a position
        return BadBytes(0, 0, 0, None)
    line = data.count(b"\n", 0, offset)
    column = offset - (data.rfind(b"\n", 0, offset) + 1)
    return BadBytes(offset, line, column, data[offset])


def _strip_carriage_returns(lines: pa.Array) -> pa.Array:
    has_cr = pc.ends_with(lines, "\r")
    if not pc.any(has_cr).as_py():
        return lines
    return pc.if_else(has_cr, pc.utf8_slice_codeunits(lines, 0, -1), lines)


def check_same_line_count(src_path: PathLike, n_src: int, tgt_path: PathLike, n_tgt: int) -> None:
    """Raise InputDataError unless the two sides of a parallel corpus have as many lines."""
    if n_src != n_tgt:
        raise InputDataError(
            f"{src_path} and {tgt_path}: expected the same number of lines, "
            f"got {n_src} in {src_path} and {n_tgt} in {tgt_path}"
        )


# ----- tokenizing and encoding ------------------------------------------------------------------


def tokenize(lines: LineArray) -> pa.ListArray:
    """Whitespace tokens of every line, as fairseq's ``tokenize_line`` (``str.split()``)."""
    rows = token_ids(lines)
    return _rows_of(rows.offsets.to_numpy(), rows.flatten().dictionary_decode())


def token_ids(lines: LineArray) -> pa.ListArray:
    """The tokens of :func:`tokenize`, numbered: a list<dictionary<int32, string>> array whose dictionary
    holds every distinct token once, in order of first appearance.

    Arrow's ``ascii_split_whitespace`` (2.5x as fast as ``utf8_split_whitespace``) cuts UTF-8 text
    right at ASCII white space, which no multi-byte character contains. When a distinct token still
    holds white space that ``str.split()`` cuts at (:data:`UNSPLIT_WHITESPACE`: rare), the lines are
    split again the Unicode way. Empty pieces (Arrow gives one per extra separator) are dropped.
    """
    lines = _as_lines(lines)
    pieces = pc.ascii_split_whitespace(lines)
    numbered = pc.dictionary_encode(pieces.flatten())
    if pc.any(pc.match_substring_regex(numbered.dictionary, UNSPLIT_WHITESPACE)).as_py():
        pieces = pc.utf8_split_whitespace(lines)
        numbered = pc.dictionary_encode(pieces.flatten())
    return _without_empty_token(pieces.offsets.to_numpy(), numbered)


def _without_empty_token(offsets: np.ndarray, numbered: pa.DictionaryArray) -> pa.ListArray:
    """Rows ``offsets`` of the numbered pieces ``numbered`` with the empty piece, if any, removed
    (from the rows and from the dictionary, the later ids moving down by one)."""
    offsets = offsets.astype(np.int64) - offsets[0]
    indices = numbered.indices.to_numpy()
    vocabulary = numbered.dictionary
    empty = np.flatnonzero(pc.binary_length(vocabulary).to_numpy() == 0)
    if empty.size:
        e = int(empty[0])
        keep = indices != e
        kept = np.zeros(keep.shape[0] + 1, dtype=np.int32 if keep.shape[0] <= MAX_INT32 else np.int64)
        np.cumsum(keep, out=kept[1:])
        offsets = kept[offsets]
        indices = indices[keep]
        indices -= indices > e
        vocabulary = pa.concat_arrays([vocabulary.slice(0, e), vocabulary.slice(e + 1)])
    return _rows_of(offsets, pa.DictionaryArray.from_arrays(indices, vocabulary))


def _as_lines(lines: LineArray) -> pa.Array:
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if not (pa.types.is_string(lines.type) or pa.types.is_large_string(lines.type)):
        raise InvalidParameterError(f"lines: expected a string array, got {lines.type}")
    if lines.null_count:
        raise InvalidParameterError(f"lines: expected no nulls, got {lines.null_count}")
    return lines


def _list_array(lengths: np.ndarray, values: pa.Array) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return _rows_of(offsets, values)


def _rows_of(offsets: np.ndarray, values: pa.Array) -> pa.Array:
    """Rows ``values[offsets[i]:offsets[i + 1]]`` (a list array; a large list beyond int32 offsets)."""
    if offsets[-1] <= MAX_INT32:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32, copy=False)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64, copy=False)), values)


def encode(lines: LineArray, dictionary: Dictionary, append_eos: bool = True) -> Encoded:
    """Token ids of every line (``</s>`` appended when ``append_eos``), like fairseq's binarizer."""
    return encode_token_ids(token_ids(lines), dictionary, append_eos)


def encode_token_ids(rows: pa.ListArray, dictionary: Dictionary, append_eos: bool = True) -> Encoded:
    """Ids of numbered tokens (:func:`token_ids`): only the distinct tokens are looked up."""
    numbered = rows.flatten()
    ids, unknown = dictionary.lookup(numbered.dictionary)
    local = numbered.indices.to_numpy()
    offsets = rows.offsets.to_numpy().astype(np.int64)
    ragged = Ragged(offsets - offsets[0], ids[local])
    if append_eos:
        ragged = append_row_end(ragged, dictionary.eos)
    return Encoded(ragged, n_tokens=int(ragged.values.shape[0]), n_unk=int(np.count_nonzero(unknown[local])))


def encode_token_lists(tokens: pa.Array, dictionary: Dictionary, append_eos: bool = True) -> Encoded:
    """Ids of already tokenized lines (a list<string> array)."""
    if not (pa.types.is_list(tokens.type) or pa.types.is_large_list(tokens.type)):
        raise InvalidParameterError(f"tokens: expected a list<string> array, got {tokens.type}")
    ids, unknown = dictionary.lookup(tokens.flatten())
    lengths = pc.list_value_length(tokens).fill_null(0).to_numpy().astype(np.int64)
    ragged = Ragged.from_lengths(lengths, ids.astype(np.int32, copy=False))
    if append_eos:
        ragged = append_row_end(ragged, dictionary.eos)
    return Encoded(ragged, n_tokens=int(ragged.values.shape[0]), n_unk=int(np.count_nonzero(unknown)))


def append_row_end(ragged: Ragged, eos: int) -> Ragged:
    """``ragged`` with ``eos`` appended to every row (int32 values)."""
    offsets = ragged.offsets + np.arange(ragged.offsets.shape[0], dtype=np.int64)
    values = np.insert(np.asarray(ragged.values, dtype=np.int32), ragged.offsets[1:], np.int32(eos))
    return Ragged(offsets, values)


# ----- sentencepiece ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SentencePieceModel:
    """A sentencepiece model's bytes and their SHA-256 (shipped to workers, recorded in the manifest)."""

    sha256: str
    proto: bytes

    @classmethod
    def load(cls, model_path: PathLike) -> SentencePieceModel:
        """Read and check a model file (InvalidParameterError if absent, VocabularyError if it fails to load)."""
        _import_sentencepiece()
        path = Path(model_path)
        if not path.is_file():
            raise InvalidParameterError(f"model_path: expected a sentencepiece model file, got {model_path}")
        proto = path.read_bytes()
        model = cls(hashlib.sha256(proto).hexdigest(), proto)
        try:
            model.processor()
        except VocabularyError as exc:
            raise VocabularyError(f"{model_path}: {exc}") from None
        return model

    def processor(self) -> Any:
        """The loaded ``SentencePieceProcessor`` (one per process and model)."""
        cached = _PROCESSORS.get(self.sha256)
        if cached is None:
            spm = _import_sentencepiece()
            cached = spm.SentencePieceProcessor()
            try:
                cached.LoadFromSerializedProto(self.proto)
            except (OSError, RuntimeError) as exc:
                raise VocabularyError(f"expected a sentencepiece model, got one that fails to load ({exc})") from None
            _PROCESSORS[self.sha256] = cached
        return cached

    def pieces(self, lines: LineArray) -> pa.ListArray:
        """The pieces of every line, as fairseq-preprocess tokenizes ``spm_encode --output_format=piece`` output."""
        return tokenize(self.piece_text(lines))

    def piece_text(self, lines: LineArray) -> pa.Array:
        """The text ``spm_encode --output_format=piece`` writes for ``lines``: each line's pieces joined by spaces
        (fairseq-preprocess then splits it again on white space). Lines are encoded with the batch API."""
        lines = _as_lines(lines)
        pieces = self.processor().encode(lines.to_pylist(), out_type=str, num_threads=1)
        return pc.binary_join(pa.array(pieces, pa.list_(pa.string())), " ")


_PROCESSORS: dict[str, Any] = {}


def encode_sentencepiece(
    lines: LineArray, model_path: PathLike, dictionary: Dictionary, append_eos: bool = True
) -> Encoded:
    """Apply a sentencepiece model, then map the pieces through ``dictionary``.

    Same ids as ``spm_encode --output_format=piece`` followed by fairseq's binarizer.
    """
    return encode_token_lists(sentencepiece_pieces(lines, model_path), dictionary, append_eos)


def sentencepiece_pieces(lines: LineArray, model_path: PathLike) -> pa.ListArray:
    """The sentencepiece pieces of every line, as a list<string> array (e.g. to build a dictionary)."""
    lines = _as_lines(lines)
    return SentencePieceModel.load(model_path).pieces(lines)


def _import_sentencepiece() -> ModuleType:
    return require("sentencepiece", "sentencepiece", "sentencepiece encoding (spm_model)")
