"""Converting real fairseq-preprocess output: ids equal fairseq's own reading, row for row."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from arrowmt.converters._fairseq_export import export_fairseq
from arrowmt.converters._fairseq_folder import convert_fairseq, discover

from arrowmt._errors import InputDataError, InvalidParameterError, OutputExistsError
from arrowmt.format._manifest import Manifest
from arrowmt.format._vocab import Dictionary
from arrowmt.training._dataset import open_dataset
from tests.conftest import fairseq_rows

SPLITS = ("train", "valid", "test")
REFERENCE_DE = "zwei junge weiße männer sind im freien in der nähe vieler büsche ."


@pytest.fixture(params=["mmap", "lazy"])
def impl_dir(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    return request.param, request.getfixturevalue(f"fairseq_{request.param}_dir")


def test_discover_finds_every_split(fairseq_mmap_dir: Path) -> None:
    found = discover(fairseq_mmap_dir)
    assert found.pairs == {("de", "en"): ["test", "train", "valid"]}
    assert found.mono == []


def test_ids_equal_fairseq_reading_every_row(impl_dir: tuple[str, Path], tmp_path: Path) -> None:
    impl, data_bin = impl_dir
    out = tmp_path / "out"
    manifest = convert_fairseq(data_bin, out, progress=False)
    assert manifest.source_format == f"fairseq-{'legacy' if impl == 'lazy' else 'mmap'}"
    assert manifest.languages == {"source": "de", "target": "en"}
    for split in SPLITS:
        ds = open_dataset(out, split)
        for column, lang in (("source", "de"), ("target", "en")):
            expected = fairseq_rows(data_bin / f"{split}.de-en.{lang}", impl)
            assert len(ds) == len(expected)
            for i, row in enumerate(expected):
                np.testing.assert_array_equal(ds.row(column, i).numpy(), row, err_msg=f"{split} {column} {i}")


def test_reference_sentence_and_dictionaries_copied(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    for lang in ("de", "en"):
        assert (out / f"dict.{lang}.txt").read_bytes() == (fairseq_mmap_dir / f"dict.{lang}.txt").read_bytes()
    ds = open_dataset(out, "train")
    de = Dictionary.load(out / "dict.de.txt")
    row = ds[0]["source"].numpy()
    assert row[-1] == de.eos
    assert de.decode(row[:-1]) == REFERENCE_DE
    assert ds.metadata.columns["source"].vocab_size == len(de)
    assert ds.metadata.columns["source"].dictionary_sha256 == de.sha256()


def test_rerun_is_byte_identical_and_needs_overwrite(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    convert_fairseq(fairseq_mmap_dir, a, progress=False)
    convert_fairseq(fairseq_mmap_dir, b, progress=False)
    for name in ("train.arrow", "valid.arrow", "test.arrow", "arrowmt.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    with pytest.raises(OutputExistsError, match="--overwrite"):
        convert_fairseq(fairseq_mmap_dir, a, progress=False)
    convert_fairseq(fairseq_mmap_dir, a, overwrite=True, progress=False)
    assert (a / "train.arrow").read_bytes() == (b / "train.arrow").read_bytes()


def test_export_back_to_fairseq_reads_identically(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    out, back = tmp_path / "out", tmp_path / "back"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    export_fairseq(out, back, progress=False)
    for split in SPLITS:
        for lang in ("de", "en"):
            name = f"{split}.de-en.{lang}"
            assert (back / f"{name}.bin").read_bytes() == (fairseq_mmap_dir / f"{name}.bin").read_bytes()
            assert (back / f"{name}.idx").read_bytes() == (fairseq_mmap_dir / f"{name}.idx").read_bytes()
            fairseq_back = fairseq_rows(back / name, "mmap")
            original = fairseq_rows(fairseq_mmap_dir / name, "mmap")
            assert all(np.array_equal(x, y) for x, y in zip(fairseq_back, original, strict=True))


def test_monolingual_data_bin(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    mono = tmp_path / "mono"
    mono.mkdir()
    for ext in ("bin", "idx"):
        (mono / f"train.{ext}").write_bytes((fairseq_mmap_dir / f"train.de-en.en.{ext}").read_bytes())
    (mono / "dict.txt").write_bytes((fairseq_mmap_dir / "dict.en.txt").read_bytes())
    out = tmp_path / "out"
    convert_fairseq(mono, out, progress=False)
    ds = open_dataset(out, "train")
    assert ds.columns == ("tokens",)
    expected = fairseq_rows(mono / "train", "mmap")
    assert all(np.array_equal(ds.row("tokens", i).numpy(), r) for i, r in enumerate(expected))


def test_shards_train1_join_train(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    for lang in ("de", "en"):
        for ext in ("bin", "idx"):
            src = fairseq_mmap_dir / f"valid.de-en.{lang}.{ext}"
            (fairseq_mmap_dir / f"train1.de-en.{lang}.{ext}").write_bytes(src.read_bytes())
    out = tmp_path / "out"
    manifest = convert_fairseq(fairseq_mmap_dir, out, progress=False)
    assert manifest.shards("train") == ["train", "train1"]
    assert manifest.splits() == ["test", "train", "valid"]
    ds = open_dataset(out, "train")
    assert len(ds) == 29000 + 1014
    np.testing.assert_array_equal(ds.row("target", 29000).numpy(), open_dataset(out, "valid").row("target", 0))


def _truncate_pair(data_bin: Path, lang: str, keep_rows: int) -> None:
    """Rewrite valid.de-en.<lang> keeping only the first rows (a valid but shorter file)."""
    idx = data_bin / f"valid.de-en.{lang}.idx"
    raw = idx.read_bytes()
    n = struct.unpack("<Q", raw[18:26])[0]
    sizes = np.frombuffer(raw, "<i4", n, 26)[:keep_rows]
    pointers = np.frombuffer(raw, "<i8", n, 26 + 4 * n)[:keep_rows]
    idx.write_bytes(raw[:18] + struct.pack("<Q", keep_rows) + sizes.tobytes() + pointers.tobytes())
    binary = data_bin / f"valid.de-en.{lang}.bin"
    binary.write_bytes(binary.read_bytes()[: 2 * int(sizes.sum())])


def test_row_count_mismatch_names_both_files(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    _truncate_pair(fairseq_mmap_dir, "en", 1000)
    with pytest.raises(InputDataError, match=r"valid\.de-en\.de\.bin.*1014 rows.*valid\.de-en\.en\.bin.*1000 rows"):
        convert_fairseq(fairseq_mmap_dir, tmp_path / "out", progress=False)
    assert not (tmp_path / "out" / "arrowmt.json").exists()


def test_id_outside_dictionary_names_row(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    en = fairseq_mmap_dir / "dict.en.txt"
    lines = en.read_text(encoding="utf-8").splitlines(keepends=True)
    en.write_text("".join(lines[:100]), encoding="utf-8")
    with pytest.raises(InputDataError, match=r"row \d+ \(target\): token id \d+ is outside the dictionary"):
        convert_fairseq(fairseq_mmap_dir, tmp_path / "out", progress=False)


def test_several_pairs_need_a_choice(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    for lang in ("de", "en"):
        for ext in ("bin", "idx"):
            target = fairseq_mmap_dir / f"valid.en-de.{lang}.{ext}"
            target.write_bytes((fairseq_mmap_dir / f"valid.de-en.{lang}.{ext}").read_bytes())
    with pytest.raises(InvalidParameterError, match=r"several language pairs \['de-en', 'en-de'\]"):
        convert_fairseq(fairseq_mmap_dir, tmp_path / "out", progress=False)
    manifest = convert_fairseq(fairseq_mmap_dir, tmp_path / "out", pair="en-de", progress=False)
    assert manifest.languages == {"source": "en", "target": "de"}
    assert Manifest.load(tmp_path / "out").files.keys() == {"valid"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "arrowmt._cli", *args], capture_output=True, text=True)


def test_cli_convert_info_verify(fairseq_lazy_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _cli("convert", "fairseq", str(fairseq_lazy_dir), str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "31014 rows" in done.stdout
    info = _cli("info", str(out))
    assert info.returncode == 0
    assert "train      source   de         29000       389706   18728" in info.stdout
    verify = _cli("verify", str(out))
    assert verify.returncode == 0 and "OK (3 files, 31014 rows, 851475 tokens)" in verify.stdout


def test_cli_bad_input_exit_2_one_line(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    (fairseq_mmap_dir / "train.de-en.de.idx").write_bytes(b"NOTANIDX" + b"\0" * 40)
    done = _cli("convert", "fairseq", str(fairseq_mmap_dir), str(tmp_path / "out"), "--quiet")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr
    assert "train.de-en.de.idx" in lines[0] and "magic" in lines[0]


def test_overwrite_leaves_nothing_of_the_earlier_output(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    for lang in ("de", "en"):
        for ext in ("bin", "idx"):
            src = fairseq_mmap_dir / f"valid.de-en.{lang}.{ext}"
            (fairseq_mmap_dir / f"train1.de-en.{lang}.{ext}").write_bytes(src.read_bytes())
    out, back = tmp_path / "out", tmp_path / "back"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    export_fairseq(out, back, progress=False)
    assert (out / "train1.arrow").exists() and (back / "train1.de-en.de.idx").exists()
    for lang in ("de", "en"):
        for ext in ("bin", "idx"):
            (fairseq_mmap_dir / f"train1.de-en.{lang}.{ext}").unlink()
    convert_fairseq(fairseq_mmap_dir, out, overwrite=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == [
        "arrowmt.json",
        "dict.de.txt",
        "dict.en.txt",
        "test.arrow",
        "train.arrow",
        "valid.arrow",
    ]
    export_fairseq(out, back, overwrite=True, progress=False)
    assert not list(back.glob("train1.*"))
    assert len(list(back.glob("*.idx"))) == 6
