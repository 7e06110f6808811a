"""arrowmt token blocks as fairseq's ``MonolingualDataset`` over ``TokenBlockDataset`` (``language_modeling``).

:class:`ArrowBlocksLMDataset` is a ``MonolingualDataset`` whose blocks come from an
arrowmt :class:`~arrowmt.training._block_dataset.BlockDataset`. With fairseq's usual
``targets=["future"]`` a batch is gathered and padded in one step from the map
(``__getitems__`` then :class:`~arrowmt.training._block_collate.FairseqBlockCollater`);
with other targets (``--self-target``, ``--past-target``) fairseq's own
``MonolingualDataset`` code builds each sample from the block's (source, target,
past target), so every option behaves exactly as in fairseq.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
import torch
from fairseq.data import Dictionary, MonolingualDataset

from arrowmt.blocks import HEADS
from arrowmt.io import WordRanges
from arrowmt.training import BlockDataset, FairseqBlockCollater, GatheredBlocks


class BlockTriples(torch.utils.data.Dataset):
    """What ``TokenBlockDataset(include_targets=True)`` yields: ``(source, target, past_target)`` per block."""

    def __init__(self, blocks: BlockDataset) -> None:
        self.blocks = blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The block's three tensors, sharing memory where fairseq's do.

        fairseq slices them from one buffer of the rows: where a block starts inside a row,
        ``source`` (and, two tokens in, ``past_target``) view the same memory as ``target``,
        so ``MonolingualDataset``'s in-place ``unk`` replacement in the target reaches them.
        """
        batch = self.blocks.__getitems__([int(index)])
        sample, offset = batch[0], int(batch.offsets[0])
        if offset == 0:
            return sample["source"], sample["target"], sample["past_target"]
        n = sample["target"].shape[0]
        buffer = torch.cat([torch.from_numpy(batch.heads[0].astype(np.int64)), sample["target"]])
        past = buffer[:n] if offset >= HEADS else sample["past_target"]
        return buffer[HEADS - 1 : HEADS - 1 + n], buffer[HEADS:], past


class ArrowBlocksLMDataset(MonolingualDataset):
    """fairseq's language-model samples and batches of an arrowmt :class:`BlockDataset`."""

    def __init__(
        self,
        blocks: BlockDataset,
        vocab: Dictionary,
        tgt_vocab: Dictionary,
        targets: list[str] | None,
        add_bos_token: bool = False,
        fixed_pad_length: int | None = None,
        pad_to_bsz: int | None = None,
    ) -> None:
        super().__init__(
            BlockTriples(blocks),
            sizes=[],
            src_vocab=vocab,
            tgt_vocab=tgt_vocab,
            add_eos_for_other_targets=blocks.break_mode != "none",
            shuffle=True,
            targets=targets,
            add_bos_token=add_bos_token,
            fixed_pad_length=fixed_pad_length,
            pad_to_bsz=pad_to_bsz,
        )
        del self.sizes  # computed on first use (see ``sizes``): the batch plan does not need it
        self.blocks = blocks
        truncated = len(tgt_vocab) if len(tgt_vocab) != len(vocab) else None
        self.collate = FairseqBlockCollater(
            blocks.special_ids,
            add_bos_token=add_bos_token,
            fixed_pad_length=fixed_pad_length,
            pad_to_bsz=pad_to_bsz,
            output_vocab_size=truncated,
        )

    @property
    def split(self) -> str:
        return self.blocks.split.split

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where blocks ``indices`` lie in the corpus maps, for arrowmt's read-ahead."""
        return self.blocks.word_ranges(indices, values)

    @property
    def fast(self) -> bool:
        """Whether batches come straight from the map (fairseq's usual ``targets=["future"]``)."""
        return self.targets == ["future"]

    @cached_property
    def sizes(self) -> np.ndarray:  # type: ignore[override]
        """Every block's token count (``TokenBlockDataset.sizes``)."""
        return self.blocks.sizes()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the cached sizes (DataLoader workers recompute them only if asked)."""
        return {k: v for k, v in self.__dict__.items() if k != "sizes"}

    def __getitems__(self, indices: Any) -> GatheredBlocks | list[dict[str, Any]]:
        """The blocks ``indices`` located for the fast collater, else fairseq's samples (DataLoader calls this)."""
        if self.fast:
            return self.blocks.__getitems__(np.asarray(indices, dtype=np.int64))
        return [self[int(i)] for i in indices]

    def collater(self, samples: Any) -> dict[str, Any]:
        if isinstance(samples, GatheredBlocks):
            return self.collate(samples)
        return super().collater(samples)
