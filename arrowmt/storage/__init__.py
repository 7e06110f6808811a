"""Layer 1, storage: remote folders (``s3://...``, any ``pyarrow.fs`` URI) and the node-local block cache.

Knows nothing of the corpus format: files are byte ranges and blocks. Imports only the
core and never imports torch. Each name loads its module on first use (:mod:`arrowmt._lazy`):
a process that reads local corpora only never loads the block cache or ``pyarrow.fs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.storage._ranges import block_bounds, block_runs, block_uses, covered_blocks
    from arrowmt.storage._remote import RemoteFolder, request_buffer
    from arrowmt.storage._store import BlockFile, BlockStore, CachedFile
    from arrowmt.storage._urls import (
        DOWNLOAD_FIRST,
        MIRROR_SOURCE,
        STATE_DIR,
        is_mirror,
        is_url,
        local_only_path,
        local_output,
        local_path,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
