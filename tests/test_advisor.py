"""The read-ahead thread: requests made in order, a full backlog dropped, the fallback where the kernel cannot, a forked
child's own thread, and the residency sample's arithmetic."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from arrowmt.io import _advice, _advisor
from arrowmt.testing import PAGE, Advisor, WordRanges, probe_vector_madvise, sample_pages, spread, will_need


class RecordingVector:
    """Stands in for ``process_madvise``: records each call's runs; ``gate`` (when given) holds the first call."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[list[int], list[int], int]] = []
        self.gate = gate

    def __call__(self, addresses: np.ndarray, lengths: np.ndarray, advice: int) -> bool:
        if self.gate is not None:
            assert self.gate.wait(10)
        self.calls.append((addresses.tolist(), lengths.tolist(), advice))
        return True


def test_the_thread_makes_each_request_in_one_call_in_order() -> None:
    vector = RecordingVector()
    advisor = Advisor(vector)  # type: ignore[arg-type]
    assert advisor.submit(np.array([0, 3 * PAGE]), np.array([PAGE, 2 * PAGE]), 3)
    assert advisor.submit(np.array([9 * PAGE]), np.array([PAGE]), 3)
    advisor.drain()
    assert vector.calls == [([0, 3 * PAGE], [PAGE, 2 * PAGE], 3), ([9 * PAGE], [PAGE], 3)]
    advisor.stop()
    assert not advisor.thread.is_alive()


def test_a_full_backlog_drops_the_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_advisor, "BACKLOG", 2)
    gate = threading.Event()
    vector = RecordingVector(gate)
    advisor = Advisor(vector)  # type: ignore[arg-type]
    taken = [advisor.submit(np.array([k * PAGE]), np.array([PAGE]), 3) for k in range(4)]
    assert taken[:2] == [True, True] and taken[-1] is False  # the thread holds one, the backlog two: a fourth waits
    gate.set()
    advisor.drain()
    assert [call[0] for call in vector.calls] == [[k * PAGE] for k, ok in enumerate(taken) if ok]
    advisor.stop()


def test_will_need_later_hands_the_merged_runs_to_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[tuple[list[int], list[int]]] = []
    hand = lambda a, n, advice: handed.append((a.tolist(), n.tolist())) or True  # noqa: E731
    monkeypatch.setattr(_advice, "advise_later", hand)
    monkeypatch.setattr(_advice, "_libc_madvise", lambda: lambda *call: pytest.fail("advised in this thread"))
    part = WordRanges(mmap.mmap(-1, 20 * PAGE), 4 * PAGE, np.array([0, PAGE // 4, 5 * PAGE // 4]), np.array([1, 1, 2]))
    assert will_need([part], later=True) == 3
    assert handed == [([4 * PAGE, 9 * PAGE], [2 * PAGE, PAGE])]  # pages 4-5 (two ranges merged) and 9


def test_will_need_later_advises_in_this_thread_where_there_is_no_advisor(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(_advice, "advise_later", lambda *args: None)  # no process_madvise here
    monkeypatch.setattr(_advice, "_libc_madvise", lambda: lambda *call: calls.append(call) or 0)
    part = WordRanges(mmap.mmap(-1, 20 * PAGE), 4 * PAGE, np.array([0, 5 * PAGE // 4]), np.array([1, 2]))
    assert will_need([part], later=True) == 2
    assert [call[:2] for call in calls] == [(4 * PAGE, PAGE), (9 * PAGE, PAGE)]


def test_a_dropped_request_counts_no_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_advice, "advise_later", lambda *args: False)
    part = WordRanges(mmap.mmap(-1, 4 * PAGE), 0, np.array([0]), np.array([1]))
    assert will_need([part], later=True) == 0


def test_process_madvise_advises_a_real_map(tmp_path: Path) -> None:
    vector = probe_vector_madvise()
    if vector is None:
        pytest.skip("process_madvise is not available here (kernel before 5.10, or CAP_SYS_NICE needed)")
    path = tmp_path / "pages.bin"
    path.write_bytes(bytes(8 * PAGE))
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ) as mapped:
        view = np.frombuffer(mapped, dtype=np.uint8)
        address = view.__array_interface__["data"][0]
        assert vector(np.array([address, address + 4 * PAGE]), np.array([PAGE, 2 * PAGE]), mmap.MADV_WILLNEED)
        assert not vector(np.array([PAGE]), np.array([PAGE]), mmap.MADV_WILLNEED)  # nothing mapped there: refused
        del view
    os.close(vector.pidfd)


def test_a_forked_child_starts_its_own_thread() -> None:
    parent = _advisor.advisor()
    if parent is None:
        pytest.skip("process_madvise is not available here")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new advisor, for this process, with a thread that runs
        try:
            child = _advisor.advisor()
            ok = child is not None and child is not parent and child.vector.pid == os.getpid()
            ok = ok and child.submit(np.array([PAGE]), np.array([PAGE]), mmap.MADV_WILLNEED)
            child.drain()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    assert _advisor.advisor() is parent and parent.vector.pid == os.getpid()


# ---------------------------------------------------------------- the residency sample


def test_spread_picks_evenly_with_both_ends() -> None:
    assert spread(10, 4).tolist() == [0, 3, 6, 9]
    assert spread(3, 5).tolist() == [0, 1, 2]
    assert spread(100, 1).tolist() == [0]
    assert spread(0, 4).tolist() == []


def test_sample_pages_are_the_first_pages_of_spread_non_empty_ranges() -> None:
    part = WordRanges(mmap.mmap(-1, PAGE), 0, np.array([0, 2048, 5000, 9000, 1024]), np.array([3, 0, 1, 2, 4]))
    assert sample_pages(part, 16).tolist() == [0, 4, 8, 1]  # the empty range at word 2048 holds no page
    assert sample_pages(part, 2).tolist() == [0, 1]
