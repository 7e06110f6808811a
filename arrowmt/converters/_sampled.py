"""Build a corpus's sampled segmentations (subword regularization; the layout: :mod:`arrowmt.segments`).

From a corpus converted with a sentencepiece model (``convert text --spm-model``, or ``spm_encode`` then
``fairseq-preprocess``) and that model: each row's pieces are cut into words (a piece starting with ``▁``
starts a word), every distinct word's lattice is built once (:mod:`arrowmt.converters._lattices`: every
segmentation of the word a unigram model has, with its score; a BPE model's pool of dropout draws), and the corpus's
rows are written again as word ids. Reading draws each occurrence afresh every epoch from its word's law.

Two passes over each split, ``BLOCK_ROWS`` rows at a time (memory bounded by the words, not the corpus): the first
counts the distinct words, the second writes each row's word ids. Every word must be what the model gives for it
alone (checked once per distinct word, at its first occurrence): a corpus made with another model is refused,
naming the word, and so is one whose pieces cross words (a model that does not split at white space). A word
holding ``<unk>`` (a piece the corpus's dictionary dropped) keeps its one segmentation. The new samples replace the
old ones only once they are whole (a failed build leaves the old ones).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._arrays import row_blocks
from arrowmt._checks import check_integer
from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._version import __version__
from arrowmt.converters._lattices import (
    MAX_NODES,
    Edges,
    concatenated,
    placed,
    pool_edges,
    too_many_nodes,
    unigram_edges,
)
from arrowmt.converters._output import OutputFolder, column, special_ids_of
from arrowmt.converters._text import SentencePieceModel
from arrowmt.files import progress_bar, write_side_file
from arrowmt.format import Dictionary, Manifest, SpecialIds
from arrowmt.reading import Ragged, Spans, exclusive_cumsum, flat_positions, take_flat
from arrowmt.segments import (
    FORMS_DIR,
    FORMS_SPLIT,
    LATTICE,
    LATTICE_FORMAT,
    LATTICE_NAME,
    POOL,
    SEGMENTATION_KEY,
    WORDS_DIR,
    Segmentation,
    check_alpha,
    record_digest,
    row_sums,
    sampled_folder,
)
from arrowmt.splits import Split

WORD_START = "\u2581"  # sentencepiece's ▁
BLOCK_ROWS = 1 << 18
SOURCE_FORMAT = "sampled-segmentation"
DEFAULT_ALPHA = 0.1
MAX_SEED = 2**31 - 1
DEFAULT_SEED = 1
DEFAULT_POOL = 256  # a BPE model's dropout draws of each word (their distinct forms are its law)
MAX_POOL = 4096
POOL_BLOCK = 1 << 12  # words whose pools are drawn at once
MULTI_PAIR_REFUSAL = (
    "sampled segmentations of several pairs need one dictionary for every language and column (a folder made by "
    "convert text --lang-pairs has one)"
)
TIE_TOLERANCE = 0.1  # a word's score in a sentence may differ by float32 rounding from its score alone (rows of
# up to about 10,000 pieces: the running score's float32 spacing there is below 0.01 a piece)


def add_sampled_segmentations(
    corpus: str | os.PathLike[str],
    spm_model: str | os.PathLike[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    seed: int = DEFAULT_SEED,
    pool: int = DEFAULT_POOL,
    overwrite: bool = False,
    progress: bool = True,
) -> Segmentation:
    """Store the lattices of every distinct word of ``corpus`` in ``corpus/sampled``, so that each epoch draws every
    row's segmentation afresh (read with ``open_dataset(corpus, split, segmentation="sampled")``).

    ``spm_model`` is the sentencepiece model the corpus was segmented with. A unigram model's lattices hold every
    segmentation of each word, so reading draws from sentencepiece's own law for ``encode(enable_sampling=True,
    alpha=alpha, nbest_size=-1)``; ``alpha`` recorded here is the readers' default, and each reader may give
    another. A BPE model (sentencepiece's BPE-dropout, ``alpha`` its dropout probability, fixed here) stores a pool
    of ``pool`` dropout draws per word, whose law reading draws from. ``seed`` is the draws' default seed. The
    corpus's own ids and dictionaries stay as they are. ``overwrite`` replaces samples built before.
    """
    options = SamplingOptions.checked(alpha, seed, pool)
    path = Path(corpus)
    manifest = Manifest.load(path)
    model = SentencePieceModel.load(spm_model)
    sampler = model_sampler(model.processor(), str(spm_model), options.alpha)
    out = sampled_folder(path)
    if out.exists() and not overwrite:
        raise InvalidParameterError(f"overwrite: {out} exists (sampled segmentations built before); pass overwrite")
    splits = {name: Split(path, name, manifest) for name in manifest.splits()}
    fingerprints = {name: split.fingerprint() for name, split in splits.items()}
    segmentation = Segmentation(alpha=options.alpha, seed=options.seed, sampler=sampler,
                                pool=options.pool if sampler == POOL else 0, sentencepiece_sha256=model.sha256,
                                corpus=fingerprints)  # fmt: skip
    tables = _tables(path, manifest, splits, model, segmentation, progress)
    with _swapped_in(out) as staging:
        _write(staging, manifest, splits, tables, segmentation, progress)
    return segmentation


def model_sampler(processor: Any, where: str, alpha: float) -> str:
    """How a model's words are sampled: ``"lattice"`` (a unigram model), ``"pool"`` (a BPE model, ``alpha`` its
    dropout probability, below 1); InvalidParameterError naming ``where`` for a model that cannot sample."""
    if nbest_available(processor):
        return LATTICE
    try:
        processor.encode("ab", out_type=str, enable_sampling=True, alpha=0.5)
    except RuntimeError as exc:
        raise InvalidParameterError(
            f"spm_model: {where} cannot sample segmentations (a char or word model: sentencepiece says "
            f"{str(exc).strip().splitlines()[-1]!r}); expected a unigram or BPE model"
        ) from exc
    if not alpha < 1:
        raise InvalidParameterError(f"alpha: a BPE model's dropout probability, expected 0 < alpha < 1, got {alpha}")
    return POOL


def check_model(spm_model: str, alpha: float) -> None:
    """Refuse, before anything is converted, a model :func:`add_sampled_segmentations` would refuse (it cannot
    sample, or it has pieces across words)."""
    processor = SentencePieceModel.load(spm_model).processor()
    model_sampler(processor, spm_model, alpha)
    symbols = pa.array([processor.id_to_piece(i) for i in range(processor.get_piece_size())], pa.large_string())
    _refuse_pieces_across_words(symbols, spm_model)


def _tables(path: Path, manifest: Manifest, splits: dict[str, Split], model: SentencePieceModel,
            segmentation: Segmentation, progress: bool) -> dict[str, _ColumnTable]:  # fmt: skip
    """Each column's words and lattices: a table per column; with several pairs (one dictionary for every language
    and column), one table for all, so that a language takes the same pieces and ids in every pair and column."""
    columns = next(iter(splits.values())).columns
    if not manifest.language_pairs:
        tables = {col: _words_table([(name, split, col) for name, split in splits.items()], model, segmentation,
                                    progress) for col in columns}  # fmt: skip
        return _sharing_dictionaries(tables)
    sources = [(name, split, col) for name, split in splits.items() for col in columns]
    digests = {split.metadata.columns[col].dictionary_sha256 for _, split, col in sources}
    if len(digests) > 1:
        raise InvalidParameterError(
            f"corpus: {path}: {MULTI_PAIR_REFUSAL}; its columns use {len(digests)} dictionaries (convert its pairs "
            "into one folder each, or into one folder with one dictionary)"
        )
    table = _words_table(sources, model, segmentation, progress)
    return dict.fromkeys(columns, table)


def _sharing_dictionaries(tables: dict[str, _ColumnTable]) -> dict[str, _ColumnTable]:
    """The columns that share the corpus's dictionary (``--joined-dictionary``) share the samples' too: one
    extension by the pieces either column's lattices use (a model that shares its embeddings keeps one vocabulary)."""
    first = next(iter(tables.values()))
    if len(tables) < 2 or any(t.vocabulary.dictionary.symbols != first.vocabulary.dictionary.symbols
                              for t in tables.values()):  # fmt: skip
        return tables
    used = {col: _edge_symbols(t) for col, t in tables.items()}
    pieces = _extended(first.vocabulary.dictionary, pa.concat_arrays(list(used.values())))
    ids = {col: pieces.encode_tokens(symbols).astype(np.int32) for col, symbols in used.items()}
    return {col: replace(t, pieces=pieces, edges=Ragged(t.edges.offsets, ids[col])) for col, t in tables.items()}


def _edge_symbols(table: _ColumnTable) -> pa.Array:
    """``table``'s edge pieces as strings."""
    return pa.array(table.pieces.symbols, pa.large_string()).take(pa.array(table.edges.values))


def sampling_options(sampling: bool, alpha: float | None, spm_model: object) -> SamplingOptions | None:
    """``convert_text``'s ``spm_sampling`` and ``spm_alpha``, checked before anything is converted (None: none)."""
    if not sampling:
        if alpha is not None:
            raise InvalidParameterError(f"spm_alpha: expected with spm_sampling (the sampling it shapes), got {alpha}")
        return None
    if not spm_model:
        raise InvalidParameterError("spm_sampling: expected with spm_model (the model to sample), got none")
    return SamplingOptions.checked(DEFAULT_ALPHA if alpha is None else alpha, DEFAULT_SEED, DEFAULT_POOL)


@dataclass(frozen=True)
class SamplingOptions:
    alpha: float
    seed: int
    pool: int

    def as_options(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def checked(cls, alpha: object, seed: object, pool: object) -> SamplingOptions:
        alpha = check_alpha("alpha", alpha)
        seed = check_integer("seed", seed, 0, MAX_SEED + 1, high_name="2**31")
        return cls(alpha, seed, check_integer("pool", pool, 1, MAX_POOL + 1))


# ----- pass 1: the words of one column, and the lattice of each -----------------------------------


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
    """What one column's samples need written: its word dictionary, and the lattice of each of its words."""

    words: Dictionary
    pieces: Dictionary  # the corpus's dictionary, extended by the pieces only samples use
    edges: Ragged  # word w's edges' pieces (ids of ``pieces``): row w
    begin: np.ndarray  # uint16 per edge
    end: np.ndarray  # uint16 per edge
    score: np.ndarray  # float32 per edge
    vocabulary: _Vocabulary  # the corpus dictionary's pieces (to cut rows into words again)
    tokens: dict[tuple[str, str], int]  # (split, column) -> word ids of its rows, </s> included


def _words_table(
    sources: list[tuple[str, Split, str]], model: SentencePieceModel, segmentation: Segmentation, progress: bool
) -> _ColumnTable:
    """The words and lattices of the columns ``sources`` (split name, split, column), all in one dictionary."""
    _, first, col = sources[0]
    vocabulary = _Vocabulary.of(first.dictionary(col))
    _refuse_pieces_across_words(vocabulary.symbols, f"{first.path} {col}")
    words, tokens = _Words(), {(name, side): 0 for name, _, side in sources}
    for name, split, side in sources:
        for cut in _cuts(split, side, vocabulary, BLOCK_ROWS, f"count words {name} {side}", progress):
            words.add(cut.strings, cut.pieces)
            tokens[name, side] += int(cut.words_per_row.sum()) + cut.words_per_row.shape[0]
    rows = sum(len(split) for _, split, _ in sources)
    word_dict = Dictionary.from_counts(pa.array(list(words.index), pa.large_string()), np.array(words.counts), rows,
                                       padding_factor=0)  # fmt: skip
    return _lattice_table(words, word_dict, vocabulary, tokens, model, segmentation, progress)


def _refuse_pieces_across_words(symbols: pa.Array, where: str) -> None:
    """InputDataError naming ``where`` when a piece holds ``▁`` after its first character."""
    across = pc.greater_equal(pc.find_substring(pc.utf8_slice_codeunits(symbols, 1), WORD_START), 0)
    if pc.any(across).as_py():
        piece = symbols.filter(across)[0].as_py()
        raise InputDataError(
            f"spm_model: {where} has pieces across words (such as {piece!r}): a model trained with "
            "split_by_whitespace=false; sampled segmentations need one that splits at white space (the default)"
        )


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
    values, begins, content = _word_begins(block, first, vocabulary, split, col)
    word_offsets = np.append(np.flatnonzero(begins), values.shape[0])
    listed = pa.LargeListArray.from_arrays(pa.array(word_offsets), vocabulary.symbols.take(pa.array(values)))
    strings = pc.binary_join(listed, pa.scalar("", pa.large_string()))
    return _Cut(strings, Ragged(word_offsets.astype(np.int64), values), row_sums(begins, content))


def _word_counts(block: Spans, first: int, vocabulary: _Vocabulary, split: Split, col: str) -> np.ndarray:
    """The words of each row ``first`` on, without making them (a writer's row lengths)."""
    _, begins, content = _word_begins(block, first, vocabulary, split, col)
    return row_sums(begins, content)


def _word_begins(
    block: Spans, first: int, vocabulary: _Vocabulary, split: Split, col: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the rows' pieces without ``</s>``, where a word begins among them, the pieces of each row); a row without its
    ``</s>`` is refused."""
    ends = block.starts + block.lengths - 1
    bad = np.flatnonzero((block.lengths == 0) | (block.words[np.maximum(ends, 0)] != vocabulary.dictionary.eos))
    if bad.size:
        raise InputDataError(f"{split.path} split {split.split!r} {col} row {first + int(bad[0])}: expected a row "
                             "ending with </s> (a corpus as fairseq-preprocess writes it)")  # fmt: skip
    content = block.lengths - 1
    values = take_flat(block.words, block.starts, content)
    row_first = np.zeros(values.shape[0], dtype=bool)
    row_first[exclusive_cumsum(content)[content > 0]] = True
    return values, row_first | vocabulary.starts_word[values], content


def _lattice_table(
    words: _Words,
    word_dict: Dictionary,
    vocabulary: _Vocabulary,
    tokens: dict[tuple[str, str], int],
    model: SentencePieceModel,
    segmentation: Segmentation,
    progress: bool,
) -> _ColumnTable:
    """The lattice of every word: a unigram model's every segmentation, a BPE model's pool of draws, or one path,
    the corpus's pieces (a special symbol, a word holding ``<unk>``, a word the model's lattice cannot hold)."""
    dictionary = vocabulary.dictionary
    strings = pa.array(list(words.index), pa.large_string())
    word_ids = word_dict.encode_tokens(strings).astype(np.int64)
    own = Ragged.from_lengths(np.array([p.shape[0] for p in words.pieces], dtype=np.int64),
                              np.concatenate(words.pieces) if words.pieces else np.zeros(0, np.int32))  # fmt: skip
    special = row_sums(own.values < dictionary.nspecial, own.lengths()) > 0
    sampled = np.flatnonzero(~special & (word_ids >= dictionary.nspecial))
    processor = model.processor()
    scores = _piece_scores(processor) if segmentation.sampler == LATTICE else None
    surfaces = pc.replace_substring(strings.take(pa.array(sampled)), WORD_START, " ")
    best = _pieces(processor.encode(surfaces.to_pylist(), out_type=str, num_threads=1))
    check_deterministic(best, Segmenter(processor, dictionary, scores), own, sampled, strings)
    if segmentation.sampler == LATTICE:
        drawn, kept = unigram_edges(strings.take(pa.array(sampled)), processor)
    else:
        drawn = _pools(processor, surfaces, segmentation, progress)
        kept = too_many_nodes(drawn)  # a long word's pool of many forms: its corpus pieces instead
    fixed = np.ones(word_ids.shape[0], dtype=bool)
    fixed[sampled[~kept]] = False
    _refuse_long_chains(_select(own, fixed), strings.filter(pa.array(fixed)))
    symbols = pa.array(dictionary.symbols, pa.large_string())
    parts = [(word_ids[sampled[~kept]], _subset(drawn, np.flatnonzero(~kept))),
             (word_ids[fixed], Edges.chains(_select(own, fixed), symbols))]  # fmt: skip
    specials = np.arange(min(len(word_dict), dictionary.nspecial))
    specials = specials[~np.isin(specials, word_ids)]
    parts.append((specials, Edges.chains(Ragged.from_lengths(np.ones_like(specials), specials), symbols)))
    table = placed(parts, len(word_dict))
    pieces = _extended(dictionary, table.pieces)
    ids = pieces.encode_tokens(table.pieces).astype(np.int32)
    return _ColumnTable(word_dict, pieces, Ragged(table.first, ids), table.begin.astype(np.uint16),
                        table.end.astype(np.uint16), table.score.astype(np.float32), vocabulary, tokens)  # fmt: skip


def _refuse_long_chains(own: Ragged, words: pa.Array) -> None:
    """InputDataError naming the first word kept as one path of more pieces than a lattice's nodes can count."""
    long = np.flatnonzero(own.lengths() > MAX_NODES)
    if long.size:
        word = words[int(long[0])].as_py()
        raise InputDataError(
            f"corpus: the word {word[:40]!r}... takes {int(own.lengths()[long[0]])} pieces, expected at most "
            f"{MAX_NODES} (a lattice's nodes are 16-bit): split such words before segmenting"
        )


def _subset(edges: Edges, words: np.ndarray) -> Edges:
    """The lattices of ``words`` (indices into ``edges``' words), in that order."""
    per = np.diff(edges.first)[words]
    rows = flat_positions(edges.first[:-1][words], per)
    first = np.append(exclusive_cumsum(per), rows.shape[0])
    return Edges(first, edges.pieces.take(pa.array(rows)), edges.begin[rows], edges.end[rows], edges.score[rows])


def _pools(processor: Any, surfaces: pa.Array, segmentation: Segmentation, progress: bool) -> Edges:
    """A BPE model's pools: ``segmentation.pool`` draws of sentencepiece's dropout of each word, ``POOL_BLOCK``
    words at a time (sentencepiece's seed of block ``b``: ``seed * 2**20 + b``, modulo 2**32; its dropout is
    reproducible within one process only)."""
    import sentencepiece

    parts = []
    pool = segmentation.pool
    with progress_bar(total=len(surfaces), desc="sample pools", unit="words", enabled=progress) as bar:
        for b, start in enumerate(range(0, len(surfaces), POOL_BLOCK)):
            block = surfaces.slice(start, POOL_BLOCK).to_pylist()
            sentencepiece.set_random_generator_seed((segmentation.seed * 2**20 + b) % 2**32)
            repeated = [word for word in block for _ in range(pool)]
            offsets, flat = _pieces(processor.encode(repeated, out_type=str, enable_sampling=True,
                                                     alpha=segmentation.alpha, num_threads=1))  # fmt: skip
            codes = pc.dictionary_encode(flat)
            forms = Ragged(offsets, codes.indices.to_numpy().astype(np.int32))
            parts.append(pool_edges(len(block), forms, codes.dictionary, pool))
            bar.update(len(block))
    empty = Ragged.from_lengths(np.zeros(0, np.int64), np.zeros(0, np.int32))
    return concatenated(parts) if parts else Edges.chains(empty, pa.array([], pa.large_string()))


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


def nbest_available(processor: Any) -> bool:
    """Whether the model gives n-best segmentations (unigram: yes; BPE: no)."""
    try:
        processor.nbest_encode(["a"], nbest_size=2, out_type=str)
    except RuntimeError:
        return False
    return True


def _piece_scores(processor: Any) -> np.ndarray:
    """Each piece's log probability (unknown characters: 0, the same in every segmentation of a word)."""
    return np.array([processor.get_score(i) for i in range(processor.get_piece_size())], dtype=np.float64)


def _select(ragged: Ragged, rows: np.ndarray) -> Ragged:
    """Rows ``rows`` (indices or a mask) of ``ragged``, compact."""
    lengths = ragged.lengths()[rows]
    return Ragged.from_lengths(lengths, take_flat(ragged.values, ragged.offsets[:-1][rows], lengths))


# ----- pass 2: write the rows as word ids, and the lattices -------------------------------------


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
        vocabulary = self.table.vocabulary
        for rows in row_blocks(len(self.split), block_rows):
            block = self.split.column_spans(self.col, rows).compact()
            yield _word_counts(block, int(rows[0]), vocabulary, self.split, self.col) + 1

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
        _write_forms(folder, tables, langs, specials, segmentation.to_json())
        for lang in names if manifest.language_pairs else ():  # one for every language: the pairs share the table
            folder.add_dictionary(lang, next(iter(tables.values())).pieces)
        lattices = [LATTICE_NAME.format(column=col) for col in tables]
        folder.manifest.provenance = dict(provenance)
        folder.manifest.list_side_files(lattices)
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
                 specials: SpecialIds, record: dict[str, object]) -> None:  # fmt: skip
    """The split of every word's lattice edges (a column a table) and each column's lattice file."""
    height = max(len(table.edges) for table in tables.values())
    forms = {}
    for col, table in tables.items():
        name = folder.add_dictionary(langs[col], table.pieces)
        forms[col] = column(_padded(table.edges, height), langs[col], name, table.pieces, f"lattices of {col}")
    folder.write(FORMS_SPLIT, forms, specials)
    for col, table in tables.items():
        header = (len(table.edges), int(table.begin.shape[0]), record_digest(record))
        name = LATTICE_NAME.format(column=col)
        write_side_file(folder.path / name, LATTICE_FORMAT, header, [table.score, table.begin, table.end])


def _padded(edges: Ragged, rows: int) -> Ragged:
    """``edges`` as a ragged column of ``rows`` rows (empty rows after its own: the columns of a split have as
    many rows, and one column may have more words than another)."""
    lengths = np.zeros(rows, dtype=np.int64)
    lengths[: len(edges)] = edges.lengths()
    return Ragged.from_lengths(lengths, edges.values)


def _sentencepiece_version() -> str:
    import sentencepiece

    return str(sentencepiece.__version__)
