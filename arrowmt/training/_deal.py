"""Where a pass's batches lie when a copy stored in plan order is read by its plan: the batches a deal gives at some
steps, the stretches of the copy they are stored in, and the steps that end shuffle windows.

A *deal* gives ``k`` ranks the positions of an epoch order from ``start`` on: at step ``s``
rank r takes position ``start + k * s + r``. Read-ahead through a remote cache asks for a
shuffle window's batches at once, every rank's (the node's cache then merges each run of the
window into long range requests and fetches each block once for all ranks). The samplers
and the fairseq plugin's iterator meet here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._arrays import sorted_unique
from arrowmt.io import PassRanges, WordRanges
from arrowmt.splits import Split

if TYPE_CHECKING:
    from arrowmt.plans import StoredPlan

Dealt = Callable[[int, int], tuple[np.ndarray, np.ndarray]]  # (first step, count) -> (plan batch ids, their steps)


def every_rank(order: np.ndarray, start: int, k: int) -> Dealt:
    """The batches every one of ``k`` ranks takes at steps ``first .. first + count - 1`` of a deal of ``order`` from
    position ``start`` (positions past the order's end left out: a deal's padding), and the step of each."""

    def dealt(first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        positions = np.arange(start + k * first, min(start + k * (first + count), len(order)), dtype=np.int64)
        return order[positions], (positions - start) // k

    return dealt


def own(ids: np.ndarray) -> Dealt:
    """The batches of a pass whose plan batches are ``ids`` at positions ``first .. first + count - 1``, and their
    positions."""

    def dealt(first: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        positions = np.arange(first, min(first + count, ids.shape[0]), dtype=np.int64)
        return ids[positions], positions

    return dealt


def window_end_steps(starts: np.ndarray, start: int, k: int, steps: int) -> np.ndarray:
    """The steps of a deal from position ``start`` to ``k`` ranks (``steps`` of them) that end a shuffle window whose
    successors begin at positions ``starts`` (:func:`arrowmt.plans.window_starts`), the last step included: the step
    holding a window's last position (it may hold the next window's first few too). Sorted, unique."""
    ends = (starts[starts > start] - 1 - start) // k
    return sorted_unique(np.append(ends[ends < steps - 1], steps - 1))


def stored_copy(plan: object, source: object) -> tuple[Split, StoredPlan] | None:
    """(``source``, ``plan``) when ``source`` is the copy ``plan`` is stored by (a :class:`StoredPlan` of its own row
    order), else None."""
    order = getattr(source, "row_order", None)
    if order is None:  # not a copy (whose code is then never loaded)
        return None
    from arrowmt.plans import StoredPlan

    if not isinstance(plan, StoredPlan) or order is not plan.order:
        return None
    return source, plan  # type: ignore[return-value]  # a split: it has the plan's row order


def stretch_ranges(copy: Split, plan: StoredPlan, dealt: Dealt) -> PassRanges:
    """Where the batches ``dealt`` at many steps lie in ``copy``: a stretch each, with the step of its batch."""

    def pass_ranges(first: int, count: int) -> list[tuple[WordRanges, np.ndarray]] | None:
        batches, steps = dealt(first, count)
        parts = copy.stretch_ranges(*plan.stretches(batches))
        return None if parts is None else [(part, steps[owner]) for part, owner in parts]

    return pass_ranges
