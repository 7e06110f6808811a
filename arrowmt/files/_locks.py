"""Locks between arrowmt processes writing and reading one output folder (``fcntl.flock``).

Two locks, both released by the kernel when their process ends, SIGKILL included:

* :class:`OutputLock`, held by a writer from the moment it checks the output folder
  until it has published (or given up): a second writer of the same folder fails at
  once, naming the first, and changes nothing. It is the file ``.<name>.arrowmt-lock``
  beside the folder (``.arrowmt-lock`` inside it when the parent cannot be written),
  which exists only while a writer runs (a SIGKILLed writer's file is reused).
* :func:`publishing` / :func:`reading`: a publish holds an exclusive lock on the folder
  itself while it renames files into it; an opener holds a shared one while it reads
  the manifest, maps the split files and checks their dictionaries, so it sees the
  folder either before or after a publish, never half-way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from arrowmt._errors import OutputWriteError

LOCK_SUFFIX = ".arrowmt-lock"
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
_HOLDER_BYTES = 32


@dataclass
class OutputLock:
    """An exclusive lock on writing the output folder ``target`` (see the module notes)."""

    target: Path
    path: Path
    fd: int
    owner: int

    @classmethod
    def acquire(cls, target: Path) -> OutputLock:
        """Take the lock, or raise OutputWriteError naming the process that holds it."""
        path = lock_path(target)
        while True:
            fd = _open_lock_file(target, path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise OutputWriteError(
                    f"{target}: another arrowmt process{holder} is writing this output folder; "
                    "nothing was changed (wait for it to finish, or write to another folder)"
                ) from None
            if _same_file(fd, path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode()[:_HOLDER_BYTES], 0)
                return cls(target, path, fd, os.getpid())
            os.close(fd)  # the previous holder removed the file while this process waited: lock the new one

    def release(self) -> None:
        """Remove the lock file and let go (idempotent; a forked child never releases its parent's lock)."""
        if self.fd < 0 or os.getpid() != self.owner:
            return
        if _same_file(self.fd, self.path):
            self.path.unlink(missing_ok=True)
        let_go(self.fd)
        self.fd = -1


def lock_path(target: Path) -> Path:
    """Where the output lock of ``target`` lives: beside it, or inside it when ``target`` has no parent."""
    absolute = Path(os.path.abspath(target))
    return absolute.parent / f".{absolute.name}{LOCK_SUFFIX}" if absolute.name else absolute / LOCK_SUFFIX


def _open_lock_file(target: Path, path: Path) -> int:
    """Open (create) the lock file; inside ``target`` when its parent refuses."""
    try:
        return os.open(path, _OPEN_FLAGS, 0o644)
    except OSError as exc:
        if not target.is_dir():
            raise OutputWriteError(f"{target}: cannot create the output lock {path}: {exc.strerror or exc}") from exc
    inside = target / LOCK_SUFFIX
    try:
        return os.open(inside, _OPEN_FLAGS, 0o644)
    except OSError as exc:
        raise OutputWriteError(f"{target}: cannot create the output lock {inside}: {exc.strerror or exc}") from exc


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino) and stat.S_ISREG(there.st_mode)


def _holder(fd: int) -> str:
    """`` (pid N)`` as the lock holder wrote it, or nothing when unreadable."""
    try:
        text = os.pread(fd, _HOLDER_BYTES, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


@contextlib.contextmanager
def publishing(folder: Path) -> Iterator[None]:
    """Hold the exclusive folder lock while a publish renames files into ``folder`` (which must exist)."""
    with _folder_lock(folder, fcntl.LOCK_EX):
        yield


@contextlib.contextmanager
def reading(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the shared folder lock while opening ``folder``: no publish runs meanwhile.

    Best effort: a folder that cannot be opened or locked (missing, not a folder, a
    filesystem without ``flock``) is read without the lock; the reader reports its errors.
    """
    with _folder_lock(Path(folder), fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def _folder_lock(folder: Path, operation: int) -> Iterator[None]:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, operation)
        yield
    finally:
        let_go(fd)


def let_go(fd: int) -> None:
    """Release the ``flock`` held through ``fd``, then close it. Explicitly: a process forked while the lock was held
    (a DataLoader worker started while a thread writes a cache file) keeps the open file, and with it the lock, for
    as long as it lives, unless the lock itself is released."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
