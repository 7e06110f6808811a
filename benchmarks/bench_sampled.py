"""Subword regularization (issues 39, 48): sampled segmentations drawn afresh each epoch, against the fixed ids and
against sentencepiece sampling in the loader, on the same corpus, in one run; what the words' lattices cost to make
and store; the stall at each epoch boundary; private memory.

Usage::

    python benchmarks/bench_sampled.py --alpha 0.1 --repeat 3                   # the bundled Multi30k sample
    python benchmarks/make_text_corpus.py --rows 1000000 --out bench-data/text-1000000
    python benchmarks/bench_sampled.py --text bench-data/text-1000000 --vocab 16000 --epochs 3 --no-on-the-fly

The corpus is the bundled Multi30k sample (29,000 German-English training pairs, ``arrowmt/sample_data``), made
``--times`` times longer by repeating it, or with ``--text`` a larger synthetic corpus (``make_text_corpus.py``:
Zipf-distributed pseudo-words; indicative only since its words are not real ones). A sentencepiece unigram model of
``--vocab`` pieces is trained on it, then ``convert_text(spm_model=...)`` converts it and
``add_sampled_segmentations`` stores its words' lattices (each timed). Reading runs ``--epochs`` whole epochs
(``max_tokens`` 4096, seed 1) through a ``DataLoader`` with ``FairseqCollater``, ``--repeat`` times each,
interleaved, each run in a fresh process (its memory its own):

* fixed: ``open_dataset(corpus, "train")``, no worker;
* sampled: ``open_dataset(corpus, "train", segmentation="sampled")`` in a fresh cache, no worker; its clock counts
  every preparation: epoch 1's copy (written before its plan), and the next epochs' copies, written on a thread
  while the epoch before is read; "stall" is the longest wait between the last batch of an epoch and the first of
  the next;
* on the fly (``--batches`` batches of epoch 1): the fixed plan's batches of raw text lines, each line sampled by
  sentencepiece (``encode(enable_sampling=True)``) and looked up in the dictionary in 2 DataLoader workers, as
  Marian or OpenNMT-py sample while they load.

tokens/s counts the source and target pieces of the collated batches (padding left out); private memory is the
process's RssAnon after its last batch. The table keeps each configuration's best run and the range. Every run is
saved to ``benchmarks/results/sampled-<rows>.json``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import arrowmt
from arrowmt import FairseqCollater, SpecialIds, TokenBatchSampler, open_dataset

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # its neighbours (ab.py, run_one.py), imported where used
SAMPLE = Path(arrowmt.__file__).parent / "sample_data" / "multi30k"


def text_corpus(folder: Path, times: int, text: Path | None, rows: int) -> Path:
    """``train.de``/``train.en``: the bundled training text, ``times`` times over; or the first ``rows`` lines
    (0: all, linked) of ``text``'s (a ``make_text_corpus.py`` folder), streamed (never held at once)."""
    for lang in ("de", "en"):
        if text is None:
            with gzip.open(SAMPLE / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
                (folder / f"train.{lang}").write_text(handle.read() * times, encoding="utf-8")
            continue
        if not rows:
            (folder / f"train.{lang}").symlink_to((text / f"train.{lang}").resolve())
            continue
        with open(text / f"train.{lang}", encoding="utf-8") as src, open(folder / f"train.{lang}", "w") as out:
            out.writelines(itertools.islice(src, rows))
    return folder / "train"


def train_model(prefix: Path, vocab: int) -> Path:
    import sentencepiece as spm

    files = ",".join(str(prefix.with_suffix(f".{lang}")) for lang in ("de", "en"))
    spm.SentencePieceTrainer.train(input=files, model_prefix=str(prefix.with_name("spm")), vocab_size=vocab,
                                   num_threads=1, minloglevel=2, input_sentence_size=200000,
                                   shuffle_input_sentence=True)  # fmt: skip
    return prefix.with_name("spm.model")


def folder_bytes(paths: list[Path]) -> int:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


class OnTheFly(Dataset):
    """Raw lines sampled by sentencepiece when a batch is read (in the worker), then looked up."""

    def __init__(self, prefix: Path, model: Path, corpus: Path, alpha: float) -> None:
        self.lines = {lang: prefix.with_suffix(f".{lang}").read_text("utf-8").splitlines() for lang in ("de", "en")}
        self.model, self.alpha = str(model), alpha
        ds = open_dataset(corpus, "train")
        self.dictionaries = {"de": ds.dictionary("source"), "en": ds.dictionary("target")}
        self.processor: Any = None

    def __len__(self) -> int:
        return len(self.lines["de"])

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        if self.processor is None:
            import sentencepiece as spm

            self.processor = spm.SentencePieceProcessor(model_file=self.model)
        out = [{"id": i} for i in indices]
        for lang, column in (("de", "source"), ("en", "target")):
            pieces = self.processor.encode([self.lines[lang][i] for i in indices], out_type=str, enable_sampling=True,
                                           alpha=self.alpha, nbest_size=-1)  # fmt: skip
            d = self.dictionaries[lang]
            for item, row in zip(out, pieces, strict=True):
                item[column] = torch.tensor([d.index(p) for p in row] + [d.eos], dtype=torch.int32)
        return out


def read(config: str, corpus: Path, prefix: Path, model: Path, alpha: float, epochs: int, batches: int,
         cache: Path) -> dict[str, Any]:  # fmt: skip
    """One run (in this process): ``epochs`` epochs of ``config``, or ``batches`` batches of epoch 1 on the fly."""
    fixed = open_dataset(corpus, "train")
    ds: Any = fixed
    if config.startswith("sampled"):
        ds = arrowmt.ArrowMTSampledDataset(fixed, cache_dir=cache, alpha=alpha)
    sampler = TokenBatchSampler(ds, max_tokens=4096)
    source: Any = OnTheFly(prefix, model, corpus, alpha) if config == "on the fly" else ds
    workers = 2 if config == "on the fly" else 0
    loader = DataLoader(source, batch_sampler=sampler, collate_fn=FairseqCollater(SpecialIds()), num_workers=workers)
    tokens, done, stalls = 0, 0, []
    start = time.perf_counter()
    for epoch in range(1, (1 if config == "on the fly" else epochs) + 1):
        ended = time.perf_counter()
        sampler.set_epoch(epoch)
        for k, batch in enumerate(loader):
            if k == 0:
                stalls.append(time.perf_counter() - ended)
            tokens += int(batch["net_input"]["src_lengths"].sum()) + int((batch["target"] != 1).sum())
            done += 1
            if config == "on the fly" and done == batches:
                break
    seconds = time.perf_counter() - start
    return {"config": config, "epochs": epochs, "batches": done, "tokens": tokens, "seconds": seconds,
            "tokens_per_s": tokens / seconds, "stalls_s": stalls, "rss_anon_mib": rss_anon_mib()}  # fmt: skip


def rss_anon_mib() -> float:
    """This process's private resident memory (RssAnon), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_apart(config: str, args: argparse.Namespace, corpus: Path, prefix: Path, model: Path, cache: Path,
              code: Path | None = None) -> dict:  # fmt: skip
    """:func:`read` in a fresh Python process (its memory and caches its own), with arrowmt from ``code`` (a
    worktree of another commit) when given."""
    paths = ", ".join(f"Path({str(p)!r})" for p in (corpus, prefix, model))
    code_path = f"sys.path.insert(0, {str(code)!r}); " if code else ""
    source = (f"import json, sys; {code_path}sys.path.insert(1, {str(HERE)!r}); import bench_sampled as b; "
              f"from pathlib import Path; print(json.dumps(b.read({config!r}, {paths}, "
              f"{args.alpha!r}, {args.epochs}, {args.batches}, Path({str(cache)!r}))))")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # compiled once, as installed
    env |= {"PYTHONPATH": str(code)} if code else {}
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--times", type=int, default=1, help="repeat the bundled text this many times")
    p.add_argument("--epochs", type=int, default=3, help="whole epochs a fixed or sampled run reads")
    p.add_argument("--batches", type=int, default=300, help="batches an on-the-fly run reads")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--text", type=Path, help="a make_text_corpus.py folder instead of the bundled sample")
    p.add_argument("--rows", type=int, default=0, help="with --text: its first ROWS pairs (0: all)")
    p.add_argument("--storage-only", action="store_true", help="make and measure the samples, read nothing")
    p.add_argument("--no-on-the-fly", action="store_true", help="leave out sentencepiece sampling in the loader")
    p.add_argument("--work", type=Path, default=None, help="folder for the corpus (default: a temporary one)")
    p.add_argument("--base", help="also read the samples with this commit's code (a worktree, as ab.py makes)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        folder = Path(tmp)
        prefix = text_corpus(folder, args.times, args.text, args.rows)
        model = train_model(prefix, args.vocab)
        corpus = folder / "corpus"
        start = time.perf_counter()
        arrowmt.convert_text(str(prefix), corpus, src_lang="de", tgt_lang="en", spm_model=str(model), progress=False)
        convert_s = time.perf_counter() - start
        start = time.perf_counter()
        arrowmt.add_sampled_segmentations(corpus, model, alpha=args.alpha, progress=False)
        sample_s = time.perf_counter() - start
        base = folder_bytes([corpus / "train.arrow"])
        sampled = folder_bytes([corpus / "sampled"])
        parts = {
            str(f.relative_to(corpus)): f.stat().st_size for f in sorted((corpus / "sampled").rglob("*")) if f.is_file()
        }
        print(
            "samples, by file:",
            ", ".join(f"{name} {size / 1e6:.2f} MB" for name, size in parts.items() if size > 10_000),
        )
        rows = len(arrowmt.open_dataset(corpus, "train"))
        codes = {"fixed": None, "sampled": None}
        if args.base:
            from ab import side_code  # a commit's worktree, as ab.py makes them

            label, code = side_code(args.base)
            codes[f"sampled, {label}"] = code
        configs = list(codes) + ([] if args.no_on_the_fly else ["on the fly"])
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        for k in range(0 if args.storage_only else args.repeat):
            for config in runs:
                cache = folder / f"cache-{k}"  # a fresh cache a run: every epoch copy is made in its clock
                runs[config].append(run_apart(config, args, corpus, prefix, model, cache, codes.get(config)))
                shutil.rmtree(cache, ignore_errors=True)
    report(args, rows, convert_s, sample_s, base, sampled, runs)
    return 0


def report(args: argparse.Namespace, rows: int, convert_s: float, sample_s: float, base: int, sampled: int,
           runs: dict[str, list[dict[str, Any]]]) -> None:  # fmt: skip
    runs = {config: found for config, found in runs.items() if found}  # none with --storage-only
    best = {c: max((r["tokens_per_s"] for r in found), default=float("nan")) for c, found in runs.items()}
    text = f"text {args.text}, " if args.text else ""
    print(f"{rows} pairs, alpha {args.alpha}, vocab {args.vocab}; {text}{os.cpu_count()} cpus, {platform.platform()}")
    print(f"conversion {convert_s:.1f} s, lattices {sample_s:.1f} s ({(convert_s + sample_s) / convert_s:.2f}x a "
          f"plain conversion); storage: train split {base / 1e6:.1f} MB, samples {sampled / 1e6:.1f} MB "
          f"({sampled / base:.2f}x the split)")  # fmt: skip
    if runs:
        print("| reading | tokens/s, best (range) | x fixed | longest stall at an epoch start | RssAnon after |")
        print("|---|---:|---:|---:|---:|")
    for config, found in runs.items():
        rates = [r["tokens_per_s"] for r in found]
        stall = max(max(r["stalls_s"][1:], default=0.0) for r in found)
        print(f"| {config} | {best[config] / 1e6:.2f}M ({min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f}M) | "
              f"{best[config] / best['fixed']:.2f}x | {stall:.2f} s (epoch 1: "
              f"{max(r['stalls_s'][0] for r in found):.2f} s) | "
              f"{min(r['rss_anon_mib'] for r in found):.0f} MiB |")  # fmt: skip
    name = f"sampled-{rows}" + ("-text" if args.text else "") + ("-storage" if args.storage_only else "")
    out = HERE / "results" / f"{name}.json"
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    from run_one import in_repository

    options = {**vars(args), "text": args.text and in_repository(args.text), "work": None}  # scratch: not recorded
    record = {"args": options, "rows": rows, "convert_s": convert_s, "samples_s": sample_s, "base_bytes": base,
              "sampled_bytes": sampled, "runs": runs, "machine": machine}  # fmt: skip
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {out}")


if __name__ == "__main__":
    raise SystemExit(main())
