"""Readers for fairseq binarized datasets (``prefix.idx`` + ``prefix.bin``).

Three index layouts are understood:

* ``"mmap"``: fairseq ``MMapIndexedDataset``. ``.idx`` = magic ``MMIDIDX\\x00\\x00``,
  u64 version 1, u8 dtype code, u64 count N, int32 sizes[N], int64 byte pointers[N]
  (26 + 12N bytes). ``.bin`` holds the raw token ids.
* ``"megatron"``: Megatron-LM ``MMapIndexedDataset``: same magic and version, plus
  a u64 document count D after N and int64 document_indices[D] after the pointers
  (34 + 12N + 8D bytes). Code 7 is float32 here (float64 in fairseq).
* ``"legacy"``: fairseq ``IndexedDataset`` (``lazy``/``cached``). ``.idx`` = magic
  ``TNTIDX\\x00\\x00``, u64 version 1, u64 dtype code, u64 element size, u64 count N,
  u64 S, int64 dim_offsets[N+1], int64 data_offsets[N+1] (in elements), int64
  sizes[S]. The builder stores ids + 1 and fairseq subtracts 1 when reading.

Every check is vectorized; the mmap ``.bin`` is never read into memory. :func:`read_indexed`
returns every row at once (the index in memory); :func:`open_indexed` checks the same things
block by block and reads rows block by block, so its memory does not grow with the file.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError, InputDataError, expect
from arrowmt.reading import Ragged

MMAP_MAGIC = b"MMIDIDX\x00\x00"
LEGACY_MAGIC = b"TNTIDX\x00\x00"
SUPPORTED_VERSION = 1
MMAP_HEADER_BYTES = 26  # magic 9 + version 8 + dtype code 1 + count 8
MEGATRON_HEADER_BYTES = 34  # fairseq header + u64 document count
LEGACY_HEADER_BYTES = 48  # magic 8 + version, code, element size, count, s (5 x u64)

_COMMON_DTYPES: dict[int, np.dtype] = {
    1: np.dtype("u1"),
    2: np.dtype("i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    8: np.dtype("<u2"),
    9: np.dtype("<u4"),
    10: np.dtype("<u8"),
}
_CODE7 = {"mmap": np.dtype("<f8"), "legacy": np.dtype("<f8"), "megatron": np.dtype("<f4")}


@dataclass(frozen=True)
class _MMapIndex:
    """Parsed arrays of an mmap or Megatron-LM ``.idx`` file."""

    dtype: np.dtype
    sizes: np.ndarray
    pointers: np.ndarray
    doc_idx: np.ndarray | None


def _paths(prefix: str | Path) -> tuple[Path, Path]:
    """The ``.idx`` and ``.bin`` paths of a dataset prefix (the prefix may itself contain dots)."""
    return Path(f"{prefix}.idx"), Path(f"{prefix}.bin")


def _file_size(path: Path, role: str) -> int:
    """Size of ``path`` in bytes; FormatError naming the file if it does not exist."""
    expect(path.is_file(), FormatError, f"{path}: {role} file not found (expected a regular file)")
    return path.stat().st_size


def _read_header(path: Path, nbytes: int, what: str) -> bytes:
    """The first ``nbytes`` bytes of ``path``; FormatError if the file is shorter."""
    with path.open("rb") as f:
        head = f.read(nbytes)
    expect(
        len(head) == nbytes,
        FormatError,
        f"{path}: truncated {what} header: expected {nbytes} bytes, found {len(head)}",
    )
    return head


def _dtype_for(code: int, flavor: str, path: Path) -> np.dtype:
    """The integer numpy dtype for a dtype code; FormatError for unknown or float codes."""
    dtype = _CODE7[flavor] if code == 7 else _COMMON_DTYPES.get(code)
    if dtype is None:
        raise FormatError(f"{path}: unsupported dtype code: expected one of 1..10, found {code}")
    expect(
        dtype.kind in "iu",
        FormatError,
        f"{path}: token ids must be integers: dtype code {code} means {dtype.name}",
    )
    return dtype


def _check_version(path: Path, version: int) -> None:
    """FormatError unless the index version is the one fairseq and Megatron-LM write."""
    expect(
        version == SUPPORTED_VERSION,
        FormatError,
        f"{path}: unsupported index version: expected {SUPPORTED_VERSION}, found {version}",
    )


def detect_index_format(idx_path: str | Path) -> str:
    """Return ``"mmap"``, ``"megatron"`` or ``"legacy"`` for an ``.idx`` file.

    The magic separates legacy from mmap; fairseq mmap and Megatron-LM share a
    header, so the file size decides (fairseq 26 + 12N, Megatron 34 + 12N + 8D).
    A size matching neither is reported as a truncated or oversized index.
    """
    path = Path(idx_path)
    size = _file_size(path, "index")
    with path.open("rb") as f:
        magic = f.read(len(MMAP_MAGIC))
    if magic[: len(LEGACY_MAGIC)] == LEGACY_MAGIC:
        return "legacy"
    expect(
        magic == MMAP_MAGIC,
        FormatError,
        f"{path}: not a fairseq index: expected magic {MMAP_MAGIC!r} (mmap/Megatron-LM) "
        f"or {LEGACY_MAGIC!r} (legacy), found {magic!r}",
    )
    (count,) = struct.unpack_from("<Q", _read_header(path, MMAP_HEADER_BYTES, "mmap index"), 18)
    if size == MMAP_HEADER_BYTES + 12 * count:
        return "mmap"
    doc_count = None
    if size >= MEGATRON_HEADER_BYTES:
        (doc_count,) = struct.unpack_from("<Q", _read_header(path, MEGATRON_HEADER_BYTES, "index"), 26)
        if size == MEGATRON_HEADER_BYTES + 12 * count + 8 * doc_count:
            return "megatron"
    megatron = "?" if doc_count is None else MEGATRON_HEADER_BYTES + 12 * count + 8 * doc_count
    raise FormatError(
        f"{path}: index size does not match its count {count}: expected "
        f"{MMAP_HEADER_BYTES + 12 * count} bytes (fairseq mmap, 26+12N) or {megatron} bytes "
        f"(Megatron-LM, 34+12N+8D, D={doc_count}), found {size} bytes (truncated or corrupt)"
    )


def _first_bad(mask: np.ndarray) -> int:
    """Index of the first True in ``mask``, or -1 if none."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else -1


def _check_nonnegative(path: Path, sizes: np.ndarray, base: int = 0) -> None:
    """FormatError naming the first row with a negative size (rows of ``sizes`` are numbered from ``base``)."""
    bad = _first_bad(sizes < 0)
    if bad >= 0:
        raise FormatError(f"{path}: row {base + bad}: expected a size >= 0, found {int(sizes[bad])}")


def _offsets_from_sizes(sizes: np.ndarray) -> np.ndarray:
    """int64 offsets ``[0, cumsum(sizes)]``."""
    offsets = np.zeros(sizes.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, dtype=np.int64, out=offsets[1:])
    return offsets


def _read_mmap_index(idx: Path, flavor: str) -> _MMapIndex:
    """Parse and validate an mmap/Megatron ``.idx`` (its size was checked by detection)."""
    header_len = MEGATRON_HEADER_BYTES if flavor == "megatron" else MMAP_HEADER_BYTES
    head = _read_header(idx, header_len, f"{flavor} index")
    version, code, count = struct.unpack_from("<QBQ", head, len(MMAP_MAGIC))
    _check_version(idx, version)
    dtype = _dtype_for(code, flavor, idx)
    sizes = np.fromfile(idx, dtype="<i4", count=count, offset=header_len)
    pointers = np.fromfile(idx, dtype="<i8", count=count, offset=header_len + 4 * count)
    doc_idx = None
    if flavor == "megatron":
        (doc_count,) = struct.unpack_from("<Q", head, MMAP_HEADER_BYTES)
        doc_idx = np.fromfile(idx, dtype="<i8", count=doc_count, offset=header_len + 12 * count)
        _check_doc_idx(idx, doc_idx, count)
    _check_nonnegative(idx, sizes)
    return _MMapIndex(dtype, sizes, pointers, doc_idx)


def _check_doc_idx(path: Path, doc_idx: np.ndarray, count: int) -> None:
    """Megatron document indices: start at 0, non-decreasing, at most the sequence count."""
    if doc_idx.size == 0:
        return
    expect(
        int(doc_idx[0]) == 0,
        FormatError,
        f"{path}: document index entry 0: expected 0, found {int(doc_idx[0])}",
    )
    bad = _first_bad(np.diff(doc_idx) < 0)
    if bad >= 0:
        raise FormatError(
            f"{path}: document index entry {bad + 1}: expected >= {int(doc_idx[bad])} (non-decreasing), "
            f"found {int(doc_idx[bad + 1])}"
        )
    expect(
        int(doc_idx[-1]) <= count,
        FormatError,
        f"{path}: last document index entry: expected <= sequence count {count}, found {int(doc_idx[-1])}",
    )


def _check_pointers(idx: Path, pointers: np.ndarray, offsets: np.ndarray, itemsize: int, base: int = 0) -> None:
    """Pointers must be the cumulative byte offsets of the rows (``offsets``: one more than ``pointers``)."""
    expected = offsets[:-1] * itemsize
    bad = _first_bad(pointers != expected)
    if bad >= 0:
        raise FormatError(
            f"{idx}: row {base + bad}: expected byte pointer {int(expected[bad])} "
            f"(cumulative sizes x itemsize {itemsize}), found {int(pointers[bad])}"
        )


def _check_bin_size(bin_path: Path, offsets: np.ndarray, itemsize: int) -> None:
    """The ``.bin`` must hold exactly ``offsets[-1]`` elements; name the first row that does not fit."""
    _check_bin_tokens(bin_path, int(offsets[-1]), itemsize, lambda fit: _first_unfit(offsets, fit))


def _first_unfit(offsets: np.ndarray, fit: int) -> int:
    """The first row of ``offsets`` that ends past element ``fit``."""
    return int(np.searchsorted(offsets[1:], fit, side="right"))


def _check_bin_tokens(bin_path: Path, tokens: int, itemsize: int, first_unfit: Callable[[int], int]) -> None:
    """The ``.bin`` must hold exactly ``tokens`` elements; ``first_unfit(n)`` names the first row past ``n``."""
    actual = _file_size(bin_path, "data")
    expected = tokens * itemsize
    if actual == expected:
        return
    where = ""
    if actual < expected:
        where = f"; row {first_unfit(actual // itemsize)} is the first that does not fit"
    raise FormatError(
        f"{bin_path}: data size does not match the index: expected {expected} bytes "
        f"({tokens} tokens x {itemsize}), found {actual} bytes{where}"
    )


def _map_values(bin_path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """A read-only memory map of ``count`` elements (an empty read-only array for an empty file)."""
    if count == 0:
        empty = np.zeros(0, dtype=dtype)
        empty.flags.writeable = False
        return empty
    return np.memmap(bin_path, dtype=dtype, mode="r", shape=(count,))


def _read_mmap(prefix: str | Path, flavor: str) -> Ragged:
    """Validate an mmap/Megatron pair and map its ``.bin`` read-only."""
    idx, bin_path = _paths(prefix)
    index = _read_mmap_index(idx, flavor)
    offsets = _offsets_from_sizes(index.sizes)
    _check_pointers(idx, index.pointers, offsets, index.dtype.itemsize)
    _check_bin_size(bin_path, offsets, index.dtype.itemsize)
    return Ragged(offsets, _map_values(bin_path, index.dtype, int(offsets[-1])))


def _read_legacy_index(idx: Path) -> tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray]:
    """Parse a legacy ``.idx``: dtype, dim_offsets, data_offsets and sizes (validated sizes)."""
    head = _read_header(idx, LEGACY_HEADER_BYTES, "legacy index")
    version, code, element_size, count, s = struct.unpack_from("<5Q", head, len(LEGACY_MAGIC))
    _check_version(idx, version)
    dtype = _dtype_for(code, "legacy", idx)
    expect(
        element_size == dtype.itemsize,
        FormatError,
        f"{idx}: element size: expected {dtype.itemsize} for dtype code {code} ({dtype.name}), found {element_size}",
    )
    expected = LEGACY_HEADER_BYTES + 8 * (2 * (count + 1) + s)
    actual = idx.stat().st_size
    expect(
        actual == expected,
        FormatError,
        f"{idx}: index size does not match count {count} and s {s}: expected {expected} bytes "
        f"(48+16(N+1)+8S), found {actual} bytes (truncated or corrupt)",
    )
    arrays = np.fromfile(idx, dtype="<i8", offset=LEGACY_HEADER_BYTES)
    dim_offsets, data_offsets = arrays[: count + 1], arrays[count + 1 : 2 * count + 2]
    return dtype, dim_offsets, data_offsets, arrays[2 * count + 2 :]


def _check_legacy_offsets(idx: Path, dim_offsets: np.ndarray, data_offsets: np.ndarray, sizes: np.ndarray) -> None:
    """Every row must be 1-D (dim_offsets = 0..N) and data_offsets the cumulative sizes."""
    _check_nonnegative(idx, sizes)
    for name, arr in (("dim_offsets", dim_offsets), ("data_offsets", data_offsets)):
        expect(int(arr[0]) == 0, FormatError, f"{idx}: {name}[0]: expected 0, found {int(arr[0])}")
        bad = _first_bad(np.diff(arr) < 0)
        if bad >= 0:
            raise FormatError(
                f"{idx}: {name}[{bad + 1}]: expected >= {int(arr[bad])} (non-decreasing), found {int(arr[bad + 1])}"
            )
    expect(
        int(dim_offsets[-1]) == sizes.shape[0],
        FormatError,
        f"{idx}: dim_offsets[-1]: expected s = {sizes.shape[0]}, found {int(dim_offsets[-1])}",
    )
    dims = np.diff(dim_offsets)
    bad = _first_bad(dims != 1)
    if bad >= 0:
        raise InputDataError(
            f"{idx}: row {bad}: expected a 1-D token row (1 dimension), found {int(dims[bad])} dimensions"
        )
    steps = np.diff(data_offsets)
    bad = _first_bad(steps != sizes)
    if bad >= 0:
        raise FormatError(
            f"{idx}: row {bad}: expected data_offsets step {int(sizes[bad])} (the row's size), found {int(steps[bad])}"
        )


def _read_legacy(prefix: str | Path) -> Ragged:
    """Validate a legacy pair and load its ``.bin`` as stored ids minus 1."""
    idx, bin_path = _paths(prefix)
    dtype, dim_offsets, data_offsets, sizes = _read_legacy_index(idx)
    _check_legacy_offsets(idx, dim_offsets, data_offsets, sizes)
    offsets = data_offsets.astype(np.int64, copy=True)
    _check_bin_size(bin_path, offsets, dtype.itemsize)
    stored = np.fromfile(bin_path, dtype=dtype)
    _check_stored_ids(bin_path, stored, offsets)
    stored -= 1
    return Ragged(offsets, stored)


def _check_stored_ids(bin_path: Path, stored: np.ndarray, offsets: np.ndarray, base: int = 0) -> None:
    """Legacy values are ids + 1: each must be >= 1. ``stored`` holds rows ``base``, ... with ``offsets`` from 0."""
    bad = _first_bad(stored < 1)
    if bad >= 0:
        row = int(np.searchsorted(offsets, bad, side="right")) - 1
        raise InputDataError(
            f"{bin_path}: row {base + row}, token {bad - int(offsets[row])}: legacy files store id + 1, "
            f"expected a stored value >= 1, found {int(stored[bad])} (id {int(stored[bad]) - 1})"
        )


def read_indexed(prefix: str | Path) -> Ragged:
    """Read ``prefix.idx`` + ``prefix.bin`` as rows of token ids, as fairseq's own reader returns them.

    mmap/Megatron: ``values`` is a read-only ``np.memmap`` of the ``.bin`` with the
    stored dtype (nothing is copied). Legacy: ``values`` is a copy holding the
    stored ids minus 1, in the stored dtype (a stored 0, id -1, is rejected).
    Raises FormatError for a corrupt, truncated or inconsistent file pair.
    """
    idx, _ = _paths(prefix)
    flavor = detect_index_format(idx)
    if flavor == "legacy":
        return _read_legacy(prefix)
    return _read_mmap(prefix, flavor)


def read_document_index(prefix: str | Path) -> np.ndarray | None:
    """The Megatron-LM document index (int64, D entries, starting at 0) or None for other layouts."""
    idx, _ = _paths(prefix)
    flavor = detect_index_format(idx)
    if flavor != "megatron":
        return None
    return _read_mmap_index(idx, flavor).doc_idx


# ----- block by block -----------------------------------------------------------------------------

BLOCK_ROWS = 1 << 20


@dataclass(frozen=True)
class IndexedRows:
    """A checked fairseq binarized dataset whose rows are read block by block (see :func:`open_indexed`).

    mmap/Megatron: the index is read ``block_rows`` entries at a time and the ``.bin`` is mapped one
    block's window at a time, so memory stays bounded whatever the file size. Legacy: the element
    offsets (8 bytes per row) stay in memory; values are read per block, checked and decremented.
    """

    prefix: Path
    dtype: np.dtype
    count: int
    tokens: int
    sizes_at: int  # mmap: byte offset of the int32 sizes in the .idx
    data_offsets: np.ndarray | None  # legacy: element offsets of every row (count + 1)

    def __len__(self) -> int:
        return self.count

    def lengths(self, block_rows: int = BLOCK_ROWS) -> Iterator[np.ndarray]:
        """Row lengths (int64), ``block_rows`` rows at a time."""
        if self.data_offsets is not None:
            for start in range(0, self.count, block_rows):
                yield np.diff(self.data_offsets[start : start + block_rows + 1])
            return
        idx, _ = _paths(self.prefix)
        for start in range(0, self.count, block_rows):
            n = min(block_rows, self.count - start)
            yield np.fromfile(idx, dtype="<i4", count=n, offset=self.sizes_at + 4 * start).astype(np.int64)

    def pieces(self, block_rows: int = BLOCK_ROWS) -> Iterator[Ragged]:
        """The rows, ``block_rows`` at a time: ids as fairseq reads them (legacy: stored - 1)."""
        _, bin_path = _paths(self.prefix)
        first = 0
        for k, lengths in enumerate(self.lengths(block_rows)):
            offsets = _offsets_from_sizes(lengths)
            n = int(offsets[-1])
            if self.data_offsets is None:
                values = _map_window(bin_path, self.dtype, first, n)
            else:
                values = np.fromfile(bin_path, dtype=self.dtype, count=n, offset=first * self.dtype.itemsize)
                _check_stored_ids(bin_path, values, offsets, base=k * block_rows)
                values -= 1
            first += n
            yield Ragged(offsets, values)


def _map_window(bin_path: Path, dtype: np.dtype, first: int, count: int) -> np.ndarray:
    """Elements ``first:first+count`` of the ``.bin`` as a read-only memory map (unmapped when dropped)."""
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(bin_path, dtype=dtype, mode="r", offset=first * dtype.itemsize, shape=(count,))


def open_indexed(prefix: str | Path, block_rows: int = BLOCK_ROWS) -> IndexedRows:
    """Check ``prefix.idx`` + ``prefix.bin`` as :func:`read_indexed` does, block by block, without reading rows.

    Raises the same errors as :func:`read_indexed` for the index and the file sizes; a legacy
    stored id of 0 is reported when its block is read.
    """
    idx, bin_path = _paths(prefix)
    flavor = detect_index_format(idx)
    if flavor == "legacy":
        dtype, dim_offsets, data_offsets, sizes = _read_legacy_index(idx)
        _check_legacy_offsets(idx, dim_offsets, data_offsets, sizes)
        offsets = data_offsets.astype(np.int64, copy=True)
        _check_bin_size(bin_path, offsets, dtype.itemsize)
        return IndexedRows(Path(prefix), dtype, int(offsets.shape[0] - 1), int(offsets[-1]), 0, offsets)
    return _open_mmap(Path(prefix), flavor, block_rows)


def _open_mmap(prefix: Path, flavor: str, block_rows: int) -> IndexedRows:
    idx, bin_path = _paths(prefix)
    header_len = MEGATRON_HEADER_BYTES if flavor == "megatron" else MMAP_HEADER_BYTES
    head = _read_header(idx, header_len, f"{flavor} index")
    version, code, count = struct.unpack_from("<QBQ", head, len(MMAP_MAGIC))
    _check_version(idx, version)
    dtype = _dtype_for(code, flavor, idx)
    if flavor == "megatron":
        (doc_count,) = struct.unpack_from("<Q", head, MMAP_HEADER_BYTES)
        _check_doc_idx(idx, np.fromfile(idx, dtype="<i8", count=doc_count, offset=header_len + 12 * count), count)
    rows = IndexedRows(prefix, dtype, count, 0, header_len, None)
    tokens = 0
    for start, sizes in zip(range(0, count, block_rows), rows.lengths(block_rows), strict=True):
        _check_nonnegative(idx, sizes, base=start)
        offsets = tokens + _offsets_from_sizes(sizes)
        pointers = np.fromfile(idx, dtype="<i8", count=sizes.shape[0], offset=header_len + 4 * count + 8 * start)
        _check_pointers(idx, pointers, offsets, dtype.itemsize, base=start)
        tokens = int(offsets[-1])
    _check_bin_tokens(bin_path, tokens, dtype.itemsize, lambda fit: _first_unfit_in_blocks(rows, fit, block_rows))
    return IndexedRows(prefix, dtype, count, tokens, header_len, None)


def _first_unfit_in_blocks(rows: IndexedRows, fit: int, block_rows: int) -> int:
    """The first row ending past element ``fit``, scanning the sizes block by block (error path only)."""
    tokens = 0
    for start, sizes in zip(range(0, rows.count, block_rows), rows.lengths(block_rows), strict=False):
        offsets = tokens + _offsets_from_sizes(sizes)
        if offsets[-1] > fit:
            return start + _first_unfit(offsets, fit)
        tokens = int(offsets[-1])
    return rows.count
