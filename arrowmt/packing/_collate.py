"""Packed batches as tensors of one shape: a plan's packed batch (``packed=True`` on a sampler) laid end to end in
fixed-capacity token buffers, for ``torch.compile`` and CUDA graphs.

:class:`PackedCollater` returns, for a parallel batch (every tensor 1-D, its length fixed by ``capacity`` or
``max_sentences``, the same for every batch of every epoch):

* ``net_input.src_tokens``: the sources one after another, then the pad id up to ``capacity``;
* ``net_input.src_segment``: each source token's sentence (0, 1, ... in batch order; -1 on padding);
* ``net_input.src_positions``: each token's position in its sentence (0 on padding);
* ``net_input.src_cu_seqlens``: int32, ``max_sentences + 1`` entries: where each sentence starts, then the end of
  the last, repeated (``flash_attn_varlen``'s layout; the padding after the last sentence belongs to none);
* ``net_input.prev_output_tokens``, ``tgt_segment``, ``tgt_positions``, ``tgt_cu_seqlens``: the same for the decoder
  input, each sentence's target as fairseq feeds it (``[eos] + target[:-1]``);
* ``target``: the targets laid out like the decoder input, the pad id after them;
* ``id``: the rows, in batch order, then -1 up to ``max_sentences``; ``nsentences``; ``ntokens`` (target tokens).

For language-model blocks (``open_blocks``, ``BlockBatchSampler(packed=True)``) it returns the ``src_*`` tensors
and ``target``: each block's tokens as the target, the same block behind the token before it (fairseq's
``[head] + block[:-1]``) as ``src_tokens``; a model keeps attention causal within a block.

A model keeps attention inside a sentence with the segments (encoder: same source segment; decoder: same target
segment, causal; cross-attention: a target token to the source tokens of its own sentence) and ignores the
positions whose target is the pad id in its loss. ``examples/packed_model.py`` is such a model, and a test checks
its loss and gradients on a packed batch against the same sentences padded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import numpy as np
import torch

from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError
from arrowmt.format import SOURCE, TARGET, SpecialIds
from arrowmt.plans import DEFAULT_MAX_TOKENS
from arrowmt.reading import Spans, exclusive_cumsum, take_flat
from arrowmt.training import GatheredBatch, GatheredBlocks, as_tensor, check_padding


@dataclass(frozen=True)
class PackedCollater:
    """``collate_fn`` laying a packed batch into buffers of ``capacity`` tokens (the sampler's ``max_tokens``) and
    ``max_sentences`` sentences (default: ``capacity``, a sentence holds a token at least); picklable."""

    special_ids: SpecialIds = field(default_factory=SpecialIds)
    _: KW_ONLY
    capacity: int = DEFAULT_MAX_TOKENS
    max_sentences: int | None = None

    def __post_init__(self) -> None:
        check_padding(self.special_ids, 1)
        check_integer("capacity", self.capacity, 1)
        if self.max_sentences is not None:
            check_integer("max_sentences", self.max_sentences, 1)

    @property
    def sentences(self) -> int:
        """The sentence slots of every batch (``id`` and ``cu_seqlens`` sizes)."""
        return self.capacity if self.max_sentences is None else self.max_sentences

    def __call__(self, batch: GatheredBlocks | GatheredBatch | Sequence[Mapping[str, object]]) -> dict[str, object]:
        if isinstance(batch, GatheredBlocks):
            return self._blocks(batch)
        gathered = GatheredBatch.from_samples(batch)
        missing = [name for name in (SOURCE, TARGET) if name not in gathered.columns]
        if missing and len(gathered):
            raise InvalidParameterError(f"batch: expected columns {[SOURCE, TARGET]}, got {list(gathered.columns)}")
        empty = Spans.empty()
        src = self._laid(gathered.columns.get(SOURCE, empty), "source")
        tgt = self._laid(gathered.columns.get(TARGET, empty), "target")
        net_input = {**src.tensors("src"), "prev_output_tokens": as_tensor(tgt.shifted(self.special_ids.eos)),
                     **tgt.tensors("tgt", tokens=False)}  # fmt: skip
        return {"id": self._ids(gathered.ids, "sentences"), "nsentences": len(gathered), "ntokens": tgt.used,
                "net_input": net_input, "target": as_tensor(tgt.tokens)}  # fmt: skip

    def _blocks(self, batch: GatheredBlocks) -> dict[str, object]:
        """LM blocks laid end to end: the target is each block's tokens, the input each block behind the token
        before it (fairseq's ``[head] + block[:-1]``: ``eos`` or ``pad`` at a row start)."""
        laid = self._laid(batch.tokens, "tokens")
        heads = batch.heads[np.asarray(batch.tokens.lengths) > 0, -1].astype(np.int64)
        net_input = {"src_tokens": as_tensor(laid.shifted(heads)), **laid.tensors("src", tokens=False)}
        return {"id": self._ids(batch.ids, "blocks"), "nsentences": len(batch), "ntokens": laid.used,
                "net_input": net_input, "target": as_tensor(laid.tokens)}  # fmt: skip

    def _ids(self, ids: np.ndarray, what: str) -> torch.Tensor:
        """The batch's row ids, then -1 up to :attr:`sentences`; InvalidParameterError when they are more."""
        if ids.shape[0] > self.sentences:
            raise InvalidParameterError(
                f"batch: expected at most max_sentences={self.sentences} {what} (the sampler's max_sentences), "
                f"got {ids.shape[0]}"
            )
        out = np.full(self.sentences, -1, dtype=np.int64)
        out[: ids.shape[0]] = ids
        return as_tensor(out)

    def _laid(self, spans: Spans, side: str) -> _Laid:
        """One side's rows laid end to end in a buffer of :attr:`capacity` tokens."""
        lengths = np.asarray(spans.lengths, dtype=np.int64)
        used = int(lengths.sum())
        if used > self.capacity:
            raise InvalidParameterError(
                f"batch: its {side} holds {used} tokens, expected at most capacity={self.capacity} (the sampler's "
                "max_tokens, with packed=True)"
            )
        tokens = np.full(self.capacity, self.special_ids.pad, dtype=np.int64)
        tokens[:used] = take_flat(spans.words, spans.starts, lengths)
        starts = exclusive_cumsum(lengths)
        segment = np.full(self.capacity, -1, dtype=np.int64)
        segment[:used] = np.repeat(np.arange(lengths.shape[0], dtype=np.int64), lengths)
        positions = np.zeros(self.capacity, dtype=np.int64)
        positions[:used] = np.arange(used, dtype=np.int64) - np.repeat(starts, lengths)
        cu = np.full(self.sentences + 1, used, dtype=np.int32)
        cu[: lengths.shape[0]] = starts
        return _Laid(tokens, segment, positions, cu, used, starts[lengths > 0])


@dataclass(frozen=True)
class _Laid:
    """One side of a packed batch: its buffer, each token's sentence and position, ``cu_seqlens``, the tokens used
    and where each non-empty row starts."""

    tokens: np.ndarray
    segment: np.ndarray
    positions: np.ndarray
    cu_seqlens: np.ndarray
    used: int
    starts: np.ndarray

    def shifted(self, first: int | np.ndarray) -> np.ndarray:
        """The buffer with each row behind ``first`` (one value, or one per non-empty row): ``[first] + row[:-1]``,
        fairseq's decoder input (``eos``) or an LM block's input (the token before it)."""
        out = self.tokens.copy()  # the pad after the rows stays
        if self.used:
            out[1 : self.used] = self.tokens[: self.used - 1]
        out[self.starts] = first
        return out

    def tensors(self, prefix: str, tokens: bool = True) -> dict[str, torch.Tensor]:
        """``<prefix>_segment``, ``_positions``, ``_cu_seqlens`` (and ``_tokens``) as tensors."""
        out = {f"{prefix}_segment": as_tensor(self.segment), f"{prefix}_positions": as_tensor(self.positions),
               f"{prefix}_cu_seqlens": torch.from_numpy(self.cu_seqlens)}  # fmt: skip
        return {f"{prefix}_tokens": as_tensor(self.tokens), **out} if tokens else out
