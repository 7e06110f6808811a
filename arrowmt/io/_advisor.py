"""A thread that asks the kernel for pages ahead (``MADV_WILLNEED``), off the batch loop.

Asking for a page that is not in the page cache is not free: the kernel allocates it,
charges it to the memory budget (reclaiming another page when the budget is full, as it
is for a corpus larger than memory), and submits its read. For short rows or LM blocks
that is a run of pages per row or block, and under a budget it took a quarter of the
batch loop's CPU time (``perf``, LM blocks under a third of their size: 23% in
``madvise``). The read-ahead of batches still to come need not wait for it:
:func:`advise_later` hands the runs to one thread per process, which asks for all of a
request's runs in one ``process_madvise`` call while the loop goes on (``ctypes`` releases
the GIL for it). One call per request matters: a thread that needs the GIL back after each
of many short calls waits for the busy loop to let it go every time.

The kernel takes ``MADV_WILLNEED`` in ``process_madvise`` from Linux 5.12, for one's own
process without ``CAP_SYS_NICE`` from about 6.12; a one-page request at the first use
tells. Where it is missing or refuses (older kernels, other systems) there is no thread and
:func:`advise_later` says so: the caller asks in its own thread, as before. A backlog
beyond :data:`BACKLOG` requests is dropped: read-ahead is a hint, and a page not asked for
is read at its first access. After ``fork``
(DataLoader workers) a child starts its own thread, with its own process handle.
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import platform
import queue
import threading

import numpy as np

BACKLOG = 16  # requests waiting for the thread at most (a request is 8 batches: more would be stale when made)
STOP_WAIT_S = 5.0  # at exit, how long to wait for a request being made
IOV_MAX = 1024  # runs in one process_madvise call (the kernel's limit on an iovec array)
SYS_PROCESS_MADVISE = 440  # on the architectures below (the shared table; alpha and mips number it otherwise)
SHARED_TABLE = frozenset({"x86_64", "i686", "aarch64", "armv7l", "riscv64", "ppc64le", "s390x"})


class VectorMadvise:
    """``process_madvise`` on this process: many ``(address, length)`` runs in one system call."""

    def __init__(self, libc: ctypes.CDLL, pidfd: int) -> None:
        self.libc = libc
        self.pidfd = pidfd
        self.pid = os.getpid()

    def __call__(self, addresses: np.ndarray, lengths: np.ndarray, advice: int) -> bool:
        """Advise every run, :data:`IOV_MAX` at a time; False at the first call the kernel refuses."""
        vector = np.empty((addresses.shape[0], 2), dtype=np.uint64)  # struct iovec {void *base; size_t len;}
        vector[:, 0], vector[:, 1] = addresses, lengths
        for first in range(0, vector.shape[0], IOV_MAX):
            part = vector[first : first + IOV_MAX]
            if self.call(part.ctypes.data, part.shape[0], advice) < 0:
                return False
        return True

    def call(self, vector: int, count: int, advice: int) -> int:
        long = ctypes.c_long
        return int(
            self.libc.syscall(
                long(SYS_PROCESS_MADVISE), long(self.pidfd), long(vector), long(count), long(advice), long(0)
            )
        )


def probe_vector_madvise() -> VectorMadvise | None:
    """This process's :class:`VectorMadvise`, if the kernel takes a one-page ``MADV_WILLNEED`` request; else None."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or platform.machine() not in SHARED_TABLE:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        pidfd = pidfd_open(os.getpid())
    except (OSError, AttributeError):
        return None
    vector = VectorMadvise(libc, pidfd)
    with mmap.mmap(-1, mmap.PAGESIZE) as page:  # a real request: an empty one is accepted whatever the advice
        address = ctypes.addressof(ctypes.c_char.from_buffer(page))
        works = vector(np.array([address]), np.array([mmap.PAGESIZE]), mmap.MADV_WILLNEED)
    if not works:  # ENOSYS, EINVAL (WILLNEED refused before 5.12), EPERM (CAP_SYS_NICE before ~6.12), ...
        os.close(pidfd)
        return None
    return vector


class Advisor:
    """One thread making the requests handed to it, in order, with one ``process_madvise`` call each."""

    def __init__(self, vector: VectorMadvise) -> None:
        self.vector = vector
        self.requests: queue.Queue[tuple[np.ndarray, np.ndarray, int] | None] = queue.Queue(BACKLOG)
        self.thread = threading.Thread(target=self._run, name="arrowmt-readahead", daemon=True)
        self.thread.start()

    def submit(self, addresses: np.ndarray, lengths: np.ndarray, advice: int) -> bool:
        """Hand over runs ``[addresses[i], addresses[i] + lengths[i])``; False when the backlog is full (dropped)."""
        try:
            self.requests.put_nowait((addresses, lengths, advice))
        except queue.Full:
            return False
        return True

    def _run(self) -> None:
        while (request := self.requests.get()) is not None:
            self.vector(*request)  # refused (a map closed meanwhile): those pages are read at their first access
            self.requests.task_done()
        self.requests.task_done()

    def drain(self) -> None:
        """Wait until every request handed over so far has been made."""
        self.requests.join()

    def stop(self) -> None:
        """End the thread: the requests not started yet are dropped, the one being made may finish (a while)."""
        while True:
            try:
                self.requests.get_nowait()
            except queue.Empty:
                break
            self.requests.task_done()
        self.requests.put(None)
        self.thread.join(STOP_WAIT_S)


class _State:
    """This process's advisor: not probed yet, none (the system cannot), or the one started."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.probed = False
        self.advisor: Advisor | None = None


_STATE = _State()


def advisor() -> Advisor | None:
    """This process's advisor, started at the first request (None where ``process_madvise`` is not available)."""
    with _STATE.lock:
        if not _STATE.probed:
            _STATE.probed = True
            vector = probe_vector_madvise()
            _STATE.advisor = None if vector is None else Advisor(vector)
        return _STATE.advisor


def advise_later(addresses: np.ndarray, lengths: np.ndarray, advice: int) -> bool | None:
    """Have the advisor thread advise the runs: True when handed over, False when dropped (backlog full), None when
    this process has no advisor (the caller advises the runs itself)."""
    found = advisor()
    return None if found is None else found.submit(addresses, lengths, advice)


def _forget_in_child() -> None:
    global _STATE
    parent = _STATE.advisor
    _STATE = _State()  # the parent's thread does not exist here, its lock may be held, its handle names the parent
    if parent is not None:
        os.close(parent.vector.pidfd)


@atexit.register
def _stop() -> None:
    if _STATE.advisor is not None and _STATE.advisor.thread.is_alive():
        _STATE.advisor.stop()


os.register_at_fork(after_in_child=_forget_in_child)
