"""The order an epoch walks a plan's batches in, a strategy chosen by name: the plan's own order, fairseq's shuffle,
or a shuffle within windows of runs of consecutive batches (:mod:`arrowmt.bucketing._bucketing` holds the arithmetic).

Samplers and the fairseq plugin take their order from :func:`batch_order`, the one place that turns the options
``shuffle`` and ``shuffle_window`` into a strategy and checks them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing import epoch_batch_order, window_batches, window_starts, windowed_batch_order


class BatchOrder(ABC):
    """How the batch ids of a plan of ``n_batches`` are ordered in an epoch (deterministic in seed and epoch)."""

    name: ClassVar[str]
    window: int | None = None  # the shuffle window's option, when there is one

    @abstractmethod
    def order(self, n_batches: int, seed: int, epoch: int) -> np.ndarray:
        """Every batch id once, in epoch ``epoch``'s order (int64)."""

    @abstractmethod
    def describe(self) -> str:
        """How the order reads in a sampler's repr."""

    @property
    def shuffled(self) -> bool:
        return True

    def window_starts(self, n_batches: int, seed: int, epoch: int) -> np.ndarray | None:
        """Positions where the epoch's second, third, ... window begins (None: an order without windows)."""
        return None


@dataclass(frozen=True)
class PlanOrder(BatchOrder):
    """The plan's own order, every epoch (``shuffle=False``)."""

    name: ClassVar[str] = "sequential"

    def order(self, n_batches: int, seed: int, epoch: int) -> np.ndarray:
        return np.arange(n_batches, dtype=np.int64)

    def describe(self) -> str:
        return "in plan order"

    @property
    def shuffled(self) -> bool:
        return False


@dataclass(frozen=True)
class Shuffle(BatchOrder):
    """fairseq's shuffle of every batch (:func:`~arrowmt.bucketing._bucketing.epoch_batch_order`)."""

    name: ClassVar[str] = "shuffle"

    def order(self, n_batches: int, seed: int, epoch: int) -> np.ndarray:
        return epoch_batch_order(n_batches, seed, epoch)

    def describe(self) -> str:
        return "shuffled"


@dataclass(frozen=True)
class WindowShuffle(BatchOrder):
    """A shuffle within windows of ``window`` batches (rounded up to a multiple of 16), each 16 runs of consecutive
    plan batches (:func:`~arrowmt.bucketing._bucketing.windowed_batch_order`): what a copy in plan order reads in long
    stretches."""

    name: ClassVar[str] = "window"
    window: int = 0

    def __post_init__(self) -> None:
        window_batches(self.window)  # checked: an integer >= 1
        object.__setattr__(self, "window", int(self.window))

    def order(self, n_batches: int, seed: int, epoch: int) -> np.ndarray:
        return windowed_batch_order(n_batches, seed, epoch, self.window)

    def describe(self) -> str:
        return f"shuffled in windows of {window_batches(self.window)} batches"

    def window_starts(self, n_batches: int, seed: int, epoch: int) -> np.ndarray:
        return window_starts(n_batches, seed, epoch, self.window)


BATCH_ORDERS: dict[str, type[BatchOrder]] = {kind.name: kind for kind in (PlanOrder, Shuffle, WindowShuffle)}


def batch_order(shuffle: bool = True, shuffle_window: int | None = None) -> BatchOrder:
    """The order the sampler options name: ``shuffle_window`` None (fairseq's shuffle, or the plan's order without
    ``shuffle``), or at least 1 batch with ``shuffle`` on."""
    if shuffle_window is None:
        return Shuffle() if shuffle else PlanOrder()
    if not shuffle:
        raise InvalidParameterError(f"shuffle_window: expected None with shuffle=False, got {shuffle_window!r}")
    return WindowShuffle(shuffle_window)
