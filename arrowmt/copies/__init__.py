"""Layer 13, copies in plan order (``arrowmt order``): a copy of a corpus whose training split is stored in the
order its batch plan reads it, sentence rows or a monolingual split's LM blocks, so that each planned batch is
one contiguous read (corpora larger than memory, object storage); and an epoch's copy of a corpus in its sampled
segmentations.

Making a copy is this package (the command's API, :func:`order_copy`, :func:`order_blocks`, the writer of the
reordered files, the streaming of an LM copy's rows); reading one is :mod:`arrowmt.stored` (layer 6, below the split
that takes its row translator from it: row order, block order, the plan a copy is stored by,
``refuse_stored_order``).

Imports every layer up to blocks and mixing (format, splits, converters, plans, blocks, stored); never torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.copies._epoch_copy import epoch_copy
    from arrowmt.copies._make import order_blocks, order_copy

__getattr__, __dir__, __all__ = attach(__name__, __file__)
