"""Each record batch's offsets checksums: recorded by the writer, checked before a row is first used.

A list offset moved between its neighbours (still in order) shifts two rows'
boundaries and passes every range check. So the writer records, for every record
batch, a CRC-32 (zlib) per *piece* of its int32 offsets (little-endian) per column, in the
batch's IPC message custom metadata. A piece of ``rows`` rows is their offsets: the rows'
starts and the end of the last row, ``rows + 1`` values (4 KiB for :data:`PIECE_ROWS`), so a
row used cold costs the check of a page or two of offsets, not of its whole record batch.
Splits read in stretches (a copy in plan order) are written with :data:`STRETCH_PIECE_ROWS`:
a batch's stretch then checks about its own offsets, not a 4 KiB piece.

Split format version 2 (this writer) stores them as binary, decoded with one ``numpy`` call per record batch:

* :data:`OFFSETS_PIECES_BINARY_KEY`: little-endian ``u32 rows per piece, u32 columns, u32 CRC-32 [piece][column]``
  (columns in the schema's order).

Version 1 files (written before) carry canonical JSON, still read:

* :data:`OFFSETS_PIECES_KEY`: ``{"rows": 1024, "crcs": {"source": [crc, ...], "target": [...]}}``;
* :data:`OFFSETS_CRC_KEY`: ``{"source": 123, "target": 456}``, one CRC-32 of the whole buffer
  (the oldest files carry only this one: a batch is then one piece).

Other Arrow readers ignore these keys. Every key present is decoded and checked when the file is
opened (a value that is not a CRC-32 per column and piece is refused); the finest recorded pieces are
what reads check. Readers check a piece the first time any of its rows is used (after the range
checks, whose messages name the row) and remember it per open file (:class:`~arrowmt.io.CrcPieces`): a
CRC of all offsets at open would read 4 bytes per row and column (100 MB for 12.6M pairs), against
arrowmt's promise of a setup that reads O(record batches) bytes. A record batch without any key
(rewritten by another Arrow tool) is read with the range checks only.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.files import canonical_json
from arrowmt.io import WORD, CrcPieces, ManyPieces, spread

OFFSETS_CRC_KEY = b"arrowmt.offsets_crc32"  # version 1: one CRC per column (JSON)
OFFSETS_PIECES_KEY = b"arrowmt.offsets_crc32_pieces"  # version 1: one CRC per column and piece (JSON)
OFFSETS_PIECES_BINARY_KEY = b"arrowmt.offsets_crc32_pieces.v2"  # version 2: the same, binary
PIECE_ROWS = 1024  # rows per checked piece of offsets: 1025 int32 values; a first pass over random rows checks
# one piece per row, and smaller pieces measured slower there (more checks: benchmarks/bench_piece_rows.py)
STRETCH_PIECE_ROWS = 256  # the same for a split whose batches are stretches of ~300 rows (`arrowmt order`)
BINARY_PREFIX = struct.Struct("<II")  # rows per piece, columns
SHOWN_BYTES = 80
Resident = Callable[[np.ndarray], bool]
"""``resident(words)``: whether the pages holding those words of the file are in the page cache (a sample)."""
SWEEP_PIECES = 512  # a column of this many pieces (512k rows) or more found resident is checked whole at first use
SAMPLE_PIECES = 16
Ahead = Callable[[np.ndarray, np.ndarray], None]
"""``ahead(first bytes, end bytes)``: a hint that those bytes of the file are read next (offsets about to be
checked)."""


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
    """A record batch's custom metadata recording each column's offsets CRC-32 per piece of ``piece_rows`` rows
    (version 2, binary; columns in ``offsets``' order, the schema's)."""
    crcs = np.array([piece_crcs(o, piece_rows) for o in offsets.values()], dtype="<u4").T
    return {OFFSETS_PIECES_BINARY_KEY: BINARY_PREFIX.pack(piece_rows, len(offsets)) + crcs.tobytes()}


def encode_legacy_offsets_crcs(offsets: Mapping[str, np.ndarray], piece_rows: int = PIECE_ROWS) -> dict[bytes, bytes]:
    """What a version 1 writer recorded (JSON): for tests of the files written before version 2."""
    pieces = {"rows": piece_rows, "crcs": {c: piece_crcs(o, piece_rows) for c, o in offsets.items()}}
    return {
        OFFSETS_CRC_KEY: canonical_json({c: offsets_crc(o) for c, o in offsets.items()}),
        OFFSETS_PIECES_KEY: canonical_json(pieces),
    }


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
    """(rows per piece, CRC-32s [piece, column]) in a record batch's ``raw`` piece checksums (JSON); FormatError
    naming ``where`` unless every column has one CRC-32 per piece of the batch's ``rows`` rows."""
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


def decode_binary_pieces(raw: bytes, columns: tuple[str, ...], rows: int, where: str) -> tuple[int, np.ndarray]:
    """(rows per piece, CRC-32s [piece, column]) in a record batch's binary piece checksums (version 2);
    FormatError naming ``where`` unless they hold one CRC-32 per column and piece of the batch's ``rows`` rows."""
    per, count_columns = BINARY_PREFIX.unpack_from(raw) if len(raw) >= BINARY_PREFIX.size else (0, 0)
    pieces = -(-rows // per) if per else 0
    if not per or count_columns != len(columns) or len(raw) != BINARY_PREFIX.size + 4 * pieces * len(columns):
        raise FormatError(
            f"{where}: offsets piece checksums: expected rows per piece, {len(columns)} columns and a CRC-32 per "
            f"column and piece of its {rows} rows ({BINARY_PREFIX.size + 4 * pieces * len(columns)} bytes for the "
            f"rows per piece found), got {len(raw)} bytes starting {raw[: SHOWN_BYTES // 4]!r} (corrupt)"
        )
    crcs = np.frombuffer(raw, dtype="<u4", offset=BINARY_PREFIX.size).reshape(pieces, len(columns))
    return per, crcs.astype(np.uint32)


def recorded_pieces(
    found: Mapping[bytes, bytes] | None, columns: tuple[str, ...], rows: int, where: str
) -> tuple[int, np.ndarray] | None:
    """(rows per piece, CRC-32s [piece, column]) a record batch of ``rows`` rows records (None: nothing), every
    key present decoded and checked; the finest pieces recorded are the ones read."""
    if not found:
        return None
    binary, pieces, whole = (found.get(k) for k in (OFFSETS_PIECES_BINARY_KEY, OFFSETS_PIECES_KEY, OFFSETS_CRC_KEY))
    decoded = [] if whole is None else [(max(rows, 1), np.array([decode_offsets_crcs(whole, columns, where)]))]
    if pieces is not None:
        decoded.append(decode_piece_crcs(pieces, columns, rows, where))
    if binary is not None:
        decoded.append(decode_binary_pieces(binary, columns, rows, where))
    return min(decoded, key=lambda d: d[0], default=None)


class OffsetChecks:
    """Which pieces of one split file's offsets have had their checksum checked, per column.

    Record batch ``b`` has pieces ``first[b]..first[b + 1] - 1`` of ``piece_rows[b]`` rows each
    (the last one shorter; a batch recording one CRC is one piece; a batch recording none,
    ``present[b]`` false, is one piece marked checked from the start); ``expected[p, c]`` is piece
    ``p``'s CRC-32 for column ``c``; ``first_row[b]``, the file row batch ``b`` starts at (for
    messages). ``pieces[column]`` checks them (:class:`~arrowmt.io.CrcPieces`) in ``words`` (the
    file's int32 map), batch ``b``'s offsets of column ``c`` starting at word ``offsets_at[c][b]``.
    """

    def __init__(
        self,
        path: Path,
        columns: tuple[str, ...],
        piece_rows: np.ndarray,
        batch_rows: np.ndarray,
        expected: np.ndarray,
        words: np.ndarray,
        offsets_at: Sequence[np.ndarray],
        ahead: Ahead | None = None,
        resident: Resident | None = None,
    ) -> None:
        self.path = path
        self.columns = columns
        self.piece_rows = piece_rows
        self.present = piece_rows > 0
        self.batch_rows = batch_rows
        self.per = np.where(self.present, piece_rows, np.maximum(batch_rows, 1))  # rows per piece, as read
        counts = np.where(self.present, -(-batch_rows // self.per), 1)
        self.first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.first_row = np.concatenate([[0], np.cumsum(batch_rows)]).astype(np.int64)
        self.expected = expected
        self.offsets_at = offsets_at
        unrecorded = np.repeat(~self.present, counts)
        self.pieces = {
            column: CrcPieces(
                words.view(np.uint8),
                expected[:, c],
                self._bounds(c),
                self._failure(column),
                ahead,
                unrecorded.copy(),
                None if resident is None else self._resident(c, resident),
                SWEEP_PIECES,
            )
            for c, column in enumerate(columns)
        }

    def _resident(self, c: int, resident: Resident) -> Callable[[], bool]:
        """Whether a sample of column ``c``'s pieces (their first bytes, spread over the file) is in the page cache."""

        def sampled() -> bool:
            starts, _ = self._bounds(c)(spread(int(self.first[-1]), SAMPLE_PIECES))
            return resident(starts // WORD)

        return sampled

    @classmethod
    def of(
        cls,
        path: Path,
        columns: tuple[str, ...],
        batch_metadata: Sequence[Mapping[bytes, bytes] | None],
        batch_rows: Sequence[int],
        words: np.ndarray,
        offsets_at: Sequence[np.ndarray],
        ahead: Ahead | None = None,
        resident: Resident | None = None,
    ) -> OffsetChecks:
        """The checks of a file of ``columns`` whose record batches of ``batch_rows`` rows carry ``batch_metadata``
        (FormatError if bad)."""
        rows = np.asarray(batch_rows, dtype=np.int64)
        piece_rows = np.zeros(rows.shape[0], dtype=np.int64)
        expected = []
        for b, found in enumerate(batch_metadata):
            recorded = recorded_pieces(found, columns, int(rows[b]), f"{path}: record batch {b}")
            if recorded is None:
                expected.append(np.zeros((1, len(columns)), dtype=np.uint32))
            else:
                piece_rows[b], crcs = recorded
                expected.append(np.asarray(crcs, dtype=np.uint32))
        table = np.concatenate(expected) if expected else np.zeros((0, len(columns)), dtype=np.uint32)
        return cls(path, columns, piece_rows, rows, table, words, offsets_at, ahead, resident)

    def piece_of(self, batches: np.ndarray, local: np.ndarray) -> np.ndarray:
        """The piece holding row ``local`` of record batch ``batches[i]``, for each ``i``."""
        return self.first[batches] + local // self.per[batches]

    def ensure(self, column: str, batches: np.ndarray, local: np.ndarray) -> None:
        """Check the pieces holding rows ``local`` of record batches ``batches`` (any order, repeats allowed) of
        ``column`` not checked yet."""
        checks = self.pieces[column]
        if not checks.all_checked:
            checks.ensure(self.piece_of(batches, local))

    def ensure_one(self, column: str, b: int) -> None:
        """Check every piece of record batch ``b`` of ``column`` not checked yet; FormatError naming it on a
        mismatch."""
        self.pieces[column].ensure_range(int(self.first[b]), int(self.first[b + 1]) - 1)

    @property
    def all_checked(self) -> bool:
        """Whether every piece of every column has been checked."""
        return all(checks.all_checked for checks in self.pieces.values())

    def _batch_of(self, pieces: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.first, pieces, side="right") - 1

    def _bounds(self, c: int) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Where column ``c``'s pieces lie in the file's bytes: their rows' offsets and the end of their last row."""

        def bounds(pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            b = self._batch_of(pieces)
            first_row = (pieces - self.first[b]) * self.per[b]
            end_row = np.minimum(first_row + self.per[b], self.batch_rows[b])
            start = self.offsets_at[c][b] + first_row
            return start * WORD, (start + end_row - first_row + 1) * WORD

        return bounds

    def _failure(self, column: str) -> Callable[[int, int, int], FormatError]:
        def failure(p: int, want: int, found: int) -> FormatError:
            b = int(self._batch_of(np.array([p]))[0])
            start, stop = piece_bounds(p - int(self.first[b]), int(self.per[b]), int(self.batch_rows[b]))
            row = int(self.first_row[b])
            return FormatError(
                f"{self.path}: record batch {b} ({column}): offsets checksum of rows {row + start}..{row + stop - 1}: "
                f"expected CRC-32 {want:08x} (written at conversion), found {found:08x}: their boundaries changed on "
                "disk; the file is corrupt"
            )

        return failure


class ManyOffsetChecks(ManyPieces):
    """The offsets checks of several files, their pieces numbered in one sequence (file after file): a
    :class:`~arrowmt.io.ManyPieces` of each file's columns, with :attr:`piece_base` and :attr:`per`, each record
    batch's first piece number in that sequence and its rows per piece (a row's piece is
    ``piece_base[b] + row // per[b]``)."""

    def __init__(self, checks: Sequence[OffsetChecks]) -> None:
        super().__init__([list(c.pieces.values()) for c in checks])
        bases = [c.first[:-1] + self.first[k] for k, c in enumerate(checks)]
        self.piece_base = np.concatenate(bases).astype(np.int64) if bases else np.zeros(0, dtype=np.int64)
        self.per = np.concatenate([c.per for c in checks]).astype(np.int64) if bases else np.zeros(0, dtype=np.int64)
