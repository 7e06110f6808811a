"""``arrowmt stage URL OUT``: a remote corpus copied whole to a local folder, in parallel, verified, resumable.

The blocks are fetched into a cache folder beside ``OUT`` (``.OUT.arrowmt-stage``) as a
training cache fetches them: several range requests in flight, each block checked against
the corpus's block index before it counts as fetched. A killed run leaves that folder;
the next run fetches only the blocks still missing. When every block is there, each file's
SHA-256 is checked against the manifest and the folder is published as a conversion is
(staging folder, manifest last, nothing half-written in ``OUT``); then the cache is removed. A corpus's sampled
segmentations (``sampled/words`` and ``sampled/forms``, two arrowmt folders) are staged the same way, after it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from arrowmt._errors import StorageError
from arrowmt.files import StagedOutput, file_sha256, progress_bar
from arrowmt.format import MANIFEST_NAME, Manifest
from arrowmt.reading import CacheOptions, attached_file, index_name, mirror
from arrowmt.storage import RemoteFolder, local_output

STAGE_SUFFIX = ".arrowmt-stage"
BLOCKS_PER_STEP = 16384  # blocks asked for at once (64 MiB of 4 KiB blocks: 8 range requests in flight)


def stage(url: str, out: str | os.PathLike[str], *, overwrite: bool = False, progress: bool = True) -> Manifest:
    """Copy the corpus at ``url`` to the folder ``out`` (see the module), its sampled segmentations included;
    returns its manifest."""
    target = local_output(out)
    manifest = _stage_folder(url, target, overwrite, progress)
    remote = RemoteFolder(url)
    if not remote.exists(f"{Manifest.SAMPLED[0]}/{MANIFEST_NAME}"):
        for inner in Manifest.SAMPLED:  # an earlier corpus's: they would not match this one
            shutil.rmtree(target / inner, ignore_errors=True)
        return manifest
    for inner in Manifest.SAMPLED:
        _stage_folder(f"{remote.url.rstrip('/')}/{inner}", target / inner, True, progress)
    return manifest


def _stage_folder(url: str, target: Path, overwrite: bool, progress: bool) -> Manifest:
    """Copy the arrowmt folder at ``url`` to ``target``, verified."""
    with StagedOutput.begin(target, overwrite) as staged:
        cache = target.parent / f".{target.name}{STAGE_SUFFIX}"
        folder = mirror(url, CacheOptions(cache, None))
        manifest = Manifest.load(folder)
        _fetch_all(folder, manifest, progress)
        _check_sha256(url, folder, manifest)
        # every file the manifest lists (split files, dictionaries, a copy's row order maps and block tables: a
        # copy in plan order cannot be opened without them) and the block indexes a later upload reads
        names = sorted(manifest.file_names() | {index_name(entry.file) for entry in manifest.files.values()})
        for name in names:
            os.replace(folder / name, staged.path / name)
        shutil.copyfile(folder / MANIFEST_NAME, staged.path / MANIFEST_NAME)
        staged.publish([*names, MANIFEST_NAME])
    shutil.rmtree(cache, ignore_errors=True)
    return manifest


def _fetch_all(folder: Path, manifest: Manifest, progress: bool) -> None:
    total = sum(entry.size for entry in manifest.files.values())
    with progress_bar(total=total, desc="stage", unit="B", enabled=progress) as bar:
        for entry in manifest.files.values():
            remote = attached_file(folder / entry.file)
            assert remote is not None
            store = remote.store
            first, last = int(store.base[remote.index]), int(store.base[remote.index + 1])
            left = entry.size
            for start in range(first, last, BLOCKS_PER_STEP):
                stop = min(start + BLOCKS_PER_STEP, last)
                store.ensure(np.arange(start, stop, dtype=np.int64))
                step = min(left, (stop - start) * store.block_size)
                bar.update(step)
                left -= step


def _check_sha256(url: str, folder: Path, manifest: Manifest) -> None:
    for entry in manifest.files.values():
        digest = file_sha256(folder / entry.file)
        if digest != entry.sha256:
            raise StorageError(
                f"{url}/{entry.file}: staged copy has SHA-256 {digest[:16]}.., the manifest records "
                f"{entry.sha256[:16]}.. (object changed since conversion?); nothing was published"
            )
