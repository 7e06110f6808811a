"""Writing split files piece by piece (bounded memory): the same bytes as writing them whole."""

from __future__ import annotations

import itertools
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import arrowmt.writing._writer as writer
from arrowmt import FormatError, InputDataError, InvalidParameterError, convert_fairseq
from arrowmt.testing import (
    ColumnData,
    Ragged,
    SplitMetadata,
    choose_rows_per_batch,
    choose_rows_per_batch_streaming,
    column_info,
    open_indexed,
    open_split_writer,
    read_indexed,
    write_split,
)
from tests.conftest import fairseq_fixture


def _column(rows: Ragged, vocab: int = 100) -> ColumnData:
    return ColumnData(rows, "xx", "dict.xx.txt", "0" * 64, vocab, "test input")


def _random_ragged(rng: np.random.Generator, n: int, vocab: int = 100) -> Ragged:
    lengths = rng.integers(0, 9, n)
    return Ragged.from_lengths(lengths, rng.integers(0, vocab, int(lengths.sum())).astype(np.int32))


def _cut(ragged: Ragged, cuts: list[int]) -> list[Ragged]:
    bounds = [0, *cuts, len(ragged)]
    pieces = []
    for start, stop in itertools.pairwise(bounds):
        offsets = ragged.offsets[start : stop + 1]
        pieces.append(Ragged(offsets - offsets[0], ragged.values[offsets[0] : offsets[-1]]))
    return pieces


def test_streaming_batch_choice_equals_in_memory() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        lengths = rng.integers(0, 12, int(rng.integers(0, 70)))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        pieces = np.split(lengths, np.sort(rng.integers(0, lengths.size + 1, int(rng.integers(0, 6)))))
        requested, limit = int(rng.integers(1, 33)), int(rng.integers(11, 90))
        in_memory = _outcome(lambda: choose_rows_per_batch([offsets], requested, limit))  # noqa: B023
        streamed = _outcome(lambda: choose_rows_per_batch_streaming([lambda: iter(pieces)], requested, limit))  # noqa: B023
        assert in_memory == streamed, (lengths.tolist(), requested, limit)


def _outcome(choose: Callable[[], int]) -> int | str:
    try:
        return choose()
    except InputDataError as exc:
        return str(exc)


@pytest.mark.parametrize("seed", range(4))
def test_pieces_of_any_size_give_the_same_file(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    source, target = _random_ragged(rng, 300), _random_ragged(rng, 300)
    meta = write_split(tmp_path / "whole.arrow", "x", {"source": _column(source), "target": _column(target)},
                       rows_per_batch=16)  # fmt: skip
    cuts = sorted(set(rng.integers(0, 301, 12).tolist()))
    with open_split_writer(tmp_path / "pieces.arrow", meta) as stream:
        for src, tgt in zip(_cut(source, cuts), _cut(target, cuts), strict=True):
            stream.write({"source": src, "target": tgt})
    assert (tmp_path / "pieces.arrow").read_bytes() == (tmp_path / "whole.arrow").read_bytes()


def test_streaming_writer_checks_totals_and_leaves_nothing(tmp_path: Path) -> None:
    rows = Ragged.from_rows([[4, 5, 2], [7, 2]])
    info = column_info("tokens", _column(rows), 5)
    meta = SplitMetadata("x", 2, 16, {"tokens": info})
    expected = r"split 'x': expected 2 rows \(as its metadata says\), got 1"
    with pytest.raises(InputDataError, match=expected), open_split_writer(tmp_path / "x.arrow", meta) as stream:
        stream.write({"tokens": _cut(rows, [1])[0]})
    wrong_tokens = SplitMetadata("x", 2, 16, {"tokens": column_info("tokens", _column(rows), 6)})
    with (
        pytest.raises(InputDataError, match=r"column 'tokens': expected 6 tokens .* got 5"),
        open_split_writer(tmp_path / "x.arrow", wrong_tokens) as stream,
    ):
        stream.write({"tokens": rows})
    two = SplitMetadata("x", 2, 16, {"a": info, "b": info})
    with (
        pytest.raises(InputDataError, match=r"same number of rows"),
        open_split_writer(tmp_path / "x.arrow", two) as stream,
    ):
        stream.write({"a": rows, "b": _cut(rows, [1])[0]})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("layout", ["mmap", "lazy"])
def test_fairseq_files_read_block_by_block_give_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    prefix = fairseq_fixture() / layout / "valid.de-en.de"
    whole = write_split(tmp_path / "whole.arrow", "valid", {"source": _column(read_indexed(prefix), 20000)})
    monkeypatch.setattr(writer, "PIECE_ROWS", 37)  # many pieces, none aligned with the record batches
    rows = open_indexed(prefix, block_rows=37)
    assert (len(rows), rows.tokens) == (whole.rows, whole.columns["source"].tokens)
    blocks = write_split(tmp_path / "blocks.arrow", "valid", {"source": _column(rows, 20000)})
    assert blocks == whole
    assert (tmp_path / "blocks.arrow").read_bytes() == (tmp_path / "whole.arrow").read_bytes()


def test_convert_fairseq_streams_every_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    convert_fairseq(fairseq_fixture() / "mmap", tmp_path / "whole", progress=False)
    monkeypatch.setattr(writer, "PIECE_ROWS", 1000)
    convert_fairseq(fairseq_fixture() / "mmap", tmp_path / "pieces", progress=False)
    for name in ("train.arrow", "valid.arrow", "test.arrow", "arrowmt.json"):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "pieces" / name).read_bytes()


def _copy(tmp_path: Path, name: str = "valid.de-en.de") -> Path:
    for suffix in (".idx", ".bin"):
        shutil.copy(fairseq_fixture() / "mmap" / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path / name


def test_block_checks_name_the_row_in_the_whole_file(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    idx = Path(f"{prefix}.idx")
    data = bytearray(idx.read_bytes())
    (count,) = struct.unpack_from("<Q", data, 18)
    pointer = 26 + 4 * count + 8 * 700
    struct.pack_into("<q", data, pointer, struct.unpack_from("<q", data, pointer)[0] + 2)
    idx.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"row 700: expected byte pointer"):
        open_indexed(prefix, block_rows=64)
    with pytest.raises(FormatError, match=r"row 700: expected byte pointer"):
        read_indexed(prefix)


def test_short_bin_names_the_first_row_that_does_not_fit_across_blocks(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    bin_path = Path(f"{prefix}.bin")
    whole = read_indexed(prefix)
    bin_path.write_bytes(bin_path.read_bytes()[: 2 * int(whole.offsets[900])])  # rows 0..899 fit
    for opener in (lambda: open_indexed(prefix, block_rows=50), lambda: read_indexed(prefix)):
        with pytest.raises(FormatError, match="row 900 is the first that does not fit"):
            opener()


@pytest.mark.parametrize("bad", [0, 2.5, True])
def test_piece_rows_is_checked(tmp_path: Path, bad: object) -> None:
    rows = Ragged.from_rows([[4, 5, 2], [7, 2]])
    meta = SplitMetadata("x", 2, 16, {"tokens": column_info("tokens", _column(rows), 5)})
    with (
        pytest.raises(InvalidParameterError, match="piece_rows"),
        open_split_writer(tmp_path / "x.arrow", meta, piece_rows=bad) as stream,  # type: ignore[arg-type]
    ):
        stream.write({"tokens": rows})
    assert not (tmp_path / "x.arrow").exists()
