"""The block plan of a monolingual split: fairseq's token blocks and their batches, built once and memory-mapped.

Two cached parts, each named by the hash of what it depends on:

* the **block table** (break modes ``none``, ``complete`` and ``complete_doc``): every
  block's flat token range and how far it starts inside its row (what its shifted
  source needs), in a file of its own (layout below). Break mode ``eos`` needs no
  table: block ``i`` is row ``i``;
* the **batch plan** over blocks (fairseq's ``MonolingualDataset`` order, the
  ``max_positions`` filter and ``batch_by_size``): an ordinary batch-plan file of
  :mod:`arrowmt.plans._plan_cache`, its "rows" being blocks.

A block table is a side file (:mod:`arrowmt.files._sidefile`: a header and chunk table
checked on open, a CRC-32 per 4 KiB chunk of the contents checked on first use, atomic
write, build-once lock, read-only map; a FIFO, folder or device at its path is refused).
Layout (little-endian)::

    header (128 bytes): magic b"ARROWMT-BLOCKS\\0\\0", u32 version (3), u32 zero, 32-byte SHA-256
                        of the key, u64 split rows, u64 split tokens, u64 block count,
                        u32 CRC-32 of the header fields and the chunk table, zero padding
    chunk table:        u64 body bytes, u32 chunk bytes, u32 zero, a CRC-32 per chunk of the body
                        (arrowmt.files._chunks), zero-padded to a multiple of 8 bytes
    starts:             int64 [block count], flat position of each block's first token
    ends:               int64 [block count], one past its last token
    offsets:            uint8 [block count], how far the block starts inside its row, capped at 2;
                        zero-padded to a multiple of 8 bytes

:meth:`MappedBlocks.bounds` and :meth:`MappedBlocks.offsets` read the blocks a batch asks
for, from chunks checked on their first use, and check that each range is non-empty and
within the split's tokens and each row offset at most 2; ``sizes()``, ``starts``, ``ends``
and ``row_offsets`` read and check the whole table (every chunk, and blocks in order
without overlap). A chunk found corrupt while training raises FormatError and removes the
file, so the next start rebuilds it. Versions 1 (no checksum) and 2 (one CRC-32 checked on
open) are never read: the version is part of the key that names the file. Every process
but the builder maps the file read-only (shared page cache, no private copy).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from arrowmt._checks import check_integer
from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt._heap import release_free_heap
from arrowmt.blocks._blocks import (
    HEADS,
    check_break_mode,
    lm_order,
    none_bounds,
    offsets_in_rows,
    packed_bounds,
    row_starts,
)
from arrowmt.blocks._token_stream import TokenStream
from arrowmt.bucketing import (
    batch_by_size,
    compact_counts,
    drop_too_long,
    pack_by_size,
    report_skipped,
    shuffled_range,
)
from arrowmt.files import (
    BLOCKS_FORMAT,
    COPY_BLOCKS_FORMAT,
    SideFile,
    check_blocks_header,
    load_or_build,
    open_side_file,
    write_side_file,
)
from arrowmt.format import BLOCK_ORDER_KEY, CACHE_DIR_NAME, MANIFEST_NAME
from arrowmt.io import WordRanges
from arrowmt.plans import BLOCK_LIMIT, BatchPlan, BatchSpec, PlanArrays, load_or_build_plan, plan_key
from arrowmt.reading import check_indices, indices_within
from arrowmt.splits import Split
from arrowmt.stored import block_order_of

if TYPE_CHECKING:
    from arrowmt.stored import BlockOrder

logger = logging.getLogger(__name__)
CHECK_CHUNK = 1 << 16  # blocks per step of the contents check and builds (bounds their temporaries)


@dataclass(frozen=True)
class BlockParams:
    """What the blocks depend on besides the split: fairseq's ``tokens_per_sample``, break mode, separator."""

    tokens_per_sample: int | None
    break_mode: str = "none"
    document_sep_len: int = 1

    def __post_init__(self) -> None:
        mode = check_break_mode(self.break_mode)
        object.__setattr__(self, "break_mode", mode)
        if mode != "eos" or self.tokens_per_sample is not None:
            check_integer("tokens_per_sample", self.tokens_per_sample, 1)
        check_integer("document_sep_len", self.document_sep_len, 0)

    def key_fields(self) -> dict[str, object]:
        """The fields the blocks depend on (``eos`` ignores the size; only ``complete_doc`` uses the separator)."""
        fields: dict[str, object] = {"break_mode": self.break_mode}
        if self.break_mode != "eos":
            fields["tokens_per_sample"] = self.tokens_per_sample
        if self.break_mode == "complete_doc":
            fields["document_sep_len"] = self.document_sep_len
        return fields


class BlockTable(Protocol):
    """Where every block lies in the split's flat token sequence."""

    key: str
    stored_plan: dict[str, object] | None  # a copy in plan order's: the batching options it is stored by

    def __len__(self) -> int: ...

    def bounds(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def offsets(self, ids: np.ndarray) -> np.ndarray: ...

    def entries(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``bounds(ids)`` and ``offsets(ids)`` (int64) in one read of the table."""
        ...

    def sizes(self) -> np.ndarray: ...

    def word_ranges(self, ids: np.ndarray) -> list[WordRanges]: ...


class RowBlocks:
    """Break mode ``eos``: block ``i`` is row ``i``; nothing stored."""

    stored_plan = None

    def __init__(self, key: str, stream: TokenStream) -> None:
        self.key, self.stream = key, stream

    def __len__(self) -> int:
        return len(self.stream.split)

    def bounds(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.stream.row_ranges(_checked_ids(ids, len(self)))

    def offsets(self, ids: np.ndarray) -> np.ndarray:
        return np.zeros(_checked_ids(ids, len(self)).shape, dtype=np.uint8)

    def entries(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts, ends = self.bounds(ids)
        return starts, ends, np.zeros(starts.shape, dtype=np.int64)

    def sizes(self) -> np.ndarray:
        return compact_counts(self.stream.row_lengths())

    def word_ranges(self, ids: np.ndarray) -> list[WordRanges]:
        """Nothing stored to read ahead: a block is a row, located by the split's offsets."""
        return []


class MappedBlocks:
    """Break modes ``none``/``complete``/``complete_doc``: the block table file, mapped read-only, checked as it is
    read; picklable by path."""

    def __init__(
        self,
        path: Path,
        key: str,
        rows: int,
        total: int,
        built: bool = False,
        stored_plan: dict[str, object] | None = None,
    ) -> None:
        self.path, self.key, self.rows, self.total, self.built = path, key, rows, total, built
        self.stored_plan = stored_plan  # a copy in plan order's table (None: a cached table of the split)
        side = _open_table(path, key, rows, total, self.in_order)
        count = side.values[-1]
        self._side = side
        self._starts = side.array("<i8", count, 0)
        self._ends = side.array("<i8", count, 8 * count)
        self._row_offsets = side.array(np.uint8, count, 16 * count)

    def __len__(self) -> int:
        return len(self._starts)

    @property
    def in_order(self) -> bool:
        """Blocks stored by number, in the split's order (a copy's are in plan order)."""
        return self.stored_plan is None

    @property
    def starts(self) -> np.ndarray:
        """Every block's first flat token (a read-only view of the map): reads and checks the whole table."""
        return self._whole()[0]

    @property
    def ends(self) -> np.ndarray:
        """One past every block's last flat token: reads and checks the whole table."""
        return self._whole()[1]

    @property
    def row_offsets(self) -> np.ndarray:
        """How far every block starts inside its row, capped at 2: reads and checks the whole table."""
        return self._whole()[2]

    def _whole(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._side.check_whole(self._check_table)
        return self._starts.raw, self._ends.raw, self._row_offsets.raw

    def _check_table(self) -> None:
        _check_table(self.path, self._starts.raw, self._ends.raw, self._row_offsets.raw, self.total, self.in_order)

    def bounds(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = _checked_ids(ids, len(self))
        return self._bounds(ids, self._starts.take(ids))

    def _bounds(self, ids: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ends = self._ends.take(ids)
        bad = (starts < 0) | (ends <= starts) | (ends > self.total)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise FormatError(
                f"{self.path}: block {int(ids[k])}: range {int(starts[k])}..{int(ends[k])} is not a non-empty range "
                f"within {self.total} tokens (corrupt)"
            )
        return starts, ends

    def offsets(self, ids: np.ndarray) -> np.ndarray:
        ids = _checked_ids(ids, len(self))
        return self._offsets(ids, self._starts.take(ids))

    def _offsets(self, ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
        offsets = self._row_offsets.take(ids)
        bad = np.flatnonzero((offsets > HEADS) | (offsets > starts))
        if bad.size:
            k = int(bad[0])
            raise FormatError(
                f"{self.path}: block {int(ids[k])}: row offset {int(offsets[k])}, expected <= {HEADS} and <= its "
                f"start {int(starts[k])} (corrupt)"
            )
        return offsets

    def entries(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`bounds` and :meth:`offsets` in one read: nothing to check per block once the whole table was
        checked at its first read (a large table found in the page cache, see
        :meth:`~arrowmt.files._sidefile.SideFile.trusted_whole`)."""
        ids = _checked_ids(ids, len(self))
        if self._side.trusted_whole(self._check_table):
            return self._starts.raw[ids], self._ends.raw[ids], self._row_offsets.raw[ids].astype(np.int64)
        starts = self._starts.take(ids)
        starts, ends = self._bounds(ids, starts)
        return starts, ends, self._offsets(ids, starts).astype(np.int64)

    def sizes(self) -> np.ndarray:
        starts, ends, _ = self._whole()
        out = np.empty(len(self), dtype=np.int64)
        for a in range(0, len(self), CHECK_CHUNK):
            np.subtract(ends[a : a + CHECK_CHUNK], starts[a : a + CHECK_CHUNK], out=out[a : a + CHECK_CHUNK])
        return compact_counts(out)

    def word_ranges(self, ids: np.ndarray) -> list[WordRanges]:
        """Where the table's entries of blocks ``ids`` lie in the file (start, end and row offset of each), for
        read-ahead: nothing is read; ids outside the table name nothing."""
        ids = indices_within(ids, len(self))
        ones = np.ones(ids.shape, dtype=np.int64)
        parts = [column.word_ranges(ids, ones) for column in (self._starts, self._ends, self._row_offsets)]
        starts = np.concatenate([part.starts for part in parts])
        return [replace(parts[0], starts=starts, lengths=np.concatenate([part.lengths for part in parts]))]

    def __reduce__(self) -> tuple[type[MappedBlocks], tuple[Path, str, int, int, bool, dict[str, object] | None]]:
        return (MappedBlocks, (self.path, self.key, self.rows, self.total, False, self.stored_plan))


def _checked_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """``ids`` as int64 block numbers; IndexError naming the first outside ``0..n-1``."""
    ids = np.asarray(ids, dtype=np.int64)
    check_indices(ids, n, "blocks")
    return ids


# ---------------------------------------------------------------- the block table file


def _open_table(path: Path, key: str, rows: int, total: int, cached: bool = True) -> SideFile:
    """Map ``path`` read-only after checking its header against ``key``, ``rows``, ``total``, its size and the
    header's CRC-32 (its contents are checked as they are read; a ``cached`` table found corrupt is removed, to be
    rebuilt; a copy's is the copy's own)."""

    def check(side: SideFile) -> None:
        check_blocks_header(path, side.values, {"key": key, "rows": rows, "tokens": total}, "stale")

    fmt = BLOCKS_FORMAT if cached else COPY_BLOCKS_FORMAT
    return open_side_file(path, fmt, lambda _path, values: body_size(values[-1]), check, discard_corrupt=cached)


def body_size(count: int) -> int:
    """Bytes of the body of a block table of ``count`` blocks (after its header and chunk table)."""
    return 16 * count + -(-count // 8) * 8


def _check_table(
    path: Path, starts: np.ndarray, ends: np.ndarray, offsets: np.ndarray, total: int, in_order: bool = True
) -> None:
    """Blocks are non-empty, inside ``[0, total]``, offsets <= 2, and (``in_order``) in order, non-overlapping;
    FormatError naming the first bad one."""
    previous_end = 0
    for a in range(0, starts.shape[0], CHECK_CHUNK):
        s, e = starts[a : a + CHECK_CHUNK], ends[a : a + CHECK_CHUNK]
        prior = np.concatenate(([previous_end], e[:-1])) if in_order else np.zeros(s.shape[0], dtype=np.int64)
        o = offsets[a : a + CHECK_CHUNK]
        bad = (s < prior) | (e <= s) | (e > total) | (o > HEADS) | (o > s)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise FormatError(
                f"{path}: block {a + k}: range {int(s[k])}..{int(e[k])} (row offset {int(offsets[a + k])}) is not "
                f"a non-empty range after {int(prior[k])} within {total} tokens, row offset <= {HEADS} and <= its "
                "start (corrupt)"
            )
        previous_end = int(e[-1])


def write_table(
    path: Path, key: str, rows: int, total: int, starts: np.ndarray, ends: np.ndarray, offsets: np.ndarray
) -> None:
    """Write a block table atomically at ``path``."""
    count = starts.shape[0]
    sections = [
        np.ascontiguousarray(starts, dtype="<i8"),
        np.ascontiguousarray(ends, dtype="<i8"),
        np.ascontiguousarray(offsets, dtype=np.uint8),
        b"\x00" * (body_size(count) - 17 * count),
    ]
    write_side_file(path, BLOCKS_FORMAT, (0, bytes.fromhex(key), rows, total, count), sections)


# ---------------------------------------------------------------- loading


def cache_folder(split: Split, cache_dir: str | os.PathLike[str] | None) -> Path:
    """``cache_dir``, or the corpus's own ``.arrowmt-cache`` folder."""
    return Path(cache_dir) if cache_dir is not None else Path(split.path) / CACHE_DIR_NAME


def table_source(split: Split) -> dict[str, object]:
    """What names a split's block table besides the block options: its fingerprint, the table version, its rows."""
    return {"blocks": split.fingerprint(), "blocks_version": BLOCKS_FORMAT.version, "rows": len(split)}


def stored_blocks(split: Split, fields: dict[str, object]) -> BlockOrder | None:
    """The block table ``split`` stores (a copy made by ``arrowmt order --tokens-per-sample``), or None; an
    InvalidParameterError when it was made for block options other than ``fields``."""
    stored = block_order_of(split.path, split.manifest, split.split)
    if stored is None:
        return None
    if stored.blocks != fields:
        from arrowmt.stored import changed_fields

        names, pairs = changed_fields(stored.blocks, fields)
        raise InvalidParameterError(
            f"{', '.join(names)}: {split.path} split {split.split!r} stores LM blocks in plan order for {pairs}; "
            "open it with those block options, or read the original corpus"
        )
    if table_key(stored.source, fields) != stored.table:
        raise FormatError(
            f"{split.path / MANIFEST_NAME}: provenance {BLOCK_ORDER_KEY!r}[{split.split!r}]: its block options and "
            f"source do not hash to its table key {stored.table[:16]}... (edited?); make the copy again"
        )
    return stored


def table_key(source: Mapping[str, object], fields: Mapping[str, object]) -> str:
    """The key naming a block table: the split's identity (``source``) and the block options (``fields``)."""
    return plan_key({**source, **fields})


def load_blocks(stream: TokenStream, params: BlockParams, cache_dir: str | os.PathLike[str] | None) -> BlockTable:
    """The blocks of ``stream``'s split for ``params``: arithmetic, rows, or the cached table (built once)."""
    split = stream.split
    stored = stored_blocks(split, params.key_fields())
    if stored is not None:  # a copy in plan order: its own table, by the original's key
        return MappedBlocks(stored.path, stored.table, len(split), stream.total, stored_plan=stored.plan)
    key = table_key(table_source(split), params.key_fields())
    if params.break_mode == "eos":
        return RowBlocks(key, stream)
    path = cache_folder(split, cache_dir) / f"blocks-{key[:32]}.bin"

    def build() -> None:
        write_table(path, key, len(split), stream.total, *build_table(stream.row_lengths(), params))

    table, built = load_or_build(path, "block table", lambda: MappedBlocks(path, key, len(split), stream.total), build)
    if built:
        table.built = True
        release_free_heap()
    return table


def build_table(lengths: np.ndarray, params: BlockParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, row offsets capped at 2) of every block of rows of ``lengths`` (not break mode ``eos``)."""
    size = int(params.tokens_per_sample or 0)
    if params.break_mode != "none":  # blocks of whole rows start at row starts
        sep = params.document_sep_len if params.break_mode == "complete_doc" else None
        starts, ends = packed_bounds(lengths, size, sep)
        return starts, ends, np.zeros(starts.shape[0], dtype=np.uint8)
    row_start = row_starts(lengths)
    starts, ends = none_bounds(int(row_start[-1]), size)
    offsets = np.empty(starts.shape[0], dtype=np.uint8)
    for a in range(0, starts.shape[0], CHECK_CHUNK):
        part = offsets_in_rows(row_start, starts[a : a + CHECK_CHUNK])
        np.minimum(part, HEADS, out=part)
        offsets[a : a + CHECK_CHUNK] = part
    return starts, ends, offsets


def build_block_plan(table: BlockTable, params: BatchSpec) -> PlanArrays:
    """fairseq's batches of blocks: ``MonolingualDataset`` order, ``max_positions`` filter, ``batch_by_size``; packed
    (``params.packed``): the blocks in their shuffled order, packed into buffers of ``max_tokens`` tokens."""
    sizes = table.sizes()
    order = shuffled_range(sizes.shape[0], params.seed) if params.packed else lm_order(sizes, params.seed)
    skip = params.skip_invalid_size_inputs
    kept, kept_sizes, dropped = drop_too_long(order, sizes[order], BLOCK_LIMIT, params.limit(BLOCK_LIMIT), skip)
    del order, sizes
    kept, kept_sizes, over = drop_too_long(kept, kept_sizes, "max_tokens", params.max_tokens, skip)
    if params.packed:
        flat, offsets = pack_by_size(kept, kept_sizes, None, params.max_tokens or 0, params.max_sentences)
    else:
        flat, offsets = batch_by_size(
            kept, kept_sizes, params.max_tokens, params.max_sentences, params.required_batch_size_multiple
        )
    return PlanArrays(flat, offsets, dropped + over)


def load_block_plan(
    table: BlockTable, params: BatchSpec, folder: str | os.PathLike[str], where: str, blocks: BlockParams
) -> BatchPlan:
    """The batch plan over ``table``'s blocks (made with ``blocks``) for ``params`` (its limit ``max_positions``):
    mapped from ``folder``, else built once."""
    stored = table.stored_plan
    if stored is not None and stored != params.key_fields():  # a copy's (its code loaded only for one)
        from arrowmt.stored import other_block_plan

        fields = {**blocks.key_fields(), **params.key_fields()}
        logger.warning("%s", other_block_plan(where, Path(table.path), stored, fields))
    key = plan_key({"block_table": table.key, "block_count": len(table), **params.key_fields()})
    plan = load_or_build_plan(folder, key, len(table), lambda: build_block_plan(table, params))
    if plan.built:
        release_free_heap()
    report_skipped(where, plan.samples, plan.dropped, "blocks", "max_positions/max_tokens")
    return plan
