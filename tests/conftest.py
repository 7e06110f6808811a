"""Shared fixtures and helpers. The data is built from the bundled sample, inside the repository (fixture_data.py)."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fixture_data import (
    MULTI30K,
    ROOT,
    fairseq_fixture,
    fairseq_preprocess,
    gz_lines,
    import_fairseq,
    multi30k,
    set_session_tmp,
    val_sentencepiece,
)

__all__ = ["MULTI30K", "ROOT", "fairseq_fixture", "fairseq_preprocess", "gz_lines", "import_fairseq", "multi30k",
           "val_sentencepiece"]  # fmt: skip

PLUGIN_DIR = ROOT / "arrowmt" / "integrations" / "fairseq_plugin"  # the fairseq --user-dir
TINY_TRANSFORMER = [
    "--arch", "transformer",
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "32", "--decoder-embed-dim", "32",
    "--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64",
    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
]  # fmt: skip


@pytest.fixture(scope="session", autouse=True)
def hf_datasets_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Hugging Face's cache folder inside pytest's temporary folder, never ``~/.cache``.

    ``arrowmt.integrations.hf.load_split`` puts its links (and HF its ``cache-*.arrow``
    files) under ``HF_DATASETS_CACHE``; subprocesses inherit the variable.
    """
    cache = tmp_path_factory.mktemp("hf-datasets-cache")
    os.environ["HF_DATASETS_CACHE"] = str(cache)
    if "datasets" in sys.modules:  # imported while collecting: its config already read the variable
        sys.modules["datasets"].config.HF_DATASETS_CACHE = cache
    return cache


@pytest.fixture(scope="session", autouse=True)
def session_tmp(tmp_path_factory: pytest.TempPathFactory) -> pytest.TempPathFactory:
    """pytest's session temporary folders, where ``fairseq_fixture()`` builds (it is called from helpers too)."""
    set_session_tmp(tmp_path_factory)
    return tmp_path_factory


@pytest.fixture(autouse=True)
def fresh_residency() -> Iterator[None]:
    """Every test starts with read-ahead's residency gate knowing nothing (it is per process, and samples)."""
    from arrowmt.io import RESIDENCY

    RESIDENCY.reset()
    yield


@pytest.fixture(scope="module")
def native_data_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the real fairseq-preprocess mmap output (de-en), shared by a module's tests."""
    dest = tmp_path_factory.mktemp("native") / "data-bin"
    shutil.copytree(fairseq_fixture() / "mmap", dest)
    return dest


@pytest.fixture(scope="module")
def native_corpus(native_data_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``native_data_bin`` converted by ``arrowmt.convert_fairseq``."""
    from arrowmt import convert_fairseq

    out = tmp_path_factory.mktemp("arrow") / "multi30k"
    convert_fairseq(native_data_bin, out, progress=False)
    return out


@pytest.fixture()
def fairseq_mmap_dir(tmp_path: Path) -> Path:
    """A private copy of the real fairseq-preprocess mmap output."""
    dest = tmp_path / "data-bin-mmap"
    shutil.copytree(fairseq_fixture() / "mmap", dest)
    return dest


@pytest.fixture()
def fairseq_lazy_dir(tmp_path: Path) -> Path:
    """A private copy of the real fairseq-preprocess lazy (legacy) output."""
    dest = tmp_path / "data-bin-lazy"
    shutil.copytree(fairseq_fixture() / "lazy", dest)
    return dest


def text_options(**kw: object) -> Any:
    """A de-en ``TextConversion`` of Multi30k val (train) and test (test) unless ``prefixes`` says."""
    from arrowmt import TextConversion

    prefixes = kw.pop("prefixes", {"train": str(MULTI30K / "val"), "test": str(MULTI30K / "test")})
    return TextConversion(src_lang="de", tgt_lang="en", prefixes=prefixes, **kw)  # type: ignore[arg-type]


def fairseq_rows(prefix: Path, impl: str) -> list:
    """Every row of a fairseq binarized dataset as fairseq's own training path reads it."""
    import_fairseq()
    from fairseq.data import data_utils

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = data_utils.load_indexed_dataset(str(prefix), None, dataset_impl=impl)
        return [ds[i].numpy() for i in range(len(ds))]


@contextmanager
def quiet() -> Iterator[None]:
    """fairseq (and torch under it) emit deprecation and pin-memory warnings; pytest makes warnings errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
