"""Layer 3, the on-disk format: schema, metadata, manifest, reader, writer, vocabulary, verify, atomic files.

Imports nothing from the layers above it (conversion, training, integrations) and never imports torch.
Other packages import from here, not from the private modules. Each name loads its module on first use
(:mod:`arrowmt._lazy`), so that importing this face, or any one module of the format, never loads the rest: a
reader of split files (``SplitFile``) loads neither the writer, verification nor the vocabulary's
``pyarrow.compute``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import load_export

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
        refuse_block_order,
    )
    from arrowmt.format._chunks import CheckedArray
    from arrowmt.format._dictionaries import check_split_dictionaries, mismatch_error
    from arrowmt.format._indexing import write_block_indexes, write_folder_indexes
    from arrowmt.format._locks import reading
    from arrowmt.format._manifest import (
        BLOCK_ORDER_KEY,
        DICTIONARY_SUFFIX,
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
    from arrowmt.format._row_order import RowOrder, open_row_order, order_name, refuse_row_order, write_row_order
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

_EXPORTS = {
    "arrowmt.format._atomic": (
        "COMPLETED_NOTE",
        "StagedOutput",
        "TEMP_PREFIX",
        "atomic_path",
        "remove_unlisted",
        "temp_prefix",
        "write_bytes_atomic",
    ),
    "arrowmt.format._block_index": ("index_name",),
    "arrowmt.format._block_order": (
        "BlockOrder",
        "block_order_name",
        "block_orders",
        "read_block_order",
        "refuse_block_order",
    ),
    "arrowmt.format._chunks": ("CheckedArray",),
    "arrowmt.format._dictionaries": ("check_split_dictionaries", "mismatch_error"),
    "arrowmt.format._indexing": ("write_block_indexes", "write_folder_indexes"),
    "arrowmt.format._locks": ("reading",),
    "arrowmt.format._manifest": (
        "BLOCK_ORDER_KEY",
        "DICTIONARY_SUFFIX",
        "ROW_ORDER_KEY",
        "FileEntry",
        "Manifest",
        "data_bin_hint",
        "file_entry",
        "file_kind",
        "manifest_path",
        "plain_name_error",
        "read_json",
        "split_path",
    ),
    "arrowmt.format._metadata": ("ColumnInfo", "SpecialIds", "SplitMetadata"),
    "arrowmt.format._mirror": ("CacheOptions", "local_folder", "local_only"),
    "arrowmt.format._offsets_crc": ("PIECE_ROWS", "STRETCH_PIECE_ROWS", "ManyOffsetChecks"),
    "arrowmt.format._progress": ("progress_bar",),
    "arrowmt.format._ragged": ("Ragged",),
    "arrowmt.format._ratio": ("length_ratio",),
    "arrowmt.format._reader": (
        "FileIdentity",
        "IPC_FILE_MAGIC",
        "SplitFile",
        "check_indices",
        "ensure_offsets_checked",
        "indices_within",
    ),
    "arrowmt.format._row_order": ("RowOrder", "open_row_order", "order_name", "refuse_row_order", "write_row_order"),
    "arrowmt.format._schema": (
        "CACHE_DIR_NAME",
        "DEFAULT_ROWS_PER_BATCH",
        "MANIFEST_NAME",
        "MAX_LIST_VALUES",
        "SOURCE",
        "SPLIT_SUFFIX",
        "TARGET",
        "TOKENS",
        "TOKEN_TYPE",
    ),
    "arrowmt.format._sidefile": (
        "BLOCKS_FORMAT",
        "COPY_BLOCKS_FORMAT",
        "HEADER_BYTES",
        "PLAN_FORMAT",
        "SideFile",
        "VIEW_FORMAT",
        "check_batch_offsets",
        "check_blocks_header",
        "checksum",
        "load_or_build",
        "open_side_file",
        "write_side_file",
    ),
    "arrowmt.format._spans": ("Spans", "exclusive_cumsum", "flat_positions", "take_flat"),
    "arrowmt.format._split": ("Split", "open_shard", "open_split"),
    "arrowmt.format._stage": ("stage",),
    "arrowmt.format._verify": ("VerifyReport", "find_views", "verify_dataset"),
    "arrowmt.format._view": ("REASONS", "VIEW_SUFFIX", "View", "ViewReport", "build_view", "listed_mask", "open_view"),
    "arrowmt.format._vocab": ("Dictionary", "id_outside", "symbols_sha256", "unterminated_row"),
    "arrowmt.format._writer": (
        "ColumnData",
        "RowSource",
        "check_same_rows",
        "choose_rows_per_batch_streaming",
        "open_split_writer",
        "write_split",
    ),
}


def __getattr__(name: str) -> object:
    return load_export(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "BLOCKS_FORMAT",
    "BLOCK_ORDER_KEY",
    "CACHE_DIR_NAME",
    "COMPLETED_NOTE",
    "COPY_BLOCKS_FORMAT",
    "DEFAULT_ROWS_PER_BATCH",
    "DICTIONARY_SUFFIX",
    "HEADER_BYTES",
    "IPC_FILE_MAGIC",
    "MANIFEST_NAME",
    "MAX_LIST_VALUES",
    "PIECE_ROWS",
    "PLAN_FORMAT",
    "REASONS",
    "ROW_ORDER_KEY",
    "SOURCE",
    "SPLIT_SUFFIX",
    "STRETCH_PIECE_ROWS",
    "TARGET",
    "TEMP_PREFIX",
    "TOKENS",
    "TOKEN_TYPE",
    "VIEW_FORMAT",
    "VIEW_SUFFIX",
    "BlockOrder",
    "CacheOptions",
    "CheckedArray",
    "ColumnData",
    "ColumnInfo",
    "Dictionary",
    "FileEntry",
    "FileIdentity",
    "Manifest",
    "ManyOffsetChecks",
    "Ragged",
    "RowOrder",
    "RowSource",
    "SideFile",
    "Spans",
    "SpecialIds",
    "Split",
    "SplitFile",
    "SplitMetadata",
    "StagedOutput",
    "VerifyReport",
    "View",
    "ViewReport",
    "atomic_path",
    "block_order_name",
    "block_orders",
    "build_view",
    "check_batch_offsets",
    "check_blocks_header",
    "check_indices",
    "check_same_rows",
    "check_split_dictionaries",
    "checksum",
    "choose_rows_per_batch_streaming",
    "data_bin_hint",
    "ensure_offsets_checked",
    "exclusive_cumsum",
    "file_entry",
    "file_kind",
    "find_views",
    "flat_positions",
    "id_outside",
    "index_name",
    "indices_within",
    "length_ratio",
    "listed_mask",
    "load_or_build",
    "local_folder",
    "local_only",
    "manifest_path",
    "mismatch_error",
    "open_row_order",
    "open_shard",
    "open_side_file",
    "open_split",
    "open_split_writer",
    "open_view",
    "order_name",
    "plain_name_error",
    "progress_bar",
    "read_block_order",
    "read_json",
    "reading",
    "refuse_block_order",
    "refuse_row_order",
    "remove_unlisted",
    "split_path",
    "stage",
    "symbols_sha256",
    "take_flat",
    "temp_prefix",
    "unterminated_row",
    "verify_dataset",
    "write_block_indexes",
    "write_bytes_atomic",
    "write_folder_indexes",
    "write_row_order",
    "write_side_file",
    "write_split",
]
