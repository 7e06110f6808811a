"""The fairseq plugin's task in-process, against fairseq's own ``translation`` task.

fairseq's ``TranslationTask`` reads a copy of the real ``fairseq-preprocess``
output; the plugin's ``TranslationArrowTask`` reads its arrowmt conversion. For
every ``get_batch_iterator`` option that changes batches, both iterators must
yield the same collated batches, epoch after epoch, on every rank. Real
``fairseq-train`` runs are compared in ``tests/test_fairseq_native.py``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from arrowmt import InvalidParameterError, PlanParams, open_dataset
from arrowmt.testing import load_plan, plan_key, windowed_batch_order
from tests.conftest import import_fairseq, quiet

MAX_TOKENS = 1024
Batch = tuple[list[int], list[list[int]], list[list[int]], list[list[int]]] | None


@pytest.fixture(scope="module")
def plugin() -> ModuleType:
    import_fairseq()
    with quiet():
        import arrowmt.integrations.fairseq_plugin as plugin
    return plugin


RESOLVED = {"train_subset": "train", "required_seq_len_multiple": 1}  # fairseq resolves these from other options


def make_task(plugin: ModuleType, data: Path, **options: Any) -> Any:
    cfg = plugin.TranslationArrowConfig(data=str(data), dataset_impl=None, **RESOLVED, **options)
    with quiet():
        return plugin.TranslationArrowTask.setup_task(cfg)


def native_task(data_bin: Path, source: str = "de", target: str = "en", **options: Any) -> Any:
    """fairseq's own ``translation`` task on the data-bin; ``options`` set on its config as fairseq reads them."""
    from fairseq.tasks.translation import TranslationConfig, TranslationTask

    cfg = TranslationConfig(data=str(data_bin), source_lang=source, target_lang=target, dataset_impl="mmap", **RESOLVED)
    for name, value in options.items():
        setattr(cfg, name, value)
    with quiet():
        return TranslationTask.setup_task(cfg)


def collated(batch: dict[str, Any]) -> Batch:
    if not batch:
        return None
    net = batch["net_input"]
    tensors = (net["src_tokens"], net["prev_output_tokens"], batch["target"])
    return (batch["id"].tolist(), *(t.tolist() for t in tensors))  # type: ignore[return-value]


def epochs_of(task: Any, split: str, epochs: int, **kw: Any) -> list[list[Batch]]:
    """Every collated batch of ``epochs`` successive epochs of a fresh iterator (``None``: an empty batch)."""
    with quiet():
        task.load_dataset(split)
        itr = task.get_batch_iterator(task.dataset(split), disable_iterator_cache=True, **kw)
        return [[collated(b) for b in itr.next_epoch_itr(shuffle=True)] for _ in range(epochs)]


ITERATOR_CASES = {
    "fresh run": {"max_tokens": MAX_TOKENS, "seed": 1, "epoch": 1},
    "resumed in epoch 3, positions, multiple of 8, remainder skipped": {
        "max_tokens": MAX_TOKENS,
        "seed": 7,
        "epoch": 3,
        "max_positions": (20, 25),
        "ignore_invalid_inputs": True,
        "required_batch_size_multiple": 8,
        "skip_remainder_batch": True,
    },
    "rank 2 of 3, padded with an empty batch": {
        "max_tokens": 700,
        "seed": 1,
        "epoch": 1,
        "num_shards": 3,
        "shard_id": 2,
    },
    "rank 1 of 2, grouped shuffling, max sentences": {
        "max_tokens": MAX_TOKENS,
        "max_sentences": 30,
        "seed": 2,
        "epoch": 2,
        "num_shards": 2,
        "shard_id": 1,
        "grouped_shuffling": True,
    },
}


@pytest.mark.parametrize("split", ["valid", "test"])  # fairseq shuffles every split but "test" before sorting
@pytest.mark.parametrize("case", list(ITERATOR_CASES))
def test_batches_are_native_fairseqs(
    plugin: ModuleType, native_corpus: Path, native_data_bin: Path, case: str, split: str
) -> None:
    kw = ITERATOR_CASES[case]
    ours = epochs_of(make_task(plugin, native_corpus), split, 2, **kw)
    assert ours == epochs_of(native_task(native_data_bin), split, 2, **kw)
    assert ours[0] != ours[1] and len(ours[0]) > 5
    if kw.get("shard_id") == 2:  # 26 (valid) or 25 (test) batches over 3 ranks
        assert ours[0][-1] is None and ours[1][-1] is None


def test_rebuilt_batches_are_native_fairseqs(plugin: ModuleType, native_corpus: Path, native_data_bin: Path) -> None:
    """``rebuild_batches``: the order (so the batches themselves) is drawn anew each epoch with seed + epoch."""
    kw = {"max_tokens": MAX_TOKENS, "seed": 1, "epoch": 1}
    ours = epochs_of(make_task(plugin, native_corpus, rebuild_batches=True), "valid", 3, **kw)
    assert ours == epochs_of(native_task(native_data_bin, rebuild_batches=True), "valid", 3, **kw)
    once = epochs_of(make_task(plugin, native_corpus), "valid", 2, **kw)
    assert ours[0] == once[0] and sorted(map(str, ours[1])) != sorted(map(str, once[1]))


def test_reverse_direction_is_native_fairseqs(plugin: ModuleType, native_corpus: Path, native_data_bin: Path) -> None:
    """``-s en -t de`` on the de-en folder reads what fairseq reads from the de-en data-bin."""
    kw = {"max_tokens": MAX_TOKENS, "seed": 1, "epoch": 1, "max_positions": (30, 20), "ignore_invalid_inputs": True}
    task = make_task(plugin, native_corpus, source_lang="en", target_lang="de")
    ours = epochs_of(task, "valid", 2, **kw)
    assert ours == epochs_of(native_task(native_data_bin, "en", "de"), "valid", 2, **kw)
    assert ours != epochs_of(make_task(plugin, native_corpus), "valid", 2, **kw)


def test_task_reads_languages_and_dictionaries(plugin: ModuleType, native_corpus: Path, native_data_bin: Path) -> None:
    with quiet():
        sizes = {
            lang: len(import_fairseq().data.Dictionary.load(str(native_data_bin / f"dict.{lang}.txt")))
            for lang in ("de", "en")
        }
    task = make_task(plugin, native_corpus)
    assert (task.cfg.source_lang, task.cfg.target_lang) == ("de", "en")
    assert (len(task.src_dict), len(task.tgt_dict)) == (sizes["de"], sizes["en"])
    reverse = make_task(plugin, native_corpus, source_lang="en", target_lang="de")
    assert (len(reverse.src_dict), len(reverse.tgt_dict)) == (sizes["en"], sizes["de"])
    assert make_task(plugin, native_corpus, source_lang="en").cfg.target_lang == "de"  # one option picks the direction
    assert make_task(plugin, native_corpus, target_lang="en").cfg.source_lang == "de"
    with pytest.raises(InvalidParameterError, match="expected de/en or en/de"):
        make_task(plugin, native_corpus, source_lang="fr", target_lang="en")
    with pytest.raises(InvalidParameterError, match="load_alignments"):
        make_task(plugin, native_corpus, load_alignments=True)


@pytest.mark.parametrize("reverse", [False, True])
def test_dataset_gives_fairseq_samples(plugin: ModuleType, native_corpus: Path, reverse: bool) -> None:
    langs = {"source_lang": "en", "target_lang": "de"} if reverse else {}
    task = make_task(plugin, native_corpus, **langs)
    with quiet():
        task.load_dataset("valid")
    ds = task.dataset("valid")
    arrow = open_dataset(native_corpus, "valid")
    source, target = ("target", "source") if reverse else ("source", "target")
    sample = ds[7]
    assert sample["id"] == 7 and sample["source"].dtype == torch.int64 and sample["target"].dtype == torch.int64
    assert sample["source"].tolist() == arrow[7][source].tolist()
    assert sample["target"].tolist() == arrow[7][target].tolist()
    assert ds.size(7) == (len(sample["source"]), len(sample["target"]))
    assert ds.num_tokens(7) == max(ds.size(7))
    assert ds.sizes.shape == (len(arrow), 2)
    rows = [3, 9, 4, 100]
    from_list, from_map = ds.collater([ds[i] for i in rows]), ds.collater(ds.__getitems__(rows))
    for key in ("id", "target"):
        assert torch.equal(from_list[key], from_map[key])
    assert torch.equal(from_list["net_input"]["src_tokens"], from_map["net_input"]["src_tokens"])
    assert ds.collater([]) == {} and ds.collater(ds.__getitems__([])) == {}


def test_plans_are_shared_files_per_order_seed(plugin: ModuleType, native_corpus: Path, tmp_path: Path) -> None:
    """One memory-mapped plan per (order seed, direction), reused by every later iterator and task."""
    kw = {"max_tokens": MAX_TOKENS, "seed": 1}
    cache = tmp_path / "plans"
    first = epochs_of(make_task(plugin, native_corpus, arrow_plan_cache_dir=str(cache)), "valid", 1, epoch=1, **kw)
    assert len(list(cache.glob("plan-*.bin"))) == 1
    again = epochs_of(make_task(plugin, native_corpus, arrow_plan_cache_dir=str(cache)), "valid", 1, epoch=1, **kw)
    assert again == first and len(list(cache.glob("plan-*.bin"))) == 1
    epochs_of(make_task(plugin, native_corpus, arrow_plan_cache_dir=str(cache)), "valid", 1, epoch=2, **kw)
    task = make_task(plugin, native_corpus, arrow_plan_cache_dir=str(cache), source_lang="en", target_lang="de")
    epochs_of(task, "valid", 1, epoch=2, **kw)
    assert len(list(cache.glob("plan-*.bin"))) == 3


def test_forward_plan_keys_are_unchanged(native_corpus: Path, tmp_path: Path) -> None:
    """``PlanParams.reverse`` names only reversed plans, ``packed`` and ``batch_shapes`` only their own plans: the
    sampler's plan files and state dicts keep their keys."""
    ds = open_dataset(native_corpus, "valid")
    params = PlanParams(max_tokens=MAX_TOKENS, seed=1)
    fields = asdict(params)
    del fields["reverse"], fields["packed"], fields["batch_shapes"]
    assert load_plan(ds, params, tmp_path).key == plan_key({"dataset": ds.fingerprint(), "rows": len(ds), **fields})
    reverse = load_plan(ds, PlanParams(max_tokens=MAX_TOKENS, seed=1, reverse=True), tmp_path)
    assert reverse.key != load_plan(ds, params, tmp_path).key


def test_training_iterator_resumes_mid_epoch(plugin: ModuleType, native_corpus: Path) -> None:
    full = epochs_of(make_task(plugin, native_corpus), "train", 1, max_tokens=MAX_TOKENS, seed=1, epoch=3)[0]
    task = make_task(plugin, native_corpus)
    with quiet():
        task.load_dataset("train")
        itr = task.get_batch_iterator(task.dataset("train"), max_tokens=MAX_TOKENS, seed=1, epoch=3)
        epoch = itr.next_epoch_itr(shuffle=True)
        head = [collated(next(epoch)) for _ in range(7)]
        state = itr.state_dict()
    assert head == full[:7] and state["iterations_in_epoch"] == 7
    fresh = make_task(plugin, native_corpus)
    with quiet():
        fresh.load_dataset("train")
        again = fresh.get_batch_iterator(fresh.dataset("train"), max_tokens=MAX_TOKENS, seed=1, epoch=state["epoch"])
        again.load_state_dict(state)
        tail = [collated(b) for b in again.next_epoch_itr(shuffle=True)]
    assert tail == full[7:]


def test_validation_batches_cover_each_pair_once(plugin: ModuleType, native_corpus: Path) -> None:
    task = make_task(plugin, native_corpus)
    per_shard = [epochs_of(task, "valid", 1, max_tokens=MAX_TOKENS, num_shards=2, shard_id=r)[0] for r in (0, 1)]
    assert len(per_shard[0]) == len(per_shard[1])
    ids = np.array([i for batches in per_shard for b in batches if b is not None for i in b[0]])
    assert np.array_equal(np.sort(ids), np.arange(len(open_dataset(native_corpus, "valid"))))


def windowed(batches: list[Batch], seed: int, epoch: int, window: int, shards: int = 1, shard: int = 0) -> list[Batch]:
    """``batches`` (an epoch unshuffled) in the windowed order of ``epoch``, dealt as fairseq deals (short ranks get
    an empty batch)."""
    order = windowed_batch_order(len(batches), seed, epoch, window)
    mine = [batches[b] for b in order.tolist()][shard::shards]
    return mine + [None] * (-(-len(batches) // shards) - len(mine))


@pytest.mark.parametrize(("shards", "shard"), [(1, 0), (3, 2)])
def test_shuffle_window_orders_fairseqs_batches_by_windows(
    plugin: ModuleType, native_corpus: Path, shards: int, shard: int
) -> None:
    """``--arrow-shuffle-window 8``: the batches of every epoch are fairseq's, ordered by ``windowed_batch_order``
    under fairseq's seed and epoch, then dealt to the ranks as fairseq deals."""
    kw = {"max_tokens": 700, "seed": 3, "epoch": 2, "num_shards": shards, "shard_id": shard}
    task = make_task(plugin, native_corpus)
    with quiet():
        task.load_dataset("train")
        itr = task.get_batch_iterator(
            task.dataset("train"), disable_iterator_cache=True, **{**kw, "num_shards": 1, "shard_id": 0}
        )
        plain = [collated(b) for b in itr.next_epoch_itr(shuffle=False)]
    epochs = epochs_of(make_task(plugin, native_corpus, arrow_shuffle_window=8), "train", 2, **kw)
    assert len(plain) > 16
    assert epochs == [windowed(plain, 3, epoch, 8, shards, shard) for epoch in (2, 3)]
    assert epochs[0] != epochs[1]


def test_shuffle_window_resumes_mid_epoch(plugin: ModuleType, native_corpus: Path) -> None:
    kw = {"max_tokens": MAX_TOKENS, "seed": 1, "epoch": 2}
    full = epochs_of(make_task(plugin, native_corpus, arrow_shuffle_window=4), "train", 1, **kw)[0]
    task = make_task(plugin, native_corpus, arrow_shuffle_window=4)
    with quiet():
        task.load_dataset("train")
        itr = task.get_batch_iterator(task.dataset("train"), **kw)
        epoch = itr.next_epoch_itr(shuffle=True)
        head = [collated(next(epoch)) for _ in range(5)]
        state = itr.state_dict()
        fresh = make_task(plugin, native_corpus, arrow_shuffle_window=4)
        fresh.load_dataset("train")
        again = fresh.get_batch_iterator(fresh.dataset("train"), **{**kw, "epoch": state["epoch"]})
        again.load_state_dict(state)
        tail = [collated(b) for b in again.next_epoch_itr(shuffle=True)]
    assert head + tail == full


@pytest.mark.parametrize(
    ("window", "kw", "needle"),
    [
        (0, {}, "shuffle_window"),
        (-3, {}, "shuffle_window"),
        (8, {"grouped_shuffling": True}, "grouped_shuffling: expected False with --arrow-shuffle-window 8"),
    ],
)
def test_bad_shuffle_window_options(
    plugin: ModuleType, native_corpus: Path, window: int, kw: dict[str, Any], needle: str
) -> None:
    task = make_task(plugin, native_corpus, arrow_shuffle_window=window)
    with quiet():
        task.load_dataset("train")
    with pytest.raises(InvalidParameterError, match=needle):
        task.get_batch_iterator(task.dataset("train"), max_tokens=MAX_TOKENS, **kw)


def unshuffled_epoch(task: Any) -> list[Batch]:
    with quiet():
        task.load_dataset("train")
        itr = task.get_batch_iterator(task.dataset("train"), max_tokens=MAX_TOKENS)
        return [collated(b) for b in itr.next_epoch_itr(shuffle=False)]


def test_shuffle_window_refuses_batches_fixed_to_gpus(plugin: ModuleType, native_corpus: Path) -> None:
    """fairseq's ``--fix-batches-to-gpus`` shuffles each rank's batches itself: refused with a window; an unshuffled
    epoch is fairseq's, as without a window."""
    task = make_task(plugin, native_corpus, arrow_shuffle_window=8)
    with quiet():
        task.load_dataset("train")
        itr = task.get_batch_iterator(task.dataset("train"), max_tokens=MAX_TOKENS)
        with pytest.raises(InvalidParameterError, match="fix_batches_to_gpus: expected False"):
            itr.next_epoch_itr(shuffle=True, fix_batches_to_gpus=True)
    assert unshuffled_epoch(task) == unshuffled_epoch(make_task(plugin, native_corpus))


def test_workers_are_advised_against_once(
    plugin: ModuleType, native_corpus: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fairseq-train's default ``--num-workers 1`` gets one warning naming ``--num-workers 0`` (a worker's hand-over
    costs more than arrowmt's batch); none without workers."""
    from arrowmt.integrations import workers

    monkeypatch.setattr(workers, "_ADVISED", set())
    task = make_task(plugin, native_corpus)
    with quiet():
        task.load_dataset("valid")
    dataset = task.dataset("valid")
    with caplog.at_level(logging.WARNING, logger="arrowmt.integrations.workers"):
        task.get_batch_iterator(dataset, max_tokens=MAX_TOKENS, num_workers=0, disable_iterator_cache=True)
        assert not caplog.records
        for _ in range(2):
            task.get_batch_iterator(dataset, max_tokens=MAX_TOKENS, num_workers=1, disable_iterator_cache=True)
    assert len(caplog.records) == 1
    assert (
        "fairseq-train --num-workers: 1 DataLoader worker(s)" in caplog.text and "--num-workers 0 reads" in caplog.text
    )


def test_batch_shapes_through_fairseqs_iterator(plugin: ModuleType, native_corpus: Path, tmp_path: Path) -> None:
    """fairseq's own EpochBatchIterator over ``--arrow-batch-shapes 3``: the training subset's every row once, at
    most 3 tensor shapes, the rows added to a shape's last batch without loss (target all pad, id -1); validation
    keeps fairseq's batches; ``--num-batch-buckets`` is refused naming the flag."""
    task = make_task(plugin, native_corpus, arrow_batch_shapes=3, arrow_plan_cache_dir=str(tmp_path))
    [batches] = epochs_of(task, "train", 1, max_tokens=MAX_TOKENS, seed=1)
    shapes = {(len(ids), len(src[0]), len(target[0])) for ids, src, _, target in batches}
    assert len(shapes) <= 3
    ids = [i for ids, *_ in batches for i in ids]
    assert sorted(i for i in ids if i >= 0) == list(range(len(task.dataset("train"))))
    pad = task.src_dict.pad()
    for row_ids, _, _, target in batches:
        assert all(set(row) == {pad} for i, row in zip(row_ids, target, strict=True) if i < 0)
    [valid] = epochs_of(task, "valid", 1, max_tokens=MAX_TOKENS, seed=1)
    assert all(i >= 0 for ids, *_ in valid for i in ids) and len({len(b[1][0]) for b in valid}) > 3
    with pytest.raises(InvalidParameterError, match=r"num_batch_buckets: not supported.*--arrow-batch-shapes"):
        make_task(plugin, native_corpus, num_batch_buckets=4)
