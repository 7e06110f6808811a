"""Rows per offsets-checksum piece: the first pass over a corpus in the page cache, pieces of N rows against M.

Every record batch records a CRC-32 per piece of its offsets (``arrowmt.reading._offsets_crc``),
and a reader checks a piece the first time one of its rows is used. A batch of random rows
touches one piece per row, so the piece size is the bytes checked per row on a first pass.
This converts the same fairseq data-bin (``benchmarks/make_corpus.py``) once per piece size
(``--pieces``, the writer's ``PIECE_ROWS`` set for that conversion), then reads the first
``--batches`` batches of rank 0 of 8 (``max_tokens=4096``, seed 1, plan cached, files read
into the page cache first), each run in a fresh process, the sizes interleaved, and prints
batches/s side by side with the range over ``--repeat`` runs.

Usage::

    python benchmarks/bench_piece_rows.py --data-bin bench-data/synth-12600000/data-bin \\
        --out bench-data/pieces-12600000 --json benchmarks/results/piece-rows-12600000.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

READ = """
import sys, time, tempfile
from pathlib import Path
import arrowmt
folder, batches = sys.argv[1], int(sys.argv[2])
for path in Path(folder).glob("*.arrow"):
    Path(path).read_bytes()  # into the page cache
dataset = arrowmt.open_dataset(folder, "train")
sampler = arrowmt.TokenBatchSampler(
    dataset, max_tokens=4096, seed=1, num_replicas=8, rank=0, cache_dir=sys.argv[3]
)
collate = arrowmt.FairseqCollater(dataset.special_ids)
it = iter(sampler)
start = time.perf_counter()
for _ in range(batches):
    collate(dataset.__getitems__(next(it)))
print(batches / (time.perf_counter() - start))
"""


def convert(data_bin: Path, out: Path, piece_rows: int) -> Path:
    """The data-bin converted with offsets pieces of ``piece_rows`` rows (kept between runs)."""
    folder = out / f"pieces-{piece_rows}"
    if not (folder / "arrowmt.json").exists():
        code = (
            "import sys; import arrowmt.reading._offsets_crc as o; o.PIECE_ROWS = int(sys.argv[1]); import arrowmt; "
            "arrowmt.convert_fairseq(sys.argv[2], sys.argv[3], progress=False)"
        )
        subprocess.run([sys.executable, "-c", code, str(piece_rows), str(data_bin), str(folder)], check=True)
    return folder


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-bin", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True, help="where the conversions go")
    p.add_argument("--pieces", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--batches", type=int, default=3000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    folders = {n: convert(args.data_bin, args.out, n) for n in args.pieces}
    rates: dict[int, list[float]] = {n: [] for n in args.pieces}
    with tempfile.TemporaryDirectory() as plans:
        for _ in range(args.repeat):
            for n, folder in folders.items():
                done = subprocess.run(
                    [sys.executable, "-c", READ, str(folder), str(args.batches), plans],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                rates[n].append(float(done.stdout.split()[-1]))
    print(f"first {args.batches} batches in the page cache, rank 0 of 8, {args.repeat} runs: median (range)")
    print("| rows per piece | batches/s |\n|---:|---:|")
    for n, found in rates.items():
        print(f"| {n} | {statistics.median(found):,.0f} ({min(found):,.0f}-{max(found):,.0f}) |")
    if args.json:
        header = {"platform": platform.platform(), "batches": args.batches, "date": time.strftime("%Y-%m-%d")}
        args.json.write_text(json.dumps({"header": header, "batches_per_s": rates}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
