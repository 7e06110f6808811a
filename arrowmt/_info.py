"""Summary statistics of an arrowmt folder (rows, tokens, length percentiles, vocabularies)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arrowmt.format._manifest import Manifest
from arrowmt.format._split import open_split

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class ColumnSummary:
    """Token statistics of one column of one split."""

    column: str
    lang: str | None
    vocab_size: int
    tokens: int
    mean: float
    percentiles: dict[int, int]
    max: int


@dataclass(frozen=True)
class SplitSummary:
    split: str
    shards: int
    rows: int
    columns: list[ColumnSummary]


def summarize(path: str | os.PathLike[str]) -> list[SplitSummary]:
    """One summary per split (shards folded together) of the folder at ``path``."""
    manifest = Manifest.load(Path(path))
    return [_split_summary(path, split) for split in manifest.splits()]


def _split_summary(path: str | os.PathLike[str], split: str) -> SplitSummary:
    ds = open_split(path, split)
    columns = []
    for name in ds.columns:
        info = ds.metadata.columns[name]
        lengths = ds.lengths(name)
        columns.append(_column_summary(name, info.lang, info.vocab_size, lengths))
    return SplitSummary(split, len(ds.shards), len(ds), columns)


def _column_summary(name: str, lang: str | None, vocab_size: int, lengths: np.ndarray) -> ColumnSummary:
    if lengths.size == 0:
        return ColumnSummary(name, lang, vocab_size, 0, 0.0, dict.fromkeys(PERCENTILES, 0), 0)
    pct = np.percentile(lengths, PERCENTILES, method="lower")
    return ColumnSummary(
        column=name,
        lang=lang,
        vocab_size=vocab_size,
        tokens=int(lengths.sum()),
        mean=float(lengths.mean()),
        percentiles={p: int(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        max=int(lengths.max()),
    )


def format_summary(path: str | os.PathLike[str], summaries: list[SplitSummary]) -> str:
    """Human-readable table of :func:`summarize` output."""
    manifest = Manifest.load(Path(path))
    langs = ", ".join(f"{k}={v}" for k, v in manifest.languages.items() if v) or "monolingual"
    lines = [f"{path}: {langs}; from {manifest.source_format}"]
    header = f"{'split':<10} {'column':<8} {'lang':<5} {'rows':>10} {'tokens':>12} {'vocab':>7} "
    header += f"{'mean':>6} {'p50':>5} {'p90':>5} {'p99':>5} {'max':>5}"
    lines.append(header)
    for s in summaries:
        for c in s.columns:
            p = c.percentiles
            lines.append(
                f"{s.split:<10} {c.column:<8} {c.lang or '-':<5} {s.rows:>10} {c.tokens:>12} {c.vocab_size:>7} "
                f"{c.mean:>6.1f} {p[50]:>5} {p[90]:>5} {p[99]:>5} {c.max:>5}"
            )
    return "\n".join(lines)
