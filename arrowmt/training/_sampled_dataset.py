"""A corpus read in sampled segmentations (subword regularization) as a torch dataset.

Index ``e * N + r`` (``N`` rows, ``len(ds)``) is row ``r`` as epoch ``e`` draws it (:mod:`arrowmt.segments`): a
segmentation drawn afresh each epoch from its words' exact law, the same in every process. The dataset holds no
epoch, so DataLoader workers (even persistent ones) and resumed runs read exactly the rows a plan names. Each epoch
is read from its copy (:func:`arrowmt.copies.epoch_copy`: the rows as the epoch draws them, written once by the
first process that needs them, checked before each process first reads it); once an epoch is opened, the main
process writes the next one's copy on a thread, so that it is ready when that epoch starts. ``TokenBatchSampler``
walks one plan per epoch (:meth:`ArrowMTSampledDataset.epoch_plans`): every row once, batched by the lengths it
has in that epoch. Every rank must read with the same seed and alpha: with ``torch.distributed`` initialized, the
first plan compares them and refuses a disagreement.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from typing import Any

import numpy as np
import torch.utils.data

from arrowmt._arrays import groups_by
from arrowmt._checks import check_integer
from arrowmt.copies import epoch_copy
from arrowmt.format import Dictionary, SplitMetadata
from arrowmt.io import WordRanges
from arrowmt.plans import EpochPlans, PlanParams, ShiftedPlan, load_plan
from arrowmt.reading import Spans, check_indices
from arrowmt.segments import SampledSplit
from arrowmt.splits import OverSplit, Split
from arrowmt.training._batch import GatheredBatch
from arrowmt.training._rows_dataset import RowsDataset
from arrowmt.training._world import same_on_every_rank

EPOCHS = 2**20  # the epochs an index can name: e * N + r for 0 <= e < EPOCHS (len(ds) is N: the rows)
KEEP_EPOCHS = 2  # epoch copies kept open (and on disk): the current one and the one before


class ArrowMTSampledDataset(OverSplit, RowsDataset):
    """Split ``corpus`` read in its sampled segmentations: index ``e * N + r`` is row ``r`` as epoch ``e`` draws it
    (``seed`` and ``alpha``: the samples' own unless given; ``len(ds)`` is ``N``, the rows). Ids are those of
    :meth:`dictionary` (the corpus's, extended by the pieces only samples use: size a model's embeddings by it).
    ``cache_dir`` (default ``<corpus>/.arrowmt-cache``) holds the epochs' copies; ``read_ahead`` writes the next
    epoch's copy on a thread once an epoch is opened (in the main process)."""

    def __init__(self, corpus: Split, seed: int | None = None, cache_dir: str | os.PathLike[str] | None = None,
                 alpha: float | None = None, read_ahead: bool = True) -> None:  # fmt: skip
        self.corpus = corpus
        self.sampled = SampledSplit(corpus, seed=seed, alpha=alpha)
        self.cache_dir = cache_dir
        self.read_ahead = read_ahead
        self._epochs: dict[int, Split] = {}
        self._ahead: dict[int, threading.Thread] = {}  # epoch -> the thread writing its copy
        self._agreed = False

    @property
    def seed(self) -> int:
        return self.sampled.seed

    @property
    def alpha(self) -> float:
        return self.sampled.alpha

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the opened epoch copies (a worker opens those it reads) and no thread."""
        return {**self.__dict__, "_epochs": {}, "_ahead": {}}

    def __repr__(self) -> str:
        return (
            f"ArrowMTSampledDataset({str(self.path)!r}, {self.split!r}: {self.rows} rows drawn afresh each epoch, "
            f"seed {self.seed}, alpha {self.alpha:g})"
        )

    @property
    def rows(self) -> int:
        return len(self.corpus)

    @property
    def metadata(self) -> SplitMetadata:
        """The corpus split's, its columns' dictionaries the samples' (the ids this dataset gives)."""
        return replace(self.corpus.metadata, columns=self.sampled.forms.metadata.columns)

    def __len__(self) -> int:
        """The rows of the split (an epoch); indices go on past it, epoch after epoch."""
        return self.rows

    def epoch(self, epoch: int) -> Split:
        """Epoch ``epoch``'s copy: every row as the epoch draws it (written by the first process that asks)."""
        found = self._epochs.get(epoch)
        if found is None:
            epoch = check_integer("epoch", epoch, 0, EPOCHS, high_name="2**20")
            found = self._copy(epoch)
            for old in sorted(self._epochs)[: max(len(self._epochs) - KEEP_EPOCHS + 1, 0)]:
                del self._epochs[old]
            self._epochs[epoch] = found
            self._prepare(epoch + 1)
        return found

    def _copy(self, epoch: int) -> Split:
        return epoch_copy(self.sampled, epoch, self.cache_dir, KEEP_EPOCHS + 1)

    def _prepare(self, epoch: int) -> None:
        """Write epoch ``epoch``'s copy on a thread (main process only: a worker reads what its plan names)."""
        if not self.read_ahead or epoch >= EPOCHS or torch.utils.data.get_worker_info() is not None:
            return
        self._ahead = {e: t for e, t in self._ahead.items() if t.is_alive()}
        if epoch not in self._ahead:
            thread = threading.Thread(target=self._copy, args=(epoch,), name=f"arrowmt-epoch-{epoch}", daemon=True)
            self._ahead[epoch] = thread
            thread.start()

    def wait_read_ahead(self) -> None:
        """Wait for the epoch copies being written on threads, if any (tests, clean exits)."""
        for thread in list(self._ahead.values()):
            thread.join()

    def _by_epoch(self, indices: np.ndarray) -> list[tuple[np.ndarray, Split, np.ndarray]]:
        """(positions in ``indices``, the epoch's copy, its rows) for each epoch the indices name."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        check_indices(indices, self.rows * EPOCHS, f"{self!r}")
        return [(where, self.epoch(e), rows) for e, where, rows in groups_by(indices, self.rows)]

    def row_array(self, column: str, index: int) -> np.ndarray:
        [(_, split, rows)] = self._by_epoch(np.array([index]))
        return split.row_array(column, int(rows[0]))

    def column_spans(self, column: str, indices: np.ndarray) -> Spans:
        """Where rows ``indices`` lie in their epochs' copies (zero-copy for indices of one epoch)."""
        return _spans(column, self._by_epoch(indices))

    def __getitems__(self, indices: list[int]) -> GatheredBatch:
        """The rows ``indices`` as their epochs read them, located per column (a collater's input)."""
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        parts = self._by_epoch(ids)
        return GatheredBatch(ids, {c: _spans(c, parts) for c in self.columns})

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where rows ``indices`` lie in their epochs' copies (the samplers' read-ahead)."""
        return [r for _, split, rows in self._by_epoch(indices) for r in split.word_ranges(rows, values)]

    def lengths(self, column: str, indices: np.ndarray, dtype: type | np.dtype = np.int64) -> np.ndarray:
        """Pieces (``</s>`` included) of rows ``indices`` as their epochs read them."""
        return self.column_spans(column, indices).lengths.astype(dtype)

    def num_tokens(self, indices: np.ndarray) -> np.ndarray:
        """fairseq's size of a row (int64): max over columns of its pieces (the rows located once)."""
        parts = self._by_epoch(indices)
        sizes = _spans(self.columns[0], parts).lengths.astype(np.int64)
        for column in self.columns[1:]:
            np.maximum(sizes, _spans(column, parts).lengths, out=sizes)
        return sizes

    def dictionary(self, column: str) -> Dictionary:
        return self.sampled.dictionary(column)

    def max_length(self, column: str) -> int:
        """The most pieces a row can take in any epoch (see :meth:`SampledSplit.max_length`)."""
        return self.sampled.max_length(column)

    def fingerprint(self) -> str:
        return self.sampled.fingerprint()

    def check_unchanged(self) -> None:
        self.sampled.check_unchanged()

    def epoch_plans(self, params: PlanParams) -> EpochPlans:
        """One plan per epoch (what a sampler walks): fairseq's batches of the epoch's copy, as this dataset's
        indices; each plan is kept in its epoch's copy (in this dataset's ``cache_dir``) and goes with it."""

        if not self._agreed:
            same_on_every_rank({"seed": self.seed, "alpha": self.alpha}, "the sampled segmentations' seed and alpha")
            self._agreed = True

        def plan(epoch: int) -> ShiftedPlan:
            return ShiftedPlan(load_plan(self.epoch(epoch), params, None), epoch * self.rows)

        return EpochPlans(plan)


def _spans(column: str, parts: list[tuple[np.ndarray, Split, np.ndarray]]) -> Spans:
    """``column`` of the rows ``parts`` locates (:meth:`ArrowMTSampledDataset._by_epoch`), in their order."""
    if not parts:  # no rows (a short rank's empty batch): no epoch's copy opened for them
        return Spans.empty()
    if len(parts) == 1:
        return parts[0][1].column_spans(column, parts[0][2])
    spans = [(split.column_spans(column, rows), where) for where, split, rows in parts]
    order = np.argsort(np.concatenate([where for _, where in spans]), kind="stable")  # back to the given order
    return Spans.concat_compact([(s.words, s.starts, s.lengths) for s, _ in spans]).select(order).compact()
