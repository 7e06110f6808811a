"""Layer 10, fairseq's bucketing arithmetic as pure numpy functions over lengths, each with exact-value tests:
``ordered_indices``' order, the size filter, ``batch_by_size``, packed batches (``pack_by_size``), shape-bucketed
batches (``choose_shapes``), epoch orders of batches (fairseq's shuffle, windows), dealing batches to ranks (which
batches a deal gives at some steps, the steps that end windows) and resuming a deal, and the stored order of a plan's
rows.

Imports only the core (errors, checks) and a type of the I/O layer (``Dealt``); never torch. Other packages import
from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.bucketing._bucketing import (
        batch_by_size,
        check_limit,
        check_rank,
        check_seed,
        compact_counts,
        drop_too_long,
        epoch_batch_order,
        filter_by_size,
        ordered_indices,
        report_skipped,
        resume_start,
        shard_batches,
        shard_length,
        shuffled_range,
        sort_key,
        stable_order,
        too_long_error,
        window_batches,
        window_starts,
        windowed_batch_order,
    )
    from arrowmt.bucketing._deal import every_rank, own, window_end_steps
    from arrowmt.bucketing._order import plan_order
    from arrowmt.bucketing._packing import pack_by_size
    from arrowmt.bucketing._shapes import choose_shapes, rows_at, shape_batches

__getattr__, __dir__, __all__ = attach(__name__, __file__)
