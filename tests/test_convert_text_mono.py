"""Monolingual raw text (``lang``, fairseq's ``--only-source``): equal to the real fairseq-preprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arrowmt import InvalidParameterError, convert_text, open_blocks, open_split
from arrowmt.testing import TOKENS
from tests.conftest import MULTI30K, fairseq_preprocess, fairseq_rows, gz_lines


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Plain copies of the English Multi30k val (as train) and test (as valid) captions: ``{folder}/train.en``..."""
    folder = tmp_path_factory.mktemp("mono-text")
    for split, name in (("train", "val"), ("valid", "test")):
        (folder / f"{split}.en").write_text("\n".join(gz_lines(MULTI30K / f"{name}.en.gz")) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def fairseq_out(text: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fairseq-preprocess --only-source --source-lang en``: default, with limits, with a given dictionary."""
    out = tmp_path_factory.mktemp("fairseq-mono")
    common = ["--only-source", "--source-lang", "en", "--trainpref", str(text / "train"), "--workers", "1"]
    common += ["--validpref", str(text / "valid")]
    fairseq_preprocess(
        [*common, "--destdir", str(out / "default")],
        [*common, "--destdir", str(out / "limits"), "--thresholdsrc", "2", "--nwordssrc", "600"],
        [*common, "--destdir", str(out / "given"), "--srcdict", str(out / "limits" / "dict.en.txt")],
    )
    return out


def _assert_equals_fairseq(ours: Path, theirs: Path) -> None:
    """The dictionary byte for byte; every row of train and valid as fairseq itself reads its data-bin."""
    assert (ours / "dict.en.txt").read_bytes() == (theirs / "dict.en.txt").read_bytes()
    for split in ("train", "valid"):
        rows = fairseq_rows(theirs / f"{split}.en-None.en", "mmap")
        ds = open_split(ours, split)
        assert len(ds) == len(rows) > 900
        for i, expected in enumerate(rows):
            np.testing.assert_array_equal(ds.row_array(TOKENS, i), expected, err_msg=f"{split} row {i}")


def test_monolingual_text_equals_real_fairseq_preprocess_only_source(
    text: Path, fairseq_out: Path, tmp_path: Path
) -> None:
    """Two workers and small chunks: the dictionary fairseq builds, the ids it writes."""
    manifest = convert_text(
        str(text / "train"), tmp_path / "out", lang="en", validpref=str(text / "valid"),
        workers=2, chunk_bytes=7000, progress=False,
    )  # fmt: skip
    _assert_equals_fairseq(tmp_path / "out", fairseq_out / "default")
    assert manifest.languages == {TOKENS: "en"}
    assert manifest.provenance["options"]["lang"] == "en"  # type: ignore[index]
    assert manifest.provenance["unknown_tokens"]["valid"][TOKENS]["lang"] == "en"  # type: ignore[index]


def test_monolingual_limits_and_given_dictionary_equal_fairseq(text: Path, fairseq_out: Path, tmp_path: Path) -> None:
    """``--thresholdsrc``/``--nwordssrc`` build the dictionary; ``--srcdict`` is used as given."""
    prefixes = {"validpref": str(text / "valid"), "progress": False}
    convert_text(str(text / "train"), tmp_path / "limits", lang="en", thresholdsrc=2, nwordssrc=600, **prefixes)
    _assert_equals_fairseq(tmp_path / "limits", fairseq_out / "limits")
    given = str(fairseq_out / "limits" / "dict.en.txt")
    convert_text(str(text / "train"), tmp_path / "given", lang="en", srcdict=given, **prefixes)
    _assert_equals_fairseq(tmp_path / "given", fairseq_out / "given")


def test_cli_lang_makes_a_language_model_corpus(text: Path, tmp_path: Path) -> None:
    """``arrowmt convert text OUT --lang en --trainpref P``: one column, token blocks ready."""
    out = tmp_path / "lm"
    args = [sys.executable, "-m", "arrowmt._cli", "convert", "text", str(out), "--lang", "en"]
    done = subprocess.run(
        [*args, "--trainpref", str(text / "train"), "--validpref", str(text / "valid"), "--quiet"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "[en] train tokens:" in done.stdout and "2014 rows" in done.stdout
    assert "check that the dictionary (--srcdict or the train text)" in done.stderr  # valid: 11% <unk>
    assert json.loads((out / "arrowmt.json").read_text())["languages"] == {TOKENS: "en"}
    blocks = open_blocks(out, "train", tokens_per_sample=64)
    assert len(blocks) == -(-int(open_split(out, "train").lengths(TOKENS).sum()) // 64)


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"tgt_lang": "de"}, "tgt_lang"),
        ({"src_lang": "de"}, "src_lang"),
        ({"lang_pairs": "de-en"}, "lang_pairs"),
        ({"tgtdict": "dict.de.txt"}, "tgtdict"),
        ({"joined_dictionary": True}, "joined_dictionary"),
        ({"thresholdtgt": 2}, "thresholdtgt"),
        ({"nwordstgt": 100}, "nwordstgt"),
    ],
)
def test_options_of_a_second_language_are_refused(
    text: Path, tmp_path: Path, options: dict[str, object], name: str
) -> None:
    with pytest.raises(InvalidParameterError, match=rf"^{name}: expected it unset with lang"):
        convert_text(str(text / "train"), tmp_path / "out", lang="en", progress=False, **options)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("lang", ["", "e n", "a,b", "x/y"])
def test_bad_language_codes_are_refused(text: Path, tmp_path: Path, lang: str) -> None:
    with pytest.raises(InvalidParameterError, match=r"^lang: "):
        convert_text(str(text / "train"), tmp_path / "out", lang=lang, progress=False)


def test_an_lm_copy_of_a_text_corpus_verifies(text: Path, tmp_path: Path) -> None:
    """The documented path: ``convert text --lang en``, ``order --tokens-per-sample``, ``verify`` (the copy's rows are
    pieces of blocks: they need not end with </s>, as the corpus's sentences do)."""
    import arrowmt

    corpus = tmp_path / "lm"
    convert_text(str(text / "train"), corpus, lang="en", progress=False)
    ordered = tmp_path / "ordered"
    arrowmt.order_blocks(corpus, ordered, tokens_per_sample=64, max_tokens=512, seed=2, progress=False)
    assert arrowmt.verify_dataset(corpus, progress=False).ok
    report = arrowmt.verify_dataset(ordered, progress=False)
    assert report.ok, report.problems


def test_a_monolingual_export_reads_back_in_fairseq_and_arrowmt(text: Path, tmp_path: Path) -> None:
    """``export fairseq`` of a ``--lang en`` corpus writes the ``dict.txt`` fairseq's language_modeling task (and
    ``convert fairseq``) read, beside ``dict.en.txt``; converted back, the rows are the same."""
    import arrowmt

    corpus = tmp_path / "lm"
    convert_text(str(text / "train"), corpus, lang="en", progress=False)
    out = tmp_path / "bin"
    arrowmt.export_fairseq(corpus, out, progress=False)
    assert (
        (out / "dict.txt").read_bytes() == (out / "dict.en.txt").read_bytes() == (corpus / "dict.en.txt").read_bytes()
    )
    back = tmp_path / "back"
    arrowmt.convert_fairseq(out, back, progress=False)
    mine, theirs = open_split(corpus, "train"), open_split(back, "train")
    assert len(mine) == len(theirs) and all(
        mine.row_array(TOKENS, k).tolist() == theirs.row_array(TOKENS, k).tolist() for k in (0, 17, len(mine) - 1)
    )
    pytest.importorskip("fairseq")
    from fairseq.data import Dictionary, data_utils

    rows = data_utils.load_indexed_dataset(str(out / "train"), Dictionary.load(str(out / "dict.txt")), "mmap")
    assert rows[17].tolist() == mine.row_array(TOKENS, 17).tolist()
