"""Where a pass's batches lie when a copy stored in plan order is read by its plan: the stretches of the copy the
batches a deal gives (``arrowmt.io.Dealt``, made by :mod:`arrowmt.bucketing`'s deals) are stored in, a stretch a
batch. The samplers and the
fairseq plugin's iterator read ahead by them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from arrowmt.format import Manifest
from arrowmt.io import Dealt, PassRanges, WordRanges

if TYPE_CHECKING:
    from arrowmt.stored._row_order import RowOrder
    from arrowmt.stored._stored_plan import StoredPlan


class Copy(Protocol):
    """A split that may be stored in plan order (``arrowmt.splits.Split``), as the copies' readers see it."""

    path: Path
    split: str
    manifest: Manifest
    row_order: RowOrder | None

    def __len__(self) -> int: ...

    def stretch_ranges(self, starts: np.ndarray, ends: np.ndarray) -> list[tuple[WordRanges, np.ndarray]] | None: ...


def stored_copy(plan: object, source: object) -> tuple[Copy, StoredPlan] | None:
    """(``source``, ``plan``) when ``source`` is the copy ``plan`` is stored by (a :class:`StoredPlan` of its own row
    order), else None."""
    order = getattr(source, "row_order", None)
    if order is None:  # not a copy (whose code is then never loaded)
        return None
    from arrowmt.stored._stored_plan import StoredPlan

    if not isinstance(plan, StoredPlan) or order is not plan.order:
        return None
    return source, plan  # type: ignore[return-value]  # a split: it has the plan's row order


def stretch_ranges(copy: Copy, plan: StoredPlan, dealt: Dealt) -> PassRanges:
    """Where the batches ``dealt`` at many steps lie in ``copy``: a stretch each, with the step of its batch."""

    def pass_ranges(first: int, count: int) -> list[tuple[WordRanges, np.ndarray]] | None:
        batches, steps = dealt(first, count)
        parts = copy.stretch_ranges(*plan.stretches(batches))
        return None if parts is None else [(part, steps[owner]) for part, owner in parts]

    return pass_ranges
