"""arrowmt: memory-mapped Apache Arrow corpora for machine-translation training.

The public API is what this module exports; everything else is internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt.errors import (
    ArrowMTError,
    FormatError,
    InputDataError,
    InvalidParameterError,
    MissingDependencyError,
    OutputExistsError,
    OutputWriteError,
    VocabularyError,
)

if TYPE_CHECKING:
    from arrowmt.collate import Collater
    from arrowmt.dataset import ArrowMTDataset, open_dataset
    from arrowmt.info import summarize
    from arrowmt.manifest import Manifest
    from arrowmt.sampler import TokenBatchSampler
    from arrowmt.verify import verify_dataset
    from arrowmt.vocab import Dictionary

# Exports that pull in torch load on first use, so the CLI and DataLoader workers start fast.
_LAZY = {
    "ArrowMTDataset": "arrowmt.dataset",
    "Collater": "arrowmt.collate",
    "Dictionary": "arrowmt.vocab",
    "Manifest": "arrowmt.manifest",
    "TokenBatchSampler": "arrowmt.sampler",
    "open_dataset": "arrowmt.dataset",
    "summarize": "arrowmt.info",
    "verify_dataset": "arrowmt.verify",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'arrowmt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "ArrowMTDataset",
    "ArrowMTError",
    "Collater",
    "Dictionary",
    "FormatError",
    "InputDataError",
    "InvalidParameterError",
    "Manifest",
    "MissingDependencyError",
    "OutputExistsError",
    "OutputWriteError",
    "TokenBatchSampler",
    "VocabularyError",
    "__version__",
    "convert_fairseq",
    "convert_text",
    "export_fairseq",
    "open_dataset",
    "summarize",
    "verify_dataset",
]


def convert_fairseq(data_bin: str, out: str, **kwargs: object) -> Manifest:
    """Convert a fairseq data-bin folder (see :func:`converters.fairseq_folder.convert_fairseq`)."""
    from converters.fairseq_folder import convert_fairseq as _convert

    return _convert(data_bin, out, **kwargs)  # type: ignore[arg-type]


def convert_text(out: str, src_lang: str, tgt_lang: str, trainpref: str | None = None, **kwargs: object) -> Manifest:
    """Convert raw parallel text ``{pref}.{lang}`` (see :class:`converters.parallel_text.TextConversion`).

    ``validpref``/``testpref`` and the other TextConversion fields are keyword arguments;
    ``overwrite`` and ``progress`` go to the conversion.
    """
    from converters.parallel_text import TextConversion
    from converters.parallel_text import convert_text as _convert

    run = {k: kwargs.pop(k) for k in ("overwrite", "progress") if k in kwargs}
    prefixes = {"train": trainpref, "valid": kwargs.pop("validpref", None), "test": kwargs.pop("testpref", None)}
    options = TextConversion(src_lang=src_lang, tgt_lang=tgt_lang, prefixes=prefixes, **kwargs)  # type: ignore[arg-type]
    return _convert(options, out, **run)  # type: ignore[arg-type]


def export_fairseq(path: str, out: str, **kwargs: object) -> list:
    """Export an arrowmt folder to fairseq mmap files (see :func:`converters.fairseq_export.export_fairseq`)."""
    from converters.fairseq_export import export_fairseq as _export

    return _export(path, out, **kwargs)  # type: ignore[arg-type]
