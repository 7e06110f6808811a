"""The block index of a split file (``<file>.blocks``): what a remote reader needs before it fetches a byte.

A corpus on object storage is read in blocks of :data:`BLOCK_SIZE` bytes. The index,
written by conversion beside each split file (and by ``arrowmt index`` for folders
converted before it existed), holds

- the CRC-32 of every block of the file, so each fetched block is verified before use
  without downloading the whole file;
- the byte ranges that are not token values (the stream's headers, the offsets): a
  remote reader fetches and keeps them at open, since opening and planning read them all.

:mod:`arrowmt.writing._indexing` writes it. It is a side file (:mod:`arrowmt.files._sidefile`):
header with the split file's size and SHA-256 (as the manifest records them), CRC-32 over everything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.files import SideFile, SideFormat, open_side_file
from arrowmt.storage import covered_blocks

BLOCK_SIZE = 4096  # a page: a row read costs one block, a batch stored together (arrowmt order) a few
MIN_BLOCK_SIZE, MAX_BLOCK_SIZE = 512, 1 << 30  # what an index may record (arrowmt writes BLOCK_SIZE)
INDEX_SUFFIX = ".blocks"
INDEX_FORMAT = SideFormat(
    "block index", b"ARROWMT-BINDEX\x00\x00", 1, "QQQQ32s", "write it again with `arrowmt index FOLDER`"
)


@dataclass(frozen=True)
class BlockIndex:
    """A split file's block CRCs and its ranges other than token values (``pinned``: int64 ``[start, end)`` rows)."""

    size: int
    block_size: int
    crcs: np.ndarray
    pinned: np.ndarray

    def pinned_blocks(self) -> np.ndarray:
        """Numbers of the blocks holding any byte of the pinned ranges."""
        return covered_blocks(self.pinned[:, 0], self.pinned[:, 1], self.block_size)


def index_name(file: str) -> str:
    """The index file of split file ``file``."""
    return file + INDEX_SUFFIX


def read_block_index(path: Path, size: int, sha256: str) -> BlockIndex:
    """The index at ``path`` of a split file of ``size`` bytes and SHA-256 ``sha256`` (FormatError if not)."""

    def expected_size(where: Path, values: tuple) -> int:
        return pinned_at(values[2]) + 16 * values[3]

    side = open_side_file(path, INDEX_FORMAT, expected_size)
    file_size, block_size, blocks, ranges, digest = side.values
    if not MIN_BLOCK_SIZE <= block_size <= MAX_BLOCK_SIZE or block_size & (block_size - 1):
        raise FormatError(
            f"{path}: block size: expected a power of two in {MIN_BLOCK_SIZE}..{MAX_BLOCK_SIZE}, found {block_size} "
            "(corrupt: write the index again with `arrowmt index`)"
        )
    if (file_size, digest.hex()) != (size, sha256) or blocks != -(-size // block_size):
        raise FormatError(
            f"{path}: block index of a file of {file_size} bytes, SHA-256 {digest.hex()[:16]}..; the manifest "
            f"records {size} bytes, SHA-256 {sha256[:16]}.. (index stale: write it again with `arrowmt index`)"
        )
    pinned = _pinned(side, blocks, ranges)
    outside = np.flatnonzero((pinned[:, 0] < 0) | (pinned[:, 1] < pinned[:, 0]) | (pinned[:, 1] > size))
    if outside.size:
        start, end = (int(v) for v in pinned[outside[0]])
        raise FormatError(
            f"{path}: pinned range {int(outside[0])}: expected bytes within 0..{size}, found {start}..{end} "
            "(corrupt: write the index again with `arrowmt index`)"
        )
    return BlockIndex(size, block_size, _array(side, np.uint32, blocks, 0), pinned)


def _array(side: SideFile, dtype: type, count: int, offset: int) -> np.ndarray:
    return side.array(dtype, count, offset).slice(0, count)  # checked; a read-only view of the map, shared


def _pinned(side: SideFile, blocks: int, ranges: int) -> np.ndarray:
    return _array(side, np.int64, 2 * ranges, pinned_at(blocks)).reshape(-1, 2)


def pinned_at(blocks: int) -> int:
    """Where the pinned ranges start in the body: after the CRCs, padded to 8 bytes."""
    return -(-4 * blocks // 8) * 8
