"""Summary of an arrowmt folder, or of a view file: languages, provenance, and per split and column
rows, tokens, length percentiles, vocabulary size and ``<unk>`` rate; a folder's views are listed.

Lengths come from the offsets alone (every offset checked); the ``<unk>`` count reads
every token once, one vectorized comparison per record batch, so :func:`summarize`
costs one pass over the data (a progress bar, its total known from the start, shows it
on a terminal). A view is summarized over the rows it keeps (its corpus's record
batches are read, the kept rows' ``<unk>`` counted from per-batch prefix sums).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from arrowmt._errors import ArrowMTError, FormatError
from arrowmt.files import VIEW_FORMAT, progress_bar
from arrowmt.format import Manifest
from arrowmt.segments import Segmentation, recorded_segmentation
from arrowmt.splits import Split
from arrowmt.views import VIEW_SUFFIX, View, find_views, listed_mask

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


def is_view_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a view file (a ``*.view`` file, or a file starting with the view magic)."""
    path = Path(path)
    if not path.is_file():
        return False
    if path.name.endswith(VIEW_SUFFIX):
        return True
    with open(path, "rb") as handle:
        return handle.read(len(VIEW_FORMAT.magic)) == VIEW_FORMAT.magic


def summarize(path: str | os.PathLike[str], *, progress: bool = True) -> list[SplitSummary]:
    """One summary per split (shards folded together) of the folder at ``path``; for a view file, one
    summary of the rows it keeps (its corpus: the folder holding it, or that folder's parent).

    ``progress`` shows a bar (record batches counted for ``<unk>``) on an interactive terminal.
    """
    sources = _sources(Path(path))
    total = sum(len(s.layouts[c].values_len) for ds in sources for s in _corpus(ds).shards for c in ds.columns)
    with progress_bar(total=total, desc="info", unit="batch", enabled=progress) as bar:
        return [_split_summary(ds, bar) for ds in sources]


def _sources(path: Path) -> list[Split] | list[View]:
    """What ``path`` summarizes: every split of a folder, or the one view a view file is."""
    if is_view_file(path):
        view = View(path)
        view.advise("sequential")
        return [view]
    manifest = Manifest.load(path)
    return [Split(path, split, manifest, access="sequential") for split in manifest.splits()]


def _corpus(ds: Split | View) -> Split:
    return ds.corpus if isinstance(ds, View) else ds


def _split_summary(ds: Split | View, bar: tqdm) -> SplitSummary:
    columns = []
    for name in ds.columns:
        info = ds.metadata.columns[name]
        lengths = ds.lengths(name)  # checks every offset the <unk> count then uses
        unk = unk_count(ds, name, bar.update)
        columns.append(_column_summary(name, info.lang, info.vocab_size, lengths, unk))
    return SplitSummary(ds.split, len(_corpus(ds).shards), len(ds), columns)


def unk_count(ds: Split | View, column: str, tick: Tick | None = None) -> int:
    """How many tokens of ``column`` are the ``<unk>`` id (counted per record batch, vectorized).

    For a view, only its rows count: per record batch, the kept rows' counts are differences
    of prefix sums of the ``<unk>`` mask.
    """
    split = _corpus(ds)
    kept = listed_mask(ds.rows, len(split)) if isinstance(ds, View) else None
    total = 0
    for shard, first in zip(split.shards, split.cumulative.tolist(), strict=False):
        unk = shard.metadata.special_ids.unk
        for batch in shard.batch_offsets(column):
            is_unk = shard.words_range(batch.values_pos, batch.values_len) == unk
            if kept is None:
                total += int(np.count_nonzero(is_unk))
            else:
                start = first + batch.first_row
                total += _kept_count(is_unk, batch.offsets, kept[start : start + batch.offsets.shape[0] - 1])
            if tick is not None:
                tick(1)
    return total


def _kept_count(mask: np.ndarray, offsets: np.ndarray, kept: np.ndarray) -> int:
    """True entries of ``mask`` (one record batch's values) inside the rows ``kept`` selects."""
    prefix = np.zeros(mask.shape[0] + 1, dtype=np.int64)
    np.cumsum(mask, out=prefix[1:])
    bounds = offsets.astype(np.int64)  # checked by the lengths read first: 0 <= start <= end <= len(mask)
    return int((prefix[bounds[1:]] - prefix[bounds[:-1]])[kept].sum())


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


@dataclass(frozen=True)
class ViewSummary:
    """A view file: its corpus, the split it filters, its rows of the split's, the filters it applied
    (those in use only); ``error`` (the rest None) when it does not open."""

    path: str
    corpus: str | None
    split: str | None
    rows: int | None
    corpus_rows: int | None
    filters: dict[str, object]
    error: str | None = None

    def describe(self) -> str:
        """One line: ``split 'train': 20 of 40 rows (max_len=15)``, or why the view cannot be used."""
        if self.error is not None:
            return f"cannot be used: {self.error}"
        return f"split {self.split!r}: {self.rows} of {self.corpus_rows} rows ({_filters_text(self.filters)})"


def view_summary(path: Path, corpus: Path | None = None) -> ViewSummary:
    """The facts of the view file ``path`` over ``corpus`` (default: the folder holding it, or its parent)."""
    try:
        view = View(path, corpus)
    except (ArrowMTError, OSError) as exc:  # stale or damaged: listed with the reason, never fatal to info
        return ViewSummary(str(path), None, None, None, None, {}, str(exc))
    filters = view.description.get("filters", {})
    listed = {"rows": "listed"} if view.description.get("listed_rows") else {}
    used = {name: value for name, value in {**filters, **listed}.items() if value not in (None, False)}
    return ViewSummary(str(path), str(view.path), view.split, len(view), len(view.corpus), used)


def _filters_text(filters: dict[str, object]) -> str:
    """The filters a view applied (``max_len=15, dedup``), or ``no filter``."""
    used = [name if value is True else f"{name}={value}" for name, value in filters.items()]
    return ", ".join(used) or "no filter"


def folder_views(folder: Path) -> list[ViewSummary]:
    """The view files kept in ``folder`` or a folder inside it (as ``verify`` finds them)."""
    return [view_summary(path, folder) for path in find_views(folder)]


def _manifest_and_views(path: Path) -> tuple[Manifest, list[ViewSummary], ViewSummary | None]:
    """(the corpus manifest, the folder's views, the view itself) for a folder or a view file ``path``."""
    if not is_view_file(path):
        return Manifest.load(path), folder_views(path), None
    view = View(path)
    return view.manifest, [], view_summary(path, view.path)


def summary_dict(path: str | os.PathLike[str], summaries: list[SplitSummary]) -> dict[str, object]:
    """:func:`summarize` output with the manifest facts and views, as plain JSON-ready data (``info --json``).

    For a folder, ``views`` lists its view files; for a view file, ``view`` describes it (the
    manifest facts are its corpus's).
    """
    manifest, views, view = _manifest_and_views(Path(path))
    extra = {"views": [asdict(v) for v in views]} if view is None else {"view": asdict(view)}
    segmentation, problem = _segmentation(path) if view is None else (None, None)
    extra["segmentation"] = None if segmentation is None else segmentation.to_json()
    if problem:
        extra["segmentation_problem"] = problem
    return {
        "path": str(path),
        "languages": manifest.languages,
        "dictionaries": manifest.dictionaries,
        "source_format": manifest.source_format,
        "provenance": manifest.provenance,
        "splits": [asdict(s) for s in summaries],
        **extra,
    }


def _segmentation(path: str | os.PathLike[str]) -> tuple[Segmentation | None, str | None]:
    """What the corpus's sampled segmentations record (None: none), or why they cannot be read."""
    try:
        return recorded_segmentation(path), None
    except FormatError as exc:
        return None, str(exc)


def format_summary(path: str | os.PathLike[str], summaries: list[SplitSummary], *, shown_as: str | None = None) -> str:
    """Human-readable report of :func:`summarize` output: header, provenance, one table row per column, views.

    ``shown_as`` names ``path`` in the header (``arrowmt demo``: a temporary folder it removes).
    """
    manifest, views, view = _manifest_and_views(Path(path))
    langs = ", ".join(f"{k}={v}" for k, v in manifest.languages.items() if v)
    if manifest.language_pairs:
        pairs = manifest.language_pairs
        langs = f"{len(pairs)} language pair{'s' if len(pairs) > 1 else ''} ({', '.join(pairs)})"
    described = f"{langs or 'monolingual'}; from {manifest.source_format}"
    name = path if shown_as is None else shown_as
    if view is None:
        lines = [f"{name}: {described}"]
    else:
        lines = [f"{name}: a view of {view.corpus}, {view.describe()}", f"  corpus: {described}"]
    for key, value in sorted(manifest.provenance.items()):
        lines += _readable(key, value, "  ")
    segmentation, problem = _segmentation(path) if view is None else (None, None)
    if problem:
        lines.append(f"  sampled segmentations: unreadable: {problem}")
    if segmentation is not None:
        stale = sorted(name for name in manifest.splits() if segmentation.corpus.get(name) != _fingerprint(path, name))
        note = f" (STALE for {', '.join(stale)}: converted again since; rebuild them)" if stale else ""
        lines.append(f"  sampled segmentations: {segmentation.describe()}{note}")
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
    if views:
        lines.append(f"views ({len(views)}; 'arrowmt info VIEW' summarizes one):")
        lines += [f"  {Path(v.path).relative_to(path)}: {v.describe()}" for v in views]
    return "\n".join(lines)


def _fingerprint(path: str | os.PathLike[str], split: str) -> str:
    return Split(path, split).fingerprint()


def _readable(key: str, value: object, indent: str) -> list[str]:
    """A provenance entry as lines: an object as its keys, one a line, indented below ``key``; a list on one line
    (a long one as its count, first and last items); text and numbers as they are (``--json`` gives it all)."""
    if isinstance(value, dict) and value:
        lines = [f"{indent}{key}:"]
        for name, item in sorted(value.items(), key=lambda kv: str(kv[0])):
            lines += _readable(str(name), item, indent + "  ")
        return lines
    return [f"{indent}{key}: {_one_line(value)}"]


def _one_line(value: object) -> str:
    if isinstance(value, list):
        items = [_one_line(v) for v in value]
        text = f"[{', '.join(items)}]"
        if len(text) > SHOWN_PROVENANCE_CHARS:
            text = f"[{len(items)} items: {items[0]}, ..., {items[-1]}]" if len(items) > 1 else f"[{items[0]}]"
        return text
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return text if len(text) <= SHOWN_PROVENANCE_CHARS else f"{text[: SHOWN_PROVENANCE_CHARS - 3]}..."
