"""arrowmt: memory-mapped Apache Arrow corpora for machine-translation training.

The public API is what this module exports (``__all__``); everything else is internal.
The package has four layers, each importing only those below it:

1. :mod:`arrowmt.format`: the on-disk format (never imports torch);
2. :mod:`arrowmt.converters`: conversion from fairseq data-bins and raw text, export;
3. :mod:`arrowmt.training`: batch plans, samplers, the torch dataset, collaters;
4. :mod:`arrowmt.integrations`: Hugging Face ``datasets`` and the fairseq plugin.

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
    VocabularyError,
)
from arrowmt._version import __version__

if TYPE_CHECKING:
    from arrowmt._info import ColumnSummary, SplitSummary, summarize
    from arrowmt.converters._fairseq_export import export_fairseq
    from arrowmt.converters._fairseq_folder import convert_fairseq
    from arrowmt.converters._parallel_text import convert_text
    from arrowmt.format._manifest import FileEntry, Manifest
    from arrowmt.format._metadata import SpecialIds
    from arrowmt.format._split import Split, open_split
    from arrowmt.format._verify import VerifyReport, verify_dataset
    from arrowmt.format._vocab import Dictionary
    from arrowmt.training._collate import Collater
    from arrowmt.training._dataset import ArrowMTDataset, open_dataset
    from arrowmt.training._sampler import TokenBatchSampler

_LAZY = {
    "ArrowMTDataset": "arrowmt.training._dataset",
    "Collater": "arrowmt.training._collate",
    "ColumnSummary": "arrowmt._info",
    "Dictionary": "arrowmt.format._vocab",
    "FileEntry": "arrowmt.format._manifest",
    "Manifest": "arrowmt.format._manifest",
    "SpecialIds": "arrowmt.format._metadata",
    "Split": "arrowmt.format._split",
    "SplitSummary": "arrowmt._info",
    "TokenBatchSampler": "arrowmt.training._sampler",
    "VerifyReport": "arrowmt.format._verify",
    "convert_fairseq": "arrowmt.converters._fairseq_folder",
    "convert_text": "arrowmt.converters._parallel_text",
    "export_fairseq": "arrowmt.converters._fairseq_export",
    "open_dataset": "arrowmt.training._dataset",
    "open_split": "arrowmt.format._split",
    "summarize": "arrowmt._info",
    "verify_dataset": "arrowmt.format._verify",
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
    "Collater",
    "ColumnSummary",
    "Dictionary",
    "FileEntry",
    "FormatError",
    "InputDataError",
    "InvalidParameterError",
    "Manifest",
    "MissingDependencyError",
    "OutputExistsError",
    "OutputWriteError",
    "SpecialIds",
    "Split",
    "SplitSummary",
    "TokenBatchSampler",
    "VerifyReport",
    "VocabularyError",
    "__version__",
    "convert_fairseq",
    "convert_text",
    "export_fairseq",
    "open_dataset",
    "open_split",
    "summarize",
    "verify_dataset",
]
