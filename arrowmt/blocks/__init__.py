"""Layer 12, language-model blocks: a monolingual split as one token stream, fairseq's ``TokenBlockDataset``
blocks over it (a memory-mapped table per block options), their batch plan.

Imports the plans layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.blocks._block_plan import (
        BlockParams,
        BlockTable,
        cache_folder,
        load_block_plan,
        load_blocks,
        table_source,
        write_table,
    )
    from arrowmt.blocks._blocks import HEADS, shifted_heads
    from arrowmt.blocks._token_stream import TokenStream, check_monolingual

__getattr__, __dir__, __all__ = attach(__name__, __file__)
