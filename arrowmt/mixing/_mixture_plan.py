"""The batch plan of one epoch of a mixture: the epoch's drawn rows, batched as fairseq batches pairs.

Each epoch's rows are drawn with per-corpus ratios (:mod:`arrowmt.mixing._mixing`: fairseq's
``translation_multi_simple_epoch`` arithmetic, deterministic in (seed, epoch)), then planned by
:func:`arrowmt.plans._plan.plan_lengths` over the drawn rows' lengths (tags counted) and stored as an
ordinary plan file (:mod:`arrowmt.plans._plan_cache`). The plan of an epoch is named by its content
(corpora, batching, ratios, epoch size, seed, epoch); each mixture keeps its last ``keep_plans``
epoch plans in ``<cache>/mixture-<id>/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from arrowmt._heap import release_free_heap
from arrowmt.bucketing import compact_counts, report_skipped
from arrowmt.format import CACHE_DIR_NAME
from arrowmt.mixing._mixing import resample
from arrowmt.plans import (
    BatchPlan,
    PlanArrays,
    PlanParams,
    keep_recent,
    key_fields,
    load_or_build_plan,
    plan_key,
    plan_lengths,
)

PLAN_FOLDER_PREFIX = "mixture-"


class MixedCorpora(Protocol):
    """What a mixture plan reads of a mixture: its corpora's sizes, columns and lengths, and its identity."""

    sizes: np.ndarray
    columns: tuple[str, ...]

    @property
    def path(self) -> Path: ...

    def __len__(self) -> int: ...

    def lengths(self, column: str, dtype: Any = np.int64) -> np.ndarray: ...

    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class Sampling:
    """How an epoch's rows are drawn: ``ratios`` None is plain concatenation (every row once, no draw)."""

    ratios: np.ndarray | None
    epoch_size: int | None
    seed: int
    epoch: int

    def key_fields(self) -> dict[str, object]:
        if self.ratios is None:
            return {"ratios": None}
        return {"ratios": self.ratios.tolist(), "epoch_size": self.epoch_size, "resample": [self.seed, self.epoch]}


def build_mixture_plan(mixture: MixedCorpora, params: PlanParams, sampling: Sampling) -> PlanArrays:
    """fairseq's batches over the epoch's drawn rows, as global ids of ``mixture``."""
    rows = None
    if sampling.ratios is not None:
        rows, _ = resample(mixture.sizes, sampling.ratios, sampling.epoch_size, sampling.seed, sampling.epoch)
    drawn = {}
    for column in mixture.columns:
        lengths = compact_counts(mixture.lengths(column, dtype=np.int32))
        drawn[column] = lengths if rows is None else lengths[rows]
        del lengths
    plan = plan_lengths(drawn, params, f"mixture {mixture.path}")
    if rows is None:
        return plan
    return PlanArrays(rows[plan.indices], plan.offsets, plan.dropped)


def plan_folder(mixture: MixedCorpora, params: PlanParams, cache_dir: str | os.PathLike[str] | None) -> Path:
    """Where the epoch plans of ``mixture`` with ``params`` live: ``<cache>/mixture-<id>``."""
    family = plan_key({"mixture": mixture.fingerprint(), "rows": len(mixture), **key_fields(params)})
    base = Path(cache_dir) if cache_dir is not None else mixture.path / CACHE_DIR_NAME
    return base / f"{PLAN_FOLDER_PREFIX}{family[:16]}"


def load_mixture_plan(
    mixture: MixedCorpora,
    params: PlanParams,
    sampling: Sampling,
    cache_dir: str | os.PathLike[str] | None = None,
    keep_plans: int = 2,
) -> BatchPlan:
    """The batch plan of one epoch of ``mixture``: mapped from the cache, else built once under a lock.

    Afterwards only the ``keep_plans`` most recently used plans of this mixture stay in its folder.
    """
    folder = plan_folder(mixture, params, cache_dir)
    key = plan_key({"folder": folder.name, **sampling.key_fields()})
    plan = load_or_build_plan(folder, key, len(mixture), lambda: build_mixture_plan(mixture, params, sampling))
    if plan.built:
        release_free_heap()
    keep_recent(folder, plan.path, keep_plans)
    report_skipped(f"mixture {folder}", plan.samples, plan.dropped, "drawn samples", "the length limits")
    return plan
