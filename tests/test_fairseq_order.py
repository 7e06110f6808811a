"""``fairseq-train ... --arrow-order-copy OUT``: from a fairseq command line to the copy it reads in plan order.

Real ``fairseq-train`` runs (the tiny model and the options of ``test_fairseq_native``): the flag writes the
copy with every batching option the command implies (order seed ``--seed`` + 1, fairseq's
``--required-batch-size-multiple`` 8, the model's position limits, skipped long rows) and exits; the same command
on the copy reads its stored plan (no warning of another plan) and trains exactly as on the original.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import arrowmt
from tests.conftest import PLUGIN_DIR
from tests.test_fairseq_native import TINY_MODEL, TRAINING, Side, tool, train


def side(name: str, data: Path, workdir: Path) -> Side:
    return Side(name, [str(data), "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow"], {}, workdir)


def test_the_flag_writes_the_copy_the_same_command_reads_in_plan_order(
    native_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path_factory.mktemp("order-copy")
    copy = work / "copy"
    original = side("original", native_corpus, work / "original")
    made = train(original, "make", "--arrow-order-copy", str(copy))
    assert not made.updates  # nothing trained
    assert f"wrote {copy}, split 'valid' stored in the order this run plans" in made.log
    assert f"the same command with --data {copy} and without --arrow-order-copy" in made.log
    entry = arrowmt.Manifest.load(copy).provenance["ordered_by"]
    fields = {"max_tokens": 1100, "required_batch_size_multiple": 8, "seed": 2, "skip_invalid_size_inputs": True}
    assert entry["split"] == "valid" and fields.items() <= entry["fields"].items(), entry
    assert entry["fields"]["max_source_positions"] == entry["fields"]["max_target_positions"] == 1024

    runs = {s.name: train(s, "epoch", "--max-epoch", "1") for s in (original, side("copy", copy, work / "on-copy"))}
    assert "another plan" not in runs["copy"].log
    assert re.search(r"for epoch 1 \(order seed 2\), plan \S+/valid\.rows$", runs["copy"].log, re.MULTILINE)
    assert runs["copy"].updates == runs["original"].updates and runs["copy"].updates
    assert runs["copy"].records("train_inner") == runs["original"].records("train_inner")


def test_a_run_no_copy_can_serve_is_refused_with_the_reason(
    native_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The reverse direction of the folder: no copy stores its plan; nothing is written."""
    work = tmp_path_factory.mktemp("order-refused")
    copy = work / "copy"
    command = [*tool("fairseq-train"), str(native_corpus), "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow",
               "-s", "en", "-t", "de", *TINY_MODEL, *TRAINING, "--save-dir", str(work / "save"),
               "--arrow-order-copy", str(copy)]  # fmt: skip
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert f"arrowmt: error: arrow_order_copy: cannot make the copy this run reads ({copy}): the run trains" in (
        done.stderr
    )
    assert not copy.exists()
    assert "Traceback" not in done.stderr  # a refusal is its message, not fairseq's frames
