"""Train a small ``torch.nn.Transformer`` on an arrowmt corpus with plain PyTorch: a complete small recipe.

    python examples/train_plain.py --data corpora/multi30k --epochs 10 --save ckpt.pt
    python examples/train_plain.py --data corpora/multi30k --epochs 10 --save ckpt.pt --resume
    python examples/train_plain.py --data corpora/multi30k-sp --epochs 10 --segmentation sampled
    python examples/train_plain.py --data corpora/multi30k --epochs 2 --batch-shapes 8 --compile

The data side is three arrowmt pieces meeting at ``arrowmt.ReadAheadLoader`` (or, with ``--num-workers``,
torchdata's ``StatefulDataLoader``: ``pip install 'arrowmt[resume]'``): the memory-mapped ``open_dataset``, a
``TokenBatchSampler`` (token-budget batches; rank and world size from
``torch.distributed`` when it is initialized) and the ``PlainCollater``
(right-padded ``source``/``target`` plus their lengths).

Every epoch: the training loss of each step, then the loss per target token on the
``valid`` split, then a checkpoint (model, optimizer and the loader's state, so
``--resume`` continues with exactly the batch that comes next, also mid-epoch after
``--save-every`` or ``--stop-after``, also with another ``--num-workers``). At the end:
greedy decoding of a few ``test`` sentences and, when ``sacrebleu`` is installed, BLEU over ``--bleu-sentences`` of them
(on the corpus' own tokenization). Positions are sized from the longest row of every split.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from arrowmt import (
    ArrowMTDataset,
    ArrowMTSampledDataset,
    Dictionary,
    Manifest,
    PlainCollater,
    ReadAheadLoader,
    TokenBatchSampler,
    load_loader_state,
    open_dataset,
    open_split,
)

SPM_SPACE = "\u2581"  # sentencepiece's word-start mark


class Seq2Seq(nn.Module):
    """Token + learned position embeddings, a Transformer encoder and decoder, a target-vocabulary projection."""

    def __init__(self, src_vocab: int, tgt_vocab: int, pad: int, positions: int, dim: int = 64) -> None:
        super().__init__()
        self.pad = pad
        self.scale = math.sqrt(dim)
        self.src_embed = nn.Embedding(src_vocab, dim, padding_idx=pad)
        self.tgt_embed = nn.Embedding(tgt_vocab, dim, padding_idx=pad)
        self.positions = nn.Embedding(positions, dim)
        kw = {"d_model": dim, "nhead": 4, "dim_feedforward": 4 * dim, "dropout": 0.0, "batch_first": True}
        # no nested-tensor fast path: it is a prototype API and warns in evaluation mode
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), 1, enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), 1)
        self.project = nn.Linear(dim, tgt_vocab)

    def _embed(self, table: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
        return table(tokens) * self.scale + self.positions(torch.arange(tokens.shape[1]))

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return self.encoder(self._embed(self.src_embed, src), src_key_padding_mask=src == self.pad)

    def decode(self, memory: torch.Tensor, src: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        """Logits ``(batch, len(prev), target vocabulary)`` for decoder inputs ``prev``."""
        n = prev.shape[1]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        hidden = self.decoder(
            self._embed(self.tgt_embed, prev),
            memory,
            tgt_mask=causal,
            tgt_key_padding_mask=prev == self.pad,
            memory_key_padding_mask=src == self.pad,
        )
        return self.project(hidden)

    def forward(self, src: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(src), src, prev)


@dataclass
class Progress:
    """Where training stands: the epoch in progress (or next) and the optimizer steps taken so far."""

    epoch: int = 1
    step: int = 0


def decoder_inputs(target: torch.Tensor, eos: int) -> torch.Tensor:
    """Teacher forcing as fairseq does it: ``[eos] + target[:-1]`` (targets end with ``</s>``)."""
    start = torch.full((target.shape[0], 1), eos, dtype=target.dtype)
    return torch.cat([start, target[:, :-1]], dim=1)


def longest_row(data: str) -> int:
    """The longest row, in tokens, of any column of any split (positions must cover valid and test too)."""
    longest = 0
    for name in Manifest.load(data).splits():
        split = open_split(data, name)
        longest = max(longest, *(int(split.lengths(c).max(initial=0)) for c in split.columns))
    return longest


def build_model(data: str, ds: ArrowMTDataset | ArrowMTSampledDataset, dim: int) -> Seq2Seq:
    columns = ds.metadata.columns  # a sampled dataset's: the dictionaries extended by the pieces only samples use
    longest = longest_row(data)
    if isinstance(ds, ArrowMTSampledDataset):  # a sampled row may take more pieces than its fixed segmentation
        longest = max(longest, *(ds.max_length(c) for c in ds.columns))
    positions = 2 * longest + 2  # greedy decoding may run past the longest reference
    return Seq2Seq(columns["source"].vocab_size, columns["target"].vocab_size, ds.special_ids.pad, positions, dim)


def loss_of(model: Seq2Seq, batch: dict[str, Any], eos: int, reduction: str = "mean") -> torch.Tensor:
    target = batch["target"]
    logits = model(batch["source"], decoder_inputs(target, eos))
    return nn.functional.cross_entropy(
        logits.flatten(0, 1), target.flatten(), ignore_index=model.pad, reduction=reduction
    )


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: dict[str, Any], eos: int) -> float:
    loss = loss_of(model, batch, eos)  # type: ignore[arg-type]  # a Seq2Seq, or torch.compile's wrapper of one
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


@torch.no_grad()
def validate(model: Seq2Seq, ds: ArrowMTDataset, max_tokens: int) -> tuple[float, int]:
    """Loss per target token over the whole split (fixed batches, no shuffling) and the token count."""
    model.eval()
    sampler = TokenBatchSampler(ds, max_tokens=max_tokens, shuffle=False, num_replicas=1, rank=0)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=PlainCollater(ds.special_ids))
    total, tokens = 0.0, 0
    for batch in loader:
        total += loss_of(model, batch, ds.special_ids.eos, reduction="sum").item()
        tokens += int(batch["target_lengths"].sum())
    model.train()
    return total / max(tokens, 1), tokens


@torch.no_grad()
def greedy(model: Seq2Seq, src: torch.Tensor, eos: int, max_len: int) -> list[list[int]]:
    """Greedy decoding of a right-padded source batch: each hypothesis up to (excluding) its ``</s>``."""
    model.eval()
    memory = model.encode(src)
    prev = torch.full((src.shape[0], 1), eos, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        step = model.decode(memory, src, prev)[:, -1].argmax(-1)
        step = torch.where(done, torch.full_like(step, model.pad), step)
        prev = torch.cat([prev, step[:, None]], dim=1)
        done |= step == eos
        if bool(done.all()):
            break
    model.train()
    return [[t for t in row if t not in (eos, model.pad)] for row in prev[:, 1:].tolist()]


def detokenize(dictionary: Dictionary, ids: list[int]) -> str:
    """Text of ``ids`` without ``</s>``/padding; sentencepiece pieces are joined back into words."""
    kept = [i for i in ids if i not in (dictionary.eos, dictionary.pad)]
    text = dictionary.decode(kept)
    if SPM_SPACE in text:
        text = text.replace(" ", "").replace(SPM_SPACE, " ").strip()
    return text


def translate(model: Seq2Seq, ds: ArrowMTDataset, rows: list[int], batch_size: int = 64) -> list[list[int]]:
    """Greedy hypotheses (target ids) for ``rows`` of ``ds``, decoded in batches."""
    collate = PlainCollater(ds.special_ids)
    hypotheses: list[list[int]] = []
    for first in range(0, len(rows), batch_size):
        batch = collate([ds[i] for i in rows[first : first + batch_size]])
        limit = 2 * int(batch["source_lengths"].max()) + 1
        limit = min(limit, model.positions.num_embeddings - 1)
        hypotheses += greedy(model, batch["source"], ds.special_ids.eos, limit)
    return hypotheses


def report_test(model: Seq2Seq, data: str, args: argparse.Namespace, vocab: dict[str, Dictionary]) -> None:
    """Show a few greedy translations of the test split and BLEU over ``--bleu-sentences`` of them (``vocab``: the
    dictionaries the model was trained with, by column: a sampled dataset's extend the corpus's)."""
    test = open_dataset(data, "test")
    rows = list(range(min(len(test), max(args.show, args.bleu_sentences))))
    hypotheses = [detokenize(vocab["target"], h) for h in translate(model, test, rows)]
    references = [detokenize(vocab["target"], test.row("target", i).tolist()) for i in rows]
    for i in rows[: args.show]:
        print(f"test {i} src: {detokenize(vocab['source'], test.row('source', i).tolist())}")
        print(f"test {i} ref: {references[i]}")
        print(f"test {i} hyp: {hypotheses[i]}")
    scored = min(len(rows), args.bleu_sentences)
    try:
        import sacrebleu
    except ImportError:
        print("BLEU skipped: pip install sacrebleu")
        return
    if scored:
        bleu = sacrebleu.corpus_bleu(hypotheses[:scored], [references[:scored]])
        print(f"BLEU {bleu.score:.2f} on {scored} test sentences")


def save_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, loader: Any, at: Progress) -> None:
    """Model, optimizer and data-loader state, written to a temporary file and renamed (never half-written)."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "loader": loader.state_dict(),
        "epoch": at.epoch,
        "step": at.step,
    }
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    print(f"saved {path} (step {at.step}; resumes in epoch {at.epoch})", flush=True)


def load_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, loader: Any) -> Progress:
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    load_loader_state(loader, state["loader"])  # loader.load_state_dict, also with another --num-workers
    at = Progress(state["epoch"], state["step"])
    print(f"resumed from {path} (epoch {at.epoch}, step {at.step})", flush=True)
    return at


def stateful_loader(ds: Any, sampler: Any, collate: Any, num_workers: int) -> Any:
    """A loader whose ``state_dict()`` is the position after the last batch it yielded: ``arrowmt.ReadAheadLoader``
    (a thread reads ahead; no worker processes, what arrowmt recommends) or, with ``num_workers`` > 0, torchdata's
    ``StatefulDataLoader``. Their states load into each other (``load_loader_state``)."""
    if num_workers == 0:
        return ReadAheadLoader(ds, sampler, collate)
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError as exc:
        raise SystemExit("this example resumes through torchdata: pip install 'arrowmt[resume]'") from exc
    with warnings.catch_warnings():  # torchdata 0.11 calls torch.set_vital, deprecated in torch 2.13
        warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
        return StatefulDataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)


def parameters_sha256(model: nn.Module) -> str:
    """A fingerprint of every parameter's exact bytes (equal runs give equal fingerprints)."""
    digest = hashlib.sha256()
    for tensor in model.state_dict().values():
        digest.update(tensor.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


def report_shapes(at: Progress, shapes: set, compiled: bool) -> None:
    """The batch shapes of the epoch so far and, compiled, the graphs ``torch.compile`` has built (one per shape at
    best; fairseq's token batches make a new shape almost every batch)."""
    graphs = f", compiled graphs {torch._dynamo.utils.counters['stats']['unique_graphs']}" if compiled else ""
    print(f"epoch {at.epoch} batch shapes {len(shapes)}{graphs}", flush=True)


def train(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    ds = open_dataset(args.data, "train", segmentation=args.segmentation)
    valid = open_dataset(args.data, "valid")
    shaped = {"batch_shapes": args.batch_shapes} if args.batch_shapes else {}
    sampler = TokenBatchSampler(ds, max_tokens=args.max_tokens, seed=args.seed, **shaped)
    collate = PlainCollater(ds.special_ids, shapes=sampler.batch_shapes() if args.batch_shapes else None)
    loader = stateful_loader(ds, sampler, collate, args.num_workers)
    model = build_model(args.data, ds, args.dim)
    step_model = torch.compile(model, dynamic=False) if args.compile else model  # training steps only
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    at = Progress()
    if args.resume and args.save and Path(args.save).exists():
        at = load_checkpoint(args.save, model, optimizer, loader)
    params, positions = sum(p.numel() for p in model.parameters()), model.positions.num_embeddings
    pairs = getattr(ds, "rows", len(ds))  # a sampled dataset indexes each epoch's rows apart: len is per epochs
    print(f"{pairs} pairs, {len(sampler)} batches per epoch, {params} params, {positions} positions")
    while at.epoch <= args.epochs:
        sampler.set_epoch(at.epoch)  # reshuffles the batch order; keeps a resumed mid-epoch position
        shapes = set()
        for batch in loader:
            loss = train_step(step_model, optimizer, batch, ds.special_ids.eos)
            at.step += 1
            tokens, sentences = int(batch["target_lengths"].sum()), int((batch["id"] >= 0).sum())
            shapes.add((tuple(batch["source"].shape), tuple(batch["target"].shape)))
            print(f"step {at.step} epoch {at.epoch} loss {loss:.6f} sentences {sentences} tokens {tokens}")
            if args.save and args.save_every and at.step % args.save_every == 0:
                save_checkpoint(args.save, model, optimizer, loader, at)
            if at.step == args.stop_after:
                report_shapes(at, shapes, args.compile)
                if args.save:
                    save_checkpoint(args.save, model, optimizer, loader, at)
                print(f"stopped after step {at.step}; continue with --resume")
                return
        report_shapes(at, shapes, args.compile)
        loss, tokens = validate(model, valid, args.max_tokens)
        print(f"epoch {at.epoch} valid loss {loss:.6f} ({tokens} target tokens)", flush=True)
        at.epoch += 1
        if args.save:
            save_checkpoint(args.save, model, optimizer, loader, at)
    print(f"parameters sha256 {parameters_sha256(model)}")
    report_test(model, args.data, args, {column: ds.dictionary(column) for column in ds.columns})


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a converted arrowmt folder with train, valid and test splits")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs")
    parser.add_argument("--max-tokens", type=int, default=4096, help="token budget of a batch")
    parser.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")
    parser.add_argument("--dim", type=int, default=64, help="model width")
    parser.add_argument(
        "--num-workers", type=int, default=0, help="DataLoader worker processes (0: ReadAheadLoader, a thread)"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the model initialization and batch order")
    parser.add_argument(
        "--batch-shapes", type=int, default=0, help="pad every batch to one of at most N shapes (0: off)"
    )
    parser.add_argument(
        "--compile", action="store_true", help="train with torch.compile(dynamic=False), graphs counted per epoch"
    )
    parser.add_argument(
        "--segmentation", choices=("fixed", "sampled"), default="fixed",
        help="sampled: train on sampled segmentations, drawn afresh each epoch (convert text --spm-sampling)",
    )  # fmt: skip
    parser.add_argument("--save", default=None, help="checkpoint file, written after every epoch")
    parser.add_argument("--save-every", type=int, default=0, help="also checkpoint every N steps (0: never)")
    parser.add_argument("--resume", action="store_true", help="continue from --save when it exists")
    parser.add_argument("--stop-after", type=int, default=0, help="checkpoint and stop after step N (0: never)")
    parser.add_argument("--show", type=int, default=3, help="test sentences to print with their translation")
    parser.add_argument("--bleu-sentences", type=int, default=200, help="test sentences scored with sacrebleu")
    return parser.parse_args(argv)


if __name__ == "__main__":
    train(parse_args())
