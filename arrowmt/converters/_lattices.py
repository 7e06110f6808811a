"""Every word's lattice, built once at conversion (the layout: :mod:`arrowmt.segments._lattice`).

A unigram model: the edges of word ``w`` are every piece of the model found in it, as sentencepiece's lattice has
them (found by hashing every substring of every distinct word, a length at a time, then compared character by
character), scored by the piece's log probability. sentencepiece adds an ``<unk>`` node where no one-character
piece starts, and scores user-defined pieces (score 0 in a model) its own way: such a word keeps its corpus pieces.
A BPE model: a pool of sentencepiece's own dropout draws of the word, its distinct forms as paths, ``log(count)``
on each form's first edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrowmt._arrays import sorted_unique
from arrowmt.reading import Ragged, exclusive_cumsum, flat_positions, take_flat
from arrowmt.segments import row_sums

_R = np.uint64(0x100000001B3)  # the substrings' polynomial hash (any odd multiplier)
MAX_NODES = 2**16 - 1  # a node is a uint16


@dataclass(frozen=True)
class Edges:
    """Lattices of some words, word after word: each edge's piece (a model piece string), begin and end node and
    score; ``first[i]`` is word ``i``'s first edge (one more for the end)."""

    first: np.ndarray
    pieces: pa.Array
    begin: np.ndarray
    end: np.ndarray
    score: np.ndarray

    @classmethod
    def chains(cls, rows: Ragged, symbols: pa.Array) -> Edges:
        """One path per word: its pieces ``rows`` (ids into ``symbols``), in order, scored 0."""
        lengths = rows.lengths()
        local = np.arange(rows.values.shape[0], dtype=np.int64) - np.repeat(rows.offsets[:-1], lengths)
        return cls(rows.offsets.astype(np.int64), symbols.take(pa.array(rows.values)), local, local + 1,
                   np.zeros(rows.values.shape[0], dtype=np.float32))  # fmt: skip

    def words(self) -> int:
        return self.first.shape[0] - 1


@dataclass(frozen=True)
class _Vocab:
    """A unigram model's pieces as the lattice matches them: code points, by length; user-defined ones apart."""

    symbols: pa.Array  # every piece string, by model id
    scores: np.ndarray
    normal: np.ndarray  # bool per id: an ordinary piece (a lattice edge)
    special: np.ndarray  # bool per id: user-defined (score 0): a word holding one keeps its pieces
    chars: Ragged  # code points of each id's string

    @classmethod
    def of(cls, processor: Any) -> _Vocab:
        n = processor.get_piece_size()
        ids = list(range(n))
        symbols = pa.array([processor.id_to_piece(i) for i in ids], pa.large_string())
        scores = np.array([processor.get_score(i) for i in ids], dtype=np.float64)
        other = np.array([processor.is_control(i) or processor.is_unknown(i) or processor.is_unused(i)
                          or processor.is_byte(i) for i in ids], dtype=bool)  # fmt: skip
        special = ~other & (scores == 0)
        return cls(symbols, scores, ~other & ~special, special, code_points(symbols))


def code_points(strings: pa.Array) -> Ragged:
    """Each string's Unicode code points (uint32), row after row."""
    lengths = pc.utf8_length(strings).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = "".join(strings.to_pylist()).encode("utf-32-le")
    return Ragged.from_lengths(lengths, np.frombuffer(flat, dtype="<u4").astype(np.int64))


def _hashes(chars: Ragged, length: int, previous: np.ndarray | None) -> np.ndarray:
    """The hash of the ``length`` code points from each position (``previous``: those of ``length - 1``)."""
    values = chars.values.astype(np.uint64)
    if previous is None:
        return values.copy()
    out = previous.copy()
    with np.errstate(over="ignore"):
        out[: values.shape[0] - length + 1] = previous[: values.shape[0] - length + 1] * _R + values[length - 1 :]
    return out


def unigram_edges(words: pa.Array, processor: Any) -> tuple[Edges, np.ndarray]:
    """The lattices of ``words`` (piece strings, ``▁`` first) under a unigram model, and which words keep their
    own pieces instead (bool: a character no one-character piece covers, or a user-defined piece inside)."""
    vocab = _Vocab.of(processor)
    chars = code_points(words)
    piece_chars = vocab.chars
    n = chars.values.shape[0]
    word_of = np.repeat(np.arange(len(words)), chars.lengths())
    word_end = chars.offsets[1:][word_of]
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (position, length, piece id)
    covered = np.zeros(n, dtype=bool)
    kept = np.zeros(len(words), dtype=bool)
    usable = vocab.normal | vocab.special
    piece_lengths, piece_starts = piece_chars.lengths(), piece_chars.offsets[:-1]
    longest = int(piece_lengths[usable].max(initial=1))
    piece_hashed: np.ndarray | None = None
    # the positions whose next ``length`` code points begin some piece, with their hash: few stay past a few
    # characters, so each length looks at those only (a hash shared by chance keeps a position: checked below)
    alive, alive_hash = np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.uint64)
    values = chars.values.astype(np.uint64)
    for length in range(1, longest + 1):
        piece_hashed = _hashes(piece_chars, length, piece_hashed)
        fits = alive + length <= word_end[alive]
        alive, alive_hash = alive[fits], alive_hash[fits]
        with np.errstate(over="ignore"):
            alive_hash = alive_hash * _R + values[alive + length - 1]
        _, begins_some = _lookup(
            sorted_unique(piece_hashed[piece_starts[(piece_lengths >= length) & usable]]), alive_hash
        )
        alive, alive_hash = alive[begins_some], alive_hash[begins_some]
        ids = np.flatnonzero((piece_lengths == length) & usable)
        if ids.size == 0 or alive.size == 0:
            continue
        keys = piece_hashed[piece_starts[ids]]
        order = np.argsort(keys, kind="stable")
        keys, ids = keys[order], ids[order]
        at, hit = _lookup(keys, alive_hash)
        where, piece = alive[hit], ids[at[hit]]
        same = _same_chars(chars.values, where, piece_chars, piece, length)
        where, piece = where[same], piece[same]
        kept[word_of[where[vocab.special[piece]]]] = True
        normal = vocab.normal[piece]
        where, piece = where[normal], piece[normal]
        if length == 1:
            covered[where] = True
        found.append((where, np.full(where.shape[0], length, dtype=np.int64), piece))
    kept[word_of[~covered]] = True
    kept |= chars.lengths() > MAX_NODES
    where, length, piece = (np.concatenate(parts) for parts in zip(*found, strict=True)) if found else (
        np.zeros(0, np.int64),) * 3  # fmt: skip
    word = word_of[where]
    begin = where - chars.offsets[:-1][word]
    end = begin + length
    order = np.lexsort((begin, end, word))
    word, begin, end, piece = word[order], begin[order], end[order], piece[order]
    counts = np.bincount(word, minlength=len(words))
    first = exclusive_cumsum(counts)
    edges = Edges(np.append(first, word.shape[0]), vocab.symbols.take(pa.array(piece)), begin, end,
                  vocab.scores[piece].astype(np.float32))  # fmt: skip
    return edges, kept


def _lookup(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each of ``values`` is or would go in the sorted ``keys``, clipped to them; whether it is there)."""
    if keys.size == 0:
        return np.zeros(values.shape[0], dtype=np.int64), np.zeros(values.shape[0], dtype=bool)
    at = np.minimum(np.searchsorted(keys, values), keys.shape[0] - 1)
    return at, keys[at] == values


def _same_chars(chars: np.ndarray, where: np.ndarray, piece_chars: Ragged, piece: np.ndarray,
                length: int) -> np.ndarray:  # fmt: skip
    """Whether the ``length`` code points at each of ``where`` are piece ``piece``'s (a hash match confirmed)."""
    starts = np.repeat(where, length) + np.tile(np.arange(length), where.shape[0])
    theirs = take_flat(piece_chars.values, piece_chars.offsets[:-1][piece], np.full(piece.shape[0], length))
    return row_sums(chars[starts] != theirs, np.full(where.shape[0], length)) == 0


def pool_edges(n_words: int, forms: Ragged, form_strings: pa.Array, pool: int) -> Edges:
    """The lattices of BPE pools: ``forms`` holds ``pool`` draws of each word, one after another (piece strings
    ``form_strings``); each distinct form becomes a path, ``log(count)`` on its first edge."""
    owner = np.repeat(np.arange(n_words), pool)
    keys = _form_keys(owner, forms)
    codes = pc.dictionary_encode(keys).indices.to_numpy().astype(np.int64)
    counts = np.bincount(codes)
    first_draw = np.full(counts.shape[0], owner.shape[0], dtype=np.int64)
    np.minimum.at(first_draw, codes, np.arange(owner.shape[0]))
    order = np.lexsort((first_draw, owner[first_draw]))  # distinct forms, by word, then first draw
    kept = first_draw[order]
    weight = np.log(counts[order]).astype(np.float32)
    word = owner[kept]
    lengths = forms.lengths()[kept]
    # nodes: 0 the start, then each form's inner nodes in turn, the last one the end
    inner = np.maximum(lengths - 1, 0)
    forms_per_word = np.bincount(word, minlength=n_words)
    before = exclusive_cumsum(inner)
    inner_start = 1 + before - before[exclusive_cumsum(forms_per_word)[word]]
    final = row_sums(inner, forms_per_word) + 1
    step = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(exclusive_cumsum(lengths), lengths)
    form_of = np.repeat(np.arange(kept.shape[0]), lengths)
    node = inner_start[form_of] + step  # the node after the step's piece, unless it is the form's last
    begin = np.where(step == 0, 0, node - 1)
    end = np.where(step == lengths[form_of] - 1, final[word[form_of]], node)
    score = np.where(step == 0, weight[form_of], np.float32(0)).astype(np.float32)
    edge_word = word[form_of]
    pieces = form_strings.take(pa.array(forms.values[flat_positions(forms.offsets[:-1][kept], lengths)]))
    edge_order = np.lexsort((begin, end, edge_word))
    first = np.append(exclusive_cumsum(np.bincount(edge_word, minlength=n_words)), edge_word.shape[0])
    return Edges(first, pieces.take(pa.array(edge_order)), begin[edge_order], end[edge_order], score[edge_order])


def _form_keys(word: np.ndarray, forms: Ragged) -> pa.Array:
    """Each form as bytes: its word's index, then its piece ids (int32 each): equal keys, equal forms of one word."""
    lengths = forms.lengths() + 1
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.empty(int(offsets[-1]), dtype=np.int32)
    values[offsets[:-1]] = word
    values[flat_positions(offsets[:-1] + 1, forms.lengths())] = forms.values
    buffers = [None, pa.py_buffer(offsets * 4), pa.py_buffer(values)]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), lengths.shape[0], buffers)


def concatenated(parts: list[Edges]) -> Edges:
    """The lattices of ``parts``' words, one part after another."""
    firsts, offset = [np.zeros(1, dtype=np.int64)], 0
    for part in parts:
        firsts.append(part.first[1:] + offset)
        offset += int(part.first[-1])
    return Edges(np.concatenate(firsts), pa.concat_arrays([p.pieces for p in parts]),
                 np.concatenate([p.begin for p in parts]), np.concatenate([p.end for p in parts]),
                 np.concatenate([p.score for p in parts]).astype(np.float32))  # fmt: skip


def placed(parts: list[tuple[np.ndarray, Edges]], words: int) -> Edges:
    """One table of ``words`` lattices from parts holding some words each (``(word ids, edges)``, every word in
    exactly one part), by word id."""
    ids = np.concatenate([w for w, _ in parts])
    joined = concatenated([e for _, e in parts])
    per = np.diff(joined.first)
    counts = np.zeros(words, dtype=np.int64)
    counts[ids] = per
    order = np.argsort(ids, kind="stable")
    edge_rows = flat_positions(joined.first[:-1][order], per[order])
    first = np.append(exclusive_cumsum(counts), edge_rows.shape[0])
    return Edges(first, joined.pieces.take(pa.array(edge_rows)), joined.begin[edge_rows], joined.end[edge_rows],
                 joined.score[edge_rows])  # fmt: skip


def too_many_nodes(edges: Edges) -> np.ndarray:
    """Which words' lattices have more nodes than a ``uint16`` node id counts (bool per word)."""
    per_word = np.diff(edges.first)
    ends = np.zeros(per_word.shape[0], dtype=np.int64)
    nonempty = per_word > 0
    ends[nonempty] = np.maximum.reduceat(edges.end, edges.first[:-1][nonempty]) if edges.end.size else 0
    return ends > MAX_NODES
