"""The plugin against native fairseq: real ``fairseq-train`` runs, update for update.

Every test trains twice with the same seed: natively (``--task translation`` on
a copy of the real ``fairseq-preprocess`` output) and with the plugin (``--task
translation_arrow`` on the arrowmt conversion of that output), and requires the
same per-update statistics (``loss``, ``nll_loss``, ``wpb``, ``bsz``, ``gnorm``,
``lr``, ...) and the same validation statistics: the same batches, in the same
order, on every rank. Only timings may differ.

The runs train on the ``valid`` split (1,014 pairs: 19 batches of at most
1,100 tokens, so epoch 2 starts after update 19) and validate on ``test``; the
model is a tiny transformer without dropout on the CPU. The runs are shared by
the tests through module fixtures.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PLUGIN_DIR, TINY_TRANSFORMER, import_fairseq

MAX_TOKENS = 1100  # 19 training batches per epoch: odd, so a second rank gets an empty batch
EPOCH_UPDATES = 19
VALID_SUBSET = "test"  # fairseq logs validation statistics under the subset's name
TINY_MODEL = [*TINY_TRANSFORMER, "--dropout", "0"]
TRAINING = [
    "--train-subset", "valid", "--valid-subset", VALID_SUBSET,
    "--max-tokens", str(MAX_TOKENS),
    "--optimizer", "adam", "--lr", "5e-3",
    "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--log-format", "json", "--log-interval", "1",
    "--cpu", "--num-workers", "0", "--seed", "1", "--no-epoch-checkpoints",
]  # fmt: skip
GENERATION = [
    "--gen-subset", "test", "--beam", "1", "--max-len-a", "0", "--max-len-b", "12",
    "--max-tokens", "4000", "--cpu", "--num-workers", "0", "--seed", "1",
]  # fmt: skip
DISTRIBUTED = [
    "--distributed-init-method", "env://", "--distributed-no-spawn",
    "--distributed-backend", "gloo", "--ddp-backend", "legacy_ddp",
]  # fmt: skip
TIMING_KEYS = ("wps", "ups", "wall", "train_wall")
GENERATED = ("S-", "T-", "H-", "D-", "P-")  # fairseq-generate's per-sentence lines
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class Run:
    """One fairseq run: its whole log, and the per-update and validation statistics it logged."""

    log: str

    def records(self, tag: str) -> list[dict[str, Any]]:
        """The JSON statistics logged under ``tag`` (``train_inner``, ``train``, the validation subset), no timings."""
        marker = f"| {tag} | "
        found = [json.loads(line.split(marker, 1)[1]) for line in self.log.splitlines() if marker in line]
        return [{k: v for k, v in r.items() if not k.endswith(TIMING_KEYS)} for r in found]

    @property
    def updates(self) -> list[int]:
        return [int(r["num_updates"]) for r in self.records("train_inner")]


@dataclass(frozen=True)
class Side:
    """How one side runs fairseq: its data and task arguments, environment and working folder."""

    name: str
    task_args: list[str]
    env: dict[str, str]
    workdir: Path


def tool(name: str) -> list[str]:
    """The command of an installed console script next to this interpreter (else its module)."""
    script = Path(sys.executable).with_name(name)
    modules = {
        "fairseq-train": "fairseq_cli.train",
        "fairseq-generate": "fairseq_cli.generate",
        "torchrun": "torch.distributed.run",
    }
    return [str(script)] if script.exists() else [sys.executable, "-m", modules[name]]


def rank_script(folder: Path) -> Path:
    """``rank.sh``: one rank of a ``torchrun --no-python`` job runs its arguments with torchrun's rank and world."""
    path = folder / "rank.sh"
    world = '--distributed-world-size "$WORLD_SIZE" --distributed-rank "$RANK"'
    path.write_text(f'#!/bin/sh\nexec "$@" {world} {" ".join(DISTRIBUTED)}\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_fairseq(side: Side, name: str, command: list[str]) -> Run:
    """Run ``command`` in ``<workdir>/name`` (a fresh folder), its log kept there as ``fairseq.log``."""
    import_fairseq()
    folder = side.workdir / name
    folder.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", **side.env}  # a tiny model: extra threads only contend
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    log = done.stdout + done.stderr
    (folder / "fairseq.log").write_text(log)
    assert done.returncode == 0, log[-4000:]
    return Run(log)


def train(side: Side, name: str, *extra: str, save: str = "", processes: int = 1) -> Run:
    """Real ``fairseq-train`` (under ``torchrun`` for several processes), checkpoints in ``<workdir>/save``.

    ``save`` defaults to ``name``; runs that share it resume from each other's last checkpoint.
    """
    checkpoints = ["--save-dir", str(side.workdir / (save or name))]
    command = [*tool("fairseq-train"), *side.task_args, *TINY_MODEL, *TRAINING, *checkpoints, *extra]
    if processes > 1:
        launcher = [*tool("torchrun"), "--standalone", f"--nproc-per-node={processes}", "--no-python"]
        command = [*launcher, str(rank_script(side.workdir)), *command]
    return run_fairseq(side, name, command)


def each_side(sides: list[Side], name: str, *extra: str, **kw: Any) -> dict[str, Run]:
    """The same training run on every side."""
    return {side.name: train(side, name, *extra, **kw) for side in sides}


@pytest.fixture(scope="module")
def sides(native_data_bin: Path, native_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Side]:
    """Native fairseq and the plugin.

    fairseq 0.12 resumes its own checkpoints only with torch's weights-only loading off
    (the default since torch 2.6); the plugin allowlists what they hold, so it runs without.
    """
    native = Side(
        "native",
        [str(native_data_bin), "--task", "translation"],
        {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"},
        tmp_path_factory.mktemp("native-runs"),
    )
    plugin = Side(
        "arrowmt",
        [str(native_corpus), "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow"],
        {},
        tmp_path_factory.mktemp("arrowmt-runs"),
    )
    return [native, plugin]


@pytest.fixture(scope="module")
def first_runs(sides: list[Side]) -> dict[str, Run]:
    """24 updates (into epoch 2), checkpoints saved at the end of epoch 1 and at update 24."""
    return each_side(sides, "first", "--max-update", "24", save="ckpt")


@pytest.fixture(scope="module")
def resumed_runs(sides: list[Side], first_runs: dict[str, Run]) -> dict[str, Run]:
    """From the update-24 checkpoint (epoch 2, 5 batches in) to update 30."""
    return each_side(sides, "resumed", "--max-update", "30", save="ckpt")


def assert_same_training(runs: dict[str, Run], updates: list[int]) -> None:
    native, plugin = runs["native"], runs["arrowmt"]
    assert native.updates == updates and plugin.updates == updates
    for tag in ("train_inner", VALID_SUBSET, "train"):
        assert plugin.records(tag) == native.records(tag), tag
    assert native.records(VALID_SUBSET), "no validation ran"


def test_plugin_trains_as_native_fairseq(first_runs: dict[str, Run]) -> None:
    assert_same_training(first_runs, list(range(1, 25)))
    plugin = first_runs["arrowmt"]
    assert "task: TranslationArrowTask" in plugin.log and "batches planned by arrowmt" in plugin.log
    epochs = plugin.records("train")  # a summary at the end of epoch 1 and at the stop in epoch 2
    assert [(r["epoch"], int(r["train_num_updates"])) for r in epochs] == [(1, EPOCH_UPDATES), (2, 24)]
    losses = [float(r["loss"]) for r in plugin.records("train_inner")]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0] - 1.0, losses
    assert all(float(r["wpb"]) <= MAX_TOKENS for r in plugin.records("train_inner"))


def test_resume_in_epoch_2_as_native_fairseq(resumed_runs: dict[str, Run]) -> None:
    for run in resumed_runs.values():
        assert "Loaded checkpoint" in run.log and "(epoch 2 @ 24 updates)" in run.log
    assert_same_training(resumed_runs, list(range(25, 31)))


def test_generate_as_native_fairseq(sides: list[Side], first_runs: dict[str, Run]) -> None:
    """``fairseq-generate`` with each side's update-24 checkpoint translates the test split identically."""
    outputs = {}
    for side in sides:
        checkpoint = ["--path", str(side.workdir / "ckpt" / "checkpoint_last.pt")]
        run = run_fairseq(side, "generate", [*tool("fairseq-generate"), *side.task_args, *checkpoint, *GENERATION])
        outputs[side.name] = [line for line in run.log.splitlines() if line.startswith(GENERATED)]
    assert len(outputs["native"]) == 5 * 1000
    assert outputs["arrowmt"] == outputs["native"]


def test_reverse_direction_as_native_fairseq(sides: list[Side]) -> None:
    """``-s en -t de`` trains en->de from the de-en files on both sides."""
    runs = each_side(sides, "reverse", "-s", "en", "-t", "de", "--max-update", "6", "--no-save")
    assert_same_training(runs, list(range(1, 7)))
    assert "valid en-de 1014 examples" in runs["native"].log
    assert "(en-de, reverse direction of the folder)" in runs["arrowmt"].log


def test_two_processes_as_native_fairseq(sides: list[Side]) -> None:
    """torchrun with 2 CPU processes: 10 updates per epoch, rank 1's last one an empty batch."""
    runs = each_side(sides, "two", "--max-update", "12", "--no-save", processes=2)
    assert_same_training(runs, list(range(1, 13)))
    for run in runs.values():
        assert "training on 2 devices" in run.log
        assert int(run.records("train")[0]["train_num_updates"]) == -(-EPOCH_UPDATES // 2)


def test_batch_shapes_train_with_fairseq(sides: list[Side]) -> None:
    """``--arrow-batch-shapes 3`` (what replaces ``--num-batch-buckets``, which the plugin refuses): real
    fairseq-train over a whole epoch and into the next, every batch padded to one of at most 3 shapes, the loss
    finite; native fairseq's own bucketing is the benchmark's comparison (benchmarks/bench_shapes.py)."""
    run = train(sides[1], "shapes", "--arrow-batch-shapes", "3", "--max-update", str(EPOCH_UPDATES + 2), "--no-save")
    assert "batches padded to" in run.log
    shapes = int(run.log.split("batches padded to ", 1)[1].split(" shapes", 1)[0])
    assert 1 <= shapes <= 3
    losses = [float(r["loss"]) for r in run.records("train_inner")]
    assert len(losses) >= EPOCH_UPDATES and all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]
