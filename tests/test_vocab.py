"""arrowmt.format._vocab.Dictionary against the real fairseq dict.txt files and fairseq's own Dictionary."""

from __future__ import annotations

import gzip
import pickle
import shutil
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import MULTI30K, fairseq_fixture

from arrowmt import Dictionary, InvalidParameterError, VocabularyError
from arrowmt.testing import read_lines, tokenize


def dict_file(lang: str) -> Path:
    """The dictionary fairseq-preprocess wrote for ``lang`` (de, en)."""
    return fairseq_fixture() / "mmap" / f"dict.{lang}.txt"


def _quiet_import(name: str) -> ModuleType:
    """fairseq emits deprecation warnings on import; the test suite turns warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip(name)


@pytest.fixture(scope="module")
def fairseq_data() -> ModuleType:
    return _quiet_import("fairseq.data")


@pytest.fixture(scope="module")
def translation_task() -> type:
    return _quiet_import("fairseq.tasks.translation").TranslationTask


def _write(tmp_path: Path, content: bytes, name: str = "dict.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def _gunzip(source: Path, dest: Path) -> Path:
    with gzip.open(source, "rb") as src, dest.open("wb") as out:
        shutil.copyfileobj(src, out)
    return dest


# ----- loading and saving the real dictionaries ------------------------------------------------


def test_load_real_dictionary() -> None:
    d = Dictionary.load(dict_file("de"))
    lines = dict_file("de").read_text(encoding="utf-8").splitlines()  # the padding symbols included
    assert len(d) == 4 + len(lines) and len(d) % 8 == 0
    assert d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert (d.bos, d.pad, d.eos, d.unk, d.nspecial) == (0, 1, 2, 3, 4)
    assert d.index(".") == 4 and lines[0] == f". {d.counts[4]}" and d.counts[4] > d.counts[5] > 1000
    assert d.index("ein") == 5 and d.symbol(5) == "ein"
    assert d.index("männer") > 4 and "männer" in d
    assert d.index("Ein") == d.unk and d.index("no-such-word") == d.unk
    padding = [symbol for symbol in d.symbols if symbol.startswith("madeupword")]  # fairseq pads to 8
    assert d.symbols[len(d) - len(padding) :] == padding == [f"madeupword{i:04d}" for i in range(len(padding))]
    assert d.counts[len(d) - len(padding) :] == [0] * len(padding) and len(padding) > 0


@pytest.mark.parametrize("lang", ["de", "en"])
def test_save_round_trip_is_byte_identical(tmp_path: Path, lang: str) -> None:
    path = dict_file(lang)
    d = Dictionary.load(path)
    out = tmp_path / "sub" / "dict.txt"
    d.save(out)
    assert out.read_bytes() == path.read_bytes()
    assert Dictionary.load(out) == d
    assert [p.name for p in out.parent.iterdir()] == ["dict.txt"]  # no temporary left behind


def test_load_matches_fairseq_on_real_dictionary(fairseq_data: ModuleType) -> None:
    ours = Dictionary.load(dict_file("de"))
    theirs = fairseq_data.Dictionary.load(str(dict_file("de")))
    assert ours.symbols == theirs.symbols and ours.counts == theirs.count


def test_sha256_is_stable_and_depends_on_symbols_only() -> None:
    a, b = Dictionary.load(dict_file("de")), Dictionary.load(dict_file("de"))
    assert a.sha256() == b.sha256() and len(a.sha256()) == 64
    assert a.sha256() != Dictionary.load(dict_file("en")).sha256()
    recounted = Dictionary(a.symbols, [7] * len(a))
    assert recounted.sha256() == a.sha256()
    swapped = Dictionary([*a.symbols[:4], a.symbols[5], a.symbols[4], *a.symbols[6:]], a.counts)
    assert swapped.sha256() != a.sha256()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    assert Dictionary([*specials, "ab", "c"]).sha256() != Dictionary([*specials, "a", "bc"]).sha256()


def test_pickle_round_trip() -> None:
    d = Dictionary.load(dict_file("en"))
    d.encode_tokens(pa.array(["a"]))  # fills the lookup cache, which must not travel
    copy = pickle.loads(pickle.dumps(d))
    assert copy == d and copy.index("man") == d.index("man")


# ----- malformed dictionary files ---------------------------------------------------------------

BAD_FILES = {
    "no-count": (b"a 1\nb\n", ":2:", "expected '<symbol> <count>"),
    "bad-count": (b"a 1\nb x\n", ":2:", "'x'"),
    "float-count": (b"a 1.5\n", ":1:", "'1.5'"),
    "empty-line": (b"a 1\n\nb 2\n", ":2:", "expected '<symbol> <count>"),
    "duplicate": (b"a 1\nb 2\na 3\n", ":3:", "first at line 1"),
    "duplicate-special": (b"x 1\n<unk> 5\n", ":2:", "special symbol"),
    "flag-without-count": (b"a #fairseq:overwrite\n", ":1:", "expected '<symbol> <count>"),
    "flag-bad-count": (b"a 1\na q #fairseq:overwrite\n", ":2:", "'q'"),
    "bad-utf8": (b"a 1\nb\xff 2\n", ":2:", "0xff"),
    "bad-utf8-after-cr": (b"a 1\rb 2\r\nc\xc3 2\n", ":3:", "0xc3"),
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_dictionary_file(tmp_path: Path, name: str) -> None:
    content, where, what = BAD_FILES[name]
    path = _write(tmp_path, content)
    with pytest.raises(VocabularyError) as info:
        Dictionary.load(path)
    message = str(info.value)
    assert str(path) + where in message and what in message


def test_count_out_of_range(tmp_path: Path) -> None:
    path = _write(tmp_path, b"a 99999999999999999999999\n")
    with pytest.raises(VocabularyError, match=r":1: expected an integer count"):
        Dictionary.load(path)


def test_missing_dictionary_file(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="cannot read dictionary"):
        Dictionary.load(tmp_path / "absent.txt")


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_fairseq_rejects_the_same_files(tmp_path: Path, name: str, fairseq_data: ModuleType) -> None:
    path = _write(tmp_path, BAD_FILES[name][0])
    with pytest.raises(Exception):  # noqa: B017 - fairseq raises ValueError, RuntimeError or Exception
        fairseq_data.Dictionary.load(str(path))


ODD_BUT_VALID = (
    "a b 5\n"  # symbol with a space: split on the last one
    "x 1\n"
    "x 7 #fairseq:overwrite\n"
    "<unk> 2 #fairseq:overwrite\n"
    "c +3\n"
    "d 1_000\n"
    "e 4 \t \r\n"  # trailing whitespace and CRLF
    "f 5\rg 6\n"  # a lone CR ends a line (universal newlines)
    " 9\n"  # the empty symbol
    "\u00a0 9\n"
    "h 8\u00a0\n"  # trailing no-break space is whitespace for str.rstrip
    "i -2\n"
    "j \u0663"  # Arabic-indic three, no final newline
).encode("utf-8")


def test_odd_but_valid_file(tmp_path: Path) -> None:
    d = Dictionary.load(_write(tmp_path, ODD_BUT_VALID))
    assert d.symbols[4:] == ["a b", "x", "x", "<unk>", "c", "d", "e", "f", "g", "", "\u00a0", "h", "i", "j"]
    assert d.counts[4:] == [5, 1, 7, 2, 3, 1000, 4, 5, 6, 9, 9, 8, -2, 3]
    assert d.index("x") == 6 and d.index("<unk>") == 7 and d.index("a b") == 4
    out = tmp_path / "again.txt"
    d.save(out)
    assert "x 7 #fairseq:overwrite\n<unk> 2 #fairseq:overwrite\n" in out.read_text("utf-8")
    assert Dictionary.load(out) == d


def test_odd_but_valid_file_matches_fairseq(tmp_path: Path, fairseq_data: ModuleType) -> None:
    path = _write(tmp_path, ODD_BUT_VALID)
    ours, theirs = Dictionary.load(path), fairseq_data.Dictionary.load(str(path))
    assert ours.symbols == theirs.symbols and ours.counts == theirs.count
    assert [ours.index(s) for s in ours.symbols] == [theirs.index(s) for s in ours.symbols]


# ----- lookups ----------------------------------------------------------------------------------


def test_encode_tokens_with_unknown_fallback() -> None:
    d = Dictionary.load(dict_file("de"))
    tokens = ["ein", "mann", "Zzyzx", "<unk>", "</s>", "."]
    expected = np.array([d.index(t) for t in tokens], dtype=np.int32)
    ids = d.encode_tokens(pa.array(tokens))
    assert ids.dtype == np.int32 and np.array_equal(ids, expected)
    assert ids[2] == d.unk and ids[4] == d.eos
    ids2, unknown = d.lookup(pa.chunked_array([pa.array(t, pa.large_string()) for t in (tokens[:2], tokens[2:])]))
    assert np.array_equal(ids2, expected) and unknown.tolist() == [False, False, True, False, False, False]
    assert d.encode_tokens(pa.array([], pa.string())).shape == (0,)


def test_encode_tokens_rejects_bad_input() -> None:
    d = Dictionary()
    with pytest.raises(InvalidParameterError, match="expected a string array"):
        d.encode_tokens(pa.array([1, 2]))
    with pytest.raises(InvalidParameterError, match="expected no nulls"):
        d.encode_tokens(pa.array(["a", None]))


def test_decode_equals_fairseq_string(fairseq_data: ModuleType) -> None:
    """``decode`` shows what fairseq's ``Dictionary.string`` shows: no ``</s>``, other specials and ids as they are."""
    ours, theirs = Dictionary.load(dict_file("de")), fairseq_data.Dictionary.load(str(dict_file("de")))
    for row in ([5, 9, 4, ours.eos], [ours.unk, 7, ours.eos, 9], [ours.pad, 5, ours.eos, ours.eos], []):
        assert ours.decode(row) == theirs.string(torch.tensor(row, dtype=torch.long))
        assert ours.decode(row, include_eos=True) == theirs.string(
            torch.tensor(row, dtype=torch.long), include_eos=True
        )


def test_decode_and_symbol() -> None:
    d = Dictionary.load(dict_file("de"))
    ids = d.encode_tokens(pa.array(["zwei", "junge", "männer", "."]))
    assert d.decode([*ids, d.eos]) == "zwei junge männer ."  # as fairseq's Dictionary.string: no </s>
    assert d.decode([*ids, d.eos], include_eos=True) == "zwei junge männer . </s>"
    assert d.decode([d.eos, d.pad, d.unk, d.eos]) == "<pad> <unk>"
    assert d.decode([]) == ""
    with pytest.raises(InvalidParameterError, match="expected values in"):
        d.decode([0, len(d)])
    with pytest.raises(InvalidParameterError, match="expected 0 <= id"):
        d.symbol(-1)


def test_constructor_checks() -> None:
    assert Dictionary().symbols == ["<s>", "<pad>", "</s>", "<unk>"] and Dictionary().counts == [1, 1, 1, 1]
    with pytest.raises(InvalidParameterError, match="expected to start with"):
        Dictionary(["a", "b", "c", "d"])
    with pytest.raises(InvalidParameterError, match="one count per symbol"):
        Dictionary(["<s>", "<pad>", "</s>", "<unk>"], [1, 1])
    with pytest.raises(InvalidParameterError, match="int64"):
        Dictionary(["<s>", "<pad>", "</s>", "<unk>"], [1, 1, 1, 2**70])


# ----- building ---------------------------------------------------------------------------------


def _lists(rows: list[list[str]]) -> pa.ListArray:
    return pa.array(rows, pa.list_(pa.string()))


def test_build_small_by_hand() -> None:
    d = Dictionary.build(_lists([["b", "a", "b"], ["a", "c"], ["<unk>", "c", "c"], []]))
    assert d.symbols == ["<s>", "<pad>", "</s>", "<unk>", "c", "a", "b", "madeupword0000"]
    assert d.counts == [1, 1, 5, 2, 3, 2, 2, 0]
    two = Dictionary.build(_lists([["b", "a"]]), pa.chunked_array([_lists([["a"], ["z"]])]), padding_factor=1)
    assert two.symbols[4:] == ["a", "b", "z"] and two.counts[2] == 4


def test_build_threshold_nwords_and_padding() -> None:
    rows = _lists([["a"] * 5 + ["b"] * 3 + ["c"] * 2 + ["d"]])
    assert Dictionary.build(rows, threshold=2, padding_factor=1).symbols[4:] == ["a", "b", "c"]
    assert Dictionary.build(rows, nwords=6, padding_factor=1).symbols[4:] == ["a", "b"]
    assert Dictionary.build(rows, nwords=2, padding_factor=1).symbols[4:] == []
    assert len(Dictionary.build(rows, padding_factor=16)) == 16
    assert len(Dictionary.build(rows, threshold=2, padding_factor=0)) == 7
    with pytest.raises(InvalidParameterError, match="padding_factor"):
        Dictionary.build(rows, padding_factor=-8)
    with pytest.raises(InvalidParameterError, match="list<string>"):
        Dictionary.build(pa.array(["a"]))


def test_build_skips_existing_madeup_names() -> None:
    d = Dictionary.build(_lists([["madeupword0000", "madeupword0002"]]))
    assert d.symbols[4:] == ["madeupword0000", "madeupword0002", "madeupword0001", "madeupword0003"]


def test_build_real_text_properties() -> None:
    d = Dictionary.build(tokenize(read_lines(MULTI30K / "train.de.gz")))
    assert len(d) % 8 == 0 and d.counts[d.eos] == 29000 + 1
    regular = np.array(d.counts[4:])
    real = regular[regular > 0]
    assert np.all(np.diff(real) <= 0) and d.index("Ein") == 4


BUILD_CASES = {
    "train.de-default": ("train.de.gz", {}),
    "val.en-threshold-nwords": ("val.en.gz", {"threshold": 2, "nwords": 300, "padding_factor": 16}),
    "val.de-threshold-nopad": ("val.de.gz", {"threshold": 3, "padding_factor": 1}),
}


@pytest.mark.parametrize("case", list(BUILD_CASES))
def test_build_matches_fairseq_preprocess(tmp_path: Path, case: str, translation_task: type) -> None:
    name, options = BUILD_CASES[case]
    plain = _gunzip(MULTI30K / name, tmp_path / name.removesuffix(".gz"))
    ours = Dictionary.build(tokenize(read_lines(plain)), **options)
    theirs = translation_task.build_dictionary([str(plain)], **options)
    assert ours.symbols == theirs.symbols and ours.counts == theirs.count


def test_build_special_and_madeup_tokens_match_fairseq(tmp_path: Path, translation_task: type) -> None:
    text = "b a <unk> </s>\nmadeupword0001 a  c\n\n<s> <pad> z\n"
    plain = _write(tmp_path, text.encode("utf-8"), "small.txt")
    ours = Dictionary.build(tokenize(read_lines(plain)))
    theirs = translation_task.build_dictionary([str(plain)])
    assert ours.symbols == theirs.symbols and ours.counts == theirs.count
