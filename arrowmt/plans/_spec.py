"""The batching spec: what every plan (pairs, blocks, mixtures) asks of fairseq's batching, checked once.

fairseq's ``batch_by_size`` parameters (``max_tokens``, ``max_sentences``,
``required_batch_size_multiple``), the length limits of the plan's kind (named as
fairseq names them: ``max_source_positions`` and ``max_target_positions`` for pairs,
``max_positions`` for language-model blocks), the order's seed (None: no shuffle) and
whether samples over a limit are skipped instead of refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TypeVar

from arrowmt._errors import InvalidParameterError
from arrowmt.bucketing import check_limit, check_seed

SOURCE_LIMIT = "max_source_positions"
TARGET_LIMIT = "max_target_positions"
BLOCK_LIMIT = "max_positions"
Limits = tuple[tuple[str, int | None], ...]
Spec = TypeVar("Spec", bound="BatchSpec")
INTERNAL = {"option": False}  # a field's metadata: set by arrowmt itself, not a batching option of the public API


DEFAULT_MAX_TOKENS = 4096  # fairseq's usual token budget: a spec's default, so the samplers'


@dataclass(frozen=True, kw_only=True)
class BatchSpec:
    """Everything a plan depends on besides its rows: the batching, the named length limits, the order's seed.

    Each kind of plan adds its length limits as fields and names them in :meth:`limits`
    (:class:`~arrowmt.plans._plan.PlanParams` for pairs, :class:`BlockSpec` for blocks).
    Every value is checked here, once, in this order: ``max_tokens``, ``max_sentences``,
    ``required_batch_size_multiple``, each limit (None or an integer >= 1), ``seed``
    (None, or an integer in [0, 2**32)). ``packed``: whole samples packed into buffers of ``max_tokens`` tokens (a
    side) instead of padded batches. Fields are passed by name; their defaults are the samplers'.
    """

    max_tokens: int | None = DEFAULT_MAX_TOKENS
    max_sentences: int | None = None
    required_batch_size_multiple: int = 1
    seed: int | None = 1
    skip_invalid_size_inputs: bool = False
    packed: bool = False

    @classmethod
    def of_options(cls: type[Spec], options: Mapping[str, object], where: str) -> Spec:
        """The spec of the batching ``options`` given to ``where`` by name (InvalidParameterError naming an unknown
        one and the names it takes); the others keep their defaults."""
        names = cls.option_names()
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise InvalidParameterError(f"{where}: unexpected option {unknown[0]!r} (expected any of {list(names)})")
        return cls(**options)  # type: ignore[arg-type]

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The batching options of this kind of spec, as the public API names them."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("option", True))

    def __post_init__(self) -> None:
        for name, value in self.budget() + self.limits():
            check_limit(name, value)
        if self.seed is not None:
            check_seed("seed", self.seed)
        if self.packed:
            check_packing(self.max_tokens, self.required_batch_size_multiple)

    def budget(self) -> Limits:
        """``batch_by_size``'s parameters by name."""
        return (
            ("max_tokens", self.max_tokens),
            ("max_sentences", self.max_sentences),
            ("required_batch_size_multiple", self.required_batch_size_multiple),
        )

    def limits(self) -> Limits:
        """The length limits of this kind of plan, by name (none here)."""
        return ()

    def limit(self, name: str) -> int | None:
        """The length limit ``name`` (KeyError if this kind of plan has none of that name)."""
        return dict(self.limits())[name]

    def key_fields(self) -> dict[str, object]:
        """Every batching field by name, limits included: the part of a plan's key that the spec decides."""
        fields = {
            **dict(self.budget()),
            **dict(self.limits()),
            "seed": self.seed,
            "skip_invalid_size_inputs": self.skip_invalid_size_inputs,
        }
        if self.packed:  # only packed plans name it: the keys of every other plan stay
            fields["packed"] = True
        return fields


def check_packing(max_tokens: int | None, multiple: int) -> None:
    """InvalidParameterError unless packed batches can be planned with these options: a token capacity, and no
    multiple of sentences (a packed batch's count of sentences is free; its shape is fixed by its capacity)."""
    if max_tokens is None:
        raise InvalidParameterError("max_tokens: packed batches need a token capacity, got None")
    if multiple != 1:
        raise InvalidParameterError(
            f"required_batch_size_multiple: expected 1 with packed=True (a packed batch's shape is fixed by its "
            f"token capacity, not by a multiple of sentences), got {multiple}"
        )


@dataclass(frozen=True, kw_only=True)
class BlockSpec(BatchSpec):
    """The spec of a plan of language-model blocks: one length limit, fairseq's ``max_positions``."""

    max_positions: int | None = None

    def limits(self) -> Limits:
        return ((BLOCK_LIMIT, self.max_positions),)
