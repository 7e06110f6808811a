"""The one shared check that a stateful iterable (sampler, loader) resumes exactly where its saved state says.

:func:`check_resume` interrupts a run at any step, saves the state as a checkpoint would
(``torch.save``, ``torch.load(weights_only=True)``), restores it into a fresh object and
asserts an identical continuation; :func:`check_resume_in_fresh_process` does the restore
in a new Python process. :class:`SamplerLoader` makes a plain ``DataLoader`` over a
stateful batch sampler one such iterable (its state is the sampler's).
"""

from __future__ import annotations

import io
import itertools
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader

TESTS = Path(__file__).resolve().parent


class Stateful(Protocol):
    """An iterable whose position can be saved and restored (samplers, loaders)."""

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class SamplerLoader:
    """A plain ``DataLoader`` over a stateful ``batch_sampler``; its state is the sampler's.

    Exact only where the loader draws one batch per step (``num_workers=0``): workers prefetch ahead.
    """

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        return iter(self.loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.batch_sampler.state_dict()  # type: ignore[union-attr]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.batch_sampler.load_state_dict(state)  # type: ignore[union-attr]


def torch_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` after ``torch.save`` then ``torch.load(weights_only=True)``, as in a checkpoint."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def interrupt(make: Callable[[], Stateful], full: list[Any], consume: int) -> tuple[Iterator[Any], dict[str, Any]]:
    """Run a fresh ``make()`` for ``consume`` items (asserting they are ``full``'s) and save its state there.

    Returns the interrupted iterator and the state after a checkpoint round trip.
    """
    assert 0 <= consume <= len(full), f"consume={consume} outside 0..{len(full)}"
    first = make()
    iterator = iter(first)
    assert list(itertools.islice(iterator, consume)) == full[:consume]
    state = first.state_dict()
    restored = torch_roundtrip(state)
    assert restored == state
    return iterator, restored


def check_resume(make: Callable[[], Stateful], consume: int, same_state: bool = True) -> list[Any]:
    """Interrupt a fresh ``make()`` after ``consume`` items, resume a second one from its state.

    Asserts that the resumed object, and the interrupted one itself, yield exactly
    the rest of an uninterrupted run; with ``same_state``, also that the resumed
    object reports the state it loaded. Returns the uninterrupted run.
    """
    full = list(make())
    iterator, state = interrupt(make, full, consume)
    resumed = make()
    resumed.load_state_dict(state)
    if same_state:
        assert resumed.state_dict() == state
    assert list(resumed) == full[consume:]
    assert list(iterator) == full[consume:]
    return full


def check_resume_in_fresh_process(
    factory: Callable[..., Stateful], kwargs: dict[str, Any], consume: int, folder: Path
) -> list[Any]:
    """:func:`check_resume` with the restore in a new Python process: ``factory(**kwargs)`` builds each object.

    ``factory`` is a module-level function of a module importable from ``tests/``; ``kwargs``
    and the items must pickle. Returns the uninterrupted run.
    """
    full = list(factory(**kwargs))
    iterator, state = interrupt(lambda: factory(**kwargs), full, consume)
    del iterator  # stop its workers before the other process starts its own
    job = {"module": factory.__module__, "name": factory.__qualname__, "kwargs": kwargs}
    (folder / "job.pkl").write_bytes(pickle.dumps(job))
    torch.save(state, folder / "state.pt")
    command = [sys.executable, str(Path(__file__)), str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=TESTS)
    assert done.returncode == 0, done.stderr
    rest = pickle.loads((folder / "rest.pkl").read_bytes())
    assert rest == full[consume:]
    return full


def _continue_saved_run(folder: Path) -> None:
    """The fresh process's side: build the object, load the saved state, write what it yields next."""
    import importlib

    sys.path[:0] = [str(TESTS), str(TESTS.parent)]
    job = pickle.loads((folder / "job.pkl").read_bytes())
    resumed = getattr(importlib.import_module(job["module"]), job["name"])(**job["kwargs"])
    resumed.load_state_dict(torch.load(folder / "state.pt", weights_only=True))
    (folder / "rest.pkl").write_bytes(pickle.dumps(list(resumed)))


if __name__ == "__main__":
    _continue_saved_run(Path(sys.argv[1]))
