"""The fast paths of text conversion: ASCII splitting with its Unicode fallback, pandas-free workers, pool size."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from arrowmt import TextConversion
from arrowmt.testing import UNSPLIT_WHITESPACE, Spilled, _parallelism, open_runner, prefix_files, token_ids, tokenize


def _kept_whole_by_ascii_split(char: str) -> bool:
    return pc.ascii_split_whitespace(pa.array([f"a{char}b"]))[0].as_py() == [f"a{char}b"]


# Every character str.split() cuts at that Arrow's ascii_split_whitespace keeps inside a token.
UNICODE_ONLY = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace() and _kept_whole_by_ascii_split(chr(c))]


def test_the_unicode_only_white_space_is_exactly_the_fallback_class() -> None:
    """The characters that need the Unicode split are the ones the fallback looks for, no more, no fewer."""
    assert UNICODE_ONLY, "ascii_split_whitespace splits at every white space: the fallback would be dead code"
    found = pc.match_substring_regex(pa.array(UNICODE_ONLY), UNSPLIT_WHITESPACE).to_pylist()
    assert all(found)
    others = [chr(c) for c in range(0x3001) if chr(c) not in UNICODE_ONLY and chr(c) not in "\n\r"]
    assert not any(pc.match_substring_regex(pa.array(others), UNSPLIT_WHITESPACE).to_pylist())


@pytest.mark.parametrize("space", UNICODE_ONLY)
def test_text_whose_only_separator_is_unicode_white_space_splits_like_python(space: str) -> None:
    """A chunk whose only non-ASCII separator is one such character: ASCII splitting alone would keep it whole."""
    lines = [f"a{space}b c", f"{space}x{space}{space}y{space}", "ä ö\tü"]
    assert tokenize(pa.array(lines)).to_pylist() == [line.split() for line in lines]


@pytest.mark.parametrize(
    "lines",
    [
        ["  a  b \t c  ", "", "   ", "x\x0by\x0cz\rw", "é ü ß\u200bq", "a b\n", "\n"],
        ["one", "two words", ""],
        [""],
        [],
    ],
)
def test_token_ids_number_each_distinct_token_once_in_first_appearance_order(lines: list[str]) -> None:
    rows = token_ids(pa.array(lines, pa.string()))
    flat = [token for line in lines for token in line.split()]
    assert rows.flatten().dictionary.to_pylist() == list(dict.fromkeys(flat))
    assert rows.flatten().dictionary_decode().to_pylist() == flat
    assert [len(row) for row in rows.to_pylist()] == [len(line.split()) for line in lines]


def pyarrow_in_a_worker() -> tuple[bool, list[int]]:
    """What a worker's first pyarrow conversions do: whether pandas got imported, and the numbers back."""
    values = pa.array(np.arange(3)).to_numpy().tolist()
    return "pandas" in sys.modules, values


def test_worker_processes_convert_without_importing_pandas() -> None:
    """pyarrow imports pandas (0.5 s of CPU) on its first conversion of a NumPy object, unless it cannot."""
    pytest.importorskip("pandas")
    with open_runner(workers=2) as runner:
        results = list(runner.map(_call, [pyarrow_in_a_worker] * 4))
    assert results == [(False, [0, 1, 2])] * 4
    import pandas  # the converting process itself keeps pandas

    assert pandas.__name__ == "pandas"


def _call(fn: object) -> object:
    return fn()  # type: ignore[operator]


def _options(tmp_path: Path, sizes: dict[str, int], **kw: object) -> TextConversion:
    for lang, size in sizes.items():
        (tmp_path / f"t.{lang}").write_bytes(b"w\n" * (size // 2))
    return TextConversion(prefixes={"train": str(tmp_path / "t")}, src_lang="de", tgt_lang="en", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sizes", "workers", "chunk_bytes", "expected"),
    [
        ({"de": 2000, "en": 2000}, 4, 32 << 20, 1),  # a small corpus starts no process
        ({"de": 2000, "en": 2000}, 4, 1000, 4),
        ({"de": 2000, "en": 2000}, 8, 1000, 4),  # no more processes than chunk-sized pieces of text
        ({"de": 3000, "en": 0}, 2, 1000, 2),
        ({"de": 3000, "en": 0}, 1, 1000, 1),
    ],
)
def test_no_more_worker_processes_than_chunks_of_text(
    tmp_path: Path, sizes: dict[str, int], workers: int, chunk_bytes: int, expected: int
) -> None:
    options = _options(tmp_path, sizes, workers=workers, chunk_bytes=chunk_bytes)
    assert _parallelism(options, Spilled(options, prefix_files(options))) == expected
