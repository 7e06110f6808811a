"""Summary of an arrowmt folder: languages, provenance, and per split and column rows, tokens,
length percentiles, vocabulary size and ``<unk>`` rate.

Lengths come from the offsets alone (every offset checked); the ``<unk>`` count reads
every token once, one vectorized comparison per record batch, so :func:`summarize`
costs one pass over the data (a progress bar shows it on a terminal).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from arrowmt.format._manifest import Manifest
from arrowmt.format._progress import progress_bar
from arrowmt.format._split import Split

PERCENTILES = (50, 90, 99)
SHOWN_PROVENANCE_CHARS = 160

Tick = Callable[[int], object]
"""Advances the progress bar by a number of record batches."""


@dataclass(frozen=True)
class ColumnSummary:
    """Token statistics of one column of one split (``</s>`` included, as fairseq counts tokens)."""

    column: str
    lang: str | None
    vocab_size: int
    tokens: int
    mean: float
    percentiles: dict[int, int]
    max: int
    unk_tokens: int
    unk_rate: float  # unk_tokens / tokens (0.0 for an empty column)


@dataclass(frozen=True)
class SplitSummary:
    split: str
    shards: int
    rows: int
    columns: list[ColumnSummary]


def summarize(path: str | os.PathLike[str], *, progress: bool = True) -> list[SplitSummary]:
    """One summary per split (shards folded together) of the folder at ``path``.

    ``progress`` shows a bar (record batches counted for ``<unk>``) on an interactive terminal.
    """
    manifest = Manifest.load(Path(path))
    with progress_bar(total=0, desc="info", unit="batch", enabled=progress) as bar:
        return [_split_summary(Split(path, split, manifest), bar) for split in manifest.splits()]


def _split_summary(ds: Split, bar: tqdm) -> SplitSummary:
    bar.total += sum(len(s.layouts[c].values_len) for s in ds.shards for c in ds.columns)
    bar.refresh()
    columns = []
    for name in ds.columns:
        info = ds.metadata.columns[name]
        unk = unk_count(ds, name, bar.update)
        columns.append(_column_summary(name, info.lang, info.vocab_size, ds.lengths(name), unk))
    return SplitSummary(ds.split, len(ds.shards), len(ds), columns)


def unk_count(ds: Split, column: str, tick: Tick | None = None) -> int:
    """How many tokens of ``column`` are the ``<unk>`` id (counted per record batch, vectorized)."""
    total = 0
    for shard in ds.shards:
        unk = shard.metadata.special_ids.unk
        for batch in shard.batch_offsets(column):
            values = shard.words[batch.values_pos : batch.values_pos + batch.values_len]
            total += int(np.count_nonzero(values == unk))
            if tick is not None:
                tick(1)
    return total


def _column_summary(
    name: str, lang: str | None, vocab_size: int, lengths: np.ndarray, unk_tokens: int
) -> ColumnSummary:
    if lengths.size == 0:
        return ColumnSummary(name, lang, vocab_size, 0, 0.0, dict.fromkeys(PERCENTILES, 0), 0, unk_tokens, 0.0)
    pct = np.percentile(lengths, PERCENTILES, method="lower")
    tokens = int(lengths.sum())
    return ColumnSummary(
        column=name,
        lang=lang,
        vocab_size=vocab_size,
        tokens=tokens,
        mean=float(lengths.mean()),
        percentiles={p: int(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        max=int(lengths.max()),
        unk_tokens=unk_tokens,
        unk_rate=unk_tokens / tokens if tokens else 0.0,
    )


def summary_dict(path: str | os.PathLike[str], summaries: list[SplitSummary]) -> dict[str, object]:
    """:func:`summarize` output with the folder's manifest facts, as plain JSON-ready data (``info --json``)."""
    manifest = Manifest.load(Path(path))
    return {
        "path": str(path),
        "languages": manifest.languages,
        "dictionaries": manifest.dictionaries,
        "source_format": manifest.source_format,
        "provenance": manifest.provenance,
        "splits": [asdict(s) for s in summaries],
    }


def format_summary(path: str | os.PathLike[str], summaries: list[SplitSummary], *, shown_as: str | None = None) -> str:
    """Human-readable report of :func:`summarize` output: header, provenance, one table row per column.

    ``shown_as`` names ``path`` in the header (``arrowmt demo``: a temporary folder it removes).
    """
    manifest = Manifest.load(Path(path))
    langs = ", ".join(f"{k}={v}" for k, v in manifest.languages.items() if v)
    if manifest.language_pairs:
        pairs = manifest.language_pairs
        langs = f"{len(pairs)} language pair{'s' if len(pairs) > 1 else ''} ({', '.join(pairs)})"
    lines = [f"{path if shown_as is None else shown_as}: {langs or 'monolingual'}; from {manifest.source_format}"]
    lines += [f"  {key}: {_compact(value)}" for key, value in sorted(manifest.provenance.items())]
    width = max([10, *(len(s.split) for s in summaries)])
    header = f"{'split':<{width}} {'column':<8} {'lang':<5} {'rows':>10} {'tokens':>12} {'vocab':>7} "
    header += f"{'mean':>6} {'p50':>5} {'p90':>5} {'p99':>5} {'max':>5} {'unk%':>6}"
    lines.append(header)
    for s in summaries:
        for c in s.columns:
            p = c.percentiles
            lines.append(
                f"{s.split:<{width}} {c.column:<8} {c.lang or '-':<5} {s.rows:>10} {c.tokens:>12} {c.vocab_size:>7} "
                f"{c.mean:>6.1f} {p[50]:>5} {p[90]:>5} {p[99]:>5} {c.max:>5} {100 * c.unk_rate:>6.2f}"
            )
    return "\n".join(lines)


def _compact(value: object) -> str:
    """A provenance value on one line: text as is, anything else as compact JSON, cut at a readable length."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= SHOWN_PROVENANCE_CHARS else f"{text[: SHOWN_PROVENANCE_CHARS - 3]}..."
