"""Hugging Face ``datasets`` bridge: arrowmt split files opened as ``datasets.Dataset`` without copying.

An arrowmt split file is an uncompressed Arrow IPC *stream*, which is exactly what
``datasets.Dataset.from_file`` memory-maps. So:

- :func:`load_split` gives a ``datasets.Dataset`` whose table is a ``MemoryMappedTable``
  (several shards: a ``ConcatenationTable`` of them, in shard order) over the original
  files. Nothing is read into memory and the corpus folder is never written to.
- :func:`load_dataset_dict` does this for every split, as a ``datasets.DatasetDict``.
- :func:`export_for_load_from_disk` makes a folder that ``datasets.load_from_disk``
  accepts: the split files as ``data-0000k-of-0000N.arrow`` (hard links by default, so
  no extra disk), plus ``dataset_info.json`` and ``state.json``.

**Safety.** ``datasets`` (like pyarrow's readers) trusts the Arrow offsets: a file with
one corrupt middle offset makes ``ds[i]`` crash the process (SIGSEGV/SIGBUS) or return
other rows. So every file first gets arrowmt's checks: manifest sizes and row counts,
the structure (on open), and every offset of every column
(:func:`arrowmt.reading._reader.ensure_offsets_checked`, one vectorized pass over the
offsets, about 4 bytes per row and column). A file that fails raises ``FormatError``
before ``datasets`` sees it. The check is remembered in memory, per process, for the
file's identity (device, inode, size, mtime, ctime), so loading the same unchanged file
again costs nothing; nothing is written for it. Token ids are not checked here (an id
outside the dictionary cannot crash a reader): ``arrowmt verify`` checks them and the
SHA-256 of every file.

**Where HF's cache files go.** ``map``, ``filter``, ``shuffle``, ... write their
``cache-<fingerprint>.arrow`` files into the folder of the dataset's first file. So that
they never land in (or get deleted with) the corpus, :func:`load_split` opens the split
through symbolic links ``data-0000k-of-0000N.arrow`` in a folder of its own,
``<cache_dir>/<corpus>-<split>-<hash of the corpus path and split>/``: ``ds.cache_files``
are those links and HF writes its cache files beside them. ``cache_dir`` defaults to
``<HF_DATASETS_CACHE>/arrowmt`` (``~/.cache/huggingface/datasets/arrowmt``; set the
``HF_DATASETS_CACHE`` or ``HF_HOME`` environment variable, or pass ``cache_dir=``, to put
them on another disk). The links follow the corpus (a re-conversion is seen by the next
``load_split``; HF's fingerprint includes the files' mtimes, so stale cache files are
not reused); remove the folder, or call ``ds.cleanup_cache_files()``, to reclaim the
space. ``keep_in_memory=True`` on a transform writes nothing at all.

Every column is ``list<int32>`` and is declared as ``List(Value("int32"))`` (``Sequence``
on ``datasets`` < 4). HF's ``with_format("numpy")``/``"torch"`` copy each row they return
(as int64); :func:`arrowmt.open_dataset` is the zero-copy path for training.
The arrowmt metadata stays in the files; HF replaces the in-memory schema metadata by
its own ``huggingface`` key, which is never written back to them.

Needs the optional dependency ``datasets`` (``pip install 'arrowmt[hf]'``), imported lazily.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from arrowmt._errors import ArrowMTError, FormatError, InvalidParameterError, OutputWriteError
from arrowmt._optional import require
from arrowmt.files import StagedOutput, atomic_path, remove_unlisted, temp_prefix, write_bytes_atomic
from arrowmt.format import Manifest, split_path
from arrowmt.reading import FileIdentity, ensure_offsets_checked
from arrowmt.splits import Split, open_split
from arrowmt.stored import refuse_stored_order

if TYPE_CHECKING:
    import datasets

LinkMode = Literal["hardlink", "symlink", "copy"]
LINK_MODES: tuple[str, ...] = ("hardlink", "symlink", "copy")
STATE_FILE = "state.json"
INFO_FILE = "dataset_info.json"
DATA_FILE_FORMAT = "data-{index:05d}-of-{count:05d}.arrow"
DATA_FILE_PATTERN = re.compile(r"data-\d{5}-of-\d{5}\.arrow")
FINGERPRINT_CHARS = 16
CACHE_SUBDIR = "arrowmt"  # inside HF_DATASETS_CACHE: the default cache_dir of load_split
NAME_CHARS = 40  # of the corpus folder and split names in a link folder's name
UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
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
    return require("datasets", "hf", "the Hugging Face bridge")


def token_features(columns: tuple[str, ...] | list[str]) -> datasets.Features:
    """HF features for arrowmt token columns: ``List(Value("int32"))`` each."""
    hf = import_datasets()
    list_type = getattr(hf, "List", None) or hf.Sequence
    return hf.Features({name: list_type(hf.Value("int32")) for name in columns})


def load_split(
    path: str | os.PathLike[str], split: str = "train", *, cache_dir: str | os.PathLike[str] | None = None
) -> datasets.Dataset:
    """Split ``split`` of the arrowmt folder ``path`` as a memory-mapped ``datasets.Dataset``.

    Each shard file (``train.arrow``, ``train1.arrow``, ...) is checked (see the module
    notes: a corrupt file raises ``FormatError`` here instead of crashing later) and goes
    through ``datasets.Dataset.from_file`` via a symbolic link in a folder under
    ``cache_dir`` (default ``<HF_DATASETS_CACHE>/arrowmt``), where HF's transforms then
    write their cache files; several shards are joined in order with
    ``datasets.concatenate_datasets``. Zero-copy: the table is a ``MemoryMappedTable``
    (or a ``ConcatenationTable`` of them) mapping the corpus files themselves, and
    ``ds.cache_files`` are the links. Nothing is written into the corpus folder.
    """
    hf = import_datasets()
    dataset = _checked_split(path, split, "load into datasets")
    links = _link_shards(dataset, _link_folder(hf, dataset, cache_dir))
    info = hf.DatasetInfo(features=token_features(dataset.columns), description=_description(path, split))
    named = hf.NamedSplit(split)
    parts = [hf.Dataset.from_file(str(link), info=info, split=named) for link in links]
    _check_same_files(dataset, links)
    if len(parts) == 1:
        return parts[0]
    return hf.concatenate_datasets(parts, info=info, split=named)


def load_dataset_dict(
    path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None
) -> datasets.DatasetDict:
    """Every split of the arrowmt folder ``path`` (see :func:`load_split`) as a ``datasets.DatasetDict``."""
    hf = import_datasets()
    manifest = Manifest.load(path)
    return hf.DatasetDict({split: load_split(path, split, cache_dir=cache_dir) for split in manifest.splits()})


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
    ``out_dir`` must be missing or empty unless ``overwrite``. Everything is staged
    beside ``out_dir`` and published at once (``state.json`` last); with ``overwrite``,
    the data files an earlier export listed in its ``state.json`` and this one does not
    write are deleted, nothing else. The split files are checked first as
    :func:`load_split` checks them.
    """
    if link not in LINK_MODES:
        raise InvalidParameterError(f"link: expected one of {list(LINK_MODES)}, got {link!r}")
    dataset = _checked_split(path, split, "export for datasets")
    sources = [split_path(dataset.path, name) for name in dataset.shard_names]
    names = [DATA_FILE_FORMAT.format(index=k, count=len(sources)) for k in range(len(sources))]
    with StagedOutput.begin(out_dir, overwrite) as staged:
        earlier = _earlier_data_files(staged.target)
        methods = tuple(_place(src, staged.path / name, link) for src, name in zip(sources, names, strict=True))
        write_bytes_atomic(staged.path / INFO_FILE, _json_bytes(_info_dict(dataset)))
        write_bytes_atomic(staged.path / STATE_FILE, _json_bytes(_state_dict(dataset, names)))
        staged.publish([*names, INFO_FILE, STATE_FILE], remove=earlier)
    out = staged.target
    return HFExport(out, tuple(out / n for n in names), methods)


def _earlier_data_files(out: Path) -> frozenset[str]:
    """The data files an earlier export listed in ``out/state.json`` (plain names only; none if unreadable)."""
    try:
        state = json.loads((out / STATE_FILE).read_text(encoding="utf-8"))
        listed = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return frozenset()
    return frozenset(n for n in listed if isinstance(n, str) and DATA_FILE_PATTERN.fullmatch(n))


def _checked_split(path: str | os.PathLike[str], split: str, what: str) -> Split:
    """Split ``split`` of ``path``, its rows as converted (not a copy in plan order), its offsets checked."""
    dataset = open_split(path, split)
    refuse_stored_order(dataset.manifest, dataset.path, what, split)
    _check_offsets(dataset)
    return dataset


def _check_offsets(dataset: Split) -> None:
    """Every offset of every shard, so that ``datasets`` cannot read outside a file (remembered per file)."""
    for shard in dataset.shards:
        ensure_offsets_checked(shard)


def _link_folder(hf: ModuleType, dataset: Split, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The folder (created) holding the links for ``dataset``: one per corpus folder and split."""
    root = Path(hf.config.HF_DATASETS_CACHE) / CACHE_SUBDIR if cache_dir is None else Path(cache_dir)
    corpus = dataset.path.resolve()
    digest = hashlib.sha256(f"{corpus}\0{dataset.split}".encode()).hexdigest()[:FINGERPRINT_CHARS]
    readable = "-".join(UNSAFE_NAME_CHARS.sub("_", name)[:NAME_CHARS] for name in (corpus.name, dataset.split))
    folder = root / f"{readable}-{digest}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputWriteError(
            f"cache_dir: cannot create {folder} ({exc.strerror or exc}); pass a writable cache_dir "
            "or set HF_DATASETS_CACHE"
        ) from exc
    return folder


def _link_shards(dataset: Split, folder: Path) -> list[Path]:
    """Symbolic links ``data-0000k-of-0000N.arrow`` in ``folder`` to the shard files, in order."""
    sources = [split_path(dataset.path, name).resolve() for name in dataset.shard_names]
    links = [folder / DATA_FILE_FORMAT.format(index=k, count=len(sources)) for k in range(len(sources))]
    for source, link in zip(sources, links, strict=True):
        if not (link.is_symlink() and Path(os.readlink(link)) == source):
            _place(source, link, "symlink")
    remove_unlisted(folder, ("data-*-of-*.arrow",), {link.name for link in links})
    return links


def _check_same_files(dataset: Split, links: list[Path]) -> None:
    """FormatError if a shard file was replaced or changed between arrowmt's checks and HF's mapping."""
    for shard, link in zip(dataset.shards, links, strict=True):
        if FileIdentity.of(link) != shard.identity:
            raise FormatError(f"{shard.path}: file changed while it was being loaded; load it again")


def _description(path: str | os.PathLike[str], split: str) -> str:
    return f"arrowmt split {split!r} of {Path(path)}"


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
    tmp = dst.with_name(f"{temp_prefix()}{dst.name}.link")
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
