"""Resuming a ``StatefulDataLoader`` with another number of DataLoader workers.

torchdata restores a loader's ``state_dict()`` only into a loader with the same
``num_workers``: another number fails with a bare ``AssertionError``. What an arrowmt
run needs from that state is the position of its batch sampler (``TokenBatchSampler``,
``BlockBatchSampler``, ``MixtureBatchSampler``), which the state holds for any number of
workers. :func:`sampler_state` finds it; :func:`load_loader_state` loads a saved loader
state into a loader, whole when the worker counts agree, else into its batch sampler
only. Nothing else is lost: arrowmt datasets are map-style and hold no state, so fresh
workers read the same rows.

Layout of the two kinds of states (torchdata 0.11): without workers, the
sampler's state is ``_index_sampler_state`` at the top; with workers, it is in
``_snapshot._main_snapshot``, taken every ``snapshot_every_n_steps`` batches, and
``_steps_since_snapshot`` batches were yielded after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arrowmt._errors import InvalidParameterError

SAMPLER_STATE = "_index_sampler_state"
SNAPSHOT = "_snapshot"
MAIN_SNAPSHOT = "_main_snapshot"
STEPS_SINCE_SNAPSHOT = "_steps_since_snapshot"
NUM_WORKERS = "_num_workers"
BATCHES_DONE = "batches_done"  # the samplers' count of this rank's batches yielded in the epoch


def saved_workers(state: Mapping[str, Any]) -> int:
    """The ``num_workers`` of the loader that saved ``state`` (a ``StatefulDataLoader.state_dict()``)."""
    return int(_main_state(state)[NUM_WORKERS]) if SNAPSHOT in state else 0


def sampler_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """The batch sampler's state inside the loader state ``state``, saved with any number of workers.

    It stands after the last batch the loader yielded: with workers, the batches yielded
    since torchdata's last snapshot are counted in.
    """
    saved = _main_state(state).get(SAMPLER_STATE)
    if not isinstance(saved, Mapping):
        raise InvalidParameterError(
            "state: expected the state_dict() of a StatefulDataLoader over a stateful batch sampler "
            f"(TokenBatchSampler, BlockBatchSampler, MixtureBatchSampler), got no sampler state ({SAMPLER_STATE!r})"
        )
    steps = int(state.get(STEPS_SINCE_SNAPSHOT, 0)) if SNAPSHOT in state else 0
    if steps and BATCHES_DONE not in saved:
        raise InvalidParameterError(
            f"state: {steps} batches were yielded after the loader's last snapshot and the sampler state has no "
            f"{BATCHES_DONE!r} to count them in; save with snapshot_every_n_steps=1 (torchdata's default)"
        )
    return {**saved, BATCHES_DONE: saved[BATCHES_DONE] + steps} if steps else dict(saved)


def load_loader_state(loader: Any, state: Mapping[str, Any]) -> None:
    """Restore the ``StatefulDataLoader`` state ``state`` into ``loader``, also with another ``num_workers``.

    With the saved number of workers this is ``loader.load_state_dict(state)``. With
    another, the loader's batch sampler loads :func:`sampler_state` and the loader starts
    afresh from there (its next iteration continues the epoch after the last batch the
    saving loader yielded). Call it where ``load_state_dict`` would be called, before
    ``set_epoch`` and the next iteration, as ``examples/train_plain.py`` does.
    """
    if getattr(loader, "num_workers", None) == saved_workers(state) and hasattr(loader, "load_state_dict"):
        loader.load_state_dict(dict(state))
        return
    sampler = getattr(loader, "batch_sampler", None)
    if not callable(getattr(sampler, "load_state_dict", None)):
        raise InvalidParameterError(
            f"loader: expected a DataLoader whose batch_sampler has load_state_dict (TokenBatchSampler, ...), "
            f"got batch_sampler {type(sampler).__name__}"
        )
    sampler.load_state_dict(sampler_state(state))


def _main_state(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """The part of a loader state that holds the sampler's: the top (no workers) or the main snapshot."""
    if not isinstance(state, Mapping):
        raise InvalidParameterError(f"state: expected a StatefulDataLoader state_dict(), got {type(state).__name__}")
    if SNAPSHOT not in state:
        return state
    snapshot = state[SNAPSHOT]
    main = snapshot.get(MAIN_SNAPSHOT) if isinstance(snapshot, Mapping) else None
    if not isinstance(main, Mapping) or NUM_WORKERS not in main:
        raise InvalidParameterError(
            f"state: expected a StatefulDataLoader state_dict() with {SNAPSHOT}.{MAIN_SNAPSHOT}.{NUM_WORKERS}, "
            "got a damaged or foreign state"
        )
    return main
