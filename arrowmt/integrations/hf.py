"""Hugging Face ``datasets`` bridge: arrowmt split files opened as ``datasets.Dataset`` without copying.

An arrowmt split file is an uncompressed Arrow IPC *stream*, which is exactly what
``datasets.Dataset.from_file`` memory-maps. So:

- :func:`load_split` gives a ``datasets.Dataset`` whose table is a ``MemoryMappedTable``
  (several shards: a ``ConcatenationTable`` of them, in shard order) over the original
  files. Nothing is read into memory, no cache file is written and ``ds.cache_files``
  lists the split files themselves.
- :func:`load_dataset_dict` does this for every split, as a ``datasets.DatasetDict``.
- :func:`export_for_load_from_disk` makes a folder that ``datasets.load_from_disk``
  accepts: the split files as ``data-0000k-of-0000N.arrow`` (hard links by default, so
  no extra disk), plus ``dataset_info.json`` and ``state.json``.

Every column is ``list<int32>`` and is declared as ``List(Value("int32"))`` (``Sequence``
on ``datasets`` < 4). HF's ``with_format("numpy")``/``"torch"`` copy each row they return
(as int64); :func:`arrowmt.open_dataset` is the zero-copy path for training.
The arrowmt metadata stays in the files; HF replaces the in-memory schema metadata by
its own ``huggingface`` key, which is never written back to them.

Caution: HF transforms (``map``, ``filter``, ...) write their ``cache-<hash>.arrow`` files
beside the dataset's files, i.e. into the arrowmt folder (checked with datasets 5.2).
Pass ``keep_in_memory=True`` or ``cache_file_name=...`` to keep the folder clean, or work
on an :func:`export_for_load_from_disk` folder instead.

Needs the optional dependency ``datasets`` (``pip install 'arrowmt[hf]'``), imported lazily.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from arrowmt._errors import ArrowMTError, InvalidParameterError, MissingDependencyError
from arrowmt.format._atomic import (
    TEMP_PREFIX,
    atomic_path,
    fsync_dir,
    prepare_output_dir,
    remove_unlisted,
    write_bytes_atomic,
)
from arrowmt.format._manifest import Manifest, split_path
from arrowmt.format._split import Split, open_split

if TYPE_CHECKING:
    import datasets

LinkMode = Literal["hardlink", "symlink", "copy"]
LINK_MODES: tuple[str, ...] = ("hardlink", "symlink", "copy")
STATE_FILE = "state.json"
INFO_FILE = "dataset_info.json"
DATA_FILE_FORMAT = "data-{index:05d}-of-{count:05d}.arrow"
FINGERPRINT_CHARS = 16
HF_INSTALL_HINT = "pip install 'arrowmt[hf]'"
# Errors from os.link meaning "this filesystem/pair of folders cannot hard-link": fall back to a copy.
NO_HARDLINK_ERRNOS = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES})


@dataclass(frozen=True)
class HFExport:
    """What :func:`export_for_load_from_disk` wrote: the folder, its data files and how each was made."""

    path: Path
    files: tuple[Path, ...]
    methods: tuple[str, ...]


def import_datasets() -> ModuleType:
    """The ``datasets`` module, or MissingDependencyError with the install hint."""
    try:
        import datasets
    except ImportError as exc:
        raise MissingDependencyError(
            f"the Hugging Face bridge needs the 'datasets' package; install it with: {HF_INSTALL_HINT}"
        ) from exc
    return datasets


def token_features(columns: tuple[str, ...] | list[str]) -> datasets.Features:
    """HF features for arrowmt token columns: ``List(Value("int32"))`` each."""
    hf = import_datasets()
    list_type = getattr(hf, "List", None) or hf.Sequence
    return hf.Features({name: list_type(hf.Value("int32")) for name in columns})


def load_split(path: str | os.PathLike[str], split: str = "train") -> datasets.Dataset:
    """Split ``split`` of the arrowmt folder ``path`` as a memory-mapped ``datasets.Dataset``.

    Each shard file (``train.arrow``, ``train1.arrow``, ...) goes through
    ``datasets.Dataset.from_file``; several shards are joined in order with
    ``datasets.concatenate_datasets``. Zero-copy: the table is a ``MemoryMappedTable``
    (or a ``ConcatenationTable`` of them), ``ds.cache_files`` are the split files and
    nothing is written anywhere. The files are first opened by arrowmt, which checks
    them against the manifest and validates their Arrow structure (HF does not: a
    corrupt file could crash the process on access); that costs no data read.
    """
    hf = import_datasets()
    files, columns = _split_files(path, split)
    info = hf.DatasetInfo(features=token_features(columns), description=_description(path, split))
    named = hf.NamedSplit(split)
    parts = [hf.Dataset.from_file(str(f), info=info, split=named) for f in files]
    if len(parts) == 1:
        return parts[0]
    return hf.concatenate_datasets(parts, info=info, split=named)


def load_dataset_dict(path: str | os.PathLike[str]) -> datasets.DatasetDict:
    """Every split of the arrowmt folder ``path`` (see :func:`load_split`) as a ``datasets.DatasetDict``."""
    hf = import_datasets()
    manifest = Manifest.load(path)
    return hf.DatasetDict({split: load_split(path, split) for split in manifest.splits()})


def export_for_load_from_disk(
    path: str | os.PathLike[str],
    split: str,
    out_dir: str | os.PathLike[str],
    *,
    link: LinkMode = "hardlink",
    overwrite: bool = False,
) -> HFExport:
    """Make ``out_dir`` a folder that ``datasets.load_from_disk(out_dir)`` loads as split ``split``.

    The shard files become ``data-00000-of-0000N.arrow`` (in shard order) beside a
    ``dataset_info.json`` (features) and a ``state.json`` (written last, atomically, so
    its presence means the folder is complete). HF reads the same stream format arrowmt
    writes, so the data files need no conversion; ``link`` chooses how they are made:

    - ``"hardlink"`` (default): zero extra disk, and the export stays valid if the
      arrowmt folder is deleted or re-converted (arrowmt replaces files by rename, so a
      re-conversion does not change the linked bytes). Falls back to a copy where the
      filesystem refuses hard links (another filesystem/device, no permission). The two
      names share one file: never edit either in place (arrowmt and ``datasets`` do not).
    - ``"symlink"``: absolute links to the split files; zero extra disk, follows a
      re-conversion, breaks if the arrowmt folder moves or is deleted.
    - ``"copy"``: an independent byte copy.

    Both link kinds were checked with ``load_from_disk``: it memory-maps through them.
    ``out_dir`` must be missing or empty unless ``overwrite``; stale ``data-*.arrow``
    files of an earlier export are then removed.
    """
    if link not in LINK_MODES:
        raise InvalidParameterError(f"link: expected one of {list(LINK_MODES)}, got {link!r}")
    dataset = open_split(path, split)
    out = _prepare_out_dir(Path(out_dir), overwrite)
    sources = [split_path(dataset.path, name) for name in dataset.shard_names]
    names = [DATA_FILE_FORMAT.format(index=k, count=len(sources)) for k in range(len(sources))]
    methods = tuple(_place(src, out / name, link) for src, name in zip(sources, names, strict=True))
    remove_unlisted(out, ("data-*-of-*.arrow",), set(names))
    fsync_dir(out)
    write_bytes_atomic(out / INFO_FILE, _json_bytes(_info_dict(dataset)))
    write_bytes_atomic(out / STATE_FILE, _json_bytes(_state_dict(dataset, names)))
    return HFExport(out, tuple(out / n for n in names), methods)


def _split_files(path: str | os.PathLike[str], split: str) -> tuple[list[Path], tuple[str, ...]]:
    """Shard files of ``split`` in order (absolute paths) and their column names, after arrowmt's checks."""
    dataset = open_split(path, split)
    return [split_path(dataset.path, n).resolve() for n in dataset.shard_names], dataset.columns


def _description(path: str | os.PathLike[str], split: str) -> str:
    return f"arrowmt split {split!r} of {Path(path)}"


def _prepare_out_dir(out: Path, overwrite: bool) -> Path:
    prepare_output_dir(out, overwrite)
    (out / STATE_FILE).unlink(missing_ok=True)
    return out


def _place(src: Path, dst: Path, link: LinkMode) -> str:
    """Put ``src`` at ``dst`` by ``link`` (hard links fall back to copying); return the method used."""
    if link == "copy":
        return _copy(src, dst)
    try:
        _link_atomic(src, dst, link)
    except OSError as exc:
        if link == "hardlink" and exc.errno in NO_HARDLINK_ERRNOS:
            return _copy(src, dst)
        raise ArrowMTError(f"{dst}: cannot create {link} to {src}: {exc.strerror or exc}") from exc
    return link


def _copy(src: Path, dst: Path) -> str:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
    return "copy"


def _link_atomic(src: Path, dst: Path, link: LinkMode) -> None:
    """Create the link under a temporary name, then rename it over ``dst``."""
    tmp = dst.with_name(f"{TEMP_PREFIX}{dst.name}.{os.getpid()}.link")
    tmp.unlink(missing_ok=True)
    try:
        if link == "hardlink":
            os.link(src, tmp)
        else:
            os.symlink(src.resolve(), tmp)
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _info_dict(dataset: Split) -> dict[str, Any]:
    return {
        "description": _description(dataset.path, dataset.split),
        "features": token_features(dataset.columns).to_dict(),
    }


def _state_dict(dataset: Split, names: list[str]) -> dict[str, Any]:
    """``state.json`` as ``Dataset.save_to_disk`` writes it (no format set)."""
    return {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": dataset.fingerprint()[:FINGERPRINT_CHARS],
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": dataset.split,
    }


def _json_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
