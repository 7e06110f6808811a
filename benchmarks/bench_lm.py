"""Language-model data: fairseq ``TokenBlockDataset`` + ``MonolingualDataset`` vs arrowmt token blocks.

Three commands::

    python benchmarks/bench_lm.py make --tokens 100000000            # bench-data/lm-100000000 (fairseq + arrowmt)
    python benchmarks/bench_lm.py one arrowmt --data bench-data/lm-100000000 --mode none --plan cold
    python benchmarks/bench_lm.py all --tokens 100000000 --repeat 3   # every system and mode, fresh processes

* ``make`` writes a synthetic monolingual corpus, deterministically (seeded per chunk of
  500k rows): the row lengths and ids of ``make_corpus.py``'s source side (median 23
  tokens, ``</s>`` closing every row, a 32,000-symbol vocabulary) as a fairseq mmap
  data-bin (``train.idx/.bin`` + ``dict.txt``, as ``fairseq-preprocess --only-source``
  writes it), converted to arrowmt with ``convert_fairseq``.
* ``one SYSTEM`` runs one pipeline in this process, pinned to one core, and prints JSON:
  ``fairseq``: ``load_indexed_dataset`` + ``TokenBlockDataset(include_targets=True)`` +
  ``MonolingualDataset`` (the ``language_modeling`` task's data side) + ``ordered_indices``
  under ``numpy_seed(seed)``, ``filter_indices_by_size(tokens_per_sample)``,
  ``batch_by_size`` + ``EpochBatchIterator``; ``arrowmt``: ``open_blocks`` +
  ``BlockBatchSampler`` (the same order and batches; block table and batch plan cached in
  the corpus) + ``FairseqBlockCollater`` in a ``DataLoader(num_workers=0)``. Both give
  fairseq's language-model batches (``net_input.src_tokens``, ``target``); the JSON holds a
  SHA-256 of the first 8 batches, equal for both.
* ``all`` runs each (system, break mode, plan) ``--repeat`` times, each in a fresh process,
  saves every run in ``benchmarks/results/lm-<tokens>.json`` and prints the markdown table.

Measured: setup (open + blocks + batch plan, after imports), private memory (RssAnon
growth over the post-import baseline, after setup and after the batches, and its peak),
blocks/s and tokens/s (source tokens of finished batches over the wall time of the batch
loop), and for arrowmt the block table's and batch plan's build time and file sizes.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import hashlib
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # run from a checkout: arrowmt, converters, make_corpus, run_one

from make_corpus import chunk_lengths, chunk_tokens, write_dict, write_mmap_index  # noqa: E402
from run_one import PeakSampler, read_bytes, read_memory, rss_anon, source_digest  # noqa: E402

PAD, EOS = 1, 2
VOCAB = 32000
CHUNK_ROWS = 500_000
SYSTEMS = ("fairseq", "arrowmt")
MODES = ("none", "complete", "eos")
DIGEST_BATCHES = 8
RESULTS = HERE / "results"


# ---------------------------------------------------------------- corpus


def make_corpus(out: Path, tokens: int, seed: int) -> dict[str, int]:
    """Rows until ``tokens`` tokens (the last row cut to fit), fairseq data-bin then arrowmt."""
    from arrowmt import convert_fairseq

    data_bin = out / "data-bin"
    data_bin.mkdir(parents=True, exist_ok=True)
    sizes: list[np.ndarray] = []
    written = 0
    with open(data_bin / "train.bin", "wb") as handle:
        for k in range(1 << 30):
            rng = np.random.default_rng([seed, k])
            lengths = chunk_lengths(rng, CHUNK_ROWS)[0]
            ends = np.cumsum(lengths, dtype=np.int64)
            keep = int(np.searchsorted(ends, tokens - written, side="left")) + 1
            lengths = lengths[:keep].copy()
            lengths[-1] -= max(0, int(lengths.sum(dtype=np.int64)) - (tokens - written))
            lengths = lengths[lengths > 0]
            chunk_tokens(rng, lengths, VOCAB).tofile(handle)
            sizes.append(lengths)
            written += int(lengths.sum(dtype=np.int64))
            print(f"  data-bin tokens {written:,}/{tokens:,}", file=sys.stderr, flush=True)
            if written >= tokens:
                break
    all_sizes = np.concatenate(sizes)
    write_mmap_index(data_bin / "train.idx", all_sizes, 2)
    write_dict(data_bin / "dict.txt", VOCAB)
    started = time.perf_counter()
    convert_fairseq(data_bin, out / "arrowmt", overwrite=True, progress=False)
    info = {"rows": int(all_sizes.shape[0]), "tokens": written, "convert_s": time.perf_counter() - started}
    (out / "corpus.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


# ---------------------------------------------------------------- systems


class Fairseq:
    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        from fairseq.data import Dictionary, MonolingualDataset, TokenBlockDataset, data_utils, iterators

        vocab = Dictionary.load(str(data / "data-bin" / "dict.txt"))
        rows = data_utils.load_indexed_dataset(str(data / "data-bin" / "train"), vocab, "mmap")
        blocks = TokenBlockDataset(
            rows, rows.sizes, args.tokens_per_sample, vocab.pad(), vocab.eos(), args.mode, include_targets=True
        )
        self.ds = MonolingualDataset(
            blocks, blocks.sizes, vocab, vocab, args.mode != "none", shuffle=True, targets=["future"]
        )
        with data_utils.numpy_seed(args.seed):
            indices = self.ds.ordered_indices()
        indices, _ = self.ds.filter_indices_by_size(indices, args.tokens_per_sample)
        batches = self.ds.batch_by_size(indices, max_tokens=args.max_tokens, required_batch_size_multiple=8)
        self.itr = iterators.EpochBatchIterator(
            dataset=self.ds, collate_fn=self.ds.collater, batch_sampler=batches, seed=args.seed, num_workers=0
        )
        self.num_batches = len(batches)

    def epoch(self, epoch: int) -> Any:
        return self.itr.next_epoch_itr(shuffle=True)


class ArrowMT:
    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        from torch.utils.data import DataLoader

        from arrowmt import BlockBatchSampler, FairseqBlockCollater, open_blocks

        started = time.perf_counter()
        self.ds = open_blocks(data / args.folder, "train", args.tokens_per_sample, args.mode)
        opened = time.perf_counter()
        self.sampler = BlockBatchSampler(
            self.ds,
            max_tokens=args.max_tokens,
            required_batch_size_multiple=8,
            max_positions=args.tokens_per_sample,
            seed=args.seed,
            skip_invalid_size_inputs=True,
            prefetch=int(os.environ.get("BENCH_PREFETCH", "8")),  # read-ahead depth (cold runs: 0 = off)
            shuffle_window=int(os.environ.get("BENCH_WINDOW", "0")) or None,  # batches (0: fairseq's shuffle)
        )
        self.timings = {"blocks_s": opened - started, "batch_plan_s": time.perf_counter() - opened}
        collate = FairseqBlockCollater(self.ds.special_ids)
        self.loader = DataLoader(self.ds, batch_sampler=self.sampler, collate_fn=collate, num_workers=0)
        self.num_batches = len(self.sampler)

    def epoch(self, epoch: int) -> Any:
        self.sampler.set_epoch(epoch)
        return iter(self.loader)


PIPELINES = {"fairseq": Fairseq, "arrowmt": ArrowMT}


def import_system(system: str) -> None:
    import warnings

    import torch  # noqa: F401

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if system == "fairseq":
            import types

            import fairseq.data  # noqa: F401

            np.compat = types.SimpleNamespace(long=int)  # fairseq 0.12's eos mode under numpy 2
        else:
            import arrowmt.training._block_sampler  # noqa: F401


def cache_files(data: Path, name: str = "arrowmt") -> list[Path]:
    folder = data / name / ".arrowmt-cache"
    return sorted(p for p in folder.glob("*.bin")) if folder.is_dir() else []


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    data = args.data
    result: dict[str, Any] = {
        "system": args.system,
        "mode": args.mode,
        "tokens_per_sample": args.tokens_per_sample,
        "max_tokens": args.max_tokens,
        "plan": args.plan if args.system == "arrowmt" else None,
        "cpus": sorted(os.sched_getaffinity(0)),
        "source_digest": source_digest(),
        "loadavg_start": os.getloadavg(),
        "corpus": json.loads((data / "corpus.json").read_text()),
    }
    t0 = time.perf_counter()
    import_system(args.system)
    result["import_s"] = time.perf_counter() - t0
    if args.system == "arrowmt" and args.plan == "cold":
        for path in cache_files(data, args.folder):
            path.unlink()
    base = read_memory()
    t0 = time.perf_counter()
    with PeakSampler() as setup_peak:
        pipe = PIPELINES[args.system](data, args)
    result["setup_s"] = time.perf_counter() - t0
    after_setup = read_memory()
    if args.system == "arrowmt":
        table = pipe.ds.table
        result["plan_built"] = bool(pipe.sampler.plan.built) or bool(getattr(table, "built", False))
        result["cache_files"] = {p.name: p.stat().st_size for p in cache_files(data, args.folder)}
        result["folder"] = args.folder
        result.update(pipe.timings)
    result.update(num_batches=pipe.num_batches, num_blocks=len(pipe.ds))
    limit = args.max_batches or pipe.num_batches
    digest = hashlib.sha256()
    tokens = blocks = batches = 0
    peak = after_setup["RssAnon"]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    io0 = read_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in pipe.epoch(1):
        if batches < DIGEST_BATCHES:
            for t in (batch["id"], batch["net_input"]["src_tokens"], batch["target"]):
                digest.update(t.numpy().astype("<i8").tobytes())
        tokens += int(batch["ntokens"])
        blocks += int(batch["nsentences"])
        batches += 1
        if batches % 256 == 0:
            peak = max(peak, rss_anon())
        if batches >= limit:
            break
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    faults = resource.getrusage(resource.RUSAGE_SELF)
    after = read_memory()
    result.update(
        batches=batches,
        blocks=blocks,
        tokens=tokens,
        epoch_s=elapsed,
        epoch_cpu_s=cpu,
        blocks_per_s=blocks / elapsed,
        tokens_per_s=tokens / elapsed,
        tokens_per_cpu_s=tokens / cpu,
        epoch_major_faults=faults.ru_majflt - usage.ru_majflt,
        epoch_minor_faults=faults.ru_minflt - usage.ru_minflt,
        read_bytes_epoch=read_bytes() - io0,  # from storage, every thread of this process (/proc/self/io)
        first_batches_sha256=digest.hexdigest(),
        loadavg_end=os.getloadavg(),
        private_mib={
            "setup": after_setup["RssAnon"] - base["RssAnon"],
            "setup_peak": setup_peak.peak - base["RssAnon"],
            "after_batches": after["RssAnon"] - base["RssAnon"],
            "peak": max(peak, after["RssAnon"]) - base["RssAnon"],
        },
    )
    return result


# ---------------------------------------------------------------- all runs and the table


CONFIGS = [("fairseq", None), ("arrowmt", "cold"), ("arrowmt", "warm")]


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    data = Path(f"bench-data/lm-{args.tokens}")
    if not (data / "corpus.json").exists():
        make_corpus(data, args.tokens, args.seed)
    runs = []
    for mode in args.modes:
        for _ in range(args.repeat):
            for system, plan in CONFIGS:
                command = [sys.executable, __file__, "one", system, "--data", str(data), "--mode", mode]
                command += ["--tokens-per-sample", str(args.tokens_per_sample), "--max-tokens", str(args.max_tokens)]
                limit = args.max_batches
                if system == "fairseq" and args.fairseq_max_batches:
                    limit = args.fairseq_max_batches
                command += ["--max-batches", str(limit), "--cpu", str(args.cpu)]
                command += ["--plan", plan] if plan else []
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs.append(json.loads(done.stdout))
                print(f"  {mode} {system} {plan or ''}: done", file=sys.stderr, flush=True)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"lm-{args.tokens}.json"
    path.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    print(table(runs))
    return runs


# ---------------------------------------------------------------- larger than memory

ORDERED = "arrowmt-ordered"  # `bench_lm.py order`: the blocks stored in the plan order of ArrowMT's options
COLD_ROWS = {  # name: (system, read-ahead depth, cold, slow: reads --slow-batches batches, folder)
    "arrowmt in cache": ("arrowmt", 8, False, False, "arrowmt"),
    "arrowmt cold": ("arrowmt", 8, True, False, "arrowmt"),
    "arrowmt cold, no read-ahead": ("arrowmt", 0, True, False, "arrowmt"),
    "arrowmt in cache, plan order": ("arrowmt", 8, False, False, ORDERED),
    "arrowmt cold, plan order": ("arrowmt", 8, True, False, ORDERED),
    "arrowmt cold, plan order, window 256": ("arrowmt", 8, True, False, ORDERED),
    "fairseq cold": ("fairseq", 0, True, True, "arrowmt"),
}


def order_corpus(data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``DATA/arrowmt-ordered``: the blocks stored in the plan order :class:`ArrowMT` reads (its options, epoch 1's
    plan; every epoch's batches are the same blocks, shuffled)."""
    from arrowmt import order_blocks

    started = time.perf_counter()
    order_blocks(
        data / "arrowmt",
        data / ORDERED,
        tokens_per_sample=args.tokens_per_sample,
        break_mode=args.mode,
        max_tokens=args.max_tokens,
        required_batch_size_multiple=8,
        max_positions=args.tokens_per_sample,
        seed=args.seed,
        skip_invalid_size_inputs=True,
        overwrite=True,
    )
    return {"order_s": time.perf_counter() - started}


def run_cold(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each row of :data:`COLD_ROWS`, ``--repeat`` times interleaved, each in a fresh process: cold rows with the
    page cache evicted and the process limited to ``--budget`` MiB including page cache (``memory_budget.py``), the
    in-cache row after reading the corpus into the page cache."""
    from bench_cold import budgeted, read_into_cache, run_to_limit

    corpus = sum(path.stat().st_size for path in (args.data / "arrowmt").glob("*.arrow"))
    budget = args.budget or corpus // 3 // 2**20
    base = [sys.executable, __file__, "one"]
    common = ["--data", str(args.data), "--mode", args.mode, "--cpu", "-1"]
    for folder in sorted({COLD_ROWS[name][4] for name in args.rows}):  # the plans, built before any timing
        warm = [*base, "arrowmt", *common, "--folder", folder, "--max-batches", "1"]
        subprocess.run(warm, capture_output=True, check=True)
    runs = []
    for _ in range(args.repeat):
        for name in args.rows:
            system, depth, cold, slow, folder = COLD_ROWS[name]
            command = [*base, system, *common, "--folder", folder]
            command += ["--max-batches", str(args.slow_batches if slow else args.batches)]
            if cold:
                command = budgeted(command, budget, args.data)
            else:
                read_into_cache(args.data)
            started = time.perf_counter()
            window = name.rsplit("window ", 1)[1] if "window " in name else "0"
            env = {**os.environ, "BENCH_PREFETCH": str(depth), "BENCH_WINDOW": window}
            done = run_to_limit(command, args.timeout, env=env)
            if done is None or done.returncode != 0:
                why = "timed out" if done is None else f"exit {done.returncode}: {done.stderr[-500:]}"
                runs.append({"row": name, "failed": why, "wall_s": time.perf_counter() - started})
            else:
                runs.append({**json.loads(done.stdout), "row": name, "budget_mib": budget if cold else None})
            print(f"  {name}: done", file=sys.stderr, flush=True)
    if args.json:
        header = {"corpus_bytes": corpus, "budget_mib": budget, "platform": platform.platform()}
        args.json.write_text(json.dumps({"header": header, "runs": runs}, indent=1, sort_keys=True) + "\n")
    print(cold_table(runs))
    return runs


def cold_table(runs: list[dict[str, Any]]) -> str:
    """Median (min..max) per row; ratios of medians against the in-cache row and fairseq cold."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        rows.setdefault(run["row"], []).append(run)
    ok = {name: [r for r in group if "failed" not in r] for name, group in rows.items()}
    median = {name: statistics.median(r["tokens_per_s"] for r in group) for name, group in ok.items() if group}
    lines = [
        "| row | runs | batches | tokens/s | x in cache | x fairseq cold | read amplification | major faults/batch "
        "| private MiB peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, group in ok.items():
        if not group:
            lines.append(f"| {name} | 0 | | {rows[name][0]['failed'][:60]} | | | | | |")
            continue
        cache, fairseq = median.get("arrowmt in cache"), median.get("fairseq cold")
        amplification = [r["read_bytes_epoch"] / (4 * r["tokens"]) for r in group]
        speed = spread([r["tokens_per_s"] / 1e6 for r in group], ".2f")
        lines.append(
            f"| {name} | {len(group)} | {group[0]['batches']:,} | {speed}M "
            f"| {median[name] / cache:.2f} | {median[name] / fairseq:,.0f} | {spread(amplification, '.2f')} "
            f"| {spread([r['epoch_major_faults'] / r['batches'] for r in group], '.2f')} "
            f"| {spread([r['private_mib']['peak'] for r in group], '.1f')} |"
            if cache and fairseq
            else f"| {name} | {len(group)} | {group[0]['batches']:,} | {median[name] / 1e6:.2f}M | | | | | |"
        )
    digests = {r["first_batches_sha256"] for name, group in ok.items() for r in group if "window" not in name}
    lines.append(f"\nfirst {DIGEST_BATCHES} batches identical in every run in fairseq's order: {len(digests) == 1}")
    return "\n".join(lines)


def spread(values: list[float], fmt: str) -> str:
    """Median, with min..max when there are several runs."""
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} ({format(min(values), fmt)}..{format(max(values), fmt)})"


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | system | setup s | private MiB after setup | private MiB peak | blocks/s | tokens/s | tokens/CPU-s "
        "| batches timed | plan files |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["mode"], run["system"], run["plan"]), []).append(run)
    for (mode, system, plan), group in groups.items():
        name = system if plan is None else f"{system} ({'plan built' if plan == 'cold' else 'cached plan'})"
        files = group[-1].get("cache_files")
        size = f"{sum(files.values()) / 2**20:.1f} MiB" if files else ""
        lines.append(
            f"| {mode} | {name} | {spread([r['setup_s'] for r in group], '.3f')} "
            f"| {spread([r['private_mib']['setup'] for r in group], '.1f')} "
            f"| {spread([r['private_mib']['peak'] for r in group], '.1f')} "
            f"| {spread([r['blocks_per_s'] / 1e3 for r in group], '.1f')}k "
            f"| {spread([r['tokens_per_s'] / 1e6 for r in group], '.2f')}M "
            f"| {spread([r['tokens_per_cpu_s'] / 1e6 for r in group], '.2f')}M "
            f"| {group[-1]['batches']:,} of {group[-1]['num_batches']:,} | {size} |"
        )
    digests = {(r["mode"], r["system"]): r["first_batches_sha256"] for r in runs}
    same = all(digests[(m, "arrowmt")] == digests[(m, "fairseq")] for m, s in digests if s == "fairseq")
    lines.append(f"\nfirst {DIGEST_BATCHES} batches identical (arrowmt vs fairseq, every mode): {same}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make", help="write the synthetic corpus")
    make.add_argument("--tokens", type=int, required=True)
    make.add_argument("--out", type=Path)
    one = commands.add_parser("one", help="run one system in this process, print JSON")
    one.add_argument("system", choices=SYSTEMS)
    one.add_argument("--data", type=Path, required=True)
    one.add_argument("--plan", choices=("cold", "warm"), default="warm")
    every = commands.add_parser("all", help="run every system and mode in fresh processes")
    every.add_argument("--tokens", type=int, required=True)
    every.add_argument("--repeat", type=int, default=3)
    every.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    every.add_argument("--table-only", action="store_true", help="reprint the saved table")
    every.add_argument("--fairseq-max-batches", type=int, default=0, help="fairseq's own --max-batches (0: the same)")
    cold = commands.add_parser("cold", help="arrowmt and fairseq under a memory budget (a corpus larger than memory)")
    cold.add_argument("--data", type=Path, required=True)
    cold.add_argument("--batches", type=int, default=10000)
    cold.add_argument("--slow-batches", type=int, default=200, help="batches of the fairseq row")
    cold.add_argument("--repeat", type=int, default=2)
    cold.add_argument("--budget", type=int, default=0, help="MiB incl. page cache (0: a third of the corpus)")
    cold.add_argument("--timeout", type=float, default=600.0, help="seconds one run may take")
    cold.add_argument("--rows", nargs="+", default=list(COLD_ROWS), choices=list(COLD_ROWS), metavar="ROW")
    cold.add_argument("--mode", choices=MODES, default="none")
    cold.add_argument("--json", type=Path, help="also write the runs here")
    order = commands.add_parser("order", help=f"store DATA/arrowmt's blocks in plan order as DATA/{ORDERED}")
    order.add_argument("--data", type=Path, required=True)
    one.add_argument("--folder", default="arrowmt", help=f"the arrowmt folder in DATA (arrowmt or {ORDERED})")
    for sub in (make, one, every, order):
        sub.add_argument("--seed", type=int, default=1)
    order.add_argument("--mode", choices=MODES, default="none")
    order.add_argument("--tokens-per-sample", type=int, default=512)
    order.add_argument("--max-tokens", type=int, default=8192)
    for sub in (one, every):
        sub.add_argument("--mode", choices=MODES, default="none")
        sub.add_argument("--tokens-per-sample", type=int, default=512)
        sub.add_argument("--max-tokens", type=int, default=8192)
        sub.add_argument("--max-batches", type=int, default=0, help="stop after this many batches (0: an epoch)")
        sub.add_argument("--cpu", type=int, default=0, help="pin to this core (-1: no pinning)")
    args = parser.parse_args(argv)
    if args.command == "make":
        print(json.dumps(make_corpus(args.out or Path(f"bench-data/lm-{args.tokens}"), args.tokens, args.seed)))
    elif args.command == "one":
        if args.cpu >= 0:
            os.sched_setaffinity(0, {args.cpu})
        print(json.dumps(run_one(args), indent=1, sort_keys=True))
    elif args.command == "cold":
        run_cold(args)
    elif args.command == "order":
        print(json.dumps(order_corpus(args.data, args)))
    elif args.table_only:
        print(table(json.loads((RESULTS / f"lm-{args.tokens}.json").read_text())))
    else:
        run_all(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
