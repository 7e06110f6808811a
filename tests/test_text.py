"""arrowmt.converters._text: reading, tokenizing and encoding real Multi30k text like fairseq's binarizer."""

from __future__ import annotations

import gzip
import shutil
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import ModuleType

import numpy as np
import pyarrow as pa
import pytest
from conftest import MULTI30K, fairseq_fixture

from arrowmt import Dictionary, InputDataError, InvalidParameterError, MissingDependencyError, VocabularyError
from arrowmt.testing import (
    BadUtf8,
    Encoded,
    TokenizeTask,
    _read_spill,
    check_same_line_count,
    encode,
    encode_sentencepiece,
    encode_token_lists,
    read_lines,
    sentencepiece_pieces,
    split_lines,
    text_chunks,
    tokenize,
    tokenize_chunk,
)

VAL_DE_FIRST = "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"


@pytest.fixture(scope="module")
def fairseq_data() -> ModuleType:
    """fairseq emits deprecation warnings on import; the test suite turns warnings into errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("fairseq.data")


@pytest.fixture(scope="module")
def dict_de() -> Dictionary:
    return Dictionary.load(fairseq_fixture() / "mmap" / "dict.de.txt")


def _gunzip(source: Path, dest: Path) -> Path:
    with gzip.open(source, "rb") as src, dest.open("wb") as out:
        shutil.copyfileobj(src, out)
    return dest


def _write(tmp_path: Path, content: bytes, name: str = "text.txt") -> Path:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(content))
    else:
        path.write_bytes(content)
    return path


def _rows(encoded: Encoded) -> list[list[int]]:
    return [encoded.ragged.row(i).tolist() for i in range(len(encoded.ragged))]


# ----- reading ----------------------------------------------------------------------------------


def test_read_real_gz_equals_plain(tmp_path: Path) -> None:
    plain = _gunzip(MULTI30K / "val.de.gz", tmp_path / "val.de")
    from_gz, from_plain = read_lines(MULTI30K / "val.de.gz"), read_lines(plain)
    assert from_gz.type == pa.string() and from_gz.equals(from_plain)
    assert len(from_gz) == 1014 and from_gz[0].as_py() == VAL_DE_FIRST
    assert from_plain.to_pylist() == plain.read_text("utf-8").split("\n")[:-1]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", []),
        (b"\n", [""]),
        (b"a", ["a"]),
        (b"a\nb", ["a", "b"]),
        (b"a\n\nb\n", ["a", "", "b"]),
        (b"a\r\nb\r\n", ["a", "b"]),
        (b"a\r\r\nb\r", ["a\r", "b"]),  # one CR is stripped, the final line has no newline
        (b"x\ry\n", ["x\ry"]),  # a lone CR inside a line stays
        ("ä\u2028ö\n".encode(), ["ä\u2028ö"]),
    ],
)
@pytest.mark.parametrize("name", ["text.txt", "text.txt.gz"])
def test_read_lines_edge_cases(tmp_path: Path, content: bytes, expected: list[str], name: str) -> None:
    assert read_lines(_write(tmp_path, content, name)).to_pylist() == expected


@pytest.mark.parametrize("name", ["bad.txt", "bad.txt.gz"])
def test_invalid_utf8_names_line_and_offset(tmp_path: Path, name: str) -> None:
    path = _write(tmp_path, b"ok\nfine\nbad \xff\nok\n", name)
    with pytest.raises(InputDataError) as info:
        read_lines(path)
    message = str(info.value)
    assert f"{path}:3:" in message and "0xff" in message and "byte offset 12" in message
    assert "byte 5 of line 3" in message


def test_truncated_multibyte_sequence_at_end(tmp_path: Path) -> None:
    path = _write(tmp_path, "a\nä".encode()[:-1])
    with pytest.raises(InputDataError, match=r":2: expected UTF-8 text, got invalid byte 0xc3 at byte offset 2"):
        read_lines(path)


def test_corrupt_gzip_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(b"hello\n" * 100)[:-12])
    with pytest.raises(InputDataError, match="gzip"):
        read_lines(path)
    with pytest.raises(InputDataError, match="cannot read"):
        read_lines(tmp_path / "absent.txt")


def test_check_same_line_count() -> None:
    check_same_line_count("a.de", 3, "a.en", 3)
    with pytest.raises(InputDataError) as info:
        check_same_line_count("a.de", 3, "a.en", 4)
    assert all(part in str(info.value) for part in ("a.de", "a.en", "3", "4"))


# ----- tokenizing -------------------------------------------------------------------------------

TRICKY = [
    "  a  b \t c  ",
    "",
    "   ",
    "\u00a0x\u2003y\x1cz\x85w\u3000v",  # Unicode whitespace separates
    "\u200bq r\ufeff",  # zero-width space and BOM do not
    "tab\tsep\x0bvt\x0cff",
    "é ü",
]


def test_tokenize_matches_python_split() -> None:
    tokens = tokenize(pa.array(TRICKY))
    assert tokens.to_pylist() == [line.split() for line in TRICKY]
    sliced = tokenize(pa.array(TRICKY).slice(3, 2))
    assert sliced.to_pylist() == [line.split() for line in TRICKY[3:5]]


def test_tokenize_real_text_matches_python_split() -> None:
    lines = read_lines(MULTI30K / "train.en.gz")
    assert tokenize(lines).to_pylist() == [line.split() for line in lines.to_pylist()]


def test_tokenize_rejects_bad_input() -> None:
    with pytest.raises(InvalidParameterError, match="expected a string array"):
        tokenize(pa.array([1]))
    with pytest.raises(InvalidParameterError, match="expected no nulls"):
        tokenize(pa.array(["a", None]))


# ----- encoding ---------------------------------------------------------------------------------


def test_encode_with_unknowns() -> None:
    d = Dictionary.build(pa.array([["a", "b"]], pa.list_(pa.string())), padding_factor=1)
    a, b = d.index("a"), d.index("b")
    encoded = encode(pa.array(["a z <unk> b", "", "  zz  "]), d)
    assert _rows(encoded) == [[a, d.unk, d.unk, b, d.eos], [d.eos], [d.unk, d.eos]]
    assert (encoded.n_tokens, encoded.n_unk, encoded.n_lines) == (8, 2, 3)
    assert encoded.ragged.offsets.dtype == np.int64 and encoded.ragged.values.dtype == np.int32
    no_eos = encode(pa.chunked_array([pa.array(["a z"]), pa.array(["", "b"])]), d, append_eos=False)
    assert _rows(no_eos) == [[a, d.unk], [], [b]] and no_eos.n_tokens == 3
    empty = encode(pa.array([], pa.string()), d)
    assert len(empty.ragged) == 0 and empty.n_tokens == 0


def test_encode_real_val_equals_fairseq(tmp_path: Path, dict_de: Dictionary, fairseq_data: ModuleType) -> None:
    plain = _gunzip(MULTI30K / "val.de.gz", tmp_path / "val.de")
    encoded = encode(read_lines(MULTI30K / "val.de.gz"), dict_de)
    fairseq_dict = fairseq_data.Dictionary.load(str(fairseq_fixture() / "mmap" / "dict.de.txt"))
    replaced = []

    def consumer(word: str, idx: int) -> None:
        if idx == fairseq_dict.unk_index and word != fairseq_dict.unk_word:
            replaced.append(word)

    with plain.open(encoding="utf-8") as handle:
        expected = [
            fairseq_dict.encode_line(line, add_if_not_exist=False, consumer=consumer, append_eos=True).tolist()
            for line in handle
        ]
    assert _rows(encoded) == expected
    assert encoded.n_unk == len(replaced) > 0
    assert encoded.n_tokens == sum(len(row) for row in expected)


def test_encode_lowercased_train_row_matches_fixture(dict_de: Dictionary) -> None:
    line = "zwei junge weiße männer sind im freien in der nähe vieler büsche ."
    encoded = encode(pa.array([line]), dict_de)
    assert encoded.n_unk == 0 and dict_de.decode(encoded.ragged.row(0), include_eos=True) == line + " </s>"


def test_encode_token_lists_large_list(dict_de: Dictionary) -> None:
    tokens = pa.array([["ein", "mann"], ["xyzzy"]], pa.large_list(pa.large_string()))
    encoded = encode_token_lists(tokens, dict_de)
    assert _rows(encoded) == [[5, dict_de.index("mann"), 2], [3, 2]] and encoded.n_unk == 1
    with pytest.raises(InvalidParameterError, match="list<string>"):
        encode_token_lists(pa.array(["ein"]), dict_de)


# ----- chunks -----------------------------------------------------------------------------------

CHUNK_TEXT = "kurz\n\neine sehr lange Zeile " + "x" * 300 + "\r\nä ö ü\nende ohne Zeilenende"


@pytest.mark.parametrize("name", ["text.txt", "text.txt.gz"])
@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 1 << 20])
def test_chunks_are_whole_lines_covering_the_file(tmp_path: Path, name: str, chunk_bytes: int) -> None:
    data = CHUNK_TEXT.encode()
    chunks = list(text_chunks(_write(tmp_path, data, name), chunk_bytes))
    texts = [chunk.read() for chunk in chunks]
    assert b"".join(texts) == data
    assert all(text.endswith(b"\n") for text in texts[:-1]) and texts[-1].endswith(b"ende ohne Zeilenende")
    assert [c.start for c in chunks] == list(np.cumsum([0] + [len(t) for t in texts[:-1]]))
    assert [c.index for c in chunks] == list(range(len(chunks)))
    if chunk_bytes == 1:  # every line is its own chunk
        assert len(chunks) == data.count(b"\n") + 1
    assert sum(c.disk_bytes for c in chunks) == (tmp_path / name).stat().st_size


def test_chunks_of_empty_and_real_gzip(tmp_path: Path) -> None:
    assert list(text_chunks(_write(tmp_path, b"", "empty.txt"), 8)) == []
    assert list(text_chunks(_write(tmp_path, b"", "empty.txt.gz"), 8)) == []
    chunks = list(text_chunks(MULTI30K / "val.de.gz", 10_000))
    assert len(chunks) > 5
    lines = pa.concat_arrays([split_lines(c.read()) for c in chunks])
    assert lines.equals(read_lines(MULTI30K / "val.de.gz"))


def test_corrupt_gzip_chunks(tmp_path: Path) -> None:
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(gzip.compress(b"hello\n" * 100)[:-12])
    with pytest.raises(InputDataError, match=r"cut\.txt\.gz: expected a complete gzip file"):
        list(text_chunks(path, 64))


def test_lines_with_newlines_tokenize_like_stripped_lines() -> None:
    data = ("\n".join(TRICKY) + "\r\nlast\r").encode()
    kept, stripped = split_lines(data, keep_newlines=True), split_lines(data)
    assert stripped.to_pylist() == [*TRICKY[:-1], TRICKY[-1], "last"]
    assert kept.to_pylist()[0] == TRICKY[0] + "\n"
    assert (
        tokenize(kept).to_pylist() == tokenize(stripped).to_pylist() == [line.split() for line in stripped.to_pylist()]
    )


def test_split_lines_reports_where_utf8_breaks() -> None:
    with pytest.raises(BadUtf8) as info:
        split_lines(b"ok\nfine\nbad \xff\n")
    bad = info.value.bad
    assert (bad.offset, bad.line, bad.column, bad.byte) == (12, 2, 4, 0xFF)
    message = str(bad.error("f.txt", first_line=10, first_byte=1000))
    assert message.startswith("f.txt:13: ") and "byte offset 1012 (byte 5 of line 13)" in message


@pytest.mark.parametrize("count", [True, False])
def test_tokenize_chunk_spills_local_ids_and_counts(tmp_path: Path, count: bool) -> None:
    lines = read_lines(MULTI30K / "val.en.gz").to_pylist()
    path = _write(tmp_path, ("\n".join(lines) + "\n").encode(), "val.en")
    (chunk,) = text_chunks(path, 1 << 20)
    result = tokenize_chunk(TokenizeTask(chunk, str(tmp_path / "spill.arrow"), count))
    words = [line.split() for line in lines]
    assert (result.rows, result.tokens) == (len(lines), sum(map(len, words)))
    assert result.bad is None
    spilled = _read_spill(str(tmp_path / "spill.arrow"))
    assert spilled.to_pylist() == words  # dictionary-encoded: each distinct token stored once
    assert sorted(spilled.values.dictionary.to_pylist()) == sorted({w for row in words for w in row})
    if count:
        assert result.vocabulary is not None and result.counts is not None
        counted = dict(zip(result.vocabulary.to_pylist(), result.counts.tolist(), strict=True))
        assert counted == Counter(word for row in words for word in row)
    else:
        assert result.vocabulary is None and result.counts is None


def test_tokenize_chunk_returns_bad_utf8_instead_of_raising(tmp_path: Path) -> None:
    path = _write(tmp_path, b"gut\n\xc3(\n", "bad.txt")
    (chunk,) = text_chunks(path, 1 << 20)
    result = tokenize_chunk(TokenizeTask(chunk, str(tmp_path / "spill.arrow"), True))
    assert result.bad is not None and (result.bad.line, result.bad.byte) == (1, 0xC3)
    assert not (tmp_path / "spill.arrow").exists()


# ----- sentencepiece ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spm = pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("spm")
    text = folder / "train.txt"
    text.write_text("\n".join(read_lines(MULTI30K / "val.en.gz").to_pylist()) + "\n", "utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(folder / "sp"),
        vocab_size=200,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
    )
    return folder / "sp.model"


def test_encode_sentencepiece(sentencepiece_model: Path) -> None:
    spm = pytest.importorskip("sentencepiece")
    lines = read_lines(MULTI30K / "test.en.gz")
    pieces = spm.SentencePieceProcessor(model_file=str(sentencepiece_model)).encode(lines.to_pylist(), out_type=str)
    assert sentencepiece_pieces(lines, sentencepiece_model).to_pylist() == pieces
    d = Dictionary.build(sentencepiece_pieces(lines[:500], sentencepiece_model))
    encoded = encode_sentencepiece(lines, sentencepiece_model, d)
    expected = [[d.index(p) for p in row] + [d.eos] for row in pieces]
    assert _rows(encoded) == expected
    assert encoded.n_unk == sum(p not in d for row in pieces for p in row) > 0


def test_sentencepiece_missing_dependency(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'arrowmt\[sentencepiece\]'"):
        encode_sentencepiece(pa.array(["a"]), tmp_path / "sp.model", Dictionary())


def test_sentencepiece_bad_model(tmp_path: Path) -> None:
    pytest.importorskip("sentencepiece")
    with pytest.raises(InvalidParameterError, match="model_path"):
        encode_sentencepiece(pa.array(["a"]), tmp_path / "absent.model", Dictionary())
    junk = _write(tmp_path, b"not a model", "junk.model")
    with pytest.raises(VocabularyError, match=r"junk\.model"):
        encode_sentencepiece(pa.array(["a"]), junk, Dictionary())
