"""Subword regularization (issue 39): reading stored sampled segmentations against the fixed ids and against
sentencepiece sampling in the loader, on the same corpus, in one run; and what the samples cost to make and store.

Usage::

    python benchmarks/bench_sampled.py --samples 8 --alpha 0.1 --repeat 3
    python benchmarks/bench_sampled.py --text bench-data/text-500000 --vocab 16000 --storage-only  # a larger corpus

The corpus is the bundled Multi30k sample (29,000 German-English training pairs, ``arrowmt/sample_data``), made
``--times`` times longer by repeating it (the same words: storage is measured on ``--times 1``), or with ``--text``
a larger synthetic corpus (``make_text_corpus.py``: Zipf-distributed pseudo-words; storage on a larger corpus,
indicative only since its words are not real ones; ``--storage-only`` reads nothing). A sentencepiece
unigram model of ``--vocab`` pieces is trained on it, then ``convert_text(spm_model=..., spm_samples=K)`` converts
it (timed: the conversion, then the samples). Reading runs ``--batches`` batches of one epoch (``max_tokens`` 4096,
seed 1) through a ``DataLoader`` with ``FairseqCollater``, ``--repeat`` times each, interleaved:

* fixed: ``open_dataset(corpus, "train")``, no worker;
* sampled: ``open_dataset(corpus, "train", segmentation="sampled")``, no worker (the epoch's copy in its samples
  is written before the first run starts its clock: its time is the first run's "setup");
* on the fly: the fixed plan's batches of raw text lines, each line sampled by sentencepiece
  (``encode(enable_sampling=True)``) and looked up in the dictionary in 2 DataLoader workers, as Marian or
  OpenNMT-py sample while they load.

tokens/s counts the source and target pieces of the collated batches (padding left out). The table keeps each
configuration's best run and the range. Every run is saved to ``benchmarks/results/sampled-<rows>.json``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import arrowmt
from arrowmt import FairseqCollater, SpecialIds, TokenBatchSampler, open_dataset

HERE = Path(__file__).resolve().parent
SAMPLE = Path(arrowmt.__file__).parent / "sample_data" / "multi30k"


def text_corpus(folder: Path, times: int, text: Path | None, rows: int) -> Path:
    """``train.de``/``train.en``: the bundled training text, ``times`` times over; or the first ``rows`` lines
    (0: all) of ``text``'s (a ``make_text_corpus.py`` folder)."""
    for lang in ("de", "en"):
        if text is None:
            with gzip.open(SAMPLE / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
                lines = handle.read() * times
        else:
            with open(text / f"train.{lang}", encoding="utf-8") as handle:
                lines = "".join(line for k, line in enumerate(handle) if not rows or k < rows)
        (folder / f"train.{lang}").write_text(lines, encoding="utf-8")
    return folder / "train"


def train_model(prefix: Path, vocab: int) -> Path:
    import sentencepiece as spm

    both = prefix.with_name("both.txt")
    both.write_text(prefix.with_suffix(".de").read_text("utf-8") + prefix.with_suffix(".en").read_text("utf-8"))
    spm.SentencePieceTrainer.train(input=str(both), model_prefix=str(prefix.with_name("spm")), vocab_size=vocab,
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


def read(config: str, corpus: Path, prefix: Path, model: Path, alpha: float, batches: int) -> dict[str, Any]:
    sampled = config == "sampled"
    ds = open_dataset(corpus, "train", segmentation="sampled" if sampled else "fixed")
    sampler = TokenBatchSampler(ds if config != "on the fly" else open_dataset(corpus, "train"), max_tokens=4096)
    sampler.set_epoch(1)
    start = time.perf_counter()
    planned = len(sampler)  # the epoch's plan (and a sampled epoch's copy) is made or mapped before the clock starts
    setup = time.perf_counter() - start
    source: Any = OnTheFly(prefix, model, corpus, alpha) if config == "on the fly" else ds
    workers = 2 if config == "on the fly" else 0
    loader = DataLoader(source, batch_sampler=sampler, collate_fn=FairseqCollater(SpecialIds()), num_workers=workers)
    tokens, done, start = 0, 0, time.perf_counter()
    for batch in loader:
        tokens += int(batch["net_input"]["src_lengths"].sum()) + int((batch["target"] != 1).sum())
        done += 1
        if done == batches:
            break
    seconds = time.perf_counter() - start
    rate = tokens / seconds
    return {"config": config, "setup_s": setup, "planned": planned, "batches": done, "tokens": tokens,
            "seconds": seconds, "tokens_per_s": rate}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--times", type=int, default=1, help="repeat the bundled text this many times")
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--max-draws", type=int, default=64, help="add_sampled_segmentations's max_draws")
    p.add_argument("--text", type=Path, help="a make_text_corpus.py folder instead of the bundled sample")
    p.add_argument("--rows", type=int, default=0, help="with --text: its first ROWS pairs (0: all)")
    p.add_argument("--storage-only", action="store_true", help="make and measure the samples, read nothing")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        prefix = text_corpus(folder, args.times, args.text, args.rows)
        model = train_model(prefix, args.vocab)
        corpus = folder / "corpus"
        start = time.perf_counter()
        arrowmt.convert_text(str(prefix), corpus, src_lang="de", tgt_lang="en", spm_model=str(model), progress=False)
        convert_s = time.perf_counter() - start
        start = time.perf_counter()
        arrowmt.add_sampled_segmentations(corpus, model, samples=args.samples, alpha=args.alpha,
                                          max_draws=args.max_draws, progress=False)  # fmt: skip
        sample_s = time.perf_counter() - start
        base = folder_bytes([corpus / "train.arrow"])
        sampled = folder_bytes([corpus / "sampled"])
        rows = len(arrowmt.open_dataset(corpus, "train"))
        runs: dict[str, list[dict[str, Any]]] = {c: [] for c in ("fixed", "sampled", "on the fly")}
        for _ in range(0 if args.storage_only else args.repeat):
            for config in runs:
                runs[config].append(read(config, corpus, prefix, model, args.alpha, args.batches))
    best = {c: max((r["tokens_per_s"] for r in found), default=float("nan")) for c, found in runs.items()}
    print(f"{rows} pairs, K={args.samples}, alpha {args.alpha}, vocab {args.vocab}, max_draws {args.max_draws}; "
          f"{'text ' + str(args.text) + ', ' if args.text else ''}{os.cpu_count()} cpus, "
          f"{platform.platform()}")  # fmt: skip
    print(f"conversion {convert_s:.1f} s, samples {sample_s:.1f} s; storage: train split {base / 1e6:.1f} MB, "
          f"samples {sampled / 1e6:.1f} MB ({(base + sampled) / base:.2f}x the split with them)")  # fmt: skip
    if not args.storage_only:
        print("| reading | tokens/s, best (range) | x fixed | x on the fly | setup, first run |")
        print("|---|---:|---:|---:|---:|")
    for config, found in runs.items() if not args.storage_only else ():
        rates = [r["tokens_per_s"] for r in found]
        print(f"| {config} | {best[config] / 1e6:.2f}M ({min(rates) / 1e6:.2f}-{max(rates) / 1e6:.2f}M) | "
              f"{best[config] / best['fixed']:.2f}x | {best[config] / best['on the fly']:.1f}x | "
              f"{found[0]['setup_s']:.2f} s |")  # fmt: skip
    name = f"sampled-{rows}" + ("-text" if args.text else "") + ("-storage" if args.storage_only else "")
    out = HERE / "results" / f"{name}.json"
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    options = {**vars(args), "text": args.text and str(args.text)}
    record = {"args": options, "rows": rows, "convert_s": convert_s, "samples_s": sample_s, "base_bytes": base,
              "sampled_bytes": sampled, "runs": runs, "machine": machine}  # fmt: skip
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
