"""``examples/train_lm.py`` runs end to end: its loss falls, it validates, checkpoints and resumes exactly,
and its documented commands train on every block (``--max-positions`` follows ``--tokens-per-sample``)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from arrowmt import BlockBatchSampler, Split, open_blocks

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_lm.py"
STEP = re.compile(r"^step (\d+) epoch (\d+) loss (\S+) blocks (\d+) tokens (\d+)$", re.MULTILINE)
VALID = re.compile(r"^(epoch|step) (\d+) valid loss (\S+) perplexity \S+ \((\d+) target tokens\)$", re.MULTILINE)
SETUP = re.compile(r"^(\d+) blocks \((\w+)\), (\d+) batches per epoch, vocabulary (\d+)$", re.MULTILINE)
STEPS, MAX_TOKENS, LINES = 40, 1024, 2000  # 2000 training lines: 25 batches per epoch, so 40 steps cross one
COMMON = ("--steps", str(STEPS), "--max-tokens", str(MAX_TOKENS))


class Run(NamedTuple):
    out: str
    err: str


def run_example(*args: str, cwd: Path, code: int = 0) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-W", "error", str(EXAMPLE), *args]  # a sampler's skip warning would fail the run
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == code, (done.stdout + done.stderr)[-4000:]
    return Run(done.stdout, done.stderr)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    """One uninterrupted run on the first 2000 sample lines (converted into ``corpus``), checkpointing."""
    folder = tmp_path_factory.mktemp("lm")
    args = ("--out", "corpus", "--sample-lines", str(LINES), *COMMON, "--save", "straight.pt")
    return run_example(*args, cwd=folder), folder / "corpus"


def test_loss_decreases_and_every_valid_token_is_scored(straight: tuple[Run, Path]) -> None:
    run, corpus = straight
    steps = [(int(s), int(e), float(loss), int(b), int(t)) for s, e, loss, b, t in STEP.findall(run.out)]
    assert [s[0] for s in steps] == list(range(1, STEPS + 1)), run.out
    (setup,) = SETUP.findall(run.out)
    blocks, per_epoch, vocab = int(setup[0]), int(setup[2]), int(setup[3])
    assert setup[1] == "none" and [s[1] for s in steps] == [1] * per_epoch + [2] * (STEPS - per_epoch)
    assert sum(s[3] for s in steps[:per_epoch]) == blocks  # one epoch: every block once
    losses = [s[2] for s in steps]
    assert all(math.isfinite(x) for x in losses), losses
    assert abs(losses[0] - math.log(vocab)) < 1.0  # about uniform over the vocabulary at first
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 1.0, losses
    assert all(0 < tokens <= MAX_TOKENS and n * 64 >= tokens for _, _, _, n, tokens in steps)
    valid = [(kind, int(n), float(loss), int(t)) for kind, n, loss, t in VALID.findall(run.out)]
    assert [(kind, n) for kind, n, _, _ in valid] == [("epoch", 1), ("step", STEPS)]
    assert valid[1][2] < valid[0][2]
    valid_split = Split(corpus, "valid")  # the converted val captions, every token a target once
    assert {t for *_, t in valid} == {int(valid_split.num_tokens().sum())} and len(valid_split) == 1014
    train = Split(corpus, "train")
    assert len(train) == LINES and train.metadata.languages == {"tokens": "en"}


def training_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if STEP.fullmatch(line) or VALID.fullmatch(line)]


def parameters_sha256(out: str) -> str:
    (digest,) = re.findall(r"^parameters sha256 ([0-9a-f]{64})$", out, re.MULTILINE)
    return digest


def test_resume_continues_exactly(straight: tuple[Run, Path], tmp_path: Path) -> None:
    """Stopped mid-epoch (DataLoader workers prefetching), at an epoch's last batch (run without workers),
    then resumed each time:
    the same steps, validation and final weights as one uninterrupted run."""
    run, corpus = straight
    per_epoch = int(SETUP.findall(run.out)[0][2])
    args = ("--data", str(corpus), *COMMON, "--save", "ckpt.pt", "--num-workers", "2")
    first = run_example(*args, "--stop-after", "10", cwd=tmp_path)
    assert "saved ckpt.pt (step 10; resumes in epoch 1)" in first.out and "stopped after step 10" in first.out
    workers = ("--num-workers", "0")  # another number of workers: load_loader_state
    second = run_example(*args[:-2], *workers, "--resume", "--stop-after", str(per_epoch), cwd=tmp_path)
    assert "resumed from ckpt.pt (epoch 1, step 10)" in second.out
    assert f"saved ckpt.pt (step {per_epoch}; resumes in epoch 1)" in second.out
    assert "epoch 1 valid loss" not in second.out  # stopped on the last batch, before the epoch's end
    third = run_example(*args, "--resume", cwd=tmp_path)
    assert third.out.index("epoch 1 valid loss") < third.out.index(f"step {per_epoch + 1} epoch 2 ")
    assert training_lines(first.out + second.out + third.out) == training_lines(run.out)
    assert parameters_sha256(third.out) == parameters_sha256(run.out)


def test_documented_block_size_trains_on_every_block(tmp_path: Path) -> None:
    """``--break-mode complete --tokens-per-sample 256``: positions follow the block size, no block is skipped."""
    args = ("--out", "full", "--break-mode", "complete", "--tokens-per-sample", "256", "--steps", "2")
    run = run_example(*args, cwd=tmp_path)
    (setup,) = SETUP.findall(run.out)
    ds = open_blocks(tmp_path / "full", "train", 256, "complete")
    sampler = BlockBatchSampler(ds, max_tokens=2048, max_positions=256, num_replicas=1, rank=0)
    assert sampler.plan.dropped == 0 and sampler.plan.indices.size == len(ds) == int(setup[0])
    assert (setup[1], int(setup[2])) == ("complete", len(sampler))
    assert len(Split(tmp_path / "full", "train")) == 29000
    assert "skipped" not in run.err


def test_max_positions_below_the_block_size_is_refused(tmp_path: Path) -> None:
    """The combination that trained on one block of 1500 is refused before anything is converted."""
    args = ("--out", "x", "--tokens-per-sample", "256", "--max-positions", "128")
    run = run_example(*args, cwd=tmp_path, code=2)
    assert "--max-positions 128 is below --tokens-per-sample 256" in run.err
    assert not (tmp_path / "x").exists()
