"""examples/train_plain.py runs end to end: training, validation, checkpoints, exact resume, decoding, BLEU."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest

from arrowmt import convert_fairseq, convert_table, open_split
from tests.conftest import fairseq_fixture

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_plain.py"
STEP = re.compile(r"^step (\d+) epoch (\d+) loss (\S+) sentences (\d+) tokens (\d+)$", re.MULTILINE)
VALID = re.compile(r"^epoch (\d+) valid loss (\S+) \((\d+) target tokens\)$", re.MULTILINE)
SETUP = re.compile(r"^(\d+) pairs, (\d+) batches per epoch, (\d+) params, (\d+) positions$", re.MULTILINE)
EPOCHS = 2
MAX_TOKENS = 512
TRAIN_ROWS, VALID_ROWS, TEST_ROWS = 400, 50, 10
COMMON = ("--max-tokens", str(MAX_TOKENS), "--dim", "32", "--num-workers", "2", "--bleu-sentences", "10")


class Run(NamedTuple):
    """The stdout of one finished run of the example."""

    out: str


def read_split(folder: Path, split: str) -> pa.Table:
    with pa.memory_map(str(folder / f"{split}.arrow")) as source:
        return ipc.open_stream(source).read_all()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small de-en corpus whose test split holds the longest rows (the train rows are shorter)."""
    base = tmp_path_factory.mktemp("examples")
    convert_fairseq(fairseq_fixture() / "mmap", base / "full", progress=False)
    train, test = read_split(base / "full", "train"), read_split(base / "full", "test")
    test_lengths = pc.list_value_length(test["target"])
    short = pc.and_(*(pc.less(pc.list_value_length(train[c]), pc.max(test_lengths)) for c in ("source", "target")))
    longest = pc.sort_indices(test_lengths, sort_keys=[("", "descending")])
    tables = {
        "train": train.filter(short).slice(0, TRAIN_ROWS),
        "valid": read_split(base / "full", "valid").slice(0, VALID_ROWS),
        "test": test.take(longest[:TEST_ROWS]),
    }
    convert_table(tables, base / "small", like=base / "full", progress=False)
    return base / "small"


def run_example(*args: str, cwd: Path) -> Run:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-W", "error", str(EXAMPLE), *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return Run(done.stdout)


@pytest.fixture(scope="module")
def straight(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Two epochs without interruption, checkpointing after each."""
    folder = tmp_path_factory.mktemp("straight")
    return run_example("--data", str(corpus), *COMMON, "--epochs", str(EPOCHS), "--save", "ckpt.pt", cwd=folder)


def test_trains_validates_and_sizes_positions_from_every_split(straight: Run, corpus: Path) -> None:
    steps = [(int(s), int(e), float(loss), int(n), int(t)) for s, e, loss, n, t in STEP.findall(straight.out)]
    per_epoch = len(steps) // EPOCHS
    assert [s[0] for s in steps] == list(range(1, len(steps) + 1))
    assert [s[1] for s in steps] == [1] * per_epoch + [2] * per_epoch
    assert sum(s[3] for s in steps) == EPOCHS * TRAIN_ROWS
    assert all(0 < s[4] <= MAX_TOKENS for s in steps)
    losses = [s[2] for s in steps]
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0, losses
    valid = [(int(e), float(loss), int(t)) for e, loss, t in VALID.findall(straight.out)]
    assert [v[0] for v in valid] == [1, 2]
    assert valid[1][1] < valid[0][1]
    assert valid[0][2] == int(open_split(corpus, "valid").lengths("target").sum())
    longest = {name: int(open_split(corpus, name).num_tokens().max()) for name in ("train", "valid", "test")}
    assert longest["test"] > longest["train"]  # the test split decides the positions
    (setup,) = SETUP.findall(straight.out)
    assert int(setup[0]) == TRAIN_ROWS and int(setup[3]) == 2 * max(longest.values()) + 2


def test_decodes_test_sentences_and_scores_bleu(straight: Run) -> None:
    for i in range(3):
        for kind in ("src", "ref", "hyp"):
            assert re.search(rf"^test {i} {kind}: \S", straight.out, re.MULTILINE), kind
    assert "</s>" not in straight.out
    pytest.importorskip("sacrebleu")
    bleu = re.search(r"^BLEU (\S+) on 10 test sentences$", straight.out, re.MULTILINE)
    assert bleu is not None and 0.0 <= float(bleu.group(1)) <= 100.0


def training_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if STEP.fullmatch(line) or VALID.fullmatch(line)]


def parameters_sha256(out: str) -> str:
    (digest,) = re.findall(r"^parameters sha256 ([0-9a-f]{64})$", out, re.MULTILINE)
    return digest


def test_resume_continues_exactly(straight: Run, corpus: Path, tmp_path: Path) -> None:
    """Stopped at an epoch's end, then mid-epoch, resumed each time, the middle run through ``ReadAheadLoader``
    (``--num-workers 0``) between runs with DataLoader workers prefetching: the same steps, losses and final weights
    as one uninterrupted run."""
    per_epoch = len(STEP.findall(straight.out)) // EPOCHS
    middle = per_epoch + per_epoch // 3
    args = ("--data", str(corpus), *COMMON, "--save", "ckpt.pt")
    first = run_example(*args, "--epochs", "1", cwd=tmp_path)
    assert f"saved ckpt.pt (step {per_epoch}; resumes in epoch 2)" in first.out
    middle_args = ("--epochs", str(EPOCHS), "--resume", "--stop-after", str(middle), "--num-workers", "0")
    second = run_example(*args, *middle_args, cwd=tmp_path)
    assert f"resumed from ckpt.pt (epoch 2, step {per_epoch})" in second.out
    assert f"saved ckpt.pt (step {middle}; resumes in epoch 2)" in second.out
    third = run_example(*args, "--epochs", str(EPOCHS), "--resume", cwd=tmp_path)
    assert f"resumed from ckpt.pt (epoch 2, step {middle})" in third.out
    assert training_lines(first.out + second.out + third.out) == training_lines(straight.out)
    assert parameters_sha256(third.out) == parameters_sha256(straight.out)


def test_batch_shapes_pad_every_batch_to_few_shapes(corpus: Path, tmp_path: Path) -> None:
    """``--batch-shapes 3``: every batch of the epoch padded to one of at most 3 shapes; the rows added to fill a
    shape's last batch count neither as sentences nor as tokens (the epoch's sentences are the corpus's)."""
    run = run_example("--data", str(corpus), *COMMON, "--epochs", "1", "--batch-shapes", "3", cwd=tmp_path)
    shapes = re.search(r"^epoch 1 batch shapes (\d+)$", run.out, re.MULTILINE)
    assert shapes is not None and 1 <= int(shapes.group(1)) <= 3
    steps = STEP.findall(run.out)
    assert sum(int(n) for _, _, _, n, _ in steps) == TRAIN_ROWS
    assert all(math.isfinite(float(loss)) for _, _, loss, _, _ in steps)
