"""Train a small ``torch.nn.Transformer`` on an arrowmt corpus with a plain PyTorch loop (no fairseq).

    python examples/train_plain.py --data corpora/multi30k --steps 200 --max-tokens 4096

The data side is three arrowmt pieces meeting at a ``DataLoader``: the
memory-mapped ``open_dataset``, a ``TokenBatchSampler`` (token-budget batches,
rank and world size from ``torch.distributed`` when it is initialized) and the
``Collater`` in ``plain`` mode (right-padded ``source``/``target`` plus their
lengths). Prints the training loss (per target token) of every step.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from arrowmt import ArrowMTDataset, Collater, TokenBatchSampler, open_dataset


class Seq2Seq(nn.Module):
    """Token and learned position embeddings around ``nn.Transformer``, projecting to the target vocabulary."""

    def __init__(self, src_vocab: int, tgt_vocab: int, pad: int, max_len: int, dim: int = 64) -> None:
        super().__init__()
        self.pad = pad
        self.scale = math.sqrt(dim)
        self.src_embed = nn.Embedding(src_vocab, dim, padding_idx=pad)
        self.tgt_embed = nn.Embedding(tgt_vocab, dim, padding_idx=pad)
        self.positions = nn.Embedding(max_len, dim)
        self.transformer = nn.Transformer(
            d_model=dim,
            nhead=4,
            num_encoder_layers=1,
            num_decoder_layers=1,
            dim_feedforward=4 * dim,
            dropout=0.0,
            batch_first=True,
        )
        self.project = nn.Linear(dim, tgt_vocab)

    def _embed(self, table: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        return table(tokens) * self.scale + self.positions(torch.arange(tokens.shape[1]))

    def forward(self, src: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, target length, target vocabulary)`` for decoder inputs ``prev``."""
        n = prev.shape[1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        hidden = self.transformer(
            self._embed(self.src_embed, src),
            self._embed(self.tgt_embed, prev),
            tgt_mask=causal,
            src_key_padding_mask=src == self.pad,
            tgt_key_padding_mask=prev == self.pad,
            memory_key_padding_mask=src == self.pad,
        )
        return self.project(hidden)


def decoder_inputs(target: torch.Tensor, eos: int) -> torch.Tensor:
    """Teacher forcing as fairseq does it: ``[eos] + target[:-1]`` (targets end with ``</s>``)."""
    start = torch.full((target.shape[0], 1), eos, dtype=target.dtype)
    return torch.cat([start, target[:, :-1]], dim=1)


def build_model(ds: ArrowMTDataset) -> Seq2Seq:
    columns = ds.metadata.columns
    longest = int(max(ds.lengths("source").max(), ds.lengths("target").max()))
    return Seq2Seq(columns["source"].vocab_size, columns["target"].vocab_size, ds.special_ids.pad, longest + 1)


def endless(loader: DataLoader, sampler: TokenBatchSampler) -> Iterator[dict[str, Any]]:
    """Batches of epoch 1, 2, ... (``set_epoch`` reshuffles the batch order each epoch)."""
    epoch = 1
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train_step(model: Seq2Seq, optimizer: torch.optim.Optimizer, batch: dict[str, Any], eos: int) -> float:
    target = batch["target"]
    logits = model(batch["source"], decoder_inputs(target, eos))
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=model.pad)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def train(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    ds = open_dataset(args.data, "train")
    sampler = TokenBatchSampler(ds, max_tokens=args.max_tokens, seed=args.seed)
    collate = Collater.for_dataset(ds, mode="plain")
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=args.num_workers)
    model = build_model(ds)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    print(f"{len(ds)} pairs, {len(sampler)} batches per epoch, {sum(p.numel() for p in model.parameters())} params")
    for step, batch in zip(range(1, args.steps + 1), endless(loader, sampler), strict=False):
        loss = train_step(model, optimizer, batch, ds.special_ids.eos)
        tokens = int(batch["target_lengths"].sum())
        print(f"step {step} loss {loss:.4f} sentences {len(batch['id'])} tokens {tokens}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a converted arrowmt folder (parallel)")
    parser.add_argument("--steps", type=int, default=100, help="training steps (batches)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="token budget of a batch")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader worker processes")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
