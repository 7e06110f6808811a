"""The batch plan of a split: fairseq's order, size filter and ``batch_by_size``, built once and memory-mapped.

:class:`PlanParams` is the batching spec of a pair plan (a :class:`~arrowmt.plans._spec.BatchSpec`,
which validates it once); :func:`load_plan` returns the plan from the shared cache (see
:mod:`arrowmt.plans._plan_cache`), building it under a lock the first time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._heap import release_free_heap
from arrowmt.bucketing import (
    batch_by_size,
    check_limit,
    choose_shapes,
    compact_counts,
    drop_too_long,
    filter_by_size,
    ordered_indices,
    pack_by_size,
    report_skipped,
    shape_batches,
    shuffled_range,
    too_long_error,
)
from arrowmt.format import CACHE_DIR_NAME, SOURCE, TARGET
from arrowmt.plans._plan_cache import PLAN_VERSION, BatchPlan, PlanArrays, load_or_build_plan, plan_key
from arrowmt.plans._sources import check_source
from arrowmt.plans._spec import INTERNAL, SOURCE_LIMIT, TARGET_LIMIT, BatchSpec, Limits
from arrowmt.splits import Split

if TYPE_CHECKING:
    from arrowmt.stored import StoredPlan


@dataclass(frozen=True, kw_only=True)
class PlanParams(BatchSpec):
    """The :class:`~arrowmt.plans._spec.BatchSpec` of a parallel (or monolingual) split, by name.

    ``seed`` seeds the order (fairseq's ``numpy_seed``; None: no shuffle). ``reverse``
    plans the reverse direction of a parallel split: its ``target`` column is the
    source side (the order's secondary key, ``max_source_positions``) and its
    ``source`` column the target side. ``batch_shapes``: padded batches of at most that many shapes
    (:func:`~arrowmt.bucketing.choose_shapes`); ``packed`` (every spec's): whole sentences packed into buffers of
    ``max_tokens`` tokens a side.
    """

    max_source_positions: int | None = None
    max_target_positions: int | None = None
    batch_shapes: int | None = None
    reverse: bool = field(default=False, metadata=INTERNAL)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_shapes is not None:
            check_limit("batch_shapes", self.batch_shapes)
            if self.packed or self.max_tokens is None:
                raise InvalidParameterError(
                    f"batch_shapes: expected with a max_tokens budget and without packed=True (packed batches have one "
                    f"shape already), got max_tokens={self.max_tokens}, packed={self.packed}"
                )

    @property
    def shaped(self) -> bool:
        """Whether the plan fixes its batches' shapes (packed or bucketed): its rows are taken in their shuffled
        order, not sorted by length."""
        return self.packed or self.batch_shapes is not None

    def limits(self) -> Limits:
        return ((SOURCE_LIMIT, self.max_source_positions), (TARGET_LIMIT, self.max_target_positions))


def column_lengths(dataset: Split) -> dict[str, np.ndarray]:
    """Every column's token counts, each read once, in the narrowest unsigned dtype holding them."""
    return {column: compact_counts(dataset.lengths(column, dtype=np.int32)) for column in dataset.columns}


def key_fields(params: PlanParams) -> dict[str, object]:
    """The fields that name a plan: all of ``params``, ``reverse`` only when set (keys of earlier plans stay)."""
    fields = params.key_fields()
    for name in ("batch_shapes", "reverse"):
        if getattr(params, name):
            fields[name] = getattr(params, name)
    return fields


def plan_fields(params: PlanParams) -> dict[str, object]:
    """What a plan of any dataset is for: the plan format version and :func:`key_fields` (a copy in plan order
    records them, :mod:`arrowmt.stored._stored_plan`)."""
    return {"plan_version": PLAN_VERSION, **key_fields(params)}


def sides(lengths: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
    """(source lengths, target lengths or None) of ``lengths`` (column -> token counts, in column order):
    ``tokens``, or the first column, is the source of a monolingual split."""
    if SOURCE in lengths:
        return lengths[SOURCE], lengths.get(TARGET)
    return next(iter(lengths.values())), None


def planned_sides(lengths: Mapping[str, np.ndarray], reverse: bool, where: str) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`sides`, swapped when ``reverse`` (InvalidParameterError naming ``where`` for rows without a target)."""
    src, tgt = sides(lengths)
    if not reverse:
        return src, tgt
    if tgt is None:
        raise InvalidParameterError(
            f"reverse: expected a parallel split with columns {[SOURCE, TARGET]}, got {list(lengths)} in {where}"
        )
    return tgt, src


def row_sizes(lengths: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """fairseq's size of each of ``rows`` (``Split.num_tokens``): the max over columns of its length."""
    columns = list(lengths.values())
    sizes = columns[0][rows].astype(np.result_type(*columns), copy=False)
    for other in columns[1:]:
        np.maximum(sizes, other[rows], out=sizes)
    return sizes


def _position_error(dropped: np.ndarray, src: np.ndarray, tgt: np.ndarray | None, params: PlanParams) -> InputDataError:
    """The error for the first dropped sample: its source if that is too long, else its target."""
    index, count = int(dropped[0]), int(dropped.size)
    src_limit, tgt_limit = params.max_source_positions, params.max_target_positions
    if tgt is None or tgt_limit is None or (src_limit is not None and src[index] > src_limit):
        return too_long_error("max_source_positions", src_limit or 0, index, int(src[index]), count)
    return too_long_error("max_target_positions", tgt_limit, index, int(tgt[index]), count)


def _filter_positions(
    order: np.ndarray, src: np.ndarray, tgt: np.ndarray | None, params: PlanParams
) -> tuple[np.ndarray, int]:
    """Remove samples over the position limits; InputDataError unless skipping is allowed."""
    kept, dropped = filter_by_size(order, src, tgt, params.max_source_positions, params.max_target_positions)
    if dropped.size and not params.skip_invalid_size_inputs:
        raise _position_error(dropped, src, tgt, params)
    return kept, int(dropped.size)


def build_plan(dataset: Split, params: PlanParams) -> PlanArrays:
    """fairseq's batches for ``dataset``: :func:`plan_lengths` over its columns' lengths, each read once, narrow."""
    return plan_lengths(column_lengths(dataset), params, f"{dataset.path} split {dataset.split!r}")


def plan_lengths(lengths: dict[str, np.ndarray], params: PlanParams, where: str) -> PlanArrays:
    """fairseq's batches for rows of ``lengths`` (column -> token counts, in column order; ``where`` names them in
    errors): ordered indices, size filter, ``batch_by_size``. Packed batches (``params.packed``) take the rows in
    their shuffled order, not sorted by length (sentences of every length side by side fill the buffers best:
    2.6% of the capacity left empty on Multi30k, max_tokens 4096, against 5.9% in fairseq's sorted order), and
    ``pack_by_size``.

    Narrow lengths (uint8/uint16 for usual lengths, see :func:`column_lengths`) keep the work small; indices are
    int32 below 2**31 rows. ``lengths`` is emptied as it is used, so each intermediate is released when done.
    """
    src, tgt = planned_sides(lengths, params.reverse, where)
    order = shuffled_range(src.shape[0], params.seed) if params.shaped else ordered_indices(src, tgt, params.seed)
    kept, dropped = _filter_positions(order, src, tgt, params)
    sides = (src, tgt) if params.shaped else None  # a shaped plan reads its rows' lengths again below
    del order, src, tgt
    sizes = row_sizes(lengths, kept)
    lengths.clear()
    fits, fit_sizes, over = drop_too_long(kept, sizes, "max_tokens", params.max_tokens,
                                          params.skip_invalid_size_inputs)  # fmt: skip
    if sides is None:
        flat, offsets = batch_by_size(
            fits, fit_sizes, params.max_tokens, params.max_sentences, params.required_batch_size_multiple
        )
        return PlanArrays(flat, offsets, dropped + over)
    src_fits, tgt_fits = sides[0][fits], None if sides[1] is None else sides[1][fits]
    if params.packed:
        flat, offsets = pack_by_size(fits, src_fits, tgt_fits, params.max_tokens or 0, params.max_sentences)
    else:
        uppers, shapes = _shapes(src_fits, tgt_fits, params, where)
        flat, offsets = shape_batches(fits, src_fits, tgt_fits, uppers, shapes)
    return PlanArrays(flat, offsets, dropped + over)


def _shapes(src: np.ndarray, tgt: np.ndarray | None, params: PlanParams, where: str) -> tuple[np.ndarray, list]:
    """The buckets' upper sizes and shapes of a ``batch_shapes`` plan over rows of lengths ``src`` and ``tgt``."""
    if tgt is None:
        raise InvalidParameterError(f"batch_shapes: expected a parallel split (source and target), got {where}")
    return choose_shapes(src, tgt, params.batch_shapes or 1, params.max_tokens or 0, params.max_sentences,
                         params.required_batch_size_multiple)  # fmt: skip


def refuse_changing_lengths(batch_shapes: int | None, rows: object) -> None:
    """InvalidParameterError for ``batch_shapes`` over ``rows`` whose lengths change each epoch (sampled
    segmentations, a mixture's draws): the shapes come from the lengths, so they would change too."""
    if batch_shapes is not None:
        raise InvalidParameterError(
            f"batch_shapes: expected rows whose lengths stay from epoch to epoch, got {rows!r} (its lengths change "
            "each epoch, so would the shapes; packed=True has one shape in every epoch)"
        )


def plan_shapes(lengths: dict[str, np.ndarray], params: PlanParams, where: str) -> list[tuple[int, int, int]]:
    """The (rows, source length, target length) shapes of the batches a ``batch_shapes`` plan of rows of ``lengths``
    makes (what a collater pads each batch to): the rows the plan keeps, bucketed as :func:`plan_lengths` does."""
    src, tgt = planned_sides(lengths, params.reverse, where)
    kept, _ = _filter_positions(shuffled_range(src.shape[0], None), src, tgt, params)
    limit, skip = params.max_tokens, params.skip_invalid_size_inputs
    fits, _, _ = drop_too_long(kept, row_sizes(lengths, kept), "max_tokens", limit, skip)
    return _shapes(src[fits], None if tgt is None else tgt[fits], params, where)[1]


def load_plan(dataset: Split, params: PlanParams, cache_dir: str | os.PathLike[str] | None) -> BatchPlan | StoredPlan:
    """The plan of ``dataset`` for ``params``: the one its rows are stored by (a copy made by ``arrowmt order``
    with these options), else from ``cache_dir`` (default ``<corpus>/.arrowmt-cache``), else built."""
    check_source("dataset", dataset)
    key = plan_key({"dataset": dataset.fingerprint(), "rows": len(dataset), **key_fields(params)})
    plan: BatchPlan | StoredPlan | None = None
    if getattr(dataset, "row_order", None) is not None:  # a copy in plan order (its code loaded only for one)
        from arrowmt.stored import stored_plan

        plan = stored_plan(dataset, plan_fields(params), key)
    if plan is None:
        folder = Path(cache_dir) if cache_dir is not None else Path(dataset.path) / CACHE_DIR_NAME
        plan = load_or_build_plan(folder, key, len(dataset), lambda: build_plan(dataset, params))
    if plan.built:
        release_free_heap()
    limits = "max_tokens/max_source_positions/max_target_positions"
    report_skipped(str(dataset.path), plan.samples, plan.dropped, "samples", limits)
    return plan
