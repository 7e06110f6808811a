"""Token blocks of a monolingual split as a torch Dataset: fairseq's ``TokenBlockDataset`` (``include_targets``).

Block ``i`` (see :mod:`arrowmt.blocks._blocks` for the break modes) gives the
sample ``{"id": i, "source", "target", "past_target"}``: ``target`` is the
block's tokens, ``source`` the same shifted right by one and ``past_target``
by two, with fairseq's fill at a row start (``eos``, then ``pad``); all three have
the block's length (fairseq's past target of a one-token block at a row start has
two, an artifact of its slicing: arrowmt's is ``[pad]``). The block
table and its batch plan are cached memory-mapped files (see
:mod:`arrowmt.blocks._block_plan`); a block inside one record batch is a view
of the corpus map, one across record batches is gathered in one step.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from arrowmt.blocks import HEADS, BlockParams, BlockTable, TokenStream, check_monolingual, load_blocks, shifted_heads
from arrowmt.format import TOKENS, SpecialIds
from arrowmt.io import DEFAULT_ACCESS, WordRanges
from arrowmt.reading import Spans
from arrowmt.splits import Split
from arrowmt.storage import is_url

BlockSample = dict[str, "torch.Tensor | int"]


@dataclass(frozen=True, eq=False)
class GatheredBlocks(Sequence[BlockSample]):
    """Blocks ``ids`` located, not yet padded: what :meth:`BlockDataset.__getitems__` hands the collater.

    ``tokens`` holds each block's tokens (the target). ``heads[:, k]`` is the token
    ``HEADS - k`` places before the block as fairseq fills it (``pad``/``eos`` at a
    row start), so ``source = heads[:, -1:] + tokens[:-1]`` and ``past_target =
    heads + tokens[:-2]``; ``offsets`` is how far each block starts inside its row
    (capped at ``HEADS``). It is also a read-only sequence of the sample dicts.
    """

    ids: np.ndarray
    tokens: Spans
    heads: np.ndarray
    offsets: np.ndarray
    stream: TokenStream | None = None  # for document boundaries (None: every block is one row)
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def __getitem__(self, k: int) -> BlockSample:  # type: ignore[override]
        if not -len(self) <= k < len(self):
            raise IndexError(f"block {k} out of range for a batch of {len(self)}")
        target = torch.from_numpy(self.tokens.row(k).astype(np.int64))
        heads = torch.from_numpy(self.heads[k].astype(np.int64))
        n = target.shape[0]
        return {
            "id": int(self.ids[k]),
            "source": torch.cat([heads[-1:], target])[:n],
            "target": target,
            "past_target": torch.cat([heads, target])[:n],
        }

    def __iter__(self) -> Iterator[BlockSample]:
        return (self[k] for k in range(len(self)))

    def document_starts(self) -> tuple[np.ndarray, np.ndarray]:
        """Row starts strictly inside each block: (block number in this batch, position in the block)."""
        if self.stream is None or self.starts is None or self.ends is None:
            none = np.zeros(0, dtype=np.int64)
            return none, none
        return self.stream.inner_row_starts(self.starts, self.ends)


class BlockDataset(Dataset):
    """fairseq's token blocks of a monolingual split (column ``tokens``), as a map-style torch dataset.

    ``tokens_per_sample`` and ``break_mode`` (``none``, ``complete``,
    ``complete_doc``, ``eos``) are fairseq's ``--tokens-per-sample`` and
    ``--sample-break-mode``; ``document_sep_len`` is ``TokenBlockDataset``'s.
    Pickling keeps only the path and parameters: DataLoader workers reopen the
    maps and the cached block table.
    """

    def __init__(
        self,
        split: Split,
        tokens_per_sample: int | None,
        break_mode: str = "none",
        document_sep_len: int = 1,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        check_monolingual(split)
        self.split = split
        self.params = BlockParams(tokens_per_sample, break_mode, document_sep_len)
        self.cache_dir = cache_dir
        self.stream = TokenStream(split)
        self.table: BlockTable = load_blocks(self.stream, self.params, cache_dir)

    def __reduce__(self) -> tuple[type[BlockDataset], tuple[Any, ...]]:
        p = self.params
        return (BlockDataset, (self.split, p.tokens_per_sample, p.break_mode, p.document_sep_len, self.cache_dir))

    def __len__(self) -> int:
        return len(self.table)

    def fingerprint(self) -> str:
        """Identity of the blocks: the block table's key (it names the split's content and the block options)."""
        return self.table.key

    def __repr__(self) -> str:
        p, split = self.params, self.split
        return (
            f"BlockDataset({str(split.path)!r}, {split.split!r}: {len(self)} blocks, "
            f"tokens_per_sample={p.tokens_per_sample}, break_mode={p.break_mode!r})"
        )

    @property
    def special_ids(self) -> SpecialIds:
        return self.split.special_ids

    @property
    def break_mode(self) -> str:
        return self.params.break_mode

    def sizes(self) -> np.ndarray:
        """Every block's token count (fairseq's ``TokenBlockDataset.sizes``; one array of ``len(self)``)."""
        return self.table.sizes()

    def bounds(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat token range ``[start, end)`` of each block (fairseq's ``slice_indices``)."""
        return self.table.bounds(np.asarray(ids, dtype=np.int64).reshape(-1))

    def __getitem__(self, index: int) -> BlockSample:
        return self.__getitems__([int(index)])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> GatheredBlocks:
        """The blocks ``indices`` located for the collater (torch's DataLoader calls this)."""
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self.break_mode == "eos":  # a block is a row: the split's own row spans
            tokens = self.split.column_spans(TOKENS, ids)
            offsets = np.zeros(ids.shape[0], dtype=np.int64)
            return GatheredBlocks(ids, tokens, self._heads(offsets, offsets), offsets)
        starts, ends, offsets = self.table.entries(ids)
        tokens = self.stream.spans(starts, ends)
        return GatheredBlocks(ids, tokens, self._heads(starts, offsets), offsets, self.stream, starts, ends)

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where the blocks ``indices`` lie, for read-ahead: ``values=True`` their tokens in the corpus maps (located
        through the block table and the stream's pieces, not the corpus's offsets), ``values=False`` what locating
        them reads, their block table entries. In break mode ``eos`` a block is a row (see :meth:`Split.word_ranges`).
        """
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self.break_mode == "eos":
            return self.split.word_ranges(ids, values)
        if not values:
            return self.table.word_ranges(ids)
        starts, ends = self.table.bounds(ids)
        return self.stream.word_ranges(np.maximum(starts - HEADS, 0), ends)

    def _heads(self, starts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """fairseq's tokens before each block: the corpus's where the block starts ``offsets`` inside a row."""
        back = np.arange(HEADS, 0, -1, dtype=np.int64)[None, :]
        before = np.zeros((starts.shape[0], HEADS), dtype=np.int64)
        readable = offsets[:, None] >= back
        if readable.any():
            before[readable] = self.stream.tokens_at((starts[:, None] - back)[readable])
        ids = self.special_ids
        return shifted_heads(offsets, before, ids.eos, ids.pad, HEADS)


def open_blocks(
    path: str | os.PathLike[str],
    split: str = "train",
    tokens_per_sample: int | None = 1024,
    break_mode: str = "none",
    document_sep_len: int = 1,
    cache_dir: str | os.PathLike[str] | None = None,
    access: str = DEFAULT_ACCESS,
    cache_limit: int | str | None = None,
) -> BlockDataset:
    """The token blocks of split ``split`` (all its shards) of the monolingual arrowmt folder at ``path``
    (``access``: the maps' access advice, as in :func:`~arrowmt.training._dataset.open_dataset`).

    ``cache_dir``: where the block table is cached (default: in the folder); when ``path`` is a
    URL, where the remote corpus is cached (at most ``cache_limit`` bytes) and its block table with it.
    """
    if is_url(path):
        split_files = Split(path, split, access=access, cache_dir=cache_dir, cache_limit=cache_limit)
        cache_dir = None
    else:
        split_files = Split(path, split, access=access)
    return BlockDataset(split_files, tokens_per_sample, break_mode, document_sep_len, cache_dir)
