"""Block arithmetic of the remote cache: which blocks byte ranges cover, and runs of blocks to fetch together.

Pure functions over numpy arrays, no I/O: tested with exact values.
"""

from __future__ import annotations

import numpy as np

from arrowmt._arrays import sorted_unique


def _range_blocks(starts: np.ndarray, ends: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-empty ranges (mask), the first block of each, and how many blocks each touches."""
    starts, ends = np.asarray(starts, dtype=np.int64).ravel(), np.asarray(ends, dtype=np.int64).ravel()
    keep = ends > starts
    first = starts[keep] // block_size
    return keep, first, (ends[keep] - 1) // block_size - first + 1


def _expand(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``first[i] .. first[i] + count[i] - 1`` for every ``i``, concatenated."""
    within = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(first, count) + within


def covered_blocks(starts: np.ndarray, ends: np.ndarray, block_size: int) -> np.ndarray:
    """Sorted unique numbers of the blocks of ``block_size`` bytes that byte ranges ``[starts, ends)`` touch.

    Empty ranges touch nothing.
    """
    _, first, count = _range_blocks(starts, ends, block_size)
    if not count.size:
        return np.zeros(0, dtype=np.int64)
    if int(count.max()) == 1:
        return sorted_unique(first)
    return sorted_unique(_expand(first, count))


def block_uses(
    starts: np.ndarray, ends: np.ndarray, steps: np.ndarray, block_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The blocks byte ranges ``[starts, ends)`` touch, each with the first two of the ``steps`` of the ranges
    touching it: (sorted unique blocks, first step, second step; the first again where only one step needs it).

    Empty ranges touch nothing.
    """
    keep, first, count = _range_blocks(starts, ends, block_size)
    if not count.size:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    blocks = _expand(first, count)
    at = np.repeat(np.asarray(steps, dtype=np.int64).ravel()[keep], count)
    order = np.lexsort((at, blocks))
    blocks, at = blocks[order], at[order]
    distinct = np.flatnonzero(np.concatenate([[True], (blocks[1:] != blocks[:-1]) | (at[1:] != at[:-1])]))
    blocks, at = blocks[distinct], at[distinct]
    heads = np.flatnonzero(np.concatenate([[True], blocks[1:] != blocks[:-1]]))
    second = at[heads].copy()
    twice = np.diff(np.append(heads, blocks.size)) > 1
    second[twice] = at[heads[twice] + 1]
    return blocks[heads], at[heads], second


def block_runs(blocks: np.ndarray, max_run: int) -> tuple[np.ndarray, np.ndarray]:
    """(first block, block count) of each run of consecutive numbers in sorted unique ``blocks``.

    Runs longer than ``max_run`` blocks are cut into pieces of at most ``max_run``.
    """
    blocks = np.asarray(blocks, dtype=np.int64)
    if not blocks.size:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    breaks = np.flatnonzero(np.diff(blocks) != 1) + 1
    run_of = np.zeros(blocks.size, dtype=np.int64)
    run_of[breaks] = 1
    run_of = np.cumsum(run_of)
    run_start = np.concatenate([[0], breaks])
    piece = (np.arange(blocks.size) - run_start[run_of]) // max_run
    heads = np.flatnonzero(np.concatenate([[True], (run_of[1:] != run_of[:-1]) | (piece[1:] != piece[:-1])]))
    counts = np.diff(np.concatenate([heads, [blocks.size]]))
    return blocks[heads], counts


def block_bounds(blocks: np.ndarray, block_size: int, file_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Byte ``(start, end)`` of each block; the last block of a file ends at ``file_size``."""
    blocks = np.asarray(blocks, dtype=np.int64)
    starts = blocks * block_size
    return starts, np.minimum(starts + block_size, file_size)
