"""Build a corpus's sampled segmentations (subword regularization; the layout: :mod:`arrowmt.segments`).

From a corpus converted with a sentencepiece model (``convert text --spm-model``, or ``spm_encode`` then
``fairseq-preprocess``) and that model: each row's pieces are cut into words (a piece starting with ``▁``
starts a word), every distinct word is segmented ``K`` times by sentencepiece's own sampler (``alpha``,
``nbest_size``; BPE models through its dropout) from ``seed``, and the corpus's rows are written again as word ids.

Two passes over each split, ``BLOCK_ROWS`` rows at a time (memory bounded by the words, not the corpus): the first
counts the distinct words, the second writes each row's word ids. Every word must be what the model gives for it
alone (checked for every occurrence): a corpus made with another model, or a model that does not split at white
space, is refused, naming the split, the row and the word. A word holding ``<unk>`` (a piece the corpus's dictionary
dropped) keeps its one segmentation in every sample.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._checks import check_integer
from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._version import __version__
from arrowmt.converters._output import OutputFolder, column, special_ids_of
from arrowmt.converters._text import SentencePieceModel
from arrowmt.files import progress_bar
from arrowmt.format import Dictionary, Manifest
from arrowmt.reading import Ragged, Spans, exclusive_cumsum, flat_positions, take_flat
from arrowmt.segments import (
    FORMS_DIR,
    FORMS_SPLIT,
    LAYERS_KEY,
    MAX_FORMS,
    MAX_SAMPLES,
    SEGMENTATION_KEY,
    WORDS_DIR,
    Segmentation,
    layer_rows,
    row_sums,
    sampled_folder,
)
from arrowmt.splits import Split

WORD_START = "\u2581"  # sentencepiece's ▁
BLOCK_ROWS = 1 << 18
SOURCE_FORMAT = "sampled-segmentation"
DEFAULT_SAMPLES = 8
DEFAULT_ALPHA = 0.1
DRAW_BLOCK = 1 << 20  # words sampled by one call of sentencepiece
MAX_DRAW_CALLS = 4096  # 4096 * DRAW_BLOCK draws at most in a column
MAX_SEED = 2**32 // MAX_DRAW_CALLS - 1  # seed * 4096 + call is sentencepiece's seed of a call: a 32-bit number
DEFAULT_SEED = 1
DEFAULT_MAX_DRAWS = 64  # draws of a frequent word (see add_sampled_segmentations)
MULTI_PAIR_REFUSAL = (
    "sampled segmentations are built for a folder of one pair or one language, not several pairs "
    "(convert each pair to its own folder)"
)
DEFAULT_NBEST = -1  # sample from every segmentation (sentencepiece's own default for sampling)


def add_sampled_segmentations(
    corpus: str | os.PathLike[str],
    spm_model: str | os.PathLike[str],
    *,
    samples: int = DEFAULT_SAMPLES,
    alpha: float = DEFAULT_ALPHA,
    nbest_size: int = DEFAULT_NBEST,
    seed: int = DEFAULT_SEED,
    max_draws: int = DEFAULT_MAX_DRAWS,
    overwrite: bool = False,
    progress: bool = True,
) -> Segmentation:
    """Store ``samples`` sampled segmentations of every row of ``corpus`` in ``corpus/sampled``.

    ``spm_model`` is the sentencepiece model the corpus was segmented with; ``alpha`` and ``nbest_size`` are its
    sampler's (``SentencePieceProcessor.encode(enable_sampling=True, alpha=alpha, nbest_size=nbest_size)``: the
    smoothing of a unigram model, the dropout probability of a BPE model). A word seen ``c`` times is drawn
    ``min(samples * c, max_draws)`` times: each occurrence of a rare word gets a draw of its own in each sample,
    a frequent word's occurrences share ``max_draws`` draws (more follow sentencepiece's distribution more
    closely, and take more room). The corpus's own ids and dictionaries stay as they are. Read the samples with
    ``open_dataset(corpus, split, segmentation="sampled")``.
    ``overwrite`` replaces samples built before.
    """
    options = _SamplingOptions.checked(samples, alpha, nbest_size, seed, max_draws)
    path = Path(corpus)
    manifest = Manifest.load(path)
    if manifest.language_pairs:
        raise InvalidParameterError(f"corpus: {path}: {MULTI_PAIR_REFUSAL}")
    model = SentencePieceModel.load(spm_model)
    out = sampled_folder(path)
    if out.exists() and not overwrite:
        raise InvalidParameterError(f"overwrite: {out} exists (sampled segmentations built before); pass overwrite")
    splits = {name: Split(path, name, manifest) for name in manifest.splits()}
    first = next(iter(splits.values()))
    fingerprints = {name: split.fingerprint() for name, split in splits.items()}
    segmentation = Segmentation(**options.as_options(), sentencepiece_sha256=model.sha256, corpus=fingerprints)
    tables = {col: _column_words(splits, col, model, options, progress) for col in first.columns}
    _write(out, manifest, splits, tables, segmentation, progress)
    return segmentation


def sampling_options(
    samples: int | None, alpha: float, spm_model: object, lang_pairs: object
) -> _SamplingOptions | None:
    """``convert_text``'s ``spm_samples`` and ``spm_alpha``, checked before anything is converted (None: none)."""
    if samples is None:
        return None
    if spm_model is None:
        raise InvalidParameterError(f"spm_samples: expected with spm_model (the model to sample), got {samples}")
    if lang_pairs:
        raise InvalidParameterError(f"spm_samples: {MULTI_PAIR_REFUSAL}")
    return _SamplingOptions.checked(samples, alpha, DEFAULT_NBEST, DEFAULT_SEED, DEFAULT_MAX_DRAWS)


@dataclass(frozen=True)
class _SamplingOptions:
    samples: int
    alpha: float
    nbest_size: int
    seed: int
    max_draws: int

    def as_options(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def checked(
        cls, samples: object, alpha: object, nbest_size: object, seed: object, max_draws: object
    ) -> _SamplingOptions:
        k = check_integer("samples", samples, 1, MAX_SAMPLES)
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1e6:
            raise InvalidParameterError(f"alpha: expected a number > 0, got {alpha!r}")
        nbest = check_integer("nbest_size", nbest_size, -1, 2**31 - 1)
        if nbest in (0, 1):
            raise InvalidParameterError(f"nbest_size: expected -1 (every segmentation) or >= 2, got {nbest}")
        seed = check_integer("seed", seed, 0, MAX_SEED, high_name="2**20 - 1")
        return cls(k, float(alpha), nbest, seed, check_integer("max_draws", max_draws, 1, MAX_FORMS))


# ----- pass 1: the words of one column, and K forms of each ---------------------------------------


@dataclass
class _Words:
    """A column's distinct words (their piece strings) in order of first sight, each one's count and pieces."""

    index: dict[str, int] = field(default_factory=dict)
    counts: list[int] = field(default_factory=list)
    pieces: list[np.ndarray] = field(default_factory=list)

    def add(self, strings: pa.Array, ids: Ragged) -> None:
        """Count the word occurrences ``strings`` (their pieces ``ids``); loops over distinct words only."""
        encoded = pc.dictionary_encode(strings)
        codes = encoded.indices.to_numpy().astype(np.int64)
        if codes.size == 0:
            return
        running = np.maximum.accumulate(codes)
        first = np.flatnonzero(np.r_[True, running[1:] > running[:-1]])  # each distinct word's first occurrence
        counts = np.bincount(codes, minlength=len(encoded.dictionary))
        for word, place, count in zip(encoded.dictionary.to_pylist(), first.tolist(), counts.tolist(), strict=True):
            known = self.index.get(word)
            if known is None:
                self.index[word] = len(self.counts)
                self.counts.append(count)
                self.pieces.append(np.array(ids.row(place)))
            else:
                self.counts[known] += count


@dataclass(frozen=True)
class _ColumnTable:
    """What one column's samples need written: its word dictionary, and the forms of each of its words."""

    words: Dictionary
    forms: Spans  # form t of word w is row layer_rows(layers)[t] + w
    layers: np.ndarray  # how many words have more than t forms, for each t
    pieces: Dictionary  # the corpus's dictionary, extended by the pieces only samples use
    symbols: pa.Array  # the corpus dictionary's symbols (to cut rows into words again)
    tokens: dict[str, int]  # split -> word ids of its rows, </s> included


def _column_words(
    splits: dict[str, Split], col: str, model: SentencePieceModel, options: _SamplingOptions, progress: bool
) -> _ColumnTable:
    first = next(iter(splits.values()))
    dictionary = first.dictionary(col)
    symbols = pa.array(dictionary.symbols, pa.large_string())
    words, tokens = _Words(), dict.fromkeys(splits, 0)
    for name, split in splits.items():
        for block in _blocks(split, col, f"count words {name} {col}", progress):
            cut = _cut(block, symbols, dictionary, split, col)
            words.add(cut.strings, cut.pieces)
            tokens[name] += int(cut.words_per_row.sum()) + len(block)
    rows = sum(len(split) for split in splits.values())
    word_dict = Dictionary.from_counts(pa.array(list(words.index), pa.large_string()), np.array(words.counts), rows,
                                       padding_factor=0)  # fmt: skip
    return _sampled_forms(words, word_dict, dictionary, symbols, tokens, model, options, progress)


@dataclass(frozen=True)
class _Cut:
    strings: pa.Array  # each word occurrence's pieces joined (its symbol in the word dictionary)
    pieces: Ragged  # each word occurrence's piece ids
    words_per_row: np.ndarray  # </s> not counted


def _blocks(split: Split, col: str, desc: str, progress: bool) -> Iterator[Spans]:
    with progress_bar(total=len(split), desc=desc, unit="rows", enabled=progress) as bar:
        for start in range(0, len(split), BLOCK_ROWS):
            rows = np.arange(start, min(start + BLOCK_ROWS, len(split)), dtype=np.int64)
            yield split.column_spans(col, rows).compact()
            bar.update(rows.shape[0])


def _cut(block: Spans, symbols: pa.Array, dictionary: Dictionary, split: Split, col: str) -> _Cut:
    """The words of a block of rows (each row's ``</s>`` left out; a row without one is refused)."""
    ends = block.starts + block.lengths - 1
    bad = np.flatnonzero((block.lengths == 0) | (block.words[np.maximum(ends, 0)] != dictionary.eos))
    if bad.size:
        raise InputDataError(f"{split.path} split {split.split!r} {col}: a row does not end with </s> ({int(bad[0])} "
                             "rows into a block): expected a corpus as fairseq-preprocess writes it")  # fmt: skip
    content = block.lengths - 1
    values = take_flat(block.words, block.starts, content)
    starts_word = pc.starts_with(symbols, WORD_START).to_numpy(zero_copy_only=False)
    row_first = np.zeros(values.shape[0], dtype=bool)
    row_first[exclusive_cumsum(content)[content > 0]] = True
    begins = row_first | starts_word[values]
    word_offsets = np.append(np.flatnonzero(begins), values.shape[0])
    listed = pa.LargeListArray.from_arrays(pa.array(word_offsets), symbols.take(pa.array(values)))
    strings = pc.binary_join(listed, pa.scalar("", pa.large_string()))
    return _Cut(strings, Ragged(word_offsets.astype(np.int64), values), row_sums(begins, content))


def _sampled_forms(
    words: _Words,
    word_dict: Dictionary,
    dictionary: Dictionary,
    symbols: pa.Array,
    tokens: dict[str, int],
    model: SentencePieceModel,
    options: _SamplingOptions,
    progress: bool,
) -> _ColumnTable:
    """The forms of every word: ``min(K * count, max_draws)`` draws of sentencepiece's sampler for a word it
    segments (so that each occurrence, in each of its ``K`` samples, takes a draw of its own unless the word is
    frequent), the corpus's pieces, once, for the others (a word holding a special symbol, such as ``<unk>``)."""
    strings = pa.array(list(words.index), pa.large_string())
    word_ids = word_dict.encode_tokens(strings).astype(np.int64)
    own = Ragged.from_lengths(np.array([p.shape[0] for p in words.pieces], dtype=np.int64),
                              np.concatenate(words.pieces) if words.pieces else np.zeros(0, np.int32))  # fmt: skip
    special = row_sums(own.values < dictionary.nspecial, own.lengths()) > 0
    sampled = np.flatnonzero(~special & (word_ids >= dictionary.nspecial))
    sampled = sampled[np.argsort(word_ids[sampled], kind="stable")]  # drawn in word id order
    draws = np.minimum(np.asarray(word_dict.counts, dtype=np.int64) * options.samples, options.max_draws)
    draws[: dictionary.nspecial] = draws.max(initial=1)  # ids by count, descending: forms never grow with the id
    surfaces = pc.replace_substring(strings.take(pa.array(sampled)), WORD_START, " ")
    processor = model.processor()
    _check_deterministic(_pieces(processor.encode(surfaces.to_pylist(), out_type=str, num_threads=1)), dictionary,
                         own, sampled, strings)  # fmt: skip
    offsets, flat = _draw(processor, surfaces, draws[word_ids[sampled]], options, progress)
    pieces = _extended(dictionary, flat)
    drawn = Ragged(offsets, pieces.encode_tokens(flat).astype(np.int64))
    layers = np.cumsum(np.bincount(draws)[::-1])[::-1][1:]  # layers[t]: words with more than t forms
    forms = _assemble(layer_rows(layers), draws, word_ids, own, sampled, drawn)
    return _ColumnTable(word_dict, forms, layers, pieces, symbols, tokens)


Pieces = tuple[np.ndarray, pa.Array]  # rows of piece strings: offsets (int64) and the flat strings


def _pieces(rows: list[list[str]]) -> Pieces:
    listed = pa.array(rows, pa.large_list(pa.large_string()))
    return listed.offsets.to_numpy().astype(np.int64), listed.flatten()


def _extended(dictionary: Dictionary, used: pa.Array) -> Dictionary:
    """``dictionary`` followed by the pieces of ``used`` it lacks, the most used first (ties in code point order)."""
    _, missing = dictionary.lookup(used)
    counted = pc.value_counts(used.filter(pa.array(missing)))
    symbols = counted.field("values").to_numpy(zero_copy_only=False)
    counts = counted.field("counts").to_numpy()
    order = np.lexsort((symbols, -counts))
    return dictionary.extended(symbols[order].tolist(), counts[order].tolist())


def _check_deterministic(best: Pieces, dictionary: Dictionary, own: Ragged, sampled: np.ndarray,
                         strings: pa.Array) -> None:  # fmt: skip
    """InputDataError unless the model segments each word alone as the corpus does (checked once per word)."""
    offsets, flat = best
    ids, missing = dictionary.lookup(flat)
    ids[missing] = -1
    lengths, theirs = np.diff(offsets), _select(own, sampled)
    differs = lengths != theirs.lengths()
    if not differs.any():
        differs = row_sums(ids != theirs.values, lengths) > 0
    if differs.any():
        k = int(np.flatnonzero(differs)[0])
        word = strings[int(sampled[k])].as_py()
        alone = flat[int(offsets[k]) : int(offsets[k + 1])].to_pylist()
        raise InputDataError(
            f"spm_model: segments the word {word!r} alone as {alone}, but the corpus has it in "
            f"{int(theirs.lengths()[k])} pieces: expected the model the corpus was segmented with, trained to split "
            "at white space (sentencepiece's default)"
        )


def _draw(processor: object, surfaces: pa.Array, draws: np.ndarray, options: _SamplingOptions,
          progress: bool) -> Pieces:  # fmt: skip
    """``draws[i]`` samples of the segmentation of word ``surfaces[i]``, in order, ``DRAW_BLOCK`` words a call:
    the call ``b`` from sentencepiece's seed ``seed * 4096 + b`` (it seeds each call's sampler afresh)."""
    import sentencepiece

    if draws.sum() > MAX_DRAW_CALLS * DRAW_BLOCK:
        raise InvalidParameterError(f"samples: {int(draws.sum())} draws in a column, more than {MAX_DRAW_CALLS} "
                                    f"calls of {DRAW_BLOCK} (fewer samples)")  # fmt: skip
    repeated = surfaces.take(pa.array(np.repeat(np.arange(len(surfaces)), draws)))
    offsets, flats = [np.zeros(1, dtype=np.int64)], []
    with progress_bar(total=len(repeated), desc="sample", unit="words", enabled=progress) as bar:
        for b, start in enumerate(range(0, len(repeated), DRAW_BLOCK)):
            sentencepiece.set_random_generator_seed(options.seed * MAX_DRAW_CALLS + b)
            block = repeated.slice(start, DRAW_BLOCK).to_pylist()
            drawn, flat = _pieces(processor.encode(  # type: ignore[attr-defined]
                block, out_type=str, enable_sampling=True, alpha=options.alpha, nbest_size=options.nbest_size,
                num_threads=1,
            ))  # fmt: skip
            offsets.append(drawn[1:] + offsets[-1][-1])
            flats.append(flat)
            bar.update(len(block))
    return np.concatenate(offsets), pa.concat_arrays(flats) if flats else pa.array([], pa.large_string())


def _assemble(starts: np.ndarray, draws: np.ndarray, word_ids: np.ndarray, own: Ragged, sampled: np.ndarray,
              drawn: Ragged) -> Spans:  # fmt: skip
    """The forms column: form ``t`` of word ``w`` at row ``starts[t] + w``: its draws, or ``draws[w]`` copies of
    its own pieces when it is not sampled (it holds a special symbol); a special symbol's forms are itself."""
    specials = np.arange(min(draws.shape[0], Dictionary.nspecial))
    specials = specials[~np.isin(specials, word_ids)]
    not_sampled = np.ones(word_ids.shape[0], dtype=bool)
    not_sampled[sampled] = False
    kept = word_ids[not_sampled]
    copies = np.repeat(np.arange(kept.shape[0]), draws[kept])
    rows = [_form_rows(starts, specials, draws), _form_rows(starts, kept, draws),
            _form_rows(starts, word_ids[sampled], draws)]  # fmt: skip
    each = np.repeat(specials, draws[specials])
    parts = [Ragged.from_lengths(np.ones_like(each), each), _select(_select(own, not_sampled), copies), drawn]
    return _scatter(int(draws.sum()), rows, parts)


def _form_rows(starts: np.ndarray, words: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """The rows of every form of ``words``, word by word (form ``t`` of word ``w``: ``starts[t] + w``)."""
    t = flat_positions(np.zeros_like(words), draws[words])
    return starts[t] + np.repeat(words, draws[words])


def _select(ragged: Ragged, rows: np.ndarray) -> Ragged:
    """Rows ``rows`` (indices or a mask) of ``ragged``, compact."""
    lengths = ragged.lengths()[rows]
    return Ragged.from_lengths(lengths, take_flat(ragged.values, ragged.offsets[:-1][rows], lengths))


def _scatter(n_rows: int, rows: list[np.ndarray], parts: list[Ragged]) -> Spans:
    """One compact column of ``n_rows`` rows from parts placed at ``rows`` (each row in exactly one part)."""
    lengths = np.zeros(n_rows, dtype=np.int64)
    for where, part in zip(rows, parts, strict=True):
        lengths[where] = part.lengths()
    starts = exclusive_cumsum(lengths)
    values = np.zeros(int(lengths.sum()), dtype=np.int32)
    for where, part in zip(rows, parts, strict=True):
        values[flat_positions(starts[where], part.lengths())] = part.values
    return Spans(values, starts, lengths)


# ----- pass 2: write the rows as word ids, and the forms ------------------------------------------


@dataclass(frozen=True)
class _WordRows:
    """One column of a split as word ids (``</s>`` last), cut block by block: a RowSource for the writer."""

    split: Split
    col: str
    table: _ColumnTable
    tokens: int

    def __len__(self) -> int:
        return len(self.split)

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        for cut in self._cuts(block_rows):
            yield cut.words_per_row + 1

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        eos = self.table.words.eos
        for cut in self._cuts(block_rows):
            ids = self.table.words.encode_tokens(cut.strings)
            lengths = cut.words_per_row + 1
            offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = np.full(int(offsets[-1]), eos, dtype=np.int32)
            values[flat_positions(offsets[:-1], cut.words_per_row)] = ids
            yield Ragged(offsets, values)

    def _cuts(self, block_rows: int) -> Iterator[_Cut]:
        dictionary = self.split.dictionary(self.col)
        for start in range(0, len(self.split), block_rows):
            rows = np.arange(start, min(start + block_rows, len(self.split)), dtype=np.int64)
            block = self.split.column_spans(self.col, rows).compact()
            yield _cut(block, self.table.symbols, dictionary, self.split, self.col)


def _write(out: Path, manifest: Manifest, splits: dict[str, Split], tables: dict[str, _ColumnTable],
           segmentation: Segmentation, progress: bool) -> None:  # fmt: skip
    """Publish ``out/words`` then ``out/forms`` (each whole or not at all; a reader refuses a pair made apart)."""
    provenance = {
        SEGMENTATION_KEY: segmentation.to_json(),
        "converter": "arrowmt.add_sampled_segmentations",
        "arrowmt_version": __version__,
        "sentencepiece_version": _sentencepiece_version(),
    }
    langs = {col: manifest.languages.get(col) for col in tables}
    first = next(iter(splits.values()))
    specials = special_ids_of(first.dictionary(first.columns[0]))
    with OutputFolder.prepare(out / WORDS_DIR, langs, SOURCE_FORMAT, True, progress) as folder:
        names = {col: folder.add_dictionary(langs[col], table.words) for col, table in tables.items()}
        for name, split in splits.items():
            columns = {}
            for col, table in tables.items():
                rows = _WordRows(split, col, table, table.tokens[name])
                columns[col] = column(rows, langs[col], names[col], table.words, f"{split.path} {name} {col}")
            folder.write(name, columns, specials)
        folder.manifest.provenance = dict(provenance)
        folder.finish()
    height = max(len(table.forms) for table in tables.values())
    with OutputFolder.prepare(out / FORMS_DIR, langs, SOURCE_FORMAT, True, progress) as folder:
        forms = {}
        for col, table in tables.items():
            name = folder.add_dictionary(langs[col], table.pieces)
            forms[col] = column(_padded(table.forms, height), langs[col], name, table.pieces, f"forms of {col}")
        folder.write(FORMS_SPLIT, forms, specials)
        layers = {col: table.layers.tolist() for col, table in tables.items()}
        folder.manifest.provenance = {**provenance, LAYERS_KEY: layers}
        folder.finish()


def _padded(forms: Spans, rows: int) -> Ragged:
    """``forms`` as a ragged column of ``rows`` rows (empty rows after its own: the columns of a split have as
    many rows, and one column may have more words than another)."""
    lengths = np.zeros(rows, dtype=np.int64)
    lengths[: len(forms)] = forms.lengths
    return Ragged.from_lengths(lengths, forms.words)


def _sentencepiece_version() -> str:
    import sentencepiece

    return str(sentencepiece.__version__)
