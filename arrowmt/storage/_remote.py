"""A corpus folder on a remote file system (``s3://bucket/prefix``, any ``pyarrow.fs`` URI), read by name.

S3 endpoint, region and credentials come from the usual environment variables
(``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``, ...) and profile
files, as ``pyarrow.fs.S3FileSystem`` reads them. Every failure is one StorageError
naming the URL of the object.
"""

from __future__ import annotations

import collections
import datetime
import errno
import mmap
import os
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar

import pyarrow as pa

from arrowmt._errors import StorageError
from arrowmt.storage._urls import without_credentials

if TYPE_CHECKING:
    import pyarrow.fs as pafs

T = TypeVar("T")
REQUEST_RETRIES = 3  # attempts per request before a fetch fails (the SDK's default retries for minutes)
REQUEST_TIMEOUT_S = 20.0
COPY_PART = 8 << 20  # bytes of a whole object copied by one range request
COPY_WORKERS = 8  # range requests of one copy in flight


class RemoteFolder:
    """The folder at ``url``: whole small files, sizes, and byte ranges of large ones (thread-safe)."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/")  # credentials written in it included: given to the client only
        self.url = without_credentials(self._url)  # what messages, cache folder names and records show
        self._fs, self.root = _filesystem(self._url)
        self._handles = threading.local()  # per thread, its open objects by name (a handle reads from its position)
        self._forked = False
        _LIVE.add(self)

    @property
    def fs(self) -> pafs.FileSystem:
        """This process's client: made anew on first use in a forked child (the parent's connections are not its
        own), with new handles."""
        if self._forked:
            self._fs, self.root = _filesystem(self._url)
            self._handles = threading.local()
            self._forked = False
        return self._fs

    def __repr__(self) -> str:
        return f"RemoteFolder({self.url!r})"

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def read(self, name: str, limit: int) -> bytes:
        """The whole object ``name``, a small one (held in memory): at most ``limit`` bytes are read, and a larger
        object is a StorageError naming it."""

        def whole() -> bytes:
            with self.fs.open_input_stream(f"{self.root}/{name}") as stream:
                return stream.read(limit + 1)

        with _named(self.url_of(name), "read"):
            raw = interruptible(whole)
        if len(raw) > limit:
            raise StorageError(f"{self.url_of(name)}: expected at most {limit} bytes, the object is larger")
        return raw

    def copy(self, name: str, out: BinaryIO, size: int) -> None:
        """Write the whole object ``name`` (``size`` bytes) to ``out``: parts of :data:`COPY_PART` bytes, read by
        :data:`COPY_WORKERS` range requests at a time, each written at its place (a write error is ``out``'s
        OSError; a read error, a StorageError naming the object)."""
        parts = ((start, min(COPY_PART, size - start)) for start in range(0, size, COPY_PART))
        with ThreadPoolExecutor(COPY_WORKERS, thread_name_prefix="arrowmt-copy") as pool:
            pending: collections.deque[Future[None]] = collections.deque()
            for part in parts:  # at most 2 x COPY_WORKERS parts queued, whatever size the object claims
                if len(pending) >= 2 * COPY_WORKERS:
                    pending.popleft().result()
                pending.append(pool.submit(self._copy_part, name, out.fileno(), *part))
            while pending:
                pending.popleft().result()
        out.seek(0, os.SEEK_END)

    def _copy_part(self, name: str, fd: int, start: int, length: int) -> None:
        with request_buffer(length) as buffer:
            self.read_into(name, start, buffer)
            write_exactly(fd, buffer, start)

    def sizes(self, names: Sequence[str]) -> dict[str, int]:
        """Size of each object in ``names`` (one listing request each); StorageError for a missing one."""
        import pyarrow.fs as pafs  # on first use: about 1 MiB a process that never reads a URL does not pay

        with _named(self.url, "list"):
            infos = interruptible(lambda: self.fs.get_file_info([f"{self.root}/{name}" for name in names]))
        for name, info in zip(names, infos, strict=True):
            if info.type != pafs.FileType.File:
                raise StorageError(f"{self.url_of(name)}: no such object (expected a file, found {info.type.name})")
        return {name: int(info.size) for name, info in zip(names, infos, strict=True)}

    def exists(self, name: str) -> bool:
        """Whether the object ``name`` exists; StorageError when the store cannot say (a failed request)."""
        import pyarrow.fs as pafs

        with _named(self.url, "list"):
            [info] = interruptible(lambda: self.fs.get_file_info([f"{self.root}/{name}"]))
        return info.type == pafs.FileType.File

    def read_into(self, name: str, start: int, out: memoryview) -> None:
        """Fill ``out`` with the bytes of object ``name`` from ``start``; StorageError when fewer come back."""
        handle = self._handle(name)

        def read() -> int:
            handle.seek(start)
            return handle.readinto(out)

        with _named(self.url_of(name), f"read bytes {start}-{start + len(out)}"):
            count = interruptible(read)
        if count != len(out):
            raise StorageError(
                f"{self.url_of(name)}: expected {len(out)} bytes at offset {start}, got {count} "
                "(object shorter than its manifest says: replaced?)"
            )

    def _handle(self, name: str) -> pa.NativeFile:
        """This thread's open handle of object ``name`` (opened once per thread)."""
        fs = self.fs  # first: a forked child's handles are made anew
        handles = self._handles.__dict__
        if name not in handles:
            with _named(self.url_of(name), "open"):
                handles[name] = interruptible(lambda: fs.open_input_file(f"{self.root}/{name}"))
        return handles[name]


_LIVE: weakref.WeakSet[RemoteFolder] = weakref.WeakSet()  # this process's remote folders


def _reconnect_in_child() -> None:
    for folder in list(_LIVE):
        folder._forked = True


os.register_at_fork(after_in_child=_reconnect_in_child)


class request_buffer:
    """A buffer of ``size`` bytes for one request, mapped anonymously: unmapped on exit, so its pages go back to the
    OS at once (a heap buffer of this size would stay in the fetching thread's malloc arena)."""

    def __init__(self, size: int) -> None:
        self._map = mmap.mmap(-1, max(1, size))
        self._view = memoryview(self._map)[:size]

    def __enter__(self) -> memoryview:
        return self._view

    def __exit__(self, *exc: object) -> None:
        try:
            self._view.release()
            self._map.close()
        except BufferError:  # a slice of it is still referenced (an error on the way): unmapped when that goes
            pass


def write_exactly(fd: int, data: memoryview | bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd``: ``os.pwrite`` writes fewer bytes when the file system fills up
    (it raises only when it can write none), and bytes a cache marks present must all be there; a short write is the
    OSError (ENOSPC) a full disk gives."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        wrote = os.pwrite(fd, view[done:], offset + done)
        if wrote <= 0:
            raise OSError(errno.ENOSPC, f"No space left on device (wrote {done} of {len(view)} bytes at {offset})")
        done += wrote


def interruptible(call: Callable[[], T]) -> T:
    """``call()``, a request that may block in pyarrow's C++ code for as long as its timeouts allow. In the main
    thread it runs in a daemon thread while the main thread waits: Python handles a signal only between the main
    thread's bytecodes, and this wait is interrupted by one, so Ctrl-C and SIGTERM end a command at once even while
    a request hangs (the abandoned request ends with the process)."""
    if threading.current_thread() is not threading.main_thread():  # a fetch thread: counted while it runs
        token = threading.Event()
        _WAITED.add(token)
        try:
            return call()
        finally:
            _WAITED.discard(token)
    outcome: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller as it is
            outcome.append((False, exc))
        finally:
            _WAITED.discard(done)
            done.set()

    _WAITED.add(done)

    threading.Thread(target=run, name="arrowmt-request", daemon=True).start()
    done.wait()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


_WAITED: set[threading.Event] = set()  # requests not finished yet, of every thread


def requests_in_flight() -> int:
    """Requests of :func:`interruptible` not finished, the main thread's and the fetch threads': after a signal,
    the ones the process abandoned (the store's client waits for them when the interpreter exits, and the fetch
    threads are joined then, so a command that stops then leaves with ``os._exit``)."""
    return len(_WAITED)


def _filesystem(url: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow.fs as pafs  # on first use (see RemoteFolder.sizes)

    with _named(without_credentials(url), "open"):
        scheme = url.split("://", 1)[0].lower()
        if scheme in ("gs", "gcs"):  # the client retries for 15 minutes by default
            fs = pafs.GcsFileSystem(retry_time_limit=datetime.timedelta(seconds=REQUEST_TIMEOUT_S))
            return fs, url.split("://", 1)[1].rstrip("/")
        if url.lower().startswith("s3://"):
            retry = pafs.AwsStandardS3RetryStrategy(max_attempts=REQUEST_RETRIES)
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
            parts = urllib.parse.urlsplit(url)
            keys = {}
            if parts.username is not None:  # s3://KEY:SECRET@bucket/prefix
                keys = {"access_key": urllib.parse.unquote(parts.username),
                        "secret_key": urllib.parse.unquote(parts.password or "")}  # fmt: skip
            fs = pafs.S3FileSystem(
                endpoint_override=endpoint,
                retry_strategy=retry,
                connect_timeout=REQUEST_TIMEOUT_S,
                request_timeout=REQUEST_TIMEOUT_S,
                **keys,
            )
            return fs, f"{parts.hostname or ''}{parts.path}".rstrip("/")
        return pafs.FileSystem.from_uri(url)


class _named:
    """Turn the file system's OSError/ArrowException into one StorageError naming ``url`` and what was done."""

    def __init__(self, url: str, action: str) -> None:
        self.url, self.action = url, action

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, StorageError):
            return
        if isinstance(exc, (OSError, pa.ArrowException, ValueError)):
            raise StorageError(f"{self.url}: cannot {self.action}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "NO_SUCH_KEY" in text or "Path does not exist" in text or isinstance(exc, FileNotFoundError):
        return f"no such object ({text})"
    if "ACCESS_DENIED" in text or "InvalidAccessKeyId" in text or "credentials" in text.lower():
        return f"access denied or no credentials; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile ({text})"
    return text
