"""Layer 6, how a copy in plan order is stored and read back: what a corpus stores (:data:`ROWS`, :data:`BLOCKS`,
asked of its manifest once), the row translator of a copy's rows (``RowOrder``: where each row is stored), its LM
block table, the plan its rows are stored by (``StoredPlan``), the stretches a dealt pass reads, and
``refuse_stored_order``, the one refusal of a reader that cannot read a copy.

The split (``arrowmt.splits``) takes its row translator from here, asking once when it opens
(:func:`row_translator`), and an LM reader its block table (:func:`block_order_of`). Inside, the stored plan tells
the row translator where each batch it hands out is stored (``RowOrder.note``), so that reading the batch needs no
lookup: the one channel between the two, both here. Making a copy is ``arrowmt.copies`` (layer 13).

Imports the reading layer and below; never torch. A corpus as converted loads only
:mod:`arrowmt.stored._stored_order` and, with a sampler, :mod:`arrowmt.stored._stretches` (each name
loads its module on first use). Its own package beside the split's since 2026-12-07 (it was ``arrowmt.copies``'s
subpackage, layer 6 inside a layer-13 folder): the folder tree is the layer order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.stored._block_order import BlockOrder, block_order_name, block_orders
    from arrowmt.stored._row_order import (
        ORDERED_BY_KEY,
        RowOrder,
        check_order_marker,
        check_row_order,
        order_files,
        order_marker,
        order_name,
        write_row_order,
    )
    from arrowmt.stored._stored_order import BLOCKS, ROWS, block_order_of, refuse_stored_order, row_translator
    from arrowmt.stored._stored_plan import (
        COPIED_FROM_KEY,
        StoredPlan,
        changed_fields,
        ordered_by,
        other_block_plan,
        stored_plan,
    )
    from arrowmt.stored._stretches import stored_copy, stretch_ranges

__getattr__, __dir__, __all__ = attach(__name__, __file__)
