"""Converting real fairseq-preprocess output: ids equal fairseq's own reading, row for row."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import arrowmt.converters._fairseq_export as fairseq_export
import arrowmt.converters._output as output
from arrowmt import (
    ArrowMTError,
    Dictionary,
    FormatError,
    InputDataError,
    InvalidParameterError,
    Manifest,
    OutputExistsError,
    convert_fairseq,
    export_fairseq,
    open_dataset,
    verify_dataset,
)
from arrowmt.testing import (
    CACHE_DIR_NAME,
    INTERRUPTED_MESSAGE,
    STAGING_MARK,
    TEMP_PREFIX,
    TERMINATED_MESSAGE,
    SplitFile,
    StagedOutput,
    discover,
)
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
    with pytest.raises(OutputExistsError, match="overwrite"):
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


def test_export_refuses_an_id_that_narrowing_would_wrap(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    """A corrupt id (70000) in a uint16 export is named, not silently written as 70000 - 65536."""
    out = tmp_path / "out"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    split = SplitFile(out / "valid.arrow")
    word = int(split.spans("target", np.array([5]))[0][0]) + 1
    del split
    with open(out / "valid.arrow", "r+b") as handle:
        handle.seek(word * 4)
        handle.write(np.array([70000], dtype="<i4").tobytes())
    with pytest.raises(FormatError, match=r"valid\.arrow: row 5 \(target\): token id 70000 outside the dictionary"):
        export_fairseq(out, tmp_path / "back", progress=False)
    assert not (tmp_path / "back").exists()


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
    with pytest.raises(InputDataError, match=r"row \d+ \(target\): token id \d+ outside the dictionary"):
        convert_fairseq(fairseq_mmap_dir, tmp_path / "out", progress=False)


def test_several_pairs_convert_together_or_one_by_choice(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    for lang in ("de", "en"):
        for ext in ("bin", "idx"):
            target = fairseq_mmap_dir / f"valid.en-de.{lang}.{ext}"
            target.write_bytes((fairseq_mmap_dir / f"valid.de-en.{lang}.{ext}").read_bytes())
    together = convert_fairseq(fairseq_mmap_dir, tmp_path / "all", progress=False)  # see test_multi_pair.py
    assert together.provenance["pairs"] == ["de-en", "en-de"] and "valid.en-de" in together.files
    made = together.provenance  # what it was converted from, as a text conversion records its inputs
    assert made["converter"] == "arrowmt.convert_fairseq" and made["data_bin"] == str(fairseq_mmap_dir.resolve())
    assert made["inputs"]["valid.en-de"]["source"] == f"{fairseq_mmap_dir / 'valid.en-de.en'}.bin"
    with pytest.raises(InvalidParameterError, match=r"expected one of \['de-en', 'en-de'\]"):
        convert_fairseq(fairseq_mmap_dir, tmp_path / "out", pair="fr-en", progress=False)
    manifest = convert_fairseq(fairseq_mmap_dir, tmp_path / "out", pair="en-de", progress=False)
    assert manifest.languages == {"source": "en", "target": "de"}
    assert Manifest.load(tmp_path / "out").files.keys() == {"valid"}


NAMES = [f"{split}.de-en.{lang}" for split in ("train", "valid", "test") for lang in ("de", "en")]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "arrowmt._cli", *args], capture_output=True, text=True)


def test_cli_convert_info_verify(fairseq_lazy_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _cli("convert", "fairseq", str(fairseq_lazy_dir), str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert "31014 rows" in done.stdout
    info = _cli("info", str(out))
    assert info.returncode == 0
    tokens = {name: sum(map(len, fairseq_rows(fairseq_lazy_dir / name, "lazy"))) for name in NAMES}
    vocab = 4 + (fairseq_lazy_dir / "dict.de.txt").read_text(encoding="utf-8").count("\n")
    assert f"train      source   de         29000     {tokens['train.de-en.de']:>8}   {vocab}" in info.stdout
    verify = _cli("verify", str(out))
    assert verify.returncode == 0 and f"OK (3 files, 31014 rows, {sum(tokens.values())} tokens)" in verify.stdout


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
        "test.arrow.blocks",
        "train.arrow",
        "train.arrow.blocks",
        "valid.arrow",
        "valid.arrow.blocks",
    ]
    export_fairseq(out, back, overwrite=True, progress=False)
    assert not list(back.glob("train1.*"))
    assert len(list(back.glob("*.idx"))) == 6


# ---------------------------------------------------------------- writing only what arrowmt owns

PAIR_FILES = [f"{s}.de-en.{lang}.{ext}" for s in SPLITS for lang in ("de", "en") for ext in ("bin", "idx")]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file directly in ``folder`` with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def leftovers(root: Path) -> list[Path]:
    """Staging folders and temporary files anywhere under ``root``."""
    return sorted(p for p in root.rglob("*") if STAGING_MARK in p.name or p.name.startswith(TEMP_PREFIX))


def add_fr_pair(data_bin: Path) -> None:
    """A second language pair (fr-en, valid only) with its own dict.fr.txt, as a multi-pair data-bin has."""
    for lang, source in (("fr", "de"), ("en", "en")):
        for ext in ("bin", "idx"):
            shutil.copyfile(data_bin / f"valid.de-en.{source}.{ext}", data_bin / f"valid.fr-en.{lang}.{ext}")
    shutil.copyfile(data_bin / "dict.de.txt", data_bin / "dict.fr.txt")


def test_convert_two_pair_data_bin_into_itself_keeps_everything(fairseq_mmap_dir: Path) -> None:
    add_fr_pair(fairseq_mmap_dir)
    before = snapshot(fairseq_mmap_dir)
    convert_fairseq(fairseq_mmap_dir, fairseq_mmap_dir, pair="de-en", overwrite=True, progress=False)
    after = snapshot(fairseq_mmap_dir)
    assert {name: after[name] for name in before} == before  # every fairseq file kept, byte for byte
    splits = {"train.arrow", "valid.arrow", "test.arrow"}
    assert set(after) - set(before) == {"arrowmt.json", *splits, *(f"{name}.blocks" for name in splits)}
    # the other pair into the same folder: the de-en splits go, dict.de.txt stays (fairseq's own)
    manifest = convert_fairseq(fairseq_mmap_dir, fairseq_mmap_dir, pair="fr-en", overwrite=True, progress=False)
    after = snapshot(fairseq_mmap_dir)
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) == {"arrowmt.json", "valid.arrow", "valid.arrow.blocks"}
    assert manifest.dictionaries == {"fr": "dict.fr.txt", "en": "dict.en.txt"}
    assert verify_dataset(fairseq_mmap_dir).ok
    assert leftovers(fairseq_mmap_dir.parent) == []


def test_overwrite_keeps_files_it_never_wrote(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    foreign = {"other.arrow": b"not ours", "dict.xx.txt": b"x 1\n", "notes.txt": b"hello"}
    for name, data in foreign.items():
        (out / name).write_bytes(data)
    with pytest.raises(OutputExistsError):
        convert_fairseq(fairseq_mmap_dir, out, progress=False)
    convert_fairseq(fairseq_mmap_dir, out, overwrite=True, progress=False)
    convert_fairseq(fairseq_mmap_dir, out, overwrite=True, progress=False)
    assert {name: (out / name).read_bytes() for name in foreign} == foreign
    assert verify_dataset(out).ok


def test_overwrite_removes_the_plan_cache(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    (out / CACHE_DIR_NAME).mkdir()
    (out / CACHE_DIR_NAME / "plan.bin").write_bytes(b"old plan")
    convert_fairseq(fairseq_mmap_dir, out, overwrite=True, progress=False)
    assert not (out / CACHE_DIR_NAME).exists()


class Boom(RuntimeError):
    """The injected failure."""


def fail_on_write(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Make the converter's split writer raise once ``after`` splits were written (into the staging folder)."""
    real = output.write_split
    calls = []

    def write_then_fail(path: Path, *args: object, **kwargs: object) -> object:
        if len(calls) == after:
            raise Boom(f"injected failure writing {path}")
        calls.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(output, "write_split", write_then_fail)


@pytest.mark.parametrize("after", [0, 2])
def test_failed_overwrite_keeps_the_previous_dataset(
    fairseq_mmap_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    out = tmp_path / "out"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    before = snapshot(out)
    fail_on_write(monkeypatch, after)
    with pytest.raises(Boom):
        convert_fairseq(fairseq_mmap_dir, out, overwrite=True, progress=False)
    assert snapshot(out) == before
    assert verify_dataset(out).ok and len(open_dataset(out, "train")) == 29000
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["absent", "nested", "empty"])
def test_failed_fresh_conversion_leaves_nothing(
    fairseq_mmap_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    out = tmp_path / "a" / "b" / "out" if where == "nested" else tmp_path / "out"
    if where == "empty":
        out.mkdir()
    fail_on_write(monkeypatch, 2)
    with pytest.raises(Boom):
        convert_fairseq(fairseq_mmap_dir, out, progress=False)
    assert sorted(tmp_path.iterdir()) == sorted([fairseq_mmap_dir, *([out] if where == "empty" else [])])
    assert where != "empty" or list(out.iterdir()) == []


@pytest.mark.parametrize(
    "damage",
    ["row counts", "index magic", "bin size", "bin FIFO", "dictionary missing", "dictionary malformed"],
)
def test_input_checked_before_anything_is_written(
    fairseq_mmap_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """Every split (valid is converted last) and both dictionaries are checked before the output is staged."""
    if damage == "row counts":
        _truncate_pair(fairseq_mmap_dir, "en", 1000)
    elif damage == "index magic":
        (fairseq_mmap_dir / "valid.de-en.en.idx").write_bytes(b"NOTANIDX" + b"\0" * 40)
    elif damage == "bin size":
        with open(fairseq_mmap_dir / "valid.de-en.de.bin", "ab") as handle:
            handle.write(b"\0\0")
    elif damage == "bin FIFO":
        (fairseq_mmap_dir / "valid.de-en.en.bin").unlink()
        os.mkfifo(fairseq_mmap_dir / "valid.de-en.en.bin")  # never opened: checked with stat first
    elif damage == "dictionary missing":
        (fairseq_mmap_dir / "dict.en.txt").unlink()
    else:
        (fairseq_mmap_dir / "dict.en.txt").write_text("word notanumber\n")
    begun = []
    monkeypatch.setattr(StagedOutput, "begin", lambda *args: begun.append(args))
    with pytest.raises(ArrowMTError):
        convert_fairseq(fairseq_mmap_dir, tmp_path / "out", progress=False)
    assert begun == []
    assert sorted(tmp_path.iterdir()) == [fairseq_mmap_dir]


SLOW_CONVERSION = """
import sys, time
import arrowmt.converters._output as output
real = output.write_split
def write_then_wait(*args, **kwargs):
    meta = real(*args, **kwargs)
    print("wrote", flush=True)
    time.sleep(600)
    return meta
output.write_split = write_then_wait
from arrowmt._cli import main
sys.exit(main(sys.argv[1:]))
"""


def start_slow_conversion(data_bin: Path, out: Path) -> subprocess.Popen[str]:
    """The CLI converting ``data_bin`` into ``out`` with --overwrite, stopping for good after the first split."""
    args = ["convert", "fairseq", str(data_bin), str(out), "--overwrite", "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_CONVERSION, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "wrote"
    return proc


@pytest.mark.parametrize("existing", [True, False], ids=["overwrite", "fresh"])
def test_sigkill_mid_conversion(fairseq_mmap_dir: Path, tmp_path: Path, existing: bool) -> None:
    out = tmp_path / "out"
    if existing:
        convert_fairseq(fairseq_mmap_dir, out, progress=False)
    before = snapshot(out) if existing else None
    proc = start_slow_conversion(fairseq_mmap_dir, out)
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    proc.communicate()
    staging = leftovers(tmp_path)
    assert staging and all(p.parent == tmp_path for p in staging)  # beside OUT, never in it
    if existing:
        assert snapshot(out) == before and verify_dataset(out).ok
    else:
        assert not out.exists()
    convert_fairseq(fairseq_mmap_dir, out, overwrite=True, progress=False)  # the next run cleans up
    assert leftovers(tmp_path) == []
    assert verify_dataset(out).ok and snapshot(out) == (before or snapshot(out))


@pytest.mark.parametrize("existing", [True, False], ids=["overwrite", "fresh"])
@pytest.mark.parametrize(
    ("stop", "status", "message"),
    [(signal.SIGINT, 130, INTERRUPTED_MESSAGE), (signal.SIGTERM, 143, TERMINATED_MESSAGE)],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_or_sigterm_mid_conversion(
    fairseq_mmap_dir: Path, tmp_path: Path, existing: bool, stop: int, status: int, message: str
) -> None:
    out = tmp_path / "out"
    if existing:
        convert_fairseq(fairseq_mmap_dir, out, progress=False)
    before = snapshot(out) if existing else None
    proc = start_slow_conversion(fairseq_mmap_dir, out)
    proc.send_signal(stop)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    assert stderr.strip().splitlines() == [message]
    assert leftovers(tmp_path) == []
    assert (snapshot(out) == before and verify_dataset(out).ok) if existing else not out.exists()


# ---------------------------------------------------------------- export fairseq: same guarantees


def test_export_overwrite_keeps_foreign_files(fairseq_mmap_dir: Path, tmp_path: Path) -> None:
    out, back = tmp_path / "out", tmp_path / "back"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    back.mkdir()
    foreign = {"valid.fr-en.fr.idx": b"theirs", "valid.fr-en.fr.bin": b"theirs", "dict.fr.txt": b"fr 1\n"}
    for name, data in foreign.items():
        (back / name).write_bytes(data)
    with pytest.raises(OutputExistsError):
        export_fairseq(out, back, progress=False)
    export_fairseq(out, back, overwrite=True, progress=False)
    export_fairseq(out, back, overwrite=True, progress=False)
    assert {name: (back / name).read_bytes() for name in foreign} == foreign
    assert set(PAIR_FILES) <= {p.name for p in back.iterdir()}
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("existing", [True, False], ids=["overwrite", "fresh"])
def test_failed_export_keeps_the_previous_one(
    fairseq_mmap_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool
) -> None:
    out, back = tmp_path / "out", tmp_path / "back"
    convert_fairseq(fairseq_mmap_dir, out, progress=False)
    if existing:
        export_fairseq(out, back, progress=False)
    before = snapshot(back) if existing else None
    real, calls = fairseq_export._export_column, []

    def export_then_fail(*args: object) -> Path:
        if len(calls) == 3:
            raise Boom("injected export failure")
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(fairseq_export, "_export_column", export_then_fail)
    with pytest.raises(Boom):
        export_fairseq(out, back, overwrite=True, progress=False)
    assert snapshot(back) == before if existing else not back.exists()
    assert leftovers(tmp_path) == []
