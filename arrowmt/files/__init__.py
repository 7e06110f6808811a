"""Layer 3, files written and read safely: atomic outputs (a failed or interrupted write leaves the previous state),
node-wide locks, side files (a header, a CRC-32 per chunk, checked on first use), a batch plan's offsets and indices
checked, digests (a file's SHA-256, canonical JSON), progress bars.

Knows nothing of the corpus format above it; never imports torch. Other packages import from here, not from the
private modules; each name loads its module on first use (:mod:`arrowmt._lazy`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.files._atomic import (
        COMPLETED_NOTE,
        StagedOutput,
        atomic_output,
        atomic_path,
        remove_unlisted,
        temp_prefix,
        write_bytes_atomic,
    )
    from arrowmt.files._batches import check_batch_offsets, check_contents, checked_batch
    from arrowmt.files._chunks import CheckedArray
    from arrowmt.files._digests import SHA256_HEX, canonical_json, file_sha256
    from arrowmt.files._kinds import file_kind, not_regular_error
    from arrowmt.files._locks import reading
    from arrowmt.files._progress import progress_bar
    from arrowmt.files._sidefile import (
        BLOCKS_FORMAT,
        COPY_BLOCKS_FORMAT,
        PLAN_FORMAT,
        VIEW_FORMAT,
        SideFile,
        SideFormat,
        check_blocks_header,
        exclusive_lock,
        load_or_build,
        open_side_file,
        stored_version,
        write_side_file,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
