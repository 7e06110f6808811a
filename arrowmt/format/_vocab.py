"""A fairseq-compatible token dictionary: ``dict.txt`` reading and writing, building, vectorized lookup.

Ids and files match ``fairseq.data.Dictionary``: the specials ``<s>``, ``<pad>``, ``</s>``,
``<unk>`` take ids 0-3 and are not written to ``dict.txt``; each line is ``<symbol> <count>``
split on the last space, optionally followed by `` #fairseq:overwrite``, which lets a symbol
repeat (the later entry gets a new id and wins lookups). Building follows
``fairseq-preprocess``: counts (plus one ``</s>`` per line), most frequent first, ties in
code point order, then padding with ``madeupword0000``... to a multiple of ``padding_factor``.

Lookups run over whole Arrow arrays (``pyarrow.compute.index_in``), never token by token.
The lists ``symbols`` and ``counts`` are public for reading; treat them as read-only.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError, VocabularyError
from arrowmt.files import write_bytes_atomic
from arrowmt.format._symbols import OVERWRITE_FLAG, SPECIALS, symbols_digest

MADEUP_FORMAT = "madeupword{:04d}"
ENTRY_PATTERN = r"^(?P<word>.*) (?P<field>[^ ]*)$"
PLAIN_COUNT_PATTERN = r"^-?[0-9]{1,18}$"
INT64_MAX = np.iinfo(np.int64).max

TokenArrays = pa.Array | pa.ChunkedArray


class Dictionary:
    """Symbols and counts with fairseq's ids; see the module docstring for the file format."""

    bos: int = 0
    pad: int = 1
    eos: int = 2
    unk: int = 3
    nspecial: int = len(SPECIALS)

    def __init__(self, symbols: Sequence[str] | None = None, counts: Sequence[int] | None = None) -> None:
        """Wrap full lists (the four specials first); no arguments gives just the specials.

        ``counts`` defaults to 1 per symbol (what fairseq gives the specials). A repeated
        symbol is allowed (the ``#fairseq:overwrite`` case): lookups return its last id.
        """
        self.symbols: list[str] = list(SPECIALS if symbols is None else symbols)
        _check_specials(self.symbols)
        self.counts: list[int] = _as_counts([1] * len(self.symbols) if counts is None else counts, len(self))
        self._indices: dict[str, int] = dict(zip(self.symbols, range(len(self.symbols)), strict=True))
        self._lookup_cache: tuple[pa.Array, np.ndarray] | None = None
        self._symbols_cache: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self._indices

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Dictionary):
            return NotImplemented
        return self.symbols == other.symbols and self.counts == other.counts

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Dictionary({len(self)} symbols, sha256={self.sha256()[:12]})"

    def __getstate__(self) -> dict[str, Any]:
        return {"symbols": self.symbols, "counts": self.counts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["symbols"], state["counts"])  # type: ignore[misc]

    def index(self, symbol: str) -> int:
        """The id of ``symbol``, or ``unk`` when it is not in the dictionary."""
        return self._indices.get(symbol, self.unk)

    def symbol(self, i: int) -> str:
        """The symbol with id ``i``."""
        if not 0 <= i < len(self.symbols):
            raise InvalidParameterError(f"id: expected 0 <= id < {len(self.symbols)}, got {i}")
        return self.symbols[i]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dictionary:
        """Read a fairseq ``dict.txt``; every problem raises VocabularyError naming file and line."""
        source = Path(path)
        lines = _read_dict_lines(source)
        words, counts, flagged = _parse_entries(lines, source)
        _check_duplicates(words, flagged, source)
        return cls([*SPECIALS, *words.to_pylist()], [1] * len(SPECIALS) + counts)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``dict.txt`` atomically, as fairseq does (specials left out).

        A symbol that repeats an earlier one gets the `` #fairseq:overwrite`` flag so
        that the file loads back (fairseq itself drops the flag and cannot reload it).
        """
        write_bytes_atomic(path, self.to_text().encode("utf-8"))

    def to_text(self) -> str:
        """The ``dict.txt`` content that :meth:`save` writes."""
        regular = slice(self.nspecial, None)
        symbols = pa.array(self.symbols[regular], pa.large_string())
        counts = pa.array(self.counts[regular], pa.int64()).cast(pa.large_string())
        lines = pc.binary_join_element_wise(symbols, counts, _text(" "))
        repeated = pa.array(_repeat_mask(self._symbol_array())[self.nspecial :])
        flagged = pc.binary_join_element_wise(lines, _text(OVERWRITE_FLAG), _text(" "))
        lines = pc.if_else(repeated, flagged, lines)
        return _join_strings(pc.binary_join_element_wise(lines, _text("\n"), _text("")), "")

    def sha256(self) -> str:
        """Hex SHA-256 of the symbol list (ids only; counts do not enter).

        Defined as SHA-256 over ``b"arrowmt.format._vocab.v1\\n"``, the symbol count and each
        symbol's UTF-8 byte length (little-endian int64), then the concatenated symbols.
        """
        return symbols_sha256(self._symbol_array())

    def encode_tokens(self, flat_tokens: TokenArrays) -> np.ndarray:
        """Ids (int32) of a flat string array; tokens not in the dictionary become ``unk``."""
        return self.lookup(flat_tokens)[0]

    def lookup(self, flat_tokens: TokenArrays) -> tuple[np.ndarray, np.ndarray]:
        """Ids (int32) of a flat string array and a mask of the tokens that were not found."""
        _check_string_array(flat_tokens, "flat_tokens")
        keys, ids = self._lookup_table()
        positions = pc.index_in(flat_tokens, value_set=keys)
        missing = len(ids)
        positions_np = _to_numpy(positions.fill_null(missing))
        return np.append(ids, np.int32(self.unk))[positions_np], positions_np == missing

    def decode(self, ids: Sequence[int] | np.ndarray, include_eos: bool = False) -> str:
        """The symbols of ``ids`` joined by spaces, for display; ``</s>`` left out unless ``include_eos``
        (as fairseq's ``Dictionary.string``), the other specials shown."""
        try:
            ids_np = np.asarray(ids, dtype=np.int64)
        except (OverflowError, TypeError, ValueError) as exc:
            raise InvalidParameterError(f"ids: expected int64 ids, got {str(ids)[:80]} ({exc})") from None
        if ids_np.size and (ids_np.min() < 0 or ids_np.max() >= len(self)):
            raise InvalidParameterError(
                f"ids: expected values in [0, {len(self)}), got {int(ids_np.min())}..{int(ids_np.max())}"
            )
        if not include_eos:
            ids_np = ids_np[ids_np != self.eos]
        return _join_strings(self._symbol_array().take(pa.array(ids_np)), " ")

    @classmethod
    def build(
        cls, *token_arrays: TokenArrays, threshold: int = -1, nwords: int = -1, padding_factor: int = 8
    ) -> Dictionary:
        """Build from tokenized lines (list<string> arrays) as ``fairseq-preprocess`` does.

        Every token is counted and every line adds one ``</s>``; tokens equal to a special
        add to that special's count. Symbols are ordered by count, descending, ties in code
        point order; those with count < ``threshold`` are dropped; ``nwords`` > 0 caps the
        size, specials included; then the size is padded to a multiple of ``padding_factor``
        (0 or 1: no padding) with ``madeupword0000``, ... of count 0.
        """
        values, counts, n_lines = _count_tokens(token_arrays)
        return cls.from_counts(
            values, counts, n_lines, threshold=threshold, nwords=nwords, padding_factor=padding_factor
        )

    @classmethod
    def from_counts(
        cls,
        values: pa.Array,
        counts: np.ndarray,
        n_lines: int,
        *,
        threshold: int = -1,
        nwords: int = -1,
        padding_factor: int = 8,
    ) -> Dictionary:
        """:meth:`build` from counts already taken: distinct tokens ``values`` (strings), their ``counts``
        and the number of lines counted (e.g. merged from counts over chunks of a large corpus)."""
        check_integer("padding_factor", padding_factor, 0, 2**31, high_name="2**31")  # ids are int32
        _check_string_array(values, "values")
        special_counts = _special_counts(values, counts, n_lines)
        symbols, kept_counts = _rank_regular(values, counts, threshold, nwords)
        dictionary = cls([*SPECIALS, *symbols], special_counts + kept_counts)
        return dictionary._padded(padding_factor)

    def extended(self, symbols: Sequence[str], counts: Sequence[int], padding_factor: int = 8) -> Dictionary:
        """This dictionary followed by ``symbols`` (none already in it) with their ``counts``, padded again to a
        multiple of ``padding_factor``: every id of this one keeps its symbol."""
        known = [symbol for symbol in symbols if symbol in self._indices]
        if known:
            raise InvalidParameterError(f"symbols: expected symbols not in the dictionary, got {known[0]!r} again")
        return Dictionary([*self.symbols, *symbols], [*self.counts, *counts])._padded(padding_factor)

    def _padded(self, padding_factor: int) -> Dictionary:
        if padding_factor <= 1 or len(self) % padding_factor == 0:
            return self
        needed = padding_factor - len(self) % padding_factor
        names = map(MADEUP_FORMAT.format, itertools.count())
        fresh = list(itertools.islice((name for name in names if name not in self._indices), needed))
        return Dictionary(self.symbols + fresh, self.counts + [0] * needed)

    def _symbol_array(self) -> pa.Array:
        if self._symbols_cache is None:
            self._symbols_cache = pa.array(self.symbols, pa.large_string())
        return self._symbols_cache

    def _lookup_table(self) -> tuple[pa.Array, np.ndarray]:
        if self._lookup_cache is None:
            keys = pa.array(list(self._indices), pa.large_string())
            ids = np.fromiter(self._indices.values(), dtype=np.int32, count=len(self._indices))
            self._lookup_cache = (keys, ids)
        return self._lookup_cache


def symbols_sha256(symbols: Sequence[str] | pa.Array) -> str:
    """:meth:`Dictionary.sha256` of a symbol list (specials first), e.g. fairseq's ``Dictionary.symbols``."""
    if not isinstance(symbols, pa.Array):
        symbols = pa.array(list(symbols), pa.large_string())
    lengths = pc.binary_length(symbols).to_numpy()
    return symbols_digest(lengths, _join_strings(symbols, "").encode("utf-8"))


def id_outside(
    values: np.ndarray, offsets: np.ndarray, vocab_size: int, dictionary: str = "the dictionary"
) -> tuple[int, str] | None:
    """The first id of ``values`` outside ``0..vocab_size-1``: (its row, by ``offsets``, and what is wrong),
    or None when every id indexes the dictionary."""
    if values.size == 0 or (values.min() >= 0 and values.max() < vocab_size):
        return None
    at = int(np.flatnonzero((values < 0) | (values >= vocab_size))[0])
    row = int(np.searchsorted(offsets, offsets[0] + at, side="right") - 1)
    return row, f"token id {int(values[at])} outside {dictionary} (expected 0..{vocab_size - 1})"


def unterminated_row(values: np.ndarray, offsets: np.ndarray, eos: int) -> tuple[int, str] | None:
    """The first row (``offsets`` into ``values``, which start at ``offsets[0]``) that is empty or does not
    end with ``eos`` (every fairseq row ends with ``</s>``): its row and what is wrong, or None."""
    lengths = np.diff(offsets)
    if lengths.size == 0:
        return None
    ends = np.asarray(offsets[1:], dtype=np.int64) - int(offsets[0]) - 1
    last = values[np.maximum(ends, 0)] if values.size else np.full(lengths.shape, eos)
    bad = (lengths <= 0) | (last != eos)
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    found = "is empty" if lengths[row] <= 0 else f"ends with id {int(last[row])}"
    return row, f"{found}, expected ids ending with </s> (id {eos})"


def _check_specials(symbols: list[str]) -> None:
    if tuple(symbols[: len(SPECIALS)]) != SPECIALS:
        raise InvalidParameterError(f"symbols: expected to start with {list(SPECIALS)}, got {symbols[: len(SPECIALS)]}")


def _as_counts(counts: Sequence[int] | np.ndarray, n_symbols: int) -> list[int]:
    """``counts`` as Python ints, checked: one per symbol, each within int64."""
    try:
        as_array = np.asarray(counts, dtype=np.int64)
    except (OverflowError, TypeError, ValueError) as exc:
        raise InvalidParameterError(f"counts: expected int64 integers, got an invalid value ({exc})") from None
    if as_array.shape != (n_symbols,):
        raise InvalidParameterError(f"counts: expected one count per symbol ({n_symbols}), got shape {as_array.shape}")
    return as_array.tolist()


def _check_string_array(array: TokenArrays, name: str) -> None:
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        raise InvalidParameterError(f"{name}: expected a string array, got {array.type}")
    if array.null_count:
        raise InvalidParameterError(f"{name}: expected no nulls, got {array.null_count}")


def _to_numpy(array: TokenArrays) -> np.ndarray:
    if isinstance(array, pa.ChunkedArray):
        return array.to_numpy()
    return array.to_numpy(zero_copy_only=False)


def _text(value: str) -> pa.Scalar:
    """A large_string scalar (Arrow's join kernels want one string type throughout)."""
    return pa.scalar(value, pa.large_string())


def _join_strings(strings: pa.Array, separator: str) -> str:
    """All strings of ``strings`` joined by ``separator``, in one Arrow call."""
    offsets = pa.array([0, len(strings)], pa.int64())
    lists = pa.LargeListArray.from_arrays(offsets, strings)
    return pc.binary_join(lists, pa.scalar(separator, strings.type))[0].as_py()


def _repeat_mask(symbols: pa.Array) -> np.ndarray:
    """True where a symbol already occurred earlier in ``symbols``."""
    groups = pc.dictionary_encode(symbols).indices.to_numpy()
    _, first = np.unique(groups, return_index=True)  # noqa: TID251 (conversion, not the read path)
    return first[groups] != np.arange(len(groups))


# ----- dict.txt reading -------------------------------------------------------------------------


def _read_dict_lines(path: Path) -> pa.Array:
    """Lines as fairseq reads them: UTF-8, universal newlines, trailing whitespace stripped."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise VocabularyError(f"{path}: cannot read dictionary: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = _universal_line_number(data, exc.start)
        raise VocabularyError(
            f"{path}:{line}: expected UTF-8 text, got invalid byte 0x{data[exc.start]:02x} at byte offset {exc.start}"
        ) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    if text == "" or text.endswith("\n"):
        lines = lines.slice(0, len(lines) - 1)
    return pc.utf8_rtrim_whitespace(lines)


def _universal_line_number(data: bytes, offset: int) -> int:
    prefix = data[:offset]
    return prefix.count(b"\n") + prefix.count(b"\r") - prefix.count(b"\r\n") + 1


def _parse_entries(lines: pa.Array, path: Path) -> tuple[pa.Array, list[int], np.ndarray]:
    """Split each line into symbol, count and overwrite flag (vectorized)."""
    words, fields = _split_last_space(lines, lines, path)
    flagged = pc.equal(fields, OVERWRITE_FLAG).to_numpy(zero_copy_only=False)
    if flagged.any():
        inner_words, inner_fields = _split_last_space(words, lines, path, pa.array(flagged))
        words = pc.if_else(flagged, inner_words, words)
        fields = pc.if_else(flagged, inner_fields, fields)
    return words, _parse_counts(fields, lines, path), flagged


def _split_last_space(
    strings: pa.Array, lines: pa.Array, path: Path, rows: pa.Array | None = None
) -> tuple[pa.Array, pa.Array]:
    """``str.rsplit(" ", 1)`` over ``strings``; a row of ``rows`` without a space is an error."""
    parts = pc.extract_regex(strings, ENTRY_PATTERN)
    bad = pc.is_null(parts)
    if rows is not None:
        bad = pc.and_(bad, rows)
    _raise_first(bad, lines, path, "expected '<symbol> <count> [#fairseq:overwrite]'")
    return parts.field("word"), parts.field("field")


def _parse_counts(fields: pa.Array, lines: pa.Array, path: Path) -> list[int]:
    """Counts as Python's ``int()`` reads them; plain decimals are converted in one cast."""
    plain = pc.match_substring_regex(fields, PLAIN_COUNT_PATTERN)
    counts = pc.cast(pc.if_else(plain, fields, "0"), pa.int64()).to_numpy().astype(object)
    for row in np.flatnonzero(~plain.to_numpy(zero_copy_only=False)):
        counts[row] = _parse_unusual_count(fields[row].as_py(), int(row), lines, path)
    return counts.tolist()


def _parse_unusual_count(field: str, row: int, lines: pa.Array, path: Path) -> int:
    """The few counts that are not plain decimals ("+5", "1_000", "٣")."""
    try:
        value = int(field)
    except ValueError:
        value = None
    if value is None or abs(value) > INT64_MAX:
        raise VocabularyError(
            f"{path}:{row + 1}: expected an integer count in '<symbol> <count>', "
            f"got {field!r} in line {lines[row].as_py()!r}"
        )
    return value


def _raise_first(bad: pa.Array, lines: pa.Array, path: Path, expected: str) -> None:
    bad_np = bad.to_numpy(zero_copy_only=False)
    if bad_np.any():
        row = int(np.argmax(bad_np))
        raise VocabularyError(f"{path}:{row + 1}: {expected}, got {lines[row].as_py()!r}")


def _check_duplicates(words: pa.Array, flagged: np.ndarray, path: Path) -> None:
    """A symbol seen before (specials included) needs the overwrite flag, as in fairseq."""
    all_words = pa.concat_arrays([pa.array(SPECIALS, pa.large_string()), words.cast(pa.large_string())])
    repeated = _repeat_mask(all_words)[len(SPECIALS) :]
    bad = repeated & ~flagged
    if bad.any():
        row = int(np.argmax(bad))
        word = words[row].as_py()
        raise VocabularyError(
            f"{path}:{row + 1}: expected each symbol once (or the {OVERWRITE_FLAG} flag), "
            f"got {word!r} again ({_first_place(word, words)})"
        )


def _first_place(word: str, words: pa.Array) -> str:
    if word in SPECIALS:
        return "it is a special symbol"
    first = pc.index(words, word).as_py()
    return f"first at line {first + 1}"


# ----- building ---------------------------------------------------------------------------------


def _count_tokens(token_arrays: tuple[TokenArrays, ...]) -> tuple[pa.Array, np.ndarray, int]:
    """Distinct tokens, their counts and the total number of lines."""
    flats = [_flatten_lines(array) for array in token_arrays]
    n_lines = sum(len(array) for array in token_arrays)
    if not flats:
        return pa.array([], pa.large_string()), np.zeros(0, dtype=np.int64), 0
    counted = pc.value_counts(pa.chunked_array(flats, pa.large_string()))
    return counted.field("values"), counted.field("counts").to_numpy().astype(np.int64), n_lines


def _flatten_lines(array: TokenArrays) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        raise InvalidParameterError(f"token_arrays: expected list<string> arrays, got {array.type}")
    flat = array.flatten()
    _check_string_array(flat, "token_arrays values")
    return flat.cast(pa.large_string())


def _special_counts(values: pa.Array, counts: np.ndarray, n_lines: int) -> list[int]:
    """fairseq's specials start at 1, gain their occurrences in the text, and eos one per line."""
    positions = _to_numpy(pc.index_in(values, value_set=pa.array(SPECIALS)).fill_null(len(SPECIALS)))
    totals = np.bincount(positions, weights=counts, minlength=len(SPECIALS) + 1)[: len(SPECIALS)]
    result = np.ones(len(SPECIALS), dtype=np.int64) + totals.astype(np.int64)
    result[Dictionary.eos] += n_lines
    return result.tolist()


def _rank_regular(values: pa.Array, counts: np.ndarray, threshold: int, nwords: int) -> tuple[list[str], list[int]]:
    """Non-special symbols by count (descending), ties in code point order, then cut."""
    regular = pc.invert(pc.is_in(values, value_set=pa.array(SPECIALS)))
    table = pa.table({"symbol": values, "count": pa.array(counts)}).filter(regular)
    order = pc.sort_indices(table, sort_keys=[("count", "descending"), ("symbol", "ascending")])
    table = table.take(order)
    table = table.filter(pc.greater_equal(table["count"], threshold))
    if nwords > 0:
        table = table.slice(0, max(nwords - len(SPECIALS), 0))
    return table["symbol"].to_pylist(), table["count"].to_pylist()
