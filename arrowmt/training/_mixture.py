"""Mixtures: several corpora (splits or views) trained as one, each keeping its identity.

:class:`Mixture` lays its corpora end to end: corpus ``k`` holds the global ids
``offsets[k]`` to ``offsets[k + 1] - 1``, so a batch id says which corpus a row
comes from (for tags and per-corpus counts). It is a torch dataset whose
``__getitems__`` gathers a batch from all its corpora at once.

:class:`MixtureBatchSampler` draws each epoch's rows with per-corpus weights or a
temperature over the sizes (:mod:`arrowmt.mixing._mixing`: fairseq's
``translation_multi_simple_epoch`` arithmetic, deterministic in (seed, epoch)),
plans fairseq's token-budget batches over them and stores the plan as a memory-mapped
file shared by every rank (:mod:`arrowmt.mixing._mixture_plan`). The plan of an epoch is
named by its content (corpora, batching, ratios, epoch size, seed, epoch), so weights or the
temperature may change from one epoch to the next (a schedule) and nothing is reconverted.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch.utils.data import Dataset

from arrowmt._arrays import sorted_unique
from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError, VocabularyError
from arrowmt.bucketing import check_seed
from arrowmt.format import Manifest, SpecialIds
from arrowmt.io import WordRanges
from arrowmt.mixing import (
    RULE_FIELDS,
    MixtureRule,
    Sampling,
    TemperatureSchedule,
    Weights,
    WeightSchedule,
    as_sizes,
    check_temperature,
    check_weights,
    corpus_of,
    load_mixture_plan,
    offsets_of,
    resample_counts,
    temperature_ratios,
)
from arrowmt.plans import BatchPlan, EpochPlans, PlanParams, refuse_changing_lengths
from arrowmt.reading import CacheOptions, Spans, check_indices, local_folder
from arrowmt.storage import is_url
from arrowmt.training._batch import GatheredBatch
from arrowmt.training._dataset import ArrowMTDataset
from arrowmt.training._mixture_gather import MixtureGather
from arrowmt.training._options import DEFAULT_MAX_TOKENS, SamplerOptions, refuse_both, sampler_arguments
from arrowmt.training._sampler import PlanSampler
from arrowmt.training._tags import TagCollater, Tags
from arrowmt.training._view_dataset import open_view_dataset

logger = logging.getLogger(__name__)


class Corpus(Protocol):
    """What a mixture needs of a corpus: a split, a view, or their torch datasets."""

    path: Path
    columns: tuple[str, ...]
    special_ids: SpecialIds

    def __len__(self) -> int: ...

    def lengths(self, column: str, indices: np.ndarray | None = None, dtype: Any = np.int64) -> np.ndarray: ...

    def column_spans(self, column: str, indices: np.ndarray) -> Spans: ...

    def row_array(self, column: str, index: int) -> np.ndarray: ...

    def fingerprint(self) -> str: ...


CorpusSource = str | os.PathLike[str] | tuple[str | os.PathLike[str], str] | Corpus


class Mixture(Dataset):
    """Corpora (``name -> split or view``) as one torch dataset; corpus ``k`` holds ids ``offsets[k]..offsets[k+1]-1``.

    All corpora must have the same columns, special ids and dictionaries (one model
    reads them all). ``tags`` gives corpora tokens prepended at read time
    (:mod:`arrowmt.training._tags`); the batch plans count them.
    """

    def __init__(self, corpora: Mapping[str, Corpus], tags: Mapping[str, Tags] | Sequence[Tags] | None = None) -> None:
        if not corpora:
            raise InvalidParameterError("corpora: expected at least one corpus, got none")
        self.names = [str(name) for name in corpora]
        self.corpora = list(corpora.values())
        self.columns = tuple(self.corpora[0].columns)
        self.special_ids = self.corpora[0].special_ids
        _check_compatible(self.names, self.corpora)
        self.sizes = np.array([len(c) for c in self.corpora], dtype=np.int64)
        self.offsets = offsets_of(self.sizes)
        self.tags = _tags_per_corpus(self.names, tags)
        self._gather: MixtureGather | bool | None = None  # False: the corpora's readers do every batch

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the corpora (by path) without the gather tables; each process builds its own."""
        return {**self.__dict__, "_gather": None}

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {s}" for n, s in zip(self.names, self.sizes.tolist(), strict=True))
        return f"Mixture({parts})"

    @property
    def path(self) -> Path:
        """The first corpus's folder: mixture plans are cached in its ``.arrowmt-cache`` unless told otherwise."""
        return Path(self.corpora[0].path)

    def corpus_of(self, ids: np.ndarray) -> np.ndarray:
        """The corpus number of each global id."""
        return corpus_of(self.offsets, _checked_ids(ids, len(self)))

    def locate(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(corpus number, row within that corpus) of each global id."""
        corpus = self.corpus_of(ids)
        return corpus, np.asarray(ids, dtype=np.int64) - self.offsets[corpus]

    def lengths(self, column: str, dtype: Any = np.int64) -> np.ndarray:
        """Token counts of every global row of ``column``, each corpus's tags included."""
        parts = [c.lengths(column, dtype=dtype) + t.extra(column) for c, t in zip(self.corpora, self.tags, strict=True)]
        return np.concatenate(parts).astype(dtype, copy=False)

    def fingerprint(self) -> str:
        """Identity of the mixture's content: names, corpora fingerprints and sizes, tags."""
        digest = hashlib.sha256()
        for name, corpus, tags in zip(self.names, self.corpora, self.tags, strict=True):
            digest.update(f"{name}\0{corpus.fingerprint()}\0{len(corpus)}\0{tags.source}\0{tags.target};".encode())
        return digest.hexdigest()

    def word_ranges(self, indices: np.ndarray, values: bool) -> list[WordRanges]:
        """Where the global rows ``indices`` lie in their corpora's maps, for read-ahead (located at once by the
        gather where it applies: one request per file however many views read it)."""
        gather = self._gather_of()
        found = gather.word_ranges(_checked_ids(indices, len(self)), values) if gather else None
        if found is not None:
            return found
        corpus, local = self.locate(indices)
        out: list[WordRanges] = []
        for k in sorted_unique(corpus).tolist():
            out.extend(self.corpora[k].word_ranges(local[corpus == k], values))  # type: ignore[attr-defined]
        return out

    def __getitem__(self, index: int) -> dict[str, torch.Tensor | int]:
        corpus, local = self.locate(np.array([index]))
        k, row = int(corpus[0]), int(local[0])
        item: dict[str, torch.Tensor | int] = {"id": int(index)}
        for column in self.columns:
            item[column] = torch.from_numpy(self.corpora[k].row_array(column, row))
        return item

    def __getitems__(self, indices: Sequence[int]) -> GatheredBatch:
        """The rows of global ids ``indices`` per column (ids kept), for a collater.

        One vectorized gather over every corpus (:class:`MixtureGather`), whatever the
        number of corpora; the corpora's own readers when that does not apply.
        """
        ids = _checked_ids(np.asarray(indices, dtype=np.int64).reshape(-1), len(self))
        spans = self._fast_spans(ids)
        if spans is None:
            corpus, local = self.locate(ids)
            spans = {c: self._column_spans(c, corpus, local) for c in self.columns}
        return GatheredBatch(ids, spans)

    def _fast_spans(self, ids: np.ndarray) -> dict[str, Spans] | None:
        gather = self._gather_of()
        return gather.spans(ids) if gather else None

    def _gather_of(self) -> MixtureGather | None:
        """The one-step gather over every corpus, made at first use (None where it does not apply)."""
        if self._gather is None:
            try:
                self._gather = MixtureGather(self.corpora, self.offsets, self.columns)
            except TypeError:
                self._gather = False
        return self._gather or None

    def _column_spans(self, column: str, corpus: np.ndarray, local: np.ndarray) -> Spans:
        present = sorted_unique(corpus)
        if present.size == 1:
            return self.corpora[int(present[0])].column_spans(column, local)
        if present.size == 0:
            return Spans.empty()
        order = np.argsort(corpus, kind="stable")
        parts = []
        for k in present.tolist():
            spans = self.corpora[k].column_spans(column, local[order[corpus[order] == k]])
            parts.append((spans.words, spans.starts, spans.lengths))
        return Spans.concat_compact(parts).select(np.argsort(order, kind="stable"))

    def tag_collater(self, collater: Callable[[GatheredBatch], Any]) -> Callable[[Any], Any]:
        """``collater`` behind this mixture's tags (``collater`` itself when no corpus has tags)."""
        if not any(t.source or t.target for t in self.tags):
            return collater
        return TagCollater(collater, self.tags, self.offsets)


def _checked_ids(ids: np.ndarray, n: int) -> np.ndarray:
    """``ids`` as int64, IndexError naming the first outside ``0 <= id < n``."""
    ids = np.asarray(ids, dtype=np.int64)
    check_indices(ids, n, "mixture")
    return ids


def _check_compatible(names: list[str], corpora: list[Corpus]) -> None:
    """Same columns, special ids and per-column dictionaries in every corpus."""
    first = corpora[0]
    for name, corpus in zip(names[1:], corpora[1:], strict=True):
        if tuple(corpus.columns) != tuple(first.columns) or corpus.special_ids != first.special_ids:
            raise InvalidParameterError(
                f"corpora[{name!r}]: expected columns {list(first.columns)} and {first.special_ids} as in "
                f"corpora[{names[0]!r}], got {list(corpus.columns)} and {corpus.special_ids}"
            )
        for column in first.columns:
            mine, theirs = _dictionary(corpus, column), _dictionary(first, column)
            if mine[1] != theirs[1]:
                raise VocabularyError(
                    f"corpora[{name!r}]: column {column!r} uses dictionary {mine[0]} (sha256 {mine[1][:12]}), "
                    f"corpora[{names[0]!r}] uses {theirs[0]} (sha256 {theirs[1][:12]}); a mixture needs one "
                    "dictionary per column (convert with shared dictionaries)"
                )


def _dictionary(corpus: Corpus, column: str) -> tuple[str, str]:
    info = corpus.metadata.columns[column]  # type: ignore[attr-defined]
    return info.dictionary, info.dictionary_sha256


def _tags_per_corpus(names: list[str], tags: Mapping[str, Tags] | Sequence[Tags] | None) -> list[Tags]:
    if tags is None:
        return [Tags() for _ in names]
    if isinstance(tags, Mapping):
        unknown = sorted(set(tags) - set(names))
        if unknown:
            raise InvalidParameterError(f"tags: expected corpus names among {names}, got {unknown}")
        return [tags.get(name, Tags()) for name in names]
    if len(tags) != len(names):
        raise InvalidParameterError(f"tags: expected {len(names)} (one per corpus), got {len(tags)}")
    return list(tags)


def open_corpus(
    source: CorpusSource,
    split: str = "train",
    manifests: dict[Path, Manifest] | None = None,
    cache: CacheOptions | None = None,
) -> Corpus:
    """A mixture corpus: a dataset object as is, ``(folder, split)``, a view file, or a folder's ``split``.

    ``manifests`` caches each folder's manifest, so many splits of one folder load it once.
    A folder may be a URL, cached as ``cache`` says (default: :class:`CacheOptions` from the environment).
    """
    if hasattr(source, "column_spans"):
        return source  # type: ignore[return-value]
    if isinstance(source, tuple):
        source, split = source
    if is_url(source):
        options = cache or CacheOptions.of(None, None)
        folder = local_folder(source, options.cache_dir, options.cache_limit)  # type: ignore[arg-type]
    else:
        folder = Path(source)  # type: ignore[arg-type]
        if folder.is_file():
            return open_view_dataset(folder)
    cache = {} if manifests is None else manifests
    if folder not in cache:
        cache[folder] = Manifest.load(folder)
    return ArrowMTDataset(folder, split, cache[folder])


def open_mixture(
    corpora: Mapping[str, CorpusSource],
    split: str = "train",
    tags: Mapping[str, Tags] | Sequence[Tags] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
) -> Mixture:
    """Open every corpus (see :func:`open_corpus`; folders give their ``split``) as one :class:`Mixture`.

    Corpora given by URL are cached in ``cache_dir``, each holding at most ``cache_limit`` bytes.
    """
    manifests: dict[Path, Manifest] = {}
    cache = CacheOptions.of(cache_dir, cache_limit)
    return Mixture({name: open_corpus(source, split, manifests, cache) for name, source in corpora.items()}, tags)


class MixtureBatchSampler(PlanSampler):
    """fairseq's token-budget batches over each epoch's draw from a :class:`Mixture`; distributed, resumable.

    Sampling: ``weights`` (one per corpus, a ``name -> weight`` mapping, or a function
    of the epoch giving either: a schedule), or ``temperature`` T (corpus ``i``
    drawn in proportion to ``n_i ** (1 / T)``; a number, or a function of the epoch giving
    one: a schedule), or neither: every row once per epoch. :meth:`set_weights` and
    :meth:`set_temperature` change the rule (either one replaces the other) from the next
    epoch on.
    With weights or a temperature, each epoch draws ``epoch_size`` rows (default: as
    many as draw the largest corpus once, at most 1.5 times all rows), corpus ``i``
    about ``epoch_size * p_i`` of them: fewer than it has (down-sampled, without
    replacement) or more (up-sampled, with replacement). The draw is a pure function
    of (``resample_seed``, default ``seed``; epoch), the same in every process.

    Batches, ranks, epochs, resume and ``shuffle_window`` are :class:`~arrowmt.training._sampler.PlanSampler`'s;
    the state also records the epoch's ratios, so a resumed epoch draws the same rows
    even if the schedule changed since. :meth:`epoch_counts` reports how many rows each
    corpus contributes to the current epoch.
    """

    def __init__(
        self,
        mixture: Mixture,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        *,
        spec: PlanParams | None = None,
        options: SamplerOptions | None = None,
        rule: MixtureRule | None = None,
        keep_plans: int = 2,
        **keywords: Any,
    ) -> None:
        """``keywords``: fairseq's batching options by arrowmt's names, as :class:`TokenBatchSampler` takes them,
        the options every sampler shares (:class:`~arrowmt.training._options.SamplerOptions`) and the sampling rule's
        fields (:class:`MixtureRule`: ``weights``, ``temperature``, ``epoch_size``, ``resample_seed``); or the three
        as values, ``spec=``, ``options=``, ``rule=``."""
        args = sampler_arguments(PlanParams, "MixtureBatchSampler", max_tokens, keywords, spec, options, RULE_FIELDS)
        refuse_changing_lengths(args.spec.batch_shapes, mixture)
        refuse_both("rule", rule, args.own)
        rule = rule if rule is not None else MixtureRule(**args.own)
        walk = args.walk
        if rule.weights is not None and rule.temperature is not None:
            raise InvalidParameterError(f"temperature: expected None when weights are given, got {rule.temperature!r}")
        weights, temperature = rule.weights, rule.temperature
        self.mixture = mixture
        self.params = args.spec
        self.epoch_size = None if rule.epoch_size is None else check_integer("epoch_size", rule.epoch_size, 1)
        self.resample_seed = args.options.seed if rule.resample_seed is None else int(rule.resample_seed)
        check_seed("resample_seed", self.resample_seed)
        self.cache_dir = args.options.cache_dir
        self.keep_plans = check_integer("keep_plans", keep_plans, 1)
        self._weights: WeightSchedule | None = None
        self.temperature: TemperatureSchedule | None = None
        self._pinned: dict[int, np.ndarray | None] = {}  # epoch -> ratios fixed by a loaded state or a change
        self._epoch_plans = EpochPlans(self.epoch_plan)
        if temperature is not None:
            self.set_temperature(temperature)
        else:
            self.set_weights(weights)
        self._begin(self._epoch_plans, walk, mixture)

    def __repr__(self) -> str:
        """Without loading a plan (each epoch's is drawn when first needed)."""
        where = f"rank {self.rank} of {self.num_replicas}"
        return f"MixtureBatchSampler({self.mixture!r}, {self._rule()}; epoch {self.epoch}, {where}, seed {self.seed})"

    def _rule(self) -> str:
        """How later epochs are drawn: ``temperature 2.0``, ``weights [...]``, a schedule, or concatenation."""
        if self.temperature is not None:
            return "temperature schedule" if callable(self.temperature) else f"temperature {self.temperature}"
        if callable(self._weights):
            return "weight schedule"
        return "concatenation" if self._weights is None else f"weights {self._as_ratios(self._weights).tolist()}"

    # -- each epoch's plan (the sampler's plan provider), loaded when first needed

    def epoch_plan(self, epoch: int) -> BatchPlan:
        """Epoch ``epoch``'s batch plan (built once, then mapped from the cache)."""
        sampling = Sampling(self.epoch_ratios(epoch), self.epoch_size, self.resample_seed, int(epoch))
        plan = load_mixture_plan(self.mixture, self.params, sampling, self.cache_dir, self.keep_plans)
        logger.info("mixture epoch %d: %d batches; rows per corpus %s", epoch, len(plan), self.epoch_counts(epoch))
        return plan

    # -- sampling

    def set_weights(self, weights: WeightSchedule | None) -> None:
        """New weights (or schedule) for the epochs after the current one, in place of the weights or temperature
        given before (None: plain concatenation); the current epoch keeps its draw."""
        if weights is not None and not callable(weights):
            self._as_ratios(weights)  # check now
        self._keep_current_draw()
        self._weights, self.temperature = weights, None

    def set_temperature(self, temperature: TemperatureSchedule | None) -> None:
        """A new temperature (or a schedule: a function of the epoch giving one) for the epochs after the current
        one, in place of the weights or temperature given before; the current epoch keeps its draw."""
        if temperature is not None and not callable(temperature):
            check_temperature(temperature)
        self._keep_current_draw()
        self._weights, self.temperature = None, temperature

    def _keep_current_draw(self) -> None:
        """Pin the ratios of the epoch whose plan is loaded: a change of rule applies from the next epoch."""
        loaded = self._epoch_plans.loaded_epoch
        if loaded is not None:
            self._pinned[loaded] = self.epoch_ratios(loaded)

    def epoch_ratios(self, epoch: int) -> np.ndarray | None:
        """The sampling ratios of epoch ``epoch`` (not normalized), or None for plain concatenation."""
        if epoch in self._pinned:
            return self._pinned[epoch]
        if self.temperature is not None:
            if not callable(self.temperature):
                return temperature_ratios(self.mixture.sizes, self.temperature)
            scheduled = check_temperature(self.temperature(epoch), f"temperature schedule at epoch {epoch}")
            return temperature_ratios(self.mixture.sizes, scheduled)
        if self._weights is None:
            return None
        weights = self._weights(epoch) if callable(self._weights) else self._weights
        return self._as_ratios(weights)

    def _as_ratios(self, weights: Weights) -> np.ndarray:
        if isinstance(weights, Mapping):
            unknown = sorted(set(weights) - set(self.mixture.names))
            if unknown:
                raise InvalidParameterError(f"weights: expected corpus names among {self.mixture.names}, got {unknown}")
            weights = [float(weights.get(name, 0.0)) for name in self.mixture.names]
        return check_weights(weights, as_sizes(self.mixture.sizes))

    def epoch_counts(self, epoch: int | None = None) -> dict[str, int]:
        """Rows each corpus contributes to epoch ``epoch`` (default: the current one), before length limits."""
        epoch = self.epoch if epoch is None else int(epoch)
        ratios = self.epoch_ratios(epoch)
        if ratios is None:
            counts = self.mixture.sizes
        else:
            counts = resample_counts(self.mixture.sizes, ratios, self.epoch_size, self.resample_seed, epoch)
        return dict(zip(self.mixture.names, counts.tolist(), strict=True))

    # -- resume

    def state_dict(self) -> dict[str, Any]:
        """:meth:`PlanSampler.state_dict` plus the current epoch's ``ratios`` (None: concatenation)."""
        ratios = self.epoch_ratios(self.epoch)
        return {**super().state_dict(), "ratios": None if ratios is None else ratios.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the saved epoch with the ratios it was drawn with (see :meth:`PlanSampler.load_state_dict`)."""
        epoch = check_integer("state_dict['epoch']", state.get("epoch"), 0, 2**32, high_name="2**32")
        if "ratios" in state:
            ratios = state["ratios"]
            self._pinned[epoch] = None if ratios is None else self._as_ratios(ratios)
            if self._epoch_plans.loaded_epoch == epoch:
                self._epoch_plans.forget()  # drawn with other ratios
        super().load_state_dict(state)
