"""Block arithmetic (``arrowmt.blocks._blocks``): exact values, and fairseq's ``TokenBlockDataset`` itself."""

from __future__ import annotations

import types

import numpy as np
import pytest

from arrowmt import InvalidParameterError
from arrowmt.testing import (
    BREAK_MODES,
    block_bounds,
    lm_order,
    none_bounds,
    offsets_in_rows,
    packed_bounds,
    row_starts,
    shifted_heads,
)
from tests.builders import fixture_lengths
from tests.conftest import import_fairseq

EOS, PAD = 2, 1


def pairs(bounds: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, int]]:
    return [(int(s), int(e)) for s, e in zip(*bounds, strict=True)]


@pytest.fixture()
def fairseq_blocks(monkeypatch: pytest.MonkeyPatch) -> type:
    """fairseq's TokenBlockDataset; its ``eos`` mode calls ``np.compat.long``, which numpy 2 removed."""
    import_fairseq()
    monkeypatch.setattr(np, "compat", types.SimpleNamespace(long=int), raising=False)
    from fairseq.data import TokenBlockDataset

    return TokenBlockDataset


def test_none_cuts_every_block_size_tokens() -> None:
    assert pairs(none_bounds(10, 4)) == [(0, 4), (4, 8), (8, 10)]
    assert pairs(none_bounds(8, 4)) == [(0, 4), (4, 8)]
    assert pairs(none_bounds(0, 4)) == []
    assert pairs(block_bounds(np.array([3, 2, 5]), 4, None)) == [(0, 4), (4, 8), (8, 10)]


def test_complete_packs_whole_rows_greedily() -> None:
    assert pairs(packed_bounds(np.array([3, 2, 5, 1, 4]), 5)) == [(0, 5), (5, 10), (10, 15)]
    assert pairs(packed_bounds(np.array([7, 2, 2]), 5)) == [(0, 7), (7, 11)]  # a long row is a block of its own
    assert pairs(packed_bounds(np.array([0, 3, 0, 0, 4]), 5)) == [(0, 3), (3, 7)]  # empty rows change nothing
    assert pairs(packed_bounds(np.array([], dtype=np.int64), 5)) == []


def test_complete_doc_keeps_documents_apart() -> None:
    sizes = np.array([3, 1, 2, 2, 1, 1, 4, 5])  # rows of 1 token separate documents
    assert pairs(block_bounds(sizes, 5, "complete_doc")) == [(0, 3), (4, 8), (10, 14), (14, 19)]
    # separators of 2 tokens: the 1-token document is dropped (blocks need 2 tokens)
    assert pairs(packed_bounds(np.array([1, 2, 3]), 5, document_sep_len=2)) == [(3, 6)]


def test_eos_is_one_block_per_row() -> None:
    assert pairs(block_bounds(np.array([2, 0, 3]), None, "eos")) == [(0, 2), (2, 2), (2, 5)]


def test_bad_parameters_name_themselves() -> None:
    with pytest.raises(InvalidParameterError, match="break_mode: expected one of"):
        block_bounds(np.array([1]), 4, "sentence")
    with pytest.raises(InvalidParameterError, match=r"sizes\[1\]: expected a row length >= 0, got -2"):
        block_bounds(np.array([1, -2]), 4, "complete")
    with pytest.raises(InvalidParameterError, match="block_size"):
        block_bounds(np.array([1]), 0, "none")
    with pytest.raises(InvalidParameterError, match="block_size: expected an integer >= 1 for break mode"):
        block_bounds(np.array([1]), None, "complete")
    with pytest.raises(InvalidParameterError, match="document_sep_len"):
        packed_bounds(np.array([1]), 4, document_sep_len=-1)


def test_offsets_in_rows() -> None:
    starts = row_starts(np.array([3, 2, 5]))
    assert starts.tolist() == [0, 3, 5, 10]
    assert offsets_in_rows(starts, np.array([0, 1, 3, 4, 9])).tolist() == [0, 1, 0, 1, 4]


def test_shifted_heads_fill_like_fairseq() -> None:
    offsets = np.array([0, 1, 2, 5])
    before = np.array([[10, 11], [20, 21], [30, 31], [40, 41]])
    past = shifted_heads(offsets, before, EOS, PAD, 2)
    assert past.tolist() == [[PAD, EOS], [EOS, 21], [30, 31], [40, 41]]
    source = shifted_heads(offsets, before[:, 1:], EOS, PAD, 1)
    assert source.tolist() == [[EOS], [21], [31], [41]]


def test_lm_order_is_monolingual_datasets_lexsort() -> None:
    fairseq = import_fairseq()
    sizes = np.random.default_rng(3).integers(1, 9, 5000)
    for seed in (1, 7, 2**32 - 1):
        with fairseq.data.data_utils.numpy_seed(seed):
            expected = np.lexsort([np.random.permutation(len(sizes)), sizes])
        assert np.array_equal(lm_order(sizes, seed), expected)
    assert np.array_equal(lm_order(sizes, None), np.lexsort([np.arange(len(sizes)), sizes]))


def corpora() -> dict[str, np.ndarray]:
    """Real row lengths (the Multi30k English side) with document breaks, and random ones with empty rows."""
    en = fixture_lengths("train")[1]
    rng = np.random.default_rng(5)
    with_breaks = np.insert(en, np.sort(rng.choice(len(en), 3000, replace=False)), 1)
    tiny = np.where(rng.random(4000) < 0.3, 1, rng.integers(1, 5, 4000))
    return {"multi30k": en, "multi30k documents": with_breaks, "tiny rows": tiny}


@pytest.mark.parametrize("mode", BREAK_MODES)
def test_bounds_equal_fairseq_slice_indices(mode: str, fairseq_blocks: type) -> None:
    for name, sizes in corpora().items():
        for block_size in (1, 2, 7, 64, 100, 512):
            reference = fairseq_blocks([None] * len(sizes), sizes, block_size, pad=PAD, eos=EOS, break_mode=mode)
            expected = np.asarray(reference.slice_indices, dtype=np.int64).reshape(-1, 2)
            starts, ends = block_bounds(sizes, block_size, mode)
            assert np.array_equal(starts, expected[:, 0]), (name, block_size)
            assert np.array_equal(ends, expected[:, 1]), (name, block_size)
