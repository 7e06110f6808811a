"""``--arrow-segmentation sampled`` in real ``fairseq-train`` runs (issues 39, 48): each epoch reads every training
pair in a segmentation drawn afresh, batched by that epoch's lengths, and a run resumed in its second epoch continues
exactly as the uninterrupted run; ``fairseq-generate`` names the flag a sampled model needs.

The corpus is the bundled sample's validation text (1,014 pairs) segmented by a small sentencepiece model trained
on it, with its words' lattices; the model is the native tests' tiny transformer on the CPU.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from arrowmt import add_sampled_segmentations, convert_text, open_dataset
from tests.conftest import MULTI30K, PLUGIN_DIR, val_sentencepiece
from tests.test_fairseq_native import GENERATION, RUN_TIMEOUT_S, Run, Side, run_fairseq, tool, train

spm = pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def side(tmp_path_factory: pytest.TempPathFactory) -> Side:
    folder = tmp_path_factory.mktemp("sampled-fairseq")
    model = val_sentencepiece(folder, 1000)
    corpus = folder / "corpus"
    convert_text(str(MULTI30K / "val"), corpus, src_lang="de", tgt_lang="en", validpref=str(MULTI30K / "val"),
                 testpref=str(MULTI30K / "test"), spm_model=str(model), progress=False)  # fmt: skip
    add_sampled_segmentations(corpus, model, alpha=0.1, progress=False)
    task = [
        str(corpus),
        "--user-dir",
        str(PLUGIN_DIR),
        "--task",
        "translation_arrow",
        "--arrow-segmentation",
        "sampled",
    ]
    return Side("sampled", task, {}, folder / "runs")


@pytest.fixture(scope="module")
def two_epochs(side: Side) -> Run:
    return train(side, "straight", "--max-epoch", "2")


def epoch_updates(run: Run) -> list[int]:
    return [int(r["train_num_updates"]) for r in run.records("train")]


def test_each_epoch_reads_other_samples_with_its_own_batches(side: Side, two_epochs: Run) -> None:
    assert "batches of sampled segmentations planned for epoch 1" in two_epochs.log
    assert "batches of sampled segmentations planned for epoch 2" in two_epochs.log
    epochs = two_epochs.records("train")
    assert [r["epoch"] for r in epochs] == [1, 2]
    assert epochs[0]["train_wpb"] != epochs[1]["train_wpb"]  # the pieces read change with the epoch
    ds = open_dataset(Path(side.task_args[0]), "valid", segmentation="sampled")
    assert (
        ds.dictionary("source").symbols[: len(ds.corpus.dictionary("source"))] == ds.corpus.dictionary("source").symbols
    )  # the task's dictionary extends the corpus's
    assert all(float(r["wpb"]) <= 1100 for r in two_epochs.records("train_inner"))
    assert two_epochs.records("test"), "no validation ran"
    assert "pin_memory" not in two_epochs.log  # fairseq's DataLoader pins; on a CPU torch's warning is not shown


def test_a_run_resumed_in_epoch_2_continues_exactly(side: Side, two_epochs: Run, tmp_path: Path) -> None:
    """Stopped in epoch 2 and resumed, with the epochs' copies in --arrow-plan-cache-dir (the samples are the
    uninterrupted run's, whose copies went to the corpus's own cache)."""
    first = epoch_updates(two_epochs)[0]
    stop = first + 3
    cache = ("--arrow-plan-cache-dir", str(tmp_path / "plans"))
    train(side, "until", "--max-update", str(stop), *cache, save="ckpt")
    resumed = train(side, "resumed", "--max-update", str(first + 8), *cache, save="ckpt")
    assert [p.name[:8] for p in (tmp_path / "plans").iterdir() if p.is_dir()] == ["sampled-"]
    assert f"(epoch 2 @ {stop} updates)" in resumed.log
    straight = [r for r in two_epochs.records("train_inner") if stop < int(r["num_updates"]) <= first + 8]
    assert resumed.records("train_inner") == straight and len(straight) == 5


def test_generate_names_the_flag_a_sampled_model_needs(side: Side, two_epochs: Run) -> None:
    """A model trained on samples has the samples' (extended) dictionaries: ``fairseq-generate`` without
    ``--arrow-segmentation sampled`` is refused naming the flag (not fairseq's size mismatch of a state_dict), and
    with it translates."""
    checkpoint = ["--path", str(side.workdir / "straight" / "checkpoint_last.pt")]
    fixed_task = side.task_args[:-2]  # the same task, without --arrow-segmentation sampled
    command = [*tool("fairseq-generate"), *fixed_task, *checkpoint, *GENERATION]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=side.workdir)
    assert done.returncode != 0
    assert "trained with --arrow-segmentation sampled" in done.stderr and "size mismatch" not in done.stderr
    run = run_fairseq(side, "generate", [*tool("fairseq-generate"), *side.task_args, *checkpoint, *GENERATION])
    assert any(line.startswith("H-") for line in run.log.splitlines())
