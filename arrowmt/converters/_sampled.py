"""Build a corpus's sampled segmentations (subword regularization; the layout: :mod:`arrowmt.segments`).

From a corpus converted with a sentencepiece model (``convert text --spm-model``, or ``spm_encode`` then
``fairseq-preprocess``) and that model: each row's pieces are cut into words (a piece starting with ``▁``
starts a word), every distinct word is segmented ``K`` times by sentencepiece's own sampler (``alpha``,
``nbest_size``; BPE models through its dropout) from ``seed``, and the corpus's rows are written again as word ids.

Two passes over each split, ``BLOCK_ROWS`` rows at a time (memory bounded by the words, not the corpus): the first
counts the distinct words, the second writes each row's word ids. Every word must be what the model gives for it
alone (checked once per distinct word, at its first occurrence): a corpus made with another model is refused,
naming the word, and so is one whose pieces cross words (a model that does not split at white space). A word
holding ``<unk>`` (a piece the corpus's dictionary dropped) keeps its one segmentation in every sample. The new
samples replace the old ones only once they are whole (a failed build leaves the old ones).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._arrays import row_blocks
from arrowmt._checks import check_integer
from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._version import __version__
from arrowmt.converters._output import OutputFolder, column, special_ids_of
from arrowmt.converters._text import SentencePieceModel
from arrowmt.files import progress_bar, write_side_file
from arrowmt.format import Dictionary, Manifest, SpecialIds
from arrowmt.reading import Ragged, Spans, exclusive_cumsum, flat_positions, take_flat
from arrowmt.segments import (
    DRAWS_FORMAT,
    DRAWS_NAME,
    FORMS_DIR,
    FORMS_SPLIT,
    LAYERS_KEY,
    MAX_FORMS,
    MAX_SAMPLES,
    SEGMENTATION_KEY,
    WORDS_DIR,
    Segmentation,
    layer_rows,
    layers_digest,
    row_sums,
    sampled_folder,
)
from arrowmt.splits import Split

WORD_START = "\u2581"  # sentencepiece's ▁
BLOCK_ROWS = 1 << 18
SOURCE_FORMAT = "sampled-segmentation"
DEFAULT_SAMPLES = 8
DEFAULT_ALPHA = 0.1
DRAW_BLOCK = 1 << 13  # words whose draws are made at once (their n-best lists held in memory)
MAX_DRAW_CALLS = 4096  # a BPE model's draws: sentencepiece's seed of block b is seed * 4096 + b, modulo 2**32
MAX_SEED = 2**31 - 1
DEFAULT_SEED = 1
DEFAULT_MAX_DRAWS = 64  # draws of a frequent word (see add_sampled_segmentations)
MULTI_PAIR_REFUSAL = (
    "sampled segmentations of several pairs need one dictionary for every language and column (a folder made by "
    "convert text --lang-pairs has one)"
)
DEFAULT_NBEST = 64  # draw among the 64 best segmentations of a word (Kudo 2018's l = 64)
MAX_NBEST = 512  # sentencepiece 0.2 refuses more
NBEST, DROPOUT = "n-best", "dropout"  # how words are drawn: a unigram model's n best, a BPE model's dropout
TIE_TOLERANCE = 0.1  # a word's score in a sentence may differ by float32 rounding from its score alone (rows of
# up to about 10,000 pieces: the running score's float32 spacing there is below 0.01 a piece)


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
    options = SamplingOptions.checked(samples, alpha, nbest_size, seed, max_draws)
    path = Path(corpus)
    manifest = Manifest.load(path)
    model = SentencePieceModel.load(spm_model)
    out = sampled_folder(path)
    if out.exists() and not overwrite:
        raise InvalidParameterError(f"overwrite: {out} exists (sampled segmentations built before); pass overwrite")
    splits = {name: Split(path, name, manifest) for name in manifest.splits()}
    fingerprints = {name: split.fingerprint() for name, split in splits.items()}
    sampler = NBEST if nbest_available(model.processor()) else DROPOUT
    if sampler == DROPOUT and not options.alpha < 1:
        raise InvalidParameterError(f"alpha: a BPE model's dropout probability, expected 0 < alpha < 1, got {alpha}")
    segmentation = Segmentation(**options.as_options(), sampler=sampler, sentencepiece_sha256=model.sha256,
                                corpus=fingerprints)  # fmt: skip
    tables = _tables(path, manifest, splits, model, options, progress)
    with _swapped_in(out) as staging:
        _write(staging, manifest, splits, tables, segmentation, progress)
    return segmentation


def _tables(path: Path, manifest: Manifest, splits: dict[str, Split], model: SentencePieceModel,
            options: SamplingOptions, progress: bool) -> dict[str, _ColumnTable]:  # fmt: skip
    """Each column's words and forms: a table per column; with several pairs (one dictionary for every language
    and column), one table for all, so that a language takes the same pieces and ids in every pair and column."""
    columns = next(iter(splits.values())).columns
    if not manifest.language_pairs:
        return {col: _words_table([(name, split, col) for name, split in splits.items()], model, options, progress)
                for col in columns}  # fmt: skip
    sources = [(name, split, col) for name, split in splits.items() for col in columns]
    digests = {split.metadata.columns[col].dictionary_sha256 for _, split, col in sources}
    if len(digests) > 1:
        raise InvalidParameterError(
            f"corpus: {path}: {MULTI_PAIR_REFUSAL}; its columns use {len(digests)} dictionaries (convert its pairs "
            "into one folder each, or into one folder with one dictionary)"
        )
    table = _words_table(sources, model, options, progress)
    return dict.fromkeys(columns, table)


def sampling_options(samples: int | None, alpha: float | None, spm_model: object) -> SamplingOptions | None:
    """``convert_text``'s ``spm_samples`` and ``spm_alpha``, checked before anything is converted (None: none)."""
    if samples is None:
        if alpha is not None:
            raise InvalidParameterError(f"spm_alpha: expected with spm_samples (the samples it shapes), got {alpha}")
        return None
    if not spm_model:
        raise InvalidParameterError(f"spm_samples: expected with spm_model (the model to sample), got {samples}")
    alpha = DEFAULT_ALPHA if alpha is None else alpha
    return SamplingOptions.checked(samples, alpha, DEFAULT_NBEST, DEFAULT_SEED, DEFAULT_MAX_DRAWS)


@dataclass(frozen=True)
class SamplingOptions:
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
    ) -> SamplingOptions:
        k = check_integer("samples", samples, 1, MAX_SAMPLES + 1)
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1e6:
            raise InvalidParameterError(f"alpha: expected a number > 0, got {alpha!r}")
        nbest = check_integer("nbest_size", nbest_size, 2, MAX_NBEST + 1, high_name=str(MAX_NBEST + 1))
        seed = check_integer("seed", seed, 0, MAX_SEED + 1, high_name="2**31")
        return cls(k, float(alpha), nbest, seed, check_integer("max_draws", max_draws, 1, MAX_FORMS + 1))


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
    forms: Spans  # the distinct forms of word w are rows first_forms[w] .. first_forms[w + 1] - 1
    layers: np.ndarray  # how many words have more than t draws, for each t
    first_forms: np.ndarray  # uint32, one more than the words
    draws: np.ndarray  # uint8: draw t of word w, at layer_rows(layers)[t] + w, is its distinct form draws[...]
    pieces: Dictionary  # the corpus's dictionary, extended by the pieces only samples use
    vocabulary: _Vocabulary  # the corpus dictionary's pieces (to cut rows into words again)
    tokens: dict[tuple[str, str], int]  # (split, column) -> word ids of its rows, </s> included


def _words_table(
    sources: list[tuple[str, Split, str]], model: SentencePieceModel, options: SamplingOptions, progress: bool
) -> _ColumnTable:
    """The words and forms of the columns ``sources`` (split name, split, column), all in one dictionary."""
    _, first, col = sources[0]
    vocabulary = _Vocabulary.of(first.dictionary(col))
    symbols = vocabulary.symbols
    across = pc.greater_equal(pc.find_substring(pc.utf8_slice_codeunits(symbols, 1), WORD_START), 0)
    if pc.any(across).as_py():
        piece = symbols.filter(across)[0].as_py()
        raise InputDataError(
            f"spm_model: {first.path} {col} has pieces across words (such as {piece!r}): a model trained with "
            "split_by_whitespace=false; sampled segmentations need one that splits at white space (the default)"
        )
    words, tokens = _Words(), {(name, side): 0 for name, _, side in sources}
    for name, split, side in sources:
        for cut in _cuts(split, side, vocabulary, BLOCK_ROWS, f"count words {name} {side}", progress):
            words.add(cut.strings, cut.pieces)
            tokens[name, side] += int(cut.words_per_row.sum()) + cut.words_per_row.shape[0]
    rows = sum(len(split) for _, split, _ in sources)
    word_dict = Dictionary.from_counts(pa.array(list(words.index), pa.large_string()), np.array(words.counts), rows,
                                       padding_factor=0)  # fmt: skip
    return _sampled_forms(words, word_dict, vocabulary, tokens, model, options, progress)


@dataclass(frozen=True)
class _Cut:
    strings: pa.Array  # each word occurrence's pieces joined (its symbol in the word dictionary)
    pieces: Ragged  # each word occurrence's piece ids
    words_per_row: np.ndarray  # </s> not counted


@dataclass(frozen=True)
class _Vocabulary:
    """A corpus dictionary as the words are cut: its symbols, and which of them start a word."""

    dictionary: Dictionary
    symbols: pa.Array
    starts_word: np.ndarray

    @classmethod
    def of(cls, dictionary: Dictionary) -> _Vocabulary:
        symbols = pa.array(dictionary.symbols, pa.large_string())
        return cls(dictionary, symbols, pc.starts_with(symbols, WORD_START).to_numpy(zero_copy_only=False))


def _cuts(
    split: Split, col: str, vocabulary: _Vocabulary, block_rows: int, desc: str, progress: bool
) -> Iterator[_Cut]:
    """The words of ``col`` of ``split``, ``block_rows`` rows at a time."""
    with progress_bar(total=len(split), desc=desc, unit="rows", enabled=progress) as bar:
        for rows in row_blocks(len(split), block_rows):
            yield _cut(split.column_spans(col, rows).compact(), int(rows[0]), vocabulary, split, col)
            bar.update(rows.shape[0])


def _cut(block: Spans, first: int, vocabulary: _Vocabulary, split: Split, col: str) -> _Cut:
    """The words of the rows ``first`` on (each row's ``</s>`` left out; a row without one is refused)."""
    ends = block.starts + block.lengths - 1
    bad = np.flatnonzero((block.lengths == 0) | (block.words[np.maximum(ends, 0)] != vocabulary.dictionary.eos))
    if bad.size:
        raise InputDataError(f"{split.path} split {split.split!r} {col} row {first + int(bad[0])}: expected a row "
                             "ending with </s> (a corpus as fairseq-preprocess writes it)")  # fmt: skip
    content = block.lengths - 1
    values = take_flat(block.words, block.starts, content)
    row_first = np.zeros(values.shape[0], dtype=bool)
    row_first[exclusive_cumsum(content)[content > 0]] = True
    begins = row_first | vocabulary.starts_word[values]
    word_offsets = np.append(np.flatnonzero(begins), values.shape[0])
    listed = pa.LargeListArray.from_arrays(pa.array(word_offsets), vocabulary.symbols.take(pa.array(values)))
    strings = pc.binary_join(listed, pa.scalar("", pa.large_string()))
    return _Cut(strings, Ragged(word_offsets.astype(np.int64), values), row_sums(begins, content))


def _sampled_forms(
    words: _Words,
    word_dict: Dictionary,
    vocabulary: _Vocabulary,
    tokens: dict[tuple[str, str], int],
    model: SentencePieceModel,
    options: SamplingOptions,
    progress: bool,
) -> _ColumnTable:
    """The forms of every word: ``min(K * count, max_draws)`` draws of sentencepiece's sampler for a word it
    segments (so that each occurrence, in each of its ``K`` samples, takes a draw of its own unless the word is
    frequent), the corpus's pieces, once, for the others (a word holding a special symbol, such as ``<unk>``)."""
    dictionary = vocabulary.dictionary
    strings = pa.array(list(words.index), pa.large_string())
    word_ids = word_dict.encode_tokens(strings).astype(np.int64)
    own = Ragged.from_lengths(np.array([p.shape[0] for p in words.pieces], dtype=np.int64),
                              np.concatenate(words.pieces) if words.pieces else np.zeros(0, np.int32))  # fmt: skip
    special = row_sums(own.values < dictionary.nspecial, own.lengths()) > 0
    sampled = np.flatnonzero(~special & (word_ids >= dictionary.nspecial))
    sampled = sampled[np.argsort(word_ids[sampled], kind="stable")]  # drawn in word id order
    draws = np.minimum(np.asarray(word_dict.counts, dtype=np.int64) * options.samples, options.max_draws)
    draws[: dictionary.nspecial] = draws.max(initial=1)  # ids by count, descending: draws never grow with the id
    surfaces = pc.replace_substring(strings.take(pa.array(sampled)), WORD_START, " ")
    processor = model.processor()
    scores = _piece_scores(processor) if nbest_available(processor) else None  # None: BPE, no n-best
    best = _pieces(processor.encode(surfaces.to_pylist(), out_type=str, num_threads=1))
    check_deterministic(best, Segmenter(processor, dictionary, scores), own, sampled, strings)
    offsets, flat = _draw(processor, scores, surfaces, draws[word_ids[sampled]], options, progress)
    pieces = _extended(dictionary, flat)
    drawn = Ragged(offsets, pieces.encode_tokens(flat).astype(np.int64))
    layers = _layers_of(draws)
    distinct, first, which = _deduplicated(_assemble(layer_rows(layers), draws, word_ids, own, sampled, drawn), layers)
    return _ColumnTable(word_dict, distinct, layers, first, which, pieces, vocabulary, tokens)


def _layers_of(counts: np.ndarray) -> np.ndarray:
    """How many of ``counts`` (each >= 1) exceed ``t``, for ``t`` = 0 .. max - 1: the layer sizes of the draws of
    words whose ids run by count, descending."""
    return np.cumsum(np.bincount(counts)[::-1])[::-1][1:]


def _deduplicated(drawn: Spans, layers: np.ndarray) -> tuple[Spans, np.ndarray, np.ndarray]:
    """The distinct forms of each word, word after word (in the order of their first draws), the first row of each
    word's (uint32, one more for the end), and which of its word's distinct forms each draw is (uint8, in the
    draws' layers: draw ``t`` of word ``w`` is row ``layer_rows(layers)[t] + w`` of ``drawn``). A frequent short
    word drawn 64 times may have only a few segmentations."""
    word = flat_positions(np.zeros(layers.shape[0], dtype=np.int64), layers)  # each draw's word, layer by layer
    codes = pc.dictionary_encode(_form_keys(word, drawn)).indices.to_numpy().astype(np.int64)
    by_code = np.argsort(codes, kind="stable")
    sorted_codes = codes[by_code]
    group = np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]
    first = np.empty(int(group.sum()), dtype=np.int64)
    first[sorted_codes[group]] = by_code[group]  # each distinct (word, form)'s first draw, by code
    owner = word[first]
    counts = np.bincount(owner, minlength=int(layers[0]))
    order = np.lexsort((first, owner))  # by word, then by first draw (layer t before t + 1): the forms' rows
    starts = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    local = np.empty(first.shape[0], dtype=np.int64)
    local[order] = np.arange(first.shape[0]) - starts[owner[order]]
    kept = first[order]
    distinct = Spans(drawn.words, drawn.starts[kept], drawn.lengths[kept]).compact()
    return distinct, starts.astype(np.uint32), local[codes].astype(np.uint8)


def _form_keys(word: np.ndarray, drawn: Spans) -> pa.Array:
    """Each draw as bytes: its word's id, then its pieces (int32 each): equal keys, equal forms of one word."""
    lengths = drawn.lengths.astype(np.int64) + 1
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.empty(int(offsets[-1]), dtype=np.int32)
    values[offsets[:-1]] = word
    values[flat_positions(offsets[:-1] + 1, drawn.lengths)] = take_flat(drawn.words, drawn.starts, drawn.lengths)
    buffers = [None, pa.py_buffer(offsets * 4), pa.py_buffer(values)]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), lengths.shape[0], buffers)


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


@dataclass(frozen=True)
class Segmenter:
    """The model as the check of a corpus's words sees it: its processor, the corpus's dictionary, and (a unigram
    model) each piece's score."""

    processor: Any
    dictionary: Dictionary
    scores: np.ndarray | None


def _segmentation_scores(processor: Any, piece_scores: np.ndarray, pieces: pa.Array,
                         lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Each segmentation's score (pieces ``pieces``, ``lengths`` a segmentation: the sum of their log
    probabilities), and whether it holds a piece the model maps to ``<unk>``."""
    ids = np.array(processor.piece_to_id(pieces.to_pylist()), dtype=np.int64)
    return row_sums(piece_scores[ids], lengths), row_sums(ids == processor.unk_id(), lengths) > 0


def check_deterministic(best: Pieces, model: Segmenter, own: Ragged, sampled: np.ndarray, strings: pa.Array) -> None:
    """InputDataError unless the model segments each word alone as the corpus does (checked once per word, at its
    first occurrence). A unigram model's segmentation of a sentence sums scores in float32, so in a long sentence a
    word may take another segmentation of nearly the same score than alone: within ``TIE_TOLERANCE``, accepted."""
    offsets, flat = best
    ids, missing = model.dictionary.lookup(flat)
    ids[missing] = -1
    lengths, theirs = np.diff(offsets), _select(own, sampled)
    differs = lengths != theirs.lengths()
    same = np.flatnonzero(~differs)
    mine = take_flat(ids, offsets[:-1][same], lengths[same])
    differs[same] = row_sums(mine != take_flat(theirs.values, theirs.offsets[:-1][same], lengths[same]),
                             lengths[same]) > 0  # fmt: skip
    if differs.any() and model.scores is not None:
        k = np.flatnonzero(differs)
        corpus = _select(theirs, k)
        symbols = pa.array(model.dictionary.symbols, pa.large_string()).take(pa.array(corpus.values))
        alone = flat.take(pa.array(flat_positions(offsets[:-1][k], lengths[k])))
        best, best_unknown = _segmentation_scores(model.processor, model.scores, alone, lengths[k])
        score, unknown = _segmentation_scores(model.processor, model.scores, symbols, corpus.lengths())
        low = np.where(best_unknown, -np.inf, best - TIE_TOLERANCE)  # a piece the model lacks scores -inf
        differs[k] = np.where(unknown, -np.inf, score) < low
    if differs.any():
        k = int(np.flatnonzero(differs)[0])
        word = strings[int(sampled[k])].as_py()
        alone = flat[int(offsets[k]) : int(offsets[k + 1])].to_pylist()
        raise InputDataError(
            f"spm_model: segments the word {word!r} alone as {alone}, but the corpus has it in "
            f"{int(theirs.lengths()[k])} pieces: expected the model the corpus was segmented with, trained to split "
            "at white space (sentencepiece's default)"
        )


def _draw(processor: Any, scores: np.ndarray | None, surfaces: pa.Array, draws: np.ndarray, options: SamplingOptions,
          progress: bool) -> Pieces:  # fmt: skip
    """``draws[i]`` draws of the segmentation of word ``surfaces[i]``, in order, ``DRAW_BLOCK`` words at a time
    (``scores``: a unigram model's piece scores, :func:`_piece_scores`; None for a BPE model).

    A unigram model: sentencepiece's ``nbest_size`` best segmentations of each word, one drawn in proportion to
    ``exp(alpha * score)`` (its sampler's rule for ``nbest_size`` > 1; a segmentation's score is the sum of its
    pieces' log probabilities) by numpy's PCG64 from ``(seed, block)``: the same in every process. A BPE model
    (no n-best): sentencepiece's own dropout, its seed set per call, which sentencepiece 0.2 does not reproduce in
    another process (recorded: ``reproducible`` false).
    """
    offsets, flats = [np.zeros(1, dtype=np.int64)], []
    with progress_bar(total=int(draws.sum()), desc="sample", unit="draws", enabled=progress) as bar:
        for b, start in enumerate(range(0, len(surfaces), DRAW_BLOCK)):
            block, counts = surfaces.slice(start, DRAW_BLOCK).to_pylist(), draws[start : start + DRAW_BLOCK]
            if scores is None:
                drawn, flat = _draw_dropout(processor, block, counts, options, b)
            else:
                drawn, flat = _draw_nbest(processor, scores, block, counts, options, b)
            offsets.append(drawn[1:] + offsets[-1][-1])
            flats.append(flat)
            bar.update(int(counts.sum()))
    return np.concatenate(offsets), pa.concat_arrays(flats) if flats else pa.array([], pa.large_string())


def nbest_available(processor: Any) -> bool:
    """Whether the model gives n-best segmentations (unigram: yes; BPE: no)."""
    try:
        processor.nbest_encode(["a"], nbest_size=2, out_type=str)
    except RuntimeError:
        return False
    return True


def _draw_nbest(processor: Any, piece_scores: np.ndarray, words: list[str], counts: np.ndarray,
                options: SamplingOptions, block: int) -> Pieces:  # fmt: skip
    """``counts[i]`` draws among the n best segmentations of ``words[i]`` (see :func:`_draw`; ``piece_scores``:
    :func:`_piece_scores`)."""
    listed = pa.array(processor.nbest_encode(words, nbest_size=options.nbest_size, out_type=str),
                      pa.large_list(pa.large_list(pa.large_string())))  # fmt: skip
    per_word = np.diff(listed.offsets.to_numpy())  # candidates of each word
    candidates = listed.flatten()
    piece_offsets, pieces = candidates.offsets.to_numpy().astype(np.int64), candidates.flatten()
    score, _ = _segmentation_scores(processor, piece_scores, pieces, np.diff(piece_offsets))  # of each candidate
    weight = np.exp(options.alpha * (score - np.repeat(_group_max(score, per_word), per_word)))
    cumulative = np.cumsum(weight)
    before = np.concatenate([[0.0], cumulative])[np.repeat(exclusive_cumsum(per_word), per_word)]
    word_total = np.repeat(row_sums(weight, per_word), per_word)
    within = (cumulative - before) / word_total + np.repeat(np.arange(len(words)), per_word)  # word i: (i, i + 1]
    rng = np.random.Generator(np.random.PCG64([options.seed, block]))
    wanted = np.repeat(np.arange(len(words)), counts) + rng.random(int(counts.sum()))
    chosen = np.minimum(np.searchsorted(within, wanted, side="right"), np.repeat(exclusive_cumsum(per_word) +
                                                                                 per_word - 1, counts))  # fmt: skip
    lengths = np.diff(piece_offsets)[chosen]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return offsets, pieces.take(pa.array(flat_positions(piece_offsets[:-1][chosen], lengths)))


def _group_max(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The maximum of each non-empty group of consecutive ``values`` (``lengths`` of them): a softmax's shift."""
    return np.maximum.reduceat(values, exclusive_cumsum(lengths)) if values.size else values


def _piece_scores(processor: Any) -> np.ndarray:
    """Each piece's log probability (unknown characters: 0, the same in every segmentation of a word)."""
    return np.array([processor.get_score(i) for i in range(processor.get_piece_size())], dtype=np.float64)


def _draw_dropout(processor: Any, words: list[str], counts: np.ndarray, options: SamplingOptions,
                  block: int) -> Pieces:  # fmt: skip
    """``counts[i]`` draws of sentencepiece's BPE-dropout of ``words[i]`` (see :func:`_draw`)."""
    import sentencepiece

    sentencepiece.set_random_generator_seed((options.seed * MAX_DRAW_CALLS + block) % 2**32)
    repeated = [word for word, count in zip(words, counts.tolist(), strict=True) for _ in range(count)]
    return _pieces(processor.encode(repeated, out_type=str, enable_sampling=True, alpha=options.alpha, num_threads=1))


def _assemble(starts: np.ndarray, draws: np.ndarray, word_ids: np.ndarray, own: Ragged, sampled: np.ndarray,
              drawn: Ragged) -> Spans:  # fmt: skip
    """Every draw: draw ``t`` of word ``w`` at row ``starts[t] + w``: sentencepiece's, or ``draws[w]`` copies of
    its own pieces when it is not sampled (it holds a special symbol); a special symbol's draws are itself."""
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
        for cut in _cuts(self.split, self.col, self.table.vocabulary, block_rows, "", False):
            yield cut.words_per_row + 1

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        eos = self.table.words.eos
        for cut in _cuts(self.split, self.col, self.table.vocabulary, block_rows, "", False):
            ids = self.table.words.encode_tokens(cut.strings)
            lengths = cut.words_per_row + 1
            offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = np.full(int(offsets[-1]), eos, dtype=np.int32)
            values[flat_positions(offsets[:-1], cut.words_per_row)] = ids
            yield Ragged(offsets, values)


@contextmanager
def _swapped_in(out: Path) -> Iterator[Path]:
    """A staging folder beside ``out`` to write into; on success it replaces ``out`` (two renames, the previous
    samples removed after), on any failure it is removed and ``out`` is as it was."""
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    try:
        yield staging
        old = out.with_name(f".{out.name}.old-{os.getpid()}-{staging.name[-8:]}")
        if out.exists():
            os.replace(out, old)
        os.replace(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write(out: Path, manifest: Manifest, splits: dict[str, Split], tables: dict[str, _ColumnTable],
           segmentation: Segmentation, progress: bool) -> None:  # fmt: skip
    """Write ``out/words`` and ``out/forms`` (``out``: a staging folder, swapped in whole)."""
    provenance = {
        SEGMENTATION_KEY: segmentation.to_json(),
        "converter": "arrowmt.add_sampled_segmentations",
        "arrowmt_version": __version__,
        "sentencepiece_version": _sentencepiece_version(),
    }
    langs = {col: manifest.languages.get(col) for col in tables}  # None with several pairs: each split names its own
    first = next(iter(splits.values()))
    specials = special_ids_of(first.dictionary(first.columns[0]))
    with OutputFolder.prepare(out / WORDS_DIR, langs, SOURCE_FORMAT, True, progress) as folder:
        names = _write_words(folder, splits, tables, specials)
        folder.manifest.provenance = dict(provenance)
        if manifest.language_pairs:  # its splits are the corpus's
            folder.manifest.language_pairs = manifest.language_pairs
        folder.finish()
    with OutputFolder.prepare(out / FORMS_DIR, langs, SOURCE_FORMAT, True, progress) as folder:
        _write_forms(folder, tables, langs, specials)
        for lang in names if manifest.language_pairs else ():  # one for every language: the pairs share the table
            folder.add_dictionary(lang, next(iter(tables.values())).pieces)
        layers = {col: table.layers.tolist() for col, table in tables.items()}
        folder.manifest.provenance = {**provenance, LAYERS_KEY: layers}
        folder.finish()


def _write_words(folder: OutputFolder, splits: dict[str, Split], tables: dict[str, _ColumnTable],
                 specials: SpecialIds) -> dict[str | None, str]:  # fmt: skip
    """Every split again as word ids, in a words dictionary per language; returns language -> its file name."""
    names: dict[str | None, str] = {}
    for name, split in splits.items():
        columns = {}
        for col, table in tables.items():
            lang = split.metadata.languages.get(col)
            if lang not in names:
                names[lang] = folder.add_dictionary(lang, table.words)
            rows = _WordRows(split, col, table, table.tokens[name, col])
            columns[col] = column(rows, lang, names[lang], table.words, f"{split.path} {name} {col}")
        folder.write(name, columns, specials)
    return names


def _write_forms(folder: OutputFolder, tables: dict[str, _ColumnTable], langs: dict[str, str | None],
                 specials: SpecialIds) -> None:  # fmt: skip
    """The split of every word's distinct forms (a column a table) and each column's draws file."""
    height = max(len(table.forms) for table in tables.values())
    forms = {}
    for col, table in tables.items():
        name = folder.add_dictionary(langs[col], table.pieces)
        forms[col] = column(_padded(table.forms, height), langs[col], name, table.pieces, f"forms of {col}")
    folder.write(FORMS_SPLIT, forms, specials)
    for col, table in tables.items():
        header = (int(table.layers[0]), int(table.draws.shape[0]), len(table.forms), layers_digest(table.layers))
        name = DRAWS_NAME.format(column=col)
        write_side_file(folder.path / name, DRAWS_FORMAT, header, [table.first_forms, table.draws])
        folder.side_files.append(name)


def _padded(forms: Spans, rows: int) -> Ragged:
    """``forms`` as a ragged column of ``rows`` rows (empty rows after its own: the columns of a split have as
    many rows, and one column may have more words than another)."""
    lengths = np.zeros(rows, dtype=np.int64)
    lengths[: len(forms)] = forms.lengths
    return Ragged.from_lengths(lengths, forms.words)


def _sentencepiece_version() -> str:
    import sentencepiece

    return str(sentencepiece.__version__)
