"""Layer 6, a split as readers use it: all its files (``Split``, one open split per process) and its dictionaries
checked against it. How a split is stored (as converted, or a copy's rows or LM blocks in plan order) is
``arrowmt.stored``'s, which the split asks once when it opens (its row translator).

Imports the reading layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.splits._dictionaries import check_split_dictionaries, column_place, mismatch_error
    from arrowmt.splits._over import OverSplit
    from arrowmt.splits._split import Split, open_shard, open_split

__getattr__, __dir__, __all__ = attach(__name__, __file__)
