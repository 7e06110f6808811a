"""Collaters for token blocks: a plan batch of blocks into padded next-token training tensors.

Both take what the DataLoader gives them: a :class:`GatheredBlocks`
(``BlockDataset.__getitems__``, the fast path: target and source come out of one
gather from the map) or a list of ``ds[i]`` sample dicts. Ids come from
``special_ids`` (a dataset's ``special_ids``).

:class:`FairseqBlockCollater` is exactly fairseq's ``MonolingualDataset.collater``
in the ``language_modeling`` task (``targets=["future"]``): ``net_input.src_tokens``
= the sources, ``target`` = the blocks, both right-padded; with ``add_bos_token``
both start with ``bos``; ``ntokens`` = source tokens; ``fixed_pad_length`` and
``pad_to_bsz`` pad to a fixed width and row count; with ``output_vocab_size``,
target ids at or above it become ``unk`` (``--output-dictionary-size``), and so do
the source ids after the first of a block that starts inside a row (fairseq's
source there is a view of the target's buffer, changed in place with it; only
:class:`GatheredBlocks` tell where blocks start). An empty batch gives ``{}``.

:class:`PlainBlockCollater` gives ``{"id", "tokens", "target", "lengths",
"position_ids", "cu_seqlens", "max_seqlen", "ntokens"}`` for variable-length
attention: ``tokens`` is the input (the source), a *document* is one corpus row,
``position_ids`` restart at 0 at the start of every block and of every document
in it (pads: 0), and ``cu_seqlens`` (int32) are the offsets of the documents in the
batch's non-pad tokens laid end to end, block after block (flash-attention's
``varlen`` layout: ``tokens[position < lengths]`` is that flat sequence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import numpy as np
import torch

from arrowmt._arrays import sorted_unique
from arrowmt._checks import check_integer, check_optional_integer
from arrowmt._errors import InvalidParameterError
from arrowmt.format import SpecialIds
from arrowmt.reading import exclusive_cumsum
from arrowmt.training._batch import GatheredBatch
from arrowmt.training._block_dataset import GatheredBlocks
from arrowmt.training._collate import as_tensor, check_padding, pad_rows
from arrowmt.training._gather import gather_padded_shifted, padded_width

Blocks = GatheredBlocks | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Padded:
    """A batch of blocks padded: sources, targets (``(B, W)`` int64), lengths, ids, and where documents start."""

    source: np.ndarray
    target: np.ndarray
    lengths: np.ndarray
    ids: np.ndarray
    inside: np.ndarray  # whether each block starts inside a row


def pad_blocks(batch: Blocks, ids: SpecialIds, add_bos_token: bool, width: int | None, rows: int | None) -> Padded:
    """The blocks padded right to ``max(longest, width)`` and ``max(B, rows)`` rows, ``bos`` first if asked."""
    if isinstance(batch, GatheredBlocks):
        source, target, lengths = _shifted(batch, ids)
        batch_ids, inside = batch.ids, batch.offsets > 0
    else:
        source, target, lengths, batch_ids = _from_samples(batch, ids.pad)
        inside = np.zeros(batch_ids.shape[0], dtype=bool)
    lead = int(add_bos_token)
    return Padded(
        _framed(source, ids, lead, width, rows),
        _framed(target, ids, lead, width, rows),
        lengths + lead,
        batch_ids,
        inside,
    )


def _shifted(batch: GatheredBlocks, ids: SpecialIds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(source, target, lengths) from one gather: the source is the target moved right behind its head."""
    spans = batch.tokens
    lengths = np.asarray(spans.lengths, dtype=np.int64)
    width = padded_width(lengths)
    target, source = gather_padded_shifted(spans.words, spans.starts, lengths, width, ids.pad, ids.eos, False)
    if width:
        rows = np.flatnonzero(lengths > 0)
        source[rows, 0] = batch.heads[rows, -1]
    return source, target, lengths


def _from_samples(samples: Sequence[Mapping[str, Any]], pad: int) -> tuple[np.ndarray, ...]:
    """(source, target, lengths, ids) from ``ds[i]``-like sample dicts with ``source`` and ``target``."""
    gathered = GatheredBatch.from_samples(samples)
    if len(gathered) == 0:
        empty = np.zeros((0, 0), dtype=np.int64)
        return empty, empty, np.zeros(0, dtype=np.int64), gathered.ids
    missing = [name for name in ("source", "target") if name not in gathered.columns]
    if missing:
        raise InvalidParameterError(f"samples: expected keys 'source' and 'target', got {list(gathered.columns)}")
    source, target = (pad_rows(gathered.columns[name], pad, 1, False) for name in ("source", "target"))
    return source, target, np.asarray(gathered.columns["source"].lengths, dtype=np.int64), gathered.ids


def _framed(matrix: np.ndarray, ids: SpecialIds, lead: int, width: int | None, rows: int | None) -> np.ndarray:
    """``matrix`` behind ``lead`` columns of ``bos``, padded to at least ``width`` columns and ``rows`` rows."""
    n, w = matrix.shape
    shape = (max(n, rows or 0), max(w + lead, width or 0))
    if shape == (n, w):
        return matrix
    out = np.full(shape, ids.pad, dtype=np.int64)
    out[:n, lead : lead + w] = matrix
    out[:n, :lead] = ids.bos
    return out


def document_positions(
    shape: tuple[int, int], lengths: np.ndarray, blocks: np.ndarray, starts: np.ndarray
) -> np.ndarray:
    """Each cell's position in its document: 0 at every block start and at each ``(blocks, starts)``; pads 0."""
    marks = np.zeros(shape, dtype=np.int64)
    marks[blocks, starts] = starts
    np.maximum.accumulate(marks, axis=1, out=marks)
    cols = np.arange(shape[1], dtype=np.int64)[None, :]
    positions = cols - marks
    full_lengths = np.zeros(shape[0], dtype=np.int64)
    full_lengths[: lengths.shape[0]] = lengths
    positions[cols >= full_lengths[:, None]] = 0
    return positions


def document_offsets(lengths: np.ndarray, blocks: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """``cu_seqlens``: offsets of every document in the blocks' tokens laid end to end (int64, from 0)."""
    row_start = exclusive_cumsum(lengths)
    points = np.concatenate((row_start[lengths > 0], row_start[blocks] + starts, [int(lengths.sum())]))
    return sorted_unique(points)


@dataclass(frozen=True)
class FairseqBlockCollater:
    """``collate_fn`` building fairseq's language-model batches (see the module docstring); picklable."""

    special_ids: SpecialIds = field(default_factory=SpecialIds)
    _: KW_ONLY
    add_bos_token: bool = False
    fixed_pad_length: int | None = None
    pad_to_bsz: int | None = None
    output_vocab_size: int | None = None

    def __post_init__(self) -> None:
        _check_options(self.special_ids, self.fixed_pad_length)
        check_optional_integer("pad_to_bsz", self.pad_to_bsz, 1)
        check_optional_integer("output_vocab_size", self.output_vocab_size, 1)

    def __call__(self, batch: Blocks) -> dict[str, Any]:
        padded = pad_blocks(batch, self.special_ids, self.add_bos_token, self.fixed_pad_length, self.pad_to_bsz)
        if padded.ids.shape[0] == 0:
            return {}
        if self.output_vocab_size is not None:
            self._truncate_vocabulary(padded)
        return {
            "id": as_tensor(padded.ids),
            "nsentences": int(padded.ids.shape[0]),
            "ntokens": int(padded.lengths.sum()),
            "net_input": {"src_tokens": as_tensor(padded.source), "src_lengths": as_tensor(padded.lengths)},
            "target": as_tensor(padded.target),
        }

    def _truncate_vocabulary(self, padded: Padded) -> None:
        """Target ids >= ``output_vocab_size`` become ``unk``, and so do source ids after the first of a
        block starting inside a row: fairseq's source there is a view of the same buffer as the target."""
        limit, unk = self.output_vocab_size, self.special_ids.unk
        padded.target[padded.target >= limit] = unk
        rows, first = np.flatnonzero(padded.inside), int(self.add_bos_token) + 1
        tail = padded.source[rows, first:]
        tail[tail >= limit] = unk
        padded.source[rows, first:] = tail


@dataclass(frozen=True)
class PlainBlockCollater:
    """``collate_fn`` for plain PyTorch: inputs, targets, positions and ``cu_seqlens`` per document; picklable."""

    special_ids: SpecialIds = field(default_factory=SpecialIds)
    _: KW_ONLY
    add_bos_token: bool = False
    fixed_pad_length: int | None = None

    def __post_init__(self) -> None:
        _check_options(self.special_ids, self.fixed_pad_length)

    def __call__(self, batch: Blocks) -> dict[str, Any]:
        padded = pad_blocks(batch, self.special_ids, self.add_bos_token, self.fixed_pad_length, None)
        none = np.zeros(0, dtype=np.int64)
        blocks, starts = batch.document_starts() if isinstance(batch, GatheredBlocks) else (none, none)
        starts = starts + int(self.add_bos_token)
        cu_seqlens = document_offsets(padded.lengths, blocks, starts)
        positions = document_positions(padded.source.shape, padded.lengths, blocks, starts)
        return {
            "id": as_tensor(padded.ids),
            "tokens": as_tensor(padded.source),
            "target": as_tensor(padded.target),
            "lengths": as_tensor(padded.lengths),
            "position_ids": as_tensor(positions),
            "cu_seqlens": torch.from_numpy(cu_seqlens.astype(np.int32)),
            "max_seqlen": int(np.diff(cu_seqlens).max()) if cu_seqlens.shape[0] > 1 else 0,
            "ntokens": int(padded.lengths.sum()),
        }


def _check_options(special_ids: SpecialIds, fixed_pad_length: int | None) -> None:
    check_padding(special_ids, 1)
    check_integer("special_ids.bos", special_ids.bos, 0)
    check_integer("special_ids.unk", special_ids.unk, 0)
    check_optional_integer("fixed_pad_length", fixed_pad_length, 1)
