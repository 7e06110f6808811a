"""The samplers' options as values: what every sampler shares (:class:`~arrowmt.plans.SamplerOptions`), its
batching spec, how it walks its plans (:class:`Walk`, checked once), and the one parser of the fairseq-named keywords
the samplers take (:func:`sampler_arguments`).

``TokenBatchSampler(ds, 4096, seed=3, num_replicas=8, rank=0, max_source_positions=1024)`` and
``TokenBatchSampler(ds, spec=PlanParams(max_source_positions=1024), options=SamplerOptions(seed=3, ...))`` are the
same sampler: the keywords are parsed here, once, into the two values, each checked once where it is defined.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing import check_seed
from arrowmt.io import DEFAULT_DEPTH, check_depth
from arrowmt.plans import DEFAULT_MAX_TOKENS, SHARED_OPTIONS, BatchOrder, BatchSpec, SamplerOptions, batch_order
from arrowmt.training._world import World, resolve_world

Spec = TypeVar("Spec", bound=BatchSpec)


@dataclass(frozen=True)
class Walk:
    """How a sampler walks its plans, checked once (before any plan is built): the epoch order of the batches
    (a strategy, :mod:`arrowmt.plans._orders`), this process's world, the seed and the read-ahead depth."""

    order: BatchOrder
    world: World
    seed: int
    prefetch: int

    @property
    def plan_seed(self) -> int | None:
        """The seed of a plan's own order (fairseq's ``numpy_seed``): None when the batches are not shuffled."""
        return self.seed if self.order.shuffled else None


def walk_of(
    seed: int,
    shuffle: bool = True,
    shuffle_window: int | None = None,
    num_replicas: int | None = None,
    rank: int | None = None,
    prefetch: int = DEFAULT_DEPTH,
) -> Walk:
    """The :class:`Walk` the sampler options name, each checked (InvalidParameterError naming the first bad one)."""
    check_seed("seed", seed)
    world = resolve_world(num_replicas, rank)
    return Walk(batch_order(shuffle, shuffle_window), world, int(seed), check_depth(prefetch))


@dataclass(frozen=True)
class SamplerArguments:
    """A sampler's arguments parsed: its spec (with the walk's order seed), its options, their walk, and the keywords
    that are the sampler's own (a mixture's sampling rule)."""

    spec: BatchSpec
    options: SamplerOptions
    walk: Walk
    own: dict[str, Any]


def sampler_arguments(
    kind: type[Spec],
    where: str,
    max_tokens: int | None,
    keywords: Mapping[str, Any],
    spec: Spec | None = None,
    options: SamplerOptions | None = None,
    own: tuple[str, ...] = (),
) -> SamplerArguments:
    """Parse a sampler's ``max_tokens`` and fairseq-named ``keywords`` (batching options of ``kind``, the shared
    options, the sampler's ``own``), or take ``spec`` and ``options`` as given instead: InvalidParameterError naming
    ``where`` for an unknown keyword (and the names taken) or for a value given twice (a keyword beside the value
    that holds it)."""
    batching = tuple(name for name in kind.option_names() if name != "seed")  # the order seed is an option's
    unknown = sorted(set(keywords) - {*SHARED_OPTIONS, *batching, *own})
    if unknown:
        raise InvalidParameterError(
            f"{where}: unexpected option {unknown[0]!r} (expected any of {[*batching, *SHARED_OPTIONS, *own]})"
        )
    given = {name: value for name, value in keywords.items() if name in batching}
    shared = {name: value for name, value in keywords.items() if name in SHARED_OPTIONS}
    refuse_both("options", options, shared)
    refuse_both("spec", spec, {**given, **({"max_tokens": max_tokens} if max_tokens != DEFAULT_MAX_TOKENS else {})})
    options = options if options is not None else SamplerOptions(**shared)
    walk = walk_of(options.seed, options.shuffle, options.shuffle_window, options.num_replicas, options.rank,
                   options.prefetch)  # fmt: skip
    made = spec if spec is not None else kind(max_tokens=max_tokens, **given)
    return SamplerArguments(
        dataclasses.replace(made, seed=walk.plan_seed),
        options,
        walk,
        {name: value for name, value in keywords.items() if name in own},
    )


def refuse_both(name: str, value: object, keywords: Mapping[str, Any]) -> None:
    """InvalidParameterError when both ``name=`` (a value) and ``keywords`` that it holds are given."""
    if value is not None and keywords:
        raise InvalidParameterError(
            f"{name}: expected either {name}= or the keywords it holds, got both ({name} and {sorted(keywords)})"
        )
