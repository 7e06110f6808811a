"""``--arrow-segmentation sampled`` in the multilingual task (``translation_multi_simple_epoch_arrow``) under real
``fairseq-train`` (issue 39): each epoch reads every pair's rows in another of their stored sampled segmentations,
its mixture planned from that epoch's lengths, the dictionaries the samples' own, and a run resumed in its second
epoch continues exactly as the uninterrupted run.

The corpus is the bundled sample's validation text as two pairs (de-en and en-de, 1,014 rows each, one dictionary
for both languages, cut to 900 pieces so that the samples' dictionary extends it) segmented by a small sentencepiece
model trained on it, with 4 samples a row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arrowmt import convert_text, open_dataset
from tests.conftest import MULTI30K, PLUGIN_DIR, import_fairseq, quiet, val_sentencepiece
from tests.test_fairseq_native import MAX_TOKENS, Run, Side, train

spm = pytest.importorskip("sentencepiece")
TASK = "translation_multi_simple_epoch_arrow"
PAIRS = "de-en,en-de"


@pytest.fixture(scope="module")
def side(tmp_path_factory: pytest.TempPathFactory) -> Side:
    folder = tmp_path_factory.mktemp("multi-sampled-fairseq")
    model = val_sentencepiece(folder, 1000)
    corpus = folder / "corpus"
    convert_text(str(MULTI30K / "val"), corpus, lang_pairs=PAIRS, validpref=str(MULTI30K / "val"),
                 testpref=str(MULTI30K / "test"), spm_model=str(model), spm_sampling=True, nwordssrc=900,
                 progress=False)  # fmt: skip  # a dictionary short of pieces that samples use: theirs extends it
    (folder / "langs.txt").write_text("de\nen\n")
    task = [str(corpus), "--user-dir", str(PLUGIN_DIR), "--task", TASK, "--lang-pairs", PAIRS,
            "--lang-dict", str(folder / "langs.txt"), "--encoder-langtok", "src", "--decoder-langtok",
            "--sampling-method", "temperature", "--sampling-temperature", "2",
            "--arrow-segmentation", "sampled"]  # fmt: skip
    return Side("multi-sampled", task, {}, folder / "runs")


@pytest.fixture(scope="module")
def two_epochs(side: Side) -> Run:
    return train(side, "straight", "--max-epoch", "2")


def test_each_epoch_plans_its_mixture_from_other_samples(side: Side, two_epochs: Run) -> None:
    for epoch in (1, 2):
        assert f"{TASK}: split valid epoch {epoch}: " in two_epochs.log
    epochs = two_epochs.records("train")
    assert [r["epoch"] for r in epochs] == [1, 2]
    assert epochs[0]["train_wpb"] != epochs[1]["train_wpb"]  # the pieces read change with the epoch
    assert all(float(r["wpb"]) <= MAX_TOKENS for r in two_epochs.records("train_inner"))
    assert two_epochs.records("test"), "no validation ran"
    sampled = open_dataset(Path(side.task_args[0]), "valid.de-en", segmentation="sampled")
    pieces, fixed = sampled.dictionary("source"), sampled.corpus.dictionary("source")
    assert pieces.symbols[: len(fixed)] == fixed.symbols and len(pieces) > len(fixed)  # the samples' extends it
    langtoks = 2  # __de__ and __en__, which fairseq adds to every dictionary
    assert f"] dictionary: {len(pieces) + langtoks} types" in two_epochs.log  # fairseq logs one language


def test_a_multilingual_run_resumed_in_epoch_2_continues_exactly(side: Side, two_epochs: Run, tmp_path: Path) -> None:
    first = int(two_epochs.records("train")[0]["train_num_updates"])
    stop = first + 3
    cache = ("--arrow-plan-cache-dir", str(tmp_path / "plans"))
    train(side, "until", "--max-update", str(stop), *cache, save="ckpt")
    resumed = train(side, "resumed", "--max-update", str(first + 8), *cache, save="ckpt")
    assert f"(epoch 2 @ {stop} updates)" in resumed.log
    folders = sorted(p.name[:8] for p in (tmp_path / "plans").iterdir() if p.is_dir())
    assert folders == ["mixture-", "sampled-", "sampled-"]  # validation's plans; training's are in the epoch copies
    straight = [r for r in two_epochs.records("train_inner") if stop < int(r["num_updates"]) <= first + 8]
    assert resumed.records("train_inner") == straight and len(straight) == 5


def sampled_task(side: Side, cache: Path, segmentation: str = "sampled") -> Any:
    """The task as ``fairseq-train`` sets it up from the side's options, in this process."""
    import_fairseq()
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [*side.task_args, "--arrow-segmentation", segmentation, "--arrow-plan-cache-dir", str(cache), "--arch",
            "transformer", "--cpu"]  # fmt: skip
    with quiet():
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        return tasks.setup_task(convert_namespace_to_omegaconf(args).task)


def epoch_batches(task: Any, epoch: int, **kw: Any) -> list[Any]:
    with quiet():
        itr = task.get_batch_iterator(task.dataset("train"), max_tokens=900, max_positions=(1024, 1024), seed=1,
                                      epoch=epoch, **kw)  # fmt: skip
        return list(itr.next_epoch_itr(shuffle=True))


def test_two_shards_read_every_row_of_an_epoch_a_short_one_padded(side: Side, tmp_path: Path) -> None:
    """Dealt to two ranks, an epoch whose batches do not divide evenly pads the short rank with fairseq's empty
    batch; between them the shards read the rows the whole epoch reads, in their samples of the epoch: the rows
    the epoch draws with fixed ids."""
    task, fixed = sampled_task(side, tmp_path / "cache"), sampled_task(side, tmp_path / "cache", "fixed")
    with quiet():
        task.load_dataset("train", epoch=1)
        fixed.load_dataset("train", epoch=1)
    for epoch in (1, 2):
        whole = epoch_batches(task, epoch)
        drawn = sorted(int(i) for b in epoch_batches(fixed, epoch) for i in b["id"])
        shards = [epoch_batches(task, epoch, num_shards=2, shard_id=k) for k in (0, 1)]
        assert len(shards[0]) == len(shards[1]) == -(-len(whole) // 2)
        padded = [b for shard in shards for b in shard if not b]
        assert len(padded) == len(whole) % 2
        rows = sorted(int(i) for b in whole for i in b["id"])
        assert sorted(int(i) for shard in shards for b in shard if b for i in b["id"]) == rows == drawn
    assert len(whole) % 2 or len(epoch_batches(task, 1)) % 2, "neither epoch pads a shard"
