"""Each record batch's offsets checksum: recorded by the writer, checked before a batch's rows are first used.

A list offset moved between its neighbours (still in order) shifts two rows'
boundaries and passes every range check. So the writer records, for every record
batch and column, the CRC-32 (zlib) of the batch's int32 offsets buffer (row count + 1
little-endian values) in the batch's IPC message custom metadata, under
:data:`OFFSETS_CRC_KEY`, as canonical JSON ``{"source": 123, "target": 456}``. Other
Arrow readers ignore it, so the file format (version 1) is unchanged.

Readers check a batch's checksum the first time any of its rows is used (after the
range checks, whose messages name the row), and remember it per open file: a CRC of
all offsets at open would read 4 bytes per row and column (100 MB for 12.6M pairs,
about 40 ms in the page cache and far more from disk), against arrowmt's promise of a
setup that reads O(record batches) bytes. A check costs ~0.1 ms per 65,536-row batch.
A record batch without the key (files written before the checksum existed, or
rewritten by another Arrow tool) is read as before, with the range checks only; a
value that is not a CRC-32 per column is refused when the file is opened.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError

OFFSETS_CRC_KEY = b"arrowmt.offsets_crc32"  # key in a record batch's custom metadata
SHOWN_BYTES = 80
OffsetsOf = Callable[[str, int], np.ndarray]
"""``offsets(column, batch)``: a record batch's offsets (a view of the map)."""
ReadAhead = Callable[[str, np.ndarray], None]
"""``read_ahead(column, batches)``: start reading those record batches' offsets (a hint)."""


def offsets_crc(offsets: np.ndarray) -> int:
    """CRC-32 of a record batch's offsets as stored (int32, little-endian)."""
    return zlib.crc32(memoryview(np.ascontiguousarray(offsets, dtype="<i4")).cast("B"))


def encode_offsets_crcs(crcs: Mapping[str, int]) -> dict[bytes, bytes]:
    """A record batch's custom metadata recording each column's offsets CRC-32."""
    return {OFFSETS_CRC_KEY: json.dumps(dict(crcs), sort_keys=True, separators=(",", ":")).encode("ascii")}


def decode_offsets_crcs(raw: bytes, columns: tuple[str, ...], where: str) -> list[int]:
    """Each column's offsets CRC-32 in a record batch's custom metadata value ``raw``; FormatError naming ``where``."""
    try:
        crcs = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{where}: offsets checksum: expected JSON, got {raw[:SHOWN_BYTES]!r} (corrupt)") from exc
    valid = isinstance(crcs, dict) and sorted(crcs) == sorted(columns)
    if not valid or not all(type(crcs[c]) is int and 0 <= crcs[c] < 2**32 for c in columns):
        raise FormatError(
            f"{where}: offsets checksum: expected a CRC-32 per column {list(columns)}, "
            f"got {raw[:SHOWN_BYTES]!r} (corrupt)"
        )
    return [crcs[c] for c in columns]


class OffsetChecks:
    """Which record batches of one split file have had their offsets checksum checked, per column.

    ``expected[b, c]`` is the CRC-32 recorded for batch ``b`` and column ``c`` when
    ``present[b]`` (batches without one are never checked); ``offsets(column, b)``
    returns the batch's offsets as stored.
    """

    def __init__(
        self,
        path: Path,
        columns: tuple[str, ...],
        expected: np.ndarray,
        present: np.ndarray,
        offsets: OffsetsOf,
        read_ahead: ReadAhead | None = None,
    ) -> None:
        self.path = path
        self.columns = columns
        self.expected = expected
        self.present = present
        self._offsets = offsets
        self._read_ahead = read_ahead
        self._unchecked = {column: present.copy() for column in columns}
        self._pending = dict.fromkeys(columns, int(np.count_nonzero(present)))

    @classmethod
    def of(
        cls,
        path: Path,
        columns: tuple[str, ...],
        batch_metadata: Sequence[Mapping[bytes, bytes] | None],
        offsets: OffsetsOf,
        read_ahead: ReadAhead | None = None,
    ) -> OffsetChecks:
        """The checks of a file of ``columns`` whose record batches carry ``batch_metadata`` (FormatError if bad)."""
        expected = np.zeros((len(batch_metadata), len(columns)), dtype=np.uint32)
        present = np.zeros(len(batch_metadata), dtype=bool)
        for b, found in enumerate(batch_metadata):
            raw = None if found is None else found.get(OFFSETS_CRC_KEY)
            if raw is not None:
                expected[b] = decode_offsets_crcs(raw, columns, f"{path}: record batch {b}")
                present[b] = True
        return cls(path, columns, expected, present, offsets, read_ahead)

    def ensure(self, column: str, batches: np.ndarray) -> None:
        """Check the record batches ``batches`` (any order, repeats allowed) of ``column`` not checked yet."""
        if not self._pending[column]:
            return
        todo = np.unique(batches[self._unchecked[column][batches]])
        self.read_ahead(column, todo)
        for b in todo.tolist():
            self.ensure_one(column, b)

    def read_ahead(self, column: str, batches: np.ndarray) -> None:
        """Ask for the offsets of several record batches at once before checking them one by one: with
        random-access advice each would otherwise be read a page per fault (a hint; nothing if none given)."""
        if self._read_ahead is not None and batches.shape[0] > 1:
            self._read_ahead(column, batches)

    def ensure_one(self, column: str, b: int) -> None:
        """Check record batch ``b`` of ``column`` unless done or unrecorded; FormatError naming it on a mismatch."""
        if not self._unchecked[column][b]:
            return
        want = int(self.expected[b, self.columns.index(column)])
        found = offsets_crc(self._offsets(column, b))
        if found != want:
            raise FormatError(
                f"{self.path}: record batch {b} ({column}): offsets checksum: expected CRC-32 {want:08x} (written "
                f"at conversion), found {found:08x}: its row boundaries changed on disk; the file is corrupt"
            )
        self._unchecked[column][b] = False
        self._pending[column] -= 1


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
