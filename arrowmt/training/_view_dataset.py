"""A view (:mod:`arrowmt.views._view`) as a torch dataset: what ``ArrowMTDataset`` offers, over the kept rows."""

from __future__ import annotations

import os

from arrowmt.training._dataset import ArrowMTDataset
from arrowmt.views import View


class ArrowMTViewDataset(View, ArrowMTDataset):
    """The rows a view keeps as a torch map-style dataset; index ``i`` is the view's row ``i``.

    Everything that reads rows (``ds[i]``, ``__getitems__``, ``row``) comes from
    :class:`~arrowmt.training._dataset.ArrowMTDataset` and everything that maps
    indices to rows from :class:`~arrowmt.views._view.View`, so a view goes where a
    dataset goes: ``TokenBatchSampler``, ``Collater``, mixtures, the fairseq plugin.
    """

    def __init__(self, path: str | os.PathLike[str], corpus: str | os.PathLike[str] | None = None) -> None:
        View.__init__(self, path, corpus)


def open_view_dataset(path: str | os.PathLike[str], corpus: str | os.PathLike[str] | None = None) -> ArrowMTViewDataset:
    """Open the view file ``path`` over ``corpus`` (default: the arrowmt folder holding it, or its parent)."""
    return ArrowMTViewDataset(path, corpus)
