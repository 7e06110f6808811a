"""Layer 7, sampled segmentations: a corpus's rows in one of ``K`` stored sentencepiece samples each (subword
regularization), read as spans like the corpus's own rows, and which sample a row takes in an epoch.

Imports the splits layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.segments._kinds import check_segmentation
    from arrowmt.segments._sampled import (
        BUILD_HINT,
        DRAWS_FORMAT,
        DRAWS_NAME,
        FORMS_DIR,
        FORMS_SPLIT,
        LAYERS_KEY,
        MAX_FORMS,
        MAX_SAMPLES,
        SEGMENTATION_KEY,
        WORDS_DIR,
        SampledSplit,
        Segmentation,
        epoch_samples,
        layer_rows,
        layers_digest,
        recorded_segmentation,
        row_sums,
        sampled_folder,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
