"""The process's place in distributed training, and returning freed heap to the OS."""

from __future__ import annotations

import ctypes
import sys

import torch.distributed as dist

from arrowmt._errors import InvalidParameterError


def default_world() -> tuple[int, int]:
    """(world size, rank) of the initialized default process group, else (1, 0)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def resolve_world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    world, default_rank = default_world()
    num_replicas = world if num_replicas is None else num_replicas
    rank = default_rank if rank is None else rank
    if isinstance(num_replicas, bool) or int(num_replicas) != num_replicas or num_replicas < 1:
        raise InvalidParameterError(f"num_replicas: expected an integer >= 1, got {num_replicas!r}")
    if isinstance(rank, bool) or int(rank) != rank or not 0 <= rank < num_replicas:
        raise InvalidParameterError(f"rank: expected an integer in [0, num_replicas={num_replicas}), got {rank!r}")
    return int(num_replicas), int(rank)


def release_free_heap() -> None:
    """Return the heap freed by a plan build to the OS (glibc's ``malloc_trim``); a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim  # absent from musl
    except (OSError, AttributeError):
        return
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
