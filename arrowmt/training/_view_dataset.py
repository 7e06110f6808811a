"""A view (:mod:`arrowmt.views._view`) as a torch dataset: what ``ArrowMTDataset`` offers, over the kept rows."""

from __future__ import annotations

import os

from arrowmt.training._rows_dataset import RowsDataset
from arrowmt.views import View


class ArrowMTViewDataset(View, RowsDataset):
    """The rows a view keeps as a torch map-style dataset; index ``i`` is the view's row ``i``.

    A view with torch's side: what maps indices to rows is :class:`~arrowmt.views._view.View`'s (which holds the
    corpus :class:`~arrowmt.splits.Split`, not inherits it), what reads them as tensors (``ds[i]``,
    ``__getitems__``, ``row``) the one :class:`~arrowmt.training._rows_dataset.RowsDataset` that ``ArrowMTDataset``
    also has. So a view goes where a dataset goes: ``TokenBatchSampler``, ``Collater``, mixtures, the fairseq
    plugin; every public member of ``ArrowMTDataset`` works on it (tests/test_view.py).
    """

    def __init__(self, path: str | os.PathLike[str], corpus: str | os.PathLike[str] | None = None) -> None:
        super().__init__(path, corpus)


def open_view_dataset(path: str | os.PathLike[str], corpus: str | os.PathLike[str] | None = None) -> ArrowMTViewDataset:
    """Open the view file ``path`` over ``corpus`` (default: the arrowmt folder holding it, or its parent)."""
    return ArrowMTViewDataset(path, corpus)
