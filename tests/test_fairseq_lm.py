"""The ``language_modeling_arrow`` plugin task against native ``--task language_modeling`` (the real fairseq).

Both read the same Multi30k English documents: native fairseq the data-bin written by
``fairseq-preprocess --only-source``, the plugin its arrowmt conversion. ``fairseq-train``
with a tiny ``transformer_lm`` (dropout 0, CPU, same seed) must log the same per-update
loss, wpb and bsz; in-process, the two tasks' batch iterators must give the same tensors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from arrowmt import InvalidParameterError
from tests.conftest import PLUGIN_DIR, import_fairseq
from tests.lm_data import fairseq_mono

TOKENS_PER_SAMPLE = 64
TINY_LM = [
    "--arch", "transformer_lm", "--decoder-layers", "1", "--decoder-embed-dim", "32",
    "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2",
    "--dropout", "0", "--attention-dropout", "0", "--tokens-per-sample", str(TOKENS_PER_SAMPLE),
    "--max-tokens", "1024", "--optimizer", "adam", "--lr", "5e-3", "--lr-scheduler", "inverse_sqrt",
    "--warmup-updates", "2", "--criterion", "cross_entropy", "--log-format", "json", "--log-interval", "1",
    "--max-update", "4", "--cpu", "--num-workers", "0", "--seed", "3", "--no-save", "--disable-validation",
]  # fmt: skip
# fairseq 0.12's TokenBlockDataset (eos mode) calls np.compat.long, which numpy 2 removed: the native
# run gets that alias back; nothing else in fairseq changes.
NATIVE_TRAIN = (
    "import sys, types, numpy; numpy.compat = types.SimpleNamespace(long=int); "
    "from fairseq_cli.train import cli_main; sys.argv[0] = 'fairseq-train'; cli_main()"
)
RECORD_KEYS = ("num_updates", "loss", "wpb", "bsz")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(fairseq data-bin, arrowmt folder) of the Multi30k English side with document breaks."""
    return fairseq_mono(tmp_path_factory.mktemp("lm"))


def train_command(data: Path, mode: str, native: bool) -> list[str]:
    task = (
        ["--task", "language_modeling"]
        if native
        else ["--user-dir", str(PLUGIN_DIR), "--task", "language_modeling_arrow"]
    )
    script = Path(sys.executable).with_name("fairseq-train")
    launcher = [sys.executable, "-c", NATIVE_TRAIN] if native else [str(script)]
    return [*launcher, str(data), *task, "--sample-break-mode", mode, *TINY_LM]


def run_both(corpus: tuple[Path, Path], mode: str, workdir: Path) -> tuple[str, str]:
    """(native log, plugin log) of two fairseq-train runs started side by side."""
    import_fairseq()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = []
    for data, native in ((corpus[0], True), (corpus[1], False)):
        cwd = workdir / ("native" if native else "plugin")
        cwd.mkdir()
        command = train_command(data, mode, native)
        runs.append(
            subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
    logs = []
    for run in runs:
        out, _ = run.communicate(timeout=240)
        assert run.returncode == 0, out[-4000:]
        logs.append(out)
    return logs[0], logs[1]


def updates(log: str) -> list[dict[str, str]]:
    marker = "| train_inner | "
    records = [json.loads(line.split(marker, 1)[1]) for line in log.splitlines() if marker in line]
    return [{key: r[key] for key in RECORD_KEYS} for r in records]


@pytest.mark.parametrize("mode", ["none", "complete", "eos"])
def test_fairseq_train_logs_the_native_updates(mode: str, corpus: tuple[Path, Path], tmp_path: Path) -> None:
    native, plugin = run_both(corpus, mode, tmp_path)
    assert "task: LanguageModelingArrowTask" in plugin and "planned by arrowmt" in plugin
    expected = updates(native)
    assert [int(r["num_updates"]) for r in expected] == [1, 2, 3, 4]
    assert updates(plugin) == expected


def block_copy(corpus: tuple[Path, Path], folder: Path, mode: str) -> Path:
    """The arrowmt corpus with its train blocks stored in the plan order ``fairseq-train`` asks for (TINY_LM:
    epoch 1 is planned under ``--seed`` + 1)."""
    import arrowmt

    options = {"max_tokens": 1024, "max_positions": TOKENS_PER_SAMPLE, "required_batch_size_multiple": 8}
    arrowmt.order_blocks(corpus[1], folder, tokens_per_sample=TOKENS_PER_SAMPLE, break_mode=mode, seed=4,
                         skip_invalid_size_inputs=True, progress=False, **options)  # fmt: skip
    return folder


def test_fairseq_train_on_blocks_in_plan_order_logs_the_native_updates(
    corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    copy = block_copy(corpus, tmp_path / "copy", "none")
    native, plugin = run_both((corpus[0], copy), "none", tmp_path)
    assert "planned by arrowmt" in plugin and "another plan" not in plugin  # the plan the copy is stored by
    expected = updates(native)
    assert [int(r["num_updates"]) for r in expected] == [1, 2, 3, 4]
    assert updates(plugin) == expected


# ---------------------------------------------------------------- the tasks in-process


@pytest.fixture(scope="module")
def fairseq_tasks() -> Iterator[types.SimpleNamespace]:
    import_fairseq()
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        patch.setattr(np, "compat", types.SimpleNamespace(long=int), raising=False)
        from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

        import arrowmt.integrations.fairseq_plugin as plugin

        yield types.SimpleNamespace(plugin=plugin, config=LanguageModelingConfig, native=LanguageModelingTask)


RESOLVED = {
    "seed": 1,
    "batch_size": None,
    "batch_size_valid": None,
    "dataset_impl": None,
    "data_buffer_size": 0,
    "tpu": False,
    "use_plasma_view": False,
    "plasma_path": None,
}


def make_task(tasks: types.SimpleNamespace, data: Path, native: bool, **options: Any) -> Any:
    options = {"tokens_per_sample": TOKENS_PER_SAMPLE, **RESOLVED, **options}
    if native:
        return tasks.native.setup_task(tasks.config(data=str(data), **options))
    cls = tasks.plugin.LanguageModelingArrowTask
    return cls.setup_task(tasks.plugin._lm_config.LanguageModelingArrowConfig(data=str(data), **options))


def epoch_batches(task: Any, split: str, epoch: int = 1, count: int = 12) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        task.load_dataset(split)
        itr = task.get_batch_iterator(
            task.dataset(split),
            max_tokens=1024,
            max_positions=TOKENS_PER_SAMPLE,
            ignore_invalid_inputs=True,
            required_batch_size_multiple=8,
            seed=1,
            epoch=epoch,
        )
        batches = itr.next_epoch_itr(shuffle=True)
        return [next(batches) for _ in range(count)]


def assert_same_batches(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected, strict=True):
        assert (mine["nsentences"], mine["ntokens"]) == (theirs["nsentences"], theirs["ntokens"])
        pairs = [(mine["id"], theirs["id"])]
        pairs += [(mine["net_input"][k], theirs["net_input"][k]) for k in ("src_tokens", "src_lengths")]
        targets = mine["target"], theirs["target"]
        pairs += list(zip(*targets, strict=True)) if isinstance(targets[1], list) else [targets]
        for a, b in pairs:
            assert a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("complete_doc", {"add_bos_token": True}),
        ("none", {"pad_to_fixed_length": True, "output_dictionary_size": 300}),
        ("complete", {"past_target": True, "self_target": True, "future_target": True}),
    ],
)
def test_task_batches_equal_native(
    mode: str, options: dict[str, Any], corpus: tuple[Path, Path], fairseq_tasks: types.SimpleNamespace
) -> None:
    native = make_task(fairseq_tasks, corpus[0], True, sample_break_mode=mode, **options)
    plugin = make_task(fairseq_tasks, corpus[1], False, sample_break_mode=mode, **options)
    assert plugin.targets == native.targets
    for split, epoch in (("train", 1), ("train", 2), ("valid", 1)):
        assert_same_batches(epoch_batches(plugin, split, epoch), epoch_batches(native, split, epoch))


@pytest.mark.parametrize("mode", ["none", "complete_doc"])
def test_task_on_blocks_in_plan_order_equals_native(
    mode: str, corpus: tuple[Path, Path], tmp_path: Path, fairseq_tasks: types.SimpleNamespace
) -> None:
    native = make_task(fairseq_tasks, corpus[0], True, sample_break_mode=mode)
    plugin = make_task(fairseq_tasks, block_copy(corpus, tmp_path / "copy", mode), False, sample_break_mode=mode)
    for split, epoch in (("train", 1), ("train", 2), ("valid", 1)):
        assert_same_batches(epoch_batches(plugin, split, epoch), epoch_batches(native, split, epoch))


def test_task_reads_both_dictionary_layouts(corpus: tuple[Path, Path], tmp_path: Path, fairseq_tasks: Any) -> None:
    from arrowmt import convert_fairseq
    from tests.lm_data import preprocess_mono

    task = make_task(fairseq_tasks, corpus[1], False, sample_break_mode="none")
    assert len(task.dictionary) == len(make_task(fairseq_tasks, corpus[0], True).dictionary)
    with_lang = preprocess_mono(corpus[0].parent / "text", tmp_path / "bin", with_lang=True)
    convert_fairseq(with_lang, tmp_path / "arrow", progress=False)
    other = make_task(fairseq_tasks, tmp_path / "arrow", False, sample_break_mode="eos")
    assert other.dictionary.symbols == task.dictionary.symbols
    assert_same_batches(
        epoch_batches(other, "valid"),
        epoch_batches(make_task(fairseq_tasks, corpus[0], True, sample_break_mode="eos"), "valid"),
    )
    with pytest.raises(InvalidParameterError, match="shorten_method: not supported"):
        make_task(fairseq_tasks, corpus[1], False, shorten_method="truncate").load_dataset("valid")
