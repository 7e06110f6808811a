"""The README's main job (``arrowmt demo``) and the public API exported by ``arrowmt``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arrowmt
from tests.conftest import MULTI30K, fairseq_fixture


def test_demo_converts_bundled_sample_and_iterates_batches(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "arrowmt._cli", "demo", "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert re.search(r"train\s+source\s+de\s+29000\s+351383\s+24896", text)
    match = re.search(r"epoch 1: (\d+) batches \(max_tokens=2048\), 29000 sentence pairs", text)
    assert match and int(match.group(1)) > 100
    assert "de: Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche." in text
    assert "en: Two young, White males are outside near many bushes." in text
    summary = r"^summary: \d+\.\dM tokens/s into padded fairseq batches .*; private memory per rank \(RssAnon\): "
    assert re.search(summary + r"[+-]\d+\.\d MB for the data path, \d+ MB for the whole process$", text, re.M)
    assert text.rstrip().splitlines()[-1].startswith("summary: ")
    assert arrowmt.verify_dataset(out).ok


def test_demo_without_out_never_shows_the_temporary_folder_it_removes(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "arrowmt._cli", "demo", "--max-tokens", "8192"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert str(tmp_path) not in done.stdout and "arrowmt-demo-" not in done.stdout
    first = "-> a temporary folder, removed at the end (--out DIR keeps the dataset)"
    assert first in done.stdout.splitlines()[0]
    assert "\nmulti30k-de-en (temporary): source=de, target=en" in done.stdout  # a name heads the summary
    assert list(tmp_path.iterdir()) == []  # removed indeed


def test_public_api_round_trip(tmp_path: Path) -> None:
    manifest = arrowmt.convert_text(
        str(MULTI30K / "val"), str(tmp_path / "text"), src_lang="de", tgt_lang="en", progress=False
    )
    assert manifest.files["train"].rows == 1014
    arrowmt.convert_fairseq(str(fairseq_fixture() / "mmap"), str(tmp_path / "fs"), progress=False)
    ds = arrowmt.open_dataset(tmp_path / "fs", "valid")
    sampler = arrowmt.TokenBatchSampler(ds, max_tokens=1024, seed=3)
    sampler.set_epoch(1)
    seen = np.sort(np.concatenate([np.asarray(b) for b in sampler]))
    np.testing.assert_array_equal(seen, np.arange(len(ds)))
    batch = arrowmt.FairseqCollater(ds.special_ids)(ds.__getitems__(next(iter(sampler))))
    assert batch["net_input"]["src_tokens"].numel() <= 1024
    prefixes = arrowmt.export_fairseq(str(tmp_path / "fs"), str(tmp_path / "back"), progress=False)
    assert len(prefixes) == 6
    assert [s.split for s in arrowmt.summarize(tmp_path / "fs")] == ["test", "train", "valid"]
    assert set(arrowmt.__all__) <= set(dir(arrowmt))


def test_collaters_are_public_and_the_mode_switch_is_gone() -> None:
    assert {"FairseqCollater", "PlainCollater", "FairseqBatch"} <= set(arrowmt.__all__)
    assert "Collater" not in arrowmt.__all__
    ids = arrowmt.SpecialIds(pad=0, eos=5)
    assert arrowmt.PlainCollater(ids).special_ids == arrowmt.FairseqCollater(ids).special_ids == ids


def test_optional_dependency_message_names_feature_package_and_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arrowmt.testing import require

    with pytest.raises(arrowmt.MissingDependencyError) as missing:
        require("arrowmt_absent_module.sub", "hf", "the test feature")
    assert str(missing.value) == (
        "the test feature needs the 'arrowmt_absent_module' package; install it with: pip install 'arrowmt[hf]'"
    )
    assert isinstance(missing.value, ImportError)
    (tmp_path / "broken_optional.py").write_text("import arrowmt_absent_inner\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="arrowmt_absent_inner") as inner:
        require("broken_optional", "hf", "the test feature")  # an installed package's own broken import shows
    assert not isinstance(inner.value, arrowmt.MissingDependencyError)
    assert require("json", "hf", "the test feature").__name__ == "json"
