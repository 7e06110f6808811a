"""``translation_multi_simple_epoch_arrow`` against fairseq's own ``translation_multi_simple_epoch``.

A 3-pair Multi30k data-bin (de-en, fr-en, cs-en; 1000, 500 and 200 pairs of
test_2016_flickr, one shared dictionary) is built with the real fairseq-preprocess
(fairseq's multilingual recipe), converted with ``arrowmt convert fairseq``, and
both tasks, same options and seed, must give the same batches (in-process) and log
the same per-update loss, wpb and bsz under ``fairseq-train``.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from arrowmt import InvalidParameterError, build_view, convert_fairseq
from arrowmt.testing import resample_counts, temperature_ratios
from tests.conftest import PLUGIN_DIR, TINY_TRANSFORMER, fairseq_preprocess, import_fairseq, multi30k, quiet

TASK = "translation_multi_simple_epoch_arrow"
SIZES = {"de": 1000, "fr": 500, "cs": 200}
VALID = 60
LANG_PAIRS = "de-en,fr-en,cs-en"
MAX_TOKENS = 1024
TINY_MODEL = TINY_TRANSFORMER
TRAINING = [
    "--max-tokens", str(MAX_TOKENS),
    "--optimizer", "adam", "--lr", "5e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4",
    "--criterion", "label_smoothed_cross_entropy", "--log-format", "json", "--log-interval", "1",
    "--cpu", "--num-workers", "0", "--seed", "1",
]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The native data-bin (``bin``), its arrowmt conversion (``arrow``) and the ``--lang-dict`` file."""
    import_fairseq()
    root = tmp_path_factory.mktemp("multi30k-3pairs")
    text = root / "text"
    text.mkdir()
    lines = {}
    for lang in ("cs", "de", "en", "fr"):
        with gzip.open(multi30k("test", lang), "rt", encoding="utf-8") as handle:
            lines[lang] = [line.lower() for line in handle.read().splitlines()]
    (text / "all").write_text("".join(f"{x}\n" for lang in ("de", "fr", "cs", "en") for x in lines[lang]))
    runs = [f"--only-source --trainpref {text / 'all'} --destdir {root / 'dict'} --workers 1"]
    for src, n in SIZES.items():
        for lang in (src, "en"):
            (text / f"train.{src}-en.{lang}").write_text("".join(f"{x}\n" for x in lines[lang][:n]))
            (text / f"valid.{src}-en.{lang}").write_text("".join(f"{x}\n" for x in lines[lang][-VALID:]))
        runs.append(
            f"--source-lang {src} --target-lang en --trainpref {text}/train.{src}-en --validpref {text}/valid.{src}-en "
            f"--srcdict {root}/dict/dict.txt --tgtdict {root}/dict/dict.txt --destdir {root}/bin --workers 1"
        )
    fairseq_preprocess(*(run.split() for run in runs))
    convert_fairseq(root / "bin", root / "arrow", progress=False)
    (root / "langs.txt").write_text("cs\nde\nen\nfr\n")
    return {"bin": root / "bin", "arrow": root / "arrow", "langs": root / "langs.txt", "root": root}


def task_options(data: dict[str, Path], *extra: str) -> list[str]:
    return ["--lang-pairs", LANG_PAIRS, "--lang-dict", str(data["langs"]), *extra]


# ---------------------------------------------------------------- in process: the same batches


def make_task(data: dict[str, Path], native: bool, options: list[str]) -> Any:
    from fairseq import options as fairseq_options
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    if native:
        argv = [str(data["bin"]), "--task", "translation_multi_simple_epoch"]
    else:
        argv = [str(data["arrow"]), "--task", TASK, "--user-dir", str(PLUGIN_DIR)]
        argv += ["--arrow-plan-cache-dir", str(data["root"] / "cache")]
    with quiet():
        parser = fairseq_options.get_training_parser()
        args = fairseq_options.parse_args_and_arch(parser, [*argv, *options, "--arch", "transformer", "--cpu"])
        return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def epoch_batches(task: Any, split: str, epoch: int, **kw: Any) -> list[dict[str, Any]]:
    with quiet():
        if split not in task.datasets:
            task.load_dataset(split, epoch=epoch)
        itr = task.get_batch_iterator(
            task.dataset(split), max_tokens=MAX_TOKENS, max_positions=(1024, 1024), seed=1, epoch=epoch, **kw
        )
        return list(itr.next_epoch_itr(shuffle=split == "train"))


def assert_same_batches(native: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    assert len(native) == len(ours) > 0
    for theirs, mine in zip(native, ours, strict=True):
        if not theirs:  # a shard's padding: fairseq's empty batch
            assert mine == theirs
            continue
        assert (theirs["nsentences"], theirs["ntokens"]) == (mine["nsentences"], mine["ntokens"])
        for key in ("src_tokens", "src_lengths", "prev_output_tokens"):
            assert torch.equal(theirs["net_input"][key], mine["net_input"][key]), key
        assert torch.equal(theirs["target"], mine["target"])


SAMPLING = {
    "temperature": ["--sampling-method", "temperature", "--sampling-temperature", "2"],
    "concat": [],
    "uniform": ["--sampling-method", "uniform", "--virtual-data-size", "1500"],
    "weights": ["--sampling-weights", "{'main:de-en': 0.2, 'main:fr-en': 0.3, 'main:cs-en': 0.5}"],
}
LANGTOKS = {
    "src+decoder": ["--encoder-langtok", "src", "--decoder-langtok"],
    "tgt": ["--encoder-langtok", "tgt"],
    "none": [],
}


@pytest.mark.parametrize(
    ("sampling", "langtoks"), [*((s, "src+decoder") for s in SAMPLING), ("temperature", "tgt"), ("temperature", "none")]
)
def test_training_batches_equal_fairseqs(data: dict[str, Path], sampling: str, langtoks: str) -> None:
    options = task_options(data, *SAMPLING[sampling], *LANGTOKS[langtoks])
    native, ours = make_task(data, True, options), make_task(data, False, options)
    assert len(native.source_dictionary) == len(ours.source_dictionary)
    for epoch in (1, 2):
        assert_same_batches(epoch_batches(native, "train", epoch), epoch_batches(ours, "train", epoch))


def test_validation_and_sharded_batches_equal_fairseqs(data: dict[str, Path]) -> None:
    options = task_options(data, *SAMPLING["temperature"], *LANGTOKS["src+decoder"])
    native, ours = make_task(data, True, options), make_task(data, False, options)
    assert_same_batches(epoch_batches(native, "valid", 1), epoch_batches(ours, "valid", 1))
    for shard in (0, 1):
        shards = {"num_shards": 2, "shard_id": shard}
        assert_same_batches(epoch_batches(native, "train", 3, **shards), epoch_batches(ours, "train", 3, **shards))


def test_epoch_counts_follow_the_temperature(data: dict[str, Path]) -> None:
    ours = make_task(data, False, task_options(data, *SAMPLING["temperature"], *LANGTOKS["src+decoder"]))
    batches = epoch_batches(ours, "train", 1)
    mixture = ours.dataset("train").mixture
    ids = np.concatenate([b["id"].numpy() for b in batches])
    counts = np.bincount(mixture.corpus_of(ids), minlength=3)
    # T = 2 over 1000/500/200 rows: p ~ sqrt of the sizes, epoch size: the largest drawn once
    expected = resample_counts([1000, 500, 200], temperature_ratios([1000, 500, 200], 2.0), None, 2, 1)
    assert counts.tolist() == expected.tolist() and expected[0] == 1000 and expected[2] > 400


def test_views_replace_a_pairs_training_split(data: dict[str, Path]) -> None:
    view = data["root"] / "short-de.view"
    build_view(data["arrow"], view, split="train.de-en", max_len=12, overwrite=True)
    options = task_options(data, *LANGTOKS["src+decoder"], "--arrow-train-views", f"de-en={view}")
    ours = make_task(data, False, options)
    batches = epoch_batches(ours, "train", 1)
    mixture = ours.dataset("train").mixture
    assert mixture.sizes[0] < SIZES["de"] and mixture.lengths("source")[: mixture.sizes[0]].max() <= 12 + 1
    assert sum(b["nsentences"] for b in batches) == len(mixture)


def test_unsupported_options_are_refused(data: dict[str, Path]) -> None:
    with pytest.raises(InvalidParameterError, match="virtual_epoch_size"):
        make_task(data, False, task_options(data, "--virtual-epoch-size", "100"))
    with pytest.raises(InvalidParameterError, match="arrow_train_views"):
        make_task(data, False, task_options(data, "--arrow-train-views", "de-en"))


# ---------------------------------------------------------------- fairseq-train: the same losses


def fairseq_train(data_path: Path, workdir: Path, plugin: bool, *extra: str) -> str:
    script = Path(sys.executable).with_name("fairseq-train")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "fairseq_cli.train"]
    task = ["--task", TASK, "--user-dir", str(PLUGIN_DIR)] if plugin else ["--task", "translation_multi_simple_epoch"]
    options = ["--sampling-method", "temperature", "--sampling-temperature", "2", "--encoder-langtok", "src"]
    options += ["--decoder-langtok", "--lang-pairs", LANG_PAIRS, "--lang-dict", str(workdir.parent / "langs.txt")]
    args = [str(data_path), *task, *options, *TINY_MODEL, *TRAINING, *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
    workdir.mkdir(exist_ok=True)
    done = subprocess.run([*command, *args], cwd=workdir, capture_output=True, text=True, timeout=300, env=env)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    return log


def updates(log: str) -> dict[int, tuple[str, str, str]]:
    """(loss, wpb, bsz) of every update, as fairseq logs them."""
    marker = "| train_inner | "
    records = [json.loads(line.split(marker, 1)[1]) for line in log.splitlines() if marker in line]
    return {int(r["num_updates"]): (r["loss"], r["wpb"], r["bsz"]) for r in records}


@pytest.fixture(scope="module")
def native_log(data: dict[str, Path]) -> str:
    return fairseq_train(data["bin"], data["root"] / "native", False, "--max-update", "45", "--no-save",
                         "--disable-validation")  # fmt: skip


def test_fairseq_train_logs_the_same_loss_wpb_and_bsz(data: dict[str, Path], native_log: str) -> None:
    ours = fairseq_train(data["arrow"], data["root"] / "ours", True, "--max-update", "45", "--no-save",
                         "--disable-validation")  # fmt: skip
    assert "task: TranslationMultiSimpleEpochArrowTask" in ours
    native, mine = updates(native_log), updates(ours)
    assert list(mine) == list(range(1, 46))  # two epochs (35 updates each)
    assert mine == native  # per update, exactly as logged


def test_fairseq_train_resumes_exactly(data: dict[str, Path], native_log: str) -> None:
    save = ["--save-dir", str(data["root"] / "ckpt"), "--no-epoch-checkpoints", "--disable-validation"]
    fairseq_train(data["arrow"], data["root"] / "first", True, "--max-update", "20", *save)
    resumed = fairseq_train(data["arrow"], data["root"] / "second", True, "--max-update", "45", *save)
    assert "(epoch 1 @ 20 updates)" in resumed
    after, native = updates(resumed), updates(native_log)
    assert list(after) == list(range(21, 46))
    for step, (loss, wpb, bsz) in after.items():
        assert (wpb, bsz) == native[step][1:]  # the same batches
        assert float(loss) == pytest.approx(float(native[step][0]), abs=0.01)
