"""Layer 3, the on-disk format: schema, metadata, manifest, reader, writer, vocabulary, verify, atomic files.

Imports nothing from the layers above it (conversion, training, integrations) and never imports torch.
Other packages import from here, not from the private modules. Each name loads its module on first use
(:mod:`arrowmt._lazy`), so that importing this face, or any one module of the format, never loads the rest: a
reader of split files (``SplitFile``) loads neither the writer, verification nor the vocabulary's
``pyarrow.compute``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.format._atomic import (
        COMPLETED_NOTE,
        TEMP_PREFIX,
        StagedOutput,
        atomic_path,
        remove_unlisted,
        temp_prefix,
        write_bytes_atomic,
    )
    from arrowmt.format._block_index import index_name
    from arrowmt.format._block_order import (
        BlockOrder,
        block_order_name,
        block_orders,
        read_block_order,
    )
    from arrowmt.format._chunks import CheckedArray
    from arrowmt.format._dictionaries import check_split_dictionaries, mismatch_error
    from arrowmt.format._indexing import write_block_indexes, write_folder_indexes
    from arrowmt.format._locks import reading
    from arrowmt.format._manifest import (
        BLOCK_ORDER_KEY,
        DICTIONARY_SUFFIX,
        ORDERED_BY_KEY,
        ROW_ORDER_KEY,
        FileEntry,
        Manifest,
        data_bin_hint,
        file_entry,
        file_kind,
        manifest_path,
        plain_name_error,
        read_json,
        split_path,
    )
    from arrowmt.format._metadata import ColumnInfo, SpecialIds, SplitMetadata
    from arrowmt.format._mirror import CacheOptions, local_folder, local_only
    from arrowmt.format._offsets_crc import PIECE_ROWS, STRETCH_PIECE_ROWS, ManyOffsetChecks
    from arrowmt.format._progress import progress_bar
    from arrowmt.format._ragged import Ragged
    from arrowmt.format._ratio import length_ratio
    from arrowmt.format._reader import (
        IPC_FILE_MAGIC,
        FileIdentity,
        SplitFile,
        check_indices,
        ensure_offsets_checked,
        indices_within,
    )
    from arrowmt.format._row_order import (
        RowOrder,
        check_order_marker,
        open_row_order,
        order_marker,
        order_name,
        write_row_order,
    )
    from arrowmt.format._schema import (
        CACHE_DIR_NAME,
        DEFAULT_ROWS_PER_BATCH,
        MANIFEST_NAME,
        MAX_LIST_VALUES,
        SOURCE,
        SPLIT_SUFFIX,
        TARGET,
        TOKEN_TYPE,
        TOKENS,
        canonical_json,
    )
    from arrowmt.format._sidefile import (
        BLOCKS_FORMAT,
        COPY_BLOCKS_FORMAT,
        HEADER_BYTES,
        PLAN_FORMAT,
        VIEW_FORMAT,
        SideFile,
        check_batch_offsets,
        check_blocks_header,
        checksum,
        load_or_build,
        open_side_file,
        write_side_file,
    )
    from arrowmt.format._spans import Spans, exclusive_cumsum, flat_positions, take_flat
    from arrowmt.format._split import Split, open_shard, open_split
    from arrowmt.format._stage import stage
    from arrowmt.format._stored_order import BLOCKS, ROWS, refuse_stored_order, stored_orders
    from arrowmt.format._verify import VerifyReport, find_views, verify_dataset
    from arrowmt.format._view import REASONS, VIEW_SUFFIX, View, ViewReport, build_view, listed_mask, open_view
    from arrowmt.format._vocab import Dictionary, id_outside, symbols_sha256, unterminated_row
    from arrowmt.format._writer import (
        ColumnData,
        RowSource,
        check_same_rows,
        choose_rows_per_batch_streaming,
        open_split_writer,
        write_split,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
