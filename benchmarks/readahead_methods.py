"""Which way of reading ahead is fastest for a corpus larger than memory: one method, one fresh process.

The same batches (``TokenBatchSampler``, one rank of ``--world``), gathered and collated as in
training; before batch ``p`` is gathered, the pages of the tokens of batch ``p + depth`` (all
of batches ``0..depth`` at the start) are asked for with:

* ``none``: nothing (the map's random-access advice only);
* ``madvise``: ``MADV_WILLNEED`` on the map (what arrowmt does);
* ``fadvise``: ``posix_fadvise(POSIX_FADV_WILLNEED)`` on a file descriptor;
* ``preadv``: a pool of 8 threads reading the page runs with ``os.preadv`` (blocking reads, in flight together).

Run it cold under a memory budget, one method per process, e.g.::

    python benchmarks/memory_budget.py 1024 --evict bench-data/synth-12600000 -- \\
        python benchmarks/readahead_methods.py madvise --data bench-data/synth-12600000

It prints one JSON line: batches/s, bytes read from storage, the method.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arrowmt.testing import PAGE, WordRanges, will_need, word_page_runs
from benchmarks.run_one import read_bytes

METHODS = ("none", "madvise", "fadvise", "preadv")


class Issuer:
    """Asks for the page runs of word ranges of one split file by ``method``."""

    def __init__(self, method: str, path: Path) -> None:
        self.method = method
        self.fd = os.open(path, os.O_RDONLY)
        self.pool = ThreadPoolExecutor(8) if method == "preadv" else None
        self.scratch = [bytearray(256 * PAGE) for _ in range(8)]

    def issue(self, parts: list[WordRanges]) -> None:
        if self.method == "madvise":
            will_need(parts)
            return
        for part in parts:
            first, count = word_page_runs(part)
            for page, pages in zip((first * PAGE).tolist(), (count * PAGE).tolist(), strict=True):
                if self.method == "fadvise":
                    os.posix_fadvise(self.fd, page, pages, os.POSIX_FADV_WILLNEED)
                elif self.pool is not None:
                    self.pool.submit(self._read, page, pages)

    def _read(self, offset: int, size: int) -> None:
        buffer = self.scratch[hash(offset) % 8]
        os.preadv(self.fd, [memoryview(buffer)[: min(size, len(buffer))]], offset)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("method", choices=METHODS)
    p.add_argument("--data", type=Path, required=True, help="corpus folder from make_corpus.py")
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=4096)
    args = p.parse_args()

    from arrowmt import FairseqCollater, TokenBatchSampler, open_dataset

    ds = open_dataset(args.data / "arrowmt")
    sampler = TokenBatchSampler(ds, args.max_tokens, num_replicas=args.world, rank=0, prefetch=0)
    collate = FairseqCollater(ds.special_ids)
    order = sampler.epoch_batch_ids()[: args.batches]
    issuer = Issuer(args.method, ds.shards[0].path)
    io0, t0 = read_bytes(), time.perf_counter()
    tokens = 0
    for position in range(order.shape[0]):
        ahead = range(position + args.depth, position + args.depth + 1) if position else range(args.depth + 1)
        for q in ahead:
            if args.method != "none" and q < order.shape[0]:
                issuer.issue(ds.word_ranges(sampler.plan.batch(int(order[q])), True))
        batch = collate(ds.__getitems__(sampler.plan.batch(int(order[position])).tolist()))
        tokens += int(batch["ntokens"]) + int(batch["net_input"]["src_lengths"].sum())
    elapsed = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "method": args.method,
                "depth": args.depth,
                "batches": int(order.shape[0]),
                "batches_per_s": order.shape[0] / elapsed,
                "tokens_per_s": tokens / elapsed,
                "read_bytes": read_bytes() - io0,
                "read_amplification": (read_bytes() - io0) / (4 * tokens),
                "loadavg": os.getloadavg(),
            }
        )
    )
    if issuer.pool is not None:
        issuer.pool.shutdown(cancel_futures=True)
    return 0


if __name__ == "__main__":
    np.seterr(all="raise")
    raise SystemExit(main())
