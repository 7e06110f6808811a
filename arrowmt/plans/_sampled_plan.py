"""The batch plan of one epoch of a corpus read in sampled segmentations (subword regularization).

In epoch ``e`` row ``r`` is read in its sample ``s = epoch_samples(seed, e, r)`` (:mod:`arrowmt.segments`), so the
rows' lengths change with the epoch: the plan of epoch ``e`` is fairseq's batches (:func:`plan_lengths`) over that
epoch's lengths, each ``max_tokens`` budget exact for the pieces read. Its batch ids are those of the sampled
dataset, whose index ``s * N + r`` is row ``r`` in sample ``s``. Plans are stored as ordinary plan files named by
their content (corpus and samples, batching, seed, epoch) in ``<cache>/sampled-<id>/``, the last ``keep_plans``
of them kept, like a mixture's epoch plans.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from arrowmt._heap import release_free_heap
from arrowmt.bucketing import compact_counts, report_skipped
from arrowmt.format import CACHE_DIR_NAME
from arrowmt.plans._plan import PlanParams, key_fields, plan_lengths
from arrowmt.plans._plan_cache import BatchPlan, PlanArrays, keep_recent, load_or_build_plan, plan_key
from arrowmt.segments import SampledSplit, epoch_samples

PLAN_FOLDER_PREFIX = "sampled-"


def build_sampled_plan(source: SampledSplit, params: PlanParams, seed: int, epoch: int) -> PlanArrays:
    """fairseq's batches over the rows of ``source`` each in its sample of ``epoch``, as sampled dataset ids."""
    rows = np.arange(len(source), dtype=np.int64)
    samples = epoch_samples(seed, epoch, rows, source.samples)
    lengths = {column: compact_counts(source.lengths(column, rows, samples)) for column in source.columns}
    plan = plan_lengths(lengths, params, f"{source!r} epoch {epoch}")
    ids = samples[plan.indices] * len(source) + plan.indices
    return PlanArrays(ids, plan.offsets, plan.dropped)


def load_sampled_plan(
    source: SampledSplit,
    params: PlanParams,
    seed: int,
    epoch: int,
    cache_dir: str | os.PathLike[str] | None = None,
    keep_plans: int = 2,
) -> BatchPlan:
    """The plan of ``epoch``: mapped from the cache, else built once under a lock (other ranks wait and map it)."""
    family = plan_key({"sampled": source.fingerprint(), "rows": len(source), **key_fields(params)})
    base = Path(cache_dir) if cache_dir is not None else source.corpus.path / CACHE_DIR_NAME
    folder = base / f"{PLAN_FOLDER_PREFIX}{family[:16]}"
    key = plan_key({"folder": folder.name, "seed": seed, "epoch": epoch})
    rows = len(source) * source.samples
    plan = load_or_build_plan(folder, key, rows, lambda: build_sampled_plan(source, params, seed, epoch))
    if plan.built:
        release_free_heap()
    keep_recent(folder, plan.path, keep_plans)
    report_skipped(f"{source!r} epoch {epoch}", plan.samples, plan.dropped, "samples", "the length limits")
    return plan
