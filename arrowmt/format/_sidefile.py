"""arrowmt's own side files (batch plans, LM block tables, views): one header, one checksum, one protocol.

The three kinds (:data:`PLAN_FORMAT`, :data:`BLOCKS_FORMAT`, :data:`VIEW_FORMAT`) are
declared here, so that ``verify`` (this layer) knows them all; their modules
(``arrowmt.plans._plan_cache``, ``arrowmt.plans._block_plan``,
``arrowmt.format._view``) say what their fields and sections mean. Every side file
is laid out the same way (little-endian)::

    header (128 bytes): 16-byte magic, u32 version, the kind's fields, u32 CRC-32, zero padding
    sections:           the kind's arrays, laid out as its module says

The CRC-32 (zlib) covers the header's fields (magic and version included) and every
byte after the header, so any change to a value that decides what the file says (an
index, a boundary, a row number, a count) is refused when the file is opened. It
catches accidents (bit rot, a stray write, an editor), not forgeries: whoever can write
the file can also rewrite the checksum. The zero padding after the CRC is not covered.

Reading (:func:`open_side_file`): a path that is not a regular file (a FIFO, a
folder, a device) is refused from ``stat`` before it is opened, so nothing blocks;
then the header's length, magic and version, the file size the header implies, the
kind's own checks, and the CRC-32, in that order; the finished file is mapped
read-only, so every process shares its pages. Writing (:func:`write_side_file`):
a temporary file beside the target, renamed over it (:func:`atomic_path`).
Building once (:func:`load_or_build`): the first process to take an exclusive
``fcntl.flock`` on ``<name>.lock`` builds the file; every other one waits on the
lock, reads the file again and finds it valid.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import stat
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from arrowmt._errors import ArrowMTError, FormatError
from arrowmt.format._atomic import atomic_output
from arrowmt.format._manifest import not_regular_error

logger = logging.getLogger(__name__)

HEADER_BYTES = 128
MAGIC_BYTES = 16
_PREFIX = "<16sI"  # magic, version
_CRC = struct.Struct("<I")

Section = bytes | memoryview | np.ndarray
T = TypeVar("T")


@dataclass(frozen=True)
class SideFormat:
    """One kind of side file: its name in messages, magic, version, header fields and what to do with old versions.

    ``fields`` is the ``struct`` format (no byte-order prefix) of the kind's header
    fields after magic and version; ``stale`` ends the message for a file of another
    version (e.g. "rebuild it with `arrowmt filter`").
    """

    kind: str
    magic: bytes
    version: int
    fields: str
    stale: str

    def __post_init__(self) -> None:
        if len(self.magic) != MAGIC_BYTES or self.layout.size + _CRC.size > HEADER_BYTES:
            raise ValueError(f"{self.kind}: expected a {MAGIC_BYTES}-byte magic and fields within {HEADER_BYTES} bytes")

    @property
    def layout(self) -> struct.Struct:
        """The packed header fields: magic, version, then the kind's fields."""
        return struct.Struct(_PREFIX + self.fields)

    def pack(self, values: Sequence[object]) -> bytes:
        """The header fields (magic, version, ``values``) as stored: what the checksum starts with."""
        return self.layout.pack(self.magic, self.version, *values)

    def unpack(self, path: Path, raw: bytes) -> tuple:
        """The kind's fields from ``raw`` (the first bytes of ``path``), after checking length, magic and version."""
        if len(raw) < HEADER_BYTES:
            raise FormatError(
                f"{path}: {self.kind} header: expected {HEADER_BYTES} bytes, found {len(raw)} (truncated?)"
            )
        values = self.layout.unpack_from(raw)
        magic, version = values[:2]
        if (magic, version) != (self.magic, self.version):
            hint = f"; {self.stale}" if magic == self.magic else ""
            raise FormatError(
                f"{path}: {self.kind} magic/version: expected {self.magic!r} v{self.version}, "
                f"found {magic!r} v{version}{hint}"
            )
        return values[2:]


PLAN_FORMAT = SideFormat("plan", b"ARROWMT-PLAN\x00\x00\x00\x00", 2, "I32sQQQQ", "plans of other versions are rebuilt")
BLOCKS_FORMAT = SideFormat(
    "block table", b"ARROWMT-BLOCKS\x00\x00", 2, "I32sQQQ", "block tables of other versions are rebuilt"
)
VIEW_FORMAT = SideFormat("view", b"ARROWMT-VIEW\x00\x00\x00\x00", 2, "I32s32sQQQ", "rebuild it with `arrowmt filter`")


def checksum(packed_fields: bytes, sections: Sequence[Section]) -> int:
    """CRC-32 of the packed header fields followed by ``sections`` (the bytes after the header)."""
    crc = zlib.crc32(packed_fields)
    for section in sections:
        crc = zlib.crc32(_bytes_of(section), crc)
    return crc


def _bytes_of(section: Section) -> bytes | memoryview:
    if isinstance(section, np.ndarray):
        return memoryview(np.ascontiguousarray(section)).cast("B")
    return section


def header_bytes(fmt: SideFormat, values: Sequence[object], crc: int) -> bytes:
    """The 128-byte header: fields, CRC-32, zero padding."""
    return (fmt.pack(values) + _CRC.pack(crc)).ljust(HEADER_BYTES, b"\x00")


def write_side_file(
    path: str | os.PathLike[str],
    fmt: SideFormat,
    values: Sequence[object],
    sections: Sequence[Section],
    overwrite: bool = True,
) -> Path:
    """Write header and ``sections`` atomically at ``path`` (replaced only with ``overwrite``)."""
    parts = [_bytes_of(section) for section in sections]
    crc = checksum(fmt.pack(values), parts)
    with atomic_output(path, overwrite=overwrite) as handle:
        handle.write(header_bytes(fmt, values, crc))
        for part in parts:
            handle.write(part)
    return Path(path)


# ---------------------------------------------------------------- reading


@dataclass
class SideFile:
    """A side file opened by :func:`open_side_file`: its kind's header fields and a read-only map of it."""

    path: Path
    values: tuple
    stat: os.stat_result
    map: mmap.mmap
    packed_fields: bytes
    crc: int

    def array(self, dtype: str | np.dtype, count: int, offset: int) -> np.ndarray:
        """``count`` items of ``dtype`` at byte ``offset`` after the header (a read-only view of the map)."""
        return np.frombuffer(self.map, dtype=dtype, count=count, offset=HEADER_BYTES + offset)

    def body(self, start: int, stop: int) -> bytes:
        """Bytes ``start..stop`` after the header (a copy)."""
        return self.map[HEADER_BYTES + start : HEADER_BYTES + stop]

    def check_crc(self, kind: str) -> None:
        """FormatError unless the stored CRC-32 matches the header fields and the body."""
        with memoryview(self.map) as view, view[HEADER_BYTES:] as body:
            found = checksum(self.packed_fields, [body])
        if found != self.crc:
            raise FormatError(
                f"{self.path}: {kind} checksum: expected CRC-32 {self.crc:08x} (header), found {found:08x} "
                "(contents changed on disk)"
            )


def check_regular(path: Path, what: str) -> None:
    """FormatError when ``path`` exists and is not a regular file (found with ``stat``: never opened, never blocks)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise FormatError(f"{path} ({what}): cannot inspect: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise not_regular_error(f"{path} ({what})", st.st_mode)


def open_side_file(
    path: str | os.PathLike[str],
    fmt: SideFormat,
    size: Callable[[Path, tuple], int] | None,
    check: Callable[[SideFile], None] | None = None,
) -> SideFile:
    """Open and map the side file ``path`` of kind ``fmt`` after checking everything but what only its reader knows.

    ``size(path, fields)`` is the file size the kind's header fields imply (it raises
    FormatError naming ``path`` for fields it refuses; None: only the CRC-32 checks the
    length). ``check(side)`` runs the kind's own checks before the CRC-32 is compared
    (so their more precise messages come first). Every problem is a FormatError naming
    ``path``.
    """
    path = Path(path)
    check_regular(path, fmt.kind)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise FormatError(f"{path}: no {fmt.kind} file") from exc
    except OSError as exc:
        raise FormatError(f"{path}: cannot open the {fmt.kind} file: {exc.strerror or exc}") from exc
    try:
        side = _map_checked(path, fd, fmt, size)
    finally:
        os.close(fd)
    if check is not None:
        check(side)
    side.check_crc(fmt.kind)
    return side


def _map_checked(path: Path, fd: int, fmt: SideFormat, size: Callable[[Path, tuple], int] | None) -> SideFile:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced since check_regular
            raise not_regular_error(f"{path} ({fmt.kind})", st.st_mode)
        raw = os.pread(fd, HEADER_BYTES, 0)
        values = fmt.unpack(path, raw)
        expected = st.st_size if size is None else size(path, values)
        if st.st_size != expected:
            raise FormatError(
                f"{path}: {fmt.kind} size: expected {expected} bytes (from its header), found {st.st_size} "
                "(truncated or corrupt)"
            )
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: cannot read the {fmt.kind} file: {getattr(exc, 'strerror', None) or exc}") from exc
    if len(mapped) != expected:
        mapped.close()
        raise FormatError(f"{path}: {fmt.kind} file changed while opening ({expected} -> {len(mapped)} bytes)")
    fields = fmt.layout.size
    (crc,) = _CRC.unpack_from(raw, fields)
    return SideFile(path, values, st, mapped, raw[:fields], crc)


def stored_version(path: Path, fmt: SideFormat) -> int | None:
    """The version stored in ``path`` if it starts with ``fmt``'s magic, else None; FormatError if unreadable."""
    check_regular(path, fmt.kind)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAGIC_BYTES + 4)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read the {fmt.kind} file: {exc.strerror or exc}") from exc
    if len(raw) < MAGIC_BYTES + 4 or raw[:MAGIC_BYTES] != fmt.magic:
        return None
    return int.from_bytes(raw[MAGIC_BYTES:], "little")


# ---------------------------------------------------------------- building once


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``lock_path`` (created if needed) for the block."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ArrowMTError(
            f"cache_dir: cannot create {lock_path} ({exc.strerror or exc}); pass a writable cache_dir"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def lock_path(path: Path) -> Path:
    """The lock file guarding the build of ``path``: ``<name>.lock`` beside it."""
    return path.with_name(path.name + ".lock")


def load_or_build(path: Path, what: str, read: Callable[[], T], build: Callable[[], object]) -> tuple[T, bool]:
    """``read()`` the side file ``path``; if it is missing or invalid, build it once under its lock: (result, built).

    Concurrent callers (DDP ranks, several jobs) all get the same file: the first to
    take the lock ``build()``s it (an invalid file is logged as a warning and
    replaced), the others read it after waiting. A non-regular file at ``path`` is
    refused (FormatError), never built over.
    """
    check_regular(path, what)
    try:
        return read(), False
    except FormatError:
        pass
    with exclusive_lock(lock_path(path)):
        check_regular(path, what)
        try:
            return read(), False
        except FormatError as exc:
            if os.path.lexists(path):
                logger.warning("rebuilding %s: %s", what, exc)
        build()
        return read(), True
