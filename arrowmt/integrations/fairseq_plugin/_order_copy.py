"""``--arrow-order-copy OUT``: one step from a ``fairseq-train`` command line to a copy in plan order.

A copy made by ``arrowmt order`` is read in plan order only by a run whose batching options are
the copy's, and fairseq's training iterator derives them from several flags (``--seed`` + the
epoch as the order seed, ``--required-batch-size-multiple``, the model's position limits,
``--skip-invalid-size-inputs-valid-test``). With this flag the task itself, at the point where it
plans the training batches, writes the copy of the training split with exactly the plan it
would read, and the run ends: the same command with ``--data OUT`` (and without the flag) then
reads its batches in long stretches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NoReturn

import torch

from arrowmt._errors import InvalidParameterError
from arrowmt.copies import order_blocks, order_copy
from arrowmt.integrations.fairseq_plugin._batches import IteratorOptions, plan_params
from arrowmt.integrations.fairseq_plugin._dataset import ArrowPairDataset
from arrowmt.plans import BatchSpec
from arrowmt.training import ArrowMTDataset, BlockDataset

logger = logging.getLogger(__name__)

FLAG = "--arrow-order-copy"


def refusal(cfg: Any, dataset: ArrowPairDataset, folders: list[str]) -> str | None:
    """Why the copy cannot be the one this translation run reads in plan order (None: it can)."""
    if type(dataset.arrow) is not ArrowMTDataset:
        return "the training split is read through a view or in sampled segmentations, not as a split of the folder"
    if dataset.reverse:
        return "the run trains the folder's reverse direction, whose plan no copy stores"
    return shared_refusal(cfg, folders)


def shared_refusal(cfg: Any, folders: list[str]) -> str | None:
    """Why no copy is read in plan order by a run of these options, whatever its task (None: one is)."""
    if len(folders) > 1:
        return f"--data names {len(folders)} folders (one per epoch); make a copy of each with 'arrowmt order'"
    if getattr(cfg, "rebuild_batches", False):
        return "--rebuild-batches plans every epoch anew (seed + epoch): no one copy is read in plan order"
    return None


def write_order_copy(cfg: Any, dataset: ArrowPairDataset, opts: IteratorOptions, folders: list[str]) -> NoReturn:
    """Write the copy of ``dataset``'s split stored by the plan this run makes for epoch ``opts.epoch`` to
    ``cfg.arrow_order_copy``, then end the run."""
    out = cfg.arrow_order_copy
    refuse(out, refusal(cfg, dataset, folders))
    fields = plan_params(dataset, opts, opts.epoch).key_fields()
    arrow = dataset.arrow
    cache = cfg.arrow_plan_cache_dir or None
    finish_with_copy(out, arrow.split, fields, lambda: order_copy(arrow.path, out, split=arrow.split, cache_dir=cache,
                                                                  **fields))  # fmt: skip


def write_block_order_copy(cfg: Any, blocks: BlockDataset, spec: BatchSpec, folders: list[str]) -> NoReturn:
    """Write the copy of ``blocks``' split with its LM blocks stored by the plan ``spec`` of this run to
    ``cfg.arrow_order_copy``, then end the run."""
    out = cfg.arrow_order_copy
    refuse(out, shared_refusal(cfg, folders))
    fields = spec.key_fields()
    split, params = blocks.split, blocks.params
    options = {"tokens_per_sample": params.tokens_per_sample, "break_mode": params.break_mode,
               "document_sep_len": params.document_sep_len, "cache_dir": cfg.arrow_plan_cache_dir or None}  # fmt: skip
    finish_with_copy(out, split.split, {**fields, **options},
                     lambda: order_blocks(split.path, out, split=split.split, **options, **fields))  # fmt: skip


def refuse(out: str, why: str | None) -> None:
    if why is not None:
        raise InvalidParameterError(f"arrow_order_copy: cannot make the copy this run reads ({out}): {why}")


def finish_with_copy(out: str, split: str, fields: dict[str, object], make: Callable[[], object]) -> NoReturn:
    """``make()`` the copy on rank 0 (the other ranks wait for it), say how to train on it, end the run (exit 0)."""
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if not distributed or torch.distributed.get_rank() == 0:
        make()
        logger.info(
            "%s: wrote %s, split %r stored in the order this run plans (%s); train on it: the same command with "
            "--data %s and without %s",
            FLAG,
            out,
            split,
            ", ".join(f"{k}={v}" for k, v in fields.items()),
            out,
            FLAG,
        )
    if distributed:
        torch.distributed.barrier()
    raise SystemExit(0)
