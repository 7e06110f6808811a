"""``TokenBatchSampler`` under a real ``torchrun`` (two CPU processes, gloo): sharding and resume."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arrowmt import convert_fairseq
from tests.conftest import fairseq_fixture

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("torchrun_worker.py")
WORLD = 2
SAVE_AFTER = 5
MAX_TOKENS = 2000  # 223 batches: an odd count, so rank 1 is padded with one batch


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("arrow") / "multi30k"
    convert_fairseq(fairseq_fixture() / "mmap", out, progress=False)
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(out: Path, *args: str) -> list[dict[str, Any]]:
    """Launch the worker on WORLD local processes; each rank's report."""
    launcher = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=1", f"--nproc-per-node={WORLD}",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [*launcher, str(WORKER), "--out", str(out), *args]
    done = subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


@pytest.fixture(scope="module")
def first_run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("torchrun") / "first"
    common = worker_options(corpus, out)
    return out, torchrun(out, *common, "--epoch", "2", "--save-after", str(SAVE_AFTER))


def worker_options(corpus: Path, out: Path) -> tuple[str, ...]:
    return ("--data", str(corpus), "--cache", str(out.parent / "plans"), "--max-tokens", str(MAX_TOKENS))


def padding_positions(plan_batches: int, rank: int, length: int) -> list[int]:
    """Positions in ``rank``'s list that wrap around to the start of the epoch order (``shard_batches``)."""
    return [k for k in range(length) if rank + WORLD * k >= plan_batches]


def test_ranks_share_the_epoch(first_run: tuple[Path, list[dict[str, Any]]], corpus: Path) -> None:
    _, reports = first_run
    assert [(r["rank"], r["world"], r["backend"]) for r in reports] == [(0, WORLD, "gloo"), (1, WORLD, "gloo")]
    n = reports[0]["plan_batches"]
    lengths = [len(r["batches"]) for r in reports]
    assert lengths == [-(-n // WORLD)] * WORLD  # equal counts, ceil(n / world)
    assert reports[0]["total_batches"] == sum(lengths)  # all_reduce over the group
    assert reports[0]["total_samples"] == sum(len(b) for r in reports for b in r["batches"])
    real: list[list[int]] = []
    padding = 0
    for r in reports:
        padded = padding_positions(n, r["rank"], len(r["batches"]))
        padding += len(padded)
        for k in padded:  # a padding batch repeats a real batch of this epoch (rank 0's first)
            assert r["batches"][k] == reports[0]["batches"][0]
        real.extend(b for k, b in enumerate(r["batches"]) if k not in padded)
    assert len(real) == n and padding == WORLD * lengths[0] - n == 1
    ids = [i for b in real for i in b]
    rows = json.loads((corpus / "arrowmt.json").read_text())["files"]["train"]["rows"]
    assert reports[0]["plan_dropped"] == 0
    assert sorted(ids) == list(range(rows))  # disjoint, and every pair exactly once


def test_resume_continues_each_rank(first_run: tuple[Path, list[dict[str, Any]]], corpus: Path) -> None:
    out, reports = first_run
    assert all(r["state"]["batches_done"] == SAVE_AFTER and r["state"]["epoch"] == 2 for r in reports)
    common = worker_options(corpus, out)
    resumed = torchrun(out.parent / "resumed", *common, "--resume", str(out))
    for before, after in zip(reports, resumed, strict=True):
        assert after["rank"] == before["rank"]
        assert after["batches"] == before["batches"][SAVE_AFTER:]
