"""Several ranks of one node reading a copy in plan order from S3 through one shared cache: fairseq's order vs a
shuffle window, side by side in one run.

``bench_s3.py`` runs one rank. Here ``--world`` processes (torch.distributed ``gloo``, a barrier every 8 batches,
as DDP keeps ranks in step) read ``DATA/arrowmt-ordered`` by URL from ``s3_server.py`` on 127.0.0.1 through one
cache folder (``cache_limit`` = ``--cache-frac`` of the copy), each with ``TokenBatchSampler(max_tokens=4096,
seed=1, shuffle_window=W)``, for ``--epochs`` epochs. Reported per setting: the server's GET bytes and requests
over the open and all epochs (a block is fetched once per node, whichever rank asks), each epoch's node tokens/s
(source + target tokens of every rank's batches). Every rank checks it got its share of the batches.

    .venv-peers/bin/python benchmarks/bench_s3_ranks.py --data bench-data/synth-1000000 --world 2 --repeat 2

(``bench_s3.py prepare --data ...`` first: it makes ``DATA/arrowmt-ordered``.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_s3 import BUCKET, MAX_TOKENS, PREFIX, SEED, Server, counters, upload  # noqa: E402

SYSTEM = "arrowmt-ordered"
BARRIER_EVERY = 8


def rank_main(args: argparse.Namespace) -> int:
    """One rank: its epochs' wall times and tokens as one JSON line."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    import arrowmt

    dist.init_process_group("gloo", rank=args.rank, world_size=args.world)
    window = None if args.window == "none" else int(args.window)
    dataset = arrowmt.open_dataset(args.url, "train", cache_dir=args.cache_dir, cache_limit=args.cache_limit)
    sampler = arrowmt.TokenBatchSampler(dataset, max_tokens=MAX_TOKENS, seed=SEED, shuffle_window=window)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=arrowmt.FairseqCollater(dataset.special_ids))
    epochs = []
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        dist.barrier()
        t0, tokens, batches = time.perf_counter(), 0, 0
        for batch in loader:
            tokens += int(batch["ntokens"]) + int(batch["net_input"]["src_lengths"].sum())
            batches += 1
            if batches % BARRIER_EVERY == 0:
                dist.barrier()
        dist.barrier()
        if batches != len(sampler):
            raise SystemExit(f"rank {args.rank}: {batches} batches, expected {len(sampler)}")
        epochs.append({"wall_s": time.perf_counter() - t0, "tokens": tokens, "batches": batches})
    dist.destroy_process_group()
    print(json.dumps(epochs))
    return 0


def run_setting(args: argparse.Namespace, server: Server, window: str, limit: int, port: int) -> dict[str, Any]:
    """``--world`` ranks with ``window`` on a fresh cache: GETs, bytes, and each epoch's node tokens/s."""
    cache = Path(tempfile.mkdtemp(prefix="arrowmt-ranks-", dir=args.cache_root))
    env = {**os.environ, **server.env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    env["OMP_NUM_THREADS"] = "1"
    counters(server.endpoint, reset=True)
    url = f"s3://{BUCKET}/{PREFIX[SYSTEM]}"
    common = ["--url", url, "--cache-dir", str(cache), "--cache-limit", str(limit), "--window", window]
    common += ["--world", str(args.world), "--epochs", str(args.epochs)]
    try:
        command = [sys.executable, __file__, "rank", *common]
        ranks = [
            subprocess.Popen([*command, "--rank", str(r)], env=env, stdout=subprocess.PIPE, text=True)
            for r in range(args.world)
        ]
        outputs = [p.communicate(timeout=args.timeout)[0] for p in ranks]
        if any(p.returncode for p in ranks):
            raise SystemExit(f"window {window}: a rank failed (exit codes {[p.returncode for p in ranks]})")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    per_rank = [json.loads(out.strip().splitlines()[-1]) for out in outputs]
    total = counters(server.endpoint)["total"]
    epochs = []
    for e in range(args.epochs):
        wall = max(r[e]["wall_s"] for r in per_rank)
        tokens = sum(r[e]["tokens"] for r in per_rank)
        epochs.append({"epoch": e + 1, "wall_s": round(wall, 2), "tokens": tokens, "tokens_per_s": tokens / wall})
    return {"window": window, "get_bytes": total["get_bytes"], "get_requests": total["get_requests"], "epochs": epochs}


def table(runs: list[dict[str, Any]], stored: int, world: int) -> str:
    lines = [
        f"{world} ranks of one node, one cache; copy {stored / 1e6:.0f} MB; median (min-max) of {{n}} run(s)",
        "",
        "| shuffle_window | fetched MB, all epochs (x copy) | GETs, all epochs | node tokens/s per epoch |",
        "|---|---:|---:|---|",
    ]
    for window in dict.fromkeys(r["window"] for r in runs):
        mine = [r for r in runs if r["window"] == window]
        lines[0] = lines[0].replace("{n}", str(len(mine)))
        fetched = [r["get_bytes"] / 1e6 for r in mine]
        gets = [r["get_requests"] for r in mine]
        rates = " / ".join(
            f"{statistics.median(t) / 1e6:.2f}M ({min(t) / 1e6:.2f}-{max(t) / 1e6:.2f})"
            for t in zip(*[[e["tokens_per_s"] for e in r["epochs"]] for r in mine], strict=True)
        )
        mb, ratio = statistics.median(fetched), statistics.median(fetched) * 1e6 / stored
        lines.append(f"| {window} | {mb:.0f} ({ratio:.2f}) | {statistics.median(gets):.0f} | {rates} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command")
    q = sub.add_parser("rank", help="one rank (internal)")
    for name in ("--url", "--cache-dir", "--window"):
        q.add_argument(name, required=True)
    for name in ("--rank", "--world", "--epochs", "--cache-limit"):
        q.add_argument(name, type=int, required=True)
    p.add_argument("--data", type=Path, help="corpus folder from make_corpus.py (with arrowmt-ordered)")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--windows", nargs="+", default=["none", "256"], help="shuffle_window values ('none': fairseq's)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--cache-frac", type=float, default=0.25)
    p.add_argument("--cache-root", default=None)
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.command == "rank":
        return rank_main(args)
    if args.data is None:
        p.error("--data is required")
    server = Server(4 * 3600.0)
    try:
        stored = upload(args.data, server.endpoint, [SYSTEM])[SYSTEM]
        limit = int(args.cache_frac * stored)
        runs = []
        for k in range(args.repeat):
            for j, window in enumerate(args.windows):
                port = 29500 + k * len(args.windows) + j  # a fresh rendezvous port per setting
                runs.append({**run_setting(args, server, window, limit, port), "repeat": k})
                print(f"window {window} #{k + 1}: done", flush=True)
    finally:
        server.stop()
    print(table(runs, stored, args.world))
    header = {"world": args.world, "stored_bytes": stored, "cache_limit": limit, "epochs": args.epochs}
    header.update(platform=platform.platform(), cpus=os.cpu_count(), max_tokens=MAX_TOKENS, seed=SEED)
    if args.json:
        args.json.write_text(json.dumps({"header": header, "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
