"""Writing block indexes (:mod:`arrowmt.reading._block_index`) of split files: a CRC pass and the layout."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np

from arrowmt.files import reading, write_side_file
from arrowmt.format import Manifest
from arrowmt.io import WORD
from arrowmt.reading import BLOCK_SIZE, INDEX_FORMAT, SplitFile, index_name, pinned_at

READ_BYTES = 8 << 20


def block_crcs(path: Path, block_size: int = BLOCK_SIZE) -> np.ndarray:
    """CRC-32 of each ``block_size`` piece of the file at ``path`` (the last one may be shorter), read in order."""
    crcs = []
    per_read = max(1, READ_BYTES // block_size) * block_size
    with open(path, "rb") as handle:
        while chunk := handle.read(per_read):
            view = memoryview(chunk)
            crcs += [zlib.crc32(view[i : i + block_size]) for i in range(0, len(view), block_size)]
    return np.array(crcs, dtype=np.uint32)


def pinned_ranges(split: SplitFile) -> np.ndarray:
    """The byte ranges of ``split`` outside every column's token values, merged, as int64 ``[start, end)`` rows."""
    starts = [layout.values_pos * WORD for layout in split.layouts.values()]
    ends = [(layout.values_pos + layout.values_len) * WORD for layout in split.layouts.values()]
    values_start, values_end = np.concatenate(starts), np.concatenate(ends)
    keep = values_end > values_start
    order = np.argsort(values_start[keep], kind="stable")
    values_start, values_end = values_start[keep][order], values_end[keep][order]
    gap_start = np.concatenate([[0], values_end])
    gap_end = np.concatenate([values_start, [split.stamp.size]])
    useful = gap_end > gap_start
    return np.stack([gap_start[useful], gap_end[useful]], axis=1).astype(np.int64)


def write_block_index(path: Path, sha256: str, block_size: int = BLOCK_SIZE) -> Path:
    """Write the index of split file ``path`` (whose SHA-256 is ``sha256``) beside it; returns the index's path."""
    split = SplitFile(path, access="sequential")
    crcs = block_crcs(path, block_size)
    pinned = pinned_ranges(split)
    target = path.with_name(index_name(path.name))
    values = (split.stamp.size, block_size, crcs.shape[0], pinned.shape[0], bytes.fromhex(sha256))
    padding = bytes(pinned_at(crcs.shape[0]) - 4 * crcs.shape[0])
    return write_side_file(target, INDEX_FORMAT, values, [crcs, padding, pinned])


def write_block_indexes(folder: Path, manifest: Manifest, block_size: int = BLOCK_SIZE) -> list[str]:
    """Write the index of every split file ``manifest`` lists in ``folder``; returns their names."""
    names = []
    for entry in manifest.files.values():
        write_block_index(folder / entry.file, entry.sha256, block_size)
        names.append(index_name(entry.file))
    return names


def write_folder_indexes(folder: str | os.PathLike[str]) -> list[str]:
    """Write the block index of every split file of the arrowmt folder ``folder`` (for folders converted
    before conversion wrote them); returns their names."""
    path = Path(folder)
    with reading(path):
        return write_block_indexes(path, Manifest.load(path))
