"""Crash-safe output.

One file: :func:`atomic_path` writes a temporary file beside the target, fsyncs it and
renames it over the target. A whole folder: :class:`StagedOutput` builds every new file
in a staging folder beside the target folder and publishes them with renames once all
are complete, so a failed or killed run never changes what the target folder holds.

Temporary files and staging folders carry their writer's process id, so only those of
dead processes are ever removed as stale. Writers of one target folder exclude each other
(:class:`OutputLock`, held from the emptiness check to the end of publishing), and the
renames of a publish hold an exclusive ``flock`` on the target folder that readers share
while they open it (:func:`reading`), so no reader ever sees half of a publish.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from arrowmt._errors import ArrowMTError, OutputExistsError, OutputWriteError
from arrowmt.files._locks import LOCK_SUFFIX, OutputLock, publishing
from arrowmt.storage import local_output

logger = logging.getLogger(__name__)

TEMP_PREFIX = ".arrowmt-tmp-"  # + "<pid>-" (temp_prefix) + "<random>.part", or "spill-<n>.arrow" (older: no pid)
STAGING_MARK = ".arrowmt-staging-"  # + "<pid>-<random>"; beside the target as ".<name>" + STAGING_MARK + ...
DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` that is renamed onto ``path`` if the block completes.

    On success the file is fsynced, renamed over ``path`` and the folder fsynced.
    On any exception, KeyboardInterrupt included, the temporary file is removed,
    so a crash never leaves a partial ``path``; what a SIGKILLed writer left in the
    folder is removed by the next write there (inside a staging folder, which is
    removed as a whole, nothing is looked for).
    """
    target = local_output(path)
    if not overwrite and target.exists():
        raise OutputExistsError(f"{target}: output exists; pass overwrite=True to replace it")
    if STAGING_MARK not in target.parent.name:
        with contextlib.suppress(OSError):
            remove_stale_temps(target.parent)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(), suffix=".part", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise OutputWriteError(f"{target}: cannot create output in {target.parent}: {_reason(exc)}") from exc
    tmp = Path(tmp_name)
    try:
        yield tmp
        _fsync_file(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        fsync_dir(target.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, ArrowMTError):  # already names its file (e.g. the remote object being copied)
            raise
        raise OutputWriteError(f"{target}: writing failed: {_reason(exc)}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], overwrite: bool = True) -> Iterator[BinaryIO]:
    """Like :func:`atomic_path`, yielding an open binary file instead of a path."""
    with atomic_path(path, overwrite) as tmp, open(tmp, "wb") as handle:
        yield handle


def _reason(exc: OSError) -> str:
    """The OS reason, with 'File exists' on mkdir explained as a path component that is a file."""
    if isinstance(exc, FileExistsError | NotADirectoryError):
        return f"{exc.filename or 'a path component'} exists and is not a folder"
    return exc.strerror or str(exc)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, replacing any existing file."""
    with atomic_output(path) as handle:
        handle.write(data)


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temp_prefix() -> str:
    """The start of this process's temporary file names: ``.arrowmt-tmp-<pid>-``."""
    return f"{TEMP_PREFIX}{os.getpid()}-"


def remove_stale_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files killed writers left in ``folder``; return what was removed.

    A temporary file whose process (the pid in its name) still runs is another writer's
    work in progress and is left alone; one without a pid (older versions) is stale.
    """
    removed = []
    for stale in sorted(Path(folder).glob(TEMP_PREFIX + "*")):
        if _pid_alive(stale.name[len(TEMP_PREFIX) :].partition("-")[0]) is not True:
            stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


def remove_unlisted(folder: Path, patterns: tuple[str, ...], keep: set[str]) -> list[Path]:
    """After a rewrite, delete what an earlier run left in ``folder``: entries matching ``patterns``
    whose names are not in ``keep`` (folders too). Returns what was removed.

    Called once the new output is complete, so a failed rewrite never loses the old output.
    """
    removed = []
    for pattern in patterns:
        for stale in sorted(folder.glob(pattern)):
            if stale.name in keep:
                continue
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
            else:
                stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


# ---------------------------------------------------------------- staged folders

EntryState = tuple[int, int, int, int, int]
"""An entry of the target folder as ``lstat`` sees it: (mode, device, inode, size, mtime_ns)."""


@dataclass
class StagedOutput:
    """New content for the folder ``target``, written into the staging folder ``path`` first.

    ``path`` is ``.<target name>.arrowmt-staging-<pid>-<random>`` beside ``target`` (inside
    ``target`` when that is another filesystem or its parent cannot be written).
    :meth:`publish` renames the finished files into ``target``; :meth:`abort` (also on
    leaving a ``with`` block without publishing) removes the staging folder and any
    parent folders this run created. ``target`` itself is not created before
    :meth:`publish`, and a killed run's staging folder is removed by the next run.

    From :meth:`begin` to the end of :meth:`publish` (or :meth:`abort`) the run holds the
    target's :class:`OutputLock`, so a second writer fails at once; :meth:`publish` also
    re-checks ``target`` against what :meth:`begin` saw (``seen``) and changes nothing
    if another program wrote there meanwhile.
    """

    target: Path
    path: Path
    created: tuple[Path, ...] = ()
    done: bool = False
    owner: int = field(default_factory=os.getpid)  # a forked worker never removes its parent's staging
    lock: OutputLock | None = None
    overwrite: bool = True
    seen: dict[str, EntryState] = field(default_factory=dict)

    @classmethod
    def begin(cls, target: str | os.PathLike[str], overwrite: bool) -> StagedOutput:
        """Lock ``target``, check it may be written, remove what killed runs left, and make a staging folder."""
        out = local_output(target)
        if os.path.lexists(out) and not out.is_dir():
            raise OutputWriteError(f"{out}: expected an output folder, got an existing file")
        created = _make_parents(out)
        lock = None
        try:
            lock = OutputLock.acquire(out)
            check_output_folder(out, overwrite)
            return cls(out, _make_staging(out), created, lock=lock, overwrite=overwrite, seen=_entries(out))
        except BaseException:
            if lock is not None:
                lock.release()
            _remove_empty(created)
            raise

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    def publish(self, names: Sequence[str], remove: Iterable[str] = (), remove_dirs: Iterable[str] = ()) -> None:
        """Move ``names`` (plain file names, in this order: put the manifest last) into ``target``.

        Then delete the files ``remove`` and the folders ``remove_dirs`` (plain names the
        caller owns) from ``target`` unless they were just published. SIGINT and SIGTERM
        wait until this is done, so an interrupt never stops it half-way.
        """
        remove, remove_dirs = set(remove), set(remove_dirs)
        self._check_publishable(names)
        self._check_unchanged({*names, *remove})
        with deferred_signals():
            if not os.path.lexists(self.target) and sorted(os.listdir(self.path)) == sorted(names):
                self._publish_folder(names)
            else:
                self._publish_files(names)
            fsync_dir(self.target)
            self.done = True
            _remove_names(self.target, remove - set(names), remove_dirs - set(names))
            self._release()

    def abort(self) -> None:
        """Remove the staging folder and the parent folders this run created, and unlock (idempotent)."""
        if self.done or os.getpid() != self.owner:
            return
        self.done = True
        shutil.rmtree(self.path, ignore_errors=True)
        self._release()
        _remove_empty(self.created)

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def _check_publishable(self, names: Sequence[str]) -> None:
        for name in names:
            staged, final = self.path / name, self.target / name
            if not staged.is_file():
                raise OutputWriteError(f"{final}: expected {staged} to be written before publishing, it is missing")
            if final.is_dir() and not final.is_symlink():
                raise OutputWriteError(f"{final}: cannot replace a folder with a file; nothing was changed")

    def _check_unchanged(self, names: set[str]) -> None:
        """Refuse to publish when another program changed ``target`` since :meth:`begin`.

        Without overwrite nothing may have appeared; with it, none of the entries this
        publish replaces or removes may have changed.
        """
        now = _entries(self.target)
        watched = set(now) | set(self.seen) if not self.overwrite else names
        changed = sorted(name for name in watched if now.get(name) != self.seen.get(name))
        if not changed:
            return
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        error = OutputWriteError if self.overwrite else OutputExistsError
        raise error(f"{self.target}: another program wrote {shown} there while this run worked; nothing was changed")

    def _publish_folder(self, names: Sequence[str]) -> None:
        """A new target: one rename of the whole staging folder (falls back to file renames on a race)."""
        try:
            os.chmod(self.path, 0o777 & ~_umask())
            os.rename(self.path, self.target)
        except OSError:
            self._publish_files(names)
            return
        self.path = self.target
        fsync_dir(self.target.parent)

    def _publish_files(self, names: Sequence[str]) -> None:
        try:
            self.target.mkdir(exist_ok=True)
            with publishing(self.target):
                for name in names:
                    os.replace(self.path / name, self.target / name)
        except OSError as exc:
            raise OutputWriteError(f"{self.target}: publishing the new output failed: {_reason(exc)}") from exc
        shutil.rmtree(self.path, ignore_errors=True)


def check_output_folder(out: Path, overwrite: bool) -> None:
    """Refuse a ``out`` that is not a folder, or a non-empty one without ``overwrite``.

    Staging folders and temporary files that killed arrowmt runs left are removed first
    (they never count as content, nor does the output lock).
    """
    if os.path.lexists(out) and not out.is_dir():
        raise OutputWriteError(f"{out}: expected an output folder, got an existing file")
    remove_stale_staging(out)
    if out.is_dir():
        remove_stale_temps(out)
        if not overwrite and _entries(out):
            raise OutputExistsError(f"{out}: output folder exists and is not empty; pass overwrite=True to replace it")


def _entries(folder: Path) -> dict[str, EntryState]:
    """What ``folder`` holds (name -> lstat state), arrowmt's own lock and staging folders left out; {} if missing."""
    try:
        with os.scandir(folder) as found:
            entries = {entry.name: entry.stat(follow_symlinks=False) for entry in found}
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except OSError as exc:
        raise OutputWriteError(f"{folder}: cannot list the output folder: {_reason(exc)}") from exc
    return {
        name: (st.st_mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        for name, st in entries.items()
        if name != LOCK_SUFFIX and not name.startswith(STAGING_MARK)
    }


def remove_stale_staging(out: Path) -> list[Path]:
    """Delete staging folders for ``out`` whose process is gone (a killed run); return what was removed."""
    candidates = []
    absolute = Path(os.path.abspath(out))
    if absolute.name:
        candidates += absolute.parent.glob(f".{glob.escape(absolute.name)}{STAGING_MARK}*")
    if out.is_dir():
        candidates += out.glob(f"{STAGING_MARK}*")
    removed = []
    for stale in sorted(candidates):
        pid = stale.name.rpartition(STAGING_MARK)[2].partition("-")[0]
        if stale.is_dir() and not stale.is_symlink() and _pid_alive(pid) is False:
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
    return removed


def _pid_alive(pid: str) -> bool | None:
    """Whether the process ``pid`` (digits from a file name) still runs; None when ``pid`` is not a number."""
    if not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _cannot_create(out: Path, exc: OSError) -> OutputWriteError:
    return OutputWriteError(f"{out}: cannot create the output folder: {_reason(exc)}")


def _make_parents(out: Path) -> tuple[Path, ...]:
    """Create the missing folders above ``out``; return them, outermost first."""
    parent = Path(os.path.abspath(out)).parent
    missing = []
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    try:
        Path(os.path.abspath(out)).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(tuple(reversed(missing)))
        raise _cannot_create(out, exc) from exc
    return tuple(reversed(missing))


def _make_staging(out: Path) -> Path:
    """A fresh staging folder on the filesystem of ``out``: beside it, else inside it."""
    absolute = Path(os.path.abspath(out))
    marker = f"{STAGING_MARK}{os.getpid()}-"
    inside = out.is_dir() and (not absolute.name or os.stat(out).st_dev != os.stat(absolute.parent).st_dev)
    try:
        if not inside:
            try:
                return Path(tempfile.mkdtemp(prefix=f".{absolute.name}{marker}", dir=absolute.parent))
            except OSError:
                if not out.is_dir():
                    raise
        return Path(tempfile.mkdtemp(prefix=marker, dir=out))
    except OSError as exc:
        raise _cannot_create(out, exc) from exc


def _remove_empty(folders: tuple[Path, ...]) -> None:
    """Remove ``folders`` (outermost first) innermost first, stopping at the first that is not empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return


def _remove_names(folder: Path, files: set[str], folders: set[str]) -> None:
    """Delete the files ``files`` and the folders ``folders`` from ``folder`` (links are removed, not followed)."""
    for name in sorted(files):
        path = folder / name
        if not (path.is_dir() and not path.is_symlink()):
            path.unlink(missing_ok=True)
    for name in sorted(folders):
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_symlink():
            path.unlink()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def deferred_signals(signals: Sequence[signal.Signals] = DEFERRED_SIGNALS) -> Iterator[None]:
    """Hold ``signals`` (SIGINT, SIGTERM) until the block ends, then act on them as before.

    A Ctrl-C during the block raises KeyboardInterrupt right after it; a SIGTERM with the
    default action then ends the process. When the block completed, that exception carries
    the note :data:`COMPLETED_NOTE` (the output was written in full before the signal was
    acted on). Only the main thread can set handlers: elsewhere the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {}
    for sig in signals:
        handler = signal.getsignal(sig)
        if handler is not None:
            previous[sig] = signal.signal(sig, lambda number, _frame: caught.append(number))
    completed = False
    try:
        yield
        completed = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            _deliver(caught[0], previous[caught[0]], completed)


COMPLETED_NOTE = "arrowmt: the signal came while publishing; the new output was written in full"


def _deliver(sig: int, handler: object, completed: bool) -> None:
    logger.debug("delivering signal %d held while publishing", sig)
    try:
        if callable(handler):
            handler(sig, None)
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), sig)
    except KeyboardInterrupt as exc:  # Ctrl-C, or the CLI's SIGTERM
        if completed:
            exc.add_note(COMPLETED_NOTE)
        raise
