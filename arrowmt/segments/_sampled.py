"""Sampled segmentations (subword regularization): each row of a corpus read in one of ``K`` stored samples.

A corpus converted with a sentencepiece model may hold, beside its usual ids, ``K`` sampled segmentations of every
row (built by :func:`arrowmt.converters.add_sampled_segmentations`). They live in the folder ``sampled/`` of the
corpus, as two ordinary arrowmt folders, so that every integrity check of a corpus applies to them:

* ``sampled/words``: the corpus's splits again, each row the ids of its words (the pieces between two word
  starts, ``▁``) in a dictionary of words (``dict.<lang>.txt``, one symbol per distinct word), ``</s>`` last;
* ``sampled/forms``: each word ``w`` has ``T_w`` draws of sentencepiece's sampler (``min(K * count,
  max_draws)``, ``max_draws`` <= 256), of which ``F_w`` differ (a frequent short word has few segmentations).
  The split ``forms`` holds (per column) the distinct forms, word after word, in pieces of the corpus's
  dictionary extended by every piece a sample uses (``dict.<lang>.txt`` there). The side file
  ``draws.<column>.bin`` (:data:`DRAWS_FORMAT`; header: words, draws, forms) holds the first row of each word's
  forms (uint32, one more for the end), then which of its word's forms each draw is (a byte a draw). Word ids run
  by count, descending, so ``T_w`` never grows with ``w``: the draws are stored in layers, layer ``t`` holding draw
  ``t`` of the ``layers[t]`` words that have more than ``t``, and draw ``t`` of word ``w`` is byte
  ``layer_rows(layers)[t] + w`` of the draws. The manifest records ``layers`` per column
  (``provenance["layers"]``, at most 256 numbers).

In sample ``s`` (0 .. ``K`` - 1) the ``j``-th word of row ``r`` takes draw ``(h(r, j) + s) % T_w``, ``h`` a hash:
each occurrence of a rare word has ``K`` draws of its own, one per sample, and the occurrences of a frequent word
spread over its draws. Reading a row in a sample gathers its words' forms: training reads each epoch from a copy
of the corpus in that epoch's samples (:func:`arrowmt.copies.epoch_copy`), written once.

A sentencepiece model that splits at white space (the default) samples the words of a
sentence independently (its lattice has no piece across a word start), so a row in a sample is a draw of the
sentence's segmentation; :func:`epoch_samples` says which sample each row takes in an epoch.

Both folders record what they were made of (``provenance["segmentation"]``):
the samples, alpha, seed, the model's SHA-256 and the fingerprint of every split of the corpus they were made
from, checked on opening (a corpus converted again is refused until its samples are rebuilt).
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
from arrowmt.files import CheckedArray, SideFile, SideFormat, open_side_file
from arrowmt.format import MANIFEST_NAME, Dictionary, Manifest
from arrowmt.reading import FileIdentity, Spans, exclusive_cumsum, take_flat
from arrowmt.splits import Split

SAMPLED_DIR = "sampled"  # in the corpus folder
WORDS_DIR = "words"
FORMS_DIR = "forms"
FORMS_SPLIT = "forms"
LAYERS_KEY = "layers"  # the forms folder's provenance entry: column -> how many words have more than t draws
DRAWS_NAME = "draws.{column}.bin"  # in the forms folder: which distinct form each draw is, a byte a draw
SEGMENTATION_KEY = "segmentation"  # the provenance entry both folders record
MAX_SAMPLES = 255
LENGTH_BLOCK = 1 << 18  # rows whose lengths are taken at once
MAX_FORMS = 256  # draws of one word at most (a frequent word's occurrences share them): a byte names each one's form
BUILD_HINT = "arrowmt.add_sampled_segmentations(corpus, spm_model, samples=K) (or convert text --spm-samples K)"
DRAWS_FORMAT = SideFormat(  # fields: words, draws, forms, the layers' digest; body: each word's first form (u32), draws
    "draws", b"ARROWMT-DRAWS\x00\x00\x00", 1, "QQQ32s", f"rebuild the samples with {BUILD_HINT}", cache=False
)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # splitmix64's constants
_ROWS = np.uint64(0x632BE59BD9B4E019)  # the key of the rows' hash (any odd constant)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@dataclass(frozen=True)
class Segmentation:
    """How the samples were made: ``samples`` (K) per row, sentencepiece's ``alpha`` and ``nbest_size``, the
    ``sampler`` (``"n-best"``: a unigram model's n best segmentations drawn from the seed, the same in any
    process; ``"dropout"``: a BPE model's, sentencepiece's own, reproducible in one process only), the ``seed``,
    the model's SHA-256, and the fingerprint of each split of the corpus they were made from."""

    samples: int
    alpha: float
    nbest_size: int
    seed: int
    max_draws: int
    sampler: str
    sentencepiece_sha256: str
    corpus: dict[str, str]

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"{self.samples} a row, alpha {self.alpha:g}, nbest_size {self.nbest_size}, seed {self.seed}, "
            f"{self.max_draws} draws of a frequent word, {self.sampler} "
            f"(sentencepiece model {self.sentencepiece_sha256[:12]}...)"
        )

    @classmethod
    def of(cls, manifest: Manifest, where: Path) -> Segmentation:
        """What the manifest of ``where`` (a ``sampled/`` folder) records; FormatError naming what is wrong."""
        entry = manifest.provenance.get(SEGMENTATION_KEY)
        fields = {"samples": int, "alpha": float, "nbest_size": int, "seed": int, "max_draws": int, "sampler": str,
                  "sentencepiece_sha256": str}  # fmt: skip
        if not isinstance(entry, dict) or not isinstance(entry.get("corpus"), dict):
            raise FormatError(f"{where}: manifest provenance[{SEGMENTATION_KEY!r}]: expected an object, got {entry!r}")
        for name, kind in fields.items():
            value = entry.get(name)
            allowed = (int, float) if kind is float else kind  # a float field may be written as an integer
            if not isinstance(value, allowed) or isinstance(value, bool):
                raise FormatError(f"{where}: {SEGMENTATION_KEY}.{name}: expected {kind.__name__}, got {value!r}")
        if not 1 <= entry["samples"] <= MAX_SAMPLES:
            raise FormatError(f"{where}: {SEGMENTATION_KEY}.samples: expected 1..{MAX_SAMPLES}, got {entry['samples']}")
        corpus = {str(k): str(v) for k, v in entry["corpus"].items()}
        return cls(**{name: entry[name] for name in fields}, corpus=corpus)


def sampled_folder(corpus: str | os.PathLike[str]) -> Path:
    """Where a corpus keeps its sampled segmentations."""
    return Path(corpus) / SAMPLED_DIR


def recorded_segmentation(corpus: str | os.PathLike[str]) -> Segmentation | None:
    """What the sampled segmentations of ``corpus`` record (None if it has none), their files not opened."""
    words = sampled_folder(corpus) / WORDS_DIR
    return Segmentation.of(Manifest.load(words), words) if (words / MANIFEST_NAME).is_file() else None


def epoch_samples(seed: int, epoch: int, rows: np.ndarray, samples: int) -> np.ndarray:
    """The sample (0 .. ``samples`` - 1) each of ``rows`` takes in ``epoch``: a hash of (seed, epoch, row),
    the same in every process (int64)."""
    check_integer("samples", samples, 1, MAX_SAMPLES + 1)
    key = np.uint64((int(seed) * 1_000_003 + int(epoch)) % 2**64)
    return (mix64(np.asarray(rows, dtype=np.uint64), key) % np.uint64(samples)).astype(np.int64)


def mix64(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """splitmix64 of ``values + key`` (uint64 in, uint64 out): a cheap hash that spreads consecutive values."""
    with np.errstate(over="ignore"):
        z = values * _MIX + key
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


class SampledSplit:
    """Split ``split`` of the corpus at ``corpus`` read in its sampled segmentations.

    :meth:`spans` and :meth:`lengths` give rows ``rows`` each in its sample (0 .. :attr:`samples` - 1), in pieces
    of :meth:`dictionary` (the corpus's ids, extended); ``</s>`` ends every row as in the corpus.
    """

    def __init__(self, corpus: str | os.PathLike[str] | Split, split: str = "train") -> None:
        self.corpus = corpus if isinstance(corpus, Split) else Split(corpus, split)
        folder = sampled_folder(self.corpus.path)
        if not (folder / WORDS_DIR).is_dir() or not (folder / FORMS_DIR).is_dir():
            raise InvalidParameterError(
                f"segmentation: {self.corpus.path} holds no sampled segmentations ({folder} is missing); build "
                f"them with {BUILD_HINT}"
            )
        self.words = Split(folder / WORDS_DIR, self.corpus.split)
        self.forms = Split(folder / FORMS_DIR, FORMS_SPLIT)
        self.info = Segmentation.of(self.words.manifest, folder / WORDS_DIR)
        self._check_made_from(folder)
        self._draws = self._open_draws()

    def _open_draws(self) -> dict[str, _Draws]:
        folder = sampled_folder(self.corpus.path)
        return {col: _Draws.opened(self.forms, col, self.words.metadata.columns[col].vocab_size, folder)
                for col in self.columns}  # fmt: skip

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the draws files' maps (a DataLoader worker reopens them): their checksums instead."""
        return {**self.__dict__, "_draws": {col: draws.side.crc for col, draws in self._draws.items()}}

    def __setstate__(self, state: dict[str, object]) -> None:
        crcs = state.pop("_draws")
        self.__dict__.update(state)
        self._draws = self._open_draws()
        for col, draws in self._draws.items():
            if draws.side.crc != crcs[col]:  # type: ignore[index]
                raise FormatError(f"{draws.side.path}: replaced since the samples were opened; open them again")

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
    def samples(self) -> int:
        return self.info.samples

    @property
    def columns(self) -> tuple[str, ...]:
        return self.corpus.columns

    def __len__(self) -> int:
        return len(self.corpus)

    def __repr__(self) -> str:
        return f"SampledSplit({str(self.corpus.path)!r}, {self.corpus.split!r}, {self.samples} samples a row)"

    def dictionary(self, column: str) -> Dictionary:
        """The pieces' dictionary: the corpus's, then every piece only a sample uses."""
        return self.forms.dictionary(column)

    def spans(self, column: str, rows: np.ndarray, samples: np.ndarray) -> Spans:
        """Row ``rows[i]`` in its sample ``samples[i]``, gathered into one compact array (int32 pieces)."""
        words, forms = self._forms(column, rows, samples)
        pieces = take_flat(forms.words, forms.starts, forms.lengths)
        lengths = row_sums(forms.lengths, words.lengths)
        return Spans(pieces, exclusive_cumsum(lengths), lengths)

    def lengths(self, column: str, rows: np.ndarray, samples: np.ndarray) -> np.ndarray:
        """The number of pieces (``</s>`` included) of row ``rows[i]`` in its sample ``samples[i]`` (int64),
        ``LENGTH_BLOCK`` rows at a time (an epoch's lengths never hold all its words at once)."""
        rows, samples = np.asarray(rows, dtype=np.int64), np.asarray(samples, dtype=np.int64)
        out = np.empty(rows.shape[0], dtype=np.int64)
        for part in row_blocks(rows.shape[0], LENGTH_BLOCK):
            words, forms = self._forms(column, rows[part], samples[part])
            out[part] = row_sums(forms.lengths, words.lengths)
        return out

    def max_length(self, column: str) -> int:
        """The most pieces (``</s>`` included) a row of ``column`` can take in any sample: each word's longest
        form, summed (what a model's positions must cover)."""
        draws = self._draws[column]
        first = draws.first.slice(0, len(draws.first)).astype(np.int64)
        longest = np.maximum.reduceat(self.forms.lengths(column)[: int(first[-1])], first[:-1])
        most = 0
        for rows in row_blocks(len(self), LENGTH_BLOCK):
            words = self.words.column_spans(column, rows)
            ids = take_flat(words.words, words.starts, words.lengths)
            most = max(most, int(row_sums(longest[ids], words.lengths).max(initial=0)))
        return most

    def fingerprint(self) -> str:
        """Identity of the rows in every sample: the corpus split's, and the samples' files."""
        draws = ":".join(f"{self._draws[col].side.crc:08x}" for col in self.columns)
        text = f"sampled:{self.corpus.fingerprint()}:{self.words.fingerprint()}:{self.forms.fingerprint()}:{draws}"
        return hashlib.sha256(text.encode()).hexdigest()

    def check_unchanged(self) -> None:
        """FormatError if a file of the corpus split or of its samples changed since opening."""
        for split in (self.corpus, self.words, self.forms):
            split.check_unchanged()
        for draws in self._draws.values():
            if FileIdentity.of(draws.side.path) != FileIdentity.of_stat(draws.side.stat):
                raise FormatError(
                    f"{draws.side.path}: changed since it was opened; rebuild the samples with {BUILD_HINT}"
                )

    def _forms(self, column: str, rows: np.ndarray, samples: np.ndarray) -> tuple[Spans, Spans]:
        """The rows' words, and the form of each word the rows' samples give it."""
        rows, samples = np.asarray(rows, dtype=np.int64), np.asarray(samples, dtype=np.int64)
        if samples.shape != rows.shape or (samples.size and not 0 <= samples.min() <= samples.max() < self.samples):
            raise InvalidParameterError(
                f"samples: expected one sample in 0..{self.samples - 1} per row ({rows.shape[0]} rows), "
                f"got shape {samples.shape}"
            )
        words = self.words.column_spans(column, rows)
        ids = take_flat(words.words, words.starts, words.lengths).astype(np.int64)
        draws = self._draws[column]
        words_known = int(draws.layers[0])
        if ids.size and not 0 <= int(ids.min()) <= int(ids.max()) < words_known:
            self._refuse(column, rows, words, np.flatnonzero((ids < 0) | (ids >= words_known))[0],
                         f"word id {{}}, expected 0 <= id < {words_known} (the words' dictionary)", ids)  # fmt: skip
        position = np.arange(ids.shape[0], dtype=np.uint64) - np.repeat(exclusive_cumsum(words.lengths),
                                                                        words.lengths).astype(np.uint64)  # fmt: skip
        occurrence = mix64(position, np.uint64(0)) ^ np.repeat(mix64(rows.astype(np.uint64), _ROWS), words.lengths)
        draw = (occurrence >> np.uint64(33)).astype(np.int64) + np.repeat(samples, words.lengths)
        held = draws.layers.shape[0] - np.searchsorted(draws.layers[::-1], ids, side="right")  # draws of each word
        form = draws.draws.take(draws.rows[draw % held] + ids).astype(np.int64)
        first, end = draws.first.take(ids).astype(np.int64), draws.first.take(ids + 1).astype(np.int64)
        wrong = first + form >= end  # the rows themselves are checked on opening (_Draws.opened)
        if wrong.any():
            bad = int(np.flatnonzero(wrong)[0])
            self._refuse(column, rows, words, bad, f"word {{}} takes form {int(form[bad])} of its "
                         f"{int(end[bad] - first[bad])} in {draws.side.path}", ids)  # fmt: skip
        return words, self.forms.column_spans(column, first + form)

    def _refuse(self, column: str, rows: np.ndarray, words: Spans, bad: int, what: str, ids: np.ndarray) -> NoReturn:
        """FormatError naming the row that holds word occurrence ``bad`` (``what``: the problem, ``{}`` its id)."""
        row = int(rows[np.searchsorted(np.cumsum(words.lengths), bad, side="right")])
        raise FormatError(f"{self.words.path} split {self.words.split!r} {column} row {row}: "
                          f"{what.format(int(ids[bad]))}; rebuild them with {BUILD_HINT}")  # fmt: skip


def row_sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The sum of each row of ``values`` cut into consecutive rows of ``lengths`` (empty rows sum to 0; int64 for
    integers and booleans, float64 for floats)."""
    total = np.zeros(values.shape[0] + 1, dtype=np.result_type(values.dtype, np.int64))
    np.cumsum(values, out=total[1:])
    ends = np.cumsum(lengths, dtype=np.int64)
    return total[ends] - total[ends - lengths]


def layer_rows(layers: np.ndarray) -> np.ndarray:
    """The first row of each layer of forms (int64)."""
    return exclusive_cumsum(np.asarray(layers, dtype=np.int64))


@dataclass(frozen=True)
class _Draws:
    """A column's draws: how many words have more than ``t`` draws (``layers``) and each layer's first byte of the
    draws (``rows``); its side file, the first form row of each word (``first``, checked to rise from 0 to the
    forms on opening), the draws' forms (``draws``)."""

    layers: np.ndarray
    rows: np.ndarray
    side: SideFile
    first: CheckedArray
    draws: CheckedArray

    @classmethod
    def opened(cls, forms: Split, column: str, words: int, folder: Path) -> _Draws:
        """The layers the forms folder records for ``column`` and its draws file, checked (FormatError)."""
        layers = _recorded_layers(forms, column, words, f"{folder / FORMS_DIR}: manifest provenance")
        path = folder / FORMS_DIR / DRAWS_NAME.format(column=column)
        if not os.path.lexists(path):
            raise FormatError(f"{path}: missing (samples made before draws files, or damaged); rebuild them with "
                              f"{BUILD_HINT}")  # fmt: skip
        side = _open_draws(path, words, layers, len(forms))
        used = int(side.values[2])
        _check_filled(forms, column, used, f"{path} (its forms)")
        first = side.array(np.uint32, words + 1, 0)
        starts = first.slice(0, words + 1).astype(np.int64)
        flat = np.flatnonzero(np.diff(starts) < 1)  # a word without a form
        if starts[0] != 0 or starts[-1] != used or flat.size:
            wrong = int(flat[0]) if flat.size else words
            raise FormatError(
                f"{path}: expected each word's first form row rising from 0 to {used} (the forms), got "
                f"{starts[0]} first and {starts[-1]} last, word {wrong} at {starts[wrong]}; rebuild the samples with "
                f"{BUILD_HINT}"
            )
        return cls(layers, layer_rows(layers), side, first, side.array(np.uint8, int(layers.sum()), 4 * (words + 1)))


def _recorded_layers(forms: Split, column: str, words: int, where: str) -> np.ndarray:
    """The draws' layer sizes ``provenance["layers"][column]``: 1 to ``MAX_FORMS`` sizes from ``words`` down."""
    recorded = forms.manifest.provenance.get(LAYERS_KEY)
    sizes = recorded.get(column) if isinstance(recorded, dict) else None
    where = f"{where}[{LAYERS_KEY!r}][{column!r}]"
    if not isinstance(sizes, list) or not all(type(n) is int for n in sizes):
        raise FormatError(f"{where}: expected a list of integers, got {sizes!r}")
    array = np.array(sizes, dtype=np.int64)
    if not 1 <= array.shape[0] <= MAX_FORMS or array[0] != words or (np.diff(array) > 0).any() or array[-1] < 1:
        raise FormatError(f"{where}: expected 1 to {MAX_FORMS} sizes from {words} (the words) down, got {sizes}")
    return array


def layers_digest(layers: np.ndarray) -> bytes:
    """What a draws file records of the layers it was written for (SHA-256 of them as little-endian int64)."""
    return hashlib.sha256(np.asarray(layers, dtype="<i8").tobytes()).digest()


def _open_draws(path: Path, words: int, layers: np.ndarray, rows: int) -> SideFile:
    """A column's draws file: its header counts ``words`` and the draws of the manifest's ``layers`` (and their
    digest), and at most ``rows`` forms (the split's rows); FormatError otherwise."""
    expected = (words, int(layers.sum()), layers_digest(layers))

    def check(side: SideFile) -> None:
        found = tuple(side.values)
        if (found[0], found[1], found[3]) != expected or not 1 <= found[2] <= rows:
            raise FormatError(
                f"{path}: expected {words} words and {expected[1]} draws in the manifest's layers (and their digest), "
                f"1 to {rows} forms (the split's rows), got {found[:3]} (layers digest "
                f"{'equal' if found[3] == expected[2] else 'differs'}); rebuild the samples with {BUILD_HINT}"
            )

    return open_side_file(path, DRAWS_FORMAT, lambda _, fields: 4 * (int(fields[0]) + 1) + int(fields[1]), check)


def _check_filled(forms: Split, column: str, used: int, where: str) -> None:
    """FormatError unless the forms the draws file counts (``used``) are the non-empty rows: every form has at least
    one piece, and the padding after them is empty."""
    for rows in row_blocks(len(forms), LENGTH_BLOCK):
        filled = forms.lengths(column, rows, np.int32) > 0
        wrong = np.flatnonzero(filled != (rows < used))
        if wrong.size:
            row = int(rows[wrong[0]])
            raise FormatError(f"{where}: they count {used} forms, but row {row} of {forms.path} split "
                              f"{forms.split!r} is {'a form' if row >= used else 'empty'}")  # fmt: skip
