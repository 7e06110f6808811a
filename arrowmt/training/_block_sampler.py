"""``BlockBatchSampler``: fairseq's language-model batches of token blocks, resumable, elastic and distributed."""

from __future__ import annotations

from typing import Any

from arrowmt.blocks import cache_folder, load_block_plan
from arrowmt.plans import BlockSpec, check_source
from arrowmt.training._block_dataset import BlockDataset
from arrowmt.training._options import DEFAULT_MAX_TOKENS, SamplerOptions, sampler_arguments
from arrowmt.training._sampler import PlanSampler

BLOCK_SOURCE = "a BlockDataset (arrowmt.open_blocks(folder, split, tokens_per_sample, break_mode))"


class BlockBatchSampler(PlanSampler):
    """Batches of blocks of a :class:`BlockDataset`, as fairseq's ``language_modeling`` task builds them.

    The plan (``MonolingualDataset``'s order: by block size, ties in a ``seed``
    permutation; blocks longer than ``max_positions`` or ``max_tokens`` dropped, or an
    error unless ``skip_invalid_size_inputs``; ``batch_by_size``) is computed once per
    (blocks, parameters) and shared as a memory-mapped file in ``cache_dir`` (default:
    the dataset's). Epochs, ranks, ``state_dict``, elastic resume and ``shuffle_window`` (for a copy
    in plan order, ``arrowmt order --tokens-per-sample``: windows of it read in long stretches) are
    :class:`~arrowmt.training._sampler.PlanSampler`'s, as for ``TokenBatchSampler``.
    """

    def __init__(
        self,
        dataset: BlockDataset,
        max_tokens: int | None = DEFAULT_MAX_TOKENS,
        *,
        spec: BlockSpec | None = None,
        options: SamplerOptions | None = None,
        **keywords: Any,
    ) -> None:
        """``keywords``: fairseq's batching options by arrowmt's names (``max_sentences``,
        ``required_batch_size_multiple``, ``max_positions``, ``skip_invalid_size_inputs``) and the options every
        sampler shares (:class:`~arrowmt.training._options.SamplerOptions`); or ``spec=BlockSpec(...)`` and
        ``options=SamplerOptions(...)``. ``cache_dir`` defaults to the dataset's."""
        check_source("dataset", dataset, BLOCK_SOURCE, ("split", "table", "cache_dir"))
        args = sampler_arguments(BlockSpec, "BlockBatchSampler", max_tokens, keywords, spec, options)
        split = dataset.split
        cache_dir = args.options.cache_dir
        folder = cache_folder(split, cache_dir if cache_dir is not None else dataset.cache_dir)
        where = f"{split.path} split {split.split!r}"
        plan = load_block_plan(dataset.table, args.spec, folder, where, dataset.params)
        self._begin(plan, args.walk, dataset)
