"""An ``ArrowMTDataset`` parallel split as a fairseq ``FairseqDataset`` (what ``LanguagePairDataset`` offers).

The dataset reads either direction of the split: with ``reverse`` its ``target``
column is fairseq's source and its ``source`` column fairseq's target (``-s en
-t de`` on a de-en folder), swapped at read time, as fairseq reads a data-bin's
``{split}.de-en.en`` as the source of an en-de task.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
from fairseq.data import Dictionary, FairseqDataset, data_utils

from arrowmt._errors import InvalidParameterError
from arrowmt.format import SOURCE, TARGET
from arrowmt.io import WordRanges
from arrowmt.training import ArrowMTDataset, FairseqCollater, GatheredBatch

SIZE_CACHES = ("src_sizes", "tgt_sizes", "sizes")
UNSHUFFLED_SPLIT = "test"  # fairseq's translation task orders this split without a permutation


class ArrowPairDataset(FairseqDataset):
    """fairseq samples ``{"id", "source", "target"}`` (int64 tensors) read from a memory-mapped split.

    Batches go through arrowmt's ``FairseqCollater``; the DataLoader's
    fast path (``__getitems__``) pads each batch straight out of the map.
    ``shuffle`` (default: every split but ``test``, as fairseq's translation
    task) makes the order a seeded permutation before the length sort.
    """

    def __init__(
        self,
        arrow: ArrowMTDataset,
        src_dict: Dictionary,
        tgt_dict: Dictionary,
        collater: FairseqCollater,
        reverse: bool = False,
        shuffle: bool | None = None,
        batch_shapes: int | None = None,
    ) -> None:
        super().__init__()
        if tuple(arrow.columns) != (SOURCE, TARGET):
            raise InvalidParameterError(
                f"dataset: expected a parallel split with columns {[SOURCE, TARGET]}, "
                f"got {list(arrow.columns)} in {arrow.path} split {arrow.split!r}"
            )
        self.arrow = arrow
        self.src_dict = src_dict
        self.tgt_dict = tgt_dict
        self.collate = collater
        self.reverse = bool(reverse)
        self.shuffle = arrow.split != UNSHUFFLED_SPLIT if shuffle is None else bool(shuffle)
        self.batch_shapes = batch_shapes  # at most this many batch shapes (the collater pads to them)

    @property
    def split(self) -> str:
        return self.arrow.split

    @property
    def source_column(self) -> str:
        """The split's column read as fairseq's source."""
        return TARGET if self.reverse else SOURCE

    @property
    def target_column(self) -> str:
        """The split's column read as fairseq's target."""
        return SOURCE if self.reverse else TARGET

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the cached size arrays (workers recompute them only if asked)."""
        return {k: v for k, v in self.__dict__.items() if k not in SIZE_CACHES}

    @cached_property
    def src_sizes(self) -> np.ndarray:
        return self.arrow.lengths(self.source_column)

    @cached_property
    def tgt_sizes(self) -> np.ndarray:
        return self.arrow.lengths(self.target_column)

    @cached_property
    def sizes(self) -> np.ndarray:
        """``(n, 2)`` source and target lengths, as ``LanguagePairDataset.sizes``."""
        return np.stack((self.src_sizes, self.tgt_sizes), axis=1)

    def __len__(self) -> int:
        return len(self.arrow)

    def __getitem__(self, index: int) -> dict[str, Any]:
        i = int(index)
        source, target = self.arrow.row(self.source_column, i), self.arrow.row(self.target_column, i)
        return {"id": i, "source": source.long(), "target": target.long()}

    def __getitems__(self, indices: Any) -> GatheredBatch:
        """The rows ``indices`` located for the collater (torch's DataLoader calls this)."""
        batch = self.arrow.__getitems__(indices)
        if not self.reverse:
            return batch
        return GatheredBatch(batch.ids, {SOURCE: batch.columns[TARGET], TARGET: batch.columns[SOURCE]})

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where rows ``indices`` lie in the corpus maps, for arrowmt's read-ahead."""
        return self.arrow.word_ranges(indices, values)

    def collater(self, samples: Any) -> dict[str, Any]:
        return self.collate(samples)

    def num_tokens(self, index: int) -> int:
        return int(max(self.src_sizes[index], self.tgt_sizes[index]))

    def num_tokens_vec(self, indices: np.ndarray) -> np.ndarray:
        return self.arrow.num_tokens(np.asarray(indices, dtype=np.int64))

    def size(self, index: int) -> tuple[int, int]:
        return int(self.src_sizes[index]), int(self.tgt_sizes[index])

    def ordered_indices(self) -> np.ndarray:
        """``LanguagePairDataset.ordered_indices``: stably sorted by target, then source length.

        The sort starts from a permutation drawn from numpy's global RNG (fairseq seeds it)
        when ``shuffle``, else from ``arange``.
        """
        order = np.random.permutation(len(self)) if self.shuffle else np.arange(len(self))
        order = order[np.argsort(self.tgt_sizes[order], kind="mergesort")]
        return order[np.argsort(self.src_sizes[order], kind="mergesort")]

    def filter_indices_by_size(self, indices: np.ndarray, max_sizes: Any) -> tuple[np.ndarray, list[int]]:
        return data_utils.filter_paired_dataset_indices_by_size(self.src_sizes, self.tgt_sizes, indices, max_sizes)
