"""Packed batches (issue 51): the packing arithmetic on exact values, the plan (every row once, within capacity,
one tensor shape, little room left empty, ranks, resume, workers) on the real Multi30k training split, and a small
transformer whose loss and gradients on a packed batch equal those on the same sentences padded."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import multi30k_dataset
from state_helpers import check_resume
from torch.utils.data import DataLoader

from arrowmt import (
    ArrowMTDataset,
    FairseqCollater,
    InvalidParameterError,
    PackedCollater,
    PlanParams,
    TokenBatchSampler,
)
from arrowmt.plans import plan_lengths
from arrowmt.testing import GatheredBatch, Spans, pack_by_size, pack_ends
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
from packed_model import PackedTranslator

CAPACITY = 1024


@pytest.fixture(scope="module")
def train_ds(tmp_path_factory: pytest.TempPathFactory) -> ArrowMTDataset:
    """The real Multi30k train split (29000 pairs)."""
    return ArrowMTDataset(multi30k_dataset(tmp_path_factory.mktemp("train") / "arrowmt", "train"), "train")


def packed_sampler(ds: ArrowMTDataset, cache: Path, epoch: int = 1, **kw: object) -> TokenBatchSampler:
    sampler = TokenBatchSampler(ds, CAPACITY, packed=True, seed=3, cache_dir=cache, **kw)  # type: ignore[arg-type]
    sampler.set_epoch(epoch)
    return sampler


# ---------------------------------------------------------------- the arithmetic


def test_pack_by_size_exact_values() -> None:
    """Greedy in order: a batch closes when either side's next sample would pass the capacity, or at the sentence
    limit; every sample lands once."""
    indices = np.array([5, 3, 9, 1, 0])
    flat, offsets = pack_by_size(indices, np.array([4, 4, 3, 5, 1]), np.array([2, 6, 2, 1, 1]), 8)
    assert flat.tolist() == [5, 3, 9, 1, 0] and offsets.tolist() == [0, 2, 4, 5]
    _, offsets = pack_by_size(indices, np.array([4, 4, 3, 5, 1]), np.array([2, 7, 2, 1, 1]), 8)
    assert offsets.tolist() == [0, 1, 2, 4, 5]  # the target side closes the first two: 2 + 7 > 8, 7 + 2 > 8
    _, offsets = pack_by_size(indices, np.array([1, 1, 1, 1, 1]), None, 8, max_sentences=2)
    assert offsets.tolist() == [0, 2, 4, 5]
    _, offsets = pack_by_size(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), None, 8)
    assert offsets.tolist() == [0]


@pytest.mark.parametrize("max_sentences", [None, 3])
def test_pack_ends_in_small_windows_equal_one_window(max_sentences: int | None) -> None:
    """The running totals kept a window at a time (memory bounded) give the batches of one pass over everything,
    also through runs of empty samples longer than a window."""
    rng = np.random.default_rng(0)
    sides = [rng.integers(0, 6, 500), rng.integers(0, 6, 500)]
    sides[0][100:140] = sides[1][100:140] = 0
    whole = pack_ends(sides, 10, max_sentences, window=10**6)
    assert np.array_equal(pack_ends(sides, 10, max_sentences, window=4), whole)
    sizes = np.add.reduceat(sides[0], whole[:-1]), np.add.reduceat(sides[1], whole[:-1])
    assert max(sizes[0].max(), sizes[1].max()) <= 10 and whole[-1] == 500
    nxt = whole[1:-1]  # each batch but the last is closed by its next sample, or by the sentence limit
    over = (sizes[0][:-1] + sides[0][nxt] > 10) | (sizes[1][:-1] + sides[1][nxt] > 10)
    full = np.diff(whole)[:-1] == (max_sentences or 0)
    assert (over | full).all()


def test_pack_by_size_refuses_a_sample_over_capacity() -> None:
    with pytest.raises(InvalidParameterError, match=r"tgt_sizes\[1\]: expected 0 <= size <= capacity=8, got 9"):
        pack_by_size(np.arange(2), np.array([1, 1]), np.array([1, 9]), 8)


def test_packed_plan_exact_values_skipping_a_row_too_long() -> None:
    """Unshuffled (seed None): the rows in order, the one over max_tokens left out, the rest packed."""
    lengths = {"source": np.array([3, 9, 4, 2, 5], dtype=np.uint8), "target": np.array([2, 1, 4, 6, 1], dtype=np.uint8)}
    params = PlanParams(max_tokens=8, packed=True, seed=None, skip_invalid_size_inputs=True)
    plan = plan_lengths(lengths, params, "test")
    assert plan.indices.tolist() == [0, 2, 3, 4] and plan.offsets.tolist() == [0, 2, 4] and plan.dropped == 1


def test_packed_plans_refuse_options_without_a_fixed_shape() -> None:
    with pytest.raises(InvalidParameterError, match="max_tokens: packed batches need a token capacity, got None"):
        PlanParams(max_tokens=None, packed=True)
    with pytest.raises(InvalidParameterError, match=r"required_batch_size_multiple: expected 1 with packed.*got 8"):
        PlanParams(packed=True, required_batch_size_multiple=8)


# ---------------------------------------------------------------- the plan and the collater


def test_every_row_once_within_capacity_one_shape(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    src, tgt = train_ds.lengths("source"), train_ds.lengths("target")
    collate = PackedCollater(train_ds.special_ids, capacity=CAPACITY)
    shapes, used = set(), 0
    for epoch in (1, 2):
        batches = list(packed_sampler(train_ds, tmp_path, epoch))
        rows = np.concatenate(batches)
        assert np.array_equal(np.sort(rows), np.arange(len(train_ds)))
        assert max(int(src[b].sum()) for b in batches) <= CAPACITY
        assert max(int(tgt[b].sum()) for b in batches) <= CAPACITY
        for batch in DataLoader(train_ds, batch_sampler=packed_sampler(train_ds, tmp_path, epoch), collate_fn=collate):
            shapes.add(tuple((k, tuple(v.shape)) for k, v in sorted(batch["net_input"].items())))
        used = int(src.sum() + tgt.sum())
        waste = 1 - used / (2 * CAPACITY * len(batches))
        assert waste <= 0.03, f"epoch {epoch}: {waste:.2%} of the buffers empty"
    assert len(shapes) == 1


def test_collater_layout_exact_values() -> None:
    """Rows laid end to end; segments, positions, cu_seqlens, fairseq's decoder input per sentence, pads after."""
    words = np.array([7, 8, 2, 9, 2, 5, 2, 6, 4, 2], dtype=np.int32)
    batch = GatheredBatch(np.array([11, 4]), {"source": Spans(words, np.array([0, 3]), np.array([3, 2])),
                                              "target": Spans(words, np.array([5, 7]), np.array([2, 3]))})  # fmt: skip
    from arrowmt import SpecialIds

    out = PackedCollater(SpecialIds(pad=1, eos=2), capacity=7, max_sentences=3)(batch)
    net = out["net_input"]
    assert net["src_tokens"].tolist() == [7, 8, 2, 9, 2, 1, 1]
    assert net["src_segment"].tolist() == [0, 0, 0, 1, 1, -1, -1]
    assert net["src_positions"].tolist() == [0, 1, 2, 0, 1, 0, 0]
    assert net["src_cu_seqlens"].tolist() == [0, 3, 5, 5]
    assert out["target"].tolist() == [5, 2, 6, 4, 2, 1, 1]
    assert net["prev_output_tokens"].tolist() == [2, 5, 2, 6, 4, 1, 1]
    assert net["tgt_segment"].tolist() == [0, 0, 1, 1, 1, -1, -1]
    assert net["tgt_cu_seqlens"].tolist() == [0, 2, 5, 5]
    assert out["id"].tolist() == [11, 4, -1] and out["nsentences"] == 2 and out["ntokens"] == 5
    with pytest.raises(InvalidParameterError, match="source holds 5 tokens, expected at most capacity=4"):
        PackedCollater(SpecialIds(pad=1, eos=2), capacity=4)(batch)


def test_ranks_share_the_epoch(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    """Three ranks deal the epoch's packed batches between them, each taking as many steps (a short rank wraps
    around to the epoch's first batches, as every plan here does)."""
    ranks = [list(packed_sampler(train_ds, tmp_path, 2, num_replicas=3, rank=r)) for r in range(3)]
    whole = list(packed_sampler(train_ds, tmp_path, 2))
    dealt = [tuple(b) for rank in ranks for b in rank]
    assert set(dealt) == {tuple(b) for b in whole}
    assert len(dealt) - len(whole) < 3 and len({len(b) for b in ranks}) == 1


def test_elastic_resume_from_4_ranks_onto_3(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    """Half an epoch on 4 ranks, resumed on 3 from their states: every packed batch of the epoch trained, and only
    the wrap-around padding of the last step twice."""
    import itertools

    from state_helpers import torch_roundtrip

    old = [packed_sampler(train_ds, tmp_path, 2, num_replicas=4, rank=r) for r in range(4)]
    steps = len(old[0]) // 2
    before = [list(itertools.islice(iter(s), steps)) for s in old]
    states = [torch_roundtrip(s.state_dict()) for s in old]
    new = [packed_sampler(train_ds, tmp_path, 2, num_replicas=3, rank=r) for r in range(3)]
    for r, sampler in enumerate(new):
        sampler.load_state_dict(states[r % 4])
    after = [list(s) for s in new]
    trained = [tuple(b) for batches in before + after for b in batches]
    planned = {tuple(b) for b in packed_sampler(train_ds, tmp_path, 2)}
    assert set(trained) == planned and len(trained) - len(planned) < 3 and len({len(a) for a in after}) == 1


def test_resume_exact(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    full = check_resume(lambda: packed_sampler(train_ds, tmp_path, 2), 50)
    assert len(full) > 100


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 under torch >= 2.10
def test_stateful_dataloader_with_workers_resumes_exactly(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    collate = PackedCollater(train_ds.special_ids, capacity=CAPACITY)

    def loader() -> object:
        return stateful(train_ds, batch_sampler=packed_sampler(train_ds, tmp_path, 2), collate_fn=collate,
                        num_workers=2)  # fmt: skip

    full = [b["id"] for b in loader()]
    first = loader()
    it = iter(first)
    head = [next(it)["id"] for _ in range(30)]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [b["id"] for b in resumed]
    assert len(head) + len(rest) == len(full)
    assert all(torch.equal(a, b) for a, b in zip(head + rest, full, strict=True))


# ---------------------------------------------------------------- the reference model


def test_packed_loss_and_gradients_equal_padded(train_ds: ArrowMTDataset, tmp_path: Path) -> None:
    """A small transformer (float64): the loss and every gradient on a packed batch equal those on the same
    sentences padded, so no attention crosses sentences and no loss position is lost."""
    torch.manual_seed(0)
    vocab = (train_ds.metadata.columns["source"].vocab_size, train_ds.metadata.columns["target"].vocab_size)
    model = PackedTranslator(*vocab, pad=train_ds.special_ids.pad).double()
    batch_rows = next(iter(packed_sampler(train_ds, tmp_path, 1)))
    gathered = train_ds.__getitems__(list(batch_rows))
    assert len(gathered) > 20  # many sentences side by side

    packed = PackedCollater(train_ds.special_ids, capacity=CAPACITY)(gathered)
    padded = FairseqCollater(train_ds.special_ids, left_pad_source=False)(gathered)
    assert packed["ntokens"] == padded["ntokens"]

    def gradients(loss: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    net = padded["net_input"]
    loss_padded = model.padded_loss(net["src_tokens"], net["prev_output_tokens"], padded["target"])
    grads_padded = gradients(loss_padded)
    longest = max(net["src_tokens"].shape[1], padded["target"].shape[1])
    for window in (None, longest, longest + 7):  # dense masks; keys gathered for each query
        loss_packed = model.packed_loss(packed, window=window)
        grads_packed = gradients(loss_packed)
        assert torch.allclose(loss_packed, loss_padded, rtol=1e-12, atol=0)
        for a, b in zip(grads_packed, grads_padded, strict=True):
            assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="window: expected at least the longest sentence"):
        model.packed_loss(packed, window=longest - 1)
    shifted = {"net_input": {**packed["net_input"], "src_segment": packed["net_input"]["src_segment"].roll(1)},
               "target": packed["target"]}  # fmt: skip
    assert not torch.allclose(model.packed_loss(shifted), loss_packed)  # a wrong mask would show


# ---------------------------------------------------------------- language-model blocks

LM_CAPACITY = 4096  # blocks of up to 64 tokens: a buffer's last block leaves about 30 tokens empty


@pytest.fixture(scope="module")
def lm_blocks(tmp_path_factory: pytest.TempPathFactory) -> object:
    """Multi30k's English training text as LM blocks of whole sentences (up to 64 tokens: lengths vary)."""
    from arrowmt import convert_text, open_blocks
    from tests.conftest import MULTI30K

    folder = tmp_path_factory.mktemp("lm") / "lm"
    convert_text(str(MULTI30K / "train"), folder, lang="en", progress=False)
    return open_blocks(folder, "train", tokens_per_sample=64, break_mode="complete")


def test_lm_blocks_packed_every_block_once_one_shape(lm_blocks: object, tmp_path: Path) -> None:
    from arrowmt import BlockBatchSampler

    sizes = np.array([len(lm_blocks[i]["target"]) for i in range(len(lm_blocks))])  # type: ignore[index, arg-type]
    collate = PackedCollater(lm_blocks.special_ids, capacity=LM_CAPACITY)  # type: ignore[attr-defined]
    sampler = BlockBatchSampler(lm_blocks, LM_CAPACITY, packed=True, seed=4, cache_dir=tmp_path)  # type: ignore[arg-type]
    sampler.set_epoch(1)
    batches = list(sampler)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(sizes)))
    assert max(int(sizes[b].sum()) for b in batches) <= LM_CAPACITY
    assert 1 - sizes.sum() / (LM_CAPACITY * len(batches)) <= 0.03
    laid = [collate(lm_blocks.__getitems__(list(b)))["net_input"] for b in batches[:20]]  # type: ignore[attr-defined]
    shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(net.items())) for net in laid}
    assert len(shapes) == 1
    check_resume(lambda: BlockBatchSampler(lm_blocks, LM_CAPACITY, packed=True, seed=4, cache_dir=tmp_path), 7)


def test_lm_packed_loss_and_gradients_equal_padded(lm_blocks: object, tmp_path: Path) -> None:
    """A small causal language model (float64): loss and gradients on packed blocks equal those on fairseq's padded
    blocks of the same rows; each block's first input is the token before it, as fairseq feeds it."""
    from packed_model import PackedLanguageModel

    from arrowmt import BlockBatchSampler, FairseqBlockCollater

    torch.manual_seed(0)
    vocab = lm_blocks.split.metadata.columns["tokens"].vocab_size  # type: ignore[attr-defined]
    model = PackedLanguageModel(vocab, pad=lm_blocks.special_ids.pad).double()  # type: ignore[attr-defined]
    sampler = BlockBatchSampler(lm_blocks, LM_CAPACITY, packed=True, seed=4, cache_dir=tmp_path)  # type: ignore[arg-type]
    sampler.set_epoch(1)
    gathered = lm_blocks.__getitems__(list(next(iter(sampler))))  # type: ignore[attr-defined]
    packed = PackedCollater(lm_blocks.special_ids, capacity=LM_CAPACITY)(gathered)  # type: ignore[attr-defined]
    padded = FairseqBlockCollater(lm_blocks.special_ids)(gathered)  # type: ignore[attr-defined]
    assert packed["ntokens"] == padded["ntokens"] and len(gathered) > 10

    def gradients(loss: torch.Tensor) -> list[torch.Tensor]:
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    loss_packed = model.packed_loss(packed)
    grads_packed = gradients(loss_packed)
    net = padded["net_input"]
    loss_padded = model.padded_loss(net["src_tokens"], net["src_lengths"], padded["target"])
    grads_padded = gradients(loss_padded)
    assert torch.allclose(loss_packed, loss_padded, rtol=1e-12, atol=0)
    for a, b in zip(grads_packed, grads_padded, strict=True):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)
