"""A copy of an arrowmt folder with one split's rows stored in another order (see ``arrowmt.stored._row_order``),
or stored as pieces of its rows (LM blocks in plan order, see ``arrowmt.stored._block_order``).

The rows are gathered from the source in the new order block by block (never all in
memory), written like any conversion (staging folder, manifest last), and the split's
side file (the row order file keeping the original row numbers, or the blocks' table) is
written beside them before the manifest. The other splits are copied as they are.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import InvalidParameterError
from arrowmt.converters import OutputFolder, column
from arrowmt.format import ROW_ORDER_KEY, Dictionary, Manifest
from arrowmt.reading import PIECE_ROWS, STRETCH_PIECE_ROWS, Ragged
from arrowmt.splits import Split
from arrowmt.stored import (
    COPIED_FROM_KEY,
    ORDERED_BY_KEY,
    order_marker,
    order_name,
    refuse_stored_order,
    write_row_order,
)
from arrowmt.writing import RowSource


@dataclass(frozen=True)
class OrderedRows:
    """Column ``name`` of ``split``, rows ``order[0], order[1], ...`` (a
    :class:`~arrowmt.writing._writer.RowSource`)."""

    split: Split
    name: str
    order: np.ndarray

    @property
    def tokens(self) -> int:
        return int(self.split.metadata.columns[self.name].tokens)

    def __len__(self) -> int:
        return int(self.order.shape[0])

    def lengths(self, block_rows: int) -> Iterator[np.ndarray]:
        for start in range(0, len(self), block_rows):
            yield self.split.lengths(self.name, self.order[start : start + block_rows])

    def pieces(self, block_rows: int) -> Iterator[Ragged]:
        for start in range(0, len(self), block_rows):
            spans = self.split.column_spans(self.name, self.order[start : start + block_rows]).compact()
            yield Ragged.from_lengths(spans.lengths, spans.words)


def write_reordered(
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    split: str,
    order: np.ndarray,
    plan_offsets: np.ndarray,
    ordered: dict[str, object],
    *,
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Copy the folder ``corpus`` to ``out`` with split ``split`` stored in ``order`` (a permutation of its rows),
    whose first rows are the batches of a plan at ``plan_offsets`` (see :func:`arrowmt.stored.write_row_order`);
    ``ordered``: the manifest's :data:`~arrowmt.stored.ORDERED_BY_KEY` entry naming that plan."""

    def stored(data: Split) -> dict[str, RowSource]:
        rows = len(data)
        if order.shape[0] != rows or not np.all(np.bincount(order, minlength=rows) == 1):
            raise InvalidParameterError(f"order: expected a permutation of the {rows} rows of {split!r}")
        return {name: OrderedRows(data, name, order) for name in data.columns}

    def side(folder: Path) -> dict[str, object]:
        write_row_order(folder / order_name(split), order, plan_offsets)
        return {ORDERED_BY_KEY: ordered, ROW_ORDER_KEY: {split: order_name(split)}}

    marker = order_marker(split, ordered)
    return write_copy(corpus, out, split, stored, side, overwrite=overwrite, progress=progress, marker=marker)


def write_copy(
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    split: str,
    stored: Callable[[Split], dict[str, RowSource]],
    side: Callable[[Path], dict[str, object]],
    *,
    overwrite: bool = False,
    progress: bool = True,
    marker: dict[str, str] | None = None,
) -> Manifest:
    """Copy the folder ``corpus`` to ``out`` with split ``split``'s columns stored as ``stored(split)`` gives
    them (checked before anything is written); ``side(folder)`` writes the split's side file in the staging folder
    and returns the provenance entries naming it (added to the source's); ``marker``: what the split's file records
    of the order it is stored in (:func:`arrowmt.stored.order_marker`)."""
    source_manifest = Manifest.load(corpus)
    refuse_stored_order(source_manifest, Path(corpus), "order")
    splits = {name: Split(corpus, name, source_manifest) for name in source_manifest.splits()}
    if split not in splits:
        raise InvalidParameterError(f"split: expected one of {sorted(splits)}, got {split!r}")
    rows = stored(splits[split])
    with OutputFolder.prepare(
        out, dict(source_manifest.languages), source_manifest.source_format, overwrite, progress
    ) as folder:
        for lang, name in source_manifest.dictionaries.items():
            source = Path(corpus) / name
            folder.add_dictionary(lang or None, Dictionary.load(source), source)
        for name, data in splits.items():
            sources = rows if name == split else {c: OrderedRows(data, c, np.arange(len(data))) for c in data.columns}
            pieces = STRETCH_PIECE_ROWS if name == split else PIECE_ROWS  # read in stretches: small pieces
            folder.write(
                name, _columns(data, sources, folder), data.special_ids, pieces, marker if name == split else None
            )
        copied_from = {COPIED_FROM_KEY: str(Path(corpus).resolve())}
        folder.manifest.provenance = {**source_manifest.provenance, **copied_from, **side(folder.path)}
        return folder.finish()


def _columns(data: Split, sources: dict[str, RowSource], folder: OutputFolder) -> dict:
    out = {}
    for name in data.columns:
        info = data.metadata.columns[name]
        dictionary = Dictionary.load(data.path / info.dictionary)
        origin = f"{data.path} split {data.split!r} column {name!r}"
        out[name] = column(sources[name], info.lang, folder.dictionary_name(info.lang), dictionary, origin)
    return out
