"""The torch Dataset over one split of an arrowmt folder (a :class:`~arrowmt.splits.Split` that is also a
:class:`~arrowmt.training._rows_dataset.RowsDataset`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arrowmt._errors import InvalidParameterError
from arrowmt.files import VIEW_FORMAT, stored_version
from arrowmt.io import DEFAULT_ACCESS
from arrowmt.segments import check_segmentation
from arrowmt.splits import Split
from arrowmt.storage import is_url
from arrowmt.stored import ROWS, refuse_stored_order
from arrowmt.training._rows_dataset import RowsDataset

if TYPE_CHECKING:
    from arrowmt.training._sampled_dataset import ArrowMTSampledDataset


class ArrowMTDataset(Split, RowsDataset):
    """A :class:`~arrowmt.format.Split` as a torch map-style dataset.

    ``ds[i]`` gives ``{"id": i, <column>: int32 tensor}`` whose tensors view the
    memory-mapped file. Pickling keeps only the path: DataLoader workers reopen
    the map themselves. A split storing LM blocks in plan order (rows that are pieces of blocks) is refused.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        refuse_stored_order(self.manifest, self.path, "open_dataset", self.split, reads=(ROWS,))


def open_dataset(
    path: str | os.PathLike[str],
    split: str = "train",
    access: str = DEFAULT_ACCESS,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
    segmentation: str = "fixed",
    alpha: float | None = None,
) -> ArrowMTDataset | ArrowMTSampledDataset:
    """Open split ``split`` (all its shards) of the arrowmt folder at ``path``.

    ``segmentation``: ``"fixed"`` (the default) reads the ids the corpus was converted with; ``"sampled"`` reads
    its sampled segmentations (subword regularization, made by ``convert text --spm-sampling`` or
    :func:`~arrowmt.converters.add_sampled_segmentations`): an :class:`ArrowMTSampledDataset`, each row drawn
    afresh each epoch under ``TokenBatchSampler``, with ``alpha`` (default: the one the samples record).

    ``access``: how the kernel reads the memory maps: ``"random"`` (the default: only the
    pages rows touch, with the samplers' read-ahead of the next batches), ``"sequential"``
    or ``"normal"`` (the kernel's read-around of every fault; see :mod:`arrowmt.io._advice`).

    ``path`` may be a URL (``s3://bucket/prefix/corpus``, any ``pyarrow.fs`` URI): the
    corpus is read through a cache in ``cache_dir`` (default ``$ARROWMT_CACHE_DIR`` or
    ``~/.cache/arrowmt``) shared by the processes of the node, holding at most
    ``cache_limit`` bytes (an int or ``"20G"``; default ``$ARROWMT_CACHE_LIMIT``, else no limit).
    """
    check_segmentation("segmentation", segmentation)
    refuse_view_file(path)
    if alpha is not None and segmentation == "fixed":
        raise InvalidParameterError(f"alpha: expected with segmentation='sampled' (the law it shapes), got {alpha}")
    dataset = ArrowMTDataset(path, split, access=access, cache_dir=cache_dir, cache_limit=cache_limit)
    if segmentation == "fixed":
        return dataset
    from arrowmt.training._sampled_dataset import ArrowMTSampledDataset  # what fixed reading never loads

    return ArrowMTSampledDataset(dataset, alpha=alpha)


def refuse_view_file(path: str | os.PathLike[str]) -> None:
    """InvalidParameterError naming :func:`open_view_dataset` when ``path`` is a view file (``arrowmt filter``)."""
    if not is_url(path) and os.path.isfile(path) and stored_version(Path(path), VIEW_FORMAT) is not None:
        raise InvalidParameterError(
            f"path: {path} is a view file (arrowmt filter), not a corpus folder; open it with "
            f"arrowmt.open_view_dataset({str(path)!r})"
        )
