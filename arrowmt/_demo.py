"""``arrowmt demo``: convert the bundled Multi30k sample and iterate one epoch of training batches."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from arrowmt._info import format_summary, summarize
from arrowmt.converters._parallel_text import TextConversion, convert_with_options
from arrowmt.format._vocab import Dictionary
from arrowmt.training._collate import Collater
from arrowmt.training._dataset import ArrowMTDataset, open_dataset
from arrowmt.training._sampler import TokenBatchSampler

SAMPLE = Path(__file__).parent / "sample_data" / "multi30k"


def run_demo(out: str | None = None, max_tokens: int = 2048) -> None:
    """Convert the sample (into ``out`` or a temporary folder), summarize it and time one epoch."""
    if out is not None:
        _run(Path(out), max_tokens)
        return
    with tempfile.TemporaryDirectory(prefix="arrowmt-demo-") as tmp:
        _run(Path(tmp) / "multi30k-de-en", max_tokens)


def _run(folder: Path, max_tokens: int) -> None:
    options = TextConversion(
        src_lang="de",
        tgt_lang="en",
        prefixes={"train": str(SAMPLE / "train"), "valid": str(SAMPLE / "val"), "test": str(SAMPLE / "test")},
    )
    start = time.perf_counter()
    convert_with_options(options, folder, overwrite=True, progress=False)
    print(f"converted bundled Multi30k de-en text in {time.perf_counter() - start:.2f} s -> {folder}\n")
    print(format_summary(folder, summarize(folder)), "\n")
    ds = open_dataset(folder, "train")
    _iterate(ds, max_tokens)
    _show_pair(folder, ds)


def _iterate(ds: ArrowMTDataset, max_tokens: int) -> None:
    start = time.perf_counter()
    sampler = TokenBatchSampler(ds, max_tokens=max_tokens, seed=1)
    sampler.set_epoch(1)
    setup = time.perf_counter() - start
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=Collater.for_dataset(ds))
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


def _show_pair(folder: Path, ds: ArrowMTDataset) -> None:
    src_dict = Dictionary.load(folder / "dict.de.txt")
    tgt_dict = Dictionary.load(folder / "dict.en.txt")
    item = ds[0]
    source, target = item["source"], item["target"]
    assert isinstance(source, torch.Tensor) and isinstance(target, torch.Tensor)
    print("\nrow 0 (a zero-copy view of the memory-mapped file):")
    print(f"  de: {src_dict.decode(source[:-1].numpy())}")
    print(f"  en: {tgt_dict.decode(target[:-1].numpy())}")
