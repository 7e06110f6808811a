"""Layer 7, sampled segmentations: a corpus's rows drawn afresh each epoch from the exact law of their words'
segmentations (subword regularization), read as spans like the corpus's own rows.

Imports the splits layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.segments._bits import epoch_key, mix64, occurrence_keys, step_bits
    from arrowmt.segments._kinds import check_segmentation
    from arrowmt.segments._lattice import LATTICE_FORMAT, LATTICE_NAME, record_digest
    from arrowmt.segments._law import Law, row_sums
    from arrowmt.segments._sampled import (
        BUILD_HINT,
        FORMS_DIR,
        FORMS_SPLIT,
        LATTICE,
        POOL,
        SEGMENTATION_KEY,
        WORDS_DIR,
        SampledSplit,
        Segmentation,
        check_alpha,
        recorded_segmentation,
        sampled_folder,
    )

__getattr__, __dir__, __all__ = attach(__name__, __file__)
