"""``arrowmt order``: a copy of a corpus whose training split is stored in the order its batch plan reads it.

Training reads each batch's rows from all over a split (fairseq's batches are rows of
similar length, drawn across the corpus). When the corpus does not fit in memory, or sits
on object storage, every such row costs a page or a block. The copy stores the rows of each
planned batch together, one batch after another (the batches are still shuffled per epoch),
and keeps the original row numbers and the plan's batch offsets (:mod:`arrowmt.format._row_order`):
a sampler with the same batching options reads that plan from the copy instead of building
it (:mod:`arrowmt.plans._stored_plan`), and each batch is one contiguous read.
Other options still give the original's batches, with less locality.
"""

from __future__ import annotations

import os

from arrowmt.converters import write_reordered
from arrowmt.format import Manifest, Split
from arrowmt.plans import ORDERED_BY_KEY, PlanParams, load_plan, ordered_by, plan_fields, plan_order


def order_copy(
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    split: str = "train",
    max_tokens: int | None = 4096,
    max_sentences: int | None = None,
    required_batch_size_multiple: int = 1,
    max_source_positions: int | None = None,
    max_target_positions: int | None = None,
    seed: int = 1,
    skip_invalid_size_inputs: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Copy ``corpus`` to ``out`` with ``split`` stored in the order of the plan a
    :class:`~arrowmt.TokenBatchSampler` with these options makes (same names, same defaults)."""
    params = PlanParams(
        max_tokens,
        max_sentences,
        required_batch_size_multiple,
        max_source_positions,
        max_target_positions,
        seed,
        skip_invalid_size_inputs,
    )
    data = Split(corpus, split)
    plan = load_plan(data, params, None)
    order = plan_order(plan.indices, len(data))
    provenance = {ORDERED_BY_KEY: ordered_by(split, plan.key, plan_fields(params))}
    return write_reordered(corpus, out, split, order, plan.offsets, provenance, overwrite=overwrite, progress=progress)
