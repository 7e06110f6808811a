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
    loss = model.padded_loss(src, prev, target)   # [B, L] tensors, right-padded
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    """Multi-head attention under a boolean mask (``[B, Lq, Lk]``, True: may attend), via SDPA."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(memory)), split(self.value(memory))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.unsqueeze(1))
        return self.out(y.transpose(1, 2).reshape(x.shape))


class Block(nn.Module):
    """A post-norm transformer layer: self-attention, optional cross-attention, feed-forward."""

    def __init__(self, dim: int, heads: int, cross: bool) -> None:
        super().__init__()
        self.self_attention = Attention(dim, heads)
        self.cross_attention = Attention(dim, heads) if cross else None
        self.feed_forward = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(3 if cross else 2))

    def forward(self, x: torch.Tensor, own: torch.Tensor, memory: torch.Tensor | None = None,
                cross: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
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
               masks: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:  # fmt: skip
        """Logits ``[B, Lt, V]`` of ``[B, L]`` inputs under (encoder, decoder, cross) masks."""
        encoder_mask, decoder_mask, cross_mask = masks
        memory = self.encoder(self.src_embed(src) * self.scale + self.positions(src_pos), encoder_mask)
        x = self.tgt_embed(prev) * self.scale + self.positions(tgt_pos)
        return self.project(self.decoder(x, decoder_mask, memory, cross_mask))

    def packed_loss(self, batch: dict) -> torch.Tensor:
        """Summed cross-entropy of a :class:`arrowmt.PackedCollater` batch over its target tokens."""
        net = batch["net_input"]
        masks = packed_masks(net["src_segment"], net["tgt_segment"])
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
    tgt_eye = torch.eye(tgt_segment.shape[0], dtype=torch.bool)
    encoder = (src_segment[:, None] == src_segment[None, :]) & (src_segment[:, None] >= 0) | src_eye
    decoder = (tgt_segment[:, None] == tgt_segment[None, :]) & (tgt_segment[:, None] >= 0)
    decoder = decoder & torch.ones_like(decoder).tril() | tgt_eye
    cross = (tgt_segment[:, None] == src_segment[None, :]) & (tgt_segment[:, None] >= 0)
    cross = cross | ~cross.any(-1, keepdim=True)
    return encoder[None], decoder[None], cross[None]


def token_loss(logits: torch.Tensor, target: torch.Tensor, pad: int) -> torch.Tensor:
    """Summed cross-entropy over the positions whose target is not ``pad``."""
    real = target != pad
    return F.cross_entropy(logits[real], target[real], reduction="sum")
