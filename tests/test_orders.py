"""Epoch orders of a plan's batches as strategies chosen by name (arrowmt.plans._orders), and the sampler's Walk."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from arrowmt import InvalidParameterError
from arrowmt.plans import WindowShuffle, batch_order
from arrowmt.testing import (
    BATCH_ORDERS,
    PlanOrder,
    Shuffle,
    Walk,
    World,
    epoch_batch_order,
    walk_of,
    window_starts,
    windowed_batch_order,
)
from arrowmt.training import PlanSampler
from tests.test_sampler import MinimalPlan


def test_the_options_name_one_order_each() -> None:
    assert sorted(BATCH_ORDERS) == ["sequential", "shuffle", "window"]
    assert batch_order() == Shuffle() and batch_order(False) == PlanOrder()
    assert batch_order(True, 40) == WindowShuffle(40) and batch_order(True, np.int64(40)).window == 40
    assert [type(batch_order(*options)).name for options in ((False,), (True,), (True, 3))] == [
        "sequential",
        "shuffle",
        "window",
    ]
    assert (PlanOrder().shuffled, Shuffle().shuffled, WindowShuffle(3).shuffled) == (False, True, True)
    assert (PlanOrder().window, Shuffle().window, WindowShuffle(3).window) == (None, None, 3)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ((False, 3), r"shuffle_window: expected None with shuffle=False, got 3"),
        ((True, 0), r"shuffle_window: expected an integer >= 1, got 0"),
        ((True, 2.5), r"shuffle_window: expected an integer >= 1, got 2.5"),
        ((True, True), r"shuffle_window: expected an integer >= 1, got True"),
    ],
)
def test_bad_options_are_refused_by_name(options: tuple, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        batch_order(*options)


def test_each_order_is_its_arithmetic() -> None:
    assert PlanOrder().order(5, 1, 3).tolist() == [0, 1, 2, 3, 4]
    assert PlanOrder().order(5, 1, 3).dtype == np.int64
    assert np.array_equal(Shuffle().order(1000, 7, 2), epoch_batch_order(1000, 7, 2))
    assert Shuffle().order(6, 1, 1).tolist() == np.random.RandomState(2).permutation(6).tolist()  # seed + epoch
    windows = WindowShuffle(48)
    assert np.array_equal(windows.order(1000, 7, 2), windowed_batch_order(1000, 7, 2, 48))
    assert np.array_equal(windows.window_starts(1000, 7, 2), window_starts(1000, 7, 2, 48))
    assert PlanOrder().window_starts(1000, 7, 2) is None and Shuffle().window_starts(1000, 7, 2) is None
    assert [o.describe() for o in (PlanOrder(), Shuffle(), WindowShuffle(40))] == [
        "in plan order",
        "shuffled",
        "shuffled in windows of 48 batches",
    ]


def test_walk_checks_every_option_once() -> None:
    walk = walk_of(3, True, 100, 4, 2, 0)
    assert walk == Walk(WindowShuffle(100), World(4, 2), 3, 0)
    assert walk.plan_seed == 3 and walk_of(3, False).plan_seed is None
    assert World(4, 2).size == 4 and tuple(World(4, 2)) == (4, 2)
    with pytest.raises(InvalidParameterError, match="rank"):
        walk_of(1, num_replicas=2, rank=2)
    with pytest.raises(InvalidParameterError, match="seed"):
        walk_of(-1)


@pytest.mark.parametrize("options", [{"shuffle": False}, {}, {"shuffle_window": 20}])
def test_a_sampler_walks_the_order_its_options_name(options: dict) -> None:
    sampler = PlanSampler(MinimalPlan([[b] for b in range(100)]), seed=5, num_replicas=2, rank=1, prefetch=0, **options)
    order = batch_order(options.get("shuffle", True), options.get("shuffle_window"))
    sampler.set_epoch(3)
    expected = order.order(100, 5, 3)
    assert np.array_equal(sampler.epoch_order(), expected)
    assert [b[0] for b in sampler] == expected[1::2].tolist()
    assert (sampler.shuffle, sampler.shuffle_window) == (order.shuffled, order.window)
    assert (sampler.num_replicas, sampler.rank, sampler.seed, sampler.prefetch) == (2, 1, 5, 0)
    assert order.describe() in repr(sampler)
    again = pickle.loads(pickle.dumps(sampler))
    assert again.walk == sampler.walk and again.state_dict() == sampler.state_dict()
