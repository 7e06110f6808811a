"""Converting real Multi30k parallel text end to end, as fairseq-preprocess would encode it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arrowmt import (
    Dictionary,
    InputDataError,
    InvalidParameterError,
    TextConversion,
    convert_with_options,
    open_dataset,
)
from tests.conftest import (
    MULTI30K,
    fairseq_fixture,
    fairseq_preprocess,
    fairseq_rows,
    gz_lines,
    import_fairseq,
    text_options,
    val_sentencepiece,
)


def test_ids_equal_fairseq_encoding_of_every_line(tmp_path: Path) -> None:
    import_fairseq()
    from fairseq.data import Dictionary as FairseqDictionary

    convert_with_options(text_options(), tmp_path / "out", progress=False)
    for column, lang in (("source", "de"), ("target", "en")):
        ours = Dictionary.load(tmp_path / "out" / f"dict.{lang}.txt")
        theirs = FairseqDictionary.load(str(tmp_path / "out" / f"dict.{lang}.txt"))
        assert ours.symbols == theirs.symbols
        for split, name in (("train", "val"), ("test", "test")):
            ds = open_dataset(tmp_path / "out", split)
            lines = gz_lines(MULTI30K / f"{name}.{lang}.gz")
            assert len(ds) == len(lines)
            for i, line in enumerate(lines):
                expected = theirs.encode_line(line, add_if_not_exist=False, append_eos=True).numpy()
                np.testing.assert_array_equal(ds.row(column, i).numpy(), expected, err_msg=f"{split} {i}")


def _real_counts(path: Path) -> list[int]:
    """Counts of a dictionary's real symbols (no specials, no madeupword padding)."""
    d = Dictionary.load(path)
    return [
        c
        for s, c in zip(d.symbols[d.nspecial :], d.counts[d.nspecial :], strict=False)
        if not s.startswith("madeupword")
    ]


def test_dictionary_built_from_train_only_with_threshold(tmp_path: Path) -> None:
    convert_with_options(text_options(thresholds=(2, 3)), tmp_path / "out", progress=False)
    assert len(Dictionary.load(tmp_path / "out" / "dict.de.txt")) % 8 == 0
    assert min(_real_counts(tmp_path / "out" / "dict.de.txt")) == 2
    assert min(_real_counts(tmp_path / "out" / "dict.en.txt")) == 3


def test_existing_dictionaries_and_unknowns(tmp_path: Path) -> None:
    opts = text_options(
        srcdict=str(fairseq_fixture() / "mmap" / "dict.de.txt"),
        tgtdict=str(fairseq_fixture() / "mmap" / "dict.en.txt"),
    )
    convert_with_options(opts, tmp_path / "out", progress=False)
    assert (tmp_path / "out" / "dict.de.txt").read_bytes() == (fairseq_fixture() / "mmap" / "dict.de.txt").read_bytes()
    ds = open_dataset(tmp_path / "out", "train")
    de = Dictionary.load(tmp_path / "out" / "dict.de.txt")
    first = gz_lines(MULTI30K / "val.de.gz")[0].split()
    np.testing.assert_array_equal(ds.row("source", 0).numpy(), [de.index(w) for w in first] + [de.eos])


def test_joined_dictionary(tmp_path: Path) -> None:
    convert_with_options(text_options(joined_dictionary=True), tmp_path / "out", progress=False)
    de = (tmp_path / "out" / "dict.de.txt").read_bytes()
    assert de == (tmp_path / "out" / "dict.en.txt").read_bytes()
    words = Dictionary.load(tmp_path / "out" / "dict.de.txt")
    assert words.index("Ein") != words.unk and words.index("A") != words.unk


def test_comma_prefixes_become_shards_and_gz_equals_plain(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for lang in ("de", "en"):
        (plain / f"val.{lang}").write_text("\n".join(gz_lines(MULTI30K / f"val.{lang}.gz")) + "\n", encoding="utf-8")
    prefixes = {"train": f"{MULTI30K / 'val'},{plain / 'val'}"}
    manifest = convert_with_options(text_options(prefixes=prefixes), tmp_path / "out", progress=False)
    assert manifest.shards("train") == ["train", "train1"]
    ds = open_dataset(tmp_path / "out", "train")
    assert len(ds) == 2 * 1014
    for i in (0, 500, 1013):
        np.testing.assert_array_equal(ds.row("source", i), ds.row("source", 1014 + i))


def test_workers_give_identical_files(tmp_path: Path) -> None:
    convert_with_options(text_options(), tmp_path / "one", progress=False)
    convert_with_options(text_options(workers=2, chunk_bytes=5000), tmp_path / "two", progress=False)
    for name in ("train.arrow", "test.arrow", "dict.de.txt", "arrowmt.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()


def _assert_equals_fairseq_preprocess(ours: Path, theirs: Path, splits: dict[str, str]) -> None:
    """Dictionaries byte for byte, and every row of every split as fairseq itself reads its data-bin."""
    for lang in ("de", "en"):
        assert (ours / f"dict.{lang}.txt").read_bytes() == (theirs / f"dict.{lang}.txt").read_bytes()
    for split, fairseq_split in splits.items():
        ds = open_dataset(ours, split)
        for column, lang in (("source", "de"), ("target", "en")):
            rows = fairseq_rows(theirs / f"{fairseq_split}.de-en.{lang}", "mmap")
            assert len(ds) == len(rows)
            for i, expected in enumerate(rows):
                np.testing.assert_array_equal(ds.row(column, i).numpy(), expected, err_msg=f"{split} {column} {i}")


def _plain_copy(folder: Path, name: str) -> str:
    folder.mkdir(exist_ok=True)
    for lang in ("de", "en"):
        (folder / f"{name}.{lang}").write_text("\n".join(gz_lines(MULTI30K / f"{name}.{lang}.gz")) + "\n", "utf-8")
    return str(folder / name)


def test_chunked_conversion_equals_real_fairseq_preprocess(tmp_path: Path) -> None:
    """Small chunks and two workers: dictionaries and ids are exactly what fairseq-preprocess writes."""
    train, test = _plain_copy(tmp_path / "text", "val"), _plain_copy(tmp_path / "text", "test")
    common = ["--source-lang", "de", "--target-lang", "en", "--trainpref", train, "--testpref", test]
    fairseq_preprocess([*common, "--destdir", str(tmp_path / "fairseq"), "--workers", "1", "--thresholdsrc", "2"])
    opts = text_options(prefixes={"train": train, "test": test}, thresholds=(2, 0), workers=2, chunk_bytes=7000)
    manifest = convert_with_options(opts, tmp_path / "ours", progress=False)
    _assert_equals_fairseq_preprocess(tmp_path / "ours", tmp_path / "fairseq", {"train": "train", "test": "test"})
    assert manifest.provenance["options"]["thresholdsrc"] == 2  # type: ignore[index]


def test_joined_dictionary_with_srcdict_equals_real_fairseq_preprocess(tmp_path: Path) -> None:
    """``--joined-dictionary --srcdict D``: fairseq encodes both sides with D (it builds nothing)."""
    train = _plain_copy(tmp_path / "text", "val")
    given = str(fairseq_fixture() / "mmap" / "dict.en.txt")
    common = ["--source-lang", "de", "--target-lang", "en", "--trainpref", train, "--joined-dictionary"]
    fairseq_preprocess([*common, "--srcdict", given, "--destdir", str(tmp_path / "fairseq"), "--workers", "1"])
    opts = text_options(prefixes={"train": train}, joined_dictionary=True, srcdict=given, workers=2, chunk_bytes=7000)
    convert_with_options(opts, tmp_path / "ours", progress=False)
    assert (tmp_path / "ours" / "dict.de.txt").read_bytes() == Path(given).read_bytes()
    _assert_equals_fairseq_preprocess(tmp_path / "ours", tmp_path / "fairseq", {"train": "train"})


def test_joined_dictionary_with_source_limits_only_equals_real_fairseq_preprocess(tmp_path: Path) -> None:
    """``--joined-dictionary --thresholdsrc 2 --nwordssrc 900``: fairseq builds one dictionary with them."""
    train = _plain_copy(tmp_path / "text", "val")
    common = ["--source-lang", "de", "--target-lang", "en", "--trainpref", train, "--joined-dictionary"]
    limits = ["--thresholdsrc", "2", "--nwordssrc", "900"]
    fairseq_preprocess([*common, *limits, "--destdir", str(tmp_path / "fairseq"), "--workers", "1"])
    opts = text_options(prefixes={"train": train}, joined_dictionary=True, thresholds=(2, 0), nwords=(900, -1))
    convert_with_options(opts, tmp_path / "ours", progress=False)
    _assert_equals_fairseq_preprocess(tmp_path / "ours", tmp_path / "fairseq", {"train": "train"})


def test_a_prefix_listed_twice_counts_twice_like_its_text_twice(tmp_path: Path) -> None:
    """``--trainpref P,P`` holds P's text twice: rows and dictionary counts as one file of it twice would give."""
    train = _plain_copy(tmp_path / "text", "val")
    for lang in ("de", "en"):
        once = (tmp_path / "text" / f"val.{lang}").read_text(encoding="utf-8")
        (tmp_path / "text" / f"twice.{lang}").write_text(once + once, encoding="utf-8")
    twice = str(tmp_path / "text" / "twice")
    convert_with_options(
        text_options(prefixes={"train": f"{train},{train}"}, thresholds=(3, 3)), tmp_path / "a", progress=False
    )
    convert_with_options(text_options(prefixes={"train": twice}, thresholds=(3, 3)), tmp_path / "b", progress=False)
    for lang in ("de", "en"):
        assert (tmp_path / "a" / f"dict.{lang}.txt").read_bytes() == (tmp_path / "b" / f"dict.{lang}.txt").read_bytes()
    assert len(open_dataset(tmp_path / "a", "train")) == len(open_dataset(tmp_path / "b", "train")) == 2 * 1014


def test_one_file_read_as_both_languages_is_encoded_with_each_dictionary(tmp_path: Path) -> None:
    """``val.en`` a link to ``val.de`` (a copy task): each column through its own dictionary."""
    train = _plain_copy(tmp_path / "text", "val")
    (tmp_path / "text" / "val.en").unlink()
    (tmp_path / "text" / "val.en").symlink_to(tmp_path / "text" / "val.de")
    convert_with_options(text_options(prefixes={"train": train}, thresholds=(0, 3)), tmp_path / "out", progress=False)
    de, en = (Dictionary.load(tmp_path / "out" / f"dict.{lang}.txt") for lang in ("de", "en"))
    assert len(en) < len(de) and min(_real_counts(tmp_path / "out" / "dict.en.txt")) == 3
    words = gz_lines(MULTI30K / "val.de.gz")[0].split()
    ds = open_dataset(tmp_path / "out", "train")
    assert ds.row("source", 0).tolist() == [de.index(w) for w in words] + [de.eos]
    assert ds.row("target", 0).tolist() == [en.index(w) for w in words] + [en.eos]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("sentencepiece")
    return val_sentencepiece(tmp_path_factory.mktemp("spm"), 300)


def test_sentencepiece_model(tmp_path: Path, spm_model: Path) -> None:
    spm = pytest.importorskip("sentencepiece")
    manifest = convert_with_options(text_options(spm_model=str(spm_model)), tmp_path / "out", progress=False)
    de = Dictionary.load(tmp_path / "out" / "dict.de.txt")
    assert "▁Ein" in de.symbols and len(de) <= 320
    processor = spm.SentencePieceProcessor(model_file=str(spm_model))
    line = gz_lines(MULTI30K / "val.de.gz")[0]
    ids = [de.index(p) for p in processor.encode(line, out_type=str)] + [de.eos]
    np.testing.assert_array_equal(open_dataset(tmp_path / "out", "train").row("source", 0).numpy(), ids)
    assert manifest.provenance["sentencepiece_sha256"] == hashlib.sha256(spm_model.read_bytes()).hexdigest()
    assert manifest.provenance["options"]["spm_model"] == str(spm_model)  # type: ignore[index]


def test_sentencepiece_equals_spm_encode_then_fairseq_preprocess(tmp_path: Path, spm_model: Path) -> None:
    """The pieces spm_encode would write (sentencepiece's encode_as_pieces, joined by spaces), binarized by the
    real fairseq-preprocess, against arrowmt's inline sentencepiece in two workers with small chunks."""
    spm = pytest.importorskip("sentencepiece")
    processor = spm.SentencePieceProcessor(model_file=str(spm_model))
    pieces = tmp_path / "pieces"
    pieces.mkdir()
    for name in ("val", "test"):
        for lang in ("de", "en"):
            encoded = [" ".join(processor.encode_as_pieces(line)) for line in gz_lines(MULTI30K / f"{name}.{lang}.gz")]
            (pieces / f"{name}.{lang}").write_text("\n".join(encoded) + "\n", encoding="utf-8")
    common = ["--source-lang", "de", "--target-lang", "en", "--trainpref", str(pieces / "val")]
    common += ["--testpref", str(pieces / "test"), "--joined-dictionary"]
    fairseq_preprocess([*common, "--destdir", str(tmp_path / "fairseq"), "--workers", "1"])
    opts = text_options(spm_model=str(spm_model), joined_dictionary=True, workers=2, chunk_bytes=9000)
    convert_with_options(opts, tmp_path / "ours", progress=False)
    _assert_equals_fairseq_preprocess(tmp_path / "ours", tmp_path / "fairseq", {"train": "train", "test": "test"})


def test_line_count_mismatch_names_both_files(tmp_path: Path) -> None:
    for lang, keep in (("de", 1014), ("en", 1000)):
        (tmp_path / f"val.{lang}").write_text(
            "\n".join(gz_lines(MULTI30K / f"val.{lang}.gz")[:keep]) + "\n", encoding="utf-8"
        )
    with pytest.raises(InputDataError, match=r"1014 in \S*val\.de and 1000 in \S*val\.en"):
        convert_with_options(text_options(prefixes={"train": str(tmp_path / "val")}), tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "arrowmt.json").exists()


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    lines = gz_lines(MULTI30K / "val.de.gz")
    data = ("\n".join(lines[:6]) + "\n").encode() + b"kaputt \xff\xfe text\n" + ("\n".join(lines[7:]) + "\n").encode()
    (tmp_path / "val.de").write_bytes(data)
    (tmp_path / "val.en.gz").write_bytes((MULTI30K / "val.en.gz").read_bytes())
    with pytest.raises(InputDataError, match=r"val\.de.*line 7"):
        convert_with_options(text_options(prefixes={"train": str(tmp_path / "val")}), tmp_path / "out", progress=False)


def test_missing_files_and_bad_options(tmp_path: Path) -> None:
    with pytest.raises(InputDataError, match=r"nothere\.de: text file missing"):
        convert_with_options(
            text_options(prefixes={"train": str(tmp_path / "nothere")}), tmp_path / "out", progress=False
        )
    with pytest.raises(InvalidParameterError, match="tgt_lang"):
        TextConversion(src_lang="de", tgt_lang="de", prefixes={"train": "x"})
    with pytest.raises(InvalidParameterError, match="trainpref"):
        TextConversion(src_lang="de", tgt_lang="en", prefixes={"valid": "x"})


def test_cli_convert_text_and_bad_input(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "arrowmt._cli", "convert", "text", "--src-lang", "de", "--tgt-lang", "en"]
    ok = subprocess.run(
        [*args, "--trainpref", str(MULTI30K / "val"), str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert "1014 rows" in ok.stdout
    again = subprocess.run(
        [*args, "--trainpref", str(MULTI30K / "val"), str(tmp_path / "out"), "--quiet"],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "--overwrite" in again.stderr and "Traceback" not in again.stderr
