"""What the per-record-batch offsets checksum costs, and what checking every offset at open would cost instead.

Converts a fairseq data-bin (``benchmarks/make_corpus.py`` makes one) into a folder of
its own, caches the batch plan once, then measures, each repeat in a fresh process:

* ``setup``: ``open_dataset`` + ``TokenBatchSampler(max_tokens=4096, seed=1)`` with the plan
  cached, as shipped (the checksums are checked lazily, per record batch on first use);
* ``setup_crc_at_open``: the same, plus a CRC-32 of every offset of every column (what
  checking at open would add);
* ``open``: ``open_split`` alone, and the part of it that parses the batches' checksums;
* ``first_batches``: ``ds.__getitems__`` of the plan's first ``--batches`` batches, with the
  lazy checks and with them switched off (their cost while training starts);
* ``check_every_piece``: every piece of every column checked (what one process pays, once, for all the
  offsets it may ever read: the "already checked" bitmap is per process);
* ``check_one_batch``: one record batch's check (65,536 rows of one column, in the page cache);
* cold runs of ``setup``, ``setup_crc_at_open`` and ``first_batches`` (checked and not)
  after evicting the split file from the page cache (``posix_fadvise(DONTNEED)`` on that
  file only): wall time and the bytes the process read from storage (``/proc/self/io``
  ``read_bytes``).

Usage::

    python benchmarks/bench_offsets_crc.py --data-bin bench-data/synth-12600000/data-bin \\
        --out bench-data/offsets-crc-12600000 --json benchmarks/results/offsets-crc-12600000.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

MAX_TOKENS = 4096
SEED = 1


def read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return -1


def crc_every_offset(split: object) -> int:
    """CRC-32 of every record batch's offsets of every column: bytes covered."""
    from arrowmt.testing import offsets_crc

    covered = 0
    for shard in split.shards:  # type: ignore[attr-defined]
        for column in shard.columns:
            for b in range(shard.offset_checks.present.shape[0]):
                offsets = shard.stored_offsets(column, b)
                offsets_crc(offsets)
                covered += offsets.nbytes
    return covered


def measure(mode: str, corpus: str, batches: int) -> dict[str, float]:
    """One measurement in this (fresh) process."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    import arrowmt  # noqa: F401  (imports outside the timing)
    from arrowmt import TokenBatchSampler, open_dataset, open_split
    from arrowmt.reading import _offsets_crc

    before, started = read_bytes(), time.perf_counter()
    if mode == "open":
        split = open_split(corpus)
        took = time.perf_counter() - started
        shard = split.shards[0]
        reader = ipc.open_stream(pa.BufferReader(pa.py_buffer(shard._map)))
        read = list(reader.iter_batches_with_custom_metadata())
        custom, rows = [m for _, m in read], [b.num_rows for b, _ in read]
        at = [shard.layouts[c].offsets_pos for c in shard.columns]
        parse_started = time.perf_counter()
        _offsets_crc.OffsetChecks.of(shard.path, shard.columns, custom, rows, shard.words, at)
        return {"open_s": took, "parse_checksums_s": time.perf_counter() - parse_started, "batches": len(custom)}
    if mode in ("setup", "setup_crc_at_open"):
        ds = open_dataset(corpus)
        TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=SEED)
        covered = crc_every_offset(ds) if mode == "setup_crc_at_open" else 0
        return {"seconds": time.perf_counter() - started, "read_bytes": read_bytes() - before, "crc_bytes": covered}
    if mode in ("first_batches", "first_batches_unchecked"):
        if mode == "first_batches_unchecked":
            _offsets_crc.OffsetChecks.ensure = lambda self, column, batches, local: None  # type: ignore[method-assign]
        ds = open_dataset(corpus)
        sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=SEED, prefetch=0)
        before, started = read_bytes(), time.perf_counter()
        for _, ids in zip(range(batches), sampler, strict=False):
            ds.__getitems__(ids)
        return {"seconds": time.perf_counter() - started, "read_bytes": read_bytes() - before}
    if mode == "check_every_piece":  # what one process pays to check all it may ever read (the bitmap is per process)
        shard = open_split(corpus).shards[0]
        started = time.perf_counter()
        for checks in shard.offset_checks.pieces.values():
            checks.ensure_all()
        pieces = sum(len(c) for c in shard.offset_checks.pieces.values())
        return {"seconds": time.perf_counter() - started, "pieces": pieces}
    if mode == "check_one_batch":
        shard = open_split(corpus).shards[0]
        column = shard.columns[0]
        times = []
        for b in range(min(50, shard.offset_checks.present.shape[0])):
            t = time.perf_counter()
            shard.offset_checks.ensure_one(column, b)
            times.append(time.perf_counter() - t)
        return {"seconds": statistics.median(times), "rows": shard.rows_per_batch}
    raise SystemExit(f"unknown mode {mode}")


def evict(path: Path) -> None:
    """Drop ``path``'s pages from the page cache (this file only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run(mode: str, corpus: Path, batches: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", mode, "--out", str(corpus), "--batches", str(batches)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-bin", type=Path, help="fairseq data-bin to convert (once) into --out")
    p.add_argument("--out", type=Path, required=True, help="arrowmt folder (converted here if missing)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--batches", type=int, default=1000, help="batches timed in first_batches")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--measure", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, str(args.out), args.batches)))
        return 0
    if not (args.out / "arrowmt.json").exists():
        from arrowmt import convert_fairseq

        started = time.perf_counter()
        convert_fairseq(args.data_bin, args.out, progress=False)
        print(f"converted in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    run("setup", args.out, args.batches)  # builds the plan once; warms the page cache
    split_file = args.out / "train.arrow"
    results: dict[str, object] = {
        "corpus": str(args.out),
        "rows": json.loads((args.out / "arrowmt.json").read_text())["files"]["train"]["rows"],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.processor() or platform.platform()}",
        "python": platform.python_version(),
    }
    modes = ("open", "setup", "setup_crc_at_open", "check_every_piece", "check_one_batch", "first_batches")
    for mode in (*modes, "first_batches_unchecked"):
        runs = [run(mode, args.out, args.batches) for _ in range(args.repeats)]
        results[mode] = {key: summary([r[key] for r in runs]) for key in runs[0]}
    for mode in ("setup", "setup_crc_at_open", "first_batches", "first_batches_unchecked"):
        runs = []
        for _ in range(max(3, args.repeats // 2)):
            evict(split_file)
            runs.append(run(mode, args.out, args.batches))
        results[f"{mode}_cold"] = {key: summary([r[key] for r in runs]) for key in runs[0]}
    text = json.dumps(results, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
