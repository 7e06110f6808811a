"""Tags at read time: the collated batch equals fairseq's over ``PrependTokenDataset``; token ids are fairseq's."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import fairseq_mmap, multi30k_dataset

from arrowmt import (
    Dictionary,
    FairseqCollater,
    InvalidParameterError,
    PlainCollater,
    TagCollater,
    Tags,
    langtok_tags,
    language_token_ids,
    open_mixture,
)
from arrowmt.testing import SOURCE, TARGET, GatheredBatch, Spans
from tests.conftest import import_fairseq

LANGS = ["cs", "de", "en", "fr"]


def test_tag_collater_prepends_each_corpus_tags_exactly() -> None:
    words = np.array([10, 11, 12, 20, 21, 30], dtype=np.int32)
    spans = {SOURCE: (np.array([0, 3, 5]), np.array([3, 2, 1])), TARGET: (np.array([3, 0, 5]), np.array([2, 0, 1]))}
    batch = GatheredBatch(np.array([0, 7, 4]), {c: Spans(words, s, n) for c, (s, n) in spans.items()})
    tags = [Tags(source=(5,)), Tags(), Tags(source=(6, 7), target=(8,))]
    collate = TagCollater(PlainCollater(left_pad_target=False), tags, np.array([0, 3, 5, 9]))
    out = collate(batch)  # ids 0, 7, 4 are in corpora 0, 2, 1
    assert out[SOURCE].tolist() == [[5, 10, 11, 12], [6, 7, 20, 21], [30, 1, 1, 1]]
    assert out[f"{SOURCE}_lengths"].tolist() == [4, 4, 1]
    assert out[TARGET].tolist() == [[20, 21], [8, 1], [30, 1]]
    assert out["id"].tolist() == [0, 7, 4]
    empty = collate([])
    assert list(empty) == ["id"] and empty["id"].numel() == 0
    with pytest.raises(InvalidParameterError, match="tags"):
        TagCollater(PlainCollater(), tags, np.array([0, 3]))


def test_language_token_ids_and_langtok_tags() -> None:
    dictionary = Dictionary([*Dictionary().symbols, "a", "__de__", "b"])
    ids = language_token_ids(dictionary, LANGS)
    assert ids == {"cs": 7, "de": 5, "en": 8, "fr": 9}  # __de__ exists; the others follow the dictionary
    tags = langtok_tags([("de", "en"), ("fr", "en")], ids, encoder_langtok="src", decoder_langtok=True)
    assert tags == [Tags((5,), (8,)), Tags((9,), (8,))]
    assert langtok_tags([("de", "en")], ids, encoder_langtok="tgt", source_prefix=(4,)) == [Tags((4, 8), ())]
    with pytest.raises(InvalidParameterError, match="encoder_langtok"):
        langtok_tags([("de", "en")], ids, encoder_langtok="both")
    with pytest.raises(InvalidParameterError, match="'xx'"):
        langtok_tags([("xx", "en")], ids, encoder_langtok="src")
    with pytest.raises(InvalidParameterError, match=r"tags\.source"):
        Tags(source=(-1,))


# ---------------------------------------------------------------- against fairseq


@pytest.fixture(scope="module")
def fairseq_data() -> object:
    import_fairseq()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fairseq import data
        from fairseq.data.multilingual.multilingual_utils import augment_dictionary
    return data, augment_dictionary


def test_token_ids_are_those_fairseq_adds(fairseq_data: object) -> None:
    data, augment_dictionary = fairseq_data  # type: ignore[misc]
    theirs = data.Dictionary.load(str(fairseq_mmap() / "dict.en.txt"))
    augment_dictionary(theirs, LANGS, "multilingual")
    ours = language_token_ids(Dictionary.load(fairseq_mmap() / "dict.en.txt"), LANGS)
    assert ours == {lang: theirs.index(f"__{lang}__") for lang in LANGS}
    assert max(ours.values()) == len(theirs) - 1


def test_tagged_batches_equal_fairseqs_prepend_token_datasets(fairseq_data: object, tmp_path: Path) -> None:
    data, _ = fairseq_data  # type: ignore[misc]
    folder = multi30k_dataset(tmp_path / "m30k", "valid")
    multi30k_dataset(folder, "test")
    mixture = open_mixture({"valid": (folder, "valid"), "test": (folder, "test")})
    tags = [Tags((18728,), (10216,)), Tags((18729,), (10217,))]  # tokens just past each dictionary
    mixture.tags = tags
    ours = mixture.tag_collater(FairseqCollater(mixture.special_ids))

    dictionary = data.Dictionary.load(str(fairseq_mmap() / "dict.de.txt"))
    pairs = []
    for name, tag in zip(("valid", "test"), tags, strict=True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            src = data.data_utils.load_indexed_dataset(str(fairseq_mmap() / f"{name}.de-en.de"), None, "mmap")
            tgt = data.data_utils.load_indexed_dataset(str(fairseq_mmap() / f"{name}.de-en.en"), None, "mmap")
        src, tgt = data.PrependTokenDataset(src, tag.source[0]), data.PrependTokenDataset(tgt, tag.target[0])
        pairs.append(data.LanguagePairDataset(src, src.sizes, dictionary, tgt, tgt.sizes, dictionary))
    rng = np.random.default_rng(0)
    for size in (1, 7, 40):
        ids = rng.choice(len(mixture), size, replace=False)
        corpus, local = mixture.locate(ids)
        samples = [pairs[int(k)][int(i)] for k, i in zip(corpus, local, strict=True)]
        for sample, global_id in zip(samples, ids, strict=True):
            sample["id"] = int(global_id)
        expected, got = pairs[0].collater(samples), ours(mixture.__getitems__(ids.tolist()))
        assert torch.equal(got["id"], expected["id"]) and got["ntokens"] == expected["ntokens"]
        for key in ("src_tokens", "src_lengths", "prev_output_tokens"):
            assert torch.equal(got["net_input"][key], expected["net_input"][key]), key
        assert torch.equal(got["target"], expected["target"])
