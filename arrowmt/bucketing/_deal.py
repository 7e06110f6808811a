"""Which batches a deal gives at some steps: the positions of an epoch order that ranks take, and the steps that end
shuffle windows (pure functions, each an ``arrowmt.io.Dealt``; where those batches lie in a copy in plan order is
:mod:`arrowmt.stored`'s).

A *deal* gives ``k`` ranks the positions of an epoch order from ``start`` on: at step ``s``
rank r takes position ``start + k * s + r``. Read-ahead through a remote cache asks for a
shuffle window's batches at once, every rank's (the node's cache then merges each run of the
window into long range requests and fetches each block once for all ranks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from arrowmt._arrays import sorted_unique

if TYPE_CHECKING:
    from arrowmt.io import Dealt


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
    successors begin at positions ``starts`` (:func:`arrowmt.bucketing.window_starts`), the last step included: the
    step holding a window's last position (it may hold the next window's first few too). Sorted, unique."""
    ends = (starts[starts > start] - 1 - start) // k
    return sorted_unique(np.append(ends[ends < steps - 1], steps - 1))
