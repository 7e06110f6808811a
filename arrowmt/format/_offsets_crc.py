"""Each record batch's offsets checksums: recorded by the writer, checked before a row is first used.

A list offset moved between its neighbours (still in order) shifts two rows'
boundaries and passes every range check. So the writer records, for every record
batch and column, CRC-32s (zlib) of the batch's int32 offsets buffer (little-endian) in
the batch's IPC message custom metadata, as canonical JSON:

* :data:`OFFSETS_PIECES_KEY`: ``{"rows": 1024, "crcs": {"source": [crc, ...], "target": [...]}}``, one
  CRC-32 per *piece* of ``rows`` rows (the piece's offsets: its rows' starts and the end of
  its last row, ``rows + 1`` values, 4 KiB for :data:`PIECE_ROWS`), so a row used cold costs
  the check of a page or two of offsets, not of its whole record batch. Splits read in
  stretches (a copy in plan order) are written with :data:`STRETCH_PIECE_ROWS`: a batch's
  stretch then checks about its own offsets, not a 4 KiB piece;
* :data:`OFFSETS_CRC_KEY`: ``{"source": 123, "target": 456}``, one CRC-32 of the whole
  buffer (row count + 1 values): what files written before the pieces carry, and what
  readers of that time check. Readers check the pieces when a batch records them.

Other Arrow readers ignore both, so the file format (version 1) is unchanged. Readers
check a piece the first time any of its rows is used (after the range checks, whose
messages name the row), and remember it per open file: a CRC of all offsets at open
would read 4 bytes per row and column (100 MB for 12.6M pairs), against arrowmt's
promise of a setup that reads O(record batches) bytes. A record batch without either
key (rewritten by another Arrow tool) is read with the range checks only; a value that
is not a CRC-32 per column (and piece) is refused when the file is opened.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError

OFFSETS_CRC_KEY = b"arrowmt.offsets_crc32"  # key in a record batch's custom metadata: one CRC per column
OFFSETS_PIECES_KEY = b"arrowmt.offsets_crc32_pieces"  # key: one CRC per column and piece of PIECE_ROWS rows
PIECE_ROWS = 1024  # rows per checked piece of offsets: 1025 int32 values; a first pass over random rows checks
# one piece per row, and smaller pieces measured slower there (more checks: benchmarks/bench_piece_rows.py)
STRETCH_PIECE_ROWS = 256  # the same for a split whose batches are stretches of ~300 rows (`arrowmt order`)
SHOWN_BYTES = 80
OffsetsOf = Callable[[str, int], np.ndarray]
"""``offsets(column, batch)``: a record batch's offsets (a view of the map)."""
ReadAhead = Callable[[str, np.ndarray, np.ndarray, np.ndarray], None]
"""``read_ahead(column, batches, first_rows, rows)``: start reading those rows' offsets in those record batches
(a hint)."""


def offsets_crc(offsets: np.ndarray) -> int:
    """CRC-32 of offsets as stored (int32, little-endian)."""
    return zlib.crc32(memoryview(np.ascontiguousarray(offsets, dtype="<i4")).cast("B"))


def piece_bounds(k: int, per: int, rows: int) -> tuple[int, int]:
    """(first row, end row) of piece ``k`` of ``per`` rows of a record batch of ``rows`` rows: its offsets are
    values ``first..end`` (both included)."""
    return k * per, min((k + 1) * per, rows)


def piece_crcs(offsets: np.ndarray, piece_rows: int) -> list[int]:
    """The CRC-32 of each piece of ``piece_rows`` rows of a record batch's ``offsets`` (row count + 1 values)."""
    rows = offsets.shape[0] - 1
    bounds = [piece_bounds(k, piece_rows, rows) for k in range(-(-rows // piece_rows))]
    return [offsets_crc(offsets[first : end + 1]) for first, end in bounds]


def encode_offsets_crcs(offsets: Mapping[str, np.ndarray], piece_rows: int = PIECE_ROWS) -> dict[bytes, bytes]:
    """A record batch's custom metadata recording each column's offsets CRC-32s (whole, and per piece of
    ``piece_rows`` rows)."""
    pieces = {"rows": piece_rows, "crcs": {c: piece_crcs(o, piece_rows) for c, o in offsets.items()}}
    return {
        OFFSETS_CRC_KEY: _json({c: offsets_crc(o) for c, o in offsets.items()}),
        OFFSETS_PIECES_KEY: _json(pieces),
    }


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")


def _is_crc(value: object) -> bool:
    return type(value) is int and 0 <= value < 2**32


def _decoded(raw: bytes, where: str) -> object:
    try:
        return json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{where}: offsets checksum: expected JSON, got {raw[:SHOWN_BYTES]!r} (corrupt)") from exc


def decode_offsets_crcs(raw: bytes, columns: tuple[str, ...], where: str) -> list[int]:
    """Each column's offsets CRC-32 in a record batch's custom metadata value ``raw``; FormatError naming ``where``."""
    crcs = _decoded(raw, where)
    valid = isinstance(crcs, dict) and sorted(crcs) == sorted(columns)
    if not valid or not all(_is_crc(crcs[c]) for c in columns):
        raise FormatError(
            f"{where}: offsets checksum: expected a CRC-32 per column {list(columns)}, "
            f"got {raw[:SHOWN_BYTES]!r} (corrupt)"
        )
    return [crcs[c] for c in columns]


def decode_piece_crcs(raw: bytes, columns: tuple[str, ...], rows: int, where: str) -> tuple[int, np.ndarray]:
    """(rows per piece, CRC-32s [piece, column]) in a record batch's ``raw`` piece checksums; FormatError naming
    ``where`` unless every column has one CRC-32 per piece of the batch's ``rows`` rows."""
    found = _decoded(raw, where)
    per = found.get("rows") if isinstance(found, dict) else None
    crcs = found.get("crcs") if isinstance(found, dict) else None
    valid = isinstance(found, dict) and sorted(found) == ["crcs", "rows"] and type(per) is int and per > 0
    valid = valid and isinstance(crcs, dict) and sorted(crcs) == sorted(columns)
    count = -(-rows // per) if valid else 0
    if not valid or not all(
        isinstance(crcs[c], list) and len(crcs[c]) == count and all(map(_is_crc, crcs[c])) for c in columns
    ):
        raise FormatError(
            f"{where}: offsets piece checksums: expected rows per piece and, per column {list(columns)}, a CRC-32 "
            f"per piece of its {rows} rows, got {raw[:SHOWN_BYTES]!r} (corrupt)"
        )
    return per, np.array([crcs[c] for c in columns], dtype=np.uint32).T.reshape(count, len(columns))


class OffsetChecks:
    """Which pieces of one split file's record batches have had their offsets checksum checked, per column.

    Record batch ``b`` has pieces ``first[b]..first[b + 1] - 1`` of ``piece_rows[b]`` rows each
    (the last one shorter; a batch recording one CRC is one piece; a batch recording none has
    no piece and is never checked); ``expected[p, c]`` is piece ``p``'s CRC-32 for column ``c``;
    ``offsets(column, b)`` returns the batch's offsets as stored; ``first_row[b]``, the file row
    batch ``b`` starts at (for messages).
    """

    def __init__(
        self,
        path: Path,
        columns: tuple[str, ...],
        piece_rows: np.ndarray,
        first: np.ndarray,
        first_row: np.ndarray,
        expected: np.ndarray,
        offsets: OffsetsOf,
        read_ahead: ReadAhead | None = None,
    ) -> None:
        self.path = path
        self.columns = columns
        self.piece_rows = piece_rows
        self.first = first
        self.expected = expected
        self.present = piece_rows > 0
        self._offsets = offsets
        self._read_ahead = read_ahead
        self._unchecked = {column: np.ones(expected.shape[0], dtype=bool) for column in columns}
        self._pending = dict.fromkeys(columns, bool(expected.shape[0]))  # False once every piece is checked
        self.first_row = first_row

    @classmethod
    def of(
        cls,
        path: Path,
        columns: tuple[str, ...],
        batch_metadata: Sequence[Mapping[bytes, bytes] | None],
        batch_rows: Sequence[int],
        offsets: OffsetsOf,
        read_ahead: ReadAhead | None = None,
    ) -> OffsetChecks:
        """The checks of a file of ``columns`` whose record batches of ``batch_rows`` rows carry ``batch_metadata``
        (FormatError if bad)."""
        piece_rows = np.zeros(len(batch_metadata), dtype=np.int64)
        counts = np.zeros(len(batch_metadata), dtype=np.int64)
        expected = []
        for b, found in enumerate(batch_metadata):
            where = f"{path}: record batch {b}"
            pieces = None if found is None else found.get(OFFSETS_PIECES_KEY)
            whole = None if found is None else found.get(OFFSETS_CRC_KEY)
            whole_crcs = None if whole is None else decode_offsets_crcs(whole, columns, where)  # checked alike
            if pieces is not None:
                piece_rows[b], crcs = decode_piece_crcs(pieces, columns, int(batch_rows[b]), where)
                expected.append(crcs)
            elif whole_crcs is not None:
                piece_rows[b] = max(int(batch_rows[b]), 1)
                expected.append(np.array([whole_crcs], dtype=np.uint32))
            counts[b] = expected[-1].shape[0] if piece_rows[b] else 0
        table = np.concatenate(expected) if expected else np.zeros((0, len(columns)), dtype=np.uint32)
        first = np.concatenate([[0], np.cumsum(counts)])
        first_row = np.concatenate([[0], np.cumsum(np.asarray(batch_rows, dtype=np.int64))])
        return cls(path, columns, piece_rows, first, first_row, table, offsets, read_ahead)

    def ensure(self, column: str, batches: np.ndarray, local: np.ndarray) -> None:
        """Check the pieces holding rows ``local`` of record batches ``batches`` (any order, repeats allowed) of
        ``column`` not checked yet."""
        if not self._pending[column]:
            return
        recorded = self.present[batches]
        per = self.piece_rows[batches[recorded]]
        pieces = self.first[batches[recorded]] + local[recorded] // per
        todo = np.unique(pieces[self._unchecked[column][pieces]])
        if todo.size > 1:
            self._ask(column, todo)
        for p in todo.tolist():
            self._check(column, p)
        if todo.size:
            self._recount(column)

    def ensure_one(self, column: str, b: int) -> None:
        """Check every piece of record batch ``b`` of ``column`` not checked yet; FormatError naming it on a
        mismatch."""
        for p in range(int(self.first[b]), int(self.first[b + 1])):
            if self._unchecked[column][p]:
                self._check(column, p)
        self._recount(column)

    def _recount(self, column: str) -> None:
        """Whether any piece of ``column`` is left to check, from the flags themselves: threads that check the same
        piece at once (read-ahead plans a remote pass from one) cannot make it stop early, and no lock is held."""
        self._pending[column] = bool(self._unchecked[column].any())

    def read_ahead(self, column: str, batches: np.ndarray) -> None:
        """Ask for the offsets of several whole record batches at once before checking them (a hint)."""
        if self._read_ahead is not None and batches.shape[0] > 1:
            rows = (self.first[batches + 1] - self.first[batches]) * self.piece_rows[batches]
            self._read_ahead(column, batches, np.zeros_like(batches), rows)

    def _ask(self, column: str, pieces: np.ndarray) -> None:
        """Ask for the offsets of ``pieces`` before checking them one by one: with random-access advice each
        would otherwise be read a page per fault (a hint; nothing if none given)."""
        if self._read_ahead is not None:
            batches = np.searchsorted(self.first, pieces, side="right") - 1
            per = self.piece_rows[batches]
            self._read_ahead(column, batches, (pieces - self.first[batches]) * per, per)

    def _check(self, column: str, p: int) -> None:
        b = int(np.searchsorted(self.first, p, side="right")) - 1
        stored = self._offsets(column, b)
        start, stop = piece_bounds(p - int(self.first[b]), int(self.piece_rows[b]), stored.shape[0] - 1)
        want = int(self.expected[p, self.columns.index(column)])
        found = offsets_crc(stored[start : stop + 1])
        if found != want:
            row = int(self.first_row[b])
            raise FormatError(
                f"{self.path}: record batch {b} ({column}): offsets checksum of rows {row + start}..{row + stop - 1}: "
                "expected "
                f"CRC-32 {want:08x} (written at conversion), found {found:08x}: their boundaries changed on disk; "
                "the file is corrupt"
            )
        self._unchecked[column][p] = False


class ManyOffsetChecks:
    """The offsets checks of several files' record batches, numbered in one sequence (file after file).

    For readers that locate rows of many files at once (a mixture's gather): ``ensure(numbers)``
    checks the record batches behind those numbers, every column, each once.
    """

    def __init__(self, checks: Sequence[OffsetChecks]) -> None:
        self.checks = list(checks)
        counts = np.array([c.present.shape[0] for c in self.checks], dtype=np.int64)
        self.first = np.concatenate(([0], np.cumsum(counts)))
        self._unchecked = np.concatenate([c.present for c in self.checks] or [np.zeros(0, dtype=bool)])
        self._pending = bool(self._unchecked.any())

    def ensure(self, numbers: np.ndarray) -> None:
        if not self._pending:
            return
        todo = numbers[self._unchecked[numbers]]
        if not todo.size:
            return
        todo = np.unique(todo)
        self._read_ahead(todo)
        for number in todo.tolist():
            k = int(np.searchsorted(self.first, number, side="right")) - 1
            for column in self.checks[k].columns:
                self.checks[k].ensure_one(column, number - int(self.first[k]))
            self._unchecked[number] = False
        self._pending = bool(self._unchecked.any())

    def _read_ahead(self, numbers: np.ndarray) -> None:
        """:meth:`OffsetChecks.read_ahead` of the record batches behind ``numbers`` (sorted), file by file."""
        files = np.searchsorted(self.first, numbers, side="right") - 1
        for k in np.unique(files).tolist():
            batches = numbers[files == k] - self.first[k]
            for column in self.checks[k].columns:
                self.checks[k].read_ahead(column, batches)
