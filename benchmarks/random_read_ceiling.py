"""How fast can any reader of random rows go on this disk? The device's random 4 KiB read rate beside arrowmt's.

A corpus larger than the memory for it is read from storage; rows of ~100 bytes drawn at random cost a 4 KiB
page each (and a page of offsets), whatever asks for them. So tokens/s cold is capped at

    pages per second the storage serves x 4 KiB / (4 bytes a token x bytes read per byte used)

This script measures, in one run:

* **the device**: random 4 KiB reads of the corpus file with ``O_DIRECT`` (no page cache, nothing to evict)
  from a pool of threads (``--threads``), the most reads per second it sustains;
* **arrowmt cold** and **in cache** (``bench_cold.py``'s rows, ``--world`` ranks, a third of the corpus as the
  memory budget): the pages per second arrowmt gets from storage cold, its read amplification, its tokens/s;

and prints the cap the device puts on tokens/s at that read amplification, as a share of in-cache speed. Where
arrowmt cold reads as many pages per second as the device serves, only a layout that reads fewer pages per
byte used (a copy in plan order) can go faster.

    python benchmarks/random_read_ceiling.py --data bench-data/synth-12600000
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import random
import threading
import time
from pathlib import Path

from bench_cold import corpus_bytes, run_row

PAGE = 4096
TARGET = 0.30  # the share of in-cache speed asked of a corpus larger than memory


def direct_reads(path: Path, threads: int, reads: int) -> dict[str, float]:
    """Random page-aligned 4 KiB ``O_DIRECT`` reads of ``path`` from ``threads`` threads: reads per second."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    pages = os.fstat(fd).st_size // PAGE
    each = max(1, reads // threads)

    def work(seed: int) -> None:
        buffer = mmap.mmap(-1, PAGE)  # page-aligned, as O_DIRECT needs
        draw = random.Random(seed)
        for _ in range(each):
            os.preadv(fd, [buffer], draw.randrange(pages) * PAGE)

    pool = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    os.close(fd)
    return {"threads": threads, "reads_per_s": threads * each / wall, "cpu_per_wall": cpu / wall}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="corpus folder from make_corpus.py")
    p.add_argument("--threads", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--reads", type=int, default=200_000, help="O_DIRECT reads per thread count")
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    files = sorted((args.data / "arrowmt").glob("*.arrow"))
    device = [direct_reads(files[0], threads, args.reads) for threads in args.threads]
    args.cache_batches, args.slow_batches, args.throttle = args.batches, args.batches, None
    budget = corpus_bytes(args.data) // 3 // 2**20
    cache, cold = (run_row(name, args, budget) for name in ("arrowmt in cache", "arrowmt cold"))
    best = max(d["reads_per_s"] for d in device)
    pages_per_s = cold["read_bytes_epoch"] / PAGE / cold["epoch_s"]
    cap = best * PAGE / (4 * cold["read_amplification"])
    for d in device:
        rate, cpus = d["reads_per_s"], d["cpu_per_wall"]
        print(f"device, O_DIRECT 4 KiB random reads, {d['threads']} threads: {rate:,.0f} reads/s ({cpus:.2f} CPUs)")
    amplification, cold_speed, cache_speed = cold["read_amplification"], cold["tokens_per_s"], cache["tokens_per_s"]
    print(f"arrowmt cold: {pages_per_s:,.0f} pages/s from storage ({pages_per_s / best:.2f}x the device's best), "
          f"read amplification {amplification:.1f}, {cold_speed / 1e6:.2f}M tokens/s")  # fmt: skip
    print(f"arrowmt in cache: {cache_speed / 1e6:.2f}M tokens/s")
    print(f"the device's cap at that read amplification: {cap / 1e6:.2f}M tokens/s = {cap / cache_speed:.2f} "
          f"of in cache (arrowmt cold: {cold_speed / cache_speed:.2f})")  # fmt: skip
    needed = TARGET * cache_speed * 4 * amplification / PAGE
    print(f"{TARGET:.0%} of in cache at that read amplification needs {needed:,.0f} pages/s "
          f"({needed / best:.1f}x the device's best, {needed / pages_per_s:.1f}x arrowmt's)")  # fmt: skip
    if args.json:
        header = {"corpus_bytes": corpus_bytes(args.data), "budget_mib": budget, "platform": platform.platform()}
        out = {"header": header, "device": device, "cache": cache, "cold": cold, "cap_tokens_per_s": cap,
               "pages_per_s": pages_per_s, "pages_per_s_needed": needed}  # fmt: skip
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
