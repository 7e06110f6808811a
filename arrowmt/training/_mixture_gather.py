"""A batch drawn from many corpora in one vectorized gather: every map seen through one address range.

Each shard file (and each view's row list) is already memory-mapped and validated by its
reader. :class:`AddressSpace` lays one numpy array over the address range that spans
all those maps (no new mapping, nothing copied), so a batch's rows, whatever corpus and
shard they come from, are located with a fixed number of numpy operations instead of a
loop over corpora. Only positions the readers validated are ever read: a row's offsets
come from its record batch's offsets buffer (checked inside the map when the file was
opened) and its tokens lie between offsets checked against that record batch's value
count, exactly as :meth:`arrowmt.reading._reader.SplitFile.spans` checks them, and each
piece of offsets' checksum is checked on first use, as there. A view's row list is
read only after the CRC-32 of each chunk holding the batch's rows was checked
(on first use, all views' chunks numbered in one sequence), and its rows must lie inside their split; the
rows of a copy in plan order (``arrowmt order``) are placed through its ``where`` map the
same way (each chunk checked on first use, every position inside its split). The
rows' tokens are then copied into one compact array, so no window of a later padding step
ever reads outside a row's own file. Anything unexpected (a corpus of another kind,
offsets that fail the check, a view row outside its split) falls back to the corpora's
own readers, which raise.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from arrowmt._arrays import sorted_unique
from arrowmt.io import ManyPieces, WordRanges
from arrowmt.mixing import corpus_of
from arrowmt.reading import ManyOffsetChecks, Spans, SplitFile, exclusive_cumsum
from arrowmt.splits import Split
from arrowmt.views import View


class AddressSpace:
    """int32 / uint32 / uint64 views over the address range spanning ``arrays`` (views of memory maps).

    ``offset(a)`` is where array ``a`` starts in elements of its own dtype. The arrays
    are kept referenced, so their maps stay open while this object lives.
    """

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self._arrays = [a for a in arrays if a.size]
        low = min((a.ctypes.data for a in self._arrays), default=0)
        high = max((a.ctypes.data + a.nbytes for a in self._arrays), default=0)
        self.base = low - low % 8
        size = max(high - self.base, 8)
        raw = (ctypes.c_char * size).from_address(self.base) if self._arrays else bytearray(8)
        self.int32 = np.frombuffer(raw, dtype=np.int32, count=size // 4)
        self.int32.flags.writeable = False
        self.uint32 = self.int32.view(np.uint32)
        self.uint64 = np.frombuffer(raw, dtype=np.uint64, count=size // 8)
        self.uint64.flags.writeable = False

    def offset(self, array: np.ndarray) -> int:
        """Element index of ``array[0]`` in the space's array of ``array``'s item size."""
        delta = array.ctypes.data - self.base if array.size else 0
        return delta // array.itemsize


class MixtureGather:
    """Locates a mixture batch's rows with a fixed number of numpy steps (see the module docstring).

    Built from the mixture's corpora (splits or views of splits) and their global offsets;
    :meth:`spans` returns None when the corpora's own readers must handle the batch.
    """

    def __init__(self, corpora: Sequence[object], offsets: np.ndarray, columns: tuple[str, ...]) -> None:
        splits = [c.corpus if isinstance(c, View) else c for c in corpora]
        if not all(isinstance(s, Split) for s in splits):
            raise TypeError("every corpus must be a split or a view of one")
        if any(shard.remote is not None for s in splits for shard in s.shards):
            raise TypeError("remote corpora are gathered by their own readers (fetched first)")
        self.row_orders = [s.row_order for s in splits]  # a copy in plan order's maps (None: rows as converted)
        self.ordered = np.array([order is not None for order in self.row_orders])
        self.offsets = offsets
        self.columns = columns
        self.view_of = [c if isinstance(c, View) else None for c in corpora]
        self.views = [None if v is None else v.mapped_rows for v in self.view_of]  # read after check_chunks
        maps = [shard.words for s in splits for shard in s.shards] + [v for v in self.views if v is not None]
        self.space = AddressSpace(maps)
        self._tables(splits)

    def _tables(self, splits: list[Split]) -> None:
        """Per shard and per record batch, everything :meth:`spans` indexes, as flat arrays. A shard file read by
        several corpora (views of one split) is laid out once: their rows index the same record batches."""
        rows = np.array([len(s) for s in splits], dtype=np.int64)
        self.split_rows = rows
        self.key_base = exclusive_cumsum(rows)
        shard_start, rows_per_batch, batch_base = [], [], []
        places: dict[str, list[list[np.ndarray]]] = {c: [[], [], []] for c in self.columns}
        files: dict[int, int] = {}  # id of a shard file -> its first record batch in the tables
        unique: list[SplitFile] = []
        file_of = []  # each shard's file in ``unique``
        batches = 0
        for k, split in enumerate(splits):
            for j, shard in enumerate(split.shards):
                shard_start.append(int(self.key_base[k] + split.cumulative[j]))
                rows_per_batch.append(shard.rows_per_batch)
                if id(shard) not in files:
                    files[id(shard)] = batches
                    batches += shard.layouts[self.columns[0]].offsets_pos.shape[0]
                    unique.append(shard)
                batch_base.append(files[id(shard)])
                file_of.append(unique.index(shard))
        self.files = unique
        self.file_of = np.array(file_of, dtype=np.int64)
        for shard in unique:
            base = self.space.offset(shard.words)
            for column in self.columns:
                layout = shard.layouts[column]
                places[column][0].append(layout.offsets_pos + base)
                places[column][1].append(layout.values_pos + base)
                places[column][2].append(layout.values_len)
        self.offset_checks = ManyOffsetChecks([shard.offset_checks for shard in unique])
        self.shard_start = np.array(shard_start, dtype=np.int64)
        self.rows_per_batch = np.array(rows_per_batch, dtype=np.int64)
        self.batch_base = np.array(batch_base, dtype=np.int64)
        self.places = {c: tuple(np.concatenate(p).astype(np.int64) for p in parts) for c, parts in places.items()}
        self.is_view = np.array([v is not None for v in self.views])
        self._view_chunks()
        self.view_base = np.array([0 if v is None else self.space.offset(v) for v in self.views], dtype=np.int64)
        self.view_wide = np.array([v is not None and v.itemsize == 8 for v in self.views])

    def _located(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(shard, row in that shard file) of each global id (checked in range): view rows read through their
        checked row lists, copies' rows placed through their maps; None where the corpora's readers must name what is
        wrong."""
        corpus = corpus_of(self.offsets, ids)
        rows = ids - self.offsets[corpus]
        if self.is_view.any() and not self._through_views(corpus, rows):
            return None  # the view's reader names the row outside its split
        if self.ordered.any() and not self._stored(corpus, rows):
            return None  # the split's reader names the row order file
        key = self.key_base[corpus] + rows
        shard = np.searchsorted(self.shard_start, key, side="right") - 1
        return shard, key - self.shard_start[shard]

    def word_ranges(self, ids: np.ndarray, values: bool) -> list[WordRanges] | None:
        """Where the rows of global ids ``ids`` lie, for read-ahead (see :meth:`Split.word_ranges`): one request per
        shard file however many corpora (views) read it; None where the corpora's readers must answer."""
        located = self._located(ids)
        if located is None:
            return None
        shard, local = located
        file = self.file_of[shard]
        out: list[WordRanges] = []
        for u in sorted_unique(file).tolist():
            rows = local[file == u]
            out.extend(self.files[u].word_ranges(column, rows, values) for column in self.columns)
        return out

    def spans(self, ids: np.ndarray) -> dict[str, Spans] | None:
        """Each column's rows of global ids ``ids`` (checked in range), gathered compact; None: use the readers."""
        located = self._located(ids)
        if located is None:
            return None
        shard, local = located
        batch, within = np.divmod(local, self.rows_per_batch[shard])
        table = self.batch_base[shard] + batch
        starts, lengths = [], []
        for column in self.columns:
            offsets_pos, values_pos, values_len = self.places[column]
            at = offsets_pos[table] + within
            start, end = self.space.int32[at], self.space.int32[at + 1]
            if ((start.view(np.uint32) > end.view(np.uint32)) | (end.view(np.uint32) > values_len[table])).any():
                return None  # the readers name the corrupt row
            starts.append(values_pos[table] + start)
            lengths.append(np.subtract(end, start, dtype=np.int64))
        checks = self.offset_checks
        if not checks.all_checked:  # each piece's offsets checksum, on its first use
            checks.ensure(checks.piece_base[table] + within // checks.per[table])
        every = np.concatenate(lengths)
        first = exclusive_cumsum(every)
        positions = np.repeat(np.concatenate(starts) - first, every)  # as flat_positions, reusing ``first``
        positions += np.arange(positions.shape[0])
        words = self.space.int32[positions]  # one gather for all columns
        out, n = {}, ids.shape[0]
        for k, column in enumerate(self.columns):
            row_starts = first[k * n : (k + 1) * n]
            begin = int(row_starts[0]) if n else 0
            out[column] = Spans(words[begin : begin + int(lengths[k].sum())], row_starts - begin, lengths[k])
        return out

    def _stored(self, corpus: np.ndarray, rows: np.ndarray) -> bool:
        """Replace the rows of corpora stored in plan order by their stored positions (in place; each ``where``
        chunk checked on first use); False if one lies outside its split (a corrupt ``where``)."""
        ordered = self.ordered[corpus]
        for k in sorted_unique(corpus[ordered]).tolist():
            sel = corpus == k
            rows[sel] = self.row_orders[k].where.take(rows[sel])
        return not (rows[ordered] >= self.split_rows[corpus[ordered]]).any()

    def _view_chunks(self) -> None:
        """The chunks of every view's row list numbered in one sequence: the chunk holding row ``r`` of view ``k`` is
        ``chunk_first[k] + (chunk_offset[k] + r * itemsize[k]) // chunk_bytes[k]``."""
        lists = [None if v is None else v.checked_rows for v in self.view_of]
        self.view_checks = ManyPieces([[] if rows is None else [rows.checks] for rows in lists])
        self.chunk_first = self.view_checks.first[:-1]
        self.chunk_offset = np.array([0 if r is None else r.offset for r in lists], dtype=np.int64)
        self.chunk_itemsize = np.array([0 if r is None else r.raw.itemsize for r in lists], dtype=np.int64)
        self.chunk_bytes = np.array([1 if r is None else r.checks.chunk_bytes for r in lists], dtype=np.int64)

    def _through_views(self, corpus: np.ndarray, rows: np.ndarray) -> bool:
        """Replace view rows by the split rows they stand for (in place), each chunk of a view's row list checked on
        first use (one test of a memo per batch once they are); False if one lies outside its split."""
        if not self.view_checks.all_checked:
            viewed = self.is_view[corpus]
            k, r = corpus[viewed], rows[viewed]
            at = (self.chunk_offset[k] + r * self.chunk_itemsize[k]) // self.chunk_bytes[k]
            self.view_checks.ensure(self.chunk_first[k] + at)
        for wide, table in ((False, self.space.uint32), (True, self.space.uint64)):
            mask = self.is_view[corpus] & (self.view_wide[corpus] == wide)
            if mask.any():
                rows[mask] = table[self.view_base[corpus[mask]] + rows[mask]].astype(np.int64)
        viewed = self.is_view[corpus]
        return not (rows[viewed] >= self.split_rows[corpus[viewed]]).any()
