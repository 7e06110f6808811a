"""Layer 4, training: the sampler over any batch plan (rank and world detected in one place), the torch
datasets, collation, read-ahead.

Imports the format and plan layers only; the one layer that imports torch.
"""

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
from arrowmt.training._mixture import Corpus, Mixture, MixtureBatchSampler, open_mixture
from arrowmt.training._prefetch import (
    DEFAULT_DEPTH,
    PassRanges,
    Prefetcher,
    RowSource,
    check_depth,
    prefetch_source,
)
from arrowmt.training._resume import load_loader_state
from arrowmt.training._sampler import PlanSampler, TokenBatchSampler, check_window
from arrowmt.training._tags import TagCollater, Tags, langtok_tags, language_token_ids
from arrowmt.training._view_dataset import ArrowMTViewDataset, open_view_dataset

__all__ = [
    "DEFAULT_DEPTH",
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
    "PassRanges",
    "PlainBlockCollater",
    "PlainCollater",
    "PlanSampler",
    "Prefetcher",
    "RowSource",
    "TagCollater",
    "Tags",
    "TokenBatchSampler",
    "as_tensor",
    "check_depth",
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
    "prefetch_source",
    "stored_copy",
    "stretch_ranges",
    "window_end_steps",
]
