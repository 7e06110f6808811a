"""arrowmt: memory-mapped Apache Arrow corpora for machine-translation training.

The public API is what this module exports (``__all__``); everything else is internal.
The package has six layers, each importing only those below it (docs/layers.md):

1. :mod:`arrowmt.storage`: remote folders and the node-local block cache (never imports torch);
2. :mod:`arrowmt.format`: the on-disk format (never imports torch);
3. :mod:`arrowmt.converters`: conversion from fairseq data-bins and raw text, export;
4. :mod:`arrowmt.plans`: the batching spec, fairseq's bucketing arithmetic, batch plans (never imports torch);
5. :mod:`arrowmt.training`: the sampler over any plan, the torch dataset, collaters;
6. :mod:`arrowmt.integrations`: Hugging Face ``datasets`` and ``transformers``, the fairseq plugin.

Exports load their module on first use, so ``import arrowmt`` (and the CLI) never
imports torch unless a training class is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from arrowmt._errors import (
    ArrowMTError,
    FormatError,
    InputDataError,
    InvalidParameterError,
    MissingDependencyError,
    OutputExistsError,
    OutputWriteError,
    StorageError,
    VocabularyError,
)
from arrowmt._version import __version__

if TYPE_CHECKING:
    from arrowmt._info import ColumnSummary, SplitSummary, summarize
    from arrowmt._order import order_copy
    from arrowmt.converters._fairseq_export import export_fairseq
    from arrowmt.converters._fairseq_folder import convert_fairseq
    from arrowmt.converters._from_table import convert_table
    from arrowmt.converters._parallel_text import convert_text
    from arrowmt.converters._parquet_export import export_parquet
    from arrowmt.format._indexing import write_folder_indexes
    from arrowmt.format._manifest import FileEntry, Manifest
    from arrowmt.format._metadata import SpecialIds
    from arrowmt.format._ratio import length_ratio
    from arrowmt.format._split import Split, open_split
    from arrowmt.format._stage import stage
    from arrowmt.format._verify import VerifyReport, verify_dataset
    from arrowmt.format._view import View, ViewReport, build_view, open_view
    from arrowmt.format._vocab import Dictionary
    from arrowmt.training import (
        ArrowMTDataset,
        ArrowMTViewDataset,
        BlockBatchSampler,
        BlockDataset,
        FairseqBatch,
        FairseqBlockCollater,
        FairseqCollater,
        Mixture,
        MixtureBatchSampler,
        PlainBlockCollater,
        PlainCollater,
        TagCollater,
        Tags,
        TokenBatchSampler,
        langtok_tags,
        language_token_ids,
        load_loader_state,
        open_blocks,
        open_dataset,
        open_mixture,
        open_view_dataset,
    )

_LAZY = {
    "ArrowMTDataset": "arrowmt.training._dataset",
    "ArrowMTViewDataset": "arrowmt.training._view_dataset",
    "BlockBatchSampler": "arrowmt.training._block_sampler",
    "BlockDataset": "arrowmt.training._block_dataset",
    "ColumnSummary": "arrowmt._info",
    "Dictionary": "arrowmt.format._vocab",
    "FairseqBatch": "arrowmt.training._collate",
    "FairseqBlockCollater": "arrowmt.training._block_collate",
    "FairseqCollater": "arrowmt.training._collate",
    "FileEntry": "arrowmt.format._manifest",
    "Manifest": "arrowmt.format._manifest",
    "Mixture": "arrowmt.training._mixture",
    "MixtureBatchSampler": "arrowmt.training._mixture",
    "PlainBlockCollater": "arrowmt.training._block_collate",
    "PlainCollater": "arrowmt.training._collate",
    "SpecialIds": "arrowmt.format._metadata",
    "Split": "arrowmt.format._split",
    "SplitSummary": "arrowmt._info",
    "TagCollater": "arrowmt.training._tags",
    "Tags": "arrowmt.training._tags",
    "TokenBatchSampler": "arrowmt.training._sampler",
    "VerifyReport": "arrowmt.format._verify",
    "View": "arrowmt.format._view",
    "ViewReport": "arrowmt.format._view",
    "build_view": "arrowmt.format._view",
    "convert_fairseq": "arrowmt.converters._fairseq_folder",
    "convert_table": "arrowmt.converters._from_table",
    "convert_text": "arrowmt.converters._parallel_text",
    "export_fairseq": "arrowmt.converters._fairseq_export",
    "export_parquet": "arrowmt.converters._parquet_export",
    "langtok_tags": "arrowmt.training._tags",
    "language_token_ids": "arrowmt.training._tags",
    "length_ratio": "arrowmt.format._ratio",
    "load_loader_state": "arrowmt.training._resume",
    "open_blocks": "arrowmt.training._block_dataset",
    "open_dataset": "arrowmt.training._dataset",
    "open_mixture": "arrowmt.training._mixture",
    "open_split": "arrowmt.format._split",
    "open_view": "arrowmt.format._view",
    "open_view_dataset": "arrowmt.training._view_dataset",
    "order_copy": "arrowmt._order",
    "stage": "arrowmt.format._stage",
    "summarize": "arrowmt._info",
    "verify_dataset": "arrowmt.format._verify",
    "write_folder_indexes": "arrowmt.format._indexing",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'arrowmt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ArrowMTDataset",
    "ArrowMTError",
    "ArrowMTViewDataset",
    "BlockBatchSampler",
    "BlockDataset",
    "ColumnSummary",
    "Dictionary",
    "FairseqBatch",
    "FairseqBlockCollater",
    "FairseqCollater",
    "FileEntry",
    "FormatError",
    "InputDataError",
    "InvalidParameterError",
    "Manifest",
    "MissingDependencyError",
    "Mixture",
    "MixtureBatchSampler",
    "OutputExistsError",
    "OutputWriteError",
    "PlainBlockCollater",
    "PlainCollater",
    "SpecialIds",
    "Split",
    "SplitSummary",
    "StorageError",
    "TagCollater",
    "Tags",
    "TokenBatchSampler",
    "VerifyReport",
    "View",
    "ViewReport",
    "VocabularyError",
    "__version__",
    "build_view",
    "convert_fairseq",
    "convert_table",
    "convert_text",
    "export_fairseq",
    "export_parquet",
    "langtok_tags",
    "language_token_ids",
    "length_ratio",
    "load_loader_state",
    "open_blocks",
    "open_dataset",
    "open_mixture",
    "open_split",
    "open_view",
    "open_view_dataset",
    "order_copy",
    "stage",
    "summarize",
    "verify_dataset",
    "write_folder_indexes",
]
