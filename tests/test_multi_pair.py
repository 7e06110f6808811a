"""A multilingual fairseq data-bin (several pairs, one folder) converts into one arrowmt folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from arrowmt import FormatError, Manifest, convert_fairseq, export_fairseq, open_dataset, open_mixture
from arrowmt.testing import SOURCE, TARGET, arrow_split_names, fairseq_split_name, main
from tests.conftest import fairseq_fixture, fairseq_rows

PAIRS = (("cs", "en"), ("de", "en"), ("fr", "en"))


@pytest.fixture()
def multilingual_bin(tmp_path: Path) -> Path:
    """fairseq's multilingual layout from the real de-en fixture: the German files stand in for cs and fr too.

    Every pair has ``valid``; de-en also has ``train`` and a shard ``train1`` (a copy of valid).
    """
    source = fairseq_fixture() / "mmap"
    out = tmp_path / "data-bin"
    out.mkdir()
    for src, tgt in PAIRS:
        for lang, original in ((src, "de"), (tgt, "en")):
            shutil.copyfile(source / f"dict.{original}.txt", out / f"dict.{lang}.txt")
            for ext in ("idx", "bin"):
                shutil.copyfile(source / f"valid.de-en.{original}.{ext}", out / f"valid.{src}-{tgt}.{lang}.{ext}")
    for lang in ("de", "en"):
        for ext in ("idx", "bin"):
            shutil.copyfile(source / f"train.de-en.{lang}.{ext}", out / f"train.de-en.{lang}.{ext}")
            shutil.copyfile(source / f"valid.de-en.{lang}.{ext}", out / f"train1.de-en.{lang}.{ext}")
    return out


def test_split_names() -> None:
    names = arrow_split_names(["test2016", "train", "train1", "train2", "valid", "valid10"], "de", "en")
    assert names == {
        "test2016": "test2016.de-en",
        "train": "train.de-en",
        "train1": "train.de-en1",
        "train2": "train.de-en2",
        "valid": "valid.de-en",
        "valid10": "valid.de-en10",
    }


def test_every_pair_converts_into_one_folder(multilingual_bin: Path, tmp_path: Path) -> None:
    manifest = convert_fairseq(multilingual_bin, tmp_path / "out", progress=False)
    assert manifest.provenance["pairs"] == ["cs-en", "de-en", "fr-en"]
    assert manifest.languages == {SOURCE: None, TARGET: None}
    assert set(manifest.files) == {"valid.cs-en", "valid.de-en", "valid.fr-en", "train.de-en", "train.de-en1"}
    assert set(manifest.dictionaries) == {"cs", "de", "en", "fr"}
    on_disk = Manifest.load(tmp_path / "out")
    assert on_disk.splits() == ["train.de-en", "valid.cs-en", "valid.de-en", "valid.fr-en"]
    train = open_dataset(tmp_path / "out", "train.de-en")
    assert len(train) == 29000 + 1014 and train.metadata.languages == {SOURCE: "de", TARGET: "en"}
    fairseq_fr = fairseq_rows(multilingual_bin / "valid.fr-en.fr", "mmap")
    valid_fr = open_dataset(tmp_path / "out", "valid.fr-en")
    assert valid_fr.metadata.languages == {SOURCE: "fr", TARGET: "en"}
    for i in (0, 500, 1013):
        assert np.array_equal(valid_fr[i][SOURCE].numpy(), np.asarray(fairseq_fr[i]))
    mixture = open_mixture({f"{s}-{t}": (tmp_path / "out", f"valid.{s}-{t}") for s, t in PAIRS})
    assert len(mixture) == 3 * 1014  # one shared dictionary per side: they mix


def test_pair_still_picks_one(multilingual_bin: Path, tmp_path: Path) -> None:
    manifest = convert_fairseq(multilingual_bin, tmp_path / "one", pair="fr-en", progress=False)
    assert manifest.languages == {SOURCE: "fr", TARGET: "en"} and set(manifest.files) == {"valid"}


def test_cli_converts_every_pair(multilingual_bin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "fairseq", str(multilingual_bin), str(tmp_path / "out"), "--quiet"]) == 0
    assert "5 split file(s)" in capsys.readouterr().out


def test_export_gives_back_the_multilingual_data_bin(multilingual_bin: Path, tmp_path: Path) -> None:
    """Every pair's split (and fairseq's shard ``train1``) is written back under fairseq's own names, byte for byte."""
    convert_fairseq(multilingual_bin, tmp_path / "out", progress=False)
    export_fairseq(tmp_path / "out", tmp_path / "back", progress=False)
    originals = sorted(p.name for p in multilingual_bin.iterdir() if p.suffix in (".idx", ".bin"))
    assert sorted(p.name for p in (tmp_path / "back").iterdir() if p.suffix in (".idx", ".bin")) == originals
    for name in originals:
        assert (tmp_path / "back" / name).read_bytes() == (multilingual_bin / name).read_bytes(), name


def test_fairseq_split_names_invert_arrowmt_names() -> None:
    splits = ["test2016", "train", "train1", "train2", "valid", "valid10"]
    for fairseq_name, arrow_name in arrow_split_names(splits, "de", "en").items():
        assert fairseq_split_name(arrow_name, "de", "en") == fairseq_name
    with pytest.raises(FormatError, match=r"split 'train\.fr-en': expected a name like 'train\.de-en'"):
        fairseq_split_name("train.fr-en", "de", "en")
