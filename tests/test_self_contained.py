"""The test suite reads nothing outside the repository: a clone with nothing beside it passes.

Its data is the bundled sample (``arrowmt/sample_data``), ``tests/data`` and what ``tests/fixture_data.py``
builds from them into pytest's temporary folder (the real fairseq-preprocess output included).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import fixture_data
from tests.fixture_data import FAIRSEQ_SPLITS, MORE_LANGS, MULTI30K, ROOT, fairseq_fixture, multi30k

# What a path outside the repository looks like in source: the old ``../shared/data`` test data, or a climb
# above the project root. The test suite (tests/, scripts/) reads nothing outside; benchmarks read no data outside
# (they may name a machine's tools, such as a memory-limiting wrapper, to measure with).
OUTSIDE = re.compile(r"""/ ["']shared["']|shared/data|ROOT\.parent|parents\[[2-9]\]|parents\[1\]\.parent""")
OUTSIDE_DATA = re.compile(r"""shared/data|["']shared["'] / ["']data["']""")
CHECKED = {"tests": OUTSIDE, "scripts": OUTSIDE, "benchmarks": OUTSIDE_DATA}


def test_no_source_names_a_path_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder, pattern in CHECKED.items()
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in (".py", ".sh") and path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_the_raw_text_is_inside_the_repository() -> None:
    for folder in (MULTI30K, MORE_LANGS):
        assert folder.is_relative_to(ROOT) and folder.is_dir()
    files = [multi30k(name, lang) for name in FAIRSEQ_SPLITS.values() for lang in ("de", "en")]
    files += [multi30k(name, lang) for name in ("val", "test") for lang in ("cs", "fr")]
    assert all(path.is_file() and path.is_relative_to(ROOT) for path in files)


def test_fairseq_data_bins_are_built_in_the_session_folder(session_tmp: pytest.TempPathFactory) -> None:
    root = fairseq_fixture()
    assert root.is_relative_to(session_tmp.getbasetemp())
    assert fairseq_fixture() == root  # built once a session
    for impl in ("mmap", "lazy"):
        names = sorted(path.name for path in (root / impl).iterdir())
        expected = [f"{s}.de-en.{lang}.{x}" for s in FAIRSEQ_SPLITS for lang in ("de", "en") for x in ("bin", "idx")]
        assert names == sorted(["dict.de.txt", "dict.en.txt", "preprocess.log", *expected])
    first = (root / "text" / "train.de").read_text(encoding="utf-8").split("\n", 1)[0].split()
    assert " ".join(first) == "zwei junge weiße männer sind im freien in der nähe vieler büsche ."
    assert fixture_data.tokenize_lower("Ein Mann, (lacht)!").split() == ["ein", "mann", ",", "(", "lacht", ")", "!"]
