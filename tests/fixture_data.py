"""The test data, all inside the repository: the bundled Multi30k sample and fairseq data-bins built from it.

The raw text is ``arrowmt/sample_data/multi30k`` (de, en: train, val, test) and ``tests/data/multi30k``
(cs, fr: val, test). ``fairseq_fixture()`` runs the real ``fairseq-preprocess`` on the tokenized sample once
a session, into pytest's temporary folder.

This module holds the session's state (conftest.py is imported twice, as ``conftest`` and as
``tests.conftest``; this module once, as ``tests.fixture_data``).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT / "arrowmt" / "sample_data" / "multi30k"  # raw de, en: train (29,000), val (1,014), test (1,000)
MORE_LANGS = ROOT / "tests" / "data" / "multi30k"  # raw cs, fr of the same val and test captions
FAIRSEQ_SPLITS = {"train": "train", "valid": "val", "test": "test"}  # fairseq split -> sample file name
_SESSION: list[pytest.TempPathFactory] = []  # set by conftest's session fixture


def set_session_tmp(factory: pytest.TempPathFactory) -> None:
    """Where ``fairseq_fixture`` builds: pytest's session temporary folders."""
    _SESSION[:] = [factory]


def multi30k(name: str, lang: str) -> Path:
    """The raw Multi30k file ``name`` (train, val, test) in ``lang``: de and en bundled, cs and fr in tests/data."""
    return (MULTI30K if lang in ("de", "en") else MORE_LANGS) / f"{name}.{lang}.gz"


def gz_text(path: Path) -> str:
    """The text of a gzip file (Multi30k)."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read()


def gz_lines(path: Path) -> list[str]:
    """The lines of a gzip text file (Multi30k), without their newlines."""
    return gz_text(path).split("\n")[:-1]


def val_sentencepiece(folder: Path, vocab_size: int, name: str = "spm", **options: object) -> Path:
    """A sentencepiece model (``folder/name.model``) trained on the sample's validation text, both languages
    (``options``: the trainer's, such as ``model_type="bpe"``)."""
    import sentencepiece as spm

    text = folder / f"{name}.txt"
    text.write_text("\n".join(gz_lines(MULTI30K / "val.de.gz") + gz_lines(MULTI30K / "val.en.gz")), encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / name), vocab_size=vocab_size,
                                   num_threads=1, minloglevel=2, **options)  # fmt: skip
    return folder / f"{name}.model"


def tokenize_lower(text: str) -> str:
    """Lower-cased text with every punctuation mark a token of its own (hyphens stay inside words)."""
    return re.sub(r"([^\w\s-])", r" \1 ", text.lower())


def import_fairseq():
    """Import fairseq (skipping the test when it is absent); its import emits deprecation warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("fairseq")


PREPROCESS = """
import json, sys, warnings
warnings.simplefilter("ignore")
from fairseq import options
from fairseq_cli.preprocess import main
for argv in json.load(sys.stdin):
    main(options.get_preprocessing_parser().parse_args(argv))
"""


def fairseq_preprocess(*runs: list[str]) -> None:
    """Run the real ``fairseq-preprocess`` once per argument list, all in one fresh process (one fairseq import)."""
    import_fairseq()
    command = [sys.executable, "-c", PREPROCESS]
    done = subprocess.run(command, input=json.dumps(runs), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@functools.cache
def fairseq_fixture() -> Path:
    """The real ``fairseq-preprocess`` output of the tokenized, lower-cased sample (de-en), built once a session.

    ``mmap/`` (``--dataset-impl mmap``) and ``lazy/`` (the legacy format) each hold
    ``{train,valid,test}.de-en.{de,en}.{bin,idx}`` and ``dict.{de,en}.txt``; ``text/`` holds the tokenized
    text. Never change these files: tests that do copy them first (conftest's ``fairseq_mmap_dir``).
    """
    import_fairseq()
    root = _SESSION[0].mktemp("fairseq-multi30k-de-en")
    text = root / "text"
    text.mkdir()
    for split, name in FAIRSEQ_SPLITS.items():
        for lang in ("de", "en"):
            (text / f"{split}.{lang}").write_text(tokenize_lower(gz_text(multi30k(name, lang))), encoding="utf-8")
    common = ["--source-lang", "de", "--target-lang", "en", "--workers", "2"]
    common += [f"--{split}pref={text / split}" for split in FAIRSEQ_SPLITS]
    fairseq_preprocess(*([*common, "--dataset-impl", impl, "--destdir", str(root / impl)] for impl in ("mmap", "lazy")))
    return root
