"""Tests for arrowmt.converters._fairseq_binary: real fairseq-preprocess output and synthetic files."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from arrowmt import FormatError, InputDataError
from arrowmt.testing import Ragged, detect_index_format, read_document_index, read_indexed

SPLITS = ("train", "valid", "test")
LANGS = ("de", "en")
REFERENCE_DE = "zwei junge weiße männer sind im freien in der nähe vieler büsche ."
ROWS = [[5, 6, 7, 2], [], [9, 2], [4, 4, 4, 4, 4, 2]]
INT_CODES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2", 9: "<u4", 10: "<u8"}


# ---------------------------------------------------------------- synthetic writers


def write_mmap(
    prefix: Path,
    rows: list[list[int]],
    code: int = 8,
    dtype: str = "<u2",
    doc_idx: list[int] | None = None,
    sizes: list[int] | None = None,
    pointers: list[int] | None = None,
    version: int = 1,
    magic: bytes = b"MMIDIDX\x00\x00",
) -> tuple[Path, Path]:
    """Write a fairseq mmap (or, with ``doc_idx``, Megatron-LM) ``.idx``/``.bin`` pair."""
    itemsize = np.dtype(dtype).itemsize
    sizes_arr = np.array(sizes if sizes is not None else [len(r) for r in rows], dtype="<i4")
    cum = np.concatenate([[0], np.cumsum([len(r) for r in rows])])[:-1] * itemsize
    ptr_arr = np.array(pointers if pointers is not None else cum, dtype="<i8")
    header = magic + struct.pack("<QBQ", version, code, len(sizes_arr))
    if doc_idx is not None:
        header += struct.pack("<Q", len(doc_idx))
    body = sizes_arr.tobytes() + ptr_arr.tobytes()
    if doc_idx is not None:
        body += np.array(doc_idx, dtype="<i8").tobytes()
    idx, bin_path = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    idx.write_bytes(header + body)
    flat = [t for r in rows for t in r]
    bin_path.write_bytes(np.array(flat, dtype=dtype).tobytes())
    return idx, bin_path


def write_legacy(
    prefix: Path,
    rows: list[list[int]],
    code: int = 4,
    dtype: str = "<i4",
    element_size: int | None = None,
    dim_offsets: list[int] | None = None,
    data_offsets: list[int] | None = None,
    sizes: list[int] | None = None,
    version: int = 1,
) -> tuple[Path, Path]:
    """Write a legacy (``lazy``/``cached``) ``.idx``/``.bin`` pair storing ids + 1, as fairseq does."""
    lengths = [len(r) for r in rows]
    dims = dim_offsets if dim_offsets is not None else list(range(len(rows) + 1))
    data = data_offsets if data_offsets is not None else [0, *np.cumsum(lengths).tolist()]
    size_list = sizes if sizes is not None else lengths
    esize = element_size if element_size is not None else np.dtype(dtype).itemsize
    header = b"TNTIDX\x00\x00" + struct.pack("<5Q", version, code, esize, len(rows), len(size_list))
    arrays = np.array([*dims, *data, *size_list], dtype="<i8").tobytes()
    idx, bin_path = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
    idx.write_bytes(header + arrays)
    flat = np.array([t + 1 for r in rows for t in r], dtype=dtype)
    bin_path.write_bytes(flat.tobytes())
    return idx, bin_path


def as_rows(ragged: Ragged) -> list[list[int]]:
    return [ragged.row(i).tolist() for i in range(len(ragged))]


def load_dict(path: Path) -> list[str]:
    """fairseq Dictionary symbols: 4 implicit specials, then one ``symbol count`` per line."""
    symbols = ["<s>", "<pad>", "</s>", "<unk>"]
    for line in path.read_text(encoding="utf-8").splitlines():
        symbols.append(line.rsplit(" ", 1)[0])
    return symbols


def assert_raises(exc: type[Exception], prefix: Path, *needles: object) -> None:
    """read_indexed(prefix) raises ``exc`` and its message names the file and every needle."""
    with pytest.raises(exc) as info:
        read_indexed(prefix)
    message = str(info.value)
    assert prefix.name in message
    for needle in needles:
        assert str(needle) in message, (needle, message)


# ---------------------------------------------------------------- real data


@pytest.mark.parametrize("impl", ["mmap", "lazy"])
def test_reference_sentence(impl: str, fairseq_mmap_dir: Path, fairseq_lazy_dir: Path) -> None:
    folder = fairseq_mmap_dir if impl == "mmap" else fairseq_lazy_dir
    ragged = read_indexed(folder / "train.de-en.de")
    symbols = load_dict(folder / "dict.de.txt")
    row = ragged.row(0)
    assert int(row[-1]) == 2
    assert " ".join(symbols[i] for i in row[:-1]) == REFERENCE_DE
    assert len(ragged) == 29000


def test_real_formats_detected(fairseq_mmap_dir: Path, fairseq_lazy_dir: Path) -> None:
    assert detect_index_format(fairseq_mmap_dir / "train.de-en.de.idx") == "mmap"
    assert detect_index_format(fairseq_lazy_dir / "train.de-en.de.idx") == "legacy"
    assert read_document_index(fairseq_mmap_dir / "train.de-en.de") is None
    assert read_document_index(fairseq_lazy_dir / "train.de-en.de") is None


def test_mmap_values_are_readonly_memmap(fairseq_mmap_dir: Path) -> None:
    ragged = read_indexed(str(fairseq_mmap_dir / "valid.de-en.en"))
    assert isinstance(ragged.values, np.memmap)
    assert ragged.values.dtype == np.uint16
    assert not ragged.values.flags.writeable
    assert ragged.offsets.dtype == np.int64
    with pytest.raises(ValueError):
        ragged.values[0] = 1


def test_mmap_and_lazy_identical(fairseq_mmap_dir: Path, fairseq_lazy_dir: Path) -> None:
    for split in SPLITS:
        for lang in LANGS:
            mmap = read_indexed(fairseq_mmap_dir / f"{split}.de-en.{lang}")
            lazy = read_indexed(fairseq_lazy_dir / f"{split}.de-en.{lang}")
            np.testing.assert_array_equal(mmap.offsets, lazy.offsets)
            np.testing.assert_array_equal(mmap.values, lazy.values)
            ends = mmap.values[mmap.offsets[1:] - 1]
            assert (ends == 2).all()


@pytest.fixture(scope="module")
def fairseq_indexed() -> ModuleType:
    """fairseq.data.indexed_dataset, imported with its own deprecation warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("fairseq")
        from fairseq.data import indexed_dataset

    return indexed_dataset


def fairseq_rows(dataset: object, n: int) -> list[list[int]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [dataset[i].tolist() for i in range(n)]  # type: ignore[index]


def test_mmap_matches_fairseq(fairseq_indexed: ModuleType, fairseq_mmap_dir: Path) -> None:
    for split in SPLITS:
        for lang in LANGS:
            prefix = str(fairseq_mmap_dir / f"{split}.de-en.{lang}")
            ours = read_indexed(prefix)
            for ds in (
                fairseq_indexed.MMapIndexedDataset(prefix),
                fairseq_indexed.make_dataset(prefix, "mmap"),
            ):
                assert len(ds) == len(ours)
                assert fairseq_rows(ds, len(ds)) == as_rows(ours)


def test_lazy_matches_fairseq(fairseq_indexed: ModuleType, fairseq_lazy_dir: Path) -> None:
    """fairseq's training path (load_indexed_dataset) reads legacy data with fix_lua_indexing=True."""
    for split in SPLITS:
        for lang in LANGS:
            prefix = str(fairseq_lazy_dir / f"{split}.de-en.{lang}")
            rows = as_rows(read_indexed(prefix))
            lazy = fairseq_indexed.IndexedDataset(prefix, fix_lua_indexing=True)
            assert fairseq_rows(lazy, len(lazy)) == rows
            made = fairseq_indexed.make_dataset(prefix, "lazy", fix_lua_indexing=True)
            assert fairseq_rows(made, len(made)) == rows
    # Without fix_lua_indexing (the constructor's default) fairseq returns the stored ids + 1.
    raw = fairseq_indexed.IndexedDataset(prefix)
    assert fairseq_rows(raw, 3) == [[t + 1 for t in row] for row in rows[:3]]


# ---------------------------------------------------------------- synthetic: layouts and dtypes


@pytest.mark.parametrize("code", sorted(INT_CODES))
def test_mmap_dtype_codes(tmp_path: Path, code: int) -> None:
    dtype = INT_CODES[code]
    write_mmap(tmp_path / "d", ROWS, code=code, dtype=dtype)
    ragged = read_indexed(tmp_path / "d")
    assert ragged.values.dtype == np.dtype(dtype)
    assert isinstance(ragged.values, np.memmap)
    assert as_rows(ragged) == ROWS


@pytest.mark.parametrize("code", sorted(INT_CODES))
def test_legacy_dtype_codes(tmp_path: Path, code: int) -> None:
    dtype = INT_CODES[code]
    write_legacy(tmp_path / "d", ROWS, code=code, dtype=dtype)
    ragged = read_indexed(tmp_path / "d")
    assert detect_index_format(tmp_path / "d.idx") == "legacy"
    assert ragged.values.dtype == np.dtype(dtype)
    assert as_rows(ragged) == ROWS


@pytest.mark.parametrize(
    ("code", "dtype", "flavor", "name"),
    [
        (6, "<f8", "mmap", "float64"),
        (7, "<f8", "mmap", "float64"),
        (7, "<f4", "megatron", "float32"),
        (6, "<f8", "legacy", "float64"),
        (7, "<f8", "legacy", "float64"),
    ],
)
def test_float_codes_rejected(tmp_path: Path, code: int, dtype: str, flavor: str, name: str) -> None:
    if flavor == "legacy":
        write_legacy(tmp_path / "f", ROWS, code=code, dtype=dtype)
    else:
        write_mmap(tmp_path / "f", ROWS, code=code, dtype=dtype, doc_idx=[0, 4] if flavor == "megatron" else None)
    assert detect_index_format(tmp_path / "f.idx") == flavor
    assert_raises(FormatError, tmp_path / "f", "token ids must be integers", f"code {code}", name)


@pytest.mark.parametrize("code", [0, 11])
def test_unknown_dtype_code(tmp_path: Path, code: int) -> None:
    write_mmap(tmp_path / "m", ROWS, code=code)
    assert_raises(FormatError, tmp_path / "m", "1..10", f"found {code}")
    write_legacy(tmp_path / "l", ROWS, code=code)
    assert_raises(FormatError, tmp_path / "l", "1..10", f"found {code}")


def test_megatron_layout(tmp_path: Path) -> None:
    write_mmap(tmp_path / "meg", ROWS, code=4, dtype="<i4", doc_idx=[0, 2, 4])
    assert detect_index_format(tmp_path / "meg.idx") == "megatron"
    ragged = read_indexed(tmp_path / "meg")
    assert isinstance(ragged.values, np.memmap)
    assert as_rows(ragged) == ROWS
    doc_idx = read_document_index(tmp_path / "meg")
    assert doc_idx is not None
    assert doc_idx.tolist() == [0, 2, 4]
    assert doc_idx.dtype == np.int64


@pytest.mark.parametrize(
    ("doc_idx", "needles"),
    [
        ([1, 4], ["entry 0", "found 1"]),
        ([0, 3, 2], ["entry 2", ">= 3", "found 2"]),
        ([0, 5], ["count 4", "found 5"]),
    ],
)
def test_megatron_bad_document_index(tmp_path: Path, doc_idx: list[int], needles: list[str]) -> None:
    write_mmap(tmp_path / "meg", ROWS, doc_idx=doc_idx)
    assert_raises(FormatError, tmp_path / "meg", *needles)
    with pytest.raises(FormatError, match="document index"):
        read_document_index(tmp_path / "meg")


@pytest.mark.parametrize("legacy", [False, True])
def test_empty_dataset(tmp_path: Path, legacy: bool) -> None:
    (write_legacy if legacy else write_mmap)(tmp_path / "e", [])
    ragged = read_indexed(tmp_path / "e")
    assert len(ragged) == 0
    assert ragged.offsets.tolist() == [0]
    assert ragged.values.shape == (0,)


def test_all_empty_rows(tmp_path: Path) -> None:
    write_mmap(tmp_path / "e", [[], []])
    assert read_indexed(tmp_path / "e").offsets.tolist() == [0, 0, 0]


# ---------------------------------------------------------------- synthetic: bad inputs


def test_wrong_magic(tmp_path: Path) -> None:
    idx, _ = write_mmap(tmp_path / "w", ROWS, magic=b"NOTANIDX!")
    with pytest.raises(FormatError) as info:
        detect_index_format(idx)
    message = str(info.value)
    for needle in ("w.idx", "MMIDIDX", "TNTIDX", "NOTANIDX!"):
        assert needle in message
    assert_raises(FormatError, tmp_path / "w", "NOTANIDX!")


def test_empty_idx(tmp_path: Path) -> None:
    (tmp_path / "z.idx").write_bytes(b"")
    (tmp_path / "z.bin").write_bytes(b"")
    assert_raises(FormatError, tmp_path / "z", "found b''")


def test_missing_idx(tmp_path: Path) -> None:
    assert_raises(FormatError, tmp_path / "nothing", "not found")


@pytest.mark.parametrize("legacy", [False, True])
def test_unsupported_version(tmp_path: Path, legacy: bool) -> None:
    if legacy:
        write_legacy(tmp_path / "v", ROWS, version=2)
    else:
        write_mmap(tmp_path / "v", ROWS, version=2)
    assert_raises(FormatError, tmp_path / "v", "version", "expected 1", "found 2")


@pytest.mark.parametrize(
    ("legacy", "keep", "needles"),
    [(False, 20, ["expected 26", "found 20"]), (True, 30, ["expected 48", "found 30"])],
)
def test_truncated_header(tmp_path: Path, legacy: bool, keep: int, needles: list[str]) -> None:
    idx, _ = (write_legacy if legacy else write_mmap)(tmp_path / "t", ROWS)
    idx.write_bytes(idx.read_bytes()[:keep])
    assert_raises(FormatError, tmp_path / "t", "truncated", *needles)


def test_truncated_mmap_arrays(tmp_path: Path) -> None:
    idx, _ = write_mmap(tmp_path / "t", ROWS)
    idx.write_bytes(idx.read_bytes()[:-4])
    expected = 26 + 12 * len(ROWS)
    assert_raises(FormatError, tmp_path / "t", "count 4", f"expected {expected}", f"found {expected - 4}")


def test_truncated_legacy_arrays(tmp_path: Path) -> None:
    idx, _ = write_legacy(tmp_path / "t", ROWS)
    idx.write_bytes(idx.read_bytes()[:-8])
    expected = 48 + 16 * (len(ROWS) + 1) + 8 * len(ROWS)
    assert_raises(FormatError, tmp_path / "t", "count 4", f"expected {expected}", f"found {expected - 8}")


@pytest.mark.parametrize("legacy", [False, True])
def test_missing_bin(tmp_path: Path, legacy: bool) -> None:
    _, bin_path = (write_legacy if legacy else write_mmap)(tmp_path / "nob", ROWS)
    bin_path.unlink()
    assert_raises(FormatError, tmp_path / "nob", "nob.bin", "not found")


@pytest.mark.parametrize("legacy", [False, True])
def test_short_bin(tmp_path: Path, legacy: bool) -> None:
    _, bin_path = (write_legacy if legacy else write_mmap)(tmp_path / "s", ROWS)
    itemsize = 4 if legacy else 2
    data = bin_path.read_bytes()
    bin_path.write_bytes(data[: 7 * itemsize])  # rows 0 (4 tokens), 1 (0) and 2 (2) fit; row 3 does not
    assert_raises(FormatError, tmp_path / "s", "s.bin", f"expected {len(data)}", f"found {7 * itemsize}", "row 3")


def test_long_bin(tmp_path: Path) -> None:
    _, bin_path = write_mmap(tmp_path / "l", ROWS)
    data = bin_path.read_bytes()
    bin_path.write_bytes(data + b"\x00\x00")
    assert_raises(FormatError, tmp_path / "l", "l.bin", f"expected {len(data)}", f"found {len(data) + 2}")


def test_bad_pointer(tmp_path: Path) -> None:
    write_mmap(tmp_path / "p", ROWS, pointers=[0, 8, 8, 14])  # row 3 should start at 12
    assert_raises(FormatError, tmp_path / "p", "row 3", "expected byte pointer 12", "found 14")


@pytest.mark.parametrize("legacy", [False, True])
def test_negative_size(tmp_path: Path, legacy: bool) -> None:
    sizes = [4, 0, -2, 6]
    if legacy:
        write_legacy(tmp_path / "n", ROWS, sizes=sizes)
    else:
        write_mmap(tmp_path / "n", ROWS, sizes=sizes)
    assert_raises(FormatError, tmp_path / "n", "row 2", ">= 0", "found -2")


def test_legacy_element_size_mismatch(tmp_path: Path) -> None:
    write_legacy(tmp_path / "e", ROWS, element_size=2)
    assert_raises(FormatError, tmp_path / "e", "element size", "expected 4", "found 2")


@pytest.mark.parametrize(
    ("dim_offsets", "data_offsets", "error", "needles"),
    [
        ([0, 1, 2, 3, 4], [0, 4, 4, 7, 12], FormatError, ["row 2", "step 2", "found 3"]),
        ([0, 1, 2, 3, 4], [1, 5, 5, 7, 13], FormatError, ["data_offsets[0]", "found 1"]),
        ([0, 1, 2, 3, 4], [0, 4, 3, 6, 12], FormatError, ["data_offsets[2]", ">= 4", "found 3"]),
        ([0, 1, 3, 2, 4], None, FormatError, ["dim_offsets[3]", ">= 3", "found 2"]),
        ([0, 1, 2, 3, 5], None, FormatError, ["dim_offsets[-1]", "s = 4", "found 5"]),
        ([0, 1, 1, 3, 4], None, InputDataError, ["row 1", "1-D", "found 0 dimensions"]),
    ],
)
def test_legacy_inconsistent_offsets(
    tmp_path: Path,
    dim_offsets: list[int],
    data_offsets: list[int] | None,
    error: type[Exception],
    needles: list[str],
) -> None:
    write_legacy(tmp_path / "o", ROWS, dim_offsets=dim_offsets, data_offsets=data_offsets)
    assert_raises(error, tmp_path / "o", *needles)


def test_legacy_stored_zero(tmp_path: Path) -> None:
    write_legacy(tmp_path / "z", [[5, 2], [3, -1, 2]])  # stored 0 = id -1 in row 1, token 1
    assert_raises(InputDataError, tmp_path / "z", "z.bin", "row 1, token 1", "found 0")


def test_megatron_size_mismatch_reports_both_layouts(tmp_path: Path) -> None:
    idx, _ = write_mmap(tmp_path / "m", ROWS, doc_idx=[0, 4])
    idx.write_bytes(idx.read_bytes() + b"\x00")
    expected_meg = 34 + 12 * 4 + 8 * 2
    with pytest.raises(FormatError) as info:
        detect_index_format(idx)
    for needle in ("m.idx", str(26 + 12 * 4), str(expected_meg), f"found {expected_meg + 1}"):
        assert needle in str(info.value)
