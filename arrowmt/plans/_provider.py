"""Plan providers: which batch plan a sampler walks in each epoch.

A sampler asks its provider for the plan of the epoch it is in (``for_epoch``). One plan
for every epoch (a pair or block plan) is :class:`FixedPlan`; a plan per epoch (a
mixture's draw, which changes with the epoch) is :class:`EpochPlans`, which keeps the
plan of the last epoch asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np


class Plan(Protocol):
    """What a sampler needs of a plan: its batch count, each batch's sample indices, and its identity.

    A plan may also have ``peek(b)``: batch ``b`` for planning ahead, nothing noted of its use (the sampler uses
    ``batch`` where it has none)."""

    key: str

    def __len__(self) -> int: ...

    @property
    def samples(self) -> int:
        """Sample indices in the plan, all batches together."""
        ...

    def batch(self, b: int) -> np.ndarray: ...


class PlanProvider(Protocol):
    """The plan of each epoch."""

    def for_epoch(self, epoch: int) -> Plan: ...


class FixedPlan:
    """The same plan in every epoch."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def for_epoch(self, epoch: int) -> Plan:
        return self.plan


class EpochPlans:
    """The plan of each epoch from ``build(epoch)``; the last one built is kept until another epoch is asked for."""

    def __init__(self, build: Callable[[int], Plan]) -> None:
        self.build = build
        self.current: tuple[int, Plan] | None = None

    def for_epoch(self, epoch: int) -> Plan:
        if self.current is None or self.current[0] != epoch:
            self.current = (epoch, self.build(epoch))
        return self.current[1]

    @property
    def loaded_epoch(self) -> int | None:
        """The epoch whose plan is kept (None: none yet)."""
        return None if self.current is None else self.current[0]

    def forget(self) -> None:
        """Drop the kept plan: the next request builds (or maps) it again."""
        self.current = None


class ShiftedPlan:
    """``plan`` with ``shift`` added to every index: a plan of a dataset that is one part of a larger one (an
    epoch's copy of a corpus read in sampled segmentations, whose epoch ``e`` is indices ``e * N`` on)."""

    def __init__(self, plan: Plan, shift: int) -> None:
        self.plan, self.shift = plan, int(shift)
        self.key = f"{plan.key}+{self.shift}"
        if hasattr(plan, "word_ranges"):  # where the plan file holds batches (read ahead of them)
            self.word_ranges = plan.word_ranges

    def __len__(self) -> int:
        return len(self.plan)

    @property
    def samples(self) -> int:
        return self.plan.samples

    def batch(self, b: int) -> np.ndarray:
        return _shifted(self.plan.batch(b), self.shift)

    def peek(self, b: int) -> np.ndarray:
        peek = getattr(self.plan, "peek", self.plan.batch)
        return _shifted(peek(b), self.shift)


def _shifted(batch: np.ndarray, shift: int) -> np.ndarray:
    """``batch + shift`` as int64 (a plan's int32 indices plus an epoch's shift pass 2**31 in long runs)."""
    out = batch.astype(np.int64)
    out += shift
    return out


def as_provider(plan: Plan | PlanProvider) -> PlanProvider:
    """``plan`` itself when it is a provider, else the provider of that one plan."""
    return plan if hasattr(plan, "for_epoch") else FixedPlan(plan)  # type: ignore[return-value,arg-type]
