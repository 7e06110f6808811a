"""The fixed-size header of arrowmt's own binary files (batch plans, views): length, magic and version checked."""

from __future__ import annotations

import struct
from pathlib import Path

from arrowmt._errors import FormatError


def unpack_header(
    path: Path, raw: bytes, size: int, fields: struct.Struct, magic: bytes, version: int, kind: str
) -> tuple:
    """``fields`` unpacked from ``raw`` (the first ``size`` bytes of ``path``), whose first two are magic, version.

    FormatError naming ``path`` and ``kind`` ("plan", "view") when ``raw`` is short or the
    magic or version differ.
    """
    if len(raw) < size:
        raise FormatError(f"{path}: {kind} header: expected {size} bytes, found {len(raw)} (truncated?)")
    values = fields.unpack_from(raw)
    if values[:2] != (magic, version):
        raise FormatError(
            f"{path}: {kind} magic/version: expected {magic!r} v{version}, found {values[0]!r} v{values[1]}"
        )
    return values
