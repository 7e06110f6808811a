"""Digests of what arrowmt writes: a file's SHA-256 (read in large chunks) and the canonical JSON of a value (equal
values, equal bytes: what keys and recorded fingerprints are hashed from).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

HASH_CHUNK = 1 << 24
SHA256_HEX = re.compile(r"[0-9a-f]{64}")  # a hex SHA-256 as arrowmt records one (lowercase)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in large chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def canonical_json(value: object) -> bytes:
    """``value`` as the JSON arrowmt stores and hashes: sorted keys, no spaces, ASCII (equal values, equal bytes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("ascii")
