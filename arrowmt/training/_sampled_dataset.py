"""A corpus read in sampled segmentations (subword regularization) as a torch dataset.

Index ``s * N + r`` (``N`` rows, ``K`` samples) is row ``r`` in sample ``s`` (:mod:`arrowmt.segments`): the dataset
holds no epoch, so DataLoader workers and resumed runs read exactly the rows a plan names. The samplers walk one
plan per epoch (:meth:`ArrowMTSampledDataset.epoch_plans`), in which every row appears once, in its sample of that
epoch, batched by that epoch's lengths.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from arrowmt.format import Dictionary, Manifest, SpecialIds, SplitMetadata
from arrowmt.plans import EpochPlans, PlanParams, load_sampled_plan
from arrowmt.reading import check_indices
from arrowmt.segments import SampledSplit
from arrowmt.splits import Split
from arrowmt.training._batch import GatheredBatch
from arrowmt.training._rows_dataset import RowsDataset


class ArrowMTSampledDataset(RowsDataset):
    """Split ``corpus`` read in its sampled segmentations: ``len`` is rows times samples, index ``s * N + r`` row
    ``r`` in sample ``s``; ids are those of :meth:`dictionary` (the corpus's, extended by the pieces only samples
    use: size a model's embeddings by it). ``TokenBatchSampler`` plans each epoch from that epoch's samples."""

    def __init__(self, corpus: Split) -> None:
        self.sampled = SampledSplit(corpus)
        self.corpus = corpus

    def __repr__(self) -> str:
        return f"ArrowMTSampledDataset({str(self.path)!r}, {self.split!r}: {self.rows} rows, {self.samples} samples)"

    @property
    def rows(self) -> int:
        return len(self.corpus)

    @property
    def samples(self) -> int:
        return self.sampled.samples

    @property
    def path(self) -> Path:
        return self.corpus.path

    @property
    def split(self) -> str:
        return self.corpus.split

    @property
    def columns(self) -> tuple[str, ...]:
        return self.corpus.columns

    @property
    def manifest(self) -> Manifest:
        return self.corpus.manifest

    @property
    def metadata(self) -> SplitMetadata:
        return self.corpus.metadata

    @property
    def special_ids(self) -> SpecialIds:
        return self.corpus.special_ids

    @property
    def is_monolingual(self) -> bool:
        return self.corpus.is_monolingual

    def __len__(self) -> int:
        return self.rows * self.samples

    def rows_and_samples(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The row and the sample of each index (bounds-checked)."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        check_indices(indices, len(self), f"{self!r}")
        return indices % self.rows, indices // self.rows

    def row_array(self, column: str, index: int) -> np.ndarray:
        rows, samples = self.rows_and_samples(np.array([index]))
        return self.sampled.spans(column, rows, samples).row(0)

    def row(self, column: str, index: int) -> torch.Tensor:
        return torch.from_numpy(self.row_array(column, index))

    def __getitems__(self, indices: list[int]) -> GatheredBatch:
        """The rows ``indices`` in their samples, gathered per column (a collater's input)."""
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        rows, samples = self.rows_and_samples(ids)
        return GatheredBatch(ids, {c: self.sampled.spans(c, rows, samples) for c in self.columns})

    def lengths(self, column: str, indices: np.ndarray | None = None, dtype: type | np.dtype = np.int64) -> np.ndarray:
        """Pieces (``</s>`` included) of ``indices`` (every index when None)."""
        all_indices = np.arange(len(self), dtype=np.int64) if indices is None else indices
        rows, samples = self.rows_and_samples(all_indices)
        return self.sampled.lengths(column, rows, samples).astype(dtype)

    def num_tokens(self, indices: np.ndarray | None = None) -> np.ndarray:
        """fairseq's size of a row (int64): max over columns of its pieces."""
        sizes = self.lengths(self.columns[0], indices)
        for column in self.columns[1:]:
            np.maximum(sizes, self.lengths(column, indices), out=sizes)
        return sizes

    def dictionary(self, column: str) -> Dictionary:
        return self.sampled.dictionary(column)

    def fingerprint(self) -> str:
        return self.sampled.fingerprint()

    def check_unchanged(self) -> None:
        self.sampled.check_unchanged()

    def epoch_plans(
        self, params: PlanParams, seed: int, cache_dir: str | os.PathLike[str] | None, keep_plans: int = 2
    ) -> EpochPlans:
        """One plan per epoch (what a sampler walks): every row once, in its sample of the epoch under ``seed``."""
        return EpochPlans(lambda epoch: load_sampled_plan(self.sampled, params, seed, epoch, cache_dir, keep_plans))
