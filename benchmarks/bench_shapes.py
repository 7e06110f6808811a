"""Batch shapes (issue 51): fairseq's token-budget batches against packed batches, on one corpus, in one run.

For one rank's share of an epoch (``--rank`` of ``--world``, ``max_tokens`` ``--max-tokens``, seed 1) it prints,
for each kind of batch: batches, distinct tensor shapes (fairseq's: batch size, longest source, longest target;
packed: one), how much of the tensors is not a token (fairseq's padding; packed: the buffers' room left empty),
and the plan's build time (a fresh cache).

Then, over a whole epoch (every rank's batches), for each ``--buckets`` N: fairseq's ``--num-batch-buckets N``
(fairseq's own ``LanguagePairDataset(num_buckets=N)`` over these lengths: its bucketed sizes, its order and its
``batch_by_size``; a batch's shape is its rows and its longest bucketed source and target, as its collater pads
them) against arrowmt's ``batch_shapes=N`` (``FairseqCollater(shapes=sampler.batch_shapes())``: every batch padded
to one of at most N shapes, its last rows included).

    python benchmarks/make_corpus.py --rows 12600000 --out bench-data/synth-12600000   # once
    python benchmarks/bench_shapes.py --data bench-data/synth-12600000/arrowmt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path

import numpy as np

import arrowmt


def epoch_batches(ds: arrowmt.ArrowMTDataset, args: argparse.Namespace, packed: bool) -> tuple[list, float]:
    """Rank ``args.rank``'s batches of epoch 1, and the seconds the plan took to build."""
    with tempfile.TemporaryDirectory() as cache:
        started = time.perf_counter()
        sampler = arrowmt.TokenBatchSampler(ds, args.max_tokens, packed=packed, seed=1, num_replicas=args.world,
                                            rank=args.rank, cache_dir=cache)  # fmt: skip
        sampler.set_epoch(1)
        batches = list(sampler)
        return batches, time.perf_counter() - started


def measure(ds: arrowmt.ArrowMTDataset, args: argparse.Namespace, packed: bool) -> dict[str, object]:
    src, tgt = ds.lengths("source"), ds.lengths("target")
    batches, seconds = epoch_batches(ds, args, packed)
    sizes = np.array([len(b) for b in batches])
    rows = np.concatenate(batches)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    real = np.add.reduceat(src[rows], starts) + np.add.reduceat(tgt[rows], starts)
    if packed:
        shapes = 1
        tensor = np.full(len(batches), 2 * args.max_tokens)
    else:
        longest = np.maximum.reduceat(src[rows], starts), np.maximum.reduceat(tgt[rows], starts)
        shapes = len(set(zip(sizes.tolist(), longest[0].tolist(), longest[1].tolist(), strict=True)))
        tensor = sizes * (longest[0] + longest[1])
    return {
        "batches": len(batches),
        "shapes": shapes,
        "not_tokens": float(1 - real.sum() / tensor.sum()),
        "tokens_per_batch": float(real.mean()),
        "plan_s": seconds,
    }


class _Sizes:
    """A stand-in for a fairseq dataset that only has sizes (fairseq reads no item to plan its batches)."""

    def __init__(self, sizes: np.ndarray) -> None:
        self.sizes = sizes

    def __len__(self) -> int:
        return len(self.sizes)


@contextlib.contextmanager
def numpy_for_fairseq() -> Iterator[None]:
    """fairseq 0.12's bucketing calls two numpy < 2 names that numpy 2 removed: percentile's ``interpolation=`` (now
    ``method=``) and np.compat.long (int64); both lent for the block, fairseq's own code runs unchanged."""
    percentile = np.percentile
    np.percentile = lambda *a, interpolation="linear", **kw: percentile(*a, method=interpolation, **kw)  # type: ignore[assignment]
    np.compat = types.SimpleNamespace(long=np.int64)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        np.percentile = percentile
        del np.compat


def fairseq_buckets(src: np.ndarray, tgt: np.ndarray, n: int, max_tokens: int) -> dict[str, object]:
    """fairseq's ``--num-batch-buckets n``: its LanguagePairDataset's bucketed sizes, order and batches."""
    from fairseq.data import Dictionary, LanguagePairDataset, data_utils

    dictionary = Dictionary()
    with numpy_for_fairseq():
        ds = LanguagePairDataset(_Sizes(src), src, dictionary, _Sizes(tgt), tgt, dictionary, num_buckets=n)
    with data_utils.numpy_seed(1):
        indices = ds.ordered_indices()
    batches = ds.batch_by_size(indices, max_tokens=max_tokens)
    bsrc, btgt = ds.src.sizes, ds.tgt.sizes  # padded to their buckets
    shapes = {(len(b), int(bsrc[b].max()), int(btgt[b].max())) for b in batches}
    cells = sum(len(b) * (int(bsrc[b].max()) + int(btgt[b].max())) for b in batches)
    return {"batches": len(batches), "shapes": len(shapes), "not_tokens": 1 - float(src.sum() + tgt.sum()) / cells}


def arrowmt_buckets(ds: arrowmt.ArrowMTDataset, n: int, max_tokens: int) -> dict[str, object]:
    """``batch_shapes=n``: the sampler's batches, each padded to the first of its shapes that holds it."""
    src, tgt = ds.lengths("source"), ds.lengths("target")
    with tempfile.TemporaryDirectory() as cache:
        sampler = arrowmt.TokenBatchSampler(ds, max_tokens, batch_shapes=n, seed=1, cache_dir=cache)
        sampler.set_epoch(1)
        shapes = sampler.batch_shapes()
        used, cells = set(), 0
        for rows in sampler:
            shape = ds.__getitems__(rows).holding_shape(shapes)  # the shape the collaters pad it to
            used.add(shape)
            cells += shape[0] * (shape[1] + shape[2])
        count = len(sampler)
    return {"batches": count, "shapes": len(used), "not_tokens": 1 - float(src.sum() + tgt.sum()) / cells}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="an arrowmt folder with a train split")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--buckets", type=int, nargs="*", default=[4, 8, 16], help="N of the bucketed comparisons")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    ds = arrowmt.open_dataset(args.data, "train")
    results = {"fairseq": measure(ds, args, False), "packed": measure(ds, args, True)}
    header = {"rows": len(ds), "max_tokens": args.max_tokens, "rank": f"{args.rank} of {args.world}",
              "platform": platform.platform(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    print(json.dumps(header))
    print("| batches | count | distinct shapes | not tokens | tokens a batch | plan build |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['batches']} | {r['shapes']} | {r['not_tokens']:.2%} | {r['tokens_per_batch']:.0f} | "
              f"{r['plan_s']:.1f} s |")  # fmt: skip
    src, tgt = ds.lengths("source"), ds.lengths("target")
    buckets = {n: {"fairseq": fairseq_buckets(src, tgt, n, args.max_tokens),
                   "arrowmt": arrowmt_buckets(ds, n, args.max_tokens)} for n in args.buckets}  # fmt: skip
    print("\n| whole epoch, N | fairseq --num-batch-buckets N: shapes | padding | arrowmt batch_shapes=N: shapes | "
          "padding |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for n, r in buckets.items():
        f, a = r["fairseq"], r["arrowmt"]
        print(f"| {n} | {f['shapes']} | {f['not_tokens']:.1%} | {a['shapes']} | {a['not_tokens']:.1%} |")
    if args.json:
        out = {"header": header, "results": results, "buckets": buckets}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
