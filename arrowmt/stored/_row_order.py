"""Splits stored in another row order (``arrowmt order``): where each row of the split is in its files.

A copy of a corpus whose rows are stored in the order a batch plan reads them keeps the
original's row numbers: row ``i`` of the split is stored at ``where[i]``, and stored row
``j`` is row ``order[j]``. The split's readers translate every row number
(:class:`~arrowmt.splits._split.Split`), so datasets, samplers, plans and batches are the
original's, and each planned batch reads one contiguous stretch of the files. Both maps and
the plan the rows were stored by are one side file (``<split>.rows``) listed in the
manifest's provenance under :data:`ROW_ORDER_KEY`. Layout (a side file,
:mod:`arrowmt.files._sidefile`; little-endian)::

    header fields: u64 rows, u32 row number itemsize (4 or 8), u64 plan batches, u64 planned rows
    body:          where [rows], order [rows], batch offsets int64 [plan batches + 1]

The first ``planned rows`` of ``order`` are the plan's batches back to back (batch ``b`` is
``order[offsets[b]:offsets[b + 1]]``), then the rows it leaves out: a sampler with the
plan's options reads its batches from here instead of building the plan
(:mod:`arrowmt.stored._stored_plan`).

Translating a planned batch costs one or two pages, not a page per row (:meth:`RowOrder.stored`):
its first row's ``where`` gives the stretch it would fill (or the stored plan noted it when it
handed the batch out), and ``order`` over that stretch (one contiguous read, the pages the
stored plan read) confirms it. Any other batch is translated row by row.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.files import CheckedArray, SideFormat, canonical_json, check_batch_offsets, open_side_file, write_side_file
from arrowmt.format import ROW_ORDER_KEY, Manifest, plain_name_error
from arrowmt.io import advise
from arrowmt.reading import FileIdentity

ORDER_SUFFIX = ".rows"
ORDERED_BY_KEY = "ordered_by"  # provenance key: {"split", "plan" (the original's key), "fields" (the plan's)}
CHECK_ROWS = 1 << 20  # rows of the maps compared at a time by check_row_order
NOTED = 4096  # planned batches whose stretch a RowOrder remembers (read-ahead notes up to 2 x 1,024 + 7 batches ahead)
ORDER_FORMAT = SideFormat(
    "row order", b"ARROWMT-ROWS\x00\x00\x00\x00", 4, "QIQQ", "make the copy again", cache=False, aligned=True
)  # a batch reads a few 4 KiB chunks at random: each one page (version 3: the same, body not aligned)


def order_name(split: str) -> str:
    return f"{split}{ORDER_SUFFIX}"


def order_files(manifest: Manifest) -> dict[str, str]:
    """Split -> row order file of the splits ``manifest`` stores in another order (none: plain folders)."""
    listed = manifest.provenance.get(ROW_ORDER_KEY) or {}
    if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
        raise FormatError(f"manifest provenance {ROW_ORDER_KEY!r}: expected split -> file name, got {listed!r}")
    for split, name in listed.items():
        if plain_name_error(name) or name != order_name(str(split)):
            raise FormatError(f"manifest provenance {ROW_ORDER_KEY!r}: expected {order_name(split)!r}, got {name!r}")
    return {str(k): v for k, v in listed.items()}


class Notes:
    """The stretches of the last ``size`` batches noted, by their first row: (start, rows), in two fixed arrays (a
    dict of as many tuples is about 1 MB of Python objects). Written by one thread; a note read while it is rewritten
    may be another batch's, which the reader's check against the order map refuses."""

    def __init__(self, size: int) -> None:
        self.first = np.full(size, -1, dtype=np.int64)
        self.spans = np.zeros((size, 2), dtype=np.int64)
        self.count = 0

    def add(self, first: int, start: int, rows: int) -> None:
        """Note a batch (again: the newest note of it), in place of the oldest note."""
        slot = self.count % self.first.shape[0]
        self.first[slot] = -1  # not found while rewritten
        self.spans[slot] = (start, rows)
        self.first[slot] = first
        self.count += 1

    def get(self, first: int) -> tuple[int, int] | None:
        """(start, rows) of the newest note of the batch whose first row is ``first``; None when not noted."""
        newest = (self.count - 1) % self.first.shape[0]  # a batch is most often read just after it is handed out
        if self.first[newest] != first:
            hits = np.flatnonzero(self.first == first)
            if not hits.size:
                return None
            newest = int(hits[np.argmax((hits - self.count) % self.first.shape[0])])
        start, rows = self.spans[newest].tolist()
        return start, rows

    def __contains__(self, first: object) -> bool:
        return bool(np.any(self.first == first))

    def __len__(self) -> int:
        return min(self.count, self.first.shape[0])


@dataclass(frozen=True)
class RowOrder:
    """The two maps of a split stored in another order and its plan's batch offsets, checked per chunk on first use."""

    path: Path
    where: CheckedArray  # row -> stored position
    order: CheckedArray  # stored position -> row
    offsets: CheckedArray  # plan batch b is order[offsets[b]:offsets[b + 1]]
    planned: int  # rows in the plan's batches: order[:planned]; the rest are left out of it
    identity: FileIdentity  # the file when it was opened

    stretches: Notes = field(default_factory=lambda: Notes(NOTED), compare=False)  # of the batches noted

    def note(self, start: int, rows: np.ndarray) -> None:
        """``rows`` (a planned batch being handed out) fill the stretch from ``start``: :meth:`stored` then needs
        no ``where`` lookup for them (the last :data:`NOTED` batches noted are kept)."""
        if rows.size > 1:  # noted by the sampler's thread only (a pass planned ahead peeks: nothing noted)
            self.stretches.add(int(rows[0]), start, int(rows.size))

    def stored(self, rows: np.ndarray) -> np.ndarray:
        """Stored positions of ``rows`` (int64, in range). Rows that fill stretches in order, one after another (a
        planned batch, or several located together), are placed a stretch at a time (:meth:`_stretch`); the rest
        each from ``where``."""
        parts, at = [], 0
        while rows.size - at > 1 and (run := self._stretch(rows[at:])) is not None:
            parts.append(run)
            at += run.shape[0]
        if at < rows.size or not parts:
            parts.append(self.where.take(rows[at:]).astype(np.int64))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _stretch(self, rows: np.ndarray) -> np.ndarray | None:
        """Stored positions of the stretch ``rows`` begin with: a noted batch's (no ``where`` lookup), else as many
        rows as fill one in order from where ``rows[0]`` is stored; confirmed by ``order``. None: under two rows."""
        noted = self.stretches.get(int(rows[0]))
        if noted is not None:
            start, size = noted[0], min(noted[1], rows.size)
            if start + size <= len(self.order) and np.array_equal(self.order.slice(start, start + size), rows[:size]):
                return np.arange(start, start + size, dtype=np.int64)
        start = int(self.where.take(rows[:1])[0])
        if not 0 <= start < len(self.order):  # a corrupt where: each row from where, which the read then refuses
            return None
        size = min(rows.size, len(self.order) - start)
        same = self.order.slice(start, start + size) == rows[:size]
        run = size if same.all() else int(np.argmin(same))
        return np.arange(start, start + run, dtype=np.int64) if run > 1 else None


def inverse_order(order: np.ndarray) -> np.ndarray:
    """``where`` with ``where[order[i]] == i``: the position of each row in ``order`` (int64)."""
    where = np.empty(order.shape[0], dtype=np.int64)
    where[order] = np.arange(order.shape[0], dtype=np.int64)
    return where


def write_row_order(path: Path, order: np.ndarray, offsets: np.ndarray) -> Path:
    """Write the maps of ``order`` (stored position -> row, a permutation) and the batch ``offsets`` of the plan
    stored first in it at ``path``, row numbers as int32 when the rows allow."""
    count, batches = order.shape[0], offsets.shape[0] - 1
    bounded = offsets.ndim == 1 and batches >= 0 and int(offsets[0]) == 0 and int(offsets[-1]) <= count
    if not bounded or (np.diff(offsets) < 0).any():
        found = f"{offsets.size} values from {offsets.min()} to {offsets.max()}" if offsets.size else "none"
        raise InvalidParameterError(
            f"offsets (of the plan stored in {path}): expected a 1-D array non-decreasing from 0 to at most "
            f"{count} rows, got shape {offsets.shape}, {found}"
        )
    itemsize = 4 if count < 2**31 else 8
    sections = [inverse_order(order).astype(f"<i{itemsize}"), order.astype(f"<i{itemsize}"), offsets.astype("<i8")]
    return write_side_file(path, ORDER_FORMAT, (count, itemsize, batches, int(offsets[-1])), sections)


def read_row_order(
    folder: Path, manifest: Manifest, split: str, rows: int, marker: Mapping[str, str] | None = None
) -> RowOrder | None:
    """The row order maps of the ``rows`` rows of ``split``, or None in plain order; ``marker``: what the split's
    files record of the order they are stored in (checked against the manifest, :func:`check_order_marker`)."""
    name = order_files(manifest).get(split)
    check_order_marker(folder, manifest, split, marker)
    return None if name is None else open_row_order(folder / name, rows)


def order_marker(split: str, ordered_by: Mapping[str, object]) -> dict[str, str]:
    """What the files of split ``split`` of a copy in plan order record of it (their metadata's ``stored_order``):
    the row order file, and a digest of the manifest's :data:`ORDERED_BY_KEY` entry ``ordered_by`` (the plan the rows
    are stored by). A manifest whose entry was edited, or whose row order entry was removed, is then refused."""
    return {"file": order_name(split), ORDERED_BY_KEY: _digest(ordered_by)}


def check_order_marker(folder: Path, manifest: Manifest, split: str, marker: Mapping[str, str] | None) -> None:
    """FormatError unless ``manifest`` says of ``split`` what its files' ``marker`` records (None: files in plain
    order, or a copy written before files recorded it: nothing to compare)."""
    if marker is None:
        return
    name, entry = order_files(manifest).get(split), manifest.provenance.get(ORDERED_BY_KEY)
    where = f"{folder}: split {split!r} is stored in plan order (its files record {marker.get('file')!r})"
    if name is None or name != marker.get("file"):
        raise FormatError(
            f"{where}, but the manifest's provenance {ROW_ORDER_KEY!r} names {name!r} for it: the manifest was "
            "edited; restore it, or make the copy again"
        )
    if _digest(entry) != marker.get(ORDERED_BY_KEY):
        raise FormatError(
            f"{where}: the manifest's provenance {ORDERED_BY_KEY!r} is not the plan it was stored by (edited): "
            f"expected the entry the copy was made with, got {entry!r}; make the copy again"
        )


def _digest(entry: object) -> str:
    return hashlib.sha256(canonical_json(entry)).hexdigest()


def open_row_order(path: Path, rows: int) -> RowOrder:
    """The row order maps at ``path`` for a split of ``rows`` rows (FormatError naming ``path`` otherwise)."""

    def size(where: Path, values: tuple) -> int:
        count, itemsize, batches, planned = values
        if count != rows or itemsize not in (4, 8) or planned > count:
            raise FormatError(
                f"{path}: row order of {count} rows ({itemsize}-byte), {planned} of them planned; "
                f"expected {rows} rows (the split's), 4- or 8-byte, at most {rows} planned"
            )
        return 2 * count * itemsize + 8 * (batches + 1)

    side = open_side_file(path, ORDER_FORMAT, size)
    count, itemsize, batches, planned = side.values
    advise(side.map, "random")  # looked up a row at a time: a fault reads its page, not the kernel's read-around
    dtype = f"<i{itemsize}"
    maps = (side.array(dtype, count, 0), side.array(dtype, count, count * itemsize))
    offsets = side.array("<i8", batches + 1, 2 * count * itemsize)
    return RowOrder(path, *maps, offsets, planned, FileIdentity.of_stat(side.stat))


def check_row_order(path: Path, rows: int) -> RowOrder:
    """The row order file at ``path`` of a split of ``rows`` rows once every byte of it is checked: every chunk,
    ``order`` a permutation of the rows whose inverse is ``where``, the plan's batch offsets (FormatError naming
    ``path`` otherwise; what ``arrowmt verify`` runs)."""
    maps = open_row_order(path, rows)
    order, where = maps.order.whole(), maps.where.whole()
    inside = not order.size or (int(order.min()) >= 0 and int(order.max()) < rows)
    pieces = range(0, rows, CHECK_ROWS)  # bounded temporaries whatever the split's size
    if not inside or not all(
        np.array_equal(where[order[a : a + CHECK_ROWS]], np.arange(a, min(a + CHECK_ROWS, rows))) for a in pieces
    ):
        raise FormatError(
            f"{path}: row order: expected `order` a permutation of the {rows} rows and `where` its inverse (corrupt)"
        )
    check_batch_offsets(path, maps.offsets.whole(), maps.planned)
    return maps
