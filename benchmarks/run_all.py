"""Run every pipeline in its own fresh process and print a side-by-side markdown table.

Usage::

    python benchmarks/run_all.py                       # 1M pairs, every system
    python benchmarks/run_all.py --rows 12600000 --max-batches 20000

Each (size, system) runs ``--repeat`` times in a fresh ``benchmarks/run_one.py`` process
pinned to one core; the table keeps the fastest run's times (the machine is shared, so the
best run is the least disturbed) and the largest memory growth seen in any run. Every run
is saved to ``benchmarks/results/<rows>.json``. ``--max-batches`` caps the batches of the
slow systems (fairseq and HF); arrowmt always runs a full epoch. ``--merge`` reruns only
``--systems`` and keeps the other systems' saved runs; ``--table-only`` reprints saved tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CONFIGS = {  # name -> (run_one system, extra args)
    "arrowmt (cold plan)": ("arrowmt", ["--plan", "cold"]),
    "arrowmt (cached plan)": ("arrowmt", ["--plan", "warm"]),
    "fairseq mmap": ("fairseq", []),
    "HF datasets": ("hf", []),
    "HF datasets, arrow + numpy pad": ("hf-arrow", []),
}
SLOW = {"fairseq", "hf", "hf-arrow"}
TARGETS = {"speedup": 30.0, "setup_s": 0.5, "private_mib": 16.0}


def ensure_corpus(rows: int, data: Path) -> None:
    if (data / "corpus.json").exists():
        return
    subprocess.run([sys.executable, str(HERE / "make_corpus.py"), "--rows", str(rows), "--out", str(data)], check=True)


def run_config(system: str, extra: list[str], data: Path, rows: int, max_batches: int, cpu: int) -> dict:
    cmd = [sys.executable, str(HERE / "run_one.py"), system, "--data", str(data), "--rows", str(rows)]
    cmd += [*extra, "--cpu", str(cpu)]
    if system in SLOW and max_batches:
        cmd += ["--max-batches", str(max_batches)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    out = proc.stdout
    return json.loads(out[out.index("{") :])


def summarize(runs: list[dict]) -> dict:
    """Fastest times, largest memory growth over the repeats."""
    best = max(runs, key=lambda r: r["tokens_per_s"])
    out = dict(best)
    out["setup_s"] = min(r["setup_s"] for r in runs)
    out["tokens_per_s"] = best["tokens_per_s"]
    out["tokens_per_cpu_s"] = max(r["tokens_per_cpu_s"] for r in runs)
    out["setup_cpu_s"] = min(r["setup_cpu_s"] for r in runs)
    out["epoch_s"] = min(r["epoch_s"] for r in runs)
    out["private_mib"] = {k: max(r["private_mib"][k] for r in runs) for k in best["private_mib"]}
    out["repeats"] = len(runs)
    return out


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.0f} k"


def table(rows: int, summary: dict[str, dict], corpus_tokens: int) -> str:
    ref = summary.get("fairseq mmap")
    head = (
        "| system | setup s | batches timed | epoch s | tokens/s (wall) | tokens/CPU-s | x fairseq (wall / CPU) "
        "| RssAnon +MiB: setup peak / after setup / end | Private_Dirty +MiB end | USS +MiB end |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for name, r in summary.items():
        p = r["private_mib"]
        timed = f"{r['batches']:,}" + (" (epoch)" if r["full_epoch"] else f" of {r['num_batches']:,}")
        speed = "-"
        if ref:
            speed = (
                f"{r['tokens_per_s'] / ref['tokens_per_s']:.1f} / {r['tokens_per_cpu_s'] / ref['tokens_per_cpu_s']:.1f}"
            )
        # a capped run's epoch time is extrapolated from its throughput (marked ~)
        epoch = f"{r['epoch_s']:.1f}" if r["full_epoch"] else f"~{corpus_tokens / r['tokens_per_s']:.0f}"
        lines.append(
            f"| {name} | {r['setup_s']:.3f} | {timed} | {epoch} | {fmt_rate(r['tokens_per_s'])} | "
            f"{fmt_rate(r['tokens_per_cpu_s'])} | {speed} | "
            f"{p['rss_anon_setup_peak']:.1f} / {p['rss_anon_setup']:.1f} / {p['rss_anon_batches']:.1f} | "
            f"{p['private_dirty_batches']:.1f} | {p['uss_batches']:.1f} |"
        )
    max_tokens = next(iter(summary.values()))["max_tokens"]
    return f"**{rows:,} pairs**, max_tokens={max_tokens}\n\n" + head + "\n".join(lines)


def target_check(summary: dict[str, dict]) -> list[str]:
    out = []
    warm = summary.get("arrowmt (cached plan)")
    fairseq = summary.get("fairseq mmap")
    if warm and fairseq:
        ratio = warm["tokens_per_s"] / fairseq["tokens_per_s"]
        cpu_ratio = warm["tokens_per_cpu_s"] / fairseq["tokens_per_cpu_s"]
        out.append(
            f"- speed: arrowmt {ratio:.1f}x fairseq in wall time, {cpu_ratio:.1f}x in CPU time "
            f"(target >= {TARGETS['speedup']:.0f}x): " + ("met" if ratio >= TARGETS["speedup"] else "MISSED")
        )
    if warm:
        s = warm["setup_s"]
        out.append(
            f"- setup with cached plan: {s:.3f} s (target <= {TARGETS['setup_s']} s): "
            + ("met" if s <= TARGETS["setup_s"] else "MISSED")
        )
        m = max(warm["private_mib"]["rss_anon_peak"], warm["private_mib"]["private_dirty_batches"])
        out.append(
            f"- private memory growth: {m:.1f} MiB (target <= {TARGETS['private_mib']:.0f} MB at 12.6M): "
            + ("met" if m <= TARGETS["private_mib"] else "MISSED")
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--data-root", type=Path, default=ROOT / "bench-data")
    p.add_argument("--systems", nargs="+", default=list(CONFIGS), choices=list(CONFIGS), metavar="NAME")
    p.add_argument("--max-batches", type=int, default=0, help="cap for fairseq/HF (0: full epoch)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cpu", type=int, default=0)
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--table-only", action="store_true", help="reprint the tables from saved results")
    p.add_argument(
        "--merge", action="store_true", help="keep saved runs of the systems not run now (e.g. rerun arrowmt only)"
    )
    args = p.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    if args.table_only:
        for rows in args.rows:
            record = json.loads((args.results / f"{rows}.json").read_text())
            summary = {name: summarize(record["runs"][name]) for name in CONFIGS if name in record["runs"]}
            record["table_markdown"] = table(rows, summary, sum(record["corpus"]["tokens"].values()))
            record["targets"] = target_check(summary)
            print(record["table_markdown"] + "\n\n" + "\n".join(record["targets"]) + "\n")
            (args.results / f"{rows}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        return 0
    for rows in args.rows:
        data = args.data_root / f"synth-{rows}"
        ensure_corpus(rows, data)
        saved = args.results / f"{rows}.json"
        all_runs: dict[str, list[dict]] = {}
        if args.merge and saved.exists():
            old = json.loads(saved.read_text())["runs"]
            all_runs = {name: old[name] for name in CONFIGS if name in old and name not in args.systems}
        for name in args.systems:
            system, extra = CONFIGS[name]
            all_runs[name] = []
            for k in range(args.repeat):
                t0 = time.perf_counter()
                r = run_config(system, extra, data, rows, args.max_batches, args.cpu)
                all_runs[name].append(r)
                print(
                    f"# {rows:,} {name} run {k + 1}: setup {r['setup_s']:.3f} s, "
                    f"{r['tokens_per_s'] / 1e6:.2f} M tokens/s ({time.perf_counter() - t0:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        summary = {name: summarize(all_runs[name]) for name in CONFIGS if name in all_runs}
        corpus = json.loads((data / "corpus.json").read_text())
        text = table(rows, summary, sum(corpus["tokens"].values()))
        checks = target_check(summary)
        print(text + "\n\n" + "\n".join(checks) + "\n")
        record = {
            "rows": rows,
            "corpus": corpus,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "summary": summary,
            "runs": all_runs,
            "table_markdown": text,
            "targets": checks,
        }
        (args.results / f"{rows}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
