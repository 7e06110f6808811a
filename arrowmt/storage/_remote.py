"""A corpus folder on a remote file system (``s3://bucket/prefix``, any ``pyarrow.fs`` URI), read by name.

S3 endpoint, region and credentials come from the usual environment variables
(``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``, ...) and profile
files, as ``pyarrow.fs.S3FileSystem`` reads them. Every failure is one StorageError
naming the URL of the object.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from arrowmt._errors import StorageError

URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
S3_RETRIES = 3  # attempts per request before a fetch fails (the SDK's default retries for minutes)
S3_TIMEOUT_S = 20.0


def is_url(path: object) -> bool:
    """True for ``scheme://...`` strings other than ``file://`` (those are local folders)."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    return isinstance(text, str) and bool(URL.match(text)) and not text.lower().startswith("file://")


class RemoteFolder:
    """The folder at ``url``: whole small files, sizes, and byte ranges of large ones (thread-safe)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = _filesystem(self.url)
        self._files: dict[str, pa.NativeFile] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteFolder({self.url!r})"

    def url_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def read(self, name: str) -> bytes:
        """The whole object ``name``."""
        with _named(self.url_of(name), "read"), self.fs.open_input_stream(f"{self.root}/{name}") as stream:
            return stream.read()

    def sizes(self, names: Sequence[str]) -> dict[str, int]:
        """Size of each object in ``names`` (one listing request each); StorageError for a missing one."""
        with _named(self.url, "list"):
            infos = self.fs.get_file_info([f"{self.root}/{name}" for name in names])
        for name, info in zip(names, infos, strict=True):
            if info.type != pafs.FileType.File:
                raise StorageError(f"{self.url_of(name)}: no such object (expected a file, found {info.type.name})")
        return {name: int(info.size) for name, info in zip(names, infos, strict=True)}

    def read_range(self, name: str, start: int, length: int) -> bytes:
        """``length`` bytes of object ``name`` from ``start``; StorageError when fewer come back."""
        handle = self._file(name)
        with _named(self.url_of(name), f"read bytes {start}-{start + length}"):
            data = handle.read_at(length, start)
        if len(data) != length:
            raise StorageError(
                f"{self.url_of(name)}: expected {length} bytes at offset {start}, got {len(data)} "
                "(object shorter than its manifest says: replaced?)"
            )
        return data

    def _file(self, name: str) -> pa.NativeFile:
        with self._lock:
            if name not in self._files:
                with _named(self.url_of(name), "open"):
                    self._files[name] = self.fs.open_input_file(f"{self.root}/{name}")
            return self._files[name]


def _filesystem(url: str) -> tuple[pafs.FileSystem, str]:
    with _named(url, "open"):
        if url.lower().startswith("s3://"):
            retry = pafs.AwsStandardS3RetryStrategy(max_attempts=S3_RETRIES)
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
            fs = pafs.S3FileSystem(
                endpoint_override=endpoint,
                retry_strategy=retry,
                connect_timeout=S3_TIMEOUT_S,
                request_timeout=S3_TIMEOUT_S,
            )
            return fs, url[len("s3://") :].rstrip("/")
        return pafs.FileSystem.from_uri(url)


class _named:
    """Turn the file system's OSError/ArrowException into one StorageError naming ``url`` and what was done."""

    def __init__(self, url: str, action: str) -> None:
        self.url, self.action = url, action

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: object) -> None:
        if exc is None or isinstance(exc, StorageError):
            return
        if isinstance(exc, (OSError, pa.ArrowException, ValueError)):
            raise StorageError(f"{self.url}: cannot {self.action}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "NO_SUCH_KEY" in text or "Path does not exist" in text or isinstance(exc, FileNotFoundError):
        return f"no such object ({text})"
    if "ACCESS_DENIED" in text or "InvalidAccessKeyId" in text or "credentials" in text.lower():
        return f"access denied or no credentials; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile ({text})"
    return text
