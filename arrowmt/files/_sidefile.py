"""arrowmt's own side files (batch plans, LM block tables, views): one header, per-chunk checksums, one protocol.

The three kinds (:data:`PLAN_FORMAT`, :data:`BLOCKS_FORMAT`, :data:`VIEW_FORMAT`) are
declared here, so that ``verify`` knows them all (a fourth, the draws of sampled segmentations, is declared with
them in :mod:`arrowmt.segments`); their modules
(``arrowmt.plans._plan_cache``, ``arrowmt.blocks._block_plan``,
``arrowmt.views._view``) say what their fields and sections mean. Every side file
is laid out the same way (little-endian)::

    header (128 bytes): 16-byte magic, u32 version, the kind's fields, u32 CRC-32, zero padding
    chunk table:        body bytes, chunk bytes, one CRC-32 per chunk of the body (arrowmt.files._chunks)
    body:               the kind's sections, laid out as its module says

A kind declared ``aligned`` (row order files) pads its chunk table with zeros so that the
body starts at a multiple of 4 KiB: each chunk is then one page of the file, and a chunk
check reads one page, not two. The header's CRC-32 (zlib) covers the header's fields (magic
and version included) and the chunk table (its padding included); each chunk's CRC-32
covers one chunk (:data:`CHUNK_BYTES`, a 4 KiB page) of the body. So any change to a
value that decides what the file says (an index, a boundary, a row number, a count) is
refused: in the header or chunk table when the file is opened, in the body when a read
first touches its chunk. Opening reads only the header and the
chunk table, whatever the size of the body: a rank that uses a slice of a 50 MB plan
reads and checks the chunks of that slice only. The checksums catch accidents (bit rot,
a stray write, an editor), not forgeries: whoever can write the file can also rewrite
them. The zero padding after the header's CRC is not covered.

Reading (:func:`open_side_file`): a path that is not a regular file (a FIFO, a
folder, a device) is refused from ``stat`` before it is opened, so nothing blocks;
then the header's length, magic and version, the chunk table's prefix, the body size
the kind's header fields imply, the file size, the kind's own checks, and the header's
CRC-32, in that order; the file is mapped read-only (random-access advice), so every
process shares its pages. The body is read through :class:`~arrowmt.files._chunks.CheckedArray` (or
:meth:`SideFile.body`), which checks each chunk a read touches on its first use
(:class:`~arrowmt.files._chunks.ChunkChecks`). A chunk found corrupt raises
FormatError naming the file, the chunk and its bytes; a cache file (plans, block tables)
opened with ``discard_corrupt`` is then removed (under its build lock, and only if it is
still the file that was opened), so the next run rebuilds it instead of finding the same
chunk again hours later; a view is never removed (the message says how to rebuild it).
A format may keep older versions readable (``legacy``): their one CRC-32 over the whole
file is checked when it is opened, as before the chunk table existed.

Writing (:func:`write_side_file`): a temporary file beside the target, renamed over it
(:func:`atomic_path`). Building once (:func:`load_or_build`): the first process to take
an exclusive ``fcntl.flock`` on ``<name>.lock`` builds the file; every other one waits
on the lock, reads the file again and finds it valid.
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
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from arrowmt._errors import ArrowMTError, FormatError
from arrowmt._heap import release_free_heap
from arrowmt.files._atomic import atomic_output
from arrowmt.files._chunks import (
    CHUNK_BYTES,
    TABLE_PREFIX,
    CheckedArray,
    ChunkChecks,
    chunk_count,
    chunk_crcs,
    pack_table,
    parse_table_prefix,
    table_bytes,
)
from arrowmt.files._kinds import not_regular_error
from arrowmt.files._locks import let_go
from arrowmt.io import advise

logger = logging.getLogger(__name__)

HEADER_BYTES = 128
MAGIC_BYTES = 16
_PREFIX = "<16sI"  # magic, version
_CRC = struct.Struct("<I")

Section = bytes | memoryview | np.ndarray
BodySize = Callable[[Path, tuple], int]
"""``body_size(path, fields)``: the body bytes a kind's header fields imply (FormatError naming ``path`` if none)."""
T = TypeVar("T")


@dataclass(frozen=True)
class SideFormat:
    """One kind of side file: its name in messages, magic, version, header fields and what to do with old versions.

    ``fields`` is the ``struct`` format (no byte-order prefix) of the kind's header
    fields after magic and version; ``stale`` ends the message for a file of another
    version (e.g. "rebuild it with `arrowmt filter`"), and for a corrupt file of a kind
    that is not a ``cache``. ``legacy``: older versions still read (no chunk table: one
    CRC-32 over the header fields and the whole body, checked when the file is opened).
    A ``cache`` is a file arrowmt rebuilds when it is invalid (plans, block tables).
    """

    kind: str
    magic: bytes
    version: int
    fields: str
    stale: str
    legacy: tuple[int, ...] = ()
    cache: bool = True
    aligned: bool = False  # the chunk table is padded so the body (each chunk of it) starts at a multiple of 4 KiB

    def table_len(self, body_bytes: int, chunk_bytes: int) -> int:
        """Bytes of the chunk table of this kind's current version, padding included (see ``aligned``)."""
        length = table_bytes(body_bytes, chunk_bytes)
        return -(-(HEADER_BYTES + length) // CHUNK_BYTES) * CHUNK_BYTES - HEADER_BYTES if self.aligned else length

    def __post_init__(self) -> None:
        if len(self.magic) != MAGIC_BYTES or self.layout.size + _CRC.size > HEADER_BYTES:
            raise ValueError(f"{self.kind}: expected a {MAGIC_BYTES}-byte magic and fields within {HEADER_BYTES} bytes")

    @property
    def layout(self) -> struct.Struct:
        """The packed header fields: magic, version, then the kind's fields."""
        return struct.Struct(_PREFIX + self.fields)

    def pack(self, values: Sequence[object]) -> bytes:
        """The header fields (magic, version, ``values``) as stored: what the header's checksum starts with."""
        return self.layout.pack(self.magic, self.version, *values)

    def unpack(self, path: Path, raw: bytes) -> tuple[int, tuple]:
        """(version, the kind's fields) from ``raw`` (the first bytes of ``path``), after checking length, magic and
        version (this one or a legacy one)."""
        if len(raw) < HEADER_BYTES:
            raise FormatError(
                f"{path}: {self.kind} header: expected {HEADER_BYTES} bytes, found {len(raw)} (truncated?)"
            )
        values = self.layout.unpack_from(raw)
        magic, version = values[:2]
        if magic != self.magic or (version != self.version and version not in self.legacy):
            hint = f"; {self.stale}" if magic == self.magic else ""
            raise FormatError(
                f"{path}: {self.kind} magic/version: expected {self.magic!r} v{self.version}, "
                f"found {magic!r} v{version}{hint}"
            )
        return version, values[2:]


PLAN_FORMAT = SideFormat("plan", b"ARROWMT-PLAN\x00\x00\x00\x00", 3, "I32sQQQQ", "plans of other versions are rebuilt")
BLOCKS_FORMAT = SideFormat(
    "block table", b"ARROWMT-BLOCKS\x00\x00", 3, "I32sQQQ", "block tables of other versions are rebuilt"
)
COPY_BLOCKS_FORMAT = SideFormat(  # the same file as a block table, but the copy's own: never removed, never rebuilt
    "block table", BLOCKS_FORMAT.magic, BLOCKS_FORMAT.version, BLOCKS_FORMAT.fields,
    "make the copy again (`arrowmt order --tokens-per-sample`)", cache=False,
)  # fmt: skip


def check_blocks_header(path: Path, values: tuple, expected: dict[str, object], advice: str) -> None:
    """FormatError naming ``path`` unless a block table's header fields ``values`` hold ``expected`` (some of
    ``key``, ``rows``, ``tokens``, in that order), ``advice`` ending the message."""
    _, digest, rows, tokens, _ = values
    header = {"key": digest.hex(), "rows": rows, "tokens": tokens}
    found, wanted = tuple(header[name] for name in expected), tuple(expected.values())
    if found != wanted:
        raise FormatError(f"{path}: block table ({', '.join(expected)}): expected {wanted}, found {found} ({advice})")


VIEW_FORMAT = SideFormat(
    "view", b"ARROWMT-VIEW\x00\x00\x00\x00", 3, "I32s32sQQQ", "rebuild it with `arrowmt filter`", (2,), cache=False
)


def checksum(packed_fields: bytes, sections: Sequence[Section]) -> int:
    """CRC-32 of the packed header fields followed by ``sections`` (the chunk table; a legacy file's body)."""
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
    chunk_bytes: int = CHUNK_BYTES,
) -> Path:
    """Write header, chunk table and ``sections`` (the body) atomically at ``path`` (replaced only with
    ``overwrite``)."""
    parts = [_bytes_of(section) for section in sections]
    body = sum(memoryview(part).nbytes for part in parts)
    table = pack_table(chunk_crcs(parts, chunk_bytes), body, chunk_bytes).ljust(fmt.table_len(body, chunk_bytes), b"\0")
    with atomic_output(path, overwrite=overwrite) as handle:
        handle.write(header_bytes(fmt, values, checksum(fmt.pack(values), [table])))
        handle.write(table)
        for part in parts:
            handle.write(part)
    return Path(path)


# ---------------------------------------------------------------- reading


@dataclass
class SideFile:
    """A side file opened by :func:`open_side_file`: its kind's header fields and a read-only map of it.

    The body starts at byte ``body_offset`` of the map; ``chunks`` knows which of its
    chunks were checked. ``table`` is the chunk table as stored; a ``legacy`` file has
    none (its header's CRC-32 covers the whole body instead).
    """

    path: Path
    kind: str
    legacy: bool
    values: tuple
    stat: os.stat_result
    map: mmap.mmap
    packed_fields: bytes
    crc: int
    table: bytes
    body_offset: int
    chunks: ChunkChecks
    contents_checked: bool = False
    whole_tried: bool = False  # trusted_whole decided

    def array(self, dtype: str | np.dtype, count: int, offset: int) -> CheckedArray:
        """``count`` items of ``dtype`` at body byte ``offset``, read through the chunk checks."""
        raw = np.frombuffer(self.map, dtype=dtype, count=count, offset=self.body_offset + offset)
        return CheckedArray(raw, offset, self.chunks)

    def body(self, start: int, stop: int) -> bytes:
        """Body bytes ``start..stop`` (a copy), once their chunks are checked."""
        self.chunks.ensure_range(start, stop)
        return self.map[self.body_offset + start : self.body_offset + stop]

    def check_all(self) -> None:
        """Check every chunk of the body not checked yet (FormatError naming the first corrupt one)."""
        self.chunks.ensure_all()

    def check_whole(self, contents: Callable[[], None]) -> None:
        """Check every chunk, then the kind's checks of its whole contents (``contents()``), once per open file."""
        if not self.contents_checked:
            self.check_all()
            contents()
            self.contents_checked = True

    def trusted_whole(self, contents: Callable[[], None], always_up_to: int = 0) -> bool:
        """Whether the whole body is checked, ``contents()`` included, so that reads need no checks of their own.

        Decided at the first call: a large body found in the page cache is checked whole then (every chunk in one
        pass, :meth:`~arrowmt.files._chunks.ChunkChecks.sweep_if_resident`, then its contents), and so is a body
        of at most ``always_up_to`` bytes wherever it is (a derived file every batch reads from: reading it whole
        once costs less than checking each read); a body read cold, or one with a chunk or a value found wrong, is
        left to each read's own checks, which name what is wrong where it is read (the sound parts stay
        readable)."""
        if not self.whole_tried:
            self.whole_tried = True
            if len(self.map) - self.body_offset <= always_up_to:
                self.chunks.sweep()
            else:
                self.chunks.sweep_if_resident()  # at most once per open file, whichever read comes first
            if self.chunks.all_checked:
                with suppress(FormatError):
                    contents()
                    self.contents_checked = True
                release_free_heap()  # the whole pass's temporaries: not kept by every process that reads
        return self.contents_checked

    def check_header(self) -> None:
        """FormatError unless the header's CRC-32 matches its fields and the chunk table (legacy: the body)."""
        if self.legacy:
            with memoryview(self.map) as view, view[HEADER_BYTES:] as body:
                found, what = checksum(self.packed_fields, [body]), "contents changed on disk"
        else:
            found, what = checksum(self.packed_fields, [self.table]), "header or chunk table changed on disk"
        if found != self.crc:
            raise FormatError(
                f"{self.path}: {self.kind} checksum: expected CRC-32 {self.crc:08x} (header), "
                f"found {found:08x} ({what})"
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
    body_size: BodySize | None,
    check: Callable[[SideFile], None] | None = None,
    discard_corrupt: bool = False,
) -> SideFile:
    """Open and map the side file ``path`` of kind ``fmt``, reading and checking its header and chunk table only.

    ``body_size(path, fields)`` is the body size the kind's header fields imply (it raises
    FormatError naming ``path`` for fields it refuses; None: the chunk table's). ``check(side)``
    runs the kind's own checks of its header fields before the header's CRC-32 is compared
    (so their more precise messages come first). Every problem is a FormatError naming
    ``path``. The body's chunks are checked when first read; with ``discard_corrupt`` (a
    cache file) one found corrupt also removes the file, so that it is rebuilt.
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
        side = _map_checked(path, fd, fmt, body_size, discard_corrupt)
    finally:
        os.close(fd)
    if check is not None:
        check(side)
    side.check_header()
    return side


def _map_checked(path: Path, fd: int, fmt: SideFormat, body_size: BodySize | None, discard: bool) -> SideFile:
    where = f"{path}: {fmt.kind}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced since check_regular
            raise not_regular_error(f"{path} ({fmt.kind})", st.st_mode)
        _read_exactly(fd)
        raw = os.pread(fd, HEADER_BYTES + TABLE_PREFIX.size, 0)
        version, values = fmt.unpack(path, raw)
        legacy = version != fmt.version
        if legacy:  # no chunk table
            body = st.st_size - HEADER_BYTES if body_size is None else body_size(path, values)
            chunk_bytes, table_len = CHUNK_BYTES, 0
        else:
            body, chunk_bytes = parse_table_prefix(where, raw[HEADER_BYTES:])
            _check_body_size(where, body, None if body_size is None else body_size(path, values))
            table_len = fmt.table_len(body, chunk_bytes)
        expected = HEADER_BYTES + table_len + body
        if st.st_size != expected:
            raise FormatError(
                f"{where} size: expected {expected} bytes (from its header), found {st.st_size} (truncated or corrupt)"
            )
        table = os.pread(fd, table_len, HEADER_BYTES)
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: cannot read the {fmt.kind} file: {getattr(exc, 'strerror', None) or exc}") from exc
    if len(mapped) != expected or len(table) != table_len:
        mapped.close()
        raise FormatError(f"{where} file changed while opening ({expected} -> {len(mapped)} bytes)")
    advise(mapped, "random")  # a fault reads its page only; a chunk check asks for its whole chunk
    fields = fmt.layout.size
    (crc,) = _CRC.unpack_from(raw, fields)
    count = 0 if legacy else chunk_count(body, chunk_bytes)
    crcs = np.frombuffer(table, dtype="<u4", count=count, offset=TABLE_PREFIX.size if count else 0)
    advice = _discarding(path, st) if discard else (lambda: "" if fmt.cache else fmt.stale)
    body_offset = HEADER_BYTES + table_len
    chunks = ChunkChecks(where, mapped, body_offset, crcs, chunk_bytes, advice)
    return SideFile(path, fmt.kind, legacy, values, st, mapped, raw[:fields], crc, table, body_offset, chunks)


def _check_body_size(where: str, stored: int, implied: int | None) -> None:
    if implied is not None and stored != implied:
        raise FormatError(
            f"{where} chunk table: expected {implied} body bytes (from its header fields), found {stored} (corrupt)"
        )


def _read_exactly(fd: int) -> None:
    """Reads of ``fd`` read what they ask for (``POSIX_FADV_RANDOM``): the header and table, not the body after."""
    with suppress(OSError, AttributeError):  # a hint
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)


def _discarding(path: Path, opened: os.stat_result) -> Callable[[], str]:
    """The advice of a cache file found corrupt after opening: it removes the file first, if still the one opened.

    Under the file's build lock, so that no builder is replacing it meanwhile.
    """

    def advice() -> str:
        rebuilt = "a cache file, rebuilt the next time it is needed (start again, or resume from a checkpoint)"
        try:
            with exclusive_lock(lock_path(path)):
                now = os.stat(path)
                if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
                    return f"it has been replaced since it was opened: {rebuilt}"
                os.unlink(path)
        except FileNotFoundError:
            return f"it has been removed since it was opened: {rebuilt}"
        except (OSError, ArrowMTError) as exc:
            return f"delete it: {rebuilt} (could not remove it: {exc})"
        return f"removed it: {rebuilt}"

    return advice


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
        let_go(fd)


def lock_path(path: Path) -> Path:
    """The lock file guarding the build of ``path``: ``<name>.lock`` beside it."""
    return path.with_name(path.name + ".lock")


def load_or_build(
    path: Path,
    what: str,
    read: Callable[[], T],
    build: Callable[[], object],
    *,
    file: bool = True,
    unlocked_first: bool = True,
    expected: bool = False,
) -> tuple[T, bool]:
    """``read()`` the derived ``path`` of a cache; if it is missing or invalid (FormatError), build it once under its
    lock (``<name>.lock`` beside it) and read it again: (result, built). The one rule of every cache of derived data
    (batch plans, block tables, epoch copies, a remote corpus's whole files): it is checked before use and rebuilt
    once when damaged or missing, never a permanent failure, and never a loop (a second failure is raised).

    Concurrent callers (DDP ranks, several jobs) all get the same file: the first to take the lock ``build()``s it,
    the others read it after waiting. A rebuild of something that was there (or ``expected`` to be: a copy that went
    missing) is logged as a warning naming ``what``, ``path`` and why. ``file``: ``path`` is a file, and a
    non-regular one there is refused (FormatError), never built over (else a folder). ``unlocked_first``: try the
    read before taking the lock (the usual case: sound), else read only under it (a copy that others may remove
    under the same lock).
    """

    if file:
        check_regular(path, what)
    if unlocked_first:
        try:
            return read(), False
        except FormatError:
            pass
    with exclusive_lock(lock_path(path)):
        if file:
            check_regular(path, what)
        try:
            return read(), False
        except FormatError as exc:
            if expected or os.path.lexists(path):
                logger.warning("rebuilding %s %s: %s", what, path, exc)
        build()
        return read(), True
