"""Generate a synthetic WMT-like parallel corpus as a fairseq mmap data-bin AND an arrowmt folder.

The corpus is deterministic (seeded per chunk, so the first N rows of a bigger corpus
equal a smaller one) and generated chunk by chunk, so memory stays bounded at any size:

* lengths: log-normal, median ~23-25 tokens per side (end-of-sentence included), mean ~26,
  3% of rows from a wider log-normal so the tail reaches the clip at 250; the target
  length follows the source length with some noise (~670M tokens at 12.6M pairs);
* ids: a skewed (roughly Zipf-like) draw from a 32,000-symbol vocabulary, ``</s>`` (2)
  closing every row, as ``fairseq-preprocess`` writes them;
* fairseq side: ``train.de-en.{de,en}.{idx,bin}`` in the mmap format (``MMIDIDX`` magic,
  version 1, dtype code 8 = uint16, int32 sizes, int64 byte pointers) plus
  ``dict.{de,en}.txt`` (32,000 symbols in all, a multiple of 8);
* arrowmt side: converted from the data-bin with ``arrowmt.converters._fairseq_folder.convert_fairseq``.

Usage::

    python benchmarks/make_corpus.py --rows 1000000 --out bench-data/synth-1000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout: arrowmt, converters

MMAP_MAGIC = b"MMIDIDX\x00\x00"
UINT16_CODE = 8
NSPECIAL = 4
EOS = 2
MAX_LEN = 250
MEDIAN_LEN = 23
TAIL_SHARE = 0.03
LANGS = ("de", "en")


def chunk_lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Source and target row lengths (eos included), int32, in 1..MAX_LEN."""
    sigma = np.where(rng.random(n) < TAIL_SHARE, 0.9, 0.5)  # a few long-tailed rows reach 250
    src = np.rint(np.exp(np.log(MEDIAN_LEN) + sigma * rng.standard_normal(n)))
    tgt = np.rint(src * rng.lognormal(0.0, 0.18, n))
    return (
        np.clip(src, 1, MAX_LEN).astype(np.int32),
        np.clip(tgt, 1, MAX_LEN).astype(np.int32),
    )


def chunk_tokens(rng: np.random.Generator, lengths: np.ndarray, vocab: int) -> np.ndarray:
    """Concatenated uint16 ids for rows of ``lengths``; every row ends with ``</s>``."""
    total = int(lengths.sum(dtype=np.int64))
    u = rng.random(total, dtype=np.float32)
    u *= u  # skew towards frequent (small) ids
    ids = (NSPECIAL + u * (vocab - NSPECIAL - 1)).astype(np.uint16)
    ends = np.cumsum(lengths, dtype=np.int64) - 1
    ids[ends] = EOS
    return ids


def write_dict(path: Path, vocab: int) -> None:
    """``dict.txt`` with ``vocab - 4`` symbols (specials are implicit), counts decreasing."""
    ranks = np.arange(1, vocab - NSPECIAL + 1)
    counts = (10**9 // ranks).tolist()
    lines = [f"w{i:05d} {c}\n" for i, c in enumerate(counts)]
    path.write_text("".join(lines), encoding="utf-8")


def write_mmap_index(path: Path, sizes: np.ndarray, itemsize: int) -> None:
    """fairseq mmap ``.idx``: header, int32 sizes, int64 byte pointers."""
    pointers = np.zeros(sizes.shape[0], dtype=np.int64)
    np.cumsum(sizes[:-1], dtype=np.int64, out=pointers[1:])
    pointers *= itemsize
    with open(path, "wb") as f:
        f.write(MMAP_MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", UINT16_CODE))
        f.write(struct.pack("<Q", sizes.shape[0]))
        f.write(sizes.astype(np.int32).tobytes())
        f.write(pointers.tobytes())


def make_data_bin(out: Path, rows: int, seed: int, vocab: int, chunk: int) -> dict[str, int]:
    """Write the fairseq data-bin; return the token count per language."""
    out.mkdir(parents=True, exist_ok=True)
    sizes = {lang: np.empty(rows, dtype=np.int32) for lang in LANGS}
    tokens = dict.fromkeys(LANGS, 0)
    bins = {lang: open(out / f"train.de-en.{lang}.bin", "wb") for lang in LANGS}  # noqa: SIM115
    try:
        for k, start in enumerate(range(0, rows, chunk)):
            n = min(chunk, rows - start)
            rng = np.random.default_rng([seed, k])
            lengths = dict(zip(LANGS, chunk_lengths(rng, n), strict=True))
            for lang in LANGS:
                ids = chunk_tokens(rng, lengths[lang], vocab)
                ids.tofile(bins[lang])
                sizes[lang][start : start + n] = lengths[lang]
                tokens[lang] += int(ids.shape[0])
            print(f"  data-bin rows {start + n:,}/{rows:,}", file=sys.stderr, flush=True)
    finally:
        for f in bins.values():
            f.close()
    for lang in LANGS:
        write_mmap_index(out / f"train.de-en.{lang}.idx", sizes[lang], 2)
        write_dict(out / f"dict.{lang}.txt", vocab)
    return tokens


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--out", type=Path, help="corpus folder (default bench-data/synth-ROWS)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--vocab", type=int, default=32_000, help="symbols per language, specials included")
    p.add_argument("--chunk", type=int, default=500_000, help="rows generated at a time (bounds memory)")
    p.add_argument("--force", action="store_true", help="regenerate even if the corpus exists")
    args = p.parse_args(argv)
    out = args.out or Path("bench-data") / f"synth-{args.rows}"
    info_path = out / "corpus.json"
    if info_path.exists() and not args.force:
        print(f"{out}: exists ({info_path.read_text().strip()}); use --force to regenerate")
        return 0
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    tokens = make_data_bin(out / "data-bin", args.rows, args.seed, args.vocab, args.chunk)
    t1 = time.perf_counter()

    from arrowmt import convert_fairseq

    convert_fairseq(out / "data-bin", out / "arrowmt", overwrite=True, progress=False)
    t2 = time.perf_counter()
    info = {
        "rows": args.rows,
        "seed": args.seed,
        "vocab": args.vocab,
        "tokens": tokens,
        "generate_s": round(t1 - t0, 1),
        "convert_s": round(t2 - t1, 1),
    }
    info_path.write_text(json.dumps(info) + "\n")
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
