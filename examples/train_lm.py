"""Train a small GPT-style language model on token blocks of an arrowmt corpus with a plain PyTorch loop.

    python examples/train_lm.py --steps 400 --save lm.pt            # the bundled Multi30k English side
    python examples/train_lm.py --steps 400 --save lm.pt --resume   # continue where lm.pt stopped
    python examples/train_lm.py --data corpora/mono --break-mode complete --tokens-per-sample 256

Without ``--data`` the English side of the bundled Multi30k sample (train and val) is
converted first (whitespace tokens, a fairseq-style dictionary; ``--out`` keeps the
folder, ``--sample-lines`` takes only the first training lines). The data side is three
arrowmt pieces meeting at torchdata's ``StatefulDataLoader`` (``pip install
'arrowmt[resume]'``): ``open_blocks`` (fairseq's token blocks of ``--tokens-per-sample``,
memory-mapped), a ``BlockBatchSampler`` (token-budget batches of blocks; rank and world
from ``torch.distributed`` when it is initialized) and the ``PlainBlockCollater`` (inputs,
next-token targets, and position ids that restart at every document, i.e. corpus row).
The model attends only inside a document: the mask is built from those position ids.

``--max-positions`` (the model's positions and the longest block trained on) defaults to
``--tokens-per-sample``; a smaller value is refused, as it would skip most blocks. Prints
the loss of every step; after every epoch and at the end, the loss per token on the
``valid`` split (with ``--data``: when the folder has one). ``--save`` checkpoints the
model, optimizer and loader after every epoch (also every ``--save-every`` steps and at
``--stop-after``); ``--resume`` continues with exactly the batch that comes next, as
``examples/train_plain.py`` does (its checkpoint helpers are used here).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader
from train_plain import Progress, load_checkpoint, parameters_sha256, save_checkpoint, stateful_loader

import arrowmt
from arrowmt import BlockBatchSampler, BlockDataset, Manifest, PlainBlockCollater, open_blocks

SAMPLE = Path(arrowmt.__file__).parent / "sample_data" / "multi30k"


def convert_sample(out: Path, train_lines: int | None = None) -> Path:
    """The bundled English captions (train, its first ``train_lines``, and val) as a monolingual arrowmt folder:
    ``convert_text(..., lang="en")``, the dictionary and ids of ``fairseq-preprocess --only-source``."""
    with tempfile.TemporaryDirectory(prefix="arrowmt-lm-text-") as tmp:
        train = SAMPLE / "train"
        if train_lines is not None:  # the first lines only, as a text file of their own
            train = Path(tmp) / "train"
            with gzip.open(SAMPLE / "train.en.gz", "rb") as handle:
                Path(f"{train}.en").write_bytes(b"".join(itertools.islice(handle, train_lines)))
        arrowmt.convert_text(str(train), out, lang="en", validpref=str(SAMPLE / "val"), overwrite=True, progress=False)
    return out


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


def train_step(model: TinyGPT, optimizer: torch.optim.Optimizer, batch: dict[str, Any]) -> float:
    loss = loss_of(model, batch)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


def loss_of(model: TinyGPT, batch: dict[str, Any], reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy over the batch's real (non-padding) targets."""
    logits = model(batch["tokens"], batch["position_ids"])
    return nn.functional.cross_entropy(
        logits.flatten(0, 1), batch["target"].flatten(), ignore_index=model.pad, reduction=reduction
    )


def block_sampler(ds: BlockDataset, args: argparse.Namespace, **kw: Any) -> BlockBatchSampler:
    """Token-budget batches of blocks; blocks over ``--max-positions`` are skipped (the sampler warns past 1%)."""
    return BlockBatchSampler(
        ds, max_tokens=args.max_tokens, max_positions=args.max_positions, skip_invalid_size_inputs=True, **kw
    )


@torch.no_grad()
def validate(model: TinyGPT, ds: BlockDataset, args: argparse.Namespace) -> tuple[float, int]:
    """Loss per target token over every block of ``ds`` (fixed batches, no shuffling) and the token count."""
    model.eval()
    loader = DataLoader(
        ds,
        batch_sampler=block_sampler(ds, args, shuffle=False, num_replicas=1, rank=0),
        collate_fn=PlainBlockCollater(ds.special_ids),
    )
    total, tokens = 0.0, 0
    for batch in loader:
        total += loss_of(model, batch, reduction="sum").item()
        tokens += int((batch["target"] != model.pad).sum())
    model.train()
    return total / max(tokens, 1), tokens


def report_valid(model: TinyGPT, valid: BlockDataset | None, args: argparse.Namespace, when: str) -> None:
    if valid is not None:
        loss, tokens = validate(model, valid, args)
        print(f"{when} valid loss {loss:.6f} perplexity {math.exp(loss):.1f} ({tokens} target tokens)", flush=True)


def open_valid(data: Path, args: argparse.Namespace) -> BlockDataset | None:
    """The ``valid`` split's blocks, or None (with a note) when the folder has no such split."""
    if "valid" not in Manifest.load(data).splits():
        print(f"{data} has no valid split: no validation")
        return None
    return open_blocks(data, "valid", args.tokens_per_sample, args.break_mode)


def run_epoch(
    model: TinyGPT, optimizer: torch.optim.Optimizer, loader: Any, at: Progress, args: argparse.Namespace
) -> bool:
    """Train on the rest of epoch ``at.epoch``; False when ``--steps`` or ``--stop-after`` ends it early."""
    for batch in loader:
        loss = train_step(model, optimizer, batch)
        at.step += 1
        blocks, tokens = len(batch["id"]), batch["ntokens"]
        print(f"step {at.step} epoch {at.epoch} loss {loss:.6f} blocks {blocks} tokens {tokens}", flush=True)
        if args.save and args.save_every and at.step % args.save_every == 0:
            save_checkpoint(args.save, model, optimizer, loader, at)
        if at.step in (args.steps, args.stop_after):
            return False
    return True


def train(args: argparse.Namespace, data: Path) -> None:
    torch.manual_seed(args.seed)
    ds: BlockDataset = open_blocks(data, "train", args.tokens_per_sample, args.break_mode)
    valid = open_valid(data, args)
    sampler = block_sampler(ds, args, seed=args.seed)
    loader = stateful_loader(ds, sampler, PlainBlockCollater(ds.special_ids), args.num_workers)
    vocab = ds.split.metadata.columns["tokens"].vocab_size
    model = TinyGPT(vocab, ds.special_ids.pad, args.max_positions)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    at = Progress()
    if args.resume and args.save and Path(args.save).exists():
        at = load_checkpoint(args.save, model, optimizer, loader)
    print(f"{len(ds)} blocks ({ds.break_mode}), {len(sampler)} batches per epoch, vocabulary {vocab}")
    while at.step < args.steps:
        sampler.set_epoch(at.epoch)  # reshuffles the batch order; keeps a resumed mid-epoch position
        if not run_epoch(model, optimizer, loader, at, args):
            break
        report_valid(model, valid, args, f"epoch {at.epoch}")
        at.epoch += 1
        if args.save:
            save_checkpoint(args.save, model, optimizer, loader, at)
    if at.step < args.steps:  # --stop-after
        if args.save:
            save_checkpoint(args.save, model, optimizer, loader, at)
        print(f"stopped after step {at.step}; continue with --resume")
        return
    report_valid(model, valid, args, f"step {at.step}")
    if args.save:
        save_checkpoint(args.save, model, optimizer, loader, at)
    print(f"parameters sha256 {parameters_sha256(model)}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a monolingual arrowmt folder (default: convert the bundled sample)")
    parser.add_argument("--out", help="where to convert the bundled sample (default: a temporary folder)")
    parser.add_argument("--sample-lines", type=int, help="convert only the sample's first training lines")
    parser.add_argument("--steps", type=int, default=100, help="training steps (batches), over as many epochs")
    parser.add_argument("--tokens-per-sample", type=int, default=64, help="block size (fairseq's)")
    parser.add_argument("--break-mode", default="none", choices=("none", "complete", "complete_doc", "eos"))
    positions = "the model's positions; longer blocks are skipped (default: --tokens-per-sample)"
    parser.add_argument("--max-positions", type=int, help=positions)
    parser.add_argument("--max-tokens", type=int, default=2048, help="token budget of a batch")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    parser.add_argument(
        "--num-workers", type=int, default=0, help="DataLoader worker processes (0: ReadAheadLoader, a thread)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the model initialization and batch order")
    parser.add_argument("--save", help="checkpoint file, written after every epoch and at the end")
    parser.add_argument("--save-every", type=int, default=0, help="also checkpoint every N steps (0: never)")
    parser.add_argument("--resume", action="store_true", help="continue from --save when it exists")
    parser.add_argument("--stop-after", type=int, default=0, help="checkpoint and stop after step N (0: never)")
    args = parser.parse_args(argv)
    if args.max_positions is None:
        args.max_positions = args.tokens_per_sample
    elif args.max_positions < args.tokens_per_sample:
        parser.error(
            f"--max-positions {args.max_positions} is below --tokens-per-sample {args.tokens_per_sample}: "
            "blocks up to that size would be skipped (leave --max-positions out to use the block size)"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.data:
        train(args, Path(args.data))
    elif args.out:
        train(args, convert_sample(Path(args.out), args.sample_lines))
    else:
        with tempfile.TemporaryDirectory(prefix="arrowmt-lm-") as tmp:
            train(args, convert_sample(Path(tmp) / "multi30k-en", args.sample_lines))


if __name__ == "__main__":
    main()
