"""arrowmt: memory-mapped Apache Arrow corpora for machine-translation training.

The public API is what this module exports (``__all__``); everything else is internal.
The package has seven layers, each importing only those below it (docs/layers.md):

1. :mod:`arrowmt.storage`: remote folders and the node-local block cache (never imports torch);
2. :mod:`arrowmt.io`: access advice, read-ahead, integrity checks on first use (never imports torch);
3. :mod:`arrowmt.format`: the on-disk format (never imports torch);
4. :mod:`arrowmt.converters`: conversion from fairseq data-bins and raw text, export;
5. :mod:`arrowmt.plans`: the batching spec, fairseq's bucketing arithmetic, batch plans (never imports torch);
6. :mod:`arrowmt.training`: the sampler over any plan, the torch dataset, collaters, the read-ahead loader;
   :mod:`arrowmt.packing`: packed batches as tensors of one shape;
7. :mod:`arrowmt.integrations`: Hugging Face ``datasets`` and ``transformers``, the fairseq plugin.

Exports load their module on first use, so ``import arrowmt`` (and the CLI) never
imports torch unless a training class is used.
"""

from __future__ import annotations

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
from arrowmt._lazy import attach
from arrowmt._version import __version__

if TYPE_CHECKING:
    from arrowmt._info import ColumnSummary, SplitSummary, summarize
    from arrowmt.converters import (
        TextConversion,
        add_sampled_segmentations,
        convert_fairseq,
        convert_table,
        convert_text,
        convert_with_options,
        export_fairseq,
        export_parquet,
    )
    from arrowmt.copies import order_blocks, order_copy
    from arrowmt.format import Dictionary, FileEntry, Manifest, SpecialIds
    from arrowmt.mixing import MixtureRule
    from arrowmt.packing import PackedCollater
    from arrowmt.plans import BlockSpec, PlanParams, SamplerOptions
    from arrowmt.segments import SampledSplit, Segmentation
    from arrowmt.splits import Split, open_split
    from arrowmt.training import (
        ArrowMTDataset,
        ArrowMTSampledDataset,
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
        ReadAheadLoader,
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
    from arrowmt.views import VerifyReport, View, ViewReport, build_view, length_ratio, open_view, verify_dataset
    from arrowmt.writing import stage, write_folder_indexes

__getattr__, __dir__, __all__ = attach(__name__, __file__)
