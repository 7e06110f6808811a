"""How a corpus stores its splits, asked of its manifest once, and the one refusal of a reader that cannot read it.

A split is stored as converted (its rows in their own order), or in a copy made by ``arrowmt order``: rows in the
order a batch plan reads them (:data:`ROWS`, :mod:`arrowmt.stored._row_order`; the split's readers translate row
numbers, so datasets and samplers read the original's rows), or LM blocks in plan order (:data:`BLOCKS`,
:mod:`arrowmt.stored._block_order`; its rows are pieces of blocks, read by the LM block readers only). A reader
states which stored orders it reads; :func:`refuse_stored_order` refuses the others, naming the folder and what
to read instead.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from arrowmt._errors import InvalidParameterError
from arrowmt.format import BLOCK_ORDER_KEY, ROW_ORDER_KEY, Manifest

if TYPE_CHECKING:
    from arrowmt.stored._block_order import BlockOrder
    from arrowmt.stored._row_order import RowOrder

ROWS = "rows"  # rows in plan order: `arrowmt order`
BLOCKS = "blocks"  # LM blocks in plan order: `arrowmt order --tokens-per-sample`
_REFUSALS = {
    ROWS: "path: {folder} stores rows in plan order (made by `arrowmt order`); {what} the original corpus instead",
    BLOCKS: "path: {folder} stores LM blocks in plan order (made by `arrowmt order --tokens-per-sample`): its rows "
    "are pieces of blocks, not sentences; {what} the original corpus instead, or read it with open_blocks",
}


def stored_orders(manifest: Manifest, split: str | None = None) -> tuple[str, ...]:
    """The plan orders ``manifest`` stores: :data:`ROWS` when any split is a copy's rows in plan order,
    :data:`BLOCKS` when ``split`` (None: any split) holds LM blocks in plan order; () for a corpus as converted
    (whose readers then never load the copies' modules: their code is private memory in every rank)."""
    if not is_copy(manifest):
        return ()
    from arrowmt.stored._block_order import block_orders
    from arrowmt.stored._row_order import order_files

    blocks = block_orders(manifest)
    has_blocks = split in blocks if split is not None else bool(blocks)
    return (*((ROWS,) if order_files(manifest) else ()), *((BLOCKS,) if has_blocks else ()))


def row_translator(
    folder: Path, manifest: Manifest, split: str, rows: int, marker: Mapping[str, str] | None
) -> RowOrder | None:
    """The row translator of ``split`` (``rows`` rows) of the corpus in ``folder``: where each row is stored when the
    split is a copy's rows in plan order, else None. ``marker``: what the split's files record of the order they
    are stored in. The one place a split asks how its rows are stored; a corpus as converted loads none of the
    copies' code (private memory in every rank)."""
    if marker is None and not is_copy(manifest):
        return None
    from arrowmt.stored._row_order import read_row_order

    return read_row_order(folder, manifest, split, rows, marker)


def block_order_of(folder: Path, manifest: Manifest, split: str) -> BlockOrder | None:
    """The block table of ``split`` when the corpus in ``folder`` stores it as LM blocks in plan order, else None
    (a corpus as converted loads none of the copies' code)."""
    if not is_copy(manifest):
        return None
    from arrowmt.stored._block_order import read_block_order

    return read_block_order(folder, manifest, split)


def is_copy(manifest: Manifest) -> bool:
    """Whether ``manifest`` lists any split stored in plan order (its entries are checked by their modules)."""
    return bool(manifest.provenance.get(ROW_ORDER_KEY) or manifest.provenance.get(BLOCK_ORDER_KEY))


def refuse_stored_order(
    manifest: Manifest, folder: Path, what: str, split: str | None = None, reads: Collection[str] = ()
) -> None:
    """InvalidParameterError when ``folder`` (whose manifest is ``manifest``) stores a plan order that ``what`` does
    not read (``reads``: the ones it does; see :func:`stored_orders` for ``split``)."""
    for kind in stored_orders(manifest, split):
        if kind not in reads:
            raise InvalidParameterError(_REFUSALS[kind].format(folder=folder, what=what))
