"""What makes a row source a torch map-style dataset: zero-copy rows and vectorized batch gathers.

A split (:class:`~arrowmt.splits.Split`) and a view (:class:`~arrowmt.views.View`) are row sources: each says how
many rows it has, where they lie (``locate``, ``located_spans``) and what one row holds (``row_array``). This mixin
adds torch's side, once, over either: ``ArrowMTDataset`` is a split with it, ``ArrowMTViewDataset`` a view with it;
neither inherits the other's internals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch.utils.data import Dataset

from arrowmt.training._batch import GatheredBatch

if TYPE_CHECKING:
    from arrowmt.reading import Spans


class RowsDataset(Dataset):
    """torch's map-style dataset over the row source it is mixed into: ``ds[i]`` gives ``{"id": i, <column>: int32
    tensor}`` whose tensors view the memory-mapped file; ``__getitems__`` locates a plan batch's rows per column."""

    if TYPE_CHECKING:  # what the row source supplies

        @property
        def columns(self) -> tuple[str, ...]: ...

        def row_array(self, column: str, index: int) -> np.ndarray: ...

        def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

        def located_spans(self, column: str, shard: np.ndarray, local: np.ndarray) -> Spans: ...

    def row(self, column: str, index: int) -> torch.Tensor:
        """Row ``index`` of ``column`` as an int32 tensor viewing the map (no copy)."""
        return torch.from_numpy(self.row_array(column, index))

    def __getitem__(self, index: int) -> dict[str, torch.Tensor | int]:
        item: dict[str, torch.Tensor | int] = {"id": int(index)}
        for column in self.columns:
            item[column] = self.row(column, int(index))
        return item

    def __getitems__(self, indices: list[int]) -> GatheredBatch:
        """The rows ``indices`` (a plan batch) located per column, for a collater (torch's DataLoader calls this).

        The result is also a sequence of ``ds[i]``-like sample dicts.
        """
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        shard, local = self.locate(ids)
        return GatheredBatch(ids, {c: self.located_spans(c, shard, local) for c in self.columns})
