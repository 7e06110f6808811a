"""``examples/train_lm.py`` runs end to end on the bundled sample and its loss falls."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

from arrowmt.format._split import Split

ROOT = Path(__file__).resolve().parents[1]
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) blocks (\d+) tokens (\d+)$", re.MULTILINE)


def test_train_lm_loss_decreases(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = ["--steps", "16", "--max-tokens", "1024", "--out", str(tmp_path / "multi30k-en")]
    command = [sys.executable, "-W", "error", str(ROOT / "examples" / "train_lm.py"), *args]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    steps = [(int(s), float(loss), int(b), int(t)) for s, loss, b, t in STEP_LINE.findall(done.stdout)]
    assert [s[0] for s in steps] == list(range(1, 17)), done.stdout
    losses = [s[1] for s in steps]
    assert all(math.isfinite(x) for x in losses), losses
    assert math.log(5000) < losses[0] < math.log(50000)  # about uniform over the vocabulary at first
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 1.0, losses
    assert all(0 < tokens <= 1024 and blocks * 64 >= tokens for _, _, blocks, tokens in steps)
    train = Split(tmp_path / "multi30k-en", "train")
    assert len(train) == 29000 and train.metadata.languages == {"tokens": "en"}
