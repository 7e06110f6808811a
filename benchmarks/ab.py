"""The read path of two commits side by side: the same corpus files, runs interleaved, ratios printed.

Every change to the read path is measured against the commit before it with this script.
Each side is a git worktree of a commit (``bench-data/ab/<commit>``) or, for ``.``, this
checkout as it is (uncommitted changes included). Every run is a fresh process that imports
arrowmt from its side's code and measures one thing through the public API, so both
sides run exactly the same measuring code (this file); runs alternate between the sides
(base, head, base, head, ...), ``--repeat`` times.

Measures (a make_corpus.py corpus ``DATA``: ``DATA/arrowmt``, 8 ranks, ``max_tokens`` 4096, seed 1):

* ``epoch``: a whole epoch of rank 0, ``num_workers=0`` (``--batches`` to stop early); ``plan-evicted``: the same
  with the batch plan dropped from the page cache first (the corpus in it);
* ``workers``: the Quickstart's ``num_workers=2`` on ``--worker-batches`` batches, beside
  ``workers0``, the same batches with no worker (the ratio is the target), and ``loader``, the same
  batches through ``ReadAheadLoader`` (a thread reading 4 batches ahead; absent before it existed);
* ``mixture``: ``--views`` filtered views of the one corpus (row lists of Zipf-like sizes,
  ``max_len`` 200) mixed with temperature 5, ``--mixture-batches`` batches: tokens/s, private memory,
  and setup with the plan cached (a first run, not measured, builds it);
* ``lm``: LM blocks (``open_blocks``, 512 tokens, break mode ``none``, ``max_tokens`` 8192) over
  the target side of the corpus as a monolingual split (``DATA/lm``, written once by ``make-lm``),
  ``--lm-batches`` batches;
* ``cold`` and ``cold-ordered``: ``--cold-batches`` batches of ``DATA/arrowmt`` and of its copy in plan order
  (``DATA/arrowmt-ordered``: ``arrowmt order DATA/arrowmt DATA/arrowmt-ordered --max-tokens 4096 --seed 1``,
  made by the older side so that both read it), evicted first and read under a memory budget of ``--budget``
  MiB, page cache included (``memory_budget.py``; default a third of the corpus).

Every run but the cold ones reads the corpus and its side's cache folder into the page cache first. Before
anything runs, both sides' corpus files are dropped from the page cache and read back (``same_history``): a file's
pages left from the conversion that wrote it copy out measurably slower or faster than pages read back.

Each run reports tokens/s (source and target tokens of the finished batches), setup seconds,
RssAnon growth over the baseline after imports (setup, after the batches), and a SHA-256 of its
first batches: the two sides must agree on it (a changed batch is reported). The summary gives
each side's best and spread, and head / base.

    python benchmarks/ab.py run --base b8959cf --head . --data bench-data/synth-12600000 --repeat 2
    python benchmarks/ab.py make-lm --data bench-data/synth-12600000
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import compileall
import hashlib
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_cold import budgeted  # noqa: E402
from memory_budget import evict  # noqa: E402

MEASURES = ("epoch", "plan-evicted", "workers", "workers0", "loader", "mixture", "lm", "cold", "cold-ordered")
HIGHER_IS_BETTER = {
    "tokens_per_s": True,
    "tokens_per_cpu_s": True,
    "setup_s": False,
    "rss_anon_batches": False,
    "rss_anon_setup": False,
}
DIGEST_BATCHES = 8


# ---------------------------------------------------------------- one run, in a fresh process


def rss_anon_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def view_rows(n: int, views: int) -> list[tuple[int, int, int]]:
    """(first row, step, count) of each view's row list: view k keeps rows k, k + views, ... (a Zipf-like share)."""
    return [(k, views, max(1, int(n // views / (1 + k / 4)))) for k in range(views)]


def build_views(arrowmt: object, corpus: Path, folder: Path, views: int) -> list[Path]:
    """The views of the ``mixture`` measure, written by this side's code (formats differ between commits)."""
    import numpy as np

    n = len(arrowmt.open_dataset(corpus, "train"))
    paths = []
    for k, (first, step, count) in enumerate(view_rows(n, views)):
        path = folder / f"v{k:03d}.view"
        if not path.exists():
            rows = np.arange(first, first + step * count, step, dtype=np.int64)
            arrowmt.build_view(corpus, path, rows=rows, max_len=200)
        paths.append(path)
    return paths


def loader_of(arrowmt: object, args: argparse.Namespace, cache: Path) -> tuple[object, object, int]:
    """(DataLoader, sampler, batch limit) of the measure."""
    from torch.utils.data import DataLoader

    corpus = args.data / "arrowmt"
    world = {"num_replicas": 8, "rank": 0, "seed": 1, "cache_dir": cache}
    if args.measure == "mixture":
        paths = sorted((cache / "views").glob("*.view"))
        mixture = arrowmt.open_mixture({p.stem: arrowmt.open_view_dataset(p, corpus) for p in paths})
        sampler = arrowmt.MixtureBatchSampler(mixture, max_tokens=4096, temperature=5.0, **world)
        collate = arrowmt.FairseqCollater(mixture.special_ids)
        return DataLoader(mixture, batch_sampler=sampler, collate_fn=collate), sampler, args.mixture_batches
    if args.measure == "lm":
        ds = arrowmt.open_blocks(args.data / "lm", "train", tokens_per_sample=512, break_mode="none", cache_dir=cache)
        sampler = arrowmt.BlockBatchSampler(ds, max_tokens=8192, **world)
        collate = arrowmt.FairseqBlockCollater(ds.special_ids)
        return DataLoader(ds, batch_sampler=sampler, collate_fn=collate), sampler, args.lm_batches
    if args.measure == "cold-ordered":
        corpus = args.data / "arrowmt-ordered"
    ds = arrowmt.open_dataset(corpus, "train")
    sampler = arrowmt.TokenBatchSampler(ds, max_tokens=4096, **world)
    collate = arrowmt.FairseqCollater(ds.special_ids)
    limits = {"epoch": args.batches, "plan-evicted": args.batches, "cold": args.cold_batches}
    limit = {**limits, "cold-ordered": args.cold_batches}.get(args.measure, args.worker_batches)
    if args.measure == "loader":
        return arrowmt.ReadAheadLoader(ds, sampler, collate), sampler, limit
    workers = 2 if args.measure == "workers" else 0
    return DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=workers), sampler, limit


def digest(h: hashlib._Hash, batch: dict) -> None:
    for tensor in (batch["id"], batch["net_input"]["src_tokens"], batch["target"]):
        h.update(tensor.numpy().astype("<i8").tobytes())


def measure(args: argparse.Namespace) -> dict:
    """One run of ``args.measure`` with the arrowmt of ``args.code``."""
    sys.path.insert(0, str(args.code))
    import torch

    import arrowmt

    torch.set_num_threads(1)
    if not Path(arrowmt.__file__).resolve().is_relative_to(args.code.resolve()):
        raise SystemExit(f"imported {arrowmt.__file__}, expected arrowmt from {args.code}")
    cache = args.cache
    cache.mkdir(parents=True, exist_ok=True)
    if args.measure == "mixture":  # written once per side, before anything is measured
        build_views(arrowmt, args.data / "arrowmt", cache / "views", args.views)
    base = rss_anon_mib()
    started = time.perf_counter()
    loader, sampler, limit = loader_of(arrowmt, args, cache)
    sampler.set_epoch(1)
    batches_iter = iter(loader)
    setup_s = time.perf_counter() - started
    after_setup = rss_anon_mib()
    h = hashlib.sha256()
    tokens = batches = 0
    started = time.perf_counter()
    cpu_started = time.process_time()
    for batch in batches_iter:
        if batches < DIGEST_BATCHES:
            digest(h, batch)
        tokens += int(batch["net_input"]["src_lengths"].sum()) + int(batch["ntokens"])
        batches += 1
        if limit and batches >= limit:
            break
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    return {
        "measure": args.measure,
        "batches": batches,
        "tokens": tokens,
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed,
        "tokens_per_cpu_s": tokens / cpu,
        "setup_s": setup_s,
        "rss_anon_setup": after_setup - base,
        "rss_anon_batches": rss_anon_mib() - base,
        "first_batches_sha256": h.hexdigest(),
        "loadavg": os.getloadavg(),
    }


# ---------------------------------------------------------------- the two sides


def side_code(commit: str) -> tuple[str, Path]:
    """(label, code folder) of a side: ``.`` is this checkout; a commit gets a worktree under bench-data/ab."""
    if commit == ".":
        dirty = subprocess.run(["git", "status", "--porcelain", "arrowmt"], cwd=ROOT, capture_output=True, text=True)
        head = git("rev-parse", "--short", "HEAD")
        return (head + ("+changes" if dirty.stdout.strip() else "")), ROOT
    sha = git("rev-parse", "--short", commit)
    folder = ROOT / "bench-data" / "ab" / sha
    if not folder.exists():
        git("worktree", "add", "--detach", str(folder), sha)
    return sha, folder


def corpus_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in (data / "arrowmt").glob("*.arrow"))


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def run_one(code: Path, label: str, measure_name: str, args: argparse.Namespace) -> dict:
    cache = args.data / "ab-cache" / label.replace("+", "-")
    command = [sys.executable, str(Path(__file__).resolve()), "one", measure_name, "--code", str(code)]
    command += ["--data", str(args.data), "--cache", str(cache), "--views", str(args.views)]
    command += ["--batches", str(args.batches), "--worker-batches", str(args.worker_batches)]
    command += ["--mixture-batches", str(args.mixture_batches), "--lm-batches", str(args.lm_batches)]
    command += ["--cold-batches", str(args.cold_batches)]
    if measure_name.startswith("cold"):
        budget = args.budget or corpus_bytes(args.data) // 3 >> 20
        command = budgeted(command, budget, args.data)
    else:
        read_into_cache([args.data / "arrowmt", cache, *([args.data / "lm"] if measure_name == "lm" else [])])
        if measure_name == "plan-evicted":  # a plan built by an earlier run: a rank of a later one rarely finds
            evict(sorted(cache.glob("plan-*.bin")))  # all of it resident (it reads batches from all over it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # compiled once, as installed
    done = subprocess.run(command, capture_output=True, text=True, env={**env, "PYTHONPATH": str(code)})
    if done.returncode != 0:
        lines = done.stderr.replace(f"{ROOT}/", "").strip().splitlines()  # results keep no machine's own paths
        return {"measure": measure_name, "failed": lines[-3:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_into_cache(folders: list[Path]) -> None:
    """Read every file of ``folders`` into the page cache (before every run: this VM's kernel reclaims cold pages
    in the background, so pages read minutes earlier may be gone, and an in-cache run would read some cold)."""
    for folder in folders:
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".lock")):
            with open(path, "rb") as handle:
                while handle.read(1 << 24):
                    pass


def same_history(folders: list[Path]) -> None:
    """Drop ``folders`` from the page cache and read them back, so that every side's files come into it the same
    way. Pages left from the write that made a file are kept in other (larger or smaller) units than pages read
    back, and copying tokens out of them measured up to 5% apart (issue 50: two conversions of the same rows, one
    read by the same code, 0.90x before this step and 0.95x after it; the remainder was the newer format's offsets
    checks)."""
    evict(folders)
    read_into_cache(folders)


def warm(args: argparse.Namespace, sides: list[tuple[str, Path]]) -> None:
    """Each side's plans (and views) built once, not measured."""
    short = argparse.Namespace(
        **{**vars(args), "batches": 1, "worker_batches": 1, "mixture_batches": 1, "lm_batches": 1}
    )
    for label, code in sides:
        for name in args.measures:
            if name != "workers":
                run_one(code, label, name, short)


def summarize(runs: dict[str, dict[str, list[dict]]], labels: list[str]) -> list[str]:
    base, head = labels
    lines = [f"| measure | {base} | {head} | {head} / {base} | batches agree |", "|---|---:|---:|---:|---|"]
    for name, by_side in runs.items():
        ok = {side: [r for r in rs if "failed" not in r] for side, rs in by_side.items()}
        digests = {r["first_batches_sha256"] for rs in ok.values() for r in rs}
        for key, higher in HIGHER_IS_BETTER.items():
            cells, best = [], []
            for side in labels:
                values = [r[key] for r in ok[side]]
                if not values:
                    cells.append("failed")
                    continue
                best.append(max(values) if higher else min(values))
                cells.append(f"{fmt(best[-1], key)} ({fmt(min(values), key)}-{fmt(max(values), key)})")
            ratio = f"{best[1] / best[0]:.2f}x" if len(best) == 2 and best[0] else ""
            agree = "yes" if len(digests) == 1 else f"NO ({len(digests)} digests)"
            lines.append(f"| {name} {key} | {cells[0]} | {cells[1]} | {ratio} | {agree} |")
    return lines


def fmt(value: float, key: str) -> str:
    if key.startswith("tokens_per"):
        return f"{value / 1e6:.2f}M"
    if key == "setup_s":
        return f"{value:.2f} s"
    return f"{value:+.1f} MiB"


def side_arguments(args: argparse.Namespace, base: bool) -> argparse.Namespace:
    """The options a side's runs get: the base side reads ``--base-data`` where it is given (its own conversion of
    the same rows, when the split format changed between the two commits)."""
    data = args.base_data if base and args.base_data else args.data
    return argparse.Namespace(**{**vars(args), "data": data})


def run(args: argparse.Namespace) -> int:
    sides = [side_code(args.base), side_code(args.head)]
    labels = [label for label, _ in sides]
    options = {labels[0]: side_arguments(args, True), labels[1]: side_arguments(args, False)}
    same_history(sorted({o.data / "arrowmt" for o in options.values()}))
    for _, code in sides:  # setup as a user's: bytecode compiled at install, not on each run's import
        compileall.compile_dir(code / "arrowmt", quiet=1)
    for label, code in sides:
        warm(options[label], [(label, code)])
    runs: dict[str, dict[str, list[dict]]] = {name: {label: [] for label in labels} for name in args.measures}
    for k in range(args.repeat):
        for name in args.measures:
            for label, code in sides if k % 2 == 0 else sides[::-1]:
                result = run_one(code, label, name, options[label])
                runs[name][label].append(result)
                print(f"{name} {label}: {json.dumps(result)}", file=sys.stderr, flush=True)
    header = {
        "base": labels[0],
        "head": labels[1],
        "data": str(args.data),
        "base_data": str(args.base_data or args.data),
        "repeat": args.repeat,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    lines = summarize(runs, labels)
    print(json.dumps(header))
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "runs": runs, "table": lines}, indent=1) + "\n")
    return 0


def make_lm(args: argparse.Namespace) -> int:
    """``DATA/lm``: the target side of ``DATA/arrowmt`` as a monolingual corpus (the data-bin converted)."""
    sys.path.insert(0, str(ROOT))
    from arrowmt import convert_fairseq

    out = args.data / "lm"
    bin_dir = args.data / "lm-bin"
    bin_dir.mkdir(exist_ok=True)
    for suffix in ("bin", "idx"):
        link = bin_dir / f"train.{suffix}"
        if not link.exists():
            link.symlink_to((args.data / "data-bin" / f"train.de-en.en.{suffix}").resolve())
    dictionary = bin_dir / "dict.txt"
    if not dictionary.exists():
        dictionary.symlink_to((args.data / "data-bin" / "dict.en.txt").resolve())
    convert_fairseq(bin_dir, out, overwrite=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    both = argparse.ArgumentParser(add_help=False)
    both.add_argument("--data", type=Path, required=True, help="a make_corpus.py corpus folder")
    both.add_argument("--views", type=int, default=100)
    both.add_argument("--batches", type=int, default=0, help="epoch: stop after this many batches (0: whole epoch)")
    both.add_argument("--worker-batches", type=int, default=6000)
    both.add_argument("--mixture-batches", type=int, default=1500)
    both.add_argument("--lm-batches", type=int, default=3000)
    both.add_argument("--cold-batches", type=int, default=300)
    both.add_argument("--budget", type=int, default=0, help="MiB for the cold runs (0: a third of the corpus)")
    r = sub.add_parser("run", parents=[both], help="both sides, interleaved")
    r.add_argument("--base", required=True, help="a commit")
    r.add_argument("--head", default=".", help="a commit, or . for this checkout as it is")
    r.add_argument("--repeat", type=int, default=2)
    r.add_argument("--base-data", type=Path, help="the base side's corpus folder (default --data): its own conversion")
    r.add_argument("--measures", nargs="+", default=["epoch", "mixture"], choices=MEASURES)
    r.add_argument("--json", type=Path, help="also write every run and the table here")
    one = sub.add_parser("one", parents=[both], help="one run in this process (what run starts)")
    one.add_argument("measure", choices=MEASURES)
    one.add_argument("--code", type=Path, required=True, help="the checkout whose arrowmt is measured")
    one.add_argument("--cache", type=Path, required=True, help="this side's plan cache and views")
    sub.add_parser("make-lm", parents=[both], help="write DATA/lm once")
    args = p.parse_args()
    if args.command == "one":
        print(json.dumps(measure(args)))
        return 0
    return run(args) if args.command == "run" else make_lm(args)


if __name__ == "__main__":
    raise SystemExit(main())
