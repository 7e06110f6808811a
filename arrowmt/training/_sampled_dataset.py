"""A corpus read in sampled segmentations (subword regularization) as a torch dataset.

Index ``e * N + r`` (``N`` rows) is row ``r`` as epoch ``e`` reads it: in its sample
``epoch_samples(seed, e, r)`` (:mod:`arrowmt.segments`). The dataset holds no epoch, so DataLoader workers (even
persistent ones) and resumed runs read exactly the rows a plan names. Each epoch is read from its copy
(:func:`arrowmt.copies.epoch_copy`: the rows in their samples, written once by the first process that needs
them), zero-copy like the corpus itself. ``TokenBatchSampler`` walks one plan per epoch
(:meth:`ArrowMTSampledDataset.epoch_plans`): every row once, batched by the lengths it has in that epoch.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

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

EPOCHS = 2**20  # the epochs an index can name: e * N + r for 0 <= e < EPOCHS
KEEP_EPOCHS = 2  # epoch copies kept open (and on disk): the current one and the one before


class ArrowMTSampledDataset(OverSplit, RowsDataset):
    """Split ``corpus`` read in its sampled segmentations: index ``e * N + r`` is row ``r`` in its sample of epoch
    ``e`` (``seed``: the samples' own seed unless given). Ids are those of :meth:`dictionary` (the corpus's,
    extended by the pieces only samples use: size a model's embeddings by it). ``cache_dir`` (default
    ``<corpus>/.arrowmt-cache``) holds the epochs' copies."""

    def __init__(self, corpus: Split, seed: int | None = None, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self.corpus = corpus
        self.sampled = SampledSplit(corpus)
        self.seed = self.sampled.info.seed if seed is None else check_integer("seed", seed, 0)
        self.cache_dir = cache_dir
        self._epochs: dict[int, Split] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the opened epoch copies (a worker opens those it reads)."""
        return {**self.__dict__, "_epochs": {}}

    def __repr__(self) -> str:
        return (
            f"ArrowMTSampledDataset({str(self.path)!r}, {self.split!r}: {self.rows} rows in "
            f"{self.sampled.samples} samples, seed {self.seed})"
        )

    @property
    def rows(self) -> int:
        return len(self.corpus)

    @property
    def metadata(self) -> SplitMetadata:
        """The corpus split's, its columns' dictionaries the samples' (the ids this dataset gives)."""
        return replace(self.corpus.metadata, columns=self.sampled.forms.metadata.columns)

    def __len__(self) -> int:
        return self.rows * EPOCHS

    def epoch(self, epoch: int) -> Split:
        """Epoch ``epoch``'s copy: every row in its sample (written by the first process that asks)."""
        found = self._epochs.get(epoch)
        if found is None:
            epoch = check_integer("epoch", epoch, 0, EPOCHS, high_name="2**20")
            found = epoch_copy(self.sampled, self.seed, epoch, self.cache_dir, KEEP_EPOCHS)
            for old in sorted(self._epochs)[: max(len(self._epochs) - KEEP_EPOCHS + 1, 0)]:
                del self._epochs[old]
            self._epochs[epoch] = found
        return found

    def _by_epoch(self, indices: np.ndarray) -> list[tuple[np.ndarray, Split, np.ndarray]]:
        """(positions in ``indices``, the epoch's copy, its rows) for each epoch the indices name."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        check_indices(indices, len(self), f"{self!r}")
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
