"""Splits stored in another row order (``arrowmt order``): where each row of the split is in its files.

A copy of a corpus whose rows are stored in the order a batch plan reads them keeps the
original's row numbers: row ``i`` of the split is stored at ``where[i]``. The split's
readers translate every row number (:class:`~arrowmt.format._split.Split`), so datasets,
samplers, plans and batches are the original's, and each planned batch reads one
contiguous stretch of the files. ``where`` is a side file (``<split>.rows``) listed in the
manifest's provenance under :data:`ROW_ORDER_KEY`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.format._chunks import CheckedArray
from arrowmt.format._manifest import ROW_ORDER_KEY, Manifest, plain_name_error
from arrowmt.format._readahead import advise
from arrowmt.format._sidefile import SideFormat, open_side_file, write_side_file

ORDER_SUFFIX = ".rows"
ORDER_FORMAT = SideFormat("row order", b"ARROWMT-ROWS\x00\x00\x00\x00", 1, "QI", "make the copy again")


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


def write_row_order(path: Path, where: np.ndarray) -> Path:
    """Write ``where`` (row -> stored position) at ``path``, int32 when the rows allow."""
    itemsize = 4 if where.shape[0] < 2**31 else 8
    return write_side_file(path, ORDER_FORMAT, (where.shape[0], itemsize), [where.astype(f"<i{itemsize}")])


def read_row_order(folder: Path, manifest: Manifest, split: str, rows: int) -> CheckedArray | None:
    """Where each of the ``rows`` rows of ``split`` is stored (a map whose chunks are checked on first use),
    or None in plain order."""
    name = order_files(manifest).get(split)
    if name is None:
        return None
    path = folder / name

    def size(where: Path, values: tuple) -> int:
        return values[0] * values[1]

    side = open_side_file(path, ORDER_FORMAT, size)
    count, itemsize = side.values
    if count != rows or itemsize not in (4, 8):
        raise FormatError(f"{path}: row order of {count} rows ({itemsize}-byte), the split has {rows}")
    advise(side.map, "random")  # looked up a row at a time: a fault reads its page, not the kernel's read-around
    return side.array(f"<i{itemsize}", count, 0)


def refuse_row_order(manifest: Manifest, folder: Path, what: str) -> None:
    """InvalidParameterError when ``folder`` stores a split in another row order: ``what`` reads rows as stored."""
    if order_files(manifest):
        raise InvalidParameterError(
            f"path: {folder} stores rows in plan order (made by `arrowmt order`); {what} the original corpus instead"
        )
