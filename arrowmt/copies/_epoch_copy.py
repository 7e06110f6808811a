"""An epoch's copy of a corpus read in sampled segmentations: every row as that epoch draws it, written once.

Drawing a row's segmentation walks its words' lattices (:class:`arrowmt.segments.SampledSplit`); a training run
reads every row once an epoch, and plans the epoch from the rows' lengths first. So the first process that needs
epoch ``e`` draws the epoch's rows (under the split's seed and alpha) and writes them as an ordinary arrowmt
folder in the cache (``<cache>/sampled-<id>/epoch-<key>``, its dictionaries the samples'), under a lock that the
other ranks wait on; every process then reads it as it reads the corpus itself: zero-copy, memory-mapped, each page
shared by the processes of the node, its batch plan an ordinary plan. The last ``keep`` epochs' copies of a corpus
stay (the current and the one before, which a resumed or lagging process may still read).

A copy is derived data: before a process first reads one, every file of it is checked against the SHA-256 its
manifest records (the process that wrote it hashed those bytes as it wrote them: it checks their sizes); a damaged,
truncated or missing copy is written again (once, under its lock) and the repair is logged, so a cache never fails
for good.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._arrays import row_blocks
from arrowmt._errors import FormatError
from arrowmt.converters import OutputFolder, column, special_ids_of
from arrowmt.files import exclusive_lock, file_sha256, load_or_build
from arrowmt.format import CACHE_DIR_NAME, MANIFEST_NAME, Manifest
from arrowmt.plans import plan_key
from arrowmt.reading import Ragged
from arrowmt.segments import FORMS_DIR, SampledSplit, sampled_folder
from arrowmt.splits import Split

FAMILY_PREFIX = "sampled-"
EPOCH_PREFIX = "epoch-"
SOURCE_FORMAT = "sampled-epoch"
EPOCH_KEY = "sampled_epoch"  # what an epoch copy's manifest records it is of
DRAW_ROWS = 1 << 16  # rows drawn at once


def epoch_copy(sampled: SampledSplit, epoch: int, cache_dir: str | os.PathLike[str] | None = None,
               keep: int = 2) -> Split:  # fmt: skip
    """Split ``sampled.corpus.split`` of epoch ``epoch``'s copy: mapped if written and whole, else written once,
    under a lock.

    The copy is checked and opened under its lock, and an old copy is removed only under its own, so no process
    removes a copy another is opening (once open, a map outlives the file's removal).
    """
    family = _family(sampled, cache_dir)
    made_of = {"sampled": sampled.fingerprint(), "seed": int(sampled.seed), "alpha": float(sampled.alpha),
               "epoch": int(epoch)}  # fmt: skip
    folder = family / f"{EPOCH_PREFIX}{plan_key(made_of)[:16]}"
    written: list[bool] = []

    def opened() -> Split:
        problem = _problem(folder, made_of, hashed=not written)
        if problem is not None:
            raise FormatError(problem or "not written yet")
        os.utime(folder)
        return Split(folder, sampled.corpus.split)

    def write() -> None:
        _write(folder, sampled, epoch, made_of)
        written.append(True)  # its manifest's SHA-256s are of the bytes just written: not hashed again

    split, _ = load_or_build(folder, "epoch copy", opened, write, file=False, unlocked_first=False)
    _keep_recent(family, folder, keep)
    return split


def _family(sampled: SampledSplit, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The folder of the epoch copies of ``sampled`` under its seed and alpha: others never displace them."""
    base = Path(cache_dir) if cache_dir is not None else sampled.corpus.path / CACHE_DIR_NAME
    key = {"sampled": sampled.fingerprint(), "seed": int(sampled.seed), "alpha": float(sampled.alpha)}
    return base / f"{FAMILY_PREFIX}{plan_key(key)[:16]}"


def _problem(folder: Path, made_of: dict[str, object], hashed: bool = True) -> str | None:
    """None when ``folder`` holds the whole copy ``made_of`` names, every file as its manifest records it (its size,
    and its SHA-256 when ``hashed``); else why not ("" when there is no copy at all)."""
    if not (folder / MANIFEST_NAME).is_file():
        return "" if not folder.exists() else "its manifest is missing"
    try:
        manifest = Manifest.load(folder)
    except FormatError as exc:
        return str(exc)
    if manifest.provenance.get(EPOCH_KEY) != made_of:
        return "" if manifest.provenance.get(EPOCH_KEY) is None else "it records another epoch"
    for entry in manifest.files.values():
        path = folder / entry.file
        try:
            if path.stat().st_size != entry.size or (hashed and file_sha256(path) != entry.sha256):
                return f"{path} differs from its manifest's size or SHA-256 (damaged)"
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
    return None


def _lock(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


def _write(folder: Path, sampled: SampledSplit, epoch: int, made_of: dict[str, object]) -> None:
    corpus = sampled.corpus
    langs = {col: corpus.manifest.languages.get(col) for col in corpus.columns}
    shutil.rmtree(folder, ignore_errors=True)  # a damaged copy: written anew
    dictionaries = sampled.forms.manifest.dictionaries
    with OutputFolder.prepare(folder, langs, SOURCE_FORMAT, True, False) as out, ExitStack() as drawn:
        columns = {}
        for col, lang in langs.items():
            forms = sampled_folder(corpus.path) / FORMS_DIR / dictionaries[lang or ""]
            dictionary = sampled.dictionary(col)
            name = out.add_dictionary(lang, dictionary, source=forms)
            source = drawn.enter_context(_EpochRows.drawn(sampled, col, epoch, out.path))
            columns[col] = column(source, lang, name, dictionary, f"{sampled!r} epoch {epoch} {col}")
        out.write(corpus.split, columns, special_ids_of(dictionary))
        out.manifest.provenance = {EPOCH_KEY: made_of}
        out.finish()


@dataclass
class _EpochRows:
    """One column of the corpus, each row as the epoch draws it: a RowSource for the writer. Each row is drawn once:
    the lengths are kept, the pieces spilled to a temporary file beside the copy (memory bounded by a block)."""

    lengths_: np.ndarray  # int32 per row
    spill: Path

    @classmethod
    @contextmanager
    def drawn(cls, sampled: SampledSplit, col: str, epoch: int, where: Path) -> Iterator[_EpochRows]:
        lengths = np.empty(len(sampled), dtype=np.int32)
        spill = where / f".drawn-{col}"
        try:
            with open(spill, "wb") as handle:
                for rows in row_blocks(len(sampled), DRAW_ROWS):
                    spans = sampled.spans(col, rows, epoch)
                    lengths[rows] = spans.lengths
                    handle.write(np.ascontiguousarray(spans.words, dtype=np.int32).tobytes())
            yield cls(lengths, spill)
        finally:
            spill.unlink(missing_ok=True)

    @property
    def tokens(self) -> int:
        return int(self.lengths_.sum(dtype=np.int64))

    def __len__(self) -> int:
        return int(self.lengths_.shape[0])

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        for start in range(0, len(self), block_rows):
            yield self.lengths_[start : start + block_rows].astype(np.int64)

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        with open(self.spill, "rb") as handle:  # read in order, a block at a time (no page faults of a map)
            for start in range(0, len(self), block_rows):
                lengths = self.lengths_[start : start + block_rows].astype(np.int64)
                yield Ragged.from_lengths(lengths, np.fromfile(handle, dtype=np.int32, count=int(lengths.sum())))


def _keep_recent(family: Path, current: Path, keep: int) -> None:
    """Remove all but the ``keep`` most recently used epoch copies of ``family``, each under its lock."""
    copies = sorted((c for c in family.glob(f"{EPOCH_PREFIX}*") if c.is_dir()), key=_used, reverse=True)
    for old in [c for c in copies if c != current][max(keep - 1, 0) :]:
        with exclusive_lock(_lock(old)):
            shutil.rmtree(old, ignore_errors=True)


def _used(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return 0
