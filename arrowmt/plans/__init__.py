"""Layer 5, batch plans: the batching spec (checked once), fairseq's bucketing arithmetic, the pair, block and
mixture plan builders, their memory-mapped cache and the plan providers samplers walk.

Imports the format layer only; never torch (the training layer's sampler walks these plans).
Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import load_export

if TYPE_CHECKING:
    from arrowmt.plans._block_copy import BlockRows, cut_lengths, stored_starts
    from arrowmt.plans._block_plan import (
        BlockParams,
        BlockTable,
        cache_folder,
        load_block_plan,
        load_blocks,
        table_source,
        write_table,
    )
    from arrowmt.plans._blocks import HEADS, shifted_heads
    from arrowmt.plans._bucketing import (
        check_rank,
        check_seed,
        epoch_batch_order,
        resume_start,
        shard_batches,
        shard_length,
        window_batches,
        window_chunk,
        window_starts,
        windowed_batch_order,
    )
    from arrowmt.plans._mixing import (
        as_sizes,
        check_temperature,
        check_weights,
        corpus_of,
        offsets_of,
        resample_counts,
        temperature_ratios,
    )
    from arrowmt.plans._mixture_plan import Sampling, load_mixture_plan
    from arrowmt.plans._order import plan_order
    from arrowmt.plans._plan import PlanParams, load_plan, plan_fields
    from arrowmt.plans._plan_cache import BatchPlan, PlanArrays
    from arrowmt.plans._provider import EpochPlans, FixedPlan, Plan, PlanProvider, as_provider
    from arrowmt.plans._sources import check_row_ids, check_source
    from arrowmt.plans._spec import BatchSpec, block_spec
    from arrowmt.plans._stored_plan import ORDERED_BY_KEY, StoredPlan, ordered_by
    from arrowmt.plans._token_stream import TokenStream, check_monolingual

_EXPORTS = {
    "arrowmt.plans._block_copy": ("BlockRows", "cut_lengths", "stored_starts"),
    "arrowmt.plans._block_plan": (
        "BlockParams",
        "BlockTable",
        "cache_folder",
        "load_block_plan",
        "load_blocks",
        "table_source",
        "write_table",
    ),
    "arrowmt.plans._blocks": ("HEADS", "shifted_heads"),
    "arrowmt.plans._bucketing": (
        "check_rank",
        "check_seed",
        "epoch_batch_order",
        "resume_start",
        "shard_batches",
        "shard_length",
        "window_batches",
        "window_chunk",
        "window_starts",
        "windowed_batch_order",
    ),
    "arrowmt.plans._mixing": (
        "as_sizes",
        "check_temperature",
        "check_weights",
        "corpus_of",
        "offsets_of",
        "resample_counts",
        "temperature_ratios",
    ),
    "arrowmt.plans._mixture_plan": ("Sampling", "load_mixture_plan"),
    "arrowmt.plans._order": ("plan_order",),
    "arrowmt.plans._plan": ("PlanParams", "load_plan", "plan_fields"),
    "arrowmt.plans._plan_cache": ("BatchPlan", "PlanArrays"),
    "arrowmt.plans._provider": ("EpochPlans", "FixedPlan", "Plan", "PlanProvider", "as_provider"),
    "arrowmt.plans._sources": ("check_row_ids", "check_source"),
    "arrowmt.plans._spec": ("BatchSpec", "block_spec"),
    "arrowmt.plans._stored_plan": ("ORDERED_BY_KEY", "StoredPlan", "ordered_by"),
    "arrowmt.plans._token_stream": ("TokenStream", "check_monolingual"),
}


def __getattr__(name: str) -> object:
    return load_export(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "HEADS",
    "ORDERED_BY_KEY",
    "BatchPlan",
    "BatchSpec",
    "BlockParams",
    "BlockRows",
    "BlockTable",
    "EpochPlans",
    "FixedPlan",
    "Plan",
    "PlanArrays",
    "PlanParams",
    "PlanProvider",
    "Sampling",
    "StoredPlan",
    "TokenStream",
    "as_provider",
    "as_sizes",
    "block_spec",
    "cache_folder",
    "check_monolingual",
    "check_rank",
    "check_row_ids",
    "check_seed",
    "check_source",
    "check_temperature",
    "check_weights",
    "corpus_of",
    "cut_lengths",
    "epoch_batch_order",
    "load_block_plan",
    "load_blocks",
    "load_mixture_plan",
    "load_plan",
    "offsets_of",
    "ordered_by",
    "plan_fields",
    "plan_order",
    "resample_counts",
    "resume_start",
    "shard_batches",
    "shard_length",
    "shifted_heads",
    "stored_starts",
    "table_source",
    "temperature_ratios",
    "window_batches",
    "window_chunk",
    "window_starts",
    "windowed_batch_order",
    "write_table",
]
