"""Generate a synthetic WMT-like raw parallel text corpus (whitespace-tokenized words) for conversion benchmarks.

Deterministic and generated in chunks (seeded per chunk, so the first N lines of a bigger corpus
equal a smaller one, and memory stays bounded at any size):

* words: pseudo-words of 2 to 14 letters (distinct, shorter for frequent ranks, as in real text),
  ``--vocab-src`` / ``--vocab-tgt`` types per language (default 120,000 / 80,000);
* word frequencies: Zipf, ``p(rank) ~ 1 / rank^1.07`` (so the rare tail keeps appearing as the
  corpus grows, like real text);
* sentence lengths: log-normal with median 22 words (sigma 0.55), clipped to 1..250 words; the
  target length follows the source length with some noise;
* files: ``train.{src,tgt}`` (plain UTF-8, one sentence a line), plus ``corpus.json``.

At 4.5M pairs the two files hold about 2.1 GB, like the WMT-sized corpus of issue 10.

Usage::

    python benchmarks/make_text_corpus.py --rows 500000 --out bench-data/text-500000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 20240610
CHUNK_ROWS = 250_000
ZIPF_EXPONENT = 1.07
MEDIAN_WORDS = 22
SIGMA = 0.55
MAX_WORDS = 250
LANGS = ("de", "en")
WORD_SEEDS = ("de", "en", "fr", "cs", "ru", "zh", "ja", "es")
LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


def make_words(n: int, seed: int) -> pa.Array:
    """``n`` distinct pseudo-words, the most frequent ranks shortest (2-14 letters)."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n + 1)
    lengths = np.clip(np.rint(2 + 1.4 * np.log(ranks) + rng.normal(0, 1.2, n)), 2, 14).astype(np.int64)
    words: list[str] = []
    seen: set[str] = set()
    for length in lengths:
        while True:
            word = rng.choice(LETTERS, size=int(length)).tobytes().decode("ascii")
            if word not in seen:
                seen.add(word)
                words.append(word)
                break
    return pa.array(words, pa.string())


def zipf_cdf(n: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def chunk_lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    src = np.exp(np.log(MEDIAN_WORDS) + SIGMA * rng.standard_normal(n))
    tgt = src * rng.lognormal(0.0, 0.15, n)
    clip = (np.clip(np.rint(x), 1, MAX_WORDS).astype(np.int64) for x in (src, tgt))
    return next(clip), next(clip)


def chunk_text(rng: np.random.Generator, lengths: np.ndarray, words: pa.Array, cdf: np.ndarray) -> bytes:
    """Lines of ``lengths`` words each, words drawn from the Zipf distribution, joined by spaces."""
    total = int(lengths.sum())
    ids = np.minimum(np.searchsorted(cdf, rng.random(total)), len(words) - 1)
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    lines = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), words.take(pa.array(ids))), " ")
    return ("\n".join(lines.to_pylist()) + "\n").encode("ascii")


def generate(
    rows: int,
    out: Path,
    vocab: dict[str, int],
    *,
    langs: tuple[str, str] = LANGS,
    prefix: str = "train",
    seed: int = SEED,
) -> dict:
    """``{prefix}.{src}`` and ``{prefix}.{tgt}`` of ``rows`` lines in ``out`` (and ``corpus.json`` for the
    default prefix). A language's words are the same in every corpus (seeded by the language); the sentences
    follow ``seed``."""
    out.mkdir(parents=True, exist_ok=True)
    words = {lang: make_words(vocab[lang], SEED + word_seed(lang)) for lang in langs}
    cdfs = {lang: zipf_cdf(vocab[lang]) for lang in langs}
    handles = {lang: (out / f"{prefix}.{lang}").open("wb") for lang in langs}
    tokens = dict.fromkeys(langs, 0)
    try:
        for k, start in enumerate(range(0, rows, CHUNK_ROWS)):
            rng = np.random.default_rng([seed, k])
            n = min(CHUNK_ROWS, rows - start)
            for lang, lengths in zip(langs, chunk_lengths(rng, n), strict=True):
                handles[lang].write(chunk_text(rng, lengths, words[lang], cdfs[lang]))
                tokens[lang] += int(lengths.sum())
    finally:
        for handle in handles.values():
            handle.close()
    sizes = {lang: (out / f"{prefix}.{lang}").stat().st_size for lang in langs}
    info = {"rows": rows, "vocab": vocab, "words": tokens, "bytes": sizes, "seed": seed}
    if prefix == "train":
        (out / "corpus.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def word_seed(lang: str) -> int:
    """de 0 and en 1 (the corpora of the bilingual benchmarks), other languages after them."""
    return WORD_SEEDS.index(lang) if lang in WORD_SEEDS else len(WORD_SEEDS) + sum(lang.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--vocab-src", type=int, default=120_000)
    parser.add_argument("--vocab-tgt", type=int, default=80_000)
    args = parser.parse_args()
    out = args.out or Path(__file__).resolve().parent.parent / "bench-data" / f"text-{args.rows}"
    start = time.perf_counter()
    info = generate(args.rows, out, {"de": args.vocab_src, "en": args.vocab_tgt})
    print(json.dumps({**info, "seconds": round(time.perf_counter() - start, 1), "out": str(out)}))


if __name__ == "__main__":
    main()
