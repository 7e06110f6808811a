"""Where arrowmt's batch time and plan-building time and memory go (the numbers in docs/benchmarks.md).

Usage::

    python benchmarks/profile_arrowmt.py bench-data/synth-1000000 [--batches 10000] [--build]

* stage breakdown: CPU microseconds per batch of each step of the batch path (sampler,
  ``__getitems__`` and its parts, ``FairseqCollater`` and its parts, DataLoader), best of 3
  passes over the first ``--batches`` batches of epoch 1 (stages overlap: the indented
  ones are parts of the line above);
* the token gather alone: random rows from the map vs the same count of contiguous tokens
  (memory latency of random rows);
* ``--build``: ``cProfile`` of ``_plan.build_plan`` and its ``tracemalloc`` peak.

It calls private helpers (``FairseqCollater._sorted_source``, ``collate.pad_rows``/``pad_shifted``/
``fairseq_order``/``as_tensor``), so it needs touching up when arrowmt's internals
change (written against arrowmt source digest 797e6cb5980a7a67, see run_one.source_digest).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import os
import pstats
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import numpy.ma
import torch
from torch.utils.data import DataLoader

import arrowmt.plans._plan as plan_mod
import arrowmt.reading._spans as spans_mod
import arrowmt.training._collate as collate
import arrowmt.training._sampler as sampler_mod
from arrowmt import open_dataset
from arrowmt.testing import SOURCE, TARGET


def best_cpu(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def stage_breakdown(path: Path, limit: int | None) -> None:
    ds = open_dataset(path)
    s = sampler_mod.TokenBatchSampler(ds, max_tokens=4096, seed=1)
    c = collate.FairseqCollater(ds.special_ids)
    pad, multiple = ds.special_ids.pad, c.pad_to_multiple
    s.set_epoch(1)
    batches = list(itertools.islice(s, limit))
    n = len(batches)
    gathered = [ds.__getitems__(b) for b in batches]
    tokens = sum(int(g.columns[SOURCE].lengths.sum() + g.columns[TARGET].lengths.sum()) for g in gathered)
    shard = ds.shards[0]
    targets = [g.columns[TARGET].select(c._sorted_source(g.columns[SOURCE])[2]) for g in gathered]
    padded_targets = [collate.pad_rows(t, pad, multiple, False) for t in targets]
    spans = [g.columns[col] for g in gathered for col in (SOURCE, TARGET)]
    positions = [spans_mod.flat_positions(sp.starts, sp.lengths) for sp in spans]
    words = spans[0].words
    contiguous = [np.arange(p.shape[0]) + 1000 for p in positions]

    def loader() -> None:
        for _ in itertools.islice(DataLoader(ds, batch_sampler=s, collate_fn=c, num_workers=0), limit):
            pass

    def direct() -> None:
        for b in itertools.islice(s, limit):
            c(ds.__getitems__(b))

    stages: list[tuple[str, Callable[[], object]]] = [
        ("sampler iteration (plan.batch(b).tolist())", lambda: list(itertools.islice(s, limit))),
        ("ds.__getitems__", lambda: [ds.__getitems__(b) for b in batches]),
        ("  ds.locate", lambda: [ds.locate(np.asarray(b)) for b in batches]),
        (
            "  SplitFile.spans, x2",
            lambda: [shard.spans(col, np.asarray(b)) for b in batches for col in (SOURCE, TARGET)],
        ),
        ("FairseqCollater (on gathered batches)", lambda: [c(g) for g in gathered]),
        (
            "  _sorted_source (sort, pad, pad-count check)",
            lambda: [c._sorted_source(g.columns[SOURCE]) for g in gathered],
        ),
        ("    torch.sort order alone", lambda: [collate.fairseq_order(g.columns[SOURCE].lengths) for g in gathered]),
        (
            "  pad_shifted (target + prev_output_tokens)",
            lambda: [collate.pad_shifted(t, ds.special_ids, multiple, False) for t in targets],
        ),
        ("  ntokens = count_nonzero(target != pad)", lambda: [int(np.count_nonzero(t != 1)) for t in padded_targets]),
        ("  batch.ids[order] + 5 torch.from_numpy", lambda: [collate.as_tensor(g.ids[::-1]) for g in gathered]),
        ("gather experiment: words[positions], 2 cols", lambda: [words[p] for p in positions]),
        ("  same token count, contiguous positions", lambda: [words[p] for p in contiguous]),
        ("full: DataLoader(batch_sampler, collate_fn)", loader),
        ("full: sampler -> __getitems__ -> FairseqCollater", direct),
    ]
    print(f"{path}: {n} batches, {tokens / n:.0f} tokens and {sum(map(len, batches)) / n:.1f} rows per batch")
    for name, fn in stages:
        v = best_cpu(fn)
        print(f"{name:46s} {v / n * 1e6:7.1f} us/batch  ({tokens / v / 1e6:7.1f} M tokens/CPU-s)")


def first_batch(path: Path) -> None:
    """Run in a fresh interpreter: the first batch pays lazy imports."""
    code = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
import torch, arrowmt.training._collate as C, arrowmt.training._dataset as D, arrowmt.training._sampler as S
ds = D.open_dataset({str(path)!r}); s = S.TokenBatchSampler(ds, max_tokens=4096, seed=1)
c = C.FairseqCollater(ds.special_ids); s.set_epoch(1); it = iter(s)
t0 = time.perf_counter(); b = next(it); t1 = time.perf_counter(); g = ds.__getitems__(b)
t2 = time.perf_counter(); c(g); t3 = time.perf_counter()
print(f"first batch in a fresh process: sampler {{1e3*(t1-t0):.1f}} ms, __getitems__ {{1e3*(t2-t1):.1f}} ms, "
      f"collate {{1e3*(t3-t2):.1f}} ms; numpy.ma imported: {{'numpy.ma' in sys.modules}}")
"""
    os.system(f"{sys.executable} -c {_quote(code)}")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def build_profile(path: Path) -> None:
    ds = open_dataset(path)
    params = plan_mod.PlanParams(max_tokens=4096, seed=1)
    t = time.perf_counter()
    plan_mod.build_plan(ds, params)
    print(f"build_plan: {time.perf_counter() - t:.2f} s wall (first call)")
    prof = cProfile.Profile()
    prof.enable()
    plan_mod.build_plan(ds, params)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(18)
    tracemalloc.start()
    plan_mod.build_plan(ds, params)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"tracemalloc peak during build_plan: {peak / 2**20:.1f} MiB ({peak / len(ds):.0f} B/row)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="corpus folder from make_corpus.py (or an arrowmt folder)")
    p.add_argument("--batches", type=int, default=10000, help="batches per pass (0: the whole epoch)")
    p.add_argument("--build", action="store_true", help="also profile build_plan (slow at 12.6M)")
    p.add_argument("--cpu", type=int, default=0)
    args = p.parse_args(argv)
    os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    path = args.data / "arrowmt" if (args.data / "arrowmt").is_dir() else args.data
    stage_breakdown(path, args.batches or None)
    first_batch(path)
    if args.build:
        build_profile(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
