"""Loaders side by side: arrowmt with no worker, through ``ReadAheadLoader`` and with DataLoader workers, against
fairseq mmap with the same workers, on the same corpus in the page cache, in one run.

Usage::

    python benchmarks/bench_workers.py --rows 12600000 --repeat 2 --batches 6000

Every configuration runs ``--repeat`` times, interleaved, each in a fresh ``benchmarks/run_one.py`` process on
every core (workers need them; nothing is pinned), the files it reads read into the page cache first, over the
first ``--batches`` batches of rank 0's epoch (``max_tokens`` 4096, seed 1). The table keeps each configuration's
best run and the range; "x fairseq" divides by fairseq with the same number of workers, "x own no worker" by the
same system with none. Every run is saved to ``benchmarks/results/workers-<rows>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab import read_into_cache
from run_all import ensure_corpus, run_config

HERE = Path(__file__).resolve().parent
CONFIGS = {  # name -> (run_one system, extra args, workers)
    "arrowmt, no worker": ("arrowmt", [], 0),
    "arrowmt, ReadAheadLoader": ("arrowmt", ["--loader", "readahead"], 0),
    "arrowmt, 2 workers": ("arrowmt", ["--num-workers", "2"], 2),
    "fairseq mmap, no worker": ("fairseq", [], 0),
    "fairseq mmap, 2 workers": ("fairseq", ["--num-workers", "2"], 2),
}


def table(runs: dict[str, list[dict]]) -> str:
    best = {name: max(r["tokens_per_s"] for r in found) for name, found in runs.items()}
    lines = [
        "| loader | tokens/s, best (range) | x fairseq, same workers | x own no worker | first batches |",
        "|---|---:|---:|---:|---|",
    ]
    for name, found in runs.items():
        system, _, workers = CONFIGS[name]
        rates = [r["tokens_per_s"] for r in found]
        peer = "fairseq mmap, 2 workers" if workers else "fairseq mmap, no worker"
        own = "arrowmt, no worker" if system == "arrowmt" else "fairseq mmap, no worker"
        digests = {r["first_batches_sha256"][:12] for r in found}
        lines.append(
            f"| {name} | {best[name] / 1e6:.2f}M ({min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f}M) "
            f"| {best[name] / best[peer]:.1f}x | {best[name] / best[own]:.2f}x | {', '.join(sorted(digests))} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=12600000)
    p.add_argument("--data", type=Path, help="default bench-data/synth-ROWS (made by make_corpus.py if missing)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--batches", type=int, default=6000)
    p.add_argument("--json", type=Path, help="default benchmarks/results/workers-ROWS.json")
    args = p.parse_args(argv)
    data = args.data or HERE.parent / "bench-data" / f"synth-{args.rows}"
    ensure_corpus(args.rows, data)
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for repeat in range(args.repeat):
        for name, (system, extra, _) in CONFIGS.items():
            print(f"  {repeat + 1}/{args.repeat} {name}", file=sys.stderr, flush=True)
            read_into_cache([data / ("arrowmt" if system == "arrowmt" else "data-bin")])
            runs[name].append(run_config(system, [*extra, "--max-batches", str(args.batches)], data, args.rows, 0, -1))
    text = table(runs)
    print(text)
    out = args.json or HERE / "results" / f"workers-{args.rows}.json"
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    out.write_text(json.dumps({"machine": machine, "batches": args.batches, "runs": runs, "table": text}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
