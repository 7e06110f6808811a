"""The segmentations a corpus is read in: the ids it was converted with, or its sampled segmentations (a module of
its own: every reader checks the name, and only a sampled reader loads the samples' code)."""

from __future__ import annotations

from arrowmt._errors import InvalidParameterError

SEGMENTATIONS = ("fixed", "sampled")  # how a corpus is read: the converted ids, or sampled segmentations


def check_segmentation(name: str, value: object) -> str:
    """``value`` when it names a segmentation (:data:`SEGMENTATIONS`), else InvalidParameterError naming ``name``."""
    if value not in SEGMENTATIONS:
        raise InvalidParameterError(f"{name}: expected one of {list(SEGMENTATIONS)}, got {value!r}")
    return str(value)
