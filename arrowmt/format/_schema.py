"""The on-disk schema: column names, Arrow types and the limits every split file obeys."""

from __future__ import annotations

import pyarrow as pa

FORMAT_NAME = "arrowmt"
FORMAT_VERSION = 1  # of the folder's manifest (arrowmt.json)
SPLIT_FORMAT_VERSION = 2  # of a split file: 2 records its offsets checksums as binary (1: as JSON)
READABLE_SPLIT_VERSIONS = (1, 2)
METADATA_KEY = b"arrowmt"
SPLIT_SUFFIX = ".arrow"
MANIFEST_NAME = "arrowmt.json"

SOURCE = "source"
TARGET = "target"
TOKENS = "tokens"

TOKEN_TYPE = pa.list_(pa.int32())
MAX_LIST_VALUES = 2**31 - 1
DEFAULT_ROWS_PER_BATCH = 1 << 16
ALIGNMENT = 4


def token_schema(columns: tuple[str, ...], metadata: bytes) -> pa.Schema:
    """Arrow schema with one non-nullable ``list<int32>`` field per column and arrowmt metadata."""
    fields = [pa.field(name, TOKEN_TYPE, nullable=False) for name in columns]
    return pa.schema(fields, metadata={METADATA_KEY: metadata})


CACHE_DIR_NAME = ".arrowmt-cache"  # batch and block plans cached beside the splits (a folder in the corpus)
