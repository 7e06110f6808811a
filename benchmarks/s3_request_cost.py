"""What one small range request costs on the bench bucket: requests/s and client CPU, from 4, 16 and 32 threads.

Raw ``pyarrow`` reads of 16 KiB at random offsets of the copy in plan order, no cache: the floor under
``bench_s3.py``'s arrowmt rows, which make one such request per batch and column. Start the bucket with
``bench_s3.py serve --data ... --systems arrowmt-ordered``, export what it prints, then::

    .venv-peers/bin/python benchmarks/s3_request_cost.py --server-pid PID

The server's CPU per request is read from ``/proc/PID/stat`` (``--server-pid``, optional).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow.fs as pafs
from bench_s3 import BUCKET, PREFIX, cpu_seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-pid", type=int, default=None)
    p.add_argument("--requests", type=int, default=3000)
    args = p.parse_args()
    fs = pafs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"])
    handle = fs.open_input_file(f"{BUCKET}/{PREFIX['arrowmt-ordered']}/train.arrow")
    rng = random.Random(1)
    offsets = [rng.randrange(0, handle.size() - 16384) for _ in range(args.requests)]
    for workers in (4, 16, 32):
        server = cpu_seconds(args.server_pid) if args.server_pid else 0.0
        client, wall = time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda at: handle.read_at(16384, at), offsets))
        wall, client = time.perf_counter() - wall, time.process_time() - client
        served = (cpu_seconds(args.server_pid) - server) if args.server_pid else float("nan")
        per = 1e3 / len(offsets)
        rate = len(offsets) / wall
        print(f"{workers:2d} threads: {rate:6.0f} requests/s, client {client * per:.2f} ms CPU a request, "
              f"server {served * per:.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
