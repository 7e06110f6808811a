"""Raw text to training data: ``fairseq-preprocess`` vs ``arrowmt convert text``, side by side, on one corpus.

Each (system, workers) runs ``--repeat`` times as a fresh process tree on the synthetic corpus of
``make_text_corpus.py`` (generated first if missing). Measured per run:

* wall time, and CPU time of the whole process tree (user + system, from ``wait4``);
* peak RSS of every process of the tree (``VmHWM`` from ``/proc``, polled every 50 ms) and the
  largest of them as the kernel reports it (``wait4``'s ``ru_maxrss``);
* tokens/s: ids written (source + target, ``</s>`` included, as fairseq counts them) per wall second.

Then it checks that both systems made the same thing: the dictionaries byte for byte, and every
row of both columns (lengths and ids) of arrowmt's ``train.arrow`` against fairseq's
``train.de-en.{de,en}.bin/.idx``, record batch by record batch.

Usage::

    nice python benchmarks/bench_convert.py --rows 500000 --repeat 3
    nice python benchmarks/bench_convert.py --rows 4500000 --systems arrowmt --repeat 2
    python benchmarks/bench_convert.py --rows 500000 --table-only
    python benchmarks/bench_convert.py --rows 4500000 --repeat 0   # only compare the outputs already there

Results go to ``benchmarks/results/convert-<rows>.json`` (``convert-<rows>-<label>.json`` with
``--label``: a host, or the code measured; runs of other systems already saved there are kept, so
systems can be measured in separate sessions, and the commit of every arrowmt run is recorded); the
markdown table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout: arrowmt, converters
sys.path.insert(0, str(HERE))

import make_text_corpus  # noqa: E402

from arrowmt.testing import read_indexed  # noqa: E402

LANGS = ("de", "en")
POLL_SECONDS = 0.05
BIN = Path(sys.executable).parent


def corpus(rows: int, data: Path) -> dict:
    if not (data / "corpus.json").exists():
        make_text_corpus.generate(rows, data, {"de": 120_000, "en": 80_000})
    return json.loads((data / "corpus.json").read_text())


def command(system: str, workers: int, prefix: Path, out: Path) -> list[str]:
    if system == "fairseq":
        return [str(BIN / "fairseq-preprocess"), "--source-lang", "de", "--target-lang", "en", "--trainpref",
                str(prefix), "--destdir", str(out), "--workers", str(workers), "--dataset-impl", "mmap"]  # fmt: skip
    return [sys.executable, "-m", "arrowmt._cli", "convert", "text", str(out), "--src-lang", "de", "--tgt-lang",
            "en", "--trainpref", str(prefix), "--workers", str(workers), "--quiet", "--overwrite"]  # fmt: skip


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _hwm_kib(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if ":" in line)
        return fields["Name"].strip(), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


class TreePeaks:
    """Polls the peak RSS (VmHWM) of every process below ``root`` until stopped."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peaks: dict[int, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            tree, todo = _children(), [self.root]
            while todo:
                pid = todo.pop()
                todo.extend(tree.get(pid, []))
                if (found := _hwm_kib(pid)) is not None:
                    self.peaks[pid] = (found[0], max(found[1], self.peaks.get(pid, ("", 0))[1]))
            self._stop.wait(POLL_SECONDS)

    def stop(self) -> list[tuple[str, int]]:
        self._stop.set()
        self._thread.join()
        return [self.peaks[pid] for pid in sorted(self.peaks)]


def run_once(argv: list[str], out: Path, cpus: list[int] | None) -> dict:
    """Run ``argv`` (writing ``out``, removed first) as a fresh process tree: wall, CPU and peak memory."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, preexec_fn=pin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    peaks = TreePeaks(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    per_process = peaks.stop()
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)[:300]} failed:\n{stderr[-4000:]}")
    return {
        "commit": commit(),
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "max_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "processes": [{"name": n, "peak_rss_mib": round(k / 1024, 1)} for n, k in per_process],
        "load_before": round(os.getloadavg()[0], 2),
        "cpus": cpus or sorted(os.sched_getaffinity(0)),
    }


def check_same(fairseq_out: Path, arrowmt_out: Path) -> dict:
    """Dictionaries byte for byte; every row's length and ids in both columns."""
    same_dicts = all(
        (fairseq_out / f"dict.{lang}.txt").read_bytes() == (arrowmt_out / f"dict.{lang}.txt").read_bytes()
        for lang in LANGS
    )
    return {
        "dictionaries_identical": same_dicts,
        **same_rows(fairseq_out / "train.de-en", arrowmt_out / "train.arrow", LANGS),
    }


def same_rows(fairseq_prefix: Path, arrow_file: Path, langs: tuple[str, str]) -> dict:
    """Every row's length and ids of ``arrow_file`` (source, target) against ``{fairseq_prefix}.{lang}``."""
    rows = 0
    theirs = {lang: read_indexed(Path(f"{fairseq_prefix}.{lang}")) for lang in langs}
    with pa.memory_map(str(arrow_file)) as source:
        for batch in ipc.open_stream(source):
            for column, lang in zip(("source", "target"), langs, strict=True):
                ours = batch.column(column)
                ragged = theirs[lang]
                offsets = ragged.offsets[rows : rows + batch.num_rows + 1]
                expected = np.asarray(ragged.values[offsets[0] : offsets[-1]])
                if not (
                    np.array_equal(np.diff(ours.offsets.to_numpy()), np.diff(offsets))
                    and np.array_equal(ours.values.to_numpy(), expected)
                ):
                    return {"rows_identical": False, "first_bad_batch_row": rows}
            rows += batch.num_rows
    return {"rows_identical": all(len(r) == rows for r in theirs.values()), "rows_compared": rows}


def commit() -> str:
    """The checkout's commit, ``+`` when files differ from it (``git describe``-like; empty without git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "arrowmt"], cwd=ROOT)
    except OSError:
        return ""
    return head.stdout.strip() + ("+" if dirty.returncode else "")


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "ram_gib": round(pages / 2**30, 1),
        "python": platform.python_version(),
    }


def summarize(runs: list[dict], tokens: int) -> dict:
    walls = [r["wall_s"] for r in runs]
    cpus = [r["cpu_s"] for r in runs]
    best = min(walls)
    return {
        "runs": len(runs),
        "wall_s": best,
        "wall_spread": [min(walls), max(walls)],
        "cpu_s": min(cpus),
        "tokens_per_s": tokens / best,
        "max_rss_mib": max(r["max_rss_mib"] for r in runs),
        "peak_rss_per_process_mib": max(
            (sorted((p["peak_rss_mib"] for p in r["processes"]), reverse=True) for r in runs), key=lambda x: x[0]
        ),
    }


def table(results: dict) -> str:
    tokens = results["tokens"]
    rows = {key: summarize(runs, tokens) for key, runs in results["runs"].items() if runs}
    base = {w: rows.get(f"fairseq-{w}", {}).get("tokens_per_s") for w in (1, 2)}
    lines = [
        f"{results['rows']:,} pairs, {tokens / 1e6:.1f}M tokens, {results['text_bytes'] / 1e9:.2f} GB of text",
        "",
        "| system | workers | runs | wall s (best; spread) | CPU s | tokens/s | x fairseq | peak RSS per process MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for key, s in sorted(rows.items()):
        system, workers = key.rsplit("-", 1)
        ref = base.get(int(workers))
        ratio = f"{s['tokens_per_s'] / ref:.1f}x" if ref and system != "fairseq" else ""
        peaks = ", ".join(f"{p:.0f}" for p in s["peak_rss_per_process_mib"][:4])
        lines.append(
            f"| {system} | {workers} | {s['runs']} | {s['wall_s']:.1f} ({s['wall_spread'][0]:.1f}-"
            f"{s['wall_spread'][1]:.1f}) | {s['cpu_s']:.1f} | {s['tokens_per_s'] / 1e6:.2f} M | {ratio} | {peaks} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--systems", nargs="+", default=["fairseq", "arrowmt"], choices=["fairseq", "arrowmt"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--cpus", nargs="+", type=int, default=None, help="pin every run to these cores")
    parser.add_argument("--label", default=None, help="results file convert-<rows>-<label>.json (a host, a version)")
    args = parser.parse_args()
    data = ROOT / "bench-data" / f"text-{args.rows}"
    saved = HERE / "results" / f"convert-{args.rows}{f'-{args.label}' if args.label else ''}.json"
    results = json.loads(saved.read_text()) if saved.exists() else {"runs": {}}
    if not args.table_only:
        info = corpus(args.rows, data)
        tokens = sum(info["words"].values()) + 2 * info["rows"]
        results.update(rows=args.rows, tokens=tokens, text_bytes=sum(info["bytes"].values()), machine=machine())
        for system in args.systems:
            for workers in args.workers:
                key, out = f"{system}-{workers}", data / f"out-{system}-{workers}"
                argv = command(system, workers, data / "train", out)
                runs = [run_once(argv, out, args.cpus) for _ in range(args.repeat)]
                if runs:  # --repeat 0: only compare the outputs already there
                    results["runs"][key] = runs
                    print(key, json.dumps(runs), flush=True)
        fairseq_out = next((p for p in sorted(data.glob("out-fairseq-*")) if (p / "dict.de.txt").exists()), None)
        arrowmt_out = next((p for p in sorted(data.glob("out-arrowmt-*")) if (p / "train.arrow").exists()), None)
        if fairseq_out and arrowmt_out:
            results["identical_to_fairseq"] = {
                "compared": [fairseq_out.name, arrowmt_out.name],
                **check_same(fairseq_out, arrowmt_out),
            }
        saved.parent.mkdir(exist_ok=True)
        saved.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    print(json.dumps({k: results.get(k) for k in ("machine", "identical_to_fairseq")}))


if __name__ == "__main__":
    main()
