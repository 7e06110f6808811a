"""Training a compiled model on fairseq's batches against packed batches (issue 51), same corpus and model, one run.

The model is ``examples/packed_model.py`` (a small encoder-decoder transformer that takes padded batches and packed
ones); each configuration trains it from the same initial weights (SGD) for ``--steps`` steps after ``--warmup``
steps, in float32, one thread, and prints training tokens/s (source and target tokens of the batches, padding left
out), the distinct tensor shapes of the timed steps, the graphs ``torch.compile`` built (recompiles) and the seconds
spent compiling:

* ``fairseq eager`` / ``fairseq compiled``: ``TokenBatchSampler`` (fairseq's token-budget batches), ``FairseqCollater``
  (sources padded on the right), the model's padded path; compiled with ``torch.compile(dynamic=False)``, which
  compiles again for each new shape until its cache limit;
* ``bucketed compiled``: ``batch_shapes=--shapes`` and ``FairseqCollater(shapes=...)``, the padded path, compiled:
  at most that many shapes, each compiled once;
* ``numbuckets compiled``: fairseq's own ``--num-batch-buckets``: ``LanguagePairDataset(num_buckets=--shapes)``
  (items padded to their length buckets), its ``batch_by_size`` and its collater, the padded path, compiled;
* ``packed eager`` / ``packed compiled``: ``packed=True`` and ``PackedCollater``, the model's packed path with each
  token's keys gathered in a window (``--window``, default the corpus's longest sentence): one shape, compiled once.

``--whole-epoch`` times every batch of epoch 1 after the warm-up steps instead of ``--steps`` of them: the graphs
and shapes of a whole epoch.

    python benchmarks/bench_compile.py --data corpora/multi30k --max-tokens 1024 --steps 60

``--data`` is an arrowmt folder with a ``train`` split (default: the bundled Multi30k sample, converted with
``convert_text`` into a temporary folder). Every number is this machine's CPU (inductor's C++ backend); on a GPU,
``--device cuda`` measures there (``--mode reduce-overhead`` for CUDA graphs).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

import arrowmt

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(1, str(HERE))
from packed_model import PackedTranslator  # noqa: E402

SAMPLE = Path(arrowmt.__file__).parent / "sample_data" / "multi30k"


def bundled_corpus(folder: Path) -> Path:
    """The bundled Multi30k training text converted (words as tokens, as fairseq-preprocess would)."""
    for lang in ("de", "en"):
        with gzip.open(SAMPLE / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            (folder / f"train.{lang}").write_text(handle.read(), encoding="utf-8")
    arrowmt.convert_text(str(folder / "train"), folder / "corpus", src_lang="de", tgt_lang="en", progress=False)
    return folder / "corpus"


def batches(ds: arrowmt.ArrowMTDataset, args: argparse.Namespace, kind: str, cache: Path) -> Iterator[tuple]:
    """Epoch after epoch of the configuration's batches (``fairseq``, ``bucketed``, ``numbuckets``, ``packed``),
    collated: (epoch, batch)."""
    if kind == "numbuckets":
        yield from fairseq_bucket_batches(ds, args)
        return
    shaped = {"packed": True} if kind == "packed" else {"batch_shapes": args.shapes} if kind == "bucketed" else {}
    sampler = arrowmt.TokenBatchSampler(ds, args.max_tokens, seed=1, cache_dir=cache, **shaped)
    if kind == "packed":
        collate = arrowmt.PackedCollater(ds.special_ids, capacity=args.max_tokens)
    else:
        shapes = sampler.batch_shapes() if kind == "bucketed" else None
        collate = arrowmt.FairseqCollater(ds.special_ids, left_pad_source=False, shapes=shapes)
    epoch = 1
    while True:
        sampler.set_epoch(epoch)
        for rows in sampler:
            yield epoch, collate(ds.__getitems__(list(rows)))
        epoch += 1


class _Column(torch.utils.data.Dataset):
    """A column's rows as fairseq's token datasets give them (1-D int64 tensors, ``sizes``)."""

    def __init__(self, ds: arrowmt.ArrowMTDataset, column: str) -> None:
        self.ds, self.column, self.sizes = ds, column, ds.lengths(column)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.ds[index][self.column].long()


def fairseq_bucket_batches(ds: arrowmt.ArrowMTDataset, args: argparse.Namespace) -> Iterator[tuple]:
    """fairseq's own ``--num-batch-buckets``: LanguagePairDataset(num_buckets=--shapes) pads each item to its length
    bucket; its order, ``batch_by_size`` and collater; the batches shuffled each epoch as fairseq's iterator does."""
    import numpy as np
    from bench_shapes import numpy_for_fairseq
    from fairseq.data import Dictionary, LanguagePairDataset, data_utils

    src, tgt = _Column(ds, "source"), _Column(ds, "target")
    with numpy_for_fairseq():
        pairs = LanguagePairDataset(src, src.sizes, Dictionary(), tgt, tgt.sizes, Dictionary(),
                                    left_pad_source=False, num_buckets=args.shapes)  # fmt: skip
    with data_utils.numpy_seed(1):
        order = pairs.ordered_indices()
    planned = pairs.batch_by_size(order, max_tokens=args.max_tokens)
    epoch = 1
    while True:
        with data_utils.numpy_seed(1 + epoch):
            shuffled = [planned[k] for k in np.random.permutation(len(planned))]
        for rows in shuffled:
            yield epoch, pairs.collater([pairs[int(i)] for i in rows])
        epoch += 1


def step_of(model: PackedTranslator, packed: bool, compiled: bool, args: argparse.Namespace) -> Callable:
    """One training step's loss function: the model's padded or packed path, compiled or not."""
    if packed:

        def loss(batch: dict) -> torch.Tensor:
            return model.packed_loss(batch, window=args.window)
    else:

        def loss(batch: dict) -> torch.Tensor:
            net = batch["net_input"]
            return model.padded_loss(net["src_tokens"], net["prev_output_tokens"], batch["target"])

    return torch.compile(loss, dynamic=False, mode=args.mode) if compiled else loss


def source_tokens(batch: dict, pad: int) -> int:
    """The batch's real source tokens (a padded batch's added rows left out)."""
    net = batch["net_input"]
    if "src_lengths" in net:
        return int(net["src_lengths"][batch["id"] >= 0].sum())
    return int((net["src_tokens"] != pad).sum())


def shape_of(batch: dict) -> tuple:
    return tuple(tuple(t.shape) for t in (batch["net_input"]["src_tokens"], batch["target"]))


def run(ds: arrowmt.ArrowMTDataset, args: argparse.Namespace, kind: str, compiled: bool, cache: Path) -> dict:
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    vocab = ds.metadata.columns["source"].vocab_size, ds.metadata.columns["target"].vocab_size
    model = PackedTranslator(*vocab, pad=ds.special_ids.pad, dim=args.dim).to(args.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    loss_of = step_of(model, kind == "packed", compiled, args)
    source = batches(ds, args, kind, cache)
    shapes, tokens, compile_s, timed = set(), 0, 0.0, 0
    for k in range(args.warmup + args.steps) if not args.whole_epoch else itertools.count():
        epoch, batch = next(source)
        if args.whole_epoch and epoch > 1:
            break
        if k == args.warmup:
            started = time.perf_counter()
        step_started = time.perf_counter()
        optimizer.zero_grad()
        loss_of(batch).backward()
        optimizer.step()
        if k >= args.warmup:
            timed += 1
            shapes.add(shape_of(batch))
            tokens += source_tokens(batch, ds.special_ids.pad) + int(batch["ntokens"])
        elif compiled:
            compile_s += time.perf_counter() - step_started
    seconds = time.perf_counter() - started
    counters = torch._dynamo.utils.counters
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "steps": timed, "shapes": len(shapes),
            "graphs": int(counters["stats"]["unique_graphs"]), "warmup_s": compile_s}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, help="an arrowmt folder with a train split (default: bundled sample)")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default=None, help="torch.compile mode (reduce-overhead: CUDA graphs)")
    parser.add_argument("--window", type=int, help="packed: keys gathered per token (default: the longest row)")
    parser.add_argument("--shapes", type=int, default=8, help="bucketed: batch_shapes=N")
    configs = ["fairseq-eager", "fairseq-compiled", "bucketed-compiled", "numbuckets-compiled", "packed-eager",
               "packed-compiled"]  # fmt: skip
    parser.add_argument("--configs", nargs="+", default=configs)
    parser.add_argument("--whole-epoch", action="store_true", help="time every batch of epoch 1 after the warm-up")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or bundled_corpus(Path(tmp))
        ds = arrowmt.open_dataset(data, "train")
        args.window = args.window or int(max(ds.lengths("source").max(), ds.lengths("target").max()))
        results = {}
        for name in args.configs:
            kind, how = name.split("-")
            results[name] = run(ds, args, kind, how == "compiled", Path(tmp) / "cache")
            print(name, json.dumps(results[name]), file=sys.stderr, flush=True)
    header = {"rows": len(ds), "max_tokens": args.max_tokens, "dim": args.dim, "steps": args.steps,
              "whole_epoch": args.whole_epoch, "shapes": args.shapes,
              "window": args.window, "warmup": args.warmup, "device": args.device, "torch": torch.__version__,
              "platform": platform.platform(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    print(json.dumps(header))
    best = max(results[n]["tokens_per_s"] for n in results if n.startswith("fairseq")) if any(
        n.startswith("fairseq") for n in results) else 0.0  # fmt: skip
    print("| configuration | training tokens/s | x best fairseq | timed steps | shapes (timed) | graphs | warm-up s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        ratio = f"{r['tokens_per_s'] / best:.2f}x" if best else ""
        print(f"| {name} | {r['tokens_per_s']:,.0f} | {ratio} | {r['steps']} | {r['shapes']} | {r['graphs']} | "
              f"{r['warmup_s']:.1f} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
