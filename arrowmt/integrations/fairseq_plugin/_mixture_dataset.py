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

from arrowmt._arrays import groups_by
from arrowmt._errors import InvalidParameterError
from arrowmt.format import SOURCE, TARGET
from arrowmt.io import WordRanges
from arrowmt.training import ArrowMTSampledDataset, FairseqCollater, GatheredBatch, Mixture

SIZE_CACHES = ("src_sizes", "tgt_sizes", "sizes")
SIZES_BY_EPOCH = "sizes: a row's pieces change with the epoch (sampled segmentations); arrowmt's plans batch them"


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

    def epoch_mixture(self, epoch: int) -> Mixture:
        """The mixture epoch ``epoch``'s plan is built from: this one (its rows read alike in every epoch)."""
        return self.mixture

    def shift(self, epoch: int) -> int:
        """What epoch ``epoch``'s plan adds to the ids of its mixture: nothing."""
        return 0

    def plans_in(self, cache_dir: str | None) -> str | None:
        """Where the epochs' plans are kept: ``cache_dir`` (None: the first corpus's ``.arrowmt-cache``)."""
        return cache_dir


class ArrowMixtureSamplesDataset(ArrowMixtureDataset):
    """A training mixture read in its pairs' sampled segmentations (``--arrow-segmentation sampled``).

    Index ``e * M + g`` (``M`` rows in all) is global row ``g`` as epoch ``e`` reads it: each pair's row in its
    sample of the epoch, from the epoch's copies (:meth:`arrowmt.ArrowMTSampledDataset.epoch`, written once by the
    first process that asks), so the dataset holds no epoch and workers read exactly what a plan names. ``mixture``
    (the pairs in their converted ids) gives the names, sizes, tags and offsets, the same in every epoch;
    :meth:`epoch_mixture` is the epoch's, whose lengths its plan is built from.
    """

    def __init__(
        self, mixture: Mixture, samples: list[ArrowMTSampledDataset], split: str, collater: FairseqCollater
    ) -> None:
        super().__init__(mixture, split, collater, sampled=True)
        self.samples = samples
        self.rows = len(mixture)
        self._opened: tuple[int, Mixture] | None = None  # the epoch last read, and its mixture

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the epoch's mixture (a worker opens the one it reads)."""
        return {**super().__getstate__(), "_opened": None}

    def __len__(self) -> int:
        """The mixture's rows (an epoch); indices go on past it, epoch after epoch."""
        return self.rows

    def epoch_mixture(self, epoch: int) -> Mixture:
        """The pairs as epoch ``epoch`` reads them: a mixture of their epoch copies, tagged as :attr:`mixture` (the
        last one asked for kept open: an epoch's batches are read one epoch at a time)."""
        if self._opened is None or self._opened[0] != epoch:
            copies = {name: s.epoch(epoch) for name, s in zip(self.mixture.names, self.samples, strict=True)}
            self._opened = (epoch, Mixture(copies, self.mixture.tags))
        return self._opened[1]

    def shift(self, epoch: int) -> int:
        """What epoch ``epoch``'s plan adds to the ids of its mixture."""
        return epoch * self.rows

    def plans_in(self, cache_dir: str | None) -> None:
        """Beside the epoch's copies (the first pair's): each epoch's plan goes when its copies go."""
        return None

    def _by_epoch(self, indices: Any) -> list[tuple[np.ndarray, Mixture, np.ndarray]]:
        """(positions in ``indices``, the epoch's mixture, its global ids) for each epoch the indices name."""
        ids = np.asarray(indices, dtype=np.int64).reshape(-1)
        return [(where, self.epoch_mixture(e), rows) for e, where, rows in groups_by(ids, self.rows)]

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Row ``index`` as its epoch reads it; its id the mixture's global id (the tags are placed by it)."""
        [(_, mixture, ids)] = self._by_epoch([index])
        sample = mixture[int(ids[0])]
        return {"id": sample["id"], "source": sample[SOURCE].long(), "target": sample[TARGET].long()}

    def __getitems__(self, indices: Any) -> GatheredBatch:
        """The rows of a planned batch (one epoch's: the mixture's global ids, which the tags are placed by)."""
        parts = self._by_epoch(indices)
        if not parts:  # a short rank's padding batch: fairseq's empty batch
            return self.mixture.__getitems__(np.empty(0, dtype=np.int64))
        if len(parts) != 1:
            raise InvalidParameterError(f"indices: expected the rows of one epoch (a planned batch), got {len(parts)}")
        return parts[0][1].__getitems__(parts[0][2])

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        return [r for _, mixture, ids in self._by_epoch(indices) for r in mixture.word_ranges(ids, values)]

    @property
    def src_sizes(self) -> np.ndarray:  # type: ignore[override]
        raise InvalidParameterError(SIZES_BY_EPOCH)

    @property
    def tgt_sizes(self) -> np.ndarray:  # type: ignore[override]
        raise InvalidParameterError(SIZES_BY_EPOCH)
