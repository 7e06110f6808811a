"""The torch Dataset over one split of an arrowmt folder: zero-copy rows, vectorized batch gathers."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from arrowmt.io import DEFAULT_ACCESS
from arrowmt.splits import ROWS, Split, refuse_stored_order
from arrowmt.training._batch import GatheredBatch


class ArrowMTDataset(Split, Dataset):
    """A :class:`~arrowmt.format.Split` as a torch map-style dataset.

    ``ds[i]`` gives ``{"id": i, <column>: int32 tensor}`` whose tensors view the
    memory-mapped file. Pickling keeps only the path: DataLoader workers reopen
    the map themselves. A split storing LM blocks in plan order (rows that are pieces of blocks) is refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        refuse_stored_order(self.manifest, self.path, "open_dataset", self.split, reads=(ROWS,))

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


def open_dataset(
    path: str | os.PathLike[str],
    split: str = "train",
    access: str = DEFAULT_ACCESS,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
) -> ArrowMTDataset:
    """Open split ``split`` (all its shards) of the arrowmt folder at ``path``.

    ``access``: how the kernel reads the memory maps: ``"random"`` (the default: only the
    pages rows touch, with the samplers' read-ahead of the next batches), ``"sequential"``
    or ``"normal"`` (the kernel's read-around of every fault; see :mod:`arrowmt.io._advice`).

    ``path`` may be a URL (``s3://bucket/prefix/corpus``, any ``pyarrow.fs`` URI): the
    corpus is read through a cache in ``cache_dir`` (default ``$ARROWMT_CACHE_DIR`` or
    ``~/.cache/arrowmt``) shared by the processes of the node, holding at most
    ``cache_limit`` bytes (an int or ``"20G"``; default ``$ARROWMT_CACHE_LIMIT``, else no limit).
    """
    return ArrowMTDataset(path, split, access=access, cache_dir=cache_dir, cache_limit=cache_limit)
