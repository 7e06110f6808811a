"""Crash-safe file output: write to a temporary file in the target folder, fsync, rename."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from arrowmt._errors import OutputExistsError, OutputWriteError

TEMP_PREFIX = ".arrowmt-tmp-"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], overwrite: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` that is renamed onto ``path`` if the block completes.

    On success the file is fsynced, renamed over ``path`` and the folder fsynced.
    On any exception, KeyboardInterrupt included, the temporary file is removed,
    so a crash never leaves a partial ``path``.
    """
    target = Path(path)
    if not overwrite and target.exists():
        raise OutputExistsError(f"{target}: output exists; pass overwrite=True (--overwrite) to replace it")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".part", dir=target.parent)
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


def remove_stale_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files left in ``folder`` by a killed writer; return what was removed."""
    removed = []
    for stale in Path(folder).glob(TEMP_PREFIX + "*"):
        stale.unlink(missing_ok=True)
        removed.append(stale)
    return removed


def prepare_output_dir(path: str | os.PathLike[str], overwrite: bool) -> Path:
    """Create the folder ``path`` for new output and return it.

    Temporary files a killed writer left there are removed first; a folder that
    still holds anything needs ``overwrite`` (``--overwrite`` on the command line).
    """
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputWriteError(f"{out}: expected an output folder, got an existing file")
    if out.is_dir():
        remove_stale_temps(out)
        if not overwrite and any(out.iterdir()):
            raise OutputExistsError(
                f"{out}: output folder exists and is not empty; pass overwrite=True (--overwrite) to replace it"
            )
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputWriteError(f"{out}: cannot create the output folder: {_reason(exc)}") from exc
    return out


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
