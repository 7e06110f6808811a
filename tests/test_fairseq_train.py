"""The fairseq plugin (``--user-dir arrowmt/integrations/fairseq_plugin``) with the real fairseq.

The training tests run the real ``fairseq-train`` in a subprocess on the
converted Multi30k fixture (CPU, a tiny transformer); the others drive the task
in-process and compare its batches with arrowmt's ``TokenBatchSampler``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from arrowmt.converters._fairseq_folder import convert_fairseq

from arrowmt._errors import InvalidParameterError
from arrowmt.training._dataset import open_dataset
from arrowmt.training._sampler import TokenBatchSampler
from tests.conftest import FAIRSEQ_FIXTURE, import_fairseq

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_DIR = ROOT / "arrowmt" / "integrations" / "fairseq_plugin"
MAX_TOKENS = 1024
TINY_MODEL = [
    "--arch", "transformer",
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]  # fmt: skip
TRAINING = [
    "--max-tokens", str(MAX_TOKENS),
    "--optimizer", "adam", "--lr", "5e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
    "--criterion", "label_smoothed_cross_entropy",
    "--log-format", "json", "--log-interval", "4",
    "--cpu", "--num-workers", "0", "--seed", "1",
]  # fmt: skip


@contextmanager
def quiet() -> Iterator[None]:
    """fairseq (and torch under it) emit deprecation and pin-memory warnings; pytest makes warnings errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arrow") / "multi30k"
    convert_fairseq(FAIRSEQ_FIXTURE / "mmap", out, progress=False)
    return out


# ---------------------------------------------------------------- fairseq-train in a subprocess


def fairseq_train(data: Path, workdir: Path, *extra: str) -> str:
    """Run the real ``fairseq-train`` with the plugin; its whole log (stdout and stderr)."""
    import_fairseq()
    script = Path(sys.executable).with_name("fairseq-train")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "fairseq_cli.train"]
    args = [str(data), "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow", *TINY_MODEL, *TRAINING, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # a tiny model: extra threads only contend
    # cwd outside the checkout: the plugin must make arrowmt importable by itself
    done = subprocess.run([*command, *args], cwd=workdir, capture_output=True, text=True, timeout=180, env=env)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    return log


def json_records(log: str, tag: str) -> list[dict[str, Any]]:
    """The JSON statistics fairseq logs under ``tag`` (``train_inner``, ``valid``, ``train``)."""
    marker = f"| {tag} | "
    return [json.loads(line.split(marker, 1)[1]) for line in log.splitlines() if marker in line]


@pytest.fixture(scope="module")
def uninterrupted(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """16 updates in one go, validating at the end."""
    return fairseq_train(corpus, tmp_path_factory.mktemp("run"), "--max-update", "16", "--no-save")


def test_fairseq_train_uses_arrowmt_and_learns(uninterrupted: str) -> None:
    log = uninterrupted
    assert "'_name': 'translation_arrow'" in log
    assert "task: TranslationArrowTask" in log
    assert "translation_arrow: split train: 29000 pairs memory-mapped" in log
    assert "planned by arrowmt TokenBatchSampler" in log
    inner = json_records(log, "train_inner")
    assert [int(r["num_updates"]) for r in inner] == [4, 8, 12, 16]
    losses = [float(r["loss"]) for r in inner]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < losses[0] - 1.0, losses
    assert all(float(r["wpb"]) <= MAX_TOKENS for r in inner)
    valid = json_records(log, "valid")
    assert valid and math.isfinite(float(valid[-1]["valid_loss"]))


def test_fairseq_train_resumes_exactly(corpus: Path, uninterrupted: str, tmp_path: Path) -> None:
    """8 updates, save, continue to 16: the same batches and losses as the uninterrupted run."""
    options = ("--save-dir", str(tmp_path / "ckpt"), "--no-epoch-checkpoints", "--disable-validation")
    fairseq_train(corpus, tmp_path, "--max-update", "8", *options)
    resumed = fairseq_train(corpus, tmp_path, "--max-update", "16", *options)
    assert "Loaded checkpoint" in resumed and "(epoch 1 @ 8 updates)" in resumed
    after = json_records(resumed, "train_inner")
    before = {r["num_updates"]: r for r in json_records(uninterrupted, "train_inner")}
    assert [int(r["num_updates"]) for r in after] == [12, 16]
    for record in after:
        reference = before[record["num_updates"]]
        assert (record["wpb"], record["bsz"]) == (reference["wpb"], reference["bsz"])  # the same batches
        assert float(record["loss"]) == pytest.approx(float(reference["loss"]), abs=0.01)


# ---------------------------------------------------------------- the task in-process


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    import_fairseq()
    with quiet():
        import arrowmt.integrations.fairseq_plugin as plugin
    return plugin


def make_task(plugin: ModuleType, data: Path, **options: Any) -> Any:
    resolved = {"train_subset": "train", "required_seq_len_multiple": 1, "dataset_impl": None}
    cfg = plugin.TranslationArrowConfig(data=str(data), **resolved, **options)
    with quiet():
        return plugin.TranslationArrowTask.setup_task(cfg)


def epoch_ids(task: Any, split: str, epoch: int, **kw: Any) -> tuple[Any, list[list[int]]]:
    """The iterator and the sample ids of each batch of ``epoch``, as collated (sorted, to compare as sets)."""
    with quiet():
        task.load_dataset(split)
        itr = task.get_batch_iterator(task.dataset(split), max_tokens=MAX_TOKENS, seed=1, epoch=epoch, **kw)
        batches = [sorted(b["id"].tolist()) if b else [] for b in itr.next_epoch_itr(shuffle=True)]
    return itr, batches


def test_task_reads_languages_and_dictionaries(plugin: ModuleType, corpus: Path) -> None:
    task = make_task(plugin, corpus)
    assert (task.cfg.source_lang, task.cfg.target_lang) == ("de", "en")
    assert (len(task.src_dict), len(task.tgt_dict)) == (18728, 10216)
    with pytest.raises(InvalidParameterError, match="expected de/en"):
        make_task(plugin, corpus, source_lang="en", target_lang="de")
    with pytest.raises(InvalidParameterError, match="load_alignments"):
        make_task(plugin, corpus, load_alignments=True)


def test_dataset_gives_fairseq_samples(plugin: ModuleType, corpus: Path) -> None:
    task = make_task(plugin, corpus)
    with quiet():
        task.load_dataset("valid")
    ds = task.dataset("valid")
    arrow = open_dataset(corpus, "valid")
    sample = ds[7]
    assert sample["id"] == 7 and sample["source"].dtype == torch.int64 and sample["target"].dtype == torch.int64
    assert sample["source"].tolist() == arrow[7]["source"].tolist()
    assert ds.size(7) == (len(sample["source"]), len(sample["target"]))
    assert ds.num_tokens(7) == max(ds.size(7))
    assert ds.sizes.shape == (len(arrow), 2)
    rows = [3, 9, 4, 100]
    from_list, from_map = ds.collater([ds[i] for i in rows]), ds.collater(ds.__getitems__(rows))
    for key in ("id", "target"):
        assert torch.equal(from_list[key], from_map[key])
    assert torch.equal(from_list["net_input"]["src_tokens"], from_map["net_input"]["src_tokens"])
    assert ds.collater([]) == {}


def test_training_batches_are_the_samplers_per_rank(plugin: ModuleType, corpus: Path) -> None:
    task = make_task(plugin, corpus)
    arrow = open_dataset(corpus, "train")
    seen: list[int] = []
    counts = []
    for rank in range(2):
        _, batches = epoch_ids(task, "train", 2, num_shards=2, shard_id=rank, disable_iterator_cache=True)
        sampler = TokenBatchSampler(arrow, max_tokens=MAX_TOKENS, seed=1, num_replicas=2, rank=rank)
        sampler.set_epoch(2)
        assert batches == [sorted(b) for b in sampler]
        counts.append(len(batches))
        seen.extend(i for b in batches for i in b)
    assert counts[0] == counts[1]
    assert set(seen) == set(range(len(arrow)))  # every pair; a few repeat where ranks are padded by wrapping


def test_training_iterator_resumes_mid_epoch(plugin: ModuleType, corpus: Path) -> None:
    _, full = epoch_ids(make_task(plugin, corpus), "train", 3)
    task = make_task(plugin, corpus)
    with quiet():
        task.load_dataset("train")
        itr = task.get_batch_iterator(task.dataset("train"), max_tokens=MAX_TOKENS, seed=1, epoch=3)
        epoch = itr.next_epoch_itr(shuffle=True)
        head = [sorted(next(epoch)["id"].tolist()) for _ in range(7)]
        state = itr.state_dict()
    assert head == full[:7] and state["iterations_in_epoch"] == 7
    fresh = make_task(plugin, corpus)
    with quiet():
        fresh.load_dataset("train")
        again = fresh.get_batch_iterator(fresh.dataset("train"), max_tokens=MAX_TOKENS, seed=1, epoch=state["epoch"])
        again.load_state_dict(state)
        tail = [sorted(b["id"].tolist()) for b in again.next_epoch_itr(shuffle=True)]
    assert tail == full[7:]


def test_epochs_are_shuffled_differently(plugin: ModuleType, corpus: Path) -> None:
    task = make_task(plugin, corpus)
    itr, first = epoch_ids(task, "train", 1)
    with quiet():
        second = [sorted(b["id"].tolist()) for b in itr.next_epoch_itr(shuffle=True)]
    assert itr.epoch == 2
    assert first != second and sorted(map(tuple, first)) == sorted(map(tuple, second))


def test_validation_batches_cover_each_pair_once(plugin: ModuleType, corpus: Path) -> None:
    task = make_task(plugin, corpus)
    per_shard = [epoch_ids(task, "valid", 1, num_shards=2, shard_id=r, disable_iterator_cache=True)[1] for r in (0, 1)]
    assert len(per_shard[0]) == len(per_shard[1])
    ids = np.array([i for batches in per_shard for b in batches for i in b])
    assert np.array_equal(np.sort(ids), np.arange(len(open_dataset(corpus, "valid"))))
