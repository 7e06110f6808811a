"""``BlockBatchSampler``: fairseq's language-model batches of token blocks, resumable, elastic and distributed."""

from __future__ import annotations

import os

from arrowmt.blocks import cache_folder, load_block_plan
from arrowmt.io import DEFAULT_DEPTH
from arrowmt.plans import BlockSpec, check_source
from arrowmt.training._block_dataset import BlockDataset
from arrowmt.training._sampler import PlanSampler, walk_of

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

    def __init__(  # noqa: PLR0913  # fairseq's batching options (issue 50: one options value)
        self,
        dataset: BlockDataset,
        max_tokens: int | None = 4096,
        max_sentences: int | None = None,
        required_batch_size_multiple: int = 1,
        max_positions: int | None = None,
        seed: int = 1,
        shuffle: bool = True,
        num_replicas: int | None = None,
        rank: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        skip_invalid_size_inputs: bool = False,
        prefetch: int = DEFAULT_DEPTH,
        shuffle_window: int | None = None,
    ) -> None:
        check_source("dataset", dataset, BLOCK_SOURCE, ("split", "table", "cache_dir"))
        walk = walk_of(seed, shuffle, shuffle_window, num_replicas, rank, prefetch)
        params = BlockSpec(
            max_tokens=max_tokens,
            max_sentences=max_sentences,
            required_batch_size_multiple=required_batch_size_multiple,
            max_positions=max_positions,
            seed=walk.plan_seed,
            skip_invalid_size_inputs=skip_invalid_size_inputs,
        )
        split = dataset.split
        folder = cache_folder(split, cache_dir if cache_dir is not None else dataset.cache_dir)
        plan = load_block_plan(dataset.table, params, folder, f"{split.path} split {split.split!r}", dataset.params)
        self._begin(plan, walk, dataset)
