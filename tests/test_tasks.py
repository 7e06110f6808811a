"""Running converter tasks: inline, in a local process pool, or on any executor; in order, bounded, failures clean."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import pytest

from arrowmt import InvalidParameterError, MissingDependencyError
from arrowmt.testing import (
    FALLBACK_PARALLELISM,
    TaskRunner,
    WorkerLostError,
    dask_executor,
    executor_parallelism,
    open_runner,
)


def square(x: int) -> int:
    return x * x


def die_on_three(x: int) -> int:
    if x == 3:
        os._exit(1)  # a worker killed (e.g. out of memory)
    return x


def fail_on_two(x: int) -> int:
    if x == 2:
        raise ValueError("bad task 2")
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_results_in_order(workers: int) -> None:
    with open_runner(workers=workers) as runner:
        assert list(runner.map(square, range(20))) == [x * x for x in range(20)]


class CountingExecutor(Executor):
    """Runs tasks in a thread pool and records how many were submitted but not yet collected."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(2)
        self.submitted = 0
        self.lock = threading.Lock()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        with self.lock:
            self.submitted += 1
        return self.pool.submit(fn, *args, **kwargs)


def test_tasks_are_drawn_lazily_with_a_bounded_window() -> None:
    executor = CountingExecutor()
    runner = TaskRunner(executor, parallelism=3)
    ahead = []
    for k, _ in enumerate(runner.map(square, range(100))):
        ahead.append(executor.submitted - (k + 1))
    assert max(ahead) <= 2 * 3 and executor.submitted == 100
    executor.pool.shutdown()


def test_a_failing_task_raises_and_cancels_the_rest() -> None:
    executor = CountingExecutor()
    runner = TaskRunner(executor, parallelism=1)
    with pytest.raises(ValueError, match="bad task 2"):
        list(runner.map(fail_on_two, range(1000)))
    assert executor.submitted < 10
    executor.pool.shutdown()


def test_a_dead_worker_is_a_clear_error() -> None:
    expected = r"worker process ended abruptly.*chunk size"
    with pytest.raises(WorkerLostError, match=expected), open_runner(workers=2) as runner:
        list(runner.map(die_on_three, range(8)))


def test_parallelism_and_bad_workers() -> None:
    with ThreadPoolExecutor(3) as pool:
        assert executor_parallelism(pool) == 3
        with open_runner(pool) as runner:
            assert runner.executor is pool and runner.parallelism == 3
        with open_runner(pool, workers=5) as runner:
            assert runner.parallelism == 5
    assert executor_parallelism(CountingExecutor()) == FALLBACK_PARALLELISM
    with pytest.raises(InvalidParameterError, match="workers: expected >= 1, got 0"), open_runner(workers=0):
        pass


def test_dask_missing_or_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    dask = pytest.importorskip("dask")
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        pytest.raises(
            InvalidParameterError,
            match=r"dask_scheduler: expected a reachable Dask scheduler address \(tcp://host:8786\), got 'tcp://127\.0\.0\.1:9'",
        ),
        dask_executor("tcp://127.0.0.1:9"),
    ):
        pass
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'arrowmt\[dask\]'"), dask_executor("tcp://x:1"):
        pass


KILLED_PARENT = """
import sys, time
from arrowmt.converters._tasks import open_runner
with open_runner(workers=2) as runner:
    list(runner.map(abs, range(4)))  # both workers started
    print("ready", flush=True)
    time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_workers_end_when_the_conversion_is_killed() -> None:
    """A SIGKILLed conversion leaves no worker processes behind (they would wait for tasks forever)."""
    command = [sys.executable, "-c", KILLED_PARENT]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        children = _children(proc.pid)
        assert len(children) >= 2  # the two workers (and the resource tracker)
        proc.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in children):
        time.sleep(0.1)
    alive = [pid for pid in children if os.path.exists(f"/proc/{pid}")]
    assert alive == [], f"still running after the parent was killed: {alive}"
