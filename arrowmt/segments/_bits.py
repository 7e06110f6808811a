"""Counter-based random bits for sampled segmentations: a pure function of (seed, epoch, column, row, word position,
step), so every process, worker count and world size draws the same segmentation of an occurrence, and every
occurrence, epoch and step draws independently of the others (splitmix64's finalizer over distinct counters)."""

from __future__ import annotations

import zlib

import numpy as np

from arrowmt.reading import exclusive_cumsum

MIX = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's constants
M1, M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
POSITION = np.uint64(0xD6E8FEB86659FD93)  # odd constants that spread a word position and a step
STEP = np.uint64(0xA0761D6478BD642F)
S1, S2, S3, BITS = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)  # splitmix64's shifts; bits kept
CONSTANTS = np.array([MIX, M1, M2, POSITION, STEP, S1, S2, S3, BITS], dtype=np.uint64)  # in the compiled draw's order


def mix64(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """splitmix64 of ``values * golden + key`` (uint64 in, uint64 out): distinct inputs, well-spread outputs."""
    with np.errstate(over="ignore"):
        z = np.asarray(values, dtype=np.uint64) * MIX + key
        z = (z ^ (z >> S1)) * M1
        z = (z ^ (z >> S2)) * M2
        return z ^ (z >> S3)


def epoch_key(seed: int, epoch: int, column: str) -> np.uint64:
    """The key of one column's draws in one epoch under ``seed``."""
    salt = zlib.crc32(column.encode())
    parts = np.array([seed, epoch, salt], dtype=np.uint64)
    key = np.uint64(0)
    for part in parts:
        key = mix64(np.array([part]), key)[0]
    return np.uint64(key)


def occurrence_keys(key: np.uint64, rows: np.ndarray, words_per_row: np.ndarray) -> np.ndarray:
    """One uint64 per word occurrence of ``rows`` (``words_per_row[i]`` words each, in order): its row and place."""
    counts = np.asarray(words_per_row, dtype=np.int64)
    total = int(counts.sum())
    place = np.arange(total, dtype=np.int64) - np.repeat(exclusive_cumsum(counts), counts)
    row = np.repeat(mix64(np.asarray(rows, dtype=np.uint64), key), counts)
    with np.errstate(over="ignore"):
        return mix64(row + place.astype(np.uint64) * POSITION, key)


def step_bits(keys: np.ndarray, step: int) -> np.ndarray:
    """32 uniform random bits (uint64 below 2**32) for step ``step`` of each occurrence ``keys``."""
    with np.errstate(over="ignore"):
        return mix64(keys + np.uint64(step) * STEP, np.uint64(step)) >> BITS
