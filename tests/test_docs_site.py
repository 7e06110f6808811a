"""The documentation builds as a site (mkdocs, API pages from the docstrings) with warnings as errors: a broken link,
an anchor that does not exist, a page left out of the navigation or an API name that no longer exists fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import arrowmt

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings_handlers.python")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="arrowmt.open_dataset"' in api and "zero-copy" in (site / "index.html").read_text(encoding="utf-8")


def test_the_api_page_shows_every_export() -> None:
    shown = set(re.findall(r"^::: arrowmt\.(\w+)$", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.M))
    assert shown == set(arrowmt.__all__) - {"__version__"}


def test_the_start_page_links_what_the_readme_links() -> None:
    """docs/index.md (the site's start) and README.md (the repository's) offer the same "I want to" table."""

    def table(path: Path, prefix: str) -> list[str]:
        text = path.read_text(encoding="utf-8")
        rows = text[text.index("## I want to ...") :].split("\n\n")[1].splitlines()
        return [row.replace(prefix, "") for row in rows] if prefix else rows

    assert table(ROOT / "docs" / "index.md", "") == table(ROOT / "README.md", "docs/")
