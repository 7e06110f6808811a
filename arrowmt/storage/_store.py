"""A node-local cache of a remote corpus's files, in blocks: fetched ahead, verified, evicted by next use.

Each remote file has a local file of the same size in the cache folder, sparse until its
blocks arrive; readers memory-map it like any local file (its pages are shared by every
process of the node). A block is fetched once per node: the fetching process holds an
``fcntl`` lock on the block's byte of a lock file (threads of one process meet in an
in-process table first); it checks the block's CRC-32 against the corpus's block index
before writing it, and marks it present only after that, so a fetch killed midway leaves
nothing used unverified. A block another process (or an earlier run) left present is checked
against its CRC-32 the first time this process reads that generation of it: a block damaged on
disk, or marked present without its bytes (state and data are not written in order), is dropped
and fetched again, with a warning. When the cache would pass ``limit`` bytes, the present blocks
whose next use in the plan is furthest away (unknown first) are freed (hole punched); the limit bounds the whole
folder: what it holds beside the blocks (block indexes, dictionaries, state, cached plans) leaves that much less
room for blocks;
blocks of the index's pinned ranges (headers, offsets) are never freed. Readers guard
each copy with the blocks' generations (:mod:`arrowmt.storage._state`).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import weakref
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from arrowmt._arrays import sorted_unique
from arrowmt._errors import StorageError
from arrowmt.storage._punch import punch_hole
from arrowmt.storage._ranges import block_runs, block_uses, covered_blocks
from arrowmt.storage._remote import RemoteFolder, request_buffer, write_exactly
from arrowmt.storage._state import NO_USE, CacheState
from arrowmt.storage._urls import STATE_DIR

logger = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_WORKERS = 16  # range requests in flight (a request takes tens of ms; the bytes are few)
AHEAD_WORKERS = 8  # batches read ahead at once, each one's requests in flight together
MAX_RUN_BYTES = 1 << 20  # the largest range request (a buffer of this size per request in flight)
PROTECTED_STEPS = 1  # blocks needed within this many steps of now are never freed
READ_RETRIES = 100  # copies redone after a concurrent eviction before giving up
VICTIM_SLICE = 1 << 15  # blocks of the cache looked at together when choosing what to free
UNCHECKED = np.iinfo(np.uint32).max  # no generation this process has checked (generations start at 1 when filled)
EVICT_SLACK = 256  # each eviction frees 1/256 of the cache beyond what is needed (freeing is a pass over it)


@dataclass(frozen=True)
class CachedFile:
    """One remote file of a corpus: its name, size, per-block CRC-32s and the blocks kept for good."""

    name: str
    size: int
    crcs: np.ndarray  # uint32, one per block
    pinned: np.ndarray  # block numbers within the file


@dataclass
class Admitted:
    """How many blocks of one fill are admitted against the cache's limit and not present yet."""

    left: int


@dataclass(frozen=True)
class Snapshot:
    """The blocks a read covers and their generations when they were all present."""

    blocks: np.ndarray
    generations: np.ndarray


class BlockStore:
    """The cache of the files of one remote corpus in ``folder`` (see the module)."""

    def __init__(
        self,
        remote: RemoteFolder,
        folder: Path,
        files: Sequence[CachedFile],
        block_size: int,
        limit: int | None,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.remote, self.folder, self.block_size, self.limit = remote, folder, block_size, limit
        self.files = list(files)
        counts = np.array([-(-f.size // block_size) for f in self.files], dtype=np.int64)
        self.base = np.concatenate([[0], np.cumsum(counts)])
        total = int(self.base[-1])
        self.state = CacheState(folder / STATE_DIR / "state", total)
        self.checked = np.full(total, UNCHECKED, dtype=np.uint32)  # per block, the generation this process checked
        self.pinned = np.zeros(total, dtype=bool)
        for k, f in enumerate(self.files):
            self.pinned[self.base[k] + f.pinned] = True
        self._locks = os.open(folder / STATE_DIR / "blocks.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._fds = [os.open(folder / f.name, os.O_RDWR | os.O_CLOEXEC) for f in self.files]
        self.workers = workers
        self.overhead = self._other_bytes()  # what the folder holds beside the blocks: counted against the limit
        self._start_threads()
        _LIVE.add(self)
        self.now = 0  # batches handed out by this process's samplers (the clock of planned uses)
        self.fetched_bytes = 0  # by this process
        self._warned = False
        self._damage_told = False
        self.ensure(np.flatnonzero(self.pinned))

    def __repr__(self) -> str:
        return f"BlockStore({self.remote.url!r} -> {str(self.folder)!r}, {self.used_bytes()} bytes cached)"

    def _start_threads(self) -> None:
        """This process's locks, fetch threads and in-flight tables (anew in a forked child: the parent's threads
        are not there, and a lock one of them held would stay held)."""
        self._mutex = threading.Lock()
        self._evicting = threading.Lock()
        self._planning = threading.Lock()
        self._inflight: dict[int, threading.Event] = {}
        self._reading: dict[int, np.ndarray] = {}  # per thread, the blocks of its last read
        self._fetchers = ThreadPoolExecutor(self.workers, thread_name_prefix="arrowmt-fetch")
        self._ahead = ThreadPoolExecutor(AHEAD_WORKERS, thread_name_prefix="arrowmt-ahead")
        self._evictor = ThreadPoolExecutor(1, thread_name_prefix="arrowmt-evict")
        self._reserved = 0  # blocks admitted and being fetched: counted against the limit until present

    def file(self, name: str) -> BlockFile:
        names = [f.name for f in self.files]
        return BlockFile(self, names.index(name))

    def used_bytes(self) -> int:
        return int(np.count_nonzero(self.state.present)) * self.block_size

    def capacity(self) -> int:
        """The blocks the limit leaves room for: the limit less what the folder holds beside the blocks (the
        corpus's block indexes, dictionaries and side files, the cache's state, plans cached there)."""
        assert self.limit is not None
        return max(self.limit - self.overhead, 0) // self.block_size

    def _other_bytes(self) -> int:
        """Bytes on disk of every file of the folder but the blocks of the cached split files."""
        cached = {self.folder / f.name for f in self.files}
        return sum(p.stat().st_blocks * 512 for p in self.folder.rglob("*") if p not in cached and p.is_file())

    # ------------------------------------------------------------ reading

    def ensure(self, blocks: np.ndarray) -> Snapshot:
        """Fetch what is missing of ``blocks`` (sorted unique) and wait for it: their generations, all present."""
        self._reading[threading.get_ident()] = blocks  # not freed by this process while it reads them
        for _ in range(READ_RETRIES):
            missing = blocks[self.state.present[blocks] == 0]
            if missing.size:
                self._fetch(missing, wait=True)
            generations = self.state.generation[blocks].copy()
            if np.all(self.state.present[blocks]) and self._sound(blocks, generations):
                return Snapshot(blocks, generations)
        raise StorageError(f"{self.remote.url}: blocks evicted faster than they are read; raise cache_limit")

    def _sound(self, blocks: np.ndarray, generations: np.ndarray) -> bool:
        """Whether ``blocks`` (present, at ``generations``) hold what the block index says: those this process has not
        checked at that generation are read and their CRC-32s compared; damaged ones are dropped (False: fetch)."""
        unchecked = (self.checked[blocks] != generations) | (generations == UNCHECKED)
        if not unchecked.any():
            return True
        todo, seen = blocks[unchecked], generations[unchecked]
        bad = self._damaged(todo)
        good = ~np.isin(todo, bad)
        self.checked[todo[good]] = seen[good]
        if bad.size:
            self._drop(bad, seen[~good])
        return not bad.size

    def _damaged(self, blocks: np.ndarray) -> np.ndarray:
        """Those of present ``blocks`` (sorted unique) whose bytes in the cache are not the block index's."""
        bad = []
        for k, first, count in self._file_runs(blocks, MAX_RUN_BYTES // self.block_size):
            start = first * self.block_size
            end = min((first + count) * self.block_size, self.files[k].size)
            data = os.pread(self._fds[k], end - start, start)
            bad += [b + int(self.base[k]) for b, _ in self._bad_blocks(k, first, memoryview(data))]
        return np.array(bad, dtype=np.int64)

    def _drop(self, blocks: np.ndarray, generations: np.ndarray) -> None:
        """Free damaged ``blocks`` still at ``generations`` (a block refilled or freed meanwhile was read mid-change,
        not damaged), saying so once."""
        still = blocks[(self.state.present[blocks] == 1) & (self.state.generation[blocks] == generations)]
        if still.size and self._evict(still) and not self._damage_told:
            self._damage_told = True
            logger.warning(
                "%s: %d cached block(s) differ from the block index (CRC-32; first: block %d): dropped and fetched "
                "again (the cache holds only copies)",
                self.folder,
                still.size,
                int(still[0]),
            )

    def check_cached(self, k: int) -> list[str]:
        """The cached blocks of file ``k`` whose bytes are not the block index's (each dropped, so that the next read
        fetches it again): problems, none when the cache is sound."""
        blocks = np.flatnonzero(self.state.present[self.base[k] : self.base[k + 1]]) + self.base[k]
        generations = self.state.generation[blocks].copy()
        bad = self._damaged(blocks)
        good = ~np.isin(blocks, bad)
        self.checked[blocks[good]] = generations[good]
        self._drop(bad, generations[~good])
        name = self.folder / self.files[k].name
        return [f"{name}: cached block {b - int(self.base[k])} differs from the block index (CRC-32): dropped from the "
                "cache, fetched again when read (the cache holds only copies)" for b in bad.tolist()]  # fmt: skip

    def unchanged(self, snapshot: Snapshot) -> bool:
        """Whether no block of ``snapshot`` was freed or refilled since it was taken."""
        blocks = snapshot.blocks
        return bool(
            np.all(self.state.present[blocks]) and np.array_equal(self.state.generation[blocks], snapshot.generations)
        )

    def resident(self, blocks: np.ndarray) -> bool:
        return bool(np.all(self.state.present[blocks]))

    def prefetch(self, blocks: np.ndarray, ahead: int | None = None, planned: bool = False) -> None:
        """Fetch the missing of ``blocks`` in the background (errors are left to the read that needs them);
        ``ahead``: in how many batches they are needed (None: not known); ``planned``: their uses are planned
        already (:meth:`plan_uses`), ``ahead`` the last of them: nothing is planned anew, and the fetch frees only
        blocks needed after that."""
        if ahead is not None and not planned:
            self.plan_use(blocks, ahead)
        missing = blocks[self.state.present[blocks] == 0]
        if missing.size:
            self._ahead.submit(self._fetch_quietly, missing, None if ahead is None else self.now + ahead)

    def plan_use(self, blocks: np.ndarray, ahead: int) -> None:
        """``blocks`` are needed ``ahead`` batches from now: kept in preference to blocks needed later or never."""
        with self._planning:
            now = self.now
            self.state.add_use(blocks, now + ahead, now)

    def plan_uses(self, blocks: np.ndarray, first: np.ndarray, second: np.ndarray) -> None:
        """Unique ``blocks`` are needed ``first`` and ``second`` batches from now (:func:`block_uses`)."""
        with self._planning:  # a pass is planned by a thread while batches plan theirs: no update lost between them
            now = self.now
            self.state.add_use(blocks, now + first, now)
            self.state.add_use(blocks, now + second, now)

    def tick(self) -> None:
        """A batch is handed out: the clock of this process's uses moves one step (passes, epochs and the samplers
        of several splits share it; a use planned ``ahead`` batches away is due ``ahead`` ticks later)."""
        self.now += 1

    def check_object(self, k: int, sha256: str) -> list[str]:
        """Read remote file ``k`` whole, in order: problems with its blocks' CRC-32s or its SHA-256 (none: sound)."""
        f, digest, problems = self.files[k], hashlib.sha256(), []
        with request_buffer(MAX_RUN_BYTES) as buffer:
            for start in range(0, f.size, MAX_RUN_BYTES):
                data = buffer[: min(MAX_RUN_BYTES, f.size - start)]
                self.remote.read_into(f.name, start, data)
                digest.update(data)
                problems += [f"{self.remote.url_of(f.name)}: block {b} differs from the block index (CRC-32)"
                             for b, _ in self._bad_blocks(k, start // self.block_size, data)]  # fmt: skip
                data.release()
        if digest.hexdigest() != sha256:
            problems.append(f"{self.remote.url_of(f.name)}: SHA-256 differs from the manifest (object changed)")
        return problems

    def _bad_blocks(self, k: int, first: int, data: memoryview) -> list[tuple[int, int]]:
        """(block, CRC-32) of the blocks of file ``k`` from ``first`` in ``data`` whose CRC-32 is not the index's."""
        crcs = [zlib.crc32(data[i : i + self.block_size]) for i in range(0, len(data), self.block_size)]
        expected = self.files[k].crcs[first : first + len(crcs)].tolist()
        return [(first + i, c) for i, (c, e) in enumerate(zip(crcs, expected, strict=True)) if c != e]

    # ------------------------------------------------------------ fetching

    def _fetch_quietly(self, blocks: np.ndarray, step: int | None) -> None:
        try:
            self._fetch(blocks, wait=False, step=step)
        except Exception as exc:  # read-ahead is a hint; the read that needs the block fetches it again
            logger.debug("read-ahead of %s failed: %s", self.remote.url, exc)

    def _fetch(self, blocks: np.ndarray, wait: bool, step: int | None = None) -> None:
        """Fetch ``blocks``: needed now (``wait``), or read ahead for the plan step ``step`` (None: unknown)."""
        claimed, waits = self._claim(blocks)
        try:
            mine, busy = self._lock(claimed[self.state.present[claimed] == 0])  # busy: another process fetches them
            try:
                fresh = mine[self.state.present[mine] == 0]  # another process may have filled some before we locked
                self._fill(fresh, required=wait, step=step)
            finally:
                self._unlock(mine)
        finally:
            self._release(claimed)
        if wait:
            for event in set(waits.values()):
                event.wait()
            for b in [*busy.tolist(), *waits]:
                self._fill_waiting(b)

    def _claim(self, blocks: np.ndarray) -> tuple[np.ndarray, dict[int, threading.Event]]:
        """Blocks no other thread of this process is fetching (now marked as ours), and events of the others."""
        claimed, waits, done = [], {}, threading.Event()  # one event for all the blocks claimed here
        with self._mutex:
            for b in blocks.tolist():
                if b in self._inflight:
                    waits[b] = self._inflight[b]
                else:
                    self._inflight[b] = done
                    claimed.append(b)
        return np.array(claimed, dtype=np.int64), waits

    def _release(self, claimed: np.ndarray) -> None:
        with self._mutex:
            events = {self._inflight.pop(b) for b in claimed.tolist()}
        for event in events:
            event.set()

    def _fill_waiting(self, b: int) -> None:
        """Wait for another process's fetch of block ``b``; fetch it if that left it missing (killed midway)."""
        if self.state.present[b]:
            return
        fcntl.lockf(self._locks, fcntl.LOCK_EX, 1, b)
        block = np.array([b], dtype=np.int64)
        try:
            if not self.state.present[b]:
                self._fill(block, required=True)
        finally:
            self._unlock(block)

    def _lock(self, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Take the node-wide lock of ``blocks`` (sorted unique) where no other process holds it, a run of
        consecutive blocks at once: (the blocks locked, the blocks another process holds)."""
        locked = []
        first, count = block_runs(blocks, max(1, blocks.size))
        for a, n in zip(first.tolist(), count.tolist(), strict=True):
            if self._try_lock(a, n):
                locked.append(np.arange(a, a + n, dtype=np.int64))
            else:  # another process holds some of them
                locked += [np.array([b], dtype=np.int64) for b in range(a, a + n) if self._try_lock(b, 1)]
        mine = np.concatenate(locked) if locked else np.zeros(0, dtype=np.int64)
        return mine, np.setdiff1d(blocks, mine, assume_unique=True)

    def _try_lock(self, first: int, count: int) -> bool:
        try:
            fcntl.lockf(self._locks, fcntl.LOCK_EX | fcntl.LOCK_NB, count, first)
        except OSError:
            return False
        return True

    def _unlock(self, blocks: np.ndarray) -> None:
        """Release the locks of ``blocks`` (sorted unique, all held by this process), a run at once."""
        first, count = block_runs(blocks, max(1, blocks.size))
        for a, n in zip(first.tolist(), count.tolist(), strict=True):
            fcntl.lockf(self._locks, fcntl.LOCK_UN, n, a)

    def _fill(self, blocks: np.ndarray, required: bool, step: int | None = None) -> None:
        """Fetch, verify and store ``blocks`` (locked by this process), merged into range requests.

        Blocks a read needs now (``required``) are fetched even past the limit; read-ahead
        fetches only the first of ``blocks`` that fit. Admitted blocks count against the limit
        (reserved) until they are present, so concurrent read-ahead never overfills the cache.
        """
        admitted = Admitted(self._admit(int(blocks.size), required, step))
        try:
            self._fetch_runs(blocks[: admitted.left], admitted)
        finally:
            with self._evicting:
                self._settle(admitted, admitted.left)

    def _settle(self, admitted: Admitted, count: int) -> None:
        """``count`` of ``admitted``'s blocks are present now (or will not be fetched): no longer reserved (the
        caller holds ``_evicting``)."""
        count = min(count, admitted.left)
        admitted.left -= count
        self._reserved -= count

    def _file_runs(self, blocks: np.ndarray, max_run: int) -> list[tuple[int, int, int]]:
        """(file, first block within it, block count) of the runs of sorted unique ``blocks``, within files."""
        k = np.searchsorted(self.base, blocks, side="right") - 1
        runs = []
        for f in sorted_unique(k).tolist():
            first, count = block_runs(blocks[k == f] - self.base[f], max_run)
            runs += [(f, a, n) for a, n in zip(first.tolist(), count.tolist(), strict=True)]
        return runs

    def _fetch_runs(self, blocks: np.ndarray, admitted: Admitted) -> None:
        if not blocks.size:
            return
        tasks = self._file_runs(blocks, MAX_RUN_BYTES // self.block_size)
        if len(tasks) == 1:
            self._fill_run(*tasks[0], admitted)
            return
        futures = [self._fetchers.submit(self._fill_run, *task, admitted) for task in tasks]
        wait(futures)  # every run done before a failure is raised: the caller then releases the blocks' locks
        for future in futures:
            future.result()

    def _fill_run(self, k: int, first: int, count: int, admitted: Admitted) -> None:
        f = self.files[k]
        start = first * self.block_size
        end = min((first + count) * self.block_size, f.size)
        with request_buffer(end - start) as data:
            self.remote.read_into(f.name, start, data)
            bad = self._bad_blocks(k, first, data)
            if bad:
                b, crc = bad[0]
                at = b * self.block_size
                raise StorageError(
                    f"{self.remote.url_of(f.name)}: block {b} (bytes {at}-{min(at + self.block_size, f.size)}) has "
                    f"CRC-32 {crc:08x}, the block index says {int(f.crcs[b]):08x} (object changed since conversion?)"
                )
            try:
                write_exactly(self._fds[k], data, start)  # every byte, before the blocks are marked present
            except OSError as exc:
                raise StorageError(
                    f"{self.folder / f.name}: cannot write to the cache: {exc.strerror or exc}; the cache holds only "
                    "copies: free space, delete it or point cache_dir elsewhere"
                ) from exc
        blocks = np.arange(first, first + count) + self.base[k]
        with self._evicting:  # present and no longer reserved at once: a block is never counted twice against the
            self.state.generation[blocks] += 1  # limit (concurrent read-ahead then found no room and was cut short)
            self.checked[blocks] = self.state.generation[blocks]  # checked above, before it was written
            self.state.present[blocks] = 1
            self._settle(admitted, count)
        with self._mutex:
            self.fetched_bytes += end - start

    # ------------------------------------------------------------ evicting

    def _admit(self, count: int, required: bool, step: int | None = None) -> int:
        """Free blocks, furthest next use first, until ``count`` more fit within the limit; how many to fetch
        (all ``count`` when ``required``), reserved until :meth:`_fill` releases them.

        Read-ahead for plan step ``step`` frees only blocks needed after it (Belady: a block needed sooner
        than the one fetched stays); with ``step`` unknown (None), only blocks no plan step needs.
        """
        with self._evicting:
            room = count if self.limit is None else self._room(count, self._kept_until(required, step))
            room = count if required else room
            self._reserved += room
            return room

    def _kept_until(self, required: bool, step: int | None) -> int:
        """The last plan step whose blocks a fetch may not free."""
        if required:
            return self.now + PROTECTED_STEPS
        return NO_USE - 1 if step is None else max(step, self.now + PROTECTED_STEPS)

    def _room(self, count: int, kept_until: int) -> int:
        capacity = self.capacity()
        excess = int(np.count_nonzero(self.state.present)) + self._reserved + count - capacity
        if excess > 0:  # on one thread: its arrays (a few MB) are then kept by one malloc arena, not one per fetcher
            self._evictor.submit(self._make_room, excess, capacity, kept_until).result()
        used = int(np.count_nonzero(self.state.present)) + self._reserved
        return min(count, max(0, capacity - used))

    def _make_room(self, excess: int, capacity: int, kept_until: int) -> None:
        """Free ``excess`` blocks and a little more, so that freeing (a pass over the cache) is rare."""
        self.overhead = self._other_bytes()  # plans or copies cached there since: the next admits see them
        target = excess + capacity // EVICT_SLACK
        freed = self._free(self._victims(kept_until, 2 * target), target)
        if freed < target:  # many of the furthest are being fetched or read: look at them all
            freed += self._free(self._victims(kept_until, None), target - freed)
        if freed < excess and not self._warned:
            self._warned = True
            message = (
                "%s: cache over its limit of %d bytes (%d of them its index, state and small files): the blocks "
                "needed now do not fit"
            )
            logger.warning(message, self.remote.url, self.limit, self.overhead)

    def _free(self, victims: np.ndarray, target: int) -> int:
        """Free ``victims`` in order until ``target`` are freed; how many were."""
        freed = at = 0
        while freed < target and at < victims.size:
            take = victims[at : at + target - freed]
            at += take.size
            freed += self._evict(np.sort(take))
        return freed

    def _victims(self, kept_until: int, wanted: int | None) -> np.ndarray:
        """Present blocks that may be freed, next needed furthest away first: the ``wanted`` furthest (None: all).

        The cache is looked at :data:`VICTIM_SLICE` blocks at a time, keeping each slice's ``wanted`` furthest, so
        the arrays of one look stay small (a 12.6M-pair corpus has 700k blocks)."""
        reading, now, blocks, keys = self._blocks_read(), self.now, [], []
        for first in range(0, self.pinned.shape[0], VICTIM_SLICE):
            part = slice(first, first + VICTIM_SLICE)
            present = first + np.flatnonzero((self.state.present[part] != 0) & ~self.pinned[part])
            key = self.state.keys(present, now)
            keep = (key > kept_until) & ~np.isin(present, reading)
            key, at = furthest(key[keep], wanted)
            blocks.append(present[keep][at])
            keys.append(key)
        key, at = furthest(np.concatenate(keys), wanted)
        return np.concatenate(blocks)[at][np.argsort(-key, kind="stable")]

    def _blocks_read(self) -> np.ndarray:
        reading = list(self._reading.values())
        return np.concatenate(reading) if reading else np.zeros(0, dtype=np.int64)

    def _evict(self, blocks: np.ndarray) -> int:
        """Free those of ``blocks`` (sorted unique) that are present and that no thread or process is fetching,
        a run of consecutive blocks at once; how many were freed."""
        with self._mutex:
            blocks = np.array([b for b in blocks.tolist() if b not in self._inflight], dtype=np.int64)
        locked, _ = self._lock(blocks)
        try:
            gone = locked[self.state.present[locked] == 1]
            self.state.present[gone] = 0
            self.state.generation[gone] += 1
            for k, first, count in self._file_runs(gone, max(1, gone.size)):
                start = first * self.block_size
                end = min((first + count) * self.block_size, self.files[k].size)
                punch_hole(self._fds[k], start, end - start, str(self.folder / self.files[k].name))
            return int(gone.size)
        finally:
            self._unlock(locked)


_LIVE: weakref.WeakSet[BlockStore] = weakref.WeakSet()  # this process's stores


def _restart_in_child() -> None:
    for store in list(_LIVE):
        store._start_threads()


os.register_at_fork(after_in_child=_restart_in_child)


def furthest(key: np.ndarray, wanted: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The ``wanted`` largest of ``key`` (all when None or fewer), and where they were: a partition, not a sort."""
    if wanted is None or wanted >= key.size:
        return key, np.arange(key.size)
    at = np.argpartition(-key, wanted)[:wanted]
    return key[at], at


@dataclass(frozen=True)
class BlockFile:
    """One file of a :class:`BlockStore`, addressed by byte ranges."""

    store: BlockStore
    index: int

    def blocks(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        return covered_blocks(starts, ends, self.store.block_size) + self.store.base[self.index]

    def ensure(self, starts: np.ndarray, ends: np.ndarray) -> Snapshot:
        return self.store.ensure(self.blocks(starts, ends))

    def unchanged(self, snapshot: Snapshot) -> bool:
        return self.store.unchanged(snapshot)

    def copied(self, starts: np.ndarray, ends: np.ndarray, copy: Callable[[], T]) -> T:
        """``copy()`` of byte ranges ``[starts, ends)``, fetched first; done again if a block was freed meanwhile."""
        for _ in range(READ_RETRIES):
            snapshot = self.ensure(starts, ends)
            result = copy()
            if self.unchanged(snapshot):
                return result
        raise StorageError(f"{self.store.remote.url}: blocks evicted faster than they are read; raise cache_limit")

    def prefetch(self, starts: np.ndarray, ends: np.ndarray, ahead: int | None = None, planned: bool = False) -> None:
        self.store.prefetch(self.blocks(starts, ends), ahead, planned)

    def plan_uses(self, starts: np.ndarray, ends: np.ndarray, aheads: np.ndarray) -> None:
        """Byte range ``[starts[i], ends[i])`` is needed ``aheads[i]`` batches from now (nothing is fetched)."""
        blocks, first, second = block_uses(starts, ends, aheads, self.store.block_size)
        self.store.plan_uses(blocks + self.store.base[self.index], first, second)

    def resident(self, starts: np.ndarray, ends: np.ndarray) -> bool:
        return self.store.resident(self.blocks(starts, ends))
