"""``arrowmt order --tokens-per-sample``: LM blocks stored in plan order give the original's blocks and batches,
each planned batch one contiguous stretch of the copy.

The corpus is real ``fairseq-preprocess --only-source`` output (Multi30k English with document
breaks) converted by arrowmt; the fairseq task on a copy is checked against native fairseq
in ``test_fairseq_lm.py``.
"""

from __future__ import annotations

import itertools
import json
import logging
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

import arrowmt
from arrowmt import FormatError, InvalidParameterError, PlainBlockCollater
from arrowmt.format import MANIFEST_NAME
from arrowmt.stored import block_order_name
from arrowmt.testing import cut_lengths, stored_starts, window_starts, windowed_batch_order
from arrowmt.views import verify_dataset
from tests.builders import multi30k_dataset
from tests.lm_data import fairseq_mono
from tests.state_helpers import SamplerLoader, check_resume

TOKENS_PER_SAMPLE = 32
PLAN = {"max_tokens": 512, "seed": 3}


def test_cut_lengths_exact() -> None:
    # ranges of 4, 6 and 3 tokens back to back; the second cut 2 and 5 tokens in, the third 1 in
    got = cut_lengths(np.array([4, 6, 3]), np.array([1, 1, 2]), np.array([2, 5, 1]))
    assert got.tolist() == [4, 2, 3, 1, 1, 2]
    assert cut_lengths(np.array([5]), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).tolist() == [5]


def test_stored_starts_exact() -> None:
    # blocks [10, 14) with 2 heads and [3, 5) with none, stored from 7: heads 7-8, block 9-12, block 13-14
    got = stored_starts(np.array([10, 3]), np.array([14, 5]), np.array([2, 0]), 7)
    assert got.tolist() == [9, 13]


def test_a_table_whose_heads_start_before_the_tokens_is_refused(tmp_path: Path) -> None:
    from arrowmt.testing import MappedBlocks, write_table

    path, key = tmp_path / "t.lm-blocks", "ab" * 32
    write_table(path, key, 2, 10, np.array([4, 0]), np.array([8, 4]), np.array([1, 1], dtype=np.uint8))
    table = MappedBlocks(path, key, 2, 10, stored_plan={})  # a copy's table: blocks not in order
    assert table.offsets(np.array([0])).tolist() == [1]
    with pytest.raises(FormatError, match=r"block 1: row offset 1, expected <= 2 and <= its start 0 \(corrupt\)"):
        table.offsets(np.array([1]))
    with pytest.raises(FormatError, match=r"block 1: range 0..4 \(row offset 1\)"):
        table.sizes()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fairseq_mono(tmp_path_factory.mktemp("mono"))[1]


@pytest.fixture(scope="module")
def copies(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for mode in ("none", "complete", "complete_doc"):
        path = tmp_path_factory.mktemp("copy") / mode
        arrowmt.order_blocks(corpus, path, tokens_per_sample=TOKENS_PER_SAMPLE, break_mode=mode, progress=False, **PLAN)
        out[mode] = path
    return out


def blocks(path: Path, mode: str = "none", **kw: Any) -> arrowmt.BlockDataset:
    return arrowmt.open_blocks(path, "train", kw.pop("tokens_per_sample", TOKENS_PER_SAMPLE), mode, **kw)


def planned(data: arrowmt.BlockDataset, **kw: Any) -> list[list[int]]:
    options = {**PLAN, "num_replicas": 1, "rank": 0, **kw}
    return [list(b) for b in arrowmt.BlockBatchSampler(data, **options)]


@pytest.mark.parametrize("mode", ["none", "complete", "complete_doc"])
def test_blocks_samples_and_batches_are_the_originals(mode: str, corpus: Path, copies: dict[str, Path]) -> None:
    original, copy = blocks(corpus, mode), blocks(copies[mode], mode)
    assert len(copy) == len(original)
    assert np.array_equal(copy.sizes(), original.sizes())
    plan = planned(original)
    assert planned(copy) == plan
    for batch in plan[:: max(1, len(plan) // 60)]:
        mine, theirs = copy.__getitems__(batch), original.__getitems__(batch)
        assert np.array_equal(mine.offsets, theirs.offsets)
        assert all(np.array_equal(a, b) for a, b in zip(mine.document_starts(), theirs.document_starts(), strict=True))
        for a, b in zip(mine, theirs, strict=True):
            assert a["id"] == b["id"]
            assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in ("source", "target", "past_target"))


@pytest.mark.parametrize("mode", ["none", "complete", "complete_doc"])
def test_each_planned_batch_is_one_stretch_of_the_copy(mode: str, copies: dict[str, Path]) -> None:
    copy = blocks(copies[mode], mode)
    for batch in planned(copy):
        starts, ends = copy.bounds(np.array(batch))
        heads = copy.table.offsets(np.array(batch)).astype(np.int64)
        order = np.argsort(starts)
        assert np.array_equal((starts - heads)[order][1:], ends[order][:-1])  # back to back, heads included


def test_other_batching_options_read_the_same_batches_from_the_copy_with_a_warning(
    corpus: Path, copies: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    options = {"max_tokens": 256, "seed": 5, "required_batch_size_multiple": 8}
    with caplog.at_level(logging.WARNING):
        assert planned(blocks(copies["none"]), **options) == planned(blocks(corpus), **options)
    warned = [r.getMessage() for r in caplog.records if "another plan" in r.getMessage()]
    assert len(warned) == 1 and "max_tokens=512 (asked 256), required_batch_size_multiple=1 (asked 8)" in warned[0]
    assert "seed=3 (asked 5)" in warned[0] and str(copies["none"]) in warned[0]
    out = (
        f"{copies['none']}-max-tokens256-required-batch-size-multiple8-seed5"  # beside the copy, named by what changed
    )
    assert warned[0].endswith(
        f"from the original: arrowmt order {corpus.resolve()} {out} --sample-break-mode none --tokens-per-sample 32 "
        "--max-tokens 256 --required-batch-size-multiple 8 --seed 5"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        planned(blocks(copies["none"]))
    assert not caplog.records


def test_other_block_options_are_refused_naming_what_differs(copies: dict[str, Path]) -> None:
    with pytest.raises(InvalidParameterError, match=r"tokens_per_sample: .*tokens_per_sample=32 \(asked 64\)"):
        blocks(copies["none"], tokens_per_sample=64)
    with pytest.raises(InvalidParameterError, match=r"break_mode: .*break_mode='complete' \(asked 'none'\)"):
        blocks(copies["complete"], "none")


def test_sentence_readers_refuse_the_copy(copies: dict[str, Path], tmp_path: Path) -> None:
    for call in (
        lambda: arrowmt.open_dataset(copies["none"]),
        lambda: arrowmt.export_fairseq(copies["none"], tmp_path / "back", progress=False),
        lambda: arrowmt.order_copy(copies["none"], tmp_path / "again", progress=False),
        lambda: arrowmt.order_blocks(copies["none"], tmp_path / "again", progress=False),
        lambda: arrowmt.ArrowMTDataset(copies["none"], "train"),
        lambda: arrowmt.open_mixture({"a": copies["none"]}),
        lambda: arrowmt.TokenBatchSampler(arrowmt.open_split(copies["none"], "train"), max_tokens=256),
    ):
        with pytest.raises(InvalidParameterError, match="stores LM blocks in plan order"):
            call()
    assert len(arrowmt.open_dataset(copies["none"], "valid")) > 0  # a split copied as it is
    pytest.importorskip("datasets")
    from arrowmt.integrations import hf

    for call in (
        lambda: hf.load_split(copies["none"], "train", cache_dir=tmp_path / "hf"),
        lambda: hf.export_for_load_from_disk(copies["none"], "train", tmp_path / "export"),
    ):
        with pytest.raises(InvalidParameterError, match="stores LM blocks in plan order"):
            call()
    assert not (tmp_path / "export").exists()


def test_a_pair_corpus_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    pairs = multi30k_dataset(tmp_path / "pairs", "train", limit=50)
    with pytest.raises(InvalidParameterError, match=r"split: expected a monolingual split with the one column"):
        arrowmt.order_blocks(pairs, tmp_path / "out", split="train", progress=False)
    assert not (tmp_path / "out").exists()


def test_break_mode_eos_is_refused(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="break_mode: expected 'none', 'complete' or 'complete_doc'"):
        arrowmt.order_blocks(corpus, tmp_path / "eos", break_mode="eos", progress=False)
    assert not (tmp_path / "eos").exists()


def test_the_copy_verifies_and_lists_its_table(copies: dict[str, Path]) -> None:
    report = verify_dataset(copies["none"], progress=False)
    assert report.ok, report.problems
    manifest = json.loads((copies["none"] / MANIFEST_NAME).read_text())
    entry = manifest["provenance"]["block_order"]["train"]
    assert entry["file"] == block_order_name("train") and (copies["none"] / entry["file"]).is_file()
    assert entry["blocks"] == {"break_mode": "none", "tokens_per_sample": TOKENS_PER_SAMPLE}
    assert (entry["plan"]["max_tokens"], entry["plan"]["seed"]) == (512, 3)


def damaged(copy: Path, folder: Path, flip_table: bool = False, **entry: object) -> Path:
    """A copy of ``copy`` at ``folder``: its manifest entry's fields set to ``entry``, a byte of its table flipped."""
    shutil.copytree(copy, folder)
    if entry:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        manifest["provenance"]["block_order"]["train"].update(entry)
        (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    if flip_table:
        table = folder / block_order_name("train")
        data = bytearray(table.read_bytes())
        data[-20] ^= 0xFF
        table.write_bytes(bytes(data))
    return folder


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("file", "../train.lm-blocks", r"\['file'\]: expected 'train.lm-blocks', got '../train.lm-blocks'"),
        ("file", "valid.lm-blocks", r"\['file'\]: expected 'train.lm-blocks'"),
        ("table", "zz", r"\['table'\]: expected 64 lowercase hex digits"),
        ("blocks", [1], r"\['blocks'\]: expected the block options as an object"),
    ],
)
def test_a_bad_manifest_entry_is_refused_naming_it(
    copies: dict[str, Path], tmp_path: Path, field: str, value: object, message: str
) -> None:
    with pytest.raises(FormatError, match=message):
        blocks(damaged(copies["none"], tmp_path / "bad", **{field: value}))


def test_edited_block_options_or_key_are_refused(copies: dict[str, Path], tmp_path: Path) -> None:
    options = {"break_mode": "none", "tokens_per_sample": 64}
    for field, value, size in (("table", "0" * 64, TOKENS_PER_SAMPLE), ("blocks", options, 64)):
        bad = damaged(copies["none"], tmp_path / field, **{field: value})
        with pytest.raises(FormatError, match=r"do not hash to its table key .*\(edited\?\); make the copy again"):
            blocks(bad, tokens_per_sample=size)


def test_another_copys_table_is_refused_naming_the_file(copies: dict[str, Path], tmp_path: Path) -> None:
    bad = damaged(copies["none"], tmp_path / "bad")
    shutil.copyfile(copies["complete"] / block_order_name("train"), bad / block_order_name("train"))
    with pytest.raises(FormatError, match=r"train\.lm-blocks: block table \(key, rows, tokens\)"):
        blocks(bad)
    report = verify_dataset(bad, progress=False)
    assert any("train.lm-blocks" in p and "key" in p for p in report.problems), report.problems


def test_a_corrupt_table_is_reported_and_kept(copies: dict[str, Path], tmp_path: Path) -> None:
    bad = damaged(copies["none"], tmp_path / "bad", flip_table=True)
    report = verify_dataset(bad, progress=False)
    assert not report.ok and any("train.lm-blocks" in p for p in report.problems), report.problems
    with pytest.raises(FormatError, match=r"train\.lm-blocks.*make the copy again"):
        blocks(bad).sizes()
    assert (bad / block_order_name("train")).is_file()  # the copy's own table: never removed like a cache file


def test_a_shuffle_window_reads_the_copy_window_by_window(corpus: Path, copies: dict[str, Path]) -> None:
    copy = blocks(copies["none"])
    stored = arrowmt.BlockBatchSampler(copy, num_replicas=1, rank=0, **PLAN).plan
    plan = [stored.batch(b).tolist() for b in range(len(stored))]  # the plan's batches in plan order
    order = windowed_batch_order(len(plan), PLAN["seed"], 2, 256)  # windows of 16 runs of 16 batches

    def windowed() -> arrowmt.BlockBatchSampler:
        made = arrowmt.BlockBatchSampler(copy, num_replicas=1, rank=0, shuffle_window=256, **PLAN)
        made.set_epoch(2)
        return made

    full = check_resume(windowed, consume=9)
    assert [list(b) for b in full] == [plan[b] for b in order.tolist()]
    edges = [0, *window_starts(len(plan), PLAN["seed"], 2, 256).tolist(), len(full)]
    assert len(edges) > 3
    for a, b in itertools.pairwise(edges):  # a window reads 16 stretches of the copy (runs of batches)
        ids = np.concatenate([np.array(batch) for batch in full[a:b]])
        starts, ends = copy.bounds(ids)
        heads = copy.table.offsets(ids).astype(np.int64)
        order = np.argsort(starts)
        assert int(np.count_nonzero((starts - heads)[order][1:] != ends[order][:-1])) + 1 <= 16
    with pytest.raises(InvalidParameterError, match="shuffle_window: expected None with shuffle=False"):
        arrowmt.BlockBatchSampler(copy, shuffle=False, shuffle_window=16)


def collate_ids(batch: Any) -> list[int]:
    out = PlainBlockCollater()(batch)
    return [*out["id"].tolist(), int(out["tokens"].sum()), int(out["target"].sum())]


def test_resume_and_workers_on_the_copy(corpus: Path, copies: dict[str, Path]) -> None:
    copy = blocks(copies["complete"], "complete")
    unpickled = pickle.loads(pickle.dumps(copy)).table
    assert unpickled.in_order is False and unpickled.stored_plan == copy.table.stored_plan  # the warning's options

    def sampler() -> arrowmt.BlockBatchSampler:
        made = arrowmt.BlockBatchSampler(copy, num_replicas=2, rank=1, **PLAN)
        made.set_epoch(2)
        return made

    check_resume(sampler, consume=11)
    full = check_resume(
        lambda: SamplerLoader(DataLoader(copy, batch_sampler=sampler(), collate_fn=collate_ids)), consume=5
    )
    original = blocks(corpus, "complete")
    plain = arrowmt.BlockBatchSampler(original, num_replicas=2, rank=1, **PLAN)
    plain.set_epoch(2)
    workers = DataLoader(copy, batch_sampler=sampler(), collate_fn=collate_ids, num_workers=2)
    assert list(workers) == full == list(DataLoader(original, batch_sampler=plain, collate_fn=collate_ids))


def test_order_command_for_blocks(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    command = [sys.executable, "-m", "arrowmt", "order", str(corpus), str(out), "--tokens-per-sample", "32",
               "--sample-break-mode", "complete", "--max-tokens", "512", "--seed", "3", "--quiet"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "LM blocks in plan order" in done.stdout
    assert planned(blocks(out, "complete")) == planned(blocks(corpus, "complete"))
    wrong = subprocess.run([*command[:-1], "--max-source-positions", "9"], capture_output=True, text=True)
    assert wrong.returncode != 0 and "--max-source-positions: not an option of a copy of LM blocks" in wrong.stderr
    pairs = [sys.executable, "-m", "arrowmt", "order", str(corpus), str(tmp_path / "p"), "--sample-break-mode", "eos"]
    wrong = subprocess.run(pairs, capture_output=True, text=True)
    assert wrong.returncode != 0 and "--sample-break-mode: not an option of a copy of sentence pairs" in wrong.stderr
    assert not (tmp_path / "p").exists()
