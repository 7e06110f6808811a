"""Sampled segmentations (subword regularization): each row of a corpus drawn afresh, every epoch, from the exact
law of its words' segmentations.

A corpus converted with a sentencepiece model may hold, beside its usual ids, the lattices of its words (built by
:func:`arrowmt.converters.add_sampled_segmentations`). They live in the folder ``sampled/`` of the corpus, as two
ordinary arrowmt folders, so that every integrity check of a corpus applies to them:

* ``sampled/words``: the corpus's splits again, each row the ids of its words (the pieces between two word
  starts, ``▁``) in a dictionary of words (``dict.<lang>.txt``, one symbol per distinct word), ``</s>`` last;
* ``sampled/forms``: each distinct word's lattice (:mod:`arrowmt.segments._lattice`): the split ``forms`` holds,
  per column, row ``w`` the pieces of word ``w``'s edges, in the corpus's dictionary extended by every piece a
  lattice uses (``dict.<lang>.txt`` there); the side file ``lattice.<column>.bin`` their nodes and scores, and the
  SHA-256 of the segmentation record, so an edited record (seed, alpha, model) is refused.

In epoch ``e`` under ``seed`` the ``j``-th word of row ``r`` of a column takes a segmentation drawn from its word's
law with the random bits of (seed, e, column, r, j) (:mod:`arrowmt.segments._bits`): afresh each epoch, the same
in every process, independent across occurrences and epochs. A unigram model's law is sentencepiece's for
``nbest_size=-1`` (every segmentation, ``exp(alpha * score)``), so a row is a draw of the sentence's segmentation
(no piece crosses a word start); ``alpha`` is a reading option (the record's is the default). A BPE model's law is
a pool of sentencepiece's own BPE-dropout draws per word, made at conversion.

Both folders record what they were made of (``provenance["segmentation"]``): alpha, seed, the sampler, the
model's SHA-256 and the fingerprint of every split of the corpus they were made from, checked on opening (a
corpus converted again is refused until its samples are rebuilt).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np

from arrowmt._arrays import row_blocks
from arrowmt._checks import check_integer
from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.format import MANIFEST_NAME, Dictionary, Manifest
from arrowmt.reading import FileIdentity, Spans, exclusive_cumsum, take_flat
from arrowmt.segments._bits import epoch_key
from arrowmt.segments._lattice import REBUILD, Lattice
from arrowmt.segments._law import Law, row_sums
from arrowmt.splits import Split
from arrowmt.storage import is_mirror

SAMPLED_DIR = Manifest.SAMPLED[0].split("/")[0]  # in the corpus folder
WORDS_DIR, FORMS_DIR = (inner.split("/")[1] for inner in Manifest.SAMPLED)
FORMS_SPLIT = "forms"
SEGMENTATION_KEY = "segmentation"  # the provenance entry both folders record
LAYOUT = 2  # the samples' layout: 2, word lattices (1, K stored samples a row, is refused with how to rebuild)
LENGTH_BLOCK = 1 << 16  # rows whose lengths or pieces are drawn at once
LATTICE, POOL = "lattice", "pool"  # a unigram model's lattices; a BPE model's pools of dropout draws
BUILD_HINT = "arrowmt.add_sampled_segmentations(corpus, spm_model) (or convert text --spm-model M --spm-sampling)"
MAX_ALPHA = 1e6


def check_alpha(name: str, alpha: object) -> float:
    """``alpha`` as a float when it is a number in (0, 1e6], else InvalidParameterError naming ``name``."""
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= MAX_ALPHA:
        raise InvalidParameterError(f"{name}: expected a number > 0, got {alpha!r}")
    return float(alpha)


@dataclass(frozen=True)
class Segmentation:
    """How the samples were made: the ``sampler`` (``"lattice"``: a unigram model's word lattices, drawn with
    ``alpha`` unless a reader gives another; ``"pool"``: a BPE model's ``pool`` dropout draws per word, made with
    dropout probability ``alpha``), the default ``seed`` of the draws, the model's SHA-256, and the fingerprint of
    each split of the corpus they were made from."""

    alpha: float
    seed: int
    sampler: str
    pool: int
    sentencepiece_sha256: str
    corpus: dict[str, str]
    layout: int = LAYOUT

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        drawn = "exact per-word law" if self.sampler == LATTICE else f"a pool of {self.pool} dropout draws a word"
        return (
            f"drawn afresh each epoch, alpha {self.alpha:g}, seed {self.seed}, {self.sampler} ({drawn}; "
            f"sentencepiece model {self.sentencepiece_sha256[:12]}...)"
        )

    @classmethod
    def of(cls, manifest: Manifest, where: Path) -> Segmentation:
        """What the manifest of ``where`` (a ``sampled/`` folder) records; FormatError naming what is wrong."""
        entry = manifest.provenance.get(SEGMENTATION_KEY)
        if isinstance(entry, dict) and "samples" in entry:
            raise FormatError(
                f"{where}: samples in the old layout (K stored samples a row, before samples were drawn afresh each "
                f"epoch); {REBUILD} (or convert text ... --spm-sampling --overwrite)"
            )
        fields = {"alpha": float, "seed": int, "sampler": str, "pool": int, "sentencepiece_sha256": str,
                  "layout": int}  # fmt: skip
        if not isinstance(entry, dict) or not isinstance(entry.get("corpus"), dict):
            raise FormatError(f"{where}: manifest provenance[{SEGMENTATION_KEY!r}]: expected an object, got {entry!r}")
        for name, kind in fields.items():
            value = entry.get(name)
            allowed = (int, float) if kind is float else kind  # a float field may be written as an integer
            if not isinstance(value, allowed) or isinstance(value, bool):
                raise FormatError(f"{where}: {SEGMENTATION_KEY}.{name}: expected {kind.__name__}, got {value!r}")
        if entry["layout"] != LAYOUT or entry["sampler"] not in (LATTICE, POOL):
            raise FormatError(f"{where}: {SEGMENTATION_KEY}: expected layout {LAYOUT} and sampler {LATTICE!r} or "
                              f"{POOL!r}, got {entry['layout']} and {entry['sampler']!r}; {REBUILD}")  # fmt: skip
        corpus = {str(k): str(v) for k, v in entry["corpus"].items()}
        return cls(**{name: entry[name] for name in fields}, corpus=corpus)


def sampled_folder(corpus: str | os.PathLike[str]) -> Path:
    """Where a corpus keeps its sampled segmentations."""
    return Path(corpus) / SAMPLED_DIR


def recorded_segmentation(corpus: str | os.PathLike[str]) -> Segmentation | None:
    """What the sampled segmentations of ``corpus`` record (None if it has none), their files not opened."""
    words = sampled_folder(corpus) / WORDS_DIR
    return Segmentation.of(Manifest.load(words), words) if (words / MANIFEST_NAME).is_file() else None


class SampledSplit:
    """Split ``split`` of the corpus at ``corpus`` read in its sampled segmentations.

    :meth:`spans` and :meth:`lengths` give rows ``rows`` as epoch ``epoch`` draws them (under :attr:`seed`, with
    :attr:`alpha`: the recorded ones unless given), in pieces of :meth:`dictionary` (the corpus's ids, extended);
    ``</s>`` ends every row as in the corpus.
    """

    def __init__(self, corpus: str | os.PathLike[str] | Split, split: str = "train", *, seed: int | None = None,
                 alpha: float | None = None) -> None:  # fmt: skip
        self.corpus = corpus if isinstance(corpus, Split) else Split(corpus, split)
        folder = sampled_folder(self.corpus.path)
        if is_mirror(self.corpus.path):
            raise InvalidParameterError(
                f"segmentation: {self.corpus.path} caches a corpus in object storage; its sampled segmentations are "
                "read from a local copy: arrowmt stage URL LOCAL_FOLDER (it copies them too), then read LOCAL_FOLDER"
            )
        if not (folder / WORDS_DIR).is_dir() or not (folder / FORMS_DIR).is_dir():
            raise InvalidParameterError(
                f"segmentation: {self.corpus.path} holds no sampled segmentations ({folder} is missing); build "
                f"them with {BUILD_HINT}"
            )
        self.words = Split(folder / WORDS_DIR, self.corpus.split)
        self.forms = Split(folder / FORMS_DIR, FORMS_SPLIT)
        self.info = Segmentation.of(self.words.manifest, folder / WORDS_DIR)
        self._check_made_from(folder)
        self.seed = self.info.seed if seed is None else check_integer("seed", seed, 0, 2**63)
        self.alpha = self.info.alpha if alpha is None else check_alpha("alpha", alpha)
        if self.info.sampler == POOL and self.alpha != self.info.alpha:
            raise InvalidParameterError(
                f"alpha: {folder} holds a BPE model's pools of dropout draws made with alpha {self.info.alpha:g}; "
                f"another alpha ({self.alpha:g}) needs them made again with it ({BUILD_HINT})"
            )
        self._lattices = self._open_lattices()
        self._laws: dict[str, Law] = {}

    def _open_lattices(self) -> dict[str, Lattice]:
        record = self.info.to_json()
        return {col: Lattice.opened(self.forms, col, self.words.metadata.columns[col].vocab_size, record)
                for col in self.columns}  # fmt: skip

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the lattices (a DataLoader worker reopens them): their checksums instead."""
        return {**self.__dict__, "_lattices": {c: x.side.crc for c, x in self._lattices.items()}, "_laws": {}}

    def __setstate__(self, state: dict[str, object]) -> None:
        crcs = state.pop("_lattices")
        self.__dict__.update(state)
        self._lattices = self._open_lattices()
        for col, lattice in self._lattices.items():
            if lattice.side.crc != crcs[col]:  # type: ignore[index]
                raise FormatError(f"{lattice.side.path}: replaced since the samples were opened; open them again")

    def _check_made_from(self, folder: Path) -> None:
        forms = Segmentation.of(self.forms.manifest, folder / FORMS_DIR)
        if forms != self.info:
            raise FormatError(f"{folder}: {WORDS_DIR} and {FORMS_DIR} were made apart; rebuild them with {BUILD_HINT}")
        made_from, now = self.info.corpus.get(self.corpus.split), self.corpus.fingerprint()
        if made_from != now or len(self.words) != len(self.corpus) or self.words.columns != self.corpus.columns:
            raise FormatError(
                f"{folder}: made from split {self.corpus.split!r} with fingerprint {str(made_from)[:16]}..., but "
                f"{self.corpus.path} now has {now[:16]}... (converted again?); rebuild them with {BUILD_HINT}"
            )

    @property
    def columns(self) -> tuple[str, ...]:
        return self.corpus.columns

    def __len__(self) -> int:
        return len(self.corpus)

    def __repr__(self) -> str:
        return (f"SampledSplit({str(self.corpus.path)!r}, {self.corpus.split!r}, drawn afresh each epoch, "
                f"seed {self.seed}, alpha {self.alpha:g})")  # fmt: skip

    def dictionary(self, column: str) -> Dictionary:
        """The pieces' dictionary: the corpus's, then every piece only a sample uses."""
        return self.forms.dictionary(column)

    def law(self, column: str) -> Law:
        """``column``'s lattices under this split's alpha (computed once per process, on first use)."""
        law = self._laws.get(column)
        if law is None:
            scale = self.alpha if self.info.sampler == LATTICE else 1.0
            law = self._laws[column] = Law.of(self._lattices[column].tables(), scale)
        return law

    def spans(self, column: str, rows: np.ndarray, epoch: int) -> Spans:
        """Rows ``rows`` as epoch ``epoch`` draws them, gathered into one compact array (int32 pieces)."""
        words, ids = self._words(column, rows)
        values, lengths = self.law(column).draw_rows(rows, words.lengths, ids, epoch_key(self.seed, epoch, column))
        return Spans(values, exclusive_cumsum(lengths), lengths)

    def lengths(self, column: str, rows: np.ndarray, epoch: int) -> np.ndarray:
        """The number of pieces (``</s>`` included) of row ``rows[i]`` as epoch ``epoch`` draws it (int64),
        ``LENGTH_BLOCK`` rows at a time (an epoch's lengths never hold all its words at once)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty(rows.shape[0], dtype=np.int64)
        key = epoch_key(self.seed, epoch, column)
        for part in row_blocks(rows.shape[0], LENGTH_BLOCK):
            words, ids = self._words(column, rows[part])
            out[part] = self.law(column).draw_rows(rows[part], words.lengths, ids, key, pieces=False)[1]
        return out

    def max_length(self, column: str) -> int:
        """The most pieces (``</s>`` included) a row of ``column`` can take in any epoch: each word's longest
        segmentation, summed (what a model's positions must cover)."""
        longest = self.law(column).longest
        most = 0
        for rows in row_blocks(len(self), LENGTH_BLOCK):
            words = self.words.column_spans(column, rows)
            ids = take_flat(words.words, words.starts, words.lengths)
            most = max(most, int(row_sums(longest[ids], words.lengths).max(initial=0)))
        return most

    def fingerprint(self) -> str:
        """Identity of the rows' laws: the corpus split's, and the samples' files (seed and alpha not included)."""
        lattices = ":".join(f"{self._lattices[col].side.crc:08x}" for col in self.columns)
        text = f"sampled:{self.corpus.fingerprint()}:{self.words.fingerprint()}:{self.forms.fingerprint()}:{lattices}"
        return hashlib.sha256(text.encode()).hexdigest()

    def check_unchanged(self) -> None:
        """FormatError if a file of the corpus split or of its samples changed since opening."""
        for split in (self.corpus, self.words, self.forms):
            split.check_unchanged()
        for lattice in self._lattices.values():
            if FileIdentity.of(lattice.side.path) != FileIdentity.of_stat(lattice.side.stat):
                raise FormatError(f"{lattice.side.path}: changed since it was opened; rebuild them with {BUILD_HINT}")

    def _words(self, column: str, rows: np.ndarray) -> tuple[Spans, np.ndarray]:
        """The rows' words, and their ids (int64), checked against the words' dictionary."""
        rows = np.asarray(rows, dtype=np.int64)
        words = self.words.column_spans(column, rows)
        ids = take_flat(words.words, words.starts, words.lengths).astype(np.int64)
        known = self._lattices[column].words
        if ids.size and not 0 <= int(ids.min()) <= int(ids.max()) < known:
            self._refuse(column, rows, words, int(np.flatnonzero((ids < 0) | (ids >= known))[0]),
                         f"word id {{}}, expected 0 <= id < {known} (the words' dictionary)", ids)  # fmt: skip
        return words, ids

    def _refuse(self, column: str, rows: np.ndarray, words: Spans, bad: int, what: str, ids: np.ndarray) -> NoReturn:
        """FormatError naming the row that holds word occurrence ``bad`` (``what``: the problem, ``{}`` its id)."""
        row = int(rows[np.searchsorted(np.cumsum(words.lengths), bad, side="right")])
        raise FormatError(f"{self.words.path} split {self.words.split!r} {column} row {row}: "
                          f"{what.format(int(ids[bad]))}; rebuild them with {BUILD_HINT}")  # fmt: skip
