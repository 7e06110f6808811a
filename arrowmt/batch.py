"""A batch of rows located but not yet padded: what ``ArrowMTDataset.__getitems__`` hands the collater."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from arrowmt.errors import InvalidParameterError
from arrowmt.gather import take_flat


@dataclass(frozen=True, eq=False)
class Spans:
    """Rows of one column: row ``i`` is ``words[starts[i] : starts[i] + lengths[i]]``.

    ``words`` is either a shard's whole memory-mapped int32 view (nothing
    copied) or a compact array holding just these rows. Pickling compacts it,
    so a whole file never travels between processes.
    """

    words: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def select(self, order: np.ndarray) -> Spans:
        """The rows in ``order`` (a permutation or subset), still viewing the same ``words``."""
        return Spans(self.words, self.starts[order], self.lengths[order])

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` as a view of ``words``."""
        start = int(self.starts[i])
        return self.words[start : start + int(self.lengths[i])]

    def compact(self) -> Spans:
        """The same rows gathered into a fresh array of exactly their tokens."""
        flat = take_flat(self.words, self.starts, self.lengths)
        return Spans(flat, _exclusive_cumsum(self.lengths), self.lengths.copy())

    def __reduce__(self) -> tuple:
        small = self.compact()
        return (Spans, (small.words, small.starts, small.lengths))

    @classmethod
    def concat_compact(cls, parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Spans:
        """Rows from several ``(words, starts, lengths)`` parts, gathered into one compact array.

        One vectorized gather per part; rows keep the order of the parts.
        """
        flats = [take_flat(w, s, n) for w, s, n in parts]
        lengths = np.concatenate([np.asarray(n, dtype=np.int64) for _, _, n in parts])
        return cls(np.concatenate(flats), _exclusive_cumsum(lengths), lengths)

    @classmethod
    def empty(cls) -> Spans:
        none = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(0, dtype=np.int32), none, none)


def _exclusive_cumsum(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.shape[0], dtype=np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


Sample = dict[str, "torch.Tensor | int"]


@dataclass(frozen=True, eq=False)
class GatheredBatch(Sequence[Sample]):
    """Dataset rows ``ids`` with, per column, where each row's tokens are.

    It is also a read-only sequence of sample dicts equal to ``ds[ids[k]]``, so
    torch's ``default_collate`` and ``StackDataset`` keep working on it.
    """

    ids: np.ndarray
    columns: dict[str, Spans]

    def __post_init__(self) -> None:
        n = self.ids.shape[0]
        for name, spans in self.columns.items():
            if len(spans) != n:
                raise InvalidParameterError(f"columns[{name!r}]: expected {n} rows (one per id), got {len(spans)}")

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getitem__(self, k: int) -> Sample:  # type: ignore[override]
        if not -len(self) <= k < len(self):
            raise IndexError(f"sample {k} out of range for a batch of {len(self)}")
        item: Sample = {"id": int(self.ids[k])}
        for name, spans in self.columns.items():
            item[name] = torch.from_numpy(spans.row(k))
        return item

    def __iter__(self) -> Iterator[Sample]:
        return (self[k] for k in range(len(self)))

    def lengths(self, column: str) -> np.ndarray:
        """Token counts of ``column`` (int64), in batch order."""
        return self.columns[column].lengths

    @classmethod
    def from_samples(cls, samples: Sequence[Mapping[str, object]]) -> GatheredBatch:
        """Build from sample dicts ``{"id", <column>: 1-D tokens, ...}`` (``ds[i]`` or fairseq samples).

        Columns are the keys of the first sample other than ``id``; a column whose
        value is None in the first sample (fairseq's missing target) is left out.
        """
        if isinstance(samples, GatheredBatch):
            return samples
        if len(samples) == 0:
            return cls(np.zeros(0, dtype=np.int64), {})
        names = [key for key, value in samples[0].items() if key != "id" and value is not None]
        ids = np.array([int(s["id"]) for s in samples], dtype=np.int64)
        return cls(ids, {name: _spans_of(samples, name) for name in names})


def _spans_of(samples: Sequence[Mapping[str, object]], name: str) -> Spans:
    rows = [np.asarray(s[name]) for s in samples]
    lengths = np.array([r.shape[0] for r in rows], dtype=np.int64)
    return Spans(np.concatenate(rows), _exclusive_cumsum(lengths), lengths)
