"""Layer 8, views and verification: a view (a checked list of the rows of a split that pass length, ratio and
duplicate filters, 4 bytes a kept row) and ``verify`` (every file of a corpus, its views and cache files checked).

Imports the splits layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.views._ratio import length_ratio
    from arrowmt.views._verify import VerifyReport, find_views, verify_dataset
    from arrowmt.views._view import REASONS, VIEW_SUFFIX, View, ViewReport, build_view, listed_mask, open_view

__getattr__, __dir__, __all__ = attach(__name__, __file__)
