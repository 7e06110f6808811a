"""A corpus larger than the memory a node has for it: arrowmt's read-ahead against the peers, side by side, in one run.

Every system reads the first ``--batches`` batches of one rank of ``--world`` (``max_tokens``
4096) from a fresh process (``run_one.py``), with the corpus evicted from the page cache first
and the process limited to ``--budget`` MiB of memory *including page cache*
(``benchmarks/memory_budget.py``: a cgroup v2 or v1 memory group, or a systemd scope; default: a third of
the corpus). ``--throttle BPS,IOPS`` also limits reads from the disk (blkio controller), a model
of a network file system. Rows:

* ``arrowmt in cache``: no budget, corpus in the page cache (the reference speed);
* ``arrowmt in cache, no read-ahead``: the same with ``prefetch=0`` (what read-ahead costs in cache);
* ``arrowmt cold``: the defaults (random-access advice, read-ahead of 8 batches);
* ``arrowmt cold, no read-ahead``: ``prefetch=0`` (random-access advice only);
* ``arrowmt cold, before``: ``prefetch=0`` and the kernel's default read-around (arrowmt until now);
* ``arrowmt ..., plan order``: the copy ``arrowmt order`` makes (``DATA/arrowmt-ordered``, the same
  ``--max-tokens 4096 --seed 1``): each batch's rows stored together; same batches;
* ``fairseq cold``: fairseq's mmap ``IndexedDataset`` + ``LanguagePairDataset`` + ``EpochBatchIterator``;
* ``hf cold``: ``datasets.Dataset.from_file`` + ``with_format("numpy")`` in a ``DataLoader``.

A run past ``--timeout`` seconds is reported as such (with its budget, it did not finish).
Reported: tokens/s and its ratio to in-cache and to fairseq, bytes read from storage per token byte
the batches use (read amplification, ``/proc/self/io``), bytes read at setup, private memory.

    python benchmarks/bench_cold.py --data bench-data/synth-12600000 [--throttle 100000000,2000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUDGET = HERE / "memory_budget.py"  # runs a command under a memory budget that includes the page cache
BLKIO = Path("/sys/fs/cgroup/blkio")

ORDERED = "arrowmt-ordered"  # `arrowmt order DATA/arrowmt DATA/arrowmt-ordered --max-tokens 4096 --seed 1`
ROWS = {  # name: (system, options, cold (else reads --cache-batches), slow: reads --slow-batches batches)
    "arrowmt in cache": ("arrowmt", [], False, False),
    "arrowmt in cache, no read-ahead": ("arrowmt", ["--prefetch", "0"], False, False),
    "arrowmt cold": ("arrowmt", [], True, False),
    "arrowmt cold, no read-ahead": ("arrowmt", ["--prefetch", "0"], True, False),
    "arrowmt cold, before": ("arrowmt", ["--prefetch", "0", "--access", "normal"], True, True),
    "arrowmt in cache, plan order": ("arrowmt", ["--folder", ORDERED], False, False),
    "arrowmt cold, plan order": ("arrowmt", ["--folder", ORDERED], True, False),
    "fairseq cold": ("fairseq", [], True, True),
    "hf cold": ("hf", [], True, True),
}


def corpus_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in (data / "arrowmt").glob("*.arrow"))


def throttled(command: list[str], throttle: str | None) -> tuple[list[str], Path | None]:
    """``command`` run inside a blkio cgroup limiting reads from the root disk to ``BPS,IOPS`` (None: as is)."""
    if not throttle:
        return command, None
    bps, iops = throttle.split(",")
    device = os.major(os.stat("/").st_dev), os.minor(os.stat("/").st_dev)
    group = BLKIO / f"arrowmt-bench-{os.getpid()}"
    group.mkdir(exist_ok=True)
    whole_disk = _whole_disk(device)
    (group / "blkio.throttle.read_bps_device").write_text(f"{whole_disk} {bps}\n")
    (group / "blkio.throttle.read_iops_device").write_text(f"{whole_disk} {iops}\n")
    wrapped = ["bash", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "throttled", *command]
    return wrapped, group


def _whole_disk(device: tuple[int, int]) -> str:
    """MAJ:MIN of the disk holding the root file system (a partition's parent disk)."""
    sys_dev = Path(f"/sys/dev/block/{device[0]}:{device[1]}")
    if (sys_dev / "partition").exists():
        return (sys_dev.resolve().parent / "dev").read_text().strip()
    return f"{device[0]}:{device[1]}"


def read_into_cache(data: Path) -> None:
    """Read the corpus, its side files (plan cache, row-order map) included, into the page cache (again before every
    in-cache row: this VM's kernel reclaims cold pages in the background, DAMON's ``kdamond``, so pages read minutes
    earlier may be gone, and a plan file read at random by the first in-cache row would make it a cold one)."""
    for folder in (data / "arrowmt", data / ORDERED):
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".lock")):
            with open(path, "rb") as handle:
                while handle.read(1 << 24):
                    pass


def budgeted(command: list[str], budget_mib: int, evict: Path) -> list[str]:
    """``command`` run under a memory budget of ``budget_mib`` MiB, page cache included, after ``evict`` is dropped
    from the page cache (``memory_budget.py``: exit 3 where no budget can be made)."""
    return [sys.executable, str(BUDGET), str(budget_mib), "--evict", str(evict), "--", *command]


def run_to_limit(
    command: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess | None:
    """Run ``command`` (in ``env``, default this one's) in a session of its own; past ``timeout`` seconds kill the
    whole session (the measured process is a grandchild, which a plain ``subprocess.run`` timeout would leave
    running) and return None."""
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    ) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return None
    return subprocess.CompletedProcess(command, p.returncode, out, err)


def run_row(name: str, args: argparse.Namespace, budget_mib: int) -> dict:
    system, extra, cold, slow = ROWS[name]
    if not cold:
        read_into_cache(args.data)
    batches = args.slow_batches if slow else args.batches if cold else args.cache_batches
    command = [sys.executable, str(HERE / "run_one.py"), system, "--data", str(args.data), "--cpu", "-1"]
    command += ["--world", str(args.world), "--max-batches", str(batches), *extra]
    group = None
    if cold:
        command, group = throttled(command, args.throttle)
        command = budgeted(command, budget_mib, args.data)
    started = time.perf_counter()
    try:
        done = run_to_limit(command, args.timeout)
    finally:
        if group is not None:
            group.rmdir()
    if done is None:
        return {"row": name, "timed_out": True, "wall_s": time.perf_counter() - started}
    if done.returncode != 0:  # e.g. killed by the memory budget (exit 137)
        print(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
        return {"row": name, "timed_out": True, "failed": done.returncode, "wall_s": time.perf_counter() - started}
    result = json.loads(done.stdout)
    result.update(row=name, timed_out=False, cgroup=done.stderr.strip().splitlines()[-3:] if cold else None)
    return result


def median_tokens(results: list[dict], row: str) -> float | None:
    """The median tokens/s of ``row``'s finished runs (None: none finished)."""
    done = [r["tokens_per_s"] for r in results if r["row"] == row and not r["timed_out"]]
    return statistics.median(done) if done else None


def table(results: list[dict]) -> str:
    """A line per row: the median run of its repeats (tokens/s with their range when repeated)."""
    cache = median_tokens(results, "arrowmt in cache")
    fairseq = median_tokens(results, "fairseq cold")
    lines = [
        "| system | batches | tokens/s | x in cache | x fairseq cold | read amplification | read at setup "
        "| private MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in dict.fromkeys(r["row"] for r in results):
        runs = [r for r in results if r["row"] == name]
        done = sorted((r for r in runs if not r["timed_out"]), key=lambda r: r["tokens_per_s"])
        r = done[(len(done) - 1) // 2] if done else runs[0]
        if r["timed_out"]:
            why = (
                f"exit {r['failed']} after {r['wall_s']:.0f} s"
                if r.get("failed")
                else f"not done in {r['wall_s']:.0f} s"
            )
            lines.append(f"| {r['row']} | | {why} | | | | | |")
            continue
        tps = median_tokens(results, name)
        assert tps is not None
        spread = (
            f" ({done[0]['tokens_per_s'] / 1e6:.2f}-{done[-1]['tokens_per_s'] / 1e6:.2f}M)" if len(done) > 1 else ""
        )
        x_cache = f"{tps / cache:.2f}" if cache else ""
        x_fairseq = f"{tps / fairseq:.0f}" if fairseq else ""
        lines.append(
            f"| {r['row']} | {r['batches']} | {tps / 1e6:.2f}M{spread} | {x_cache} | {x_fairseq} | "
            f"{r['read_amplification']:.1f} | {r['read_bytes_setup'] / 2**20:.1f} MiB | "
            f"{r['private_mib']['rss_anon_batches']:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="corpus folder from make_corpus.py")
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--cache-batches", type=int, default=3000, help="batches of the in-cache rows (a longer run)")
    p.add_argument("--slow-batches", type=int, default=60, help="batches of the slow rows (peers, arrowmt before)")
    p.add_argument("--budget", type=int, default=0, help="MiB incl. page cache (0: a third of the corpus)")
    p.add_argument("--throttle", help="BPS,IOPS read limits of the disk (blkio), e.g. 100000000,2000")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one run may take")
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), metavar="ROW")
    p.add_argument("--repeat", type=int, default=1, help="runs of every row, interleaved (the table: medians)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args()
    budget = args.budget or corpus_bytes(args.data) // 3 // 2**20
    subprocess.run(  # build (or find) the plan once, in cache, so that every arrowmt row reads a cached plan
        [sys.executable, str(HERE / "run_one.py"), "arrowmt", "--data", str(args.data), "--max-batches", "1"],
        capture_output=True,
        check=True,
    )
    results = []
    for k in range(args.repeat):  # interleaved: the host's speed drifts between runs
        for name in args.rows:
            results.append({**run_row(name, args, budget), "repeat": k})
            print(f"{name} #{k + 1}: done", file=sys.stderr)
    header = {
        "corpus_bytes": corpus_bytes(args.data),
        "budget_mib": budget,
        "world": args.world,
        "batches": args.batches,
        "slow_batches": args.slow_batches,
        "throttle": args.throttle,
        "repeat": args.repeat,
        "platform": platform.platform(),
        "read_ahead_kb": Path("/sys/block/vda/queue/read_ahead_kb").read_text().strip()
        if Path("/sys/block/vda/queue/read_ahead_kb").exists()
        else None,
    }
    print(json.dumps(header))
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
