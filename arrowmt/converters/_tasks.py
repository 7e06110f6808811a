"""Running converter tasks: in this process, in a local process pool, or on any ``concurrent.futures.Executor``
(a Dask cluster through ``distributed.Client(...).get_executor()``), in order, with a bounded number in flight."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor
from typing import Any, TypeVar

from arrowmt._errors import ArrowMTError, InvalidParameterError
from arrowmt._optional import require

IN_FLIGHT_PER_WORKER = 2
PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal a process gets when its parent ends
FALLBACK_PARALLELISM = 4

T = TypeVar("T")
R = TypeVar("R")


class TaskRunner:
    """Maps a function over tasks in order on an executor (or inline), keeping few tasks in flight."""

    def __init__(self, executor: Executor | None, parallelism: int) -> None:
        self.executor = executor
        self.parallelism = parallelism

    def map(self, fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
        """Results of ``fn`` over ``tasks``, in order; at most ``2 x parallelism`` tasks are submitted ahead.

        Tasks are drawn from ``tasks`` lazily, so a generator that reads input as it goes stays bounded.
        If a task fails (or the caller stops early), the tasks not yet started are cancelled.
        """
        if self.executor is None:
            yield from map(fn, tasks)
            return
        window = max(1, IN_FLIGHT_PER_WORKER * self.parallelism)
        pending: deque[Future[R]] = deque()
        source = iter(tasks)
        try:
            for task in source:
                with _sigint_blocked(), _lost_worker():  # a local pool may start a worker here: immune to Ctrl-C
                    pending.append(self.executor.submit(fn, task))  # a pool broken meanwhile refuses the task
                if len(pending) >= window:
                    yield _result(pending.popleft())
            while pending:
                yield _result(pending.popleft())
        finally:
            for future in pending:
                future.cancel()
            _wait_quietly(pending)


def _result(future: Future[R]) -> R:
    with _lost_worker():
        return future.result()


@contextlib.contextmanager
def _lost_worker() -> Iterator[None]:
    """A broken pool (a worker died) as WorkerLostError, whether a result or a new task found it out."""
    try:
        yield
    except BrokenExecutor as exc:
        raise WorkerLostError(
            f"a worker process ended abruptly ({exc}); if it ran out of memory, use fewer workers or a smaller "
            "chunk size (chunk_bytes, --chunk-size)"
        ) from None


class WorkerLostError(ArrowMTError):
    """A worker process died (killed, out of memory) while running a task."""


def _wait_quietly(futures: Iterable[Future[Any]]) -> None:
    """Let tasks already running finish (they may write files the caller removes next); ignore their errors."""
    for future in futures:
        if not future.cancelled():
            with contextlib.suppress(BaseException):
                future.exception()


@contextlib.contextmanager
def open_runner(executor: Executor | None = None, workers: int = 1) -> Iterator[TaskRunner]:
    """A TaskRunner on ``executor``; without one, ``workers`` local processes (1: this process).

    With ``executor``, ``workers`` > 1 says how many tasks it runs at once (to size the
    in-flight window); otherwise that is read from the executor where it can be.
    Local worker processes are spawned (not forked), so a calling script needs the usual
    ``if __name__ == "__main__":`` guard.
    """
    if workers < 1:
        raise InvalidParameterError(f"workers: expected >= 1, got {workers}")
    if executor is not None:
        yield TaskRunner(executor, workers if workers > 1 else executor_parallelism(executor))
        return
    if workers == 1:
        yield TaskRunner(None, 1)
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=init_worker, initargs=(os.getpid(),))
    with pool:
        try:
            yield TaskRunner(pool, workers)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread for the block (a Ctrl-C then waits, it is not lost).

    A process started meanwhile inherits the blocked signal, so a Ctrl-C that reaches the
    whole process group cannot interrupt a worker (with a traceback) before
    :func:`end_with_parent` ignores it; the converting process alone handles it.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def init_worker(parent: int) -> None:
    """Initializer of the local worker processes: no pandas (:class:`NoPandas`), :func:`end_with_parent`."""
    sys.meta_path.insert(0, NoPandas())
    end_with_parent(parent)


class NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that refuses ``pandas``, installed in the local worker processes (never the caller's).

    pyarrow imports pandas, when it is installed, the first time it converts a Python or NumPy
    object (``pa.array``, ``Array.to_numpy``, a Python scalar argument), only to recognise pandas
    objects: about 0.5 s of CPU per process, a quarter of a small conversion. Converter tasks never
    hand pyarrow a pandas object, so their processes do without it (pyarrow then skips its pandas
    checks).
    """

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == "pandas":
            raise ModuleNotFoundError("arrowmt's converter worker processes do without pandas", name=fullname)
        return None


def end_with_parent(parent: int) -> None:
    """Worker initializer: ignore Ctrl-C (the converting process stops the pool) and end when the converting
    process ends, even by SIGKILL (Linux: the kernel's parent-death signal), so that a killed conversion
    leaves no idle worker processes behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the signal was armed
        os._exit(1)


def executor_parallelism(executor: Executor) -> int:
    """How many tasks ``executor`` runs at once: a pool's size, a Dask cluster's threads, else a guess."""
    size = getattr(executor, "_max_workers", None)
    if isinstance(size, int) and size > 0:
        return size
    client = getattr(executor, "_client", None)
    if client is not None:
        with contextlib.suppress(Exception):
            return max(1, sum(client.nthreads().values()))
    return FALLBACK_PARALLELISM


@contextlib.contextmanager
def dask_executor(scheduler: str) -> Iterator[tuple[Executor, int]]:
    """An executor on the Dask cluster whose scheduler listens at ``scheduler`` (``tcp://host:8786``),
    and the number of worker threads it has; the client is closed on exit."""
    distributed = require("distributed", "dask", "conversion on a Dask cluster")
    try:
        client = distributed.Client(scheduler)
    except (OSError, ValueError, TypeError) as exc:  # unreachable, or not an address ('missing port number')
        raise InvalidParameterError(
            f"dask_scheduler: expected a reachable Dask scheduler address (tcp://host:8786), got {scheduler!r} ({exc})"
        ) from None
    try:
        threads = max(1, sum(client.nthreads().values()))
        yield client.get_executor(), threads
    finally:
        client.close()
