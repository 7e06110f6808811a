"""What arrowmt's samplers and collaters take, and the one refusal of what they cannot use.

Samplers plan batches from a corpus's stored lengths and its fingerprint (an arrowmt
``Split``, view or :class:`~arrowmt.training._dataset.ArrowMTDataset`); collaters echo
each row's ``id`` (its row number). A Hugging Face dataset (``arrowmt.integrations.hf``)
has neither, so it and its rows are refused with what to use instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arrowmt._errors import InvalidParameterError

PLAN_SOURCE = "an arrowmt dataset (arrowmt.open_dataset(folder, split), a Split or a view)"
PLAN_SOURCE_ATTRIBUTES = ("fingerprint", "lengths", "columns", "path")  # what a batch plan reads
HF_HINT = (
    "Hugging Face datasets carry no arrowmt row ids, lengths or fingerprint: for arrowmt's samplers and "
    "collaters open the same folder with arrowmt (open_dataset, open_blocks: zero-copy, as fast)"
)
ROW_ID_HINT = "or give HF rows their id with hf_ds.map(lambda row, i: {'id': i}, with_indices=True)"


def is_hugging_face(value: object) -> bool:
    """Whether ``value`` comes from the ``datasets`` package (a ``Dataset``, ``IterableDataset``, ...)."""
    return type(value).__module__.split(".")[0] == "datasets"


def check_source(
    name: str, value: object, expected: str = PLAN_SOURCE, attributes: tuple[str, ...] = PLAN_SOURCE_ATTRIBUTES
) -> None:
    """InvalidParameterError unless ``value`` has ``attributes`` (by default what a batch plan reads)."""
    missing = [attribute for attribute in attributes if not hasattr(value, attribute)]
    if missing:
        hint = f"; {HF_HINT}" if is_hugging_face(value) else f" (it has no {', '.join(missing)})"
        raise InvalidParameterError(
            f"{name}: expected {expected}, got {type(value).__module__}.{type(value).__qualname__}{hint}"
        )


def check_row_ids(samples: Sequence[Mapping[str, object]]) -> None:
    """InvalidParameterError unless every sample has an ``id`` (rows of an arrowmt dataset: ``ds[i]``)."""
    for sample in samples:
        if "id" not in sample:
            raise InvalidParameterError(
                f"batch: expected samples with an 'id' (rows of an arrowmt dataset, ds[i]), got a sample with keys "
                f"{sorted(sample)}; {HF_HINT}, {ROW_ID_HINT}"
            )
