"""Splits stored in another row order (``arrowmt order``): where each row of the split is in its files.

A copy of a corpus whose rows are stored in the order a batch plan reads them keeps the
original's row numbers: row ``i`` of the split is stored at ``where[i]``, and stored row
``j`` is row ``order[j]``. The split's readers translate every row number
(:class:`~arrowmt.format._split.Split`), so datasets, samplers, plans and batches are the
original's, and each planned batch reads one contiguous stretch of the files. Both maps are
one side file (``<split>.rows``: ``where``, then ``order``) listed in the manifest's
provenance under :data:`ROW_ORDER_KEY`.

Translating a planned batch costs two pages, not a page per row (:meth:`RowOrder.stored`):
its first row's ``where`` gives the stretch it would fill, and ``order`` over that stretch
(one contiguous read) confirms it. Any other batch is translated row by row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.format._chunks import CheckedArray
from arrowmt.format._manifest import ROW_ORDER_KEY, Manifest, plain_name_error
from arrowmt.format._readahead import advise
from arrowmt.format._sidefile import SideFormat, open_side_file, write_side_file

ORDER_SUFFIX = ".rows"
ORDER_FORMAT = SideFormat("row order", b"ARROWMT-ROWS\x00\x00\x00\x00", 2, "QI", "make the copy again")


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


@dataclass(frozen=True)
class RowOrder:
    """The two maps of a split stored in another order, checked per chunk on first use."""

    where: CheckedArray  # row -> stored position
    order: CheckedArray  # stored position -> row

    def stored(self, rows: np.ndarray) -> np.ndarray:
        """Stored positions of ``rows`` (int64, in range): one stretch when ``rows`` fill one in order."""
        if rows.size > 1:
            start = int(self.where.take(rows[:1])[0])
            stop = start + rows.size
            if stop <= len(self.order) and np.array_equal(self.order.slice(start, stop), rows):
                return np.arange(start, stop, dtype=np.int64)
        return self.where.take(rows).astype(np.int64)


def inverse_order(order: np.ndarray) -> np.ndarray:
    """``where`` with ``where[order[i]] == i``: the position of each row in ``order`` (int64)."""
    where = np.empty(order.shape[0], dtype=np.int64)
    where[order] = np.arange(order.shape[0], dtype=np.int64)
    return where


def write_row_order(path: Path, order: np.ndarray) -> Path:
    """Write the maps of ``order`` (stored position -> row, a permutation) at ``path``, int32 when the rows allow."""
    itemsize = 4 if order.shape[0] < 2**31 else 8
    sections = [inverse_order(order).astype(f"<i{itemsize}"), order.astype(f"<i{itemsize}")]
    return write_side_file(path, ORDER_FORMAT, (order.shape[0], itemsize), sections)


def read_row_order(folder: Path, manifest: Manifest, split: str, rows: int) -> RowOrder | None:
    """The row order maps of the ``rows`` rows of ``split``, or None in plain order."""
    name = order_files(manifest).get(split)
    return None if name is None else open_row_order(folder / name, rows)


def open_row_order(path: Path, rows: int) -> RowOrder:
    """The row order maps at ``path`` for a split of ``rows`` rows (FormatError naming ``path`` otherwise)."""

    def size(where: Path, values: tuple) -> int:
        return 2 * values[0] * values[1]

    side = open_side_file(path, ORDER_FORMAT, size)
    count, itemsize = side.values
    if count != rows or itemsize not in (4, 8):
        raise FormatError(f"{path}: row order of {count} rows ({itemsize}-byte), the split has {rows}")
    advise(side.map, "random")  # looked up a row at a time: a fault reads its page, not the kernel's read-around
    dtype = f"<i{itemsize}"
    return RowOrder(side.array(dtype, count, 0), side.array(dtype, count, count * itemsize))


def refuse_row_order(manifest: Manifest, folder: Path, what: str) -> None:
    """InvalidParameterError when ``folder`` stores a split in another row order: ``what`` reads rows as stored."""
    if order_files(manifest):
        raise InvalidParameterError(
            f"path: {folder} stores rows in plan order (made by `arrowmt order`); {what} the original corpus instead"
        )
