"""Raw text to token ids, vectorized: reading, whitespace tokenization, dictionary lookup.

The results match fairseq's binarizer (``Dictionary.encode_line`` with ``tokenize_line``):
tokens are the whitespace-separated pieces of a line (Python's ``str.split()``, which
Arrow's ``utf8_split_whitespace`` matches character for character) and every row ends
with ``</s>``. Lines end at ``\\n`` only; one trailing ``\\r`` is removed (CRLF files). A lone
``\\r`` inside a line stays in the line (fairseq's universal-newline reading would start a
new line there).
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._errors import InputDataError, InvalidParameterError, MissingDependencyError, VocabularyError
from arrowmt.format._ragged import Ragged
from arrowmt.format._vocab import Dictionary

PathLike = str | os.PathLike[str]
LineArray = pa.Array | pa.ChunkedArray
MAX_STRING_BYTES = 2**31 - 1
MAX_INT32 = 2**31 - 1
SENTENCEPIECE_HINT = "pip install 'arrowmt[sentencepiece]'"


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


def read_lines(path: PathLike) -> pa.StringArray:
    """All lines of a UTF-8 text file (gzip when the name ends in ``.gz``), newlines removed.

    A final line without a newline counts. Returns a ``large_string`` array instead when
    the text exceeds 2 GiB. Invalid UTF-8 raises InputDataError with line and byte offset.
    """
    source = Path(path)
    data = _read_bytes(source)
    text = _validated_text(data, source)
    lines = pc.split_pattern(text, "\n").flatten()
    if len(data) == 0 or data.endswith(b"\n"):
        lines = lines.slice(0, len(lines) - 1)
    lines = _strip_carriage_returns(lines)
    if len(data) <= MAX_STRING_BYTES:
        return lines.cast(pa.string())
    return lines


def _read_bytes(path: Path) -> bytes:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise InputDataError(f"{path}: expected a complete gzip file, got a corrupt one ({exc})") from None
    except OSError as exc:
        raise InputDataError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _validated_text(data: bytes, path: Path) -> pa.Array:
    """``data`` as a one-element large_string array, UTF-8 checked by Arrow without copying."""
    offsets = pa.array([0, len(data)], pa.int64()).buffers()[1]
    binary = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        return binary.cast(pa.large_string())
    except pa.ArrowInvalid:
        raise _utf8_error(data, path) from None


def _utf8_error(data: bytes, path: Path) -> InputDataError:
    """Locate the first invalid byte (only on the error path, so a full decode is fine)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = exc.start
    else:  # Arrow rejected what Python accepts: report without a position
        return InputDataError(f"{path}: expected UTF-8 text, got bytes Arrow rejects as UTF-8")
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1)
    return InputDataError(
        f"{path}:{line}: expected UTF-8 text, got invalid byte 0x{data[offset]:02x} "
        f"at byte offset {offset} (byte {column + 1} of line {line})"
    )


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
    lines = _as_lines(lines)
    pieces = pc.utf8_split_whitespace(lines)
    flat = pieces.flatten()
    keep = pc.greater(pc.binary_length(flat), 0)
    parents = pc.list_parent_indices(pieces).to_numpy()
    lengths = np.bincount(parents[keep.to_numpy(zero_copy_only=False)], minlength=len(lines))
    return _list_array(lengths, flat.filter(keep))


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
    if offsets[-1] <= MAX_INT32:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
    return pa.LargeListArray.from_arrays(pa.array(offsets), values)


def encode(lines: LineArray, dictionary: Dictionary, append_eos: bool = True) -> Encoded:
    """Token ids of every line (``</s>`` appended when ``append_eos``), like fairseq's binarizer."""
    return encode_token_lists(tokenize(lines), dictionary, append_eos)


def encode_token_lists(tokens: pa.Array, dictionary: Dictionary, append_eos: bool = True) -> Encoded:
    """Ids of already tokenized lines (a list<string> array)."""
    if not (pa.types.is_list(tokens.type) or pa.types.is_large_list(tokens.type)):
        raise InvalidParameterError(f"tokens: expected a list<string> array, got {tokens.type}")
    ids, unknown = dictionary.lookup(tokens.flatten())
    lengths = pc.list_value_length(tokens).fill_null(0).to_numpy().astype(np.int64)
    if append_eos:
        ends = np.cumsum(lengths)
        ids = np.insert(ids, ends, np.int32(dictionary.eos))
        lengths = lengths + 1
    ragged = Ragged.from_lengths(lengths, ids.astype(np.int32, copy=False))
    return Encoded(ragged, n_tokens=int(ids.shape[0]), n_unk=int(np.count_nonzero(unknown)))


def encode_file(path: PathLike, dictionary: Dictionary, append_eos: bool = True) -> Encoded:
    """Read, tokenize and encode one text file."""
    return encode(read_lines(path), dictionary, append_eos)


def encode_parallel(
    paths: Sequence[PathLike], dictionary: Dictionary, workers: int = 1, append_eos: bool = True
) -> list[Encoded]:
    """Encode several files, one per task, in ``workers`` processes (1: in this process).

    The result is the same whatever ``workers`` is: one Encoded per path, in order.
    Workers are spawned (not forked), so a calling script needs the usual
    ``if __name__ == "__main__":`` guard.
    """
    if workers < 1:
        raise InvalidParameterError(f"workers: expected >= 1, got {workers}")
    if workers == 1 or len(paths) <= 1:
        return [encode_file(path, dictionary, append_eos) for path in paths]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(workers, len(paths)), mp_context=context) as pool:
        return list(pool.map(encode_file, paths, repeat(dictionary), repeat(append_eos)))


# ----- sentencepiece ----------------------------------------------------------------------------


def encode_sentencepiece(
    lines: LineArray, model_path: PathLike, dictionary: Dictionary, append_eos: bool = True
) -> Encoded:
    """Apply a sentencepiece model, then map the pieces through ``dictionary``.

    Same ids as ``spm_encode --output_format=piece`` followed by fairseq's binarizer.
    """
    return encode_token_lists(sentencepiece_pieces(lines, model_path), dictionary, append_eos)


def sentencepiece_pieces(lines: LineArray, model_path: PathLike) -> pa.ListArray:
    """The sentencepiece pieces of every line, as a list<string> array (e.g. to build a dictionary).

    The pieces are joined by spaces and split again, exactly as fairseq-preprocess
    tokenizes the text that ``spm_encode --output_format=piece`` writes.
    """
    lines = _as_lines(lines)
    processor = _load_sentencepiece(model_path)
    pieces = processor.encode(lines.to_pylist(), out_type=str)
    return tokenize(pc.binary_join(pa.array(pieces, pa.list_(pa.string())), " "))


def _import_sentencepiece() -> ModuleType:
    try:
        import sentencepiece
    except ImportError as exc:
        raise MissingDependencyError(
            f"sentencepiece: expected the optional package to be installed, got ImportError ({exc}); "
            f"install it with: {SENTENCEPIECE_HINT}"
        ) from None
    return sentencepiece


def _load_sentencepiece(model_path: PathLike) -> Any:
    spm = _import_sentencepiece()
    if not Path(model_path).is_file():
        raise InvalidParameterError(f"model_path: expected a sentencepiece model file, got {model_path}")
    try:
        return spm.SentencePieceProcessor(model_file=os.fspath(model_path))
    except (OSError, RuntimeError) as exc:
        raise VocabularyError(
            f"{model_path}: expected a sentencepiece model, got one that fails to load ({exc})"
        ) from None
