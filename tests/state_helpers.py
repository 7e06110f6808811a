"""The one shared check that a stateful iterable resumes exactly where its saved state says."""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch


class Stateful(Protocol):
    """An iterable whose position can be saved and restored (samplers, loaders)."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def torch_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` after ``torch.save`` then ``torch.load(weights_only=True)``, as in a checkpoint."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def check_resume(make: Callable[[], Stateful], consume: int) -> list[Any]:
    """Interrupt a fresh ``make()`` after ``consume`` items, resume a second one from its state.

    Asserts that the resumed object, and the interrupted one itself, yield
    exactly the rest of an uninterrupted run. Returns the uninterrupted run.
    """
    full = list(make())
    assert 0 <= consume <= len(full), f"consume={consume} outside 0..{len(full)}"
    first = make()
    iterator = iter(first)
    assert list(itertools.islice(iterator, consume)) == full[:consume]
    state = first.state_dict()
    restored = torch_roundtrip(state)
    assert restored == state
    resumed = make()
    resumed.load_state_dict(restored)
    assert resumed.state_dict() == state
    assert list(resumed) == full[consume:]
    assert list(iterator) == full[consume:]
    return full
