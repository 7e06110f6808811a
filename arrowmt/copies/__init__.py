"""Layer 13, copies in plan order (``arrowmt order``): a copy of a corpus whose training split is stored in the
order its batch plan reads it, sentence rows or a monolingual split's LM blocks, so that each planned batch is
one contiguous read (corpora larger than memory, object storage).

Making a copy lives here: the command's API (:func:`order_copy`, :func:`order_blocks`), the writer of the reordered
files and the streaming of an LM copy's rows. Reading one does not: the files' row order and block tables are the
format's (``arrowmt.format``: the split translates row numbers), the plan a copy is stored by is a plan
(``arrowmt.plans``: ``StoredPlan``), and every reader states which stored orders it reads
(``arrowmt.format.refuse_stored_order``).

Imports the format, converters and plans layers; never torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.copies._epoch_copy import epoch_copy
    from arrowmt.copies._make import order_blocks, order_copy

__getattr__, __dir__, __all__ = attach(__name__, __file__)
