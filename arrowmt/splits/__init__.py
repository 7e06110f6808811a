"""Layer 6, a split as readers use it: all its files (``Split``, one open split per process), its dictionaries
checked against it, and how it is stored (as converted, or a copy's rows or LM blocks in plan order: the row order
and block order tables, and ``refuse_stored_order``, the one refusal of a reader that cannot read a copy).

Imports the reading layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.splits._block_order import BlockOrder, block_order_name, block_orders, read_block_order
    from arrowmt.splits._dictionaries import check_split_dictionaries, column_place, mismatch_error
    from arrowmt.splits._over import OverSplit
    from arrowmt.splits._row_order import (
        RowOrder,
        check_order_marker,
        check_row_order,
        open_row_order,
        order_files,
        order_marker,
        order_name,
        write_row_order,
    )
    from arrowmt.splits._split import Split, open_shard, open_split
    from arrowmt.splits._stored_order import BLOCKS, ROWS, refuse_stored_order

__getattr__, __dir__, __all__ = attach(__name__, __file__)
