"""The batch plan of a split: fairseq's order, size filter and ``batch_by_size``, built once and memory-mapped.

:class:`PlanParams` holds (and validates, once) everything the plan depends on besides the split's
content; :func:`load_plan` returns the plan from the shared cache (see :mod:`arrowmt.training._plan_cache`),
building it under a lock the first time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from arrowmt._errors import InputDataError
from arrowmt.format._schema import CACHE_DIR_NAME, SOURCE, TARGET
from arrowmt.format._split import Split
from arrowmt.training._bucketing import (
    batch_by_size,
    check_limit,
    check_seed,
    compact_counts,
    filter_by_size,
    ordered_indices,
)
from arrowmt.training._plan_cache import BatchPlan, PlanArrays, load_or_build_plan, plan_key
from arrowmt.training._world import release_free_heap

logger = logging.getLogger(__name__)

LIMIT_FIELDS = (
    "max_tokens",
    "max_sentences",
    "required_batch_size_multiple",
    "max_source_positions",
    "max_target_positions",
)


@dataclass(frozen=True)
class PlanParams:
    """Everything the batch plan depends on besides the dataset's content."""

    max_tokens: int | None
    max_sentences: int | None
    required_batch_size_multiple: int
    max_source_positions: int | None
    max_target_positions: int | None
    seed: int | None
    skip_invalid_size_inputs: bool

    def __post_init__(self) -> None:
        for name in LIMIT_FIELDS:
            check_limit(name, getattr(self, name))
        if self.seed is not None:
            check_seed("seed", self.seed)


def column_lengths(dataset: Split) -> dict[str, np.ndarray]:
    """Every column's token counts, each read once, in the narrowest unsigned dtype holding them."""
    return {column: compact_counts(dataset.lengths(column, dtype=np.int32)) for column in dataset.columns}


def side_lengths(
    dataset: Split, lengths: Mapping[str, np.ndarray] | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(source lengths, target lengths or None): ``tokens`` is the source of a monolingual split.

    Taken from ``lengths`` (see :func:`column_lengths`) when given, else read (int64).
    """

    def get(column: str) -> np.ndarray:
        return dataset.lengths(column) if lengths is None else lengths[column]

    if SOURCE in dataset.columns:
        return get(SOURCE), get(TARGET) if TARGET in dataset.columns else None
    return get(dataset.columns[0]), None


def row_sizes(lengths: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """fairseq's size of each of ``rows`` (``Split.num_tokens``): the max over columns of its length."""
    columns = list(lengths.values())
    sizes = columns[0][rows].astype(np.result_type(*columns), copy=False)
    for other in columns[1:]:
        np.maximum(sizes, other[rows], out=sizes)
    return sizes


def _too_long_error(name: str, limit: int, index: int, size: int, count: int) -> InputDataError:
    return InputDataError(
        f"{name}: sample {index} has {size} tokens, expected <= {name}={limit} ({count} samples too long; "
        "pass skip_invalid_size_inputs=True to drop them)"
    )


def _position_error(dropped: np.ndarray, src: np.ndarray, tgt: np.ndarray | None, params: PlanParams) -> InputDataError:
    """The error for the first dropped sample: its source if that is too long, else its target."""
    index, count = int(dropped[0]), int(dropped.size)
    src_limit, tgt_limit = params.max_source_positions, params.max_target_positions
    if tgt is None or tgt_limit is None or (src_limit is not None and src[index] > src_limit):
        return _too_long_error("max_source_positions", src_limit or 0, index, int(src[index]), count)
    return _too_long_error("max_target_positions", tgt_limit, index, int(tgt[index]), count)


def _filter_positions(
    order: np.ndarray, src: np.ndarray, tgt: np.ndarray | None, params: PlanParams
) -> tuple[np.ndarray, int]:
    """Remove samples over the position limits; InputDataError unless skipping is allowed."""
    kept, dropped = filter_by_size(order, src, tgt, params.max_source_positions, params.max_target_positions)
    if dropped.size and not params.skip_invalid_size_inputs:
        raise _position_error(dropped, src, tgt, params)
    return kept, int(dropped.size)


def _filter_tokens(kept: np.ndarray, num_tokens: np.ndarray, params: PlanParams) -> tuple[np.ndarray, np.ndarray, int]:
    """Remove samples over ``max_tokens``: (kept, their sizes, dropped count)."""
    if params.max_tokens is None or num_tokens.size == 0 or num_tokens.max() <= params.max_tokens:
        return kept, num_tokens, 0
    over = num_tokens > params.max_tokens
    if over.any() and not params.skip_invalid_size_inputs:
        k = int(np.flatnonzero(over)[0])
        raise _too_long_error("max_tokens", params.max_tokens, int(kept[k]), int(num_tokens[k]), int(over.sum()))
    return kept[~over], num_tokens[~over], int(over.sum())


def build_plan(dataset: Split, params: PlanParams) -> PlanArrays:
    """fairseq's batches for ``dataset``: ordered indices, size filter, ``batch_by_size``.

    Each column's lengths are read once, narrow (uint8/uint16 for usual lengths), and
    indices are int32 below 2**31 rows; every intermediate is released as soon as it is used.
    """
    lengths = column_lengths(dataset)
    src, tgt = side_lengths(dataset, lengths)
    order = ordered_indices(src, tgt, params.seed)
    kept, dropped = _filter_positions(order, src, tgt, params)
    del order, src, tgt
    sizes = row_sizes(lengths, kept)
    del lengths
    kept, sizes, over = _filter_tokens(kept, sizes, params)
    flat, offsets = batch_by_size(
        kept, sizes, params.max_tokens, params.max_sentences, params.required_batch_size_multiple
    )
    return PlanArrays(flat, offsets, dropped + over)


def load_plan(dataset: Split, params: PlanParams, cache_dir: str | os.PathLike[str] | None) -> BatchPlan:
    """The plan of ``dataset`` for ``params``: from ``cache_dir`` (default ``<corpus>/.arrowmt-cache``), else built."""
    key = plan_key({"dataset": dataset.fingerprint(), "rows": len(dataset), **asdict(params)})
    folder = Path(cache_dir) if cache_dir is not None else Path(dataset.path) / CACHE_DIR_NAME
    plan = load_or_build_plan(folder, key, len(dataset), lambda: build_plan(dataset, params))
    if plan.built:
        release_free_heap()
    if plan.dropped:
        logger.warning(
            "%s: %d samples exceed max_tokens/max_source_positions/max_target_positions and are skipped",
            dataset.path,
            plan.dropped,
        )
    return plan
