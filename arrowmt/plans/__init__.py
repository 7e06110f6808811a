"""Layer 11, batch plans: the batching spec (checked once), the pair plan builder, the plans' memory-mapped
cache, the plan providers samplers walk, the epoch orders of batches chosen by name. The plan a copy in plan order
is stored by is ``arrowmt.stored``'s (``load_plan`` takes it from there for a copy).

Imports the bucketing arithmetic and the corpus layers below it (files to splits, stored), never converters
or torch (the training layer's sampler walks these plans).
Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.plans._orders import BatchOrder, WindowShuffle, batch_order
    from arrowmt.plans._plan import (
        PlanParams,
        column_lengths,
        key_fields,
        load_plan,
        plan_fields,
        plan_lengths,
        plan_shapes,
        refuse_changing_lengths,
    )
    from arrowmt.plans._plan_cache import BatchPlan, PlanArrays, keep_recent, load_or_build_plan, plan_key
    from arrowmt.plans._provider import EpochPlans, FixedPlan, Plan, PlanProvider, ShiftedPlan, as_provider
    from arrowmt.plans._sources import check_row_ids, check_source
    from arrowmt.plans._spec import BLOCK_LIMIT, DEFAULT_MAX_TOKENS, BatchSpec, BlockSpec
    from arrowmt.plans._walk_options import SHARED_OPTIONS, SamplerOptions

__getattr__, __dir__, __all__ = attach(__name__, __file__)
