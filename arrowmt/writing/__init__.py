"""Layer 7, writing split files: the streaming writer (record batches with their offsets' CRC-32s), block
indexes for remote reads, and staging a corpus to object storage.

Imports the splits layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.writing._indexing import write_block_indexes, write_folder_indexes
    from arrowmt.writing._stage import stage
    from arrowmt.writing._writer import (
        ColumnData,
        RowSource,
        check_same_rows,
        choose_rows_per_batch_streaming,
        open_split_writer,
        write_split,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
