"""Layer 4, the on-disk format's definitions: the schema (column names, types, file names), split metadata, the
manifest (``arrowmt.json``), dictionaries' symbols and the vocabulary (fairseq's ``dict.txt``).

Imports the files layer and below; never torch. Other packages import from here, not from the private modules.
Each name loads its module on first use (:mod:`arrowmt._lazy`): a reader never loads the vocabulary's
``pyarrow.compute`` unless it loads a dictionary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.format._manifest import (
        BLOCK_ORDER_KEY,
        DICTIONARY_SUFFIX,
        ROW_ORDER_KEY,
        FileEntry,
        Manifest,
        data_bin_hint,
        manifest_path,
        plain_name_error,
        read_json,
        split_path,
    )
    from arrowmt.format._metadata import ColumnInfo, SpecialIds, SplitMetadata
    from arrowmt.format._schema import (
        ALIGNMENT,
        CACHE_DIR_NAME,
        DEFAULT_ROWS_PER_BATCH,
        MANIFEST_NAME,
        MAX_LIST_VALUES,
        METADATA_KEY,
        SOURCE,
        SPLIT_SUFFIX,
        TARGET,
        TOKEN_TYPE,
        TOKENS,
        token_schema,
    )
    from arrowmt.format._symbols import text_symbols_digest
    from arrowmt.format._vocab import Dictionary, id_outside, symbols_sha256, unterminated_row

__getattr__, __dir__, __all__ = attach(__name__, __file__)
