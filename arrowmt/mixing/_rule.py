"""How a mixture's epochs draw their rows, as one value (:class:`MixtureRule`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np

Weights = Sequence[float] | Mapping[str, float] | np.ndarray
WeightSchedule = Weights | Callable[[int], Weights]
TemperatureSchedule = float | Callable[[int], float]


@dataclass(frozen=True, kw_only=True)
class MixtureRule:
    """How a mixture's epochs draw their rows: ``weights`` (one per corpus, a ``name -> weight`` mapping, or a
    schedule: a function of the epoch giving either) or ``temperature`` (a number, or a schedule), not both, or
    neither (every row once an epoch); ``epoch_size`` rows an epoch; ``resample_seed`` (default the sampler's
    seed). Checked when a sampler takes it."""

    weights: WeightSchedule | None = None
    temperature: TemperatureSchedule | None = None
    epoch_size: int | None = None
    resample_seed: int | None = None


RULE_FIELDS = tuple(f.name for f in fields(MixtureRule))
