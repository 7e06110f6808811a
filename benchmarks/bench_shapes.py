"""Batch shapes (issue 51): fairseq's token-budget batches against packed batches, on one corpus, in one run.

For one rank's share of an epoch (``--rank`` of ``--world``, ``max_tokens`` ``--max-tokens``, seed 1) it prints,
for each kind of batch: batches, distinct tensor shapes (fairseq's: batch size, longest source, longest target;
packed: one), how much of the tensors is not a token (fairseq's padding; packed: the buffers' room left empty),
and the plan's build time (a fresh cache).

    python benchmarks/make_corpus.py --rows 12600000 --out bench-data/synth-12600000   # once
    python benchmarks/bench_shapes.py --data bench-data/synth-12600000/arrowmt
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="an arrowmt folder with a train split")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--rank", type=int, default=0)
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
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
