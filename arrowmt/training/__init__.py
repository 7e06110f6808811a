"""Layer 14, training: the sampler over any batch plan (rank and world detected in one place), the torch
datasets, collation, the read-ahead loader.

Imports the I/O, format and plan layers only; the one layer that imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

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
    from arrowmt.training._loader import ReadAheadLoader
    from arrowmt.training._mixture import Mixture, MixtureBatchSampler, open_mixture
    from arrowmt.training._resume import load_loader_state
    from arrowmt.training._sampled_dataset import ArrowMTSampledDataset
    from arrowmt.training._sampler import PlanSampler, TokenBatchSampler
    from arrowmt.training._tags import TagCollater, Tags, langtok_tags, language_token_ids
    from arrowmt.training._view_dataset import ArrowMTViewDataset, open_view_dataset

__getattr__, __dir__, __all__ = attach(__name__, __file__)
