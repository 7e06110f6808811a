"""Shape-bucketed padded batches (issue 51): at most N tensor shapes an epoch. The bucketing arithmetic on exact
values (against every cut, brute force), then the sampler and ``FairseqCollater(shapes=...)`` on the real Multi30k
training split: every row once, at most N shapes, the added rows without loss, ranks and resume as every plan."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from builders import multi30k_dataset
from state_helpers import check_resume
from torch.utils.data import DataLoader

from arrowmt import ArrowMTDataset, FairseqCollater, InvalidParameterError, PlanParams, SpecialIds, TokenBatchSampler
from arrowmt.testing import GatheredBatch, Spans, choose_shapes, shape_batches

MAX_TOKENS = 2048


@pytest.fixture(scope="module")
def train_ds(tmp_path_factory: pytest.TempPathFactory) -> ArrowMTDataset:
    """The real Multi30k train split (29000 pairs)."""
    return ArrowMTDataset(multi30k_dataset(tmp_path_factory.mktemp("train") / "arrowmt", "train"), "train")


def shaped_sampler(ds: ArrowMTDataset, cache: Path, n: int = 6, epoch: int = 1, **kw: object) -> TokenBatchSampler:
    sampler = TokenBatchSampler(ds, MAX_TOKENS, batch_shapes=n, seed=2, cache_dir=cache, **kw)  # type: ignore[arg-type]
    sampler.set_epoch(epoch)
    return sampler


def padded_cells(src: np.ndarray, tgt: np.ndarray, uppers: np.ndarray, shapes: list, max_tokens: int) -> int:
    size = np.maximum(src, tgt)
    bucket = np.searchsorted(uppers, size)
    counts = np.bincount(bucket, minlength=len(shapes))
    return sum(-(-int(c) // s[0]) * s[0] * (s[1] + s[2]) for c, s in zip(counts, shapes, strict=True))


def test_choose_shapes_exact_values() -> None:
    src = np.array([2, 3, 3, 9, 10, 4, 2])
    tgt = np.array([3, 1, 4, 8, 12, 4, 2])
    uppers, shapes = choose_shapes(src, tgt, 2, 24)
    assert uppers.tolist() == [4, 12] and shapes == [(6, 4, 4), (2, 10, 12)]
    uppers, shapes = choose_shapes(src, tgt, 1, 24)
    assert uppers.tolist() == [12] and shapes == [(2, 10, 12)]
    flat, offsets = shape_batches(np.arange(7), src, tgt, *choose_shapes(src, tgt, 2, 24))
    assert flat.tolist() == [0, 1, 2, 5, 6, 3, 4] and offsets.tolist() == [0, 5, 7]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_choose_shapes_pads_least_of_every_cut(n: int) -> None:
    """Brute force: no way of cutting the distinct sizes into at most n buckets pads fewer tokens."""
    rng = np.random.default_rng(n)
    src, tgt = rng.integers(1, 30, 200), rng.integers(1, 30, 200)
    uppers, shapes = choose_shapes(src, tgt, n, 64, max_sentences=9, multiple=2)
    best = padded_cells(src, tgt, uppers, shapes, 64)
    values = np.unique(np.maximum(src, tgt))
    for k in range(1, n + 1):
        for cut in itertools.combinations(values[:-1].tolist(), k - 1):
            ups = np.array([*cut, int(values[-1])])
            bucket = np.searchsorted(ups, np.maximum(src, tgt))
            other = []
            for b in range(k):
                ls, lt = int(src[bucket == b].max()), int(tgt[bucket == b].max())
                rows = min(64 // max(ls, lt), 9)
                other.append((max(rows - rows % 2, 1), ls, lt))
            assert padded_cells(src, tgt, ups, other, 64) >= best


def test_batch_shapes_options_are_checked() -> None:
    with pytest.raises(InvalidParameterError, match="batch_shapes: expected with a max_tokens budget and without"):
        PlanParams(batch_shapes=4, packed=True)
    with pytest.raises(InvalidParameterError, match="batch_shapes"):
        PlanParams(batch_shapes=0)


def test_every_row_once_in_at_most_n_shapes(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    sampler = shaped_sampler(train_ds, tmp_path)
    shapes = sampler.batch_shapes()
    assert 1 <= len(shapes) <= 6
    collate = FairseqCollater(train_ds.special_ids, shapes=shapes)
    seen, ids, tokens = set(), [], 0
    for batch in DataLoader(train_ds, batch_sampler=sampler, collate_fn=collate):
        net = batch["net_input"]
        seen.add((tuple(net["src_tokens"].shape), tuple(net["prev_output_tokens"].shape), tuple(batch["target"].shape)))
        real = batch["id"] >= 0
        ids.append(batch["id"][real].numpy())
        tokens += batch["ntokens"]
        assert (batch["target"][~real] == train_ds.special_ids.pad).all()  # the added rows: no loss
        assert (net["src_lengths"][~real] == 1).all()
    assert len(seen) <= len(shapes)
    rows = np.concatenate(ids)
    assert np.array_equal(np.sort(rows), np.arange(len(train_ds)))
    assert tokens == int(train_ds.lengths("target").sum())


def test_collater_pads_to_the_first_shape_that_holds_the_batch() -> None:
    words = np.array([7, 8, 2, 9, 2, 5, 2, 6, 4, 2], dtype=np.int32)
    batch = GatheredBatch(np.array([11, 4]), {"source": Spans(words, np.array([0, 3]), np.array([3, 2])),
                                              "target": Spans(words, np.array([5, 7]), np.array([2, 3]))})  # fmt: skip
    out = FairseqCollater(SpecialIds(pad=1, eos=2), shapes=[(2, 2, 5), (3, 4, 4)])(batch)
    net = out["net_input"]
    assert net["src_tokens"].tolist() == [[1, 7, 8, 2], [1, 1, 9, 2], [1, 1, 1, 2]]
    assert net["src_lengths"].tolist() == [3, 2, 1] and out["id"].tolist() == [11, 4, -1]
    assert out["target"].tolist() == [[5, 2, 1, 1], [6, 4, 2, 1], [1, 1, 1, 1]]
    assert net["prev_output_tokens"].tolist() == [[2, 5, 1, 1], [2, 6, 4, 1], [2, 1, 1, 1]]
    assert out["ntokens"] == 5
    with pytest.raises(InvalidParameterError, match="fit none of the collater's shapes"):
        FairseqCollater(SpecialIds(pad=1, eos=2), shapes=[(1, 4, 4)])(batch)


def test_resume_exact_and_ranks(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    check_resume(lambda: shaped_sampler(train_ds, tmp_path, epoch=3), 20)
    ranks = [list(shaped_sampler(train_ds, tmp_path, num_replicas=2, rank=r)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    assert {tuple(b) for r in ranks for b in r} == {tuple(b) for b in shaped_sampler(train_ds, tmp_path)}


def test_refusals_and_edges(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    """A mixture's draws change its lengths each epoch (refused); N above the distinct sizes is capped; a plan
    with no row has no shape, and a collater of no shape is valid (it has no batch to pad)."""
    from arrowmt import MixtureBatchSampler, open_mixture

    mixture = open_mixture({"a": train_ds.path}, cache_dir=tmp_path)
    with pytest.raises(InvalidParameterError, match="batch_shapes: expected rows whose lengths stay"):
        MixtureBatchSampler(mixture, MAX_TOKENS, batch_shapes=4, cache_dir=tmp_path)
    src, tgt = np.array([3, 5, 5, 9]), np.array([2, 5, 6, 1])
    uppers, shapes = choose_shapes(src, tgt, 10**6, 64)
    assert len(shapes) <= 3 and uppers.tolist()[-1] == 9
    assert choose_shapes(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 4, 64)[1] == []
    with pytest.raises(InvalidParameterError, match="expected every row within max_tokens=8, got a row of 9"):
        choose_shapes(src, tgt, 2, 8)
    FairseqCollater(SpecialIds(), shapes=())


def test_order_copy_of_a_shaped_plan(native_corpus: Path, tmp_path: Path) -> None:
    """``arrowmt order --batch-shapes N`` (and ``--packed``): the copy in plan order gives the batches of the
    original's plan, row for row."""
    import subprocess
    import sys

    train_ds = ArrowMTDataset(native_corpus, "train")
    for flags, kw in ((["--batch-shapes", "4"], {"batch_shapes": 4}), (["--packed"], {"packed": True})):
        out = tmp_path / "-".join(flags)
        command = [sys.executable, "-m", "arrowmt", "order", str(train_ds.path), str(out), "--max-tokens",
                   str(MAX_TOKENS), "--seed", "2", *flags, "--quiet"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        copy = ArrowMTDataset(out, "train")
        kw = {"seed": 2, "cache_dir": tmp_path / "plans", **kw}
        original = TokenBatchSampler(train_ds, MAX_TOKENS, **kw)  # type: ignore[arg-type]
        ordered = TokenBatchSampler(copy, MAX_TOKENS, **kw)  # type: ignore[arg-type]
        for sampler in (original, ordered):
            sampler.set_epoch(1)
        rows = [[train_ds.row("source", int(r)).tolist() for r in b] for b in original]
        assert rows == [[copy.row("source", int(r)).tolist() for r in b] for b in ordered]
