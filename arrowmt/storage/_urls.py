"""Which paths name remote folders: the one test every reader makes, without loading the remote client."""

from __future__ import annotations

import os
import re

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: object) -> bool:
    """True for ``scheme://...`` strings other than ``file://`` (those are local folders)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    return isinstance(text, str) and bool(URL.match(text)) and not text.lower().startswith("file://")
