"""Real ``fairseq-train`` on a corpus read by URL from a real S3 server: update for update as native fairseq."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow.fs as pafs
import pytest

import arrowmt
from arrowmt import Manifest
from arrowmt.io import _prefetch
from arrowmt.stored import StoredPlan
from arrowmt.testing import windowed_batch_order, write_block_indexes
from tests.conftest import PLUGIN_DIR, import_fairseq, quiet
from tests.s3_server import s3, upload
from tests.test_fairseq_native import EPOCH_UPDATES, MAX_TOKENS, Side, assert_same_training, train
from tests.test_fairseq_train import collated, make_task

__all__ = ["s3"]


def import_plugin() -> ModuleType:
    import_fairseq()
    with quiet():
        import arrowmt.integrations.fairseq_plugin as plugin
    return plugin


def test_fairseq_train_from_s3_as_native_fairseq(
    s3: pafs.S3FileSystem, native_data_bin: Path, native_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = upload(s3, native_corpus, "fairseq")
    size = (native_corpus / "valid.arrow").stat().st_size
    # fairseq lists --data for other valid subsets unless told not to: it cannot list a URL (both sides told)
    native_args = [str(native_data_bin), "--task", "translation", "--ignore-unused-valid-subsets"]
    native = Side("native", native_args, {}, tmp_path_factory.mktemp("native"))
    cache = tmp_path_factory.mktemp("cache")
    task = [url, "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow", "--arrow-cache-dir", str(cache),
            "--ignore-unused-valid-subsets"]  # fmt: skip
    remote = Side("arrowmt", [*task, "--arrow-cache-limit", str(size // 2)], {}, tmp_path_factory.mktemp("remote"))
    runs = {side.name: train(side, "first", "--max-update", "24") for side in (native, remote)}
    assert_same_training(runs, list(range(1, 25)))
    assert "arrowmt folder" in runs["arrowmt"].log


def test_fairseq_window_reads_a_copy_in_plan_order_a_window_at_a_time(
    s3: pafs.S3FileSystem, native_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--arrow-shuffle-window 16`` on a copy by URL made by ``arrowmt order`` with the task's plan options (fairseq's
    ``--seed 1`` plans epoch 1 under seed 2): rank 0 of 2 asks for each window's batches at once, both ranks' (the
    node's cache merges a window's runs into long range requests), and its batches are the local corpus's."""
    plugin = import_plugin()
    ordered = tmp_path / "ordered"
    arrowmt.order_copy(native_corpus, ordered, max_tokens=1024, seed=2, progress=False)
    write_block_indexes(ordered, Manifest.load(ordered), 1024)
    url = upload(s3, ordered, "fairseq-window")
    asked: list[set[int]] = []
    will_need = _prefetch.will_need

    def record(ranges: list, ahead: int | None = None, later: bool = False, planned: bool = False) -> int:
        if ranges and all(part.remote is not None for part in ranges):  # not the local corpus's read-ahead below
            asked.append({b for part in ranges for b in part.remote.blocks(*part.byte_bounds()).tolist()})
        return will_need(ranges, ahead, later, planned)

    monkeypatch.setattr(_prefetch, "will_need", record)
    kw = {"max_tokens": 1024, "seed": 1, "epoch": 1, "num_shards": 2, "shard_id": 0}
    task = make_task(plugin, url, arrow_shuffle_window=16, arrow_cache_dir=str(tmp_path / "cache"))
    with quiet():
        task.load_dataset("train")
        dataset = task.dataset("train")
        itr = task.get_batch_iterator(dataset, **kw)
        remote = [collated(b) for b in itr.next_epoch_itr(shuffle=True)]
    plan = itr.plans.plan
    assert isinstance(plan, StoredPlan)  # the copy's own plan: its batches are stretches
    order = windowed_batch_order(len(plan), 1, 1, 16)
    expected = []
    for first in range(0, len(order), 16):
        rows = np.concatenate([plan.batch(int(b)) for b in order[first : first + 16]])
        expected.append({b for part in dataset.word_ranges(rows, True) for b in blocks_of(part)})
    assert len(expected) > 1 and asked == expected
    local = make_task(plugin, native_corpus, arrow_shuffle_window=16)
    with quiet():
        local.load_dataset("train")
        local_itr = local.get_batch_iterator(local.dataset("train"), **kw)
        assert remote == [collated(b) for b in local_itr.next_epoch_itr(shuffle=True)]


def blocks_of(part: object) -> list[int]:
    return part.remote.blocks(*part.byte_bounds()).tolist()  # type: ignore[attr-defined]


def test_fairseq_train_reads_a_copy_made_with_its_options_by_its_stored_plan(
    s3: pafs.S3FileSystem, native_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Real ``fairseq-train --arrow-shuffle-window 16`` on a copy by URL made with the options fairseq's training
    iterator plans epoch 1 with (``--seed 1``: order seed 2; ``--required-batch-size-multiple`` 8, fairseq's default;
    the model's position limits, 1024; rows over them skipped, as fairseq's trainer asks): it trains on the copy's
    stored plan (no warning of another plan), every batch once an epoch."""
    ordered = tmp_path_factory.mktemp("ordered") / "copy"
    arrowmt.order_copy(
        native_corpus, ordered, split="valid", max_tokens=MAX_TOKENS, required_batch_size_multiple=8,
        max_source_positions=1024, max_target_positions=1024, seed=2, skip_invalid_size_inputs=True, progress=False,
    )  # fmt: skip
    url = upload(s3, ordered, "fairseq-train-window")
    task = [url, "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow", "--ignore-unused-valid-subsets",
            "--arrow-cache-dir", str(tmp_path_factory.mktemp("cache")), "--arrow-shuffle-window", "16"]  # fmt: skip
    side = Side("window", task, {}, tmp_path_factory.mktemp("window"))
    run = train(side, "first", "--max-epoch", "2")
    assert "stored in the order of another plan" not in run.log
    assert re.search(r"for epoch 1 \(order seed 2\), plan \S+/valid\.rows$", run.log, re.MULTILINE), run.log[-3000:]
    assert run.updates == list(range(1, 2 * EPOCH_UPDATES + 1))
