"""``arrowmt demo``: convert the bundled Multi30k sample and iterate one epoch of training batches."""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from arrowmt._info import format_summary, summarize
from arrowmt.converters import TextConversion, convert_with_options
from arrowmt.format import SOURCE, TARGET
from arrowmt.training import ArrowMTDataset, FairseqCollater, TokenBatchSampler, open_dataset

SAMPLE = Path(__file__).parent / "sample_data" / "multi30k"
TEMPORARY = "a temporary folder, removed at the end (--out DIR keeps the dataset)"
TEMPORARY_NAME = "multi30k-de-en"  # the converted sample's folder name, in the temporary folder


def run_demo(out: str | None = None, max_tokens: int = 2048, overwrite: bool = False) -> None:
    """Convert the sample (into ``out`` or a temporary folder), summarize it and time one epoch.

    ``out`` follows the converters' rules: a non-empty folder is replaced only with ``overwrite``.
    """
    if out is not None:
        _run(Path(out), max_tokens, overwrite, str(out), str(out))
        return
    with tempfile.TemporaryDirectory(prefix="arrowmt-demo-") as tmp:  # its path is never shown: it is removed
        _run(Path(tmp) / TEMPORARY_NAME, max_tokens, False, TEMPORARY, f"{TEMPORARY_NAME} (temporary)")


def _run(folder: Path, max_tokens: int, overwrite: bool, shown: str, name: str) -> None:
    """The demo on ``folder``: where it is, ``shown`` after the conversion, and ``name`` heading its summary."""
    options = TextConversion(
        src_lang="de",
        tgt_lang="en",
        prefixes={"train": str(SAMPLE / "train"), "valid": str(SAMPLE / "val"), "test": str(SAMPLE / "test")},
    )
    start = time.perf_counter()
    convert_with_options(options, folder, overwrite=overwrite, progress=False)
    print(f"converted bundled Multi30k de-en text in {time.perf_counter() - start:.2f} s -> {shown}\n")
    print(format_summary(folder, summarize(folder), shown_as=name), "\n")
    sys.stdout.flush()  # the epoch runs in a fresh process writing to the same stdout
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        report = pool.submit(measured_epoch, str(folder), max_tokens).result()
    _show_pair(open_dataset(folder, "train"))
    print(f"\n{summary_line(report)}")


@dataclass(frozen=True)
class EpochReport:
    """What one training rank measured: throughput and private memory (MB; None without /proc)."""

    tokens_per_s: float
    added_mb: float | None
    total_mb: float | None


def measured_epoch(folder: str, max_tokens: int) -> EpochReport:
    """One epoch as one training rank, in a fresh process: tokens/s and the private memory the data path added."""
    before = private_mb()  # torch and arrowmt imported, nothing opened
    rate = _iterate(open_dataset(folder, "train"), max_tokens)
    after = private_mb()
    sys.stdout.flush()
    return EpochReport(rate, None if before is None or after is None else after - before, after)


def _iterate(ds: ArrowMTDataset, max_tokens: int) -> float:
    """One epoch of fairseq batches through a DataLoader (no workers); return tokens/s."""
    start = time.perf_counter()
    sampler = TokenBatchSampler(ds, max_tokens=max_tokens, seed=1)
    sampler.set_epoch(1)
    setup = time.perf_counter() - start
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=FairseqCollater(ds.special_ids))
    batches = sentences = real = padded = 0
    start = time.perf_counter()
    for batch in loader:
        src, tgt = batch["net_input"]["src_tokens"], batch["target"]
        batches += 1
        sentences += batch["nsentences"]
        real += int(batch["net_input"]["src_lengths"].sum()) + batch["ntokens"]
        padded += src.numel() + tgt.numel()
    elapsed = time.perf_counter() - start
    print(
        f"epoch 1: {batches} batches (max_tokens={max_tokens}), {sentences} sentence pairs, batch plan in {setup:.3f} s"
    )
    print(f"padding efficiency {real / max(padded, 1):.1%}; {real / elapsed:,.0f} tokens/s into padded fairseq batches")
    print(f"last batch: src_tokens {tuple(src.shape)}, target {tuple(tgt.shape)}, dtype {src.dtype}")
    return real / elapsed


def private_mb() -> float | None:
    """This process's private (anonymous) resident memory, RssAnon from /proc/self/status, in MB; None elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None


def summary_line(report: EpochReport) -> str:
    """The one line to compare with a fairseq run on the same data (what docs/benchmarks.md measures)."""
    memory = "n/a (no /proc/self/status)"
    if report.added_mb is not None and report.total_mb is not None:
        memory = f"{report.added_mb:+.1f} MB for the data path, {report.total_mb:.0f} MB for the whole process"
    return (
        f"summary: {report.tokens_per_s / 1e6:.1f}M tokens/s into padded fairseq batches (one process, "
        f"no DataLoader workers); private memory per rank (RssAnon): {memory}"
    )


def _show_pair(ds: ArrowMTDataset) -> None:
    src_dict, tgt_dict = ds.dictionary(SOURCE), ds.dictionary(TARGET)
    item = ds[0]
    source, target = item[SOURCE], item[TARGET]
    assert isinstance(source, torch.Tensor) and isinstance(target, torch.Tensor)
    print("\nrow 0 (a zero-copy view of the memory-mapped file):")
    print(f"  de: {src_dict.decode(source[:-1].numpy())}")
    print(f"  en: {tgt_dict.decode(target[:-1].numpy())}")
