"""Train a small GPT-style language model on token blocks of an arrowmt corpus with a plain PyTorch loop.

    python examples/train_lm.py --steps 200                      # the bundled Multi30k English side
    python examples/train_lm.py --data corpora/mono --break-mode complete --tokens-per-sample 256

Without ``--data`` the English side of the bundled Multi30k sample is converted first
(whitespace tokens, a fairseq-style dictionary; ``--out`` keeps the folder). The data
side is three arrowmt pieces meeting at a ``DataLoader``: ``open_blocks`` (fairseq's
token blocks of ``--tokens-per-sample``, memory-mapped), a ``BlockBatchSampler``
(token-budget batches of blocks; rank and world from ``torch.distributed`` when it is
initialized) and the ``PlainBlockCollater`` (inputs, next-token targets, and position
ids that restart at every document, i.e. corpus row). The model attends only inside a
document: the mask is built from those position ids. Prints the loss of every step.
"""

from __future__ import annotations

import argparse
import gzip
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn
from torch.utils.data import DataLoader

import arrowmt
from arrowmt import BlockBatchSampler, BlockDataset, Dictionary, PlainBlockCollater, open_blocks

SAMPLE = Path(arrowmt.__file__).parent / "sample_data" / "multi30k"


def convert_sample(out: Path) -> Path:
    """The bundled English captions (train and val) as a monolingual arrowmt folder at ``out``."""
    words = {}
    for split, name in (("train", "train.en.gz"), ("valid", "val.en.gz")):
        with gzip.open(SAMPLE / name, "rt", encoding="utf-8") as handle:
            words[split] = pc.utf8_split_whitespace(pa.array(handle.read().splitlines()))
    dictionary = Dictionary.build(words["train"])
    tables = {split: pa.table({"tokens": encode(lines, dictionary)}) for split, lines in words.items()}
    arrowmt.convert_table(
        tables, out, languages={"tokens": "en"}, dictionaries={"tokens": dictionary}, overwrite=True, progress=False
    )
    return out


def encode(lines: pa.ListArray, dictionary: Dictionary) -> pa.ListArray:
    """Each line's ids followed by ``</s>``, as fairseq binarizes a line."""
    lengths = pc.list_value_length(lines).to_numpy(zero_copy_only=False) + 1
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = np.full(int(offsets[-1]), dictionary.eos, dtype=np.int32)
    words = np.ones(ids.shape[0], dtype=bool)
    words[offsets[1:] - 1] = False
    ids[words] = dictionary.encode_tokens(pc.list_flatten(lines))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))


class TinyGPT(nn.Module):
    """Token and position embeddings, causal self-attention inside each document, tied output projection."""

    def __init__(self, vocab: int, pad: int, max_len: int, dim: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.pad = pad
        self.embed = nn.Embedding(vocab, dim, padding_idx=pad)
        self.positions = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        for table in (self.embed, self.positions):
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, length, vocabulary)``: position i sees positions <= i of its own document."""
        hidden = self.embed(tokens) + self.positions(positions)
        hidden = self.blocks(hidden, mask=document_mask(positions, tokens == self.pad))
        return self.norm(hidden) @ self.embed.weight.T


def document_mask(positions: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """``(batch * heads, L, L)`` additive mask: causal, within a document (positions restart at 0 there)."""
    document = torch.cumsum((positions == 0).long(), dim=1)
    length = positions.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    allowed = causal & (document[:, :, None] == document[:, None, :]) & ~padding[:, None, :]
    allowed |= torch.eye(length, dtype=torch.bool)  # pads attend to themselves (their loss is ignored)
    mask = torch.zeros(allowed.shape, dtype=torch.float).masked_fill(~allowed, float("-inf"))
    return mask.repeat_interleave(4, dim=0)


def endless(loader: DataLoader, sampler: BlockBatchSampler) -> Iterator[dict[str, Any]]:
    """Batches of epoch 1, 2, ... (``set_epoch`` reshuffles the batch order each epoch)."""
    epoch = 1
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def train_step(model: TinyGPT, optimizer: torch.optim.Optimizer, batch: dict[str, Any]) -> float:
    logits = model(batch["tokens"], batch["position_ids"])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["target"].flatten(), ignore_index=model.pad)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def train(args: argparse.Namespace, data: Path) -> None:
    torch.manual_seed(args.seed)
    ds: BlockDataset = open_blocks(data, "train", args.tokens_per_sample, args.break_mode)
    sampler = BlockBatchSampler(
        ds, max_tokens=args.max_tokens, max_positions=args.max_positions, seed=args.seed, skip_invalid_size_inputs=True
    )
    collate = PlainBlockCollater(ds.special_ids)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=args.num_workers)
    vocab = ds.split.metadata.columns["tokens"].vocab_size
    model = TinyGPT(vocab, ds.special_ids.pad, args.max_positions)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    print(f"{len(ds)} blocks ({ds.break_mode}), {len(sampler)} batches per epoch, vocabulary {vocab}")
    for step, batch in zip(range(1, args.steps + 1), endless(loader, sampler), strict=False):
        loss = train_step(model, optimizer, batch)
        print(f"step {step} loss {loss:.4f} blocks {len(batch['id'])} tokens {batch['ntokens']}", flush=True)
    print(f"perplexity of the last batch {math.exp(loss):.1f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a monolingual arrowmt folder (default: convert the bundled sample)")
    parser.add_argument("--out", help="where to convert the bundled sample (default: a temporary folder)")
    parser.add_argument("--steps", type=int, default=100, help="training steps (batches)")
    parser.add_argument("--tokens-per-sample", type=int, default=64, help="block size (fairseq's)")
    parser.add_argument("--break-mode", default="none", choices=("none", "complete", "complete_doc", "eos"))
    parser.add_argument("--max-positions", type=int, default=128, help="longest block kept (others are skipped)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="token budget of a batch")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.data:
        train(args, Path(args.data))
    elif args.out:
        train(args, convert_sample(Path(args.out)))
    else:
        with tempfile.TemporaryDirectory(prefix="arrowmt-lm-") as tmp:
            train(args, convert_sample(Path(tmp) / "multi30k-en"))


if __name__ == "__main__":
    main()
