"""Token blocks of real fairseq-preprocess output: blocks, samples, batches and collation equal fairseq's.

The corpus is the Multi30k English side with document breaks (empty lines), binarized
by the real ``fairseq-preprocess --only-source`` and converted by arrowmt; fairseq's own
``TokenBlockDataset`` and ``MonolingualDataset`` read the same data-bin.
"""

from __future__ import annotations

import logging
import pickle
import shutil
import types
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from arrowmt import (
    BlockBatchSampler,
    FairseqBlockCollater,
    FormatError,
    InputDataError,
    InvalidParameterError,
    Manifest,
    PlainBlockCollater,
    Split,
    convert_fairseq,
    open_blocks,
)
from arrowmt.testing import BREAK_MODES, HEADER_BYTES, block_bounds, discover, row_starts
from tests.builders import multi30k_dataset
from tests.conftest import fairseq_rows, import_fairseq
from tests.hostile_files import body_start, fifo_at, flip_bit, reseal, unblocking
from tests.lm_data import documents_text, fairseq_mono, mono_corpus, preprocess_mono
from tests.state_helpers import SamplerLoader, check_resume

EOS, PAD, BOS = 2, 1, 0


@pytest.fixture(scope="module")
def fairseq_data() -> Any:
    """fairseq's data side; ``TokenBlockDataset``'s eos mode calls ``np.compat.long``, which numpy 2 removed."""
    fairseq = import_fairseq()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(np, "compat", types.SimpleNamespace(long=int), raising=False)
        yield fairseq.data


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(fairseq data-bin from ``--trainpref train.en``, its arrowmt conversion)."""
    return fairseq_mono(tmp_path_factory.mktemp("mono"))


def reference_blocks(fairseq_data: Any, data_bin: Path, block_size: int, mode: str) -> Any:
    rows = fairseq_data.data_utils.load_indexed_dataset(str(data_bin / "train"), None, "mmap")
    return fairseq_data.TokenBlockDataset(rows, rows.sizes, block_size, PAD, EOS, mode, include_targets=True)


# ---------------------------------------------------------------- conversion


def test_both_mono_layouts_convert(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    data_bin, arrow = corpus
    manifest = Manifest.load(arrow)
    assert (manifest.languages, manifest.dictionaries) == ({"tokens": None}, {"": "dict.txt"})
    expected = fairseq_rows(data_bin / "train", "mmap")
    split = Split(arrow, "train")
    assert len(split) == len(expected) == 33054
    assert all(np.array_equal(split.row_array("tokens", i), expected[i]) for i in range(0, len(split), 97))

    with_lang = preprocess_mono(data_bin.parent / "text", tmp_path / "with-lang", with_lang=True)
    assert sorted(p.name for p in with_lang.glob("train.*")) == ["train.en-None.en.bin", "train.en-None.en.idx"]
    found = discover(with_lang)
    assert (found.pairs, found.mono, found.mono_lang) == ({}, ["train", "valid"], "en")
    out = tmp_path / "arrow-lang"
    manifest = convert_fairseq(with_lang, out, progress=False)
    assert (manifest.languages, manifest.dictionaries) == ({"tokens": "en"}, {"en": "dict.en.txt"})
    assert (out / "dict.en.txt").read_bytes() == (with_lang / "dict.en.txt").read_bytes()
    again = Split(out, "train")
    assert np.array_equal(again.lengths("tokens"), split.lengths("tokens"))
    assert np.array_equal(again.row_array("tokens", 9), expected[9])

    for name in ("train.bin", "train.idx"):
        shutil.copy(data_bin / name, with_lang / name)
    with pytest.raises(InputDataError, match="expected one monolingual layout"):
        discover(with_lang)


# ---------------------------------------------------------------- blocks and samples


@pytest.mark.parametrize("mode", BREAK_MODES)
def test_blocks_equal_token_block_dataset(mode: str, corpus: tuple[Path, Path], fairseq_data: Any) -> None:
    """Every block: its range, source, target and past target as ``TokenBlockDataset(include_targets=True)``."""
    data_bin, arrow = corpus
    for block_size in (5, 64):
        reference = reference_blocks(fairseq_data, data_bin, block_size, mode)
        ds = open_blocks(arrow, "train", block_size, mode)
        assert len(ds) == len(reference)
        starts, ends = ds.bounds(np.arange(len(ds)))
        assert np.array_equal(np.stack([starts, ends], 1), np.asarray(reference.slice_indices, dtype=np.int64))
        assert np.array_equal(ds.sizes(), reference.sizes)
        step = 1 if mode == "complete_doc" else 3
        ids = np.arange(0, len(ds), step)
        batch = ds.__getitems__(ids)
        for k, i in enumerate(ids.tolist()):
            with warnings.catch_warnings():  # fairseq's past target of a 1-token block overflows an unsigned index
                warnings.simplefilter("ignore", RuntimeWarning)
                source, target, past = reference[i]
            sample = batch[k]
            assert sample["id"] == i
            assert torch.equal(sample["target"], target), (block_size, i)
            assert torch.equal(sample["source"], source), (block_size, i)
            if len(target) >= 2:  # fairseq's past target of a 1-token block at a row start has 2 tokens
                assert torch.equal(sample["past_target"], past), (block_size, i)
            else:
                assert sample["past_target"].tolist() == [PAD][: len(target)]


def naive_sample(flat: np.ndarray, row_start: np.ndarray, start: int, end: int) -> dict[str, list[int]]:
    """The reference sample from the whole token sequence (fairseq's rule, written out)."""
    offset = start - int(row_start[np.searchsorted(row_start, start, side="right") - 1])
    head = [PAD, EOS] if offset == 0 else [EOS, int(flat[start - 1])] if offset == 1 else flat[start - 2 : start]
    target = flat[start:end].tolist()
    return {
        "target": target,
        "source": ([*list(head), *target][1:])[: len(target)],
        "past_target": ([*list(head), *target])[: len(target)],
    }


@pytest.mark.parametrize("mode", BREAK_MODES)
def test_blocks_across_record_batches_and_shards(mode: str, tmp_path: Path) -> None:
    """Record batches of 3 rows in 2 shard files: blocks crossing them are gathered, the others view the map."""
    rng = np.random.default_rng(11)
    rows = [[*rng.integers(4, 100, int(n)).tolist(), EOS] for n in rng.integers(0, 6, 40)]
    rows[7] = rows[20] = [EOS]  # document breaks
    folder = mono_corpus(tmp_path / "c", rows, rows_per_batch=3, shards=2)
    ds = open_blocks(folder, "train", 8, mode)
    assert ds.split.shard_names == ["train", "train1"]
    flat = np.concatenate([np.asarray(r) for r in rows])
    row_start = row_starts(np.array([len(r) for r in rows]))
    starts, ends = block_bounds(np.diff(row_start), 8, mode)
    assert len(ds) == starts.shape[0]
    batch = ds.__getitems__(np.arange(len(ds)))
    for i in range(len(ds)):
        expected = naive_sample(flat, row_start, int(starts[i]), int(ends[i]))
        assert {k: batch[i][k].tolist() for k in expected} == expected, i
    piece = ds.stream.piece_of
    inside = np.flatnonzero((piece(starts) == piece(np.maximum(ends - 1, 0))) & (ds.stream.shard[piece(starts)] == 0))
    crossing = np.flatnonzero(piece(starts) != piece(np.maximum(ends - 1, 0)))
    assert inside.size >= 2 and (crossing.size >= 1) == (mode != "eos")
    assert np.shares_memory(ds.__getitems__(inside[:2]).tokens.words, ds.split.shards[0].words)
    if crossing.size:
        assert not np.shares_memory(ds.__getitems__(crossing[:1]).tokens.words, ds.split.shards[0].words)


# ---------------------------------------------------------------- batches


@pytest.mark.parametrize("mode", BREAK_MODES)
def test_sampler_batches_equal_fairseq(mode: str, corpus: tuple[Path, Path], fairseq_data: Any) -> None:
    """``MonolingualDataset`` order under ``numpy_seed``, ``max_positions`` filter, ``batch_by_size``."""
    data_bin, arrow = corpus
    for block_size, max_tokens, max_sentences, multiple, max_positions in (
        (64, 1024, None, 8, 64),
        (30, 500, 7, 1, 25),
    ):
        reference = reference_blocks(fairseq_data, data_bin, block_size, mode)
        lm = fairseq_data.MonolingualDataset(reference, reference.sizes, None, shuffle=True, targets=["future"])
        with fairseq_data.data_utils.numpy_seed(5):
            order = lm.ordered_indices()
        order, _ = lm.filter_indices_by_size(order, max_positions)
        expected = lm.batch_by_size(
            order, max_tokens=max_tokens, max_sentences=max_sentences, required_batch_size_multiple=multiple
        )
        dropped = len(reference) - len(order)  # a share over 1% warns (a wrong max_positions would skip most)
        warns = dropped > len(reference) / 100
        with pytest.warns(UserWarning, match=f" {dropped} of {len(reference)} blocks ") if warns else nullcontext():
            sampler = BlockBatchSampler(
                open_blocks(arrow, "train", block_size, mode),
                max_tokens=max_tokens,
                max_sentences=max_sentences,
                required_batch_size_multiple=multiple,
                max_positions=max_positions,
                seed=5,
                skip_invalid_size_inputs=True,
                num_replicas=1,
                rank=0,
            )
        assert [sampler.plan.batch(b).tolist() for b in range(len(sampler.plan))] == [b.tolist() for b in expected]


def test_blocks_too_long_raise_unless_skipped(corpus: tuple[Path, Path]) -> None:
    ds = open_blocks(corpus[1], "train", 64, "eos")
    with pytest.raises(InputDataError, match=r"max_positions: sample \d+ has \d+ tokens, expected <= max_positions=20"):
        BlockBatchSampler(ds, max_positions=20, num_replicas=1, rank=0)
    with pytest.warns(UserWarning, match=r"of \d+ blocks \(\d+\.\d%\) exceed max_positions/max_tokens"):
        kept = BlockBatchSampler(ds, max_positions=20, skip_invalid_size_inputs=True, num_replicas=1, rank=0)
    assert kept.plan.dropped == int(np.count_nonzero(ds.sizes() > 20)) > 0


@pytest.mark.parametrize(
    ("mode", "options"),
    [
        ("none", {}),
        ("none", {"add_bos_token": True}),
        ("complete", {"add_bos_token": True, "fixed_pad_length": 64, "pad_to_bsz": 40}),
        ("complete_doc", {"output_vocab_size": 500}),
        ("none", {"output_vocab_size": 500, "add_bos_token": True}),
        ("eos", {"fixed_pad_length": 64}),
    ],
)
def test_fairseq_collater_equals_monolingual_dataset(
    mode: str, options: dict[str, Any], corpus: tuple[Path, Path], fairseq_data: Any
) -> None:
    data_bin, arrow = corpus
    vocab = fairseq_data.Dictionary.load(str(data_bin / "dict.txt"))
    out_vocab = vocab
    if "output_vocab_size" in options:
        out_vocab = fairseq_data.TruncatedDictionary(vocab, options["output_vocab_size"])
    blocks = reference_blocks(fairseq_data, data_bin, 64, mode)
    reference = fairseq_data.MonolingualDataset(
        blocks,
        blocks.sizes,
        vocab,
        out_vocab,
        add_eos_for_other_targets=mode != "none",
        shuffle=True,
        targets=["future"],
        add_bos_token=options.get("add_bos_token", False),
        fixed_pad_length=options.get("fixed_pad_length"),
        pad_to_bsz=options.get("pad_to_bsz"),
    )
    ds = open_blocks(arrow, "train", 64, mode)
    collate = FairseqBlockCollater(ds.special_ids, **options)
    sampler = BlockBatchSampler(ds, max_tokens=2048, max_positions=64, num_replicas=1, rank=0)
    for ids in list(sampler)[:20]:
        expected = reference.collater([reference[i] for i in ids])
        batches = [collate(ds.__getitems__(ids))]
        if not (mode == "none" and "output_vocab_size" in options):  # samples do not tell where blocks start
            batches.append(collate([ds[i] for i in ids]))
        for batch in batches:
            assert (batch["nsentences"], batch["ntokens"]) == (expected["nsentences"], expected["ntokens"])
            for got, want in (
                (batch["id"], expected["id"]),
                (batch["target"], expected["target"]),
                (batch["net_input"]["src_tokens"], expected["net_input"]["src_tokens"]),
                (batch["net_input"]["src_lengths"], expected["net_input"]["src_lengths"]),
            ):
                assert got.dtype == want.dtype and torch.equal(got, want)
    assert collate([]) == {}


def test_plain_collater_marks_documents(tmp_path: Path) -> None:
    folder = mono_corpus(tmp_path / "c", [[5, 6, 2], [7, 2], [8, 9, 10, 2]])
    ds = open_blocks(folder, "train", 4, "none")  # blocks: 5 6 2 7 | 2 8 9 10 | 2
    batch = PlainBlockCollater(ds.special_ids)(ds.__getitems__([0, 1, 2]))
    assert batch["tokens"].tolist() == [[EOS, 5, 6, 2], [7, 2, 8, 9], [10, PAD, PAD, PAD]]
    assert batch["target"].tolist() == [[5, 6, 2, 7], [2, 8, 9, 10], [2, PAD, PAD, PAD]]
    assert batch["lengths"].tolist() == [4, 4, 1]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0], [0, 0, 1, 2], [0, 0, 0, 0]]
    assert batch["cu_seqlens"].dtype == torch.int32
    assert batch["cu_seqlens"].tolist() == [0, 3, 4, 5, 8, 9]
    assert (batch["max_seqlen"], batch["ntokens"]) == (3, 9)
    with_bos = PlainBlockCollater(ds.special_ids, add_bos_token=True)(ds.__getitems__([1]))
    assert with_bos["tokens"].tolist() == [[BOS, 7, 2, 8, 9]] and with_bos["target"].tolist() == [[BOS, 2, 8, 9, 10]]
    assert with_bos["position_ids"].tolist() == [[0, 1, 0, 1, 2]]
    assert with_bos["cu_seqlens"].tolist() == [0, 2, 5]
    from_samples = PlainBlockCollater(ds.special_ids)([ds[0], ds[2]])  # no document information: one per block
    assert from_samples["cu_seqlens"].tolist() == [0, 4, 5]


# ---------------------------------------------------------------- resume, workers, cache


def collate_ids(batch: Any) -> list[int]:
    """Block ids and a checksum of the collated tokens (comparable with ==, picklable for workers)."""
    out = PlainBlockCollater()(batch)
    return [*out["id"].tolist(), int(out["tokens"].sum()), int(out["target"].sum())]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 under torch >= 2.10
def test_sampler_resumes_through_loaders(corpus: tuple[Path, Path]) -> None:
    ds = open_blocks(corpus[1], "train", 32, "complete")

    def sampler(rank: int = 0, world: int = 1) -> BlockBatchSampler:
        made = BlockBatchSampler(ds, max_tokens=512, seed=3, num_replicas=world, rank=rank)
        made.set_epoch(2)
        return made

    check_resume(sampler, consume=17)
    check_resume(lambda: SamplerLoader(DataLoader(ds, batch_sampler=sampler(), collate_fn=collate_ids)), consume=9)
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader() -> Any:
        return stateful.StatefulDataLoader(ds, batch_sampler=sampler(), collate_fn=collate_ids, num_workers=2)

    full = check_resume(loader, consume=11, same_state=False)
    assert len(full) == len(sampler())

    two = [sampler(rank, 2) for rank in (0, 1)]
    for s in two:
        for _ in zip(range(5), s, strict=False):
            pass
    one = sampler()
    one.load_state_dict(two[0].state_dict())  # elastic: 2 ranks saved, 1 resumes
    seen = [b for s in two for b in list(s)[:5]] + list(one)
    assert sorted(map(tuple, seen)) == sorted(map(tuple, sampler()))


def test_workers_and_pickling(corpus: tuple[Path, Path]) -> None:
    ds = open_blocks(corpus[1], "train", 48, "none")
    again = pickle.loads(pickle.dumps(ds))
    assert len(again) == len(ds) and torch.equal(again[10]["source"], ds[10]["source"])
    sampler = BlockBatchSampler(ds, max_tokens=1024, num_replicas=1, rank=0)
    alone = list(DataLoader(ds, batch_sampler=sampler, collate_fn=collate_ids))
    workers = list(DataLoader(ds, batch_sampler=sampler, collate_fn=collate_ids, num_workers=2))
    assert workers == alone and len(alone) == len(sampler)


def test_block_table_is_cached_and_rebuilt_when_corrupt(
    corpus: tuple[Path, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    first = open_blocks(corpus[1], "train", 40, "complete_doc", cache_dir=cache)
    assert first.table.built
    (table,) = cache.glob("blocks-*.bin")
    second = open_blocks(corpus[1], "train", 40, "complete_doc", cache_dir=cache)
    assert not second.table.built and np.array_equal(second.table.starts, first.table.starts)
    assert second.table.starts.base is not None  # a view of the mapped file
    expected = first.table.ends.copy()  # the map sees the in-place changes below
    flip_bit(table, HEADER_BYTES + 16)  # the first chunk's CRC-32 in the chunk table: refused at open
    with caplog.at_level(logging.WARNING):
        rebuilt = open_blocks(corpus[1], "train", 40, "complete_doc", cache_dir=cache)
    assert rebuilt.table.built and "rebuilding block table" in caplog.text and "block table checksum" in caplog.text
    assert np.array_equal(rebuilt.table.ends, expected)
    n, raw = len(expected), bytearray(table.read_bytes())
    end = body_start(raw) + 16 * n  # ends[n - 1] ends here
    raw[end - 8 : end] = (10**12).to_bytes(8, "little")  # the last block ends past the corpus
    reseal(raw)  # with checksums that match, as a forger would write it: the range checks must refuse it
    table.write_bytes(bytes(raw))
    forged = open_blocks(corpus[1], "train", 40, "complete_doc", cache_dir=cache)
    assert not forged.table.built and forged.bounds(np.array([0]))[1].tolist() == expected[:1].tolist()
    message = rf"block {n - 1}: range \d+\.\.1000000000000 .*is not a non-empty range .*within \d+ tokens"
    with pytest.raises(FormatError, match=message):
        forged[n - 1]
    with pytest.raises(FormatError, match=message):
        forged.sizes()
    assert open_blocks(corpus[1], "train", 41, "complete_doc", cache_dir=cache).table.built  # other parameters
    assert len(list(cache.glob("blocks-*.bin"))) == 2


def test_a_block_table_changed_within_range_is_refused_when_read_and_rebuilt(
    corpus: tuple[Path, Path], tmp_path: Path
) -> None:
    """A row offset 0 <-> 1 passes every range check (offsets <= 2): only the checksum sees it, when its chunk is
    first read; the table is then removed, and the next open rebuilds it."""
    cache = tmp_path / "cache"
    first = open_blocks(corpus[1], "train", 48, "none", cache_dir=cache)
    (table,) = cache.glob("blocks-*.bin")
    offsets = first.table.row_offsets.copy()
    k = int(np.flatnonzero(offsets < 2)[0])
    sample = first[k]["source"]  # (first's map sees the change below, and has checked every chunk already)
    flip_bit(table, body_start(table.read_bytes()) + 16 * len(offsets) + k)  # starts and ends, then a byte per block
    reopened = open_blocks(corpus[1], "train", 48, "none", cache_dir=cache)
    assert not reopened.table.built
    with pytest.raises(FormatError, match=r"block table checksum: chunk \d+ of \d+ .*; removed it: a cache file"):
        reopened[k]
    assert not table.exists()
    rebuilt = open_blocks(corpus[1], "train", 48, "none", cache_dir=cache)
    assert rebuilt.table.built and np.array_equal(rebuilt.table.row_offsets, offsets)
    assert torch.equal(rebuilt[k]["source"], sample)


def test_a_fifo_at_the_block_table_path_is_refused(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    open_blocks(corpus[1], "valid", 40, "complete", cache_dir=cache)
    (table,) = cache.glob("blocks-*.bin")
    fifo_at(table)
    with unblocking(table), pytest.raises(FormatError, match=r"\(block table\): expected a regular file, got a FIFO"):
        open_blocks(corpus[1], "valid", 40, "complete", cache_dir=cache)


def test_bad_input_is_named(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    parallel = multi30k_dataset(tmp_path / "pair", limit=50)
    with pytest.raises(InvalidParameterError, match="expected a monolingual split with the one column 'tokens'"):
        open_blocks(parallel, "valid", 64)
    ds = open_blocks(corpus[1], "valid", 64, "none")
    with pytest.raises(IndexError, match=f"blocks: row {len(ds)} out of range"):
        ds.__getitems__([0, len(ds)])
    with pytest.raises(InvalidParameterError, match="break_mode"):
        open_blocks(corpus[1], "valid", 64, "sentences")
    with pytest.raises(InvalidParameterError, match="tokens_per_sample"):
        open_blocks(corpus[1], "valid", None, "complete")
    assert len(open_blocks(corpus[1], "valid", None, "eos")) == len(Split(corpus[1], "valid"))


def test_documents_text_has_breaks(tmp_path: Path) -> None:
    text = documents_text(tmp_path)
    lines = (text / "train.en").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 33054 and lines.count("") == 33054 - 29000
