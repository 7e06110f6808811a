"""The cache's record of when each block is needed next (``arrowmt.storage._state``): exact values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from arrowmt.testing import NO_USE, CacheState, add_use, use_keys

N = NO_USE


def test_the_two_earliest_uses_to_come_are_kept() -> None:
    next_use = np.array([N, 5, 5, 5, 5, 2, 2, 5])
    later_use = np.array([N, N, 9, 9, 9, 9, N, 9])
    step, now = 7, 3  # blocks 5 and 6: their next use (2) is past
    low, high = add_use(next_use, later_use, step, now)
    assert low.tolist() == [7, 5, 5, 5, 5, 7, 7, 5]
    assert high.tolist() == [N, 7, 7, 7, 7, 9, N, 7]
    low, high = add_use(next_use, later_use, 5, now)  # a use already known is counted once
    assert low.tolist()[1:5] == [5, 5, 5, 5] and high.tolist()[1:5] == [N, 9, 9, 9]
    low, high = add_use(next_use, later_use, 12, now)  # later than both: forgotten
    assert low.tolist()[2] == 5 and high.tolist()[2] == 9


def test_uses_announced_in_order_give_the_first_two() -> None:
    next_use, later_use = np.array([N]), np.array([N])
    for step in (4, 8, 20):
        next_use, later_use = add_use(next_use, later_use, step, 0)
    assert (next_use.tolist(), later_use.tolist()) == ([4], [8])


def test_the_key_is_the_first_use_still_to_come() -> None:
    next_use, later_use = np.array([N, 5, 5, 2, 2, 3]), np.array([N, 9, N, 9, 2, 3])
    assert use_keys(next_use, later_use, 3).tolist() == [N, 5, 5, 9, N, 3]
    assert use_keys(next_use, later_use, 6).tolist() == [N, 9, N, 9, N, N]


def test_a_second_process_opens_a_state_the_first_holds_mapped(tmp_path: Path) -> None:
    """Opening takes a lock while it sizes or checks the file; the map must not keep holding it."""
    first = CacheState(tmp_path / "state", 10)
    path = str(first.path)
    code = f"import pathlib; from arrowmt.storage._state import CacheState as C; C(pathlib.Path({path!r}), 10)"
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0  # a held lock: TimeoutExpired
