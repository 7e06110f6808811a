"""Ragged token columns: many variable-length rows stored as one offsets + one values array."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arrowmt._errors import InvalidParameterError


@dataclass(frozen=True)
class Ragged:
    """Rows of token ids: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    ``offsets`` is int64 of length ``n + 1`` starting at 0 and non-decreasing;
    ``values`` is any integer array (it may be a read-only memory map of a
    source file; writers cast it to int32 chunk by chunk).
    """

    offsets: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        if self.offsets.ndim != 1 or self.offsets.shape[0] < 1:
            raise InvalidParameterError(f"offsets: expected a 1-D array of length >= 1, got shape {self.offsets.shape}")
        if self.offsets[0] != 0 or self.offsets[-1] != self.values.shape[0]:
            raise InvalidParameterError(
                f"offsets: expected to start at 0 and end at len(values)={self.values.shape[0]}, "
                f"got {int(self.offsets[0])}..{int(self.offsets[-1])}"
            )

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def lengths(self) -> np.ndarray:
        """Per-row lengths as int64."""
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` as a view into ``values``."""
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_lengths(cls, lengths: np.ndarray, values: np.ndarray) -> Ragged:
        """Build from per-row lengths and the concatenated values."""
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return cls(offsets, values)

    @classmethod
    def from_rows(cls, rows: list[np.ndarray] | list[list[int]]) -> Ragged:
        """Build from a list of rows (for tests and small data)."""
        arrays = [np.asarray(r, dtype=np.int64) for r in rows]
        lengths = np.array([a.shape[0] for a in arrays], dtype=np.int64)
        values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls.from_lengths(lengths, values.astype(np.int32))
