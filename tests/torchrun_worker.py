"""One rank of the torchrun check (launched by ``tests/test_torchrun.py`` through ``torch.distributed.run``).

Joins the gloo process group torchrun describes in the environment, builds a
``TokenBatchSampler`` that takes rank and world size from ``torch.distributed``,
iterates one epoch through a ``DataLoader`` (or, with ``--resume``, the rest of
an epoch from a saved sampler state) and writes ``rank<r>.json`` with its
batches, the sampler state saved after ``--save-after`` batches and totals
summed over the group with ``all_reduce``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from arrowmt import PlainCollater, TokenBatchSampler, open_dataset


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--epoch", type=int, default=1)
    parser.add_argument("--save-after", type=int, default=0, help="record the sampler state after this many batches")
    parser.add_argument("--resume", type=Path, default=None, help="folder of a previous run: continue from its state")
    return parser.parse_args()


def run_epoch(sampler: TokenBatchSampler, loader: DataLoader, save_after: int) -> tuple[list[list[int]], Any]:
    """Every batch's sample ids (in the sampler's order) and the sampler state after ``save_after`` batches."""
    batches: list[list[int]] = []
    state = None
    for batch in loader:
        batches.append(batch["id"].tolist())
        if len(batches) == save_after:
            state = sampler.state_dict()
    return batches, state


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = open_dataset(args.data, "train")
    sampler = TokenBatchSampler(ds, max_tokens=args.max_tokens, seed=1, cache_dir=args.cache)
    assert (sampler.rank, sampler.num_replicas) == (rank, world), (sampler.rank, sampler.num_replicas)
    epoch = args.epoch
    if args.resume is not None:
        state = json.loads((args.resume / f"rank{rank}.json").read_text())["state"]
        sampler.load_state_dict(state)
        epoch = state["epoch"]
    sampler.set_epoch(epoch)  # a no-op when resuming in the middle of this epoch
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=PlainCollater(ds.special_ids))
    batches, state = run_epoch(sampler, loader, args.save_after)
    totals = torch.tensor([len(batches), sum(len(b) for b in batches)], dtype=torch.int64)
    dist.all_reduce(totals)
    report = {
        "rank": rank,
        "world": world,
        "backend": dist.get_backend(),
        "plan_batches": len(sampler.plan),
        "plan_dropped": sampler.plan.dropped,
        "batches": batches,
        "state": state,
        "total_batches": int(totals[0]),
        "total_samples": int(totals[1]),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
