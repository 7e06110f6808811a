"""Which paths name remote folders, and which local folders mirror one: the tests every reader makes, without
loading the remote client or the block cache."""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

from arrowmt._errors import InvalidParameterError

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")
FILE_URL = "file://"
STATE_DIR = ".arrowmt-remote"  # a cache folder's own files: the state, the block locks, the source
MIRROR_SOURCE = "source.json"  # in STATE_DIR: the remote folder a local folder mirrors


def is_url(path: object) -> bool:
    """True for ``scheme://...`` strings other than ``file://`` (those are local folders)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    return isinstance(text, str) and bool(URL.match(text)) and not text.lower().startswith(FILE_URL)


def is_mirror(folder: Path) -> bool:
    """True for a local folder that caches a remote corpus (its state folder records the source)."""
    return (folder / STATE_DIR / MIRROR_SOURCE).is_file()


def local_path(path: str | os.PathLike[str]) -> Path:
    """The local path ``path`` names: a path as it is, or the path of a ``file://`` URL."""
    text = os.fspath(path)
    if isinstance(text, str) and text.lower().startswith(FILE_URL):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(text).path))
    return Path(text)


def local_only_path(path: str | os.PathLike[str], name: str, expected: str, fix: str) -> Path:
    """``path`` as the local path it names (a ``file://`` URL as its path); InvalidParameterError naming ``name``
    for any other URL: ``expected`` says what ``name`` must be, ``fix`` what to do (``{url}`` stands for the URL, its
    credentials left out). Never ``Path(url)``: that reads ``s3://bucket/x`` as the local folder ``s3:/bucket/x``."""
    if is_url(path):
        url = without_credentials(os.fspath(path))
        raise InvalidParameterError(f"{name}: expected {expected}, got the URL {url}; {fix.format(url=url)}")
    return local_path(path)


DOWNLOAD_FIRST = "this reads local files only: download it first (e.g. aws s3 cp {url} LOCAL; --recursive for a folder)"
WRITE_LOCALLY = "arrowmt writes to local disk only: write there, then upload the folder (e.g. aws s3 sync)"


def local_output(path: str | os.PathLike[str], name: str = "out") -> Path:
    """The local path an output ``path`` names (:func:`local_only_path`): every file and folder arrowmt writes."""
    return local_only_path(path, name, "a local path to write", WRITE_LOCALLY)


def without_credentials(url: str) -> str:
    """``url`` without credentials written in it (``s3://KEY:SECRET@bucket/x`` -> ``s3://bucket/x``): what messages
    show, and what a cache folder records (other processes attaching it read the environment's credentials)."""
    return USERINFO.sub(r"\1", url)
