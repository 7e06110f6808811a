"""A loader that reads batches ahead on a thread of the training process: no worker processes, exact resume.

arrowmt reads a batch in a fraction of a millisecond from the page cache, so what DataLoader workers add is mostly
their hand-over: every tensor of every batch crosses to the main process as a shared-memory segment and a pickled
message (milliseconds a batch, several times what reading it costs). :class:`ReadAheadLoader` keeps the reading in
the training process instead: one thread draws the sampler's batches, gathers and collates them (numpy and torch
release the interpreter lock in their loops) and hands each over through a queue, ``depth`` batches ahead, so
reading overlaps the training step. Where a GPU is present it pins each batch's tensors (for
``.to(device, non_blocking=True)``).

Its ``state_dict()`` is the sampler's position at the batch it last *yielded*, however far the thread has read
ahead, in the layout of a ``StatefulDataLoader`` without workers (``{"_index_sampler_state": ...}``); so its
states and ``StatefulDataLoader``'s load into each other (``load_state_dict`` or
:func:`~arrowmt.training._resume.load_loader_state`), and a fresh process continues with exactly the next batch.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from arrowmt._checks import check_integer
from arrowmt.training._resume import SAMPLER_STATE, sampler_state

DEFAULT_DEPTH = 4  # batches read ahead
MAX_DEPTH = 1024
POLL_S = 0.1  # how often a thread waiting to hand over a batch looks whether the iteration was left
_END = object()


class ReadAheadLoader:
    """``DataLoader(dataset, batch_sampler=..., collate_fn=...)`` read ``depth`` batches ahead on a thread.

    Use it where a ``DataLoader`` (or ``StatefulDataLoader``) would go: call the sampler's
    ``set_epoch(epoch)`` before each epoch and iterate; ``state_dict()`` / ``load_state_dict()`` resume exactly.
    ``pin_memory`` (None: when CUDA is available) pins each batch's tensors on the thread. The dataset is read as
    ``dataset.__getitems__(ids)`` when it has one (arrowmt's datasets: one vectorized gather), else one item at a
    time.
    """

    num_workers = 0  # for load_loader_state: its states are those of a loader without workers

    def __init__(
        self,
        dataset: Any,
        batch_sampler: Any,
        collate_fn: Callable[[Any], Any],
        depth: int = DEFAULT_DEPTH,
        pin_memory: bool | None = None,
    ) -> None:
        self.dataset = dataset
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
        self.depth = check_integer("depth", depth, 1, MAX_DEPTH)
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else bool(pin_memory)
        self._state: dict[str, Any] | None = None  # the sampler's state at the last batch yielded (None: its own)
        self._stop: threading.Event | None = None  # the running iteration's

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[Any]:
        self._close()
        self._state = self.batch_sampler.state_dict()  # where the iteration starts, until a batch is yielded
        stop = self._stop = threading.Event()
        handed: queue.Queue[tuple[Any, Any]] = queue.Queue(self.depth)
        thread = threading.Thread(target=self._read, args=(handed, stop), name="arrowmt-read-ahead", daemon=True)
        thread.start()
        return self._batches(handed, stop, thread)

    def _batches(self, handed: queue.Queue[tuple[Any, Any]], stop: threading.Event, thread: threading.Thread) -> Any:
        try:
            while (item := _next(handed, thread))[0] is not _END:
                batch, state = item
                if isinstance(batch, BaseException):
                    raise batch
                self._state = state
                yield batch
        finally:
            stop.set()
            thread.join()

    def _read(self, handed: queue.Queue[tuple[Any, Any]], stop: threading.Event) -> None:
        """The thread: each batch with the sampler's state as it is drawn, then the end (or the error)."""
        batches = iter(self.batch_sampler)
        try:
            for ids in batches:
                state = self.batch_sampler.state_dict()
                if not self._put(handed, (self._collated(ids), state), stop):
                    return
            self._put(handed, (_END, None), stop)
        except BaseException as exc:  # handed to the training loop, raised there
            self._put(handed, (exc, None), stop)
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()  # the sampler's pass ends here (its read-ahead stops)

    def _collated(self, ids: list[int]) -> Any:
        getitems = getattr(self.dataset, "__getitems__", None)
        rows = getitems(ids) if getitems is not None else [self.dataset[i] for i in ids]
        batch = self.collate_fn(rows)
        return _pinned(batch) if self.pin_memory else batch

    @staticmethod
    def _put(handed: queue.Queue[tuple[Any, Any]], item: tuple[Any, Any], stop: threading.Event) -> bool:
        """Hand ``item`` over, waiting for room; False once the iteration was left."""
        while not stop.is_set():
            try:
                handed.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _close(self) -> None:
        """Stop the iteration running (if any): its thread stops at its next hand-over."""
        if self._stop is not None:
            self._stop.set()

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: the sampler's state at the last batch yielded (a ``StatefulDataLoader``
        layout)."""
        state = self.batch_sampler.state_dict() if self._state is None else self._state
        return {SAMPLER_STATE: state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state`` (this loader's, or any ``StatefulDataLoader``'s over the same sampler): the next
        iteration continues after the batch it records."""
        self._close()
        self.batch_sampler.load_state_dict(sampler_state(state))
        self._state = None


def _next(handed: queue.Queue[tuple[Any, Any]], thread: threading.Thread) -> tuple[Any, Any]:
    """The next item the thread hands over (RuntimeError if it ended without one)."""
    while True:
        try:
            return handed.get(timeout=POLL_S)
        except queue.Empty:
            if not thread.is_alive() and handed.empty():
                raise RuntimeError("arrowmt read-ahead thread ended without handing over a batch") from None


def _pinned(batch: Any) -> Any:
    """``batch`` with every tensor in page-locked memory (dicts, lists and tuples walked)."""
    if isinstance(batch, torch.Tensor):
        return batch.pin_memory()
    if isinstance(batch, Mapping):
        return {key: _pinned(value) for key, value in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_pinned(value) for value in batch)
    return batch
