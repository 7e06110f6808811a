"""What a path that is not a regular file is, for the errors that name it."""

from __future__ import annotations

import stat

from arrowmt._errors import FormatError

FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular_error(what: str, mode: int) -> FormatError:
    """The error for ``what`` (a path, perhaps with its role) that is not a regular file."""
    return FormatError(f"{what}: expected a regular file, got {file_kind(mode)}")


def file_kind(mode: int) -> str:
    """'a folder', 'a FIFO', ... for a non-regular file's ``st_mode``."""
    return next((kind for test, kind in FILE_KINDS if test(mode)), "not a regular file")
