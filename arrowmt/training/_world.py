"""The process's place in distributed training: the one place that detects rank and world size."""

from __future__ import annotations

from typing import NamedTuple

import torch.distributed as dist

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing import check_rank


class World(NamedTuple):
    """Where a process stands in distributed training: ``rank`` of ``size`` processes (checked)."""

    size: int
    rank: int


def default_world() -> tuple[int, int]:
    """(world size, rank) of the initialized default process group, else (1, 0)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def resolve_world(num_replicas: int | None, rank: int | None) -> World:
    """The world of the given size and rank, each defaulting to the process group's (:func:`default_world`)."""
    world, default_rank = default_world()
    num_replicas = world if num_replicas is None else num_replicas
    rank = default_rank if rank is None else rank
    check_rank(num_replicas, rank)
    return World(int(num_replicas), int(rank))


def same_on_every_rank(value: object, what: str) -> None:
    """InvalidParameterError unless every rank of the initialized process group holds an equal ``value`` (``what``
    names it); nothing without a process group."""
    size, rank = default_world()
    if size == 1:
        return
    values: list[object] = [None] * size
    dist.all_gather_object(values, value)
    differ = [r for r, v in enumerate(values) if v != values[0]]
    if differ:
        raise InvalidParameterError(
            f"seed: every rank must read {what} alike (else ranks read some rows twice and others never); rank 0 "
            f"has {values[0]!r}, rank {differ[0]} {values[differ[0]]!r} (this is rank {rank})"
        )
