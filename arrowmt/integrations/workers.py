"""Whether DataLoader worker processes help: the one piece of advice the integrations share, logged once.

A DataLoader worker hands each batch to the main process through shared memory and a pickled message per tensor.
arrowmt makes a batch in a fraction of a millisecond in the main process (memory-mapped rows, one gather per
column), so the hand-over costs more than the batch: ``DataLoader(num_workers=2)`` read 0.09x the tokens/s of
``num_workers=0`` (``benchmarks/bench_workers.py``, docs/benchmarks.md, "Loaders"). Workers pay off for a collate
function that does real work (tokenizing text, augmentation).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

_ADVISED: set[str] = set()


def advise_workers(workers: int, where: str, setting: str) -> None:
    """Log once per process and ``where`` (a task, a trainer) that ``workers`` DataLoader workers slow arrowmt's
    batches down, naming ``setting``, the option that reads them in the main process."""
    if workers <= 0 or where in _ADVISED:
        return
    _ADVISED.add(where)
    logger.warning(
        "%s: %d DataLoader worker(s) hand every batch to the main process through shared memory, which costs more "
        "than arrowmt takes to make it (2 workers read 0.09x the tokens/s of none: docs/benchmarks.md, Loaders); "
        "%s reads the batches in the main process, with arrowmt's read-ahead",
        where,
        workers,
        setting,
    )
