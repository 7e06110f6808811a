"""An epoch's copy of a corpus read in sampled segmentations: every row in its sample of that epoch, written once.

Reading a row in a sample gathers its words' forms (:class:`arrowmt.segments.SampledSplit`), a dozen vectorized
steps a batch; a training run reads every row once an epoch. So the first process that needs epoch ``e`` writes
the epoch's rows, in the samples :func:`~arrowmt.segments.epoch_samples` gives them under ``seed``, as an ordinary
arrowmt folder in the cache (``<cache>/sampled-<id>/epoch-<key>``, its dictionaries the samples'), under a lock
that the other ranks wait on; every process then reads it as it reads the corpus itself: zero-copy, memory-mapped,
each page shared by the processes of the node, its batch plan an ordinary plan. The last ``keep`` epochs' copies
of a corpus stay (the current and the one before, which a resumed or lagging process may still read).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._arrays import row_blocks
from arrowmt._errors import FormatError
from arrowmt.converters import OutputFolder, column, special_ids_of
from arrowmt.files import exclusive_lock
from arrowmt.format import CACHE_DIR_NAME, MANIFEST_NAME, Manifest
from arrowmt.plans import plan_key
from arrowmt.reading import Ragged
from arrowmt.segments import FORMS_DIR, SampledSplit, epoch_samples, sampled_folder
from arrowmt.splits import Split

FAMILY_PREFIX = "sampled-"
EPOCH_PREFIX = "epoch-"
SOURCE_FORMAT = "sampled-epoch"
EPOCH_KEY = "sampled_epoch"  # what an epoch copy's manifest records it is of


def epoch_copy(
    sampled: SampledSplit, seed: int, epoch: int, cache_dir: str | os.PathLike[str] | None = None, keep: int = 2
) -> Split:
    """Split ``sampled.corpus.split`` of epoch ``epoch``'s copy: mapped if written, else written once, under a lock.

    The copy is opened under its lock, and an old copy is removed only under its own, so no process removes a
    copy another is opening (once open, a map outlives the file's removal).
    """
    family = _family(sampled, seed, cache_dir)
    made_of = {"sampled": sampled.fingerprint(), "seed": int(seed), "epoch": int(epoch)}
    folder = family / f"{EPOCH_PREFIX}{plan_key(made_of)[:16]}"
    with exclusive_lock(_lock(folder)):
        if _made_of(folder) != made_of:
            _write(folder, sampled, seed, epoch, made_of)
        os.utime(folder)
        opened = Split(folder, sampled.corpus.split)
    _keep_recent(family, folder, keep)
    return opened


def _family(sampled: SampledSplit, seed: int, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The folder of the epoch copies of ``sampled`` under ``seed``: other seeds' copies never displace them."""
    base = Path(cache_dir) if cache_dir is not None else sampled.corpus.path / CACHE_DIR_NAME
    return base / f"{FAMILY_PREFIX}{plan_key({'sampled': sampled.fingerprint(), 'seed': int(seed)})[:16]}"


def _lock(folder: Path) -> Path:
    return folder.with_name(folder.name + ".lock")


def _made_of(folder: Path) -> object:
    """What the copy in ``folder`` records it is (None: no complete copy there)."""
    if not (folder / MANIFEST_NAME).is_file():
        return None
    try:
        return Manifest.load(folder).provenance.get(EPOCH_KEY)
    except FormatError:
        return None


def _write(folder: Path, sampled: SampledSplit, seed: int, epoch: int, made_of: dict[str, object]) -> None:
    corpus = sampled.corpus
    langs = {col: corpus.manifest.languages.get(col) for col in corpus.columns}
    rows = np.arange(len(corpus), dtype=np.int64)
    samples = epoch_samples(seed, epoch, rows, sampled.samples)
    dictionaries = sampled.forms.manifest.dictionaries
    with OutputFolder.prepare(folder, langs, SOURCE_FORMAT, True, False) as out:
        columns = {}
        for col, lang in langs.items():
            forms = sampled_folder(corpus.path) / FORMS_DIR / dictionaries[lang or ""]
            dictionary = sampled.dictionary(col)
            name = out.add_dictionary(lang, dictionary, source=forms)
            source = _EpochRows(sampled, col, samples)
            columns[col] = column(source, lang, name, dictionary, f"{sampled!r} epoch {epoch} {col}")
        out.write(corpus.split, columns, special_ids_of(dictionary))
        out.manifest.provenance = {EPOCH_KEY: made_of}
        out.finish()


@dataclass
class _EpochRows:
    """One column of the corpus, each row in its sample: a RowSource for the writer (lengths taken once)."""

    sampled: SampledSplit
    col: str
    samples: np.ndarray

    def __post_init__(self) -> None:
        rows = np.arange(self.samples.shape[0], dtype=np.int64)
        self._lengths = self.sampled.lengths(self.col, rows, self.samples).astype(np.int32)

    @property
    def tokens(self) -> int:
        return int(self._lengths.sum(dtype=np.int64))

    def __len__(self) -> int:
        return int(self.samples.shape[0])

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        for start in range(0, len(self), block_rows):
            yield self._lengths[start : start + block_rows].astype(np.int64)

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        for rows in row_blocks(len(self), block_rows):
            spans = self.sampled.spans(self.col, rows, self.samples[rows])
            yield Ragged.from_lengths(spans.lengths, spans.words)


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
