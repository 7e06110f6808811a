"""An arrowmt :class:`~arrowmt.training._mixture.Mixture` as a fairseq ``FairseqDataset``.

It stands where ``translation_multi_simple_epoch`` puts a ``SampledMultiDataset`` (or,
for validation, a ``ConcatDataset``) of ``LanguagePairDataset``s: samples are
``{"id", "source", "target"}`` with the mixture's global ids, batches go through
arrowmt's ``FairseqCollater`` behind the mixture's tags (language tokens prepended at
read time), and sizes count the tags, as fairseq's ``PrependTokenDataset`` sizes do.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np
from fairseq.data import FairseqDataset

from arrowmt.format import SOURCE, TARGET
from arrowmt.io import WordRanges
from arrowmt.training import FairseqCollater, GatheredBatch, Mixture

SIZE_CACHES = ("src_sizes", "tgt_sizes", "sizes")


class ArrowMixtureDataset(FairseqDataset):
    """fairseq's view of a mixture: global ids, tagged rows, fairseq's collated batches.

    ``sampled``: it stands for a ``SampledMultiDataset`` (each epoch drawn anew; an
    empty batch collates to None), else for a ``ConcatDataset`` (an empty batch gives ``{}``).
    """

    def __init__(self, mixture: Mixture, split: str, collater: FairseqCollater, sampled: bool) -> None:
        super().__init__()
        self.mixture = mixture
        self.split = split
        self.sampled = bool(sampled)
        self.collate = mixture.tag_collater(collater)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the cached size arrays."""
        return {k: v for k, v in self.__dict__.items() if k not in SIZE_CACHES}

    def __len__(self) -> int:
        return len(self.mixture)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """The untagged row (the collater adds the tags), as int64 tensors."""
        sample = self.mixture[int(index)]
        return {"id": sample["id"], "source": sample[SOURCE].long(), "target": sample[TARGET].long()}

    def __getitems__(self, indices: Any) -> GatheredBatch:
        return self.mixture.__getitems__(indices)

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where global rows ``indices`` lie in the corpora's maps, for arrowmt's read-ahead."""
        return self.mixture.word_ranges(indices, values)

    def collater(self, samples: Any) -> Any:
        if len(samples) == 0 and self.sampled:
            return None
        return self.collate(samples)

    @cached_property
    def src_sizes(self) -> np.ndarray:
        return self.mixture.lengths(SOURCE)

    @cached_property
    def tgt_sizes(self) -> np.ndarray:
        return self.mixture.lengths(TARGET)

    @cached_property
    def sizes(self) -> np.ndarray:
        return np.stack((self.src_sizes, self.tgt_sizes), axis=1)

    def num_tokens(self, index: int) -> int:
        return int(max(self.src_sizes[index], self.tgt_sizes[index]))

    def num_tokens_vec(self, indices: np.ndarray) -> np.ndarray:
        return np.maximum(self.src_sizes[indices], self.tgt_sizes[indices])

    def size(self, index: int) -> tuple[int, int]:
        return int(self.src_sizes[index]), int(self.tgt_sizes[index])

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return False  # each epoch draws its own rows, as SampledMultiDataset
