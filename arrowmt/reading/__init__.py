"""Layer 5, reading split files: one memory-mapped Arrow IPC file per process (``SplitFile``), rows as spans of
its words, offsets checked on first use against their recorded CRC-32s, a remote file's node-local mirror.

Imports the format layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.reading._block_index import BLOCK_SIZE, INDEX_FORMAT, index_name, pinned_at
    from arrowmt.reading._local import local_folder, local_only
    from arrowmt.reading._mirror import CacheOptions, attached_file, mirror
    from arrowmt.reading._offsets_crc import PIECE_ROWS, STRETCH_PIECE_ROWS, ManyOffsetChecks, encode_offsets_crcs
    from arrowmt.reading._ragged import Ragged
    from arrowmt.reading._reader import (
        IPC_FILE_MAGIC,
        RACY_NS,
        FileIdentity,
        FileStamp,
        SplitFile,
        check_indices,
        ensure_offsets_checked,
        indices_within,
        open_split_file,
        row_numbers,
    )
    from arrowmt.reading._spans import Spans, exclusive_cumsum, flat_positions, take_flat

__getattr__, __dir__, __all__ = attach(__name__, __file__)
