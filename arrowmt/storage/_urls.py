"""Which paths name remote folders: the one test every reader makes, without loading the remote client."""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")
FILE_URL = "file://"


def is_url(path: object) -> bool:
    """True for ``scheme://...`` strings other than ``file://`` (those are local folders)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    return isinstance(text, str) and bool(URL.match(text)) and not text.lower().startswith(FILE_URL)


def local_path(path: str | os.PathLike[str]) -> Path:
    """The local path ``path`` names: a path as it is, or the path of a ``file://`` URL."""
    text = os.fspath(path)
    if isinstance(text, str) and text.lower().startswith(FILE_URL):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(text).path))
    return Path(text)


def without_credentials(url: str) -> str:
    """``url`` without credentials written in it (``s3://KEY:SECRET@bucket/x`` -> ``s3://bucket/x``): what messages
    show, and what a cache folder records (other processes attaching it read the environment's credentials)."""
    return USERINFO.sub(r"\1", url)
