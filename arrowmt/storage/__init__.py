"""Layer 1, storage: remote folders (``s3://...``, any ``pyarrow.fs`` URI) and the node-local block cache.

Knows nothing of the corpus format: files are byte ranges and blocks. Imports only the
core and never imports torch.
"""

from arrowmt.storage._ranges import block_bounds, block_runs, block_uses, covered_blocks
from arrowmt.storage._remote import RemoteFolder, is_url, request_buffer
from arrowmt.storage._store import STATE_DIR, BlockFile, BlockStore, CachedFile, Snapshot

__all__ = [
    "STATE_DIR",
    "BlockFile",
    "BlockStore",
    "CachedFile",
    "RemoteFolder",
    "Snapshot",
    "block_bounds",
    "block_runs",
    "block_uses",
    "covered_blocks",
    "is_url",
    "request_buffer",
]
