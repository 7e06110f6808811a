"""Mixtures of many corpora: fairseq ``translation_multi_simple_epoch`` vs arrowmt, and views.

Subcommands::

    python benchmarks/bench_mixture.py make --corpora 100 --rows 12600000   # bench-data/mix-100x12600000
    python benchmarks/bench_mixture.py all --corpora 3 100 --rows 12600000 --repeat 2 --max-batches 3000
    python benchmarks/bench_mixture.py one arrowmt --data bench-data/mix-100x12600000 --plan warm
    python benchmarks/bench_mixture.py view --data bench-data/synth-12600000   # a corpus from make_corpus.py

``make`` writes fairseq's multilingual layout (one shared dictionary, pairs ``lNN-en``,
Zipf-like sizes: corpus i holds a share proportional to ``1 / (i + 1)``) as a data-bin,
with the row generator of ``make_corpus.py``, and converts it with ``arrowmt convert
fairseq`` (every pair into one folder). ``one`` measures one system in this process:

* ``fairseq``: the native task in-process (``setup_task``, ``load_dataset("train")``,
  ``get_batch_iterator`` and its first epoch's batches: what ``fairseq-train`` does before
  its first update), then its ``EpochBatchIterator``;
* ``arrowmt``: ``open_mixture`` + ``MixtureBatchSampler`` (the same draw, order and
  batches; ``--plan cold`` deletes the plan cache first) + ``DataLoader`` with the tag
  collater.

Both use temperature sampling (T = 5), ``--encoder-langtok src --decoder-langtok``,
``max_tokens`` 4096, seed 1, one core (pinned), ``num_workers=0``. Setup is the wall time
from "imported" to "first batch can be requested"; memory is RssAnon growth over the
process's baseline (after imports), after setup and after the batches; tokens/s counts
source + target non-pad tokens of the finished batches. ``all`` runs each system in a
fresh process ``--repeat`` times (``nice``), keeps every run in
``benchmarks/results/mixture-<corpora>x<rows>.json`` and prints a table.

``view`` times ``build_view`` (max-len 250, ratio 1.5, dedup) on a single-pair corpus,
the bytes per kept row, and an epoch's batches read through the view vs the corpus.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout
sys.path.insert(0, str(HERE))

from make_corpus import chunk_lengths, chunk_tokens, write_dict, write_mmap_index  # noqa: E402
from run_one import PeakSampler, read_memory, rss_anon, source_digest  # noqa: E402

TARGET_LANG = "en"
TEMPERATURE = 5.0
MAX_TOKENS = 4096
SEED = 1
VOCAB = 32_000
CHUNK = 500_000


def pair_names(corpora: int) -> list[str]:
    return [f"l{k:02d}-{TARGET_LANG}" for k in range(corpora)]


def corpus_sizes(corpora: int, rows: int) -> np.ndarray:
    """Zipf-like sizes summing to ``rows``: corpus i in proportion to 1 / (i + 1)."""
    share = 1.0 / np.arange(1, corpora + 1)
    sizes = np.floor(share / share.sum() * rows).astype(np.int64)
    sizes[0] += rows - int(sizes.sum())
    return sizes


def default_out(corpora: int, rows: int) -> Path:
    return HERE.parent / "bench-data" / f"mix-{corpora}x{rows}"


# ---------------------------------------------------------------- data


def make(corpora: int, rows: int, out: Path, seed: int = 1234) -> dict:
    """The multilingual data-bin (``out/data-bin``) and its arrowmt conversion (``out/arrowmt``)."""
    info_path = out / "corpus.json"
    if info_path.exists():
        return json.loads(info_path.read_text())
    db = out / "data-bin"
    db.mkdir(parents=True, exist_ok=True)
    sizes = corpus_sizes(corpora, rows)
    t0 = time.perf_counter()
    for k, (pair, n) in enumerate(zip(pair_names(corpora), sizes.tolist(), strict=True)):
        src = pair.split("-")[0]
        _write_pair(db, src, n, seed, k)
        write_dict(db / f"dict.{src}.txt", VOCAB)
    write_dict(db / f"dict.{TARGET_LANG}.txt", VOCAB)
    t1 = time.perf_counter()
    from arrowmt import convert_fairseq

    convert_fairseq(db, out / "arrowmt", overwrite=True, progress=False)
    info = {
        "corpora": corpora,
        "rows": rows,
        "sizes": sizes.tolist(),
        "generate_s": round(t1 - t0, 1),
        "convert_s": round(time.perf_counter() - t1, 1),
    }
    info_path.write_text(json.dumps(info) + "\n")
    return info


def _write_pair(db: Path, src: str, n: int, seed: int, k: int) -> None:
    sizes = {src: np.empty(n, dtype=np.int32), TARGET_LANG: np.empty(n, dtype=np.int32)}
    files = {lang: open(db / f"train.{src}-{TARGET_LANG}.{lang}.bin", "wb") for lang in sizes}  # noqa: SIM115
    try:
        for c, start in enumerate(range(0, n, CHUNK)):
            m = min(CHUNK, n - start)
            rng = np.random.default_rng([seed, k, c])
            lengths = dict(zip(sizes, chunk_lengths(rng, m), strict=True))
            for lang in sizes:
                chunk_tokens(rng, lengths[lang], VOCAB).tofile(files[lang])
                sizes[lang][start : start + m] = lengths[lang]
    finally:
        for handle in files.values():
            handle.close()
    for lang in sizes:
        write_mmap_index(db / f"train.{src}-{TARGET_LANG}.{lang}.idx", sizes[lang], 2)


# ---------------------------------------------------------------- the two systems


def language_tags(data: Path, corpora: int) -> list:
    """fairseq's --encoder-langtok src --decoder-langtok ids (the model's dictionary: loaded before the baseline)."""
    from arrowmt import Dictionary, langtok_tags, language_token_ids

    pairs = [tuple(p.split("-")) for p in pair_names(corpora)]
    langs = sorted({lang for pair in pairs for lang in pair})
    ids = language_token_ids(Dictionary.load(data / "arrowmt" / f"dict.{TARGET_LANG}.txt"), langs)
    return langtok_tags(pairs, ids, encoder_langtok="src", decoder_langtok=True)


class Arrowmt:
    def __init__(self, data: Path, corpora: int, tags: list) -> None:
        import torch
        from torch.utils.data import DataLoader

        from arrowmt import FairseqCollater, MixtureBatchSampler, open_mixture

        torch.set_num_threads(1)
        folder = data / "arrowmt"
        pairs = pair_names(corpora)
        self.mixture = open_mixture({p: (folder, f"train.{p}") for p in pairs}, tags=tags)
        self.sampler = MixtureBatchSampler(
            self.mixture, max_tokens=MAX_TOKENS, max_source_positions=1024, max_target_positions=1024,
            seed=SEED, temperature=TEMPERATURE, resample_seed=2, skip_invalid_size_inputs=True,
            prefetch=int(os.environ.get("BENCH_PREFETCH", "8")),  # read-ahead depth (bench_cold-style runs: 0 = off)
        )  # fmt: skip
        self.num_batches = len(self.sampler)  # maps (or builds) the epoch's plan
        collate = self.mixture.tag_collater(FairseqCollater(self.mixture.special_ids))
        self.loader = DataLoader(self.mixture, batch_sampler=self.sampler, collate_fn=collate, num_workers=0)

    def batches(self):  # noqa: ANN201
        return iter(self.loader)


class Fairseq:
    def __init__(self, data: Path, corpora: int) -> None:
        import torch
        from fairseq import options, tasks
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf

        torch.set_num_threads(1)
        argv = [str(data / "data-bin"), "--task", "translation_multi_simple_epoch", "--arch", "transformer", "--cpu"]
        argv += ["--lang-pairs", ",".join(pair_names(corpora)), "--sampling-method", "temperature"]
        argv += ["--sampling-temperature", str(TEMPERATURE), "--encoder-langtok", "src", "--decoder-langtok"]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        self.task = tasks.setup_task(convert_namespace_to_omegaconf(args).task)
        self.task.load_dataset("train", epoch=1)
        self.itr = self.task.get_batch_iterator(
            self.task.dataset("train"), max_tokens=MAX_TOKENS, max_positions=(1024, 1024),
            ignore_invalid_inputs=True, seed=SEED, epoch=1,
        )  # fmt: skip
        self.num_batches = len(self.itr.frozen_batches)  # the epoch's order and batch_by_size, as fairseq-train

    def batches(self):  # noqa: ANN201
        return self.itr.next_epoch_itr(shuffle=True)


def clear_plans(data: Path) -> None:
    import shutil

    for folder in (data / "arrowmt" / ".arrowmt-cache").glob("mixture-*"):
        shutil.rmtree(folder)


def one(system: str, data: Path, corpora: int, plan: str, max_batches: int) -> dict:
    """Measure one system in this process."""
    tags = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if system == "fairseq":
            import fairseq.tasks.translation_multi_simple_epoch  # noqa: F401
        else:
            import torch.utils.data  # noqa: F401

            import arrowmt.training._mixture  # noqa: F401

            tags = language_tags(data, corpora)
    if system == "arrowmt" and plan == "cold":
        clear_plans(data)
    base = read_memory()
    t0 = time.perf_counter()
    with PeakSampler() as peak, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = Arrowmt(data, corpora, tags) if system == "arrowmt" else Fairseq(data, corpora)
    setup = time.perf_counter() - t0
    after_setup = read_memory()
    tokens = batches = 0
    t0 = time.perf_counter()
    for batch in pipe.batches():
        if batch:
            tokens += int(batch["net_input"]["src_lengths"].sum()) + int(batch["ntokens"])
        batches += 1
        if max_batches and batches >= max_batches:
            break
    elapsed = time.perf_counter() - t0
    after = read_memory()
    return {
        "system": system,
        "plan": plan if system == "arrowmt" else None,
        "corpora": corpora,
        "setup_s": setup,
        "num_batches": pipe.num_batches,
        "batches": batches,
        "tokens": tokens,
        "tokens_per_s": tokens / elapsed,
        "private_mib": {
            "rss_anon_setup": after_setup["RssAnon"] - base["RssAnon"],
            "rss_anon_setup_peak": peak.peak - base["RssAnon"],
            "rss_anon_batches": after["RssAnon"] - base["RssAnon"],
        },
        "loadavg": os.getloadavg(),
        "source_digest": source_digest(),
    }


# ---------------------------------------------------------------- views


def view_bench(data: Path, repeat: int) -> dict:
    """Build a view over a make_corpus.py corpus; an epoch's first batches through it and through the corpus."""
    from arrowmt import build_view

    corpus = data / "arrowmt"
    out = data / "views" / "clean.view"
    builds = []
    for _ in range(repeat):
        wait_for_quiet()
        report = build_view(corpus, out, max_len=250, max_len_ratio=1.5, dedup=True, overwrite=True)
        builds.append(report.seconds)
    reads: dict[str, list[float]] = {"corpus": [], "view": []}
    for _ in range(repeat):
        for kind in reads:
            wait_for_quiet()
            reads[kind].append(_read_rate(corpus, out if kind == "view" else None))
    return {
        "rows": report.corpus_rows,
        "kept": report.kept,
        "dropped": report.dropped,
        "build_s": builds,
        "bytes_per_kept_row": out.stat().st_size / report.kept,
        "tokens_per_s": reads,
        "rss_anon_rss": rss_anon(),
        "loadavg": os.getloadavg(),
    }


def _read_rate(corpus: Path, view: Path | None, batches: int = 20_000) -> float:
    """tokens/s of the first ``batches`` training batches (FairseqCollater over __getitems__), plan cached."""
    from arrowmt import FairseqCollater, TokenBatchSampler, open_dataset, open_view_dataset

    ds = open_dataset(corpus) if view is None else open_view_dataset(view, corpus)
    sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=SEED)
    collate = FairseqCollater(ds.special_ids)
    tokens = 0
    t0 = time.perf_counter()
    for k, rows in enumerate(sampler):
        batch = collate(ds.__getitems__(rows))
        tokens += int(batch["net_input"]["src_lengths"].sum()) + int(batch["ntokens"])
        if k + 1 >= batches:
            break
    return tokens / (time.perf_counter() - t0)


# ---------------------------------------------------------------- all runs


SYSTEMS = (("arrowmt", "cold"), ("arrowmt", "warm"), ("fairseq", "-"))
QUIET_LOAD = 2.5  # a run starts only when the 1-minute load average is below this (shared machine)


def wait_for_quiet(limit: float = QUIET_LOAD, poll_s: float = 15.0, give_up_s: float = 3600.0) -> float:
    """Sleep until the 1-minute load average is below ``limit``; the load when starting."""
    waited = 0.0
    while os.getloadavg()[0] >= limit and waited < give_up_s:
        time.sleep(poll_s)
        waited += poll_s
    return os.getloadavg()[0]


def run_all(corpora_list: list[int], rows: int, repeat: int, max_batches: int, cpu: int) -> None:
    for corpora in corpora_list:
        data = default_out(corpora, rows)
        make(corpora, rows, data)
        runs = []
        for _ in range(repeat):
            for system, plan in SYSTEMS:
                command = ["nice", sys.executable, __file__, "one", system, "--data", str(data)]
                command += ["--corpora", str(corpora), "--plan", plan, "--max-batches", str(max_batches)]
                command += ["--cpu", str(cpu)]
                wait_for_quiet()
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"{corpora} corpora {system} {plan}: {runs[-1]['setup_s']:.2f} s", file=sys.stderr)
        result = {"corpora": corpora, "rows": rows, "machine": machine(), "runs": runs}
        path = HERE / "results" / f"mixture-{corpora}x{rows}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(table(result))


def machine() -> dict:
    return {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def table(result: dict) -> str:
    """Markdown rows: median (min-max) over the repeats."""
    lines = [
        f"{result['corpora']} corpora, {result['rows']:,} pairs",
        "| system | setup s | private MiB after setup (peak) | after batches | tokens/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for system, plan in SYSTEMS:
        runs = [r for r in result["runs"] if r["system"] == system and (r["plan"] or "-") == plan]
        if not runs:
            continue
        name = system if system == "fairseq" else f"arrowmt ({plan} plan)"

        def spread(key: str, sub: str | None = None, runs: list = runs) -> str:
            values = [r[key][sub] if sub else r[key] for r in runs]
            return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"

        lines.append(
            f"| {name} | {spread('setup_s')} | {spread('private_mib', 'rss_anon_setup')} "
            f"({spread('private_mib', 'rss_anon_setup_peak')}) | {spread('private_mib', 'rss_anon_batches')} "
            f"| {spread('tokens_per_s')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("--corpora", type=int, default=3)
    mk.add_argument("--rows", type=int, default=1_000_000)
    mk.add_argument("--out", type=Path, default=None)
    on = sub.add_parser("one")
    on.add_argument("system", choices=("arrowmt", "fairseq"))
    on.add_argument("--data", type=Path, required=True)
    on.add_argument("--corpora", type=int, required=True)
    on.add_argument("--plan", choices=("cold", "warm", "-"), default="warm")
    on.add_argument("--max-batches", type=int, default=0)
    on.add_argument("--cpu", type=int, default=0, help="pin to this core (-1: no pinning)")
    al = sub.add_parser("all")
    al.add_argument("--corpora", type=int, nargs="+", default=[3, 100])
    al.add_argument("--rows", type=int, default=1_000_000)
    al.add_argument("--repeat", type=int, default=2)
    al.add_argument("--max-batches", type=int, default=3000)
    al.add_argument("--cpu", type=int, default=0)
    vw = sub.add_parser("view")
    vw.add_argument("--data", type=Path, required=True, help="a corpus folder from make_corpus.py")
    vw.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    if args.command == "make":
        print(json.dumps(make(args.corpora, args.rows, args.out or default_out(args.corpora, args.rows))))
    elif args.command == "one":
        if args.cpu >= 0:
            os.sched_setaffinity(0, {args.cpu})
        print(json.dumps(one(args.system, args.data, args.corpora, args.plan, args.max_batches)))
    elif args.command == "all":
        run_all(args.corpora, args.rows, args.repeat, args.max_batches, args.cpu)
    else:
        print(json.dumps(view_bench(args.data, args.repeat), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
