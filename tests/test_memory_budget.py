"""benchmarks/memory_budget.py: the budget the larger-than-memory benchmarks run under (skipped where no memory
control group can be made, e.g. without root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BUDGET = ROOT / "benchmarks" / "memory_budget.py"
NO_BUDGET = 3


def budgeted(limit_mb: int, code: str, evict: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(BUDGET), str(limit_mb)]
    if evict is not None:
        command += ["--evict", str(evict)]
    return subprocess.run([*command, "--", sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_command_runs_within_its_budget_and_is_stopped_past_it(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(b"\x01" * (8 << 20))
    fits = budgeted(256, f"print(len(open({str(corpus)!r}, 'rb').read()))", evict=tmp_path)
    if fits.returncode == NO_BUDGET:
        pytest.skip(fits.stderr.strip())
    assert fits.returncode == 0, fits.stderr
    assert fits.stdout.strip() == str(8 << 20)
    too_much = budgeted(96, "x = bytearray(400 << 20); x[::4096] = b'\\x01' * len(x[::4096]); print('survived')")
    assert too_much.returncode != 0 and "survived" not in too_much.stdout  # killed by the budget


def test_it_says_why_when_no_budget_can_be_made(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    sys.path.insert(0, str(BUDGET.parent))
    try:
        import memory_budget
    finally:
        sys.path.remove(str(BUDGET.parent))
    monkeypatch.setattr(memory_budget, "CGROUP", Path("/nonexistent-cgroup"))
    monkeypatch.setattr(memory_budget.shutil, "which", lambda name: None)
    assert memory_budget.main(["64", "--", "true"]) == NO_BUDGET
    assert "cannot limit memory here" in capsys.readouterr().err
