"""A remote corpus (``s3://bucket/prefix``) as a local folder: its cache, which readers open like any folder.

:func:`mirror` fetches the manifest, dictionaries and block indexes of the corpus at a
URL into ``cache_dir`` (one folder per URL and manifest content, so a replaced corpus
gets a new one), checks each split object's size against the manifest, and lays out a
sparse local file per split object. Every process then attaches the folder's
:class:`~arrowmt.storage.BlockStore` on its own (:func:`attached_file`), found from the
folder alone, so pickled datasets reopen in DataLoader workers by path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._checks import check_integer
from arrowmt._errors import FormatError, InvalidParameterError, StorageError
from arrowmt.files import atomic_output, exclusive_lock, load_or_build, write_bytes_atomic
from arrowmt.format import MANIFEST_NAME, Manifest, read_json
from arrowmt.reading._block_index import index_name, read_block_index
from arrowmt.reading._spans import take_flat
from arrowmt.storage import MIRROR_SOURCE, STATE_DIR, is_mirror

if TYPE_CHECKING:  # loaded where a URL or a cache folder is read: a local reader never loads the block cache
    from arrowmt.storage import BlockFile, BlockStore, RemoteFolder

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "ARROWMT_CACHE_DIR"
CACHE_LIMIT_ENV = "ARROWMT_CACHE_LIMIT"
MAX_CACHE_LIMIT = 1 << 62  # bytes: beyond any disk, within int64 arithmetic
SIDE_SLACK = 256 << 20  # bytes a dictionary, row order or block index may take beyond the split files' size
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def default_cache_dir() -> Path:
    """``$ARROWMT_CACHE_DIR``, else ``$XDG_CACHE_HOME/arrowmt``, else ``~/.cache/arrowmt``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "arrowmt"


def check_cache_limit(value: object, name: str = "cache_limit") -> int | None:
    """``value`` as bytes: an int, or a string like ``"20G"``/``"512MiB"``; None (or unset) means no limit."""
    if value is None or value == "":
        env = os.environ.get(CACHE_LIMIT_ENV)
        return None if not env else check_cache_limit(env, CACHE_LIMIT_ENV)
    if isinstance(value, str):
        match = _SIZE.match(value)
        if not match:
            raise InvalidParameterError(f"{name}: expected a byte count like 20G or 512MiB, got {value!r}")
        value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])  # then bounded as any count
    return check_integer(name, value, 1, MAX_CACHE_LIMIT, high_name="2**62")


@dataclass(frozen=True)
class CacheOptions:
    """Where remote corpora are cached (``cache_dir``) and how many bytes one may keep (``cache_limit``)."""

    cache_dir: Path
    cache_limit: int | None

    @classmethod
    def of(cls, cache_dir: str | os.PathLike[str] | None, cache_limit: object) -> CacheOptions:
        return cls(Path(cache_dir) if cache_dir is not None else default_cache_dir(), check_cache_limit(cache_limit))


def mirror(url: str, options: CacheOptions) -> Path:
    """The local folder caching the corpus at ``url`` (made on first use; shared by every process of the node)."""
    from arrowmt.storage import RemoteFolder

    remote = RemoteFolder(url)
    raw = remote.read(MANIFEST_NAME, Manifest.MAX_BYTES)
    where = remote.url_of(MANIFEST_NAME)
    manifest = Manifest.from_bytes(raw, where)
    key = hashlib.sha256(remote.url.encode() + b"\x00" + raw).hexdigest()[:20]
    folder = options.cache_dir / f"{_slug(remote.url)}-{key}"
    try:
        options.cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cache_dir: cannot create {options.cache_dir}: {exc.strerror or exc}") from exc
    with exclusive_lock(folder.with_name(folder.name + ".lock")):
        if not (folder / MANIFEST_NAME).is_file():
            _lay_out(remote, folder, manifest, raw)
        else:
            _mend(remote, folder, manifest)
        _write_source(folder, remote.url, options.cache_limit)
    return folder


def _slug(url: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[-1])[-60:].strip("._-") or "corpus"


def _lay_out(remote: RemoteFolder, folder: Path, manifest: Manifest, raw: bytes) -> None:
    """Fetch the small files, size-check the split objects and create their sparse local files; manifest last."""
    entries = list(manifest.files.values())
    sizes = remote.sizes([entry.file for entry in entries])
    for entry in entries:
        if sizes[entry.file] != entry.size:
            raise StorageError(
                f"{remote.url_of(entry.file)}: {sizes[entry.file]} bytes, the manifest records {entry.size} "
                "(object replaced or truncated since conversion)"
            )
    (folder / STATE_DIR).mkdir(parents=True, exist_ok=True)
    for name in _small_files(manifest):
        _fetch_small(remote, folder, manifest, name)
    for entry in entries:
        with open(folder / entry.file, "ab") as handle:
            handle.truncate(entry.size)
    write_bytes_atomic(folder / MANIFEST_NAME, raw)


def _small_files(manifest: Manifest) -> list[str]:
    """The files a cache folder holds whole: dictionaries, side files, block indexes."""
    indexes = [index_name(entry.file) for entry in manifest.files.values()]
    return [*manifest.dictionaries.values(), *sorted(manifest.side_file_names()), *indexes]


def _mend(remote: RemoteFolder, folder: Path, manifest: Manifest) -> None:
    """Fetch again, once, the whole files of a cache folder found missing, or (block indexes) damaged, and say so:
    the cache holds copies, so it never fails for good on one of them (:func:`~arrowmt.files.load_or_build`, the
    rule of every cache of derived data)."""
    indexed = {index_name(entry.file): entry for entry in manifest.files.values()}  # block index -> its split file

    def sound(name: str) -> None:
        path = folder / name
        if not path.is_file():
            raise FormatError(f"{path}: missing")
        if name in indexed:  # a block index: its own checks
            read_block_index(path, indexed[name].size, indexed[name].sha256)

    for name in _small_files(manifest):
        load_or_build(folder / name, "cached file", lambda n=name: sound(n),
                      lambda n=name: _fetch_small(remote, folder, manifest, n), expected=True)  # fmt: skip


def _fetch_small(remote: RemoteFolder, folder: Path, manifest: Manifest, name: str) -> None:
    """Copy the whole object ``name`` of ``remote`` into ``folder`` (a side file: smaller than the rows it
    describes)."""
    limit = sum(entry.size for entry in manifest.files.values()) + SIDE_SLACK
    try:
        size = remote.sizes([name])[name]
    except StorageError as exc:
        if name.endswith(".blocks"):
            raise StorageError(
                f"{remote.url_of(name)}: no block index; write one with `arrowmt index FOLDER` on the local "
                "copy (conversions write it) and upload it beside the split file"
            ) from exc
        raise
    if size > limit:
        raise StorageError(
            f"{remote.url_of(name)}: expected at most {limit} bytes (the split files hold "
            f"{limit - SIDE_SLACK}), the store says {size}"
        )
    with atomic_output(folder / name) as handle:
        remote.copy(name, handle, size)


def _write_source(folder: Path, url: str, limit: int | None) -> None:
    text = json.dumps({"url": url, "cache_limit": limit}, sort_keys=True).encode()
    path = folder / STATE_DIR / MIRROR_SOURCE
    if not path.is_file() or path.read_bytes() != text:
        write_bytes_atomic(path, text)


_STORES: dict[tuple[int, Path], BlockStore | None] = {}


def attached_file(path: Path) -> BlockFile | None:
    """The cache block file of split file ``path`` when its folder caches a remote corpus, else None."""
    folder = path.parent
    key = (os.getpid(), folder)
    if key not in _STORES:
        _STORES[key] = _open_store(folder)
    store = _STORES[key]
    return None if store is None else store.file(path.name)


def _open_store(folder: Path) -> BlockStore | None:
    if not is_mirror(folder):
        return None
    config = _source_config(folder / STATE_DIR / MIRROR_SOURCE)
    manifest = Manifest.load(folder)
    entries = list(manifest.files.values())
    indexes = [read_block_index(folder / index_name(e.file), e.size, e.sha256) for e in entries]
    sizes = {index.block_size for index in indexes}
    if len(sizes) != 1:
        raise FormatError(f"{folder}: block indexes of several block sizes {sorted(sizes)}; write them again")
    from arrowmt.storage import BlockStore, CachedFile, RemoteFolder

    files = [CachedFile(e.file, e.size, i.crcs, i.pinned_blocks()) for e, i in zip(entries, indexes, strict=True)]
    return BlockStore(RemoteFolder(config["url"]), folder, files, sizes.pop(), config["cache_limit"])


def _source_config(path: Path) -> dict:
    """A cache folder's source (``{"url": str, "cache_limit": int or null}``); FormatError naming it otherwise: the
    cache holds only copies, so the fix is to remove the folder."""
    try:
        config = read_json(path, "cache source")
    except FormatError as exc:
        raise FormatError(f"{exc}; {_DISPOSABLE.format(folder=path.parent.parent)}") from None
    limit = config.get("cache_limit") if isinstance(config, dict) else None
    valid = isinstance(config, dict) and isinstance(config.get("url"), str)
    if not valid or not (limit is None or (type(limit) is int and limit > 0)):
        raise FormatError(
            f"{path}: expected {{'url': ..., 'cache_limit': bytes or null}}, got {str(config)[:80]!r} (damaged); "
            + _DISPOSABLE.format(folder=path.parent.parent)
        )
    return config


_DISPOSABLE = "the cache holds only copies: delete {folder} and it is fetched again"


def guarded_copy(remote: BlockFile, words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The word ranges of a cached file concatenated, fetched first; copied again if a block was evicted meanwhile."""
    first = np.asarray(starts, dtype=np.int64) * 4
    end = first + np.asarray(lengths, dtype=np.int64) * 4
    return remote.copied(first, end, lambda: take_flat(words, starts, lengths))
