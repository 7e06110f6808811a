"""``arrowmt info``: a view file is summarized over the rows it keeps, a folder lists its views, and the
progress bar's total is known from the start."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import arrowmt
from arrowmt import Split, _info, build_view
from tests.conftest import MULTI30K


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k val (train) and test (valid, with <unk>: its words not in val's dictionary), de-en."""
    out = tmp_path_factory.mktemp("info") / "corpus"
    arrowmt.convert_text(
        str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", validpref=str(MULTI30K / "test"), progress=False
    )
    return out


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "arrowmt", *args], capture_output=True, text=True, timeout=120)


def brute_force(split: Split, rows: np.ndarray) -> dict[str, tuple[int, int]]:
    """column -> (tokens, <unk> tokens) of ``rows``, one row at a time."""
    unk = split.special_ids.unk
    out = {}
    for column in split.columns:
        arrays = [split.row_array(column, int(i)) for i in rows]
        out[column] = (sum(a.size for a in arrays), sum(int(np.count_nonzero(a == unk)) for a in arrays))
    return out


def test_a_view_file_is_summarized_over_its_rows(corpus: Path, tmp_path: Path) -> None:
    view_path = corpus / "views" / "short.view"
    report = build_view(corpus, view_path, split="valid", max_len=12)
    assert 0 < report.kept < report.corpus_rows
    (summary,) = _info.summarize(view_path, progress=False)
    split = Split(corpus, "valid")
    kept = np.flatnonzero(split.num_tokens() <= 12)
    assert (summary.split, summary.rows) == ("valid", report.kept == kept.size and kept.size)
    expected = brute_force(split, kept)
    assert {c.column: (c.tokens, c.unk_tokens) for c in summary.columns} == expected
    assert all(c.max <= 12 for c in summary.columns) and expected["source"][1] > 0  # <unk> rows among the kept
    done = run("info", str(view_path))
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first == f"{view_path}: a view of {corpus}, split 'valid': {kept.size} of {len(split)} rows (max_len=12)"
    data = json.loads(run("info", "--json", str(view_path)).stdout)
    assert data["view"]["rows"] == kept.size and data["view"]["filters"] == {"max_len": 12}
    assert data["splits"][0]["rows"] == kept.size and data["languages"] == {"source": "de", "target": "en"}


def test_a_folder_lists_its_views_and_a_stale_one_with_the_reason(corpus: Path, tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    shutil.copytree(corpus, folder, ignore=shutil.ignore_patterns("views", ".arrowmt-cache"))
    kept = build_view(folder, folder / "dedup.view", split="train", dedup=True, min_len=3).kept
    other = tmp_path / "other"
    arrowmt.convert_text(str(MULTI30K / "test"), other, src_lang="de", tgt_lang="en", progress=False)
    build_view(other, folder / "views" / "foreign.view", split="train", max_len=20)  # made over another corpus
    done = run("info", str(folder))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("views (2; 'arrowmt info VIEW' summarizes one):")
    assert lines[start + 1] == f"  dedup.view: split 'train': {kept} of 1014 rows (dedup, min_len=3)"
    assert lines[start + 2].startswith("  views/foreign.view: cannot be used: ") and "rebuild the view" in lines[-1]
    views = json.loads(run("info", "--json", str(folder)).stdout)["views"]
    assert [Path(v["path"]).name for v in views] == ["dedup.view", "foreign.view"]
    assert (
        views[0]["error"] is None and views[0]["filters"] == {"min_len": 3, "dedup": True} and views[0]["rows"] == kept
    )
    assert views[1]["rows"] is None and "made from a split" in views[1]["error"]
    assert "\nviews (" not in run("info", str(other)).stdout  # no view, no list


def test_a_broken_view_file_is_one_line_error(corpus: Path, tmp_path: Path) -> None:
    path = tmp_path / "broken.view"
    path.write_bytes(b"not a view")
    done = run("info", str(path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("arrowmt: error: ") and "arrowmt convert" not in done.stderr


def test_the_progress_total_is_known_from_the_start(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar starts at the total of record batches the pass reads and never grows."""
    seen: list[tuple[int, int]] = []

    class Bar:
        def __init__(self, total: int) -> None:
            self.total, self.n = total, 0

        def update(self, k: int) -> None:
            self.n += k
            seen.append((self.total, self.n))

    @contextmanager
    def progress_bar(total: int, **kw: object) -> Iterator[Bar]:
        seen.append((total, 0))
        yield Bar(total)

    monkeypatch.setattr(_info, "progress_bar", progress_bar)
    _info.summarize(corpus)
    batches = sum(
        len(shard.layouts[c].values_len) for name in ("train", "valid") for shard in Split(corpus, name).shards
        for c in ("source", "target")
    )  # fmt: skip
    assert {total for total, _ in seen} == {batches} and seen[-1] == (batches, batches)
