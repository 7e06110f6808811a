"""Splits, datasets, views and samplers print what they are (they printed as ``<... object at 0x...>``)."""

from __future__ import annotations

from pathlib import Path

from builders import lengths_dataset

import arrowmt
from arrowmt import Split


def test_splits_datasets_and_views_say_what_they_hold(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [3, 9, 4, 12] * 5, [4, 8, 5, 11] * 5)
    view = arrowmt.build_view(corpus, corpus / "short.view", max_len=8).path
    assert repr(Split(corpus, "train")) == f"Split({str(corpus)!r}, 'train': 20 rows, ('source', 'target'))"
    assert (
        repr(arrowmt.open_dataset(corpus)) == f"ArrowMTDataset({str(corpus)!r}, 'train': 20 rows, ('source', 'target'))"
    )
    assert repr(arrowmt.open_view(view)) == f"View({str(view)!r}, 10 of 20 rows of {corpus} 'train')"
    assert repr(arrowmt.open_view_dataset(view)).startswith(f"ArrowMTViewDataset({str(view)!r}, 10 of 20 rows")
    mono = lengths_dataset(tmp_path / "m", [5, 7, 9, 3])
    blocks = arrowmt.open_blocks(mono, "train", 8, "none")
    assert (
        repr(blocks)
        == f"BlockDataset({str(mono)!r}, 'train': {len(blocks)} blocks, tokens_per_sample=8, break_mode='none')"
    )


def test_samplers_say_where_they_stand(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [3, 9, 4, 12] * 25, [4, 8, 5, 11] * 25)
    sampler = arrowmt.TokenBatchSampler(arrowmt.open_dataset(corpus), max_tokens=40, num_replicas=2, rank=1, seed=7)
    sampler.set_epoch(3)
    iterator = iter(sampler)
    next(iterator)
    planned = len(sampler.plan)
    assert repr(sampler) == (
        f"TokenBatchSampler(epoch 3: 1 of {len(sampler)} batches done, rank 1 of 2; {planned} batches planned, "
        "seed 7, shuffled)"
    )
    mono = lengths_dataset(tmp_path / "m", [5, 7, 9, 3])
    blocks = arrowmt.BlockBatchSampler(arrowmt.open_blocks(mono, "train", 8), shuffle=False, num_replicas=1, rank=0)
    assert repr(blocks).startswith("BlockBatchSampler(epoch 1: 0 of ") and repr(blocks).endswith("in plan order)")
    other = lengths_dataset(tmp_path / "o", [2, 3], [2, 3])
    mixture = arrowmt.open_mixture({"a": corpus, "b": other})
    assert repr(mixture) == "Mixture(a: 100, b: 2)"
    mixed = arrowmt.MixtureBatchSampler(mixture, max_tokens=40, temperature=2.0, num_replicas=1, rank=0)
    assert repr(mixed) == "MixtureBatchSampler(Mixture(a: 100, b: 2), temperature 2.0; epoch 1, rank 0 of 1, seed 1)"
    mixed.set_weights({"a": 1.0, "b": 3.0})
    assert "weights [1.0, 3.0];" in repr(mixed) and "at 0x" not in repr(mixed)
    mixed.set_temperature(lambda epoch: 1.0 + epoch)
    assert "temperature schedule;" in repr(mixed)
