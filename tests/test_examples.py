"""The examples run end to end on the converted Multi30k fixture."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from arrowmt.converters._fairseq_folder import convert_fairseq

from tests.conftest import FAIRSEQ_FIXTURE

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) sentences (\d+) tokens (\d+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arrow") / "multi30k"
    convert_fairseq(FAIRSEQ_FIXTURE / "mmap", out, progress=False)
    return out


def run_example(name: str, *args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-W", "error", str(ROOT / "examples" / name), *args]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return done.stdout


def test_train_plain_loss_decreases(corpus: Path, tmp_path: Path) -> None:
    out = run_example("train_plain.py", "--data", str(corpus), "--steps", "20", "--max-tokens", "2048", cwd=tmp_path)
    steps = [(int(s), float(loss), int(n), int(t)) for s, loss, n, t in STEP_LINE.findall(out)]
    assert [s[0] for s in steps] == list(range(1, 21)), out
    losses = [s[1] for s in steps]
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0, losses
    assert all(0 < tokens <= 2048 for *_, tokens in steps)
