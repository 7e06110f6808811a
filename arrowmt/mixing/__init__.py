"""Layer 12, mixtures of corpora: sampling ratios (weights, temperature), each epoch's draw of rows, and the
mixture's batch plan over the drawn rows' lengths.

Imports the plans layer and below; never torch. Other packages import from here, not from the private modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.mixing._mixing import (
        as_sizes,
        check_temperature,
        check_weights,
        corpus_of,
        offsets_of,
        resample_counts,
        temperature_ratios,
    )
    from arrowmt.mixing._mixture_plan import Sampling, load_mixture_plan
    from arrowmt.mixing._rule import RULE_FIELDS, MixtureRule, TemperatureSchedule, Weights, WeightSchedule

__getattr__, __dir__, __all__ = attach(__name__, __file__)
