"""A 100-corpus mixture whose corpora are separate folders: as converted, or each a copy in plan order.

``prepare`` writes ``bench_mixture.py``'s 100 synthetic pairs (12.6M rows, Zipf-like sizes) as one
fairseq data-bin, converts each pair to a folder of its own (``sep/``) and copies each with
``arrowmt order`` (``ord/``, the sampler's options); ``run KIND WINDOW BATCHES`` reads ``BATCHES``
batches of ``MixtureBatchSampler`` (temperature 5, as ``bench_mixture.py``) over ``sep`` or ``ord``,
with ``shuffle_window=WINDOW`` (0: fairseq's shuffle), and prints tokens/s, CPU per second and bytes
read from storage per byte used. Cold runs go under ``benchmarks/memory_budget.py`` by hand:

    python benchmarks/mixture_copies.py prepare
    python benchmarks/memory_budget.py 926 --evict bench-data/mixsep-100x12600000 -- \
        python benchmarks/mixture_copies.py run ord 256 3000
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

D = HERE.parent / "bench-data" / "mixsep-100x12600000"


def prepare() -> None:
    import bench_mixture as bm

    import arrowmt
    from arrowmt import convert_fairseq

    db = D / "data-bin"
    if not (D / "made").exists():
        db.mkdir(parents=True, exist_ok=True)
        sizes = bm.corpus_sizes(100, 12_600_000)
        for k, (pair, n) in enumerate(zip(bm.pair_names(100), sizes.tolist(), strict=True)):
            src = pair.split("-")[0]
            bm._write_pair(db, src, n, 1234, k)
            bm.write_dict(db / f"dict.{src}.txt", bm.VOCAB)
        bm.write_dict(db / f"dict.{bm.TARGET_LANG}.txt", bm.VOCAB)
        (D / "made").write_text("1")
    t = time.time()
    for pair in bm.pair_names(100):
        if not (D / "sep" / pair / "manifest.json").exists():
            convert_fairseq(db, D / "sep" / pair, pair=pair, overwrite=True, progress=False)
        if not (D / "ord" / pair / "manifest.json").exists():
            arrowmt.order_copy(
                D / "sep" / pair,
                D / "ord" / pair,
                max_tokens=4096,
                max_source_positions=1024,
                max_target_positions=1024,
                seed=1,
                skip_invalid_size_inputs=True,
                overwrite=True,
                progress=False,
            )
    print("prepared", time.time() - t, file=sys.stderr)


def run(kind: str, window: int, batches: int) -> None:
    import bench_mixture as bm
    import torch
    from run_one import read_bytes
    from torch.utils.data import DataLoader

    from arrowmt import FairseqCollater, MixtureBatchSampler, open_mixture

    torch.set_num_threads(1)
    pairs = bm.pair_names(100)
    mix = open_mixture({p: D / kind / p for p in pairs})
    s = MixtureBatchSampler(
        mix,
        max_tokens=4096,
        max_source_positions=1024,
        max_target_positions=1024,
        seed=1,
        temperature=5.0,
        resample_seed=2,
        skip_invalid_size_inputs=True,
        shuffle_window=window or None,
        cache_dir=D / "cache",
    )
    len(s)
    loader = DataLoader(mix, batch_sampler=s, collate_fn=FairseqCollater(mix.special_ids), num_workers=0)
    io0 = read_bytes()
    t = time.perf_counter()
    c = time.process_time()
    tokens = n = 0
    for b in loader:
        tokens += int(b["ntokens"])
        n += 1
        if n >= batches:
            break
    dt = time.perf_counter() - t
    print(
        json.dumps(
            {
                "kind": kind,
                "window": window,
                "tokens_per_s": tokens / dt,
                "cpu": (time.process_time() - c) / dt,
                "amp": (read_bytes() - io0) / (4 * tokens),
                "batches": n,
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["prepare"]:
        prepare()
    elif sys.argv[1:2] == ["run"] and len(sys.argv) == 5:
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(__doc__)
