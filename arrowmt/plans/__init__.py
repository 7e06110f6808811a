"""Layer 5, batch plans: the batching spec (checked once), fairseq's bucketing arithmetic, the pair, block and
mixture plan builders, their memory-mapped cache and the plan providers samplers walk.

Imports the format layer only; never torch (the training layer's sampler walks these plans).
Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
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
    from arrowmt.plans._orders import BATCH_ORDERS, BatchOrder, PlanOrder, Shuffle, WindowShuffle, batch_order
    from arrowmt.plans._plan import PlanParams, load_plan, plan_fields
    from arrowmt.plans._plan_cache import BatchPlan, PlanArrays
    from arrowmt.plans._provider import EpochPlans, FixedPlan, Plan, PlanProvider, as_provider
    from arrowmt.plans._sources import check_row_ids, check_source
    from arrowmt.plans._spec import BatchSpec, BlockSpec
    from arrowmt.plans._stored_plan import StoredPlan, ordered_by
    from arrowmt.plans._token_stream import TokenStream, check_monolingual

__getattr__, __dir__, __all__ = attach(__name__, __file__)
