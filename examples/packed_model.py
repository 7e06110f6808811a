"""A small encoder-decoder transformer that trains on packed batches (``arrowmt.PackedCollater``) and on padded ones
alike: the reference for keeping attention inside each sentence of a packed batch.

A packed batch lays many sentences end to end in one buffer per side. Three masks keep them apart, all built from
the collater's per-token segments (the sentence of each token, -1 on the padding after the last one):

* encoder self-attention: a source token sees the source tokens of its own sentence;
* decoder self-attention: a target token sees the earlier target tokens of its own sentence (causal);
* cross-attention: a target token sees the source tokens of its own sentence only.

Positions restart at each sentence (the collater's ``src_positions``/``tgt_positions``); the loss counts the
positions whose target is not the pad id. A padded batch (``[B, L]``, padded on the right) is the same model with
masks from the padding: ``tests/test_packed.py`` checks that the loss and every gradient of a packed batch equal those
of the same sentences padded (float64), so no attention crosses sentences and no loss position is lost.

    model = PackedTranslator(src_vocab, tgt_vocab, pad=ds.special_ids.pad)
    loss = model.packed_loss(batch)        # a PackedCollater batch
    loss = model.packed_loss(batch, window=128)  # each token attends to a window of keys gathered for it
    loss = model.padded_loss(src, prev, target)   # [B, L] tensors, right-padded

The dense masks cost the buffer's length squared. With ``window=W`` (at least the longest sentence) each token
instead attends to ``W`` keys gathered for it: the tokens of its own sentence (decoder: the earlier ones; cross:
its own source sentence, found through ``src_cu_seqlens``), the rest of the window masked. The cost is then
``length * W``, every shape still fixed, on any device and under ``torch.compile``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Window:
    """The keys each query attends to: ``index`` ``[L, W]`` positions in the keys' sequence, ``valid`` which count."""

    index: torch.Tensor
    valid: torch.Tensor


Mask = torch.Tensor | Window


class Attention(nn.Module):
    """Multi-head attention under a boolean mask (``[B, Lq, Lk]``, True: may attend; via SDPA) or over a
    :class:`Window` of keys gathered for each query (one sequence)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: Mask) -> torch.Tensor:
        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)

        if isinstance(mask, Window):
            return self.out(self._windowed(x[0], memory[0], mask))[None]
        q, k, v = split(self.query(x)), split(self.key(memory)), split(self.value(memory))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))
        return self.out(y.transpose(1, 2).reshape(x.shape))

    def _windowed(self, x: torch.Tensor, memory: torch.Tensor, window: Window) -> torch.Tensor:
        """Attention of ``x`` ``[L, D]`` over the keys of ``memory`` that ``window`` gathers for each query."""
        length, width = window.index.shape
        q = self.query(x).view(length, self.heads, -1)
        k = self.key(memory)[window.index].view(length, width, self.heads, -1)
        v = self.value(memory)[window.index].view(length, width, self.heads, -1)
        scores = torch.einsum("lhd,lwhd->lhw", q, k) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~window.valid[:, None, :], float("-inf"))
        return torch.einsum("lhw,lwhd->lhd", scores.softmax(-1), v).reshape(length, -1)


class Block(nn.Module):
    """A post-norm transformer layer: self-attention, optional cross-attention, feed-forward."""

    def __init__(self, dim: int, heads: int, cross: bool) -> None:
        super().__init__()
        self.self_attention = Attention(dim, heads)
        self.cross_attention = Attention(dim, heads) if cross else None
        self.feed_forward = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3 if cross else 2))

    def forward(self, x: torch.Tensor, own: Mask, memory: torch.Tensor | None = None,
                cross: Mask | None = None) -> torch.Tensor:  # fmt: skip
        x = self.norms[0](x + self.self_attention(x, x, own))
        if self.cross_attention is not None and memory is not None and cross is not None:
            x = self.norms[1](x + self.cross_attention(x, memory, cross))
        return self.norms[-1](x + self.feed_forward(x))


class PackedTranslator(nn.Module):
    """Token and learned position embeddings, one encoder and one decoder layer, a vocabulary projection."""

    def __init__(self, src_vocab: int, tgt_vocab: int, pad: int, dim: int = 32, heads: int = 2,
                 positions: int = 1024) -> None:  # fmt: skip
        super().__init__()
        self.pad = pad
        self.scale = math.sqrt(dim)
        self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, dim), nn.Embedding(tgt_vocab, dim)
        self.positions = nn.Embedding(positions, dim)
        self.encoder, self.decoder = Block(dim, heads, cross=False), Block(dim, heads, cross=True)
        self.project = nn.Linear(dim, tgt_vocab)

    def logits(self, src: torch.Tensor, src_pos: torch.Tensor, prev: torch.Tensor, tgt_pos: torch.Tensor,
               masks: tuple[Mask, Mask, Mask]) -> torch.Tensor:  # fmt: skip
        """Logits ``[B, Lt, V]`` of ``[B, L]`` inputs under (encoder, decoder, cross) masks."""
        encoder_mask, decoder_mask, cross_mask = masks
        memory = self.encoder(self.src_embed(src) * self.scale + self.positions(src_pos), encoder_mask)
        x = self.tgt_embed(prev) * self.scale + self.positions(tgt_pos)
        return self.project(self.decoder(x, decoder_mask, memory, cross_mask))

    def packed_loss(self, batch: dict, window: int | None = None) -> torch.Tensor:
        """Summed cross-entropy of a :class:`arrowmt.PackedCollater` batch over its target tokens (``window``: keys
        gathered for each query, :func:`windows`; default the dense masks, :func:`packed_masks`)."""
        net = batch["net_input"]
        masks = windows(net, window) if window else packed_masks(net["src_segment"], net["tgt_segment"])
        logits = self.logits(net["src_tokens"][None], net["src_positions"][None], net["prev_output_tokens"][None],
                             net["tgt_positions"][None], masks)  # fmt: skip
        return token_loss(logits[0], batch["target"], self.pad)

    def padded_loss(self, src: torch.Tensor, prev: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Summed cross-entropy of right-padded ``[B, L]`` sources, decoder inputs and targets."""
        src_real, tgt_real = src != self.pad, target != self.pad
        own = src_real[:, :, None] & src_real[:, None, :]
        length = target.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        decoder = (tgt_real[:, :, None] & tgt_real[:, None, :] & causal) | torch.eye(length, dtype=torch.bool)
        cross = tgt_real[:, :, None] & src_real[:, None, :]
        cross = cross | ~cross.any(-1, keepdim=True)  # a padding query sees everything (its output is unused)
        own = own | torch.eye(src.shape[1], dtype=torch.bool)
        positions = [torch.arange(t.shape[1]).expand(t.shape[0], -1) for t in (src, prev)]
        logits = self.logits(src, positions[0], prev, positions[1], (own, decoder, cross))
        return token_loss(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), self.pad)


def packed_masks(src_segment: torch.Tensor, tgt_segment: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(encoder, decoder, cross) masks ``[1, L, L]`` of a packed batch from its segments: attention within a
    sentence only (the decoder's causal too); a padding position sees itself only (its output is unused)."""
    src_eye = torch.eye(src_segment.shape[0], dtype=torch.bool)
    encoder = (src_segment[:, None] == src_segment[None, :]) & (src_segment[:, None] >= 0) | src_eye
    decoder = causal_mask(tgt_segment)
    cross = (tgt_segment[:, None] == src_segment[None, :]) & (tgt_segment[:, None] >= 0)
    cross = cross | ~cross.any(-1, keepdim=True)
    return encoder[None], decoder[None], cross[None]


def causal_mask(segment: torch.Tensor) -> torch.Tensor:
    """``[L, L]``: a token sees the earlier tokens of its own segment and itself (a padding position: itself)."""
    same = (segment[:, None] == segment[None, :]) & (segment[:, None] >= 0)
    return same & torch.ones_like(same).tril() | torch.eye(segment.shape[0], dtype=torch.bool)


def windows(net: dict, width: int) -> tuple[Window, Window, Window]:
    """(encoder, decoder, cross) :class:`Window` of a packed batch's ``net_input``: each token's own sentence (the
    decoder's up to itself; cross: its source sentence), ``width`` keys at most (the longest sentence or more). A
    padding position sees its first key only (its output is unused)."""

    def window(segment: torch.Tensor, start: torch.Tensor, limit: torch.Tensor, keys: int) -> Window:
        """Each query's ``width`` keys from ``start``, the first ``limit`` of them valid (a padding query: one)."""
        span = torch.arange(width)[None, :]
        valid = (span < limit[:, None]) & (segment[:, None] >= 0) | (span == 0)
        return Window((start[:, None] + span).clamp(max=keys - 1), valid)

    src, tgt = net["src_segment"], net["tgt_segment"]
    if not torch.compiler.is_compiling():  # a compiled step is checked by its caller (no data-dependent branch)
        check_window(net, width)
    src_cu = net["src_cu_seqlens"].long()
    src_lengths = src_cu[1:] - src_cu[:-1]
    src_start = torch.arange(src.shape[0]) - net["src_positions"]
    tgt_start = torch.arange(tgt.shape[0]) - net["tgt_positions"]
    src_sentence, tgt_sentence = src.clamp(min=0), tgt.clamp(min=0)
    encoder = window(src, src_start, src_lengths[src_sentence], src.shape[0])
    decoder = window(tgt, tgt_start, net["tgt_positions"] + 1, tgt.shape[0])  # causal: up to itself
    cross = window(tgt, src_cu[:-1][tgt_sentence], src_lengths[tgt_sentence], src.shape[0])
    return encoder, decoder, cross


def check_window(net: dict, width: int) -> None:
    """ValueError unless ``width`` covers the longest sentence of a packed batch's ``net_input``."""
    longest = max(int((cu[1:] - cu[:-1]).max()) for cu in (net["src_cu_seqlens"], net["tgt_cu_seqlens"]))
    if longest > width:
        raise ValueError(f"window: expected at least the longest sentence of the batch, {longest} tokens; got {width}")


class PackedLanguageModel(nn.Module):
    """A decoder-only language model (one causal layer) for packed LM blocks (``PackedCollater`` over
    ``BlockBatchSampler(packed=True)``) and fairseq's padded blocks (``FairseqBlockCollater``) alike."""

    def __init__(self, vocab: int, pad: int, dim: int = 32, heads: int = 2, positions: int = 1024) -> None:
        super().__init__()
        self.pad, self.scale = pad, math.sqrt(dim)
        self.embed, self.positions = nn.Embedding(vocab, dim), nn.Embedding(positions, dim)
        self.layer = Block(dim, heads, cross=False)
        self.project = nn.Linear(dim, vocab)

    def logits(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.project(self.layer(self.embed(tokens) * self.scale + self.positions(positions), mask))

    def packed_loss(self, batch: dict) -> torch.Tensor:
        """Summed cross-entropy of a packed batch of blocks over its target tokens."""
        net = batch["net_input"]
        mask = causal_mask(net["src_segment"])[None]
        return token_loss(self.logits(net["src_tokens"][None], net["src_positions"][None], mask)[0], batch["target"],
                          self.pad)  # fmt: skip

    def padded_loss(self, src: torch.Tensor, lengths: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Summed cross-entropy of fairseq's right-padded ``[B, L]`` blocks (``lengths``: their tokens)."""
        width = src.shape[1]
        real = torch.arange(width)[None, :] < lengths[:, None]
        mask = real[:, None, :] & torch.ones(width, width, dtype=torch.bool).tril() | torch.eye(width, dtype=torch.bool)
        positions = torch.arange(width).expand(src.shape[0], -1)
        logits = self.logits(src, positions, mask)
        return token_loss(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), self.pad)


def token_loss(logits: torch.Tensor, target: torch.Tensor, pad: int) -> torch.Tensor:
    """Summed cross-entropy over the positions whose target is not ``pad``."""
    return F.cross_entropy(logits, target, ignore_index=pad, reduction="sum")
