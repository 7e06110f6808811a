"""Layer 6, training: the sampler over any batch plan (rank and world detected in one place), the torch
datasets, collation, the read-ahead loader.

Imports the I/O, format and plan layers only; the one layer that imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import load_export

if TYPE_CHECKING:
    from arrowmt.training._batch import GatheredBatch
    from arrowmt.training._block_collate import FairseqBlockCollater, PlainBlockCollater
    from arrowmt.training._block_dataset import BlockDataset, GatheredBlocks, open_blocks
    from arrowmt.training._block_sampler import BlockBatchSampler
    from arrowmt.training._collate import (
        FairseqBatch,
        FairseqCollater,
        PlainCollater,
        as_tensor,
        check_padding,
        pad_rows,
        pad_shifted,
    )
    from arrowmt.training._dataset import ArrowMTDataset, open_dataset
    from arrowmt.training._deal import every_rank, stored_copy, stretch_ranges, window_end_steps
    from arrowmt.training._loader import ReadAheadLoader
    from arrowmt.training._mixture import Corpus, Mixture, MixtureBatchSampler, open_mixture
    from arrowmt.training._resume import load_loader_state
    from arrowmt.training._sampler import PlanSampler, TokenBatchSampler, check_window
    from arrowmt.training._tags import TagCollater, Tags, langtok_tags, language_token_ids
    from arrowmt.training._view_dataset import ArrowMTViewDataset, open_view_dataset

_EXPORTS = {
    "arrowmt.training._batch": ("GatheredBatch",),
    "arrowmt.training._block_collate": ("FairseqBlockCollater", "PlainBlockCollater"),
    "arrowmt.training._block_dataset": ("BlockDataset", "GatheredBlocks", "open_blocks"),
    "arrowmt.training._block_sampler": ("BlockBatchSampler",),
    "arrowmt.training._collate": (
        "FairseqBatch",
        "FairseqCollater",
        "PlainCollater",
        "as_tensor",
        "check_padding",
        "pad_rows",
        "pad_shifted",
    ),
    "arrowmt.training._dataset": ("ArrowMTDataset", "open_dataset"),
    "arrowmt.training._deal": ("every_rank", "stored_copy", "stretch_ranges", "window_end_steps"),
    "arrowmt.training._loader": ("ReadAheadLoader",),
    "arrowmt.training._mixture": ("Corpus", "Mixture", "MixtureBatchSampler", "open_mixture"),
    "arrowmt.training._resume": ("load_loader_state",),
    "arrowmt.training._sampler": ("PlanSampler", "TokenBatchSampler", "check_window"),
    "arrowmt.training._tags": ("TagCollater", "Tags", "langtok_tags", "language_token_ids"),
    "arrowmt.training._view_dataset": ("ArrowMTViewDataset", "open_view_dataset"),
}


def __getattr__(name: str) -> object:
    return load_export(__name__, _EXPORTS, name)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ArrowMTDataset",
    "ArrowMTViewDataset",
    "BlockBatchSampler",
    "BlockDataset",
    "Corpus",
    "FairseqBatch",
    "FairseqBlockCollater",
    "FairseqCollater",
    "GatheredBatch",
    "GatheredBlocks",
    "Mixture",
    "MixtureBatchSampler",
    "PlainBlockCollater",
    "PlainCollater",
    "PlanSampler",
    "ReadAheadLoader",
    "TagCollater",
    "Tags",
    "TokenBatchSampler",
    "as_tensor",
    "check_padding",
    "check_window",
    "every_rank",
    "langtok_tags",
    "language_token_ids",
    "load_loader_state",
    "open_blocks",
    "open_dataset",
    "open_mixture",
    "open_view_dataset",
    "pad_rows",
    "pad_shifted",
    "stored_copy",
    "stretch_ranges",
    "window_end_steps",
]
