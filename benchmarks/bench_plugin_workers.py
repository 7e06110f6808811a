"""The fairseq plugin's training iterator at fairseq-train's worker settings: ``--num-workers`` 0, 1 (fairseq's
default) and 2, side by side in one run.

Each run is a fresh process: the ``translation_arrow`` task on ``DATA/arrowmt`` (a ``make_corpus.py`` corpus, read
into the page cache first), its training iterator as ``fairseq-train`` asks for it (rank 0 of 8, ``--max-tokens``
4096, ``--seed`` 1, the transformer's position limits, ``--required-batch-size-multiple`` 8, long rows skipped), and
the first ``--batches`` batches of epoch 1, with no model: tokens/s of the loader alone. Settings interleaved,
``--repeat`` times.

    python benchmarks/bench_plugin_workers.py --data bench-data/synth-12600000 --repeat 3 --batches 3000
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ab import read_into_cache  # noqa: E402

WORKERS = (0, 1, 2)


def one(data: Path, workers: int, batches: int) -> dict:
    """One run in this process: tokens/s of ``batches`` batches of the plugin's training iterator."""
    sys.path.insert(0, str(HERE.parent))
    import logging

    logging.disable(logging.WARNING)
    import torch

    torch.set_num_threads(1)
    import arrowmt.integrations.fairseq_plugin as plugin

    cfg = plugin.TranslationArrowConfig(data=str(data / "arrowmt"), dataset_impl=None, train_subset="train",
                                        required_seq_len_multiple=1)  # fmt: skip
    task = plugin.TranslationArrowTask.setup_task(cfg)
    task.load_dataset("train")
    itr = task.get_batch_iterator(
        task.dataset("train"), max_tokens=4096, max_positions=(1024, 1024), ignore_invalid_inputs=True,
        required_batch_size_multiple=8, seed=1, num_shards=8, shard_id=0, num_workers=workers, epoch=1,
    )  # fmt: skip
    epoch = itr.next_epoch_itr(shuffle=True)
    tokens = done = 0
    started = time.perf_counter()
    for batch in epoch:
        tokens += int(batch["net_input"]["src_lengths"].sum()) + int(batch["ntokens"])
        done += 1
        if done >= batches:
            break
    return {"workers": workers, "batches": done, "tokens_per_s": tokens / (time.perf_counter() - started)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="a make_corpus.py corpus folder")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a single run, in this process
    p.add_argument("--json", type=Path, help="also write every run and the table here")
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.data, args.one, args.batches)))
        return 0
    runs: dict[int, list[float]] = {w: [] for w in WORKERS}
    for _ in range(args.repeat):
        for workers in WORKERS:
            read_into_cache([args.data / "arrowmt"])
            command = [sys.executable, __file__, "--data", str(args.data), "--batches", str(args.batches)]
            done = subprocess.run([*command, "--one", str(workers)], capture_output=True, text=True, check=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs[workers].append(result["tokens_per_s"])
            print(json.dumps(result), file=sys.stderr, flush=True)
    base = statistics.median(runs[0])
    lines = ["| `--num-workers` | tokens/s, median (range) | x `--num-workers 0` |", "|---|---:|---:|"]
    for workers, rates in runs.items():
        median = statistics.median(rates)
        lines.append(f"| {workers} | {median / 1e6:.2f}M ({min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f}M) | "
                     f"{median / base:.2f}x |")  # fmt: skip
    header = {"data": str(args.data), "batches": args.batches, "repeat": args.repeat, "cpus": os.cpu_count(),
              "platform": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    print(json.dumps(header))
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "runs": runs, "table": lines}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
