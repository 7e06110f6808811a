"""A plan batch's rows located but not yet padded: what ``ArrowMTDataset.__getitems__`` hands a collater."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from arrowmt._errors import InvalidParameterError
from arrowmt.format import SOURCE, TARGET
from arrowmt.plans import check_row_ids
from arrowmt.reading import Spans, exclusive_cumsum

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

    def holding_shape(self, shapes: Sequence[tuple[int, int, int]]) -> tuple[int, int, int]:
        """The first of ``shapes`` (rows, source length, target length: a sampler's ``batch_shapes()``) that holds
        these rows; InvalidParameterError when none does."""
        need = (len(self), *(int(self.columns[c].lengths.max(initial=0)) for c in (SOURCE, TARGET)))
        for shape in shapes:
            if all(n <= have for n, have in zip(need, shape, strict=True)):
                return shape
        raise InvalidParameterError(
            f"batch: {need[0]} rows of up to {need[1]} source and {need[2]} target tokens fit none of the collater's "
            f"shapes {list(shapes)} (the sampler's batch_shapes() of another plan?)"
        )

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
        check_row_ids(samples)
        names = [key for key, value in samples[0].items() if key != "id" and value is not None]
        ids = np.array([int(s["id"]) for s in samples], dtype=np.int64)
        return cls(ids, {name: _spans_of(samples, name) for name in names})


def _spans_of(samples: Sequence[Mapping[str, object]], name: str) -> Spans:
    rows = [np.asarray(s[name]) for s in samples]
    lengths = np.array([r.shape[0] for r in rows], dtype=np.int64)
    return Spans(np.concatenate(rows), exclusive_cumsum(lengths), lengths)
