"""The manifest: how split names group into shards, and why no name in it is ever used as a path.

Every reader (``open_split``, ``open_dataset``, ``verify``, ``info``, ``export fairseq``,
the HF bridge) starts with ``Manifest.load``, which accepts only plain file names inside
the folder and refuses listed files that are not regular files there. The tampered
manifests and files below are checked through every one of those entry points.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from arrowmt import Dictionary, FileEntry, FormatError, Manifest, export_fairseq, open_split, summarize, verify_dataset
from arrowmt.testing import (
    MANIFEST_NAME,
    MAX_JSON_BYTES,
    OutputFolder,
    Ragged,
    column,
    plain_name_error,
    special_ids_of,
)

ROOT = Path(__file__).resolve().parents[1]
LANGS = {"source": "de", "target": "en"}
HANG_LIMIT_S = 20


def _manifest(*names: str) -> Manifest:
    files = {n: FileEntry(file=f"{n}.arrow", rows=1, size=1, sha256="0" * 64) for n in names}
    return Manifest(languages={"source": "de", "target": "en"}, dictionaries={}, source_format="x", files=files)


# ---------------------------------------------------------------- shards


@pytest.mark.parametrize(
    ("names", "split", "shards"),
    [
        (("train", "train1", "train2", "valid"), "train", ["train", "train1", "train2"]),
        (("train", "train2"), "train", ["train"]),  # fairseq stops at the first missing number
        (("train1", "train10"), "train1", ["train1"]),  # train10 is train + 10, never a shard of train1
        (("train1", "train11"), "train1", ["train1", "train11"]),
        (("test", "test2016"), "test", ["test"]),
        (("valid",), "train", []),
        # a name that is itself a shard of another split is only itself
        (("train", *(f"train{k}" for k in range(1, 13))), "train1", ["train1"]),
        (("train", *(f"train{k}" for k in range(1, 13))), "train11", ["train11"]),
        (("train", *(f"train{k}" for k in range(1, 13))), "train", ["train", *(f"train{k}" for k in range(1, 13))]),
        (("a", "a1", "a11"), "a", ["a", "a1"]),
        (("a", "a1", "a11"), "a1", ["a1"]),
        (("a", "a1", "a11"), "a11", ["a11"]),
        (("x", "x05"), "x", ["x"]),
        (("x", "x1", "x2", "x3", "x10"), "x3", ["x3"]),
    ],
)
def test_shards(names: tuple[str, ...], split: str, shards: list[str]) -> None:
    assert _manifest(*names).shards(split) == shards


@pytest.mark.parametrize(
    ("names", "splits"),
    [
        (("train", "train1", "train2", "valid", "test"), ["test", "train", "valid"]),
        (("train", "train2"), ["train", "train2"]),
        (("train1", "train10"), ["train1", "train10"]),
        (("test", "test2016"), ["test", "test2016"]),
        (("train", *(f"train{k}" for k in range(1, 13))), ["train"]),
        (("a", "a1", "a11"), ["a", "a11"]),
    ],
)
def test_splits(names: tuple[str, ...], splits: list[str]) -> None:
    manifest = _manifest(*names)
    assert manifest.splits() == splits
    covered = [shard for split in splits for shard in manifest.shards(split)]
    assert sorted(covered) == sorted(names)  # every file belongs to exactly one split


def test_thirteen_shards_open(tmp_path: Path) -> None:
    names = ["train", *(f"train{k}" for k in range(1, 13))]
    folder = build_dataset(tmp_path / "ds", {name: k + 1 for k, name in enumerate(names)})
    assert len(open_split(folder, "train")) == sum(range(1, 14))
    assert open_split(folder, "train1").shard_names == ["train1"]
    assert len(open_split(folder, "train1")) == 2
    assert len(open_split(folder, "train12")) == 13


# ---------------------------------------------------------------- a small real folder


def dictionary() -> Dictionary:
    return Dictionary([*Dictionary().symbols, "a", "b", "c"])


def build_dataset(folder: Path, rows: dict[str, int] | None = None) -> Path:
    """A complete arrowmt folder written by the converters' OutputFolder: train (3 rows) and valid (2 rows)."""
    d = dictionary()
    with OutputFolder.prepare(folder, dict(LANGS), "synthetic", overwrite=False, progress=False) as out:
        names = {lang: out.add_dictionary(lang, d) for lang in LANGS.values()}
        for split, n in (rows or {"train": 3, "valid": 2}).items():
            ragged = Ragged.from_rows([[4 + k % 3, 2] for k in range(n)])
            columns = {role: column(ragged, lang, names[lang], d, f"test {split}") for role, lang in LANGS.items()}
            out.write(split, columns, special_ids_of(d))
        out.finish()
    return folder


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return build_dataset(tmp_path / "ds")


def edit_manifest(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads((folder / MANIFEST_NAME).read_text())
    change(data)
    (folder / MANIFEST_NAME).write_text(json.dumps(data))


def _hf(name: str) -> Callable[[Path, Path], object]:
    def call(folder: Path, out: Path) -> object:
        pytest.importorskip("datasets")
        from arrowmt.integrations import hf

        if name == "export":
            return hf.export_for_load_from_disk(folder, "train", out)
        return hf.load_split(folder, "train")

    return call


def _open_dataset(folder: Path, _out: Path) -> object:
    from arrowmt import open_dataset

    return open_dataset(folder, "train")


READERS: dict[str, Callable[[Path, Path], object]] = {
    "open_split": lambda folder, _out: open_split(folder, "train"),
    "open_dataset": _open_dataset,
    "verify": lambda folder, _out: verify_dataset(folder),
    "info": lambda folder, _out: summarize(folder),
    "export_fairseq": lambda folder, out: export_fairseq(folder, out, progress=False),
    "hf_load_split": _hf("load"),
    "hf_export": _hf("export"),
}


@contextlib.contextmanager
def no_hang() -> Iterator[None]:
    """Fail (instead of hanging forever) if the block blocks, e.g. opening a FIFO."""

    def expire(*_args: object) -> None:
        raise TimeoutError(f"blocked for {HANG_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(HANG_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refused(folder: Path, tmp_path: Path, reader: str, *fragments: str) -> str:
    """Run ``reader`` on ``folder``: it must raise one FormatError holding every fragment, write nothing."""
    out = tmp_path / f"out-{reader}"
    with no_hang(), pytest.raises(FormatError) as info:
        READERS[reader](folder, out)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    assert not out.exists()
    return message


def test_valid_folder_reads_everywhere(dataset: Path, tmp_path: Path) -> None:
    for name, reader in READERS.items():
        if name.startswith("hf"):
            pytest.importorskip("datasets")
        reader(dataset, tmp_path / f"out-{name}")
    assert verify_dataset(dataset).ok


# ---------------------------------------------------------------- names are never paths

SPLIT_ENTRY = {"file": "train.arrow", "rows": 3, "size": 1, "sha256": "0" * 64}


def _set(*keys: str, value: object) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def _rename_split(key: str) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        entry = data["files"].pop("train")
        data["files"][key] = {**entry, "file": f"{key}.arrow"}

    return change


TAMPERED_NAMES = {
    "dict ../": (_set("dictionaries", "en", value="../victim.txt"), "dictionaries['en']", "'../victim.txt'"),
    "dict absolute": (_set("dictionaries", "en", value="/etc/dict.en.txt"), "dictionaries['en']", "/etc/dict.en.txt"),
    "dict /etc/passwd": (_set("dictionaries", "de", value="/etc/passwd"), "dictionaries['de']", "'/etc/passwd'"),
    "dict subfolder": (_set("dictionaries", "en", value="sub/dict.en.txt"), "dictionaries['en']", "sub/dict.en.txt"),
    "dict backslash": (_set("dictionaries", "en", value="..\\dict.txt"), "dictionaries['en']", "dict.txt"),
    "dict ..": (_set("dictionaries", "en", value=".."), "dictionaries['en']", "'..'"),
    "dict hidden": (_set("dictionaries", "en", value=".dict.txt"), "dictionaries['en']", "'.dict.txt'"),
    "dict NUL": (_set("dictionaries", "en", value="dict\0.txt"), "dictionaries['en']", "dict\\x00.txt"),
    "dict suffix": (_set("dictionaries", "en", value="dict.en"), "dictionaries['en']", "ending in '.txt'"),
    "dict empty": (_set("dictionaries", "en", value=""), "dictionaries['en']", "got ''"),
    "dict long": (_set("dictionaries", "en", value="d" * 300 + ".txt"), "dictionaries['en']", "304 bytes"),
    "dict not str": (_set("dictionaries", "en", value=5), "dictionaries['en']", "got 5"),
    "split ../../": (_rename_split("../../x"), "files['../../x']", "'../../x.arrow'"),
    "split absolute": (_rename_split("/tmp/train"), "files['/tmp/train']", "'/tmp/train.arrow'"),
    "split ..": (_rename_split(".."), "files['..']", "'...arrow'"),
    "split NUL": (_rename_split("tr\0ain"), "files['tr\\x00ain']", "expected a plain file name"),
    "file ../": (_set("files", "train", "file", value="../train.arrow"), "files['train'].file", "'../train.arrow'"),
    "file other": (_set("files", "train", "file", value="valid.arrow"), "files['train'].file", "'valid.arrow'"),
    "language ../": (_set("languages", "source", value="../de"), "languages['source']", "'../de'"),
    "language slash": (_set("languages", "target", value="en/x"), "languages['target']", "'en/x'"),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case", list(TAMPERED_NAMES))
def test_tampered_names_refused_by_every_reader(dataset: Path, tmp_path: Path, case: str, reader: str) -> None:
    change, *fragments = TAMPERED_NAMES[case]
    edit_manifest(dataset, change)
    message = refused(dataset, tmp_path, reader, str(dataset / MANIFEST_NAME), *fragments)
    assert "expected" in message and len(message.splitlines()) == 1


def test_export_never_writes_outside(dataset: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    victim.chmod(0o600)
    edit_manifest(dataset, _set("dictionaries", "en", value="../victim.txt"))
    refused(dataset, tmp_path, "export_fairseq", "'../victim.txt'")
    assert victim.read_text() == "keep me" and stat.S_IMODE(victim.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "name", ["train.arrow", "dict.en.txt", "a b.txt", "dict.zh-cn.txt", "ü.txt", "x" * 251 + ".txt"]
)
def test_plain_names_accepted(name: str) -> None:
    assert plain_name_error(name, name[name.rindex(".") :]) is None


# ---------------------------------------------------------------- malformed manifests: one FormatError each


def _write(text: str | bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.unlink()
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)

    return write


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda path: edit_manifest(path.parent, change)


def _pop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.pop(key)


MALFORMED = {
    "list": (_write("[]"), "the top level: expected dict, got list"),
    "string": (_write('"arrowmt"'), "expected dict, got str"),
    "number": (_write("1"), "expected dict, got int"),
    "null": (_write("null"), "expected dict, got NoneType"),
    "deep list": (_write("[" * 100_000), "nested too deeply"),
    "deep object": (_write('{"a":' * 100_000), "nested too deeply"),
    "not utf-8": (_write(b'{"format": "\xff"}'), "malformed manifest"),
    "empty": (_write(""), "malformed manifest"),
    "truncated": (_write('{"format": "arrowmt", "files": {'), "malformed manifest"),
    "huge integer": (_write("1" * 5000), "malformed manifest"),
    "missing files": (_edit(_pop("files")), "missing ['files']"),
    "unknown key": (_edit(_set("extra", value=1)), "unknown ['extra']"),
    "version 2": (_edit(_set("format_version", value=2)), "version 1, got 'arrowmt' version 2"),
    "format name": (_edit(_set("format", value="other")), "expected format 'arrowmt'"),
    "files list": (_edit(_set("files", value=[])), "files: expected dict, got list"),
    "languages str": (_edit(_set("languages", value="de")), "languages: expected dict, got str"),
    "dictionaries null": (_edit(_set("dictionaries", value=None)), "dictionaries: expected dict"),
    "source_format int": (_edit(_set("source_format", value=5)), "source_format: expected str, got int"),
    "provenance list": (_edit(_set("provenance", value=[])), "provenance: expected dict"),
    "entry list": (_edit(_set("files", "train", value=[])), "files['train']: expected dict, got list"),
    "rows str": (_edit(_set("files", "train", "rows", value="3")), "files['train'].rows: expected int, got str"),
    "rows bool": (_edit(_set("files", "train", "rows", value=True)), "files['train'].rows: expected int, got bool"),
    "rows float": (_edit(_set("files", "train", "rows", value=3.0)), "expected int, got float"),
    "size negative": (_edit(_set("files", "train", "size", value=-1)), "size -1"),
    "sha256 short": (_edit(_set("files", "train", "sha256", value="abc")), "sha256 'abc'"),
    "entry extra key": (_edit(_set("files", "train", "path", value="x")), "expected keys ['file', 'rows'"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_manifest_one_format_error(dataset: Path, tmp_path: Path, case: str) -> None:
    change, fragment = MALFORMED[case]
    change(dataset / MANIFEST_NAME)
    for reader in ("open_split", "verify", "info", "export_fairseq"):
        refused(dataset, tmp_path, reader, str(dataset / MANIFEST_NAME), fragment)


def test_oversized_manifest(dataset: Path, tmp_path: Path) -> None:
    with open(dataset / MANIFEST_NAME, "r+b") as handle:
        handle.truncate(MAX_JSON_BYTES + 1)
    refused(dataset, tmp_path, "open_split", f"expected at most {MAX_JSON_BYTES} bytes")


def test_manifest_missing_or_folder_not_a_folder(dataset: Path, tmp_path: Path) -> None:
    (dataset / MANIFEST_NAME).unlink()
    refused(dataset, tmp_path, "open_split", "missing", "is not a converted arrowmt dataset")
    refused(tmp_path / "nowhere", tmp_path, "info", "missing")
    a_file = tmp_path / "hostname"
    a_file.write_text("host\n")
    refused(a_file, tmp_path, "info", f"{a_file}: expected an arrowmt dataset folder, got a file")


def test_unreadable_manifest(dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = os.open

    def denied(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(MANIFEST_NAME):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)  # tests run as root: chmod 000 would not stop the read
    refused(dataset, tmp_path, "open_split", "cannot read the manifest: Permission denied")


# ---------------------------------------------------------------- listed files that are not regular files inside


def _symlink_to(target: Callable[[Path, Path], Path]) -> Callable[[Path, Path], None]:
    def make(path: Path, tmp_path: Path) -> None:
        destination = target(path, tmp_path)
        path.unlink()
        path.symlink_to(destination)

    return make


def _outside_copy(path: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "elsewhere" / path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(path, copy)
    return copy


def _fifo(path: Path, _tmp_path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _folder(path: Path, _tmp_path: Path) -> None:
    path.unlink()
    path.mkdir()


def _zero_device(path: Path, _tmp_path: Path) -> None:
    path.unlink()
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # what /dev/zero is
    except OSError as exc:
        pytest.skip(f"cannot create a device file here: {exc}")


BAD_MEMBERS = {
    "dict -> /etc/passwd": ("dict.en.txt", _symlink_to(lambda _p, _t: Path("/etc/passwd")), "symbolic link to"),
    "dict -> /dev/zero": ("dict.de.txt", _symlink_to(lambda _p, _t: Path("/dev/zero")), "outside the folder"),
    "dict -> outside copy": ("dict.en.txt", _symlink_to(_outside_copy), "outside the folder"),
    "split -> outside copy": ("train.arrow", _symlink_to(_outside_copy), "outside the folder"),
    "split -> ../ (dangling)": ("train.arrow", _symlink_to(lambda _p, _t: Path("..") / "x.arrow"), "outside"),
    "dict FIFO": ("dict.en.txt", _fifo, "got a FIFO"),
    "split FIFO": ("train.arrow", _fifo, "got a FIFO"),
    "split folder": ("train.arrow", _folder, "got a folder"),
    "dict folder": ("dict.de.txt", _folder, "got a folder"),
    "dict device": ("dict.de.txt", _zero_device, "got a character device"),
    "split device": ("train.arrow", _zero_device, "got a character device"),
    "manifest FIFO": (MANIFEST_NAME, _fifo, "got a FIFO"),
    "manifest folder": (MANIFEST_NAME, _folder, "got a folder"),
    "manifest -> outside copy": (MANIFEST_NAME, _symlink_to(_outside_copy), "outside the folder"),
    "manifest -> /dev/zero": (MANIFEST_NAME, _symlink_to(lambda _p, _t: Path("/dev/zero")), "outside the folder"),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("case", list(BAD_MEMBERS))
def test_listed_file_not_a_regular_file_inside(dataset: Path, tmp_path: Path, case: str, reader: str) -> None:
    name, make, fragment = BAD_MEMBERS[case]
    make(dataset / name, tmp_path)
    message = refused(dataset, tmp_path, reader, str(dataset / name), fragment)
    assert "root:" not in message  # nothing of the foreign file's contents


def test_symlink_inside_the_folder_is_fine(dataset: Path, tmp_path: Path) -> None:
    (dataset / "store").mkdir()
    for name in ("train.arrow", "dict.en.txt"):
        (dataset / name).rename(dataset / "store" / name)
        (dataset / name).symlink_to(Path("store") / name)
    assert len(open_split(dataset, "train")) == 3
    assert verify_dataset(dataset).ok


@pytest.mark.parametrize("reader", [name for name in READERS if name != "verify"])
def test_split_file_not_as_recorded_is_refused_everywhere(dataset: Path, tmp_path: Path, reader: str) -> None:
    """A split file whose rows differ from the manifest's record (a changed file) is read by no entry point."""
    if reader.startswith("hf"):
        pytest.importorskip("datasets")
    edit_manifest(dataset, _set("files", "train", "rows", value=4))
    refused(dataset, tmp_path, reader, str(dataset / "train.arrow"), "4 rows as recorded in the manifest", "and 3 rows")
    assert not verify_dataset(dataset).ok


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowmt._cli", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize("command", ["info", "verify", "export"])
def test_cli_one_line_exit_2(dataset: Path, tmp_path: Path, command: str) -> None:
    edit_manifest(dataset, _set("dictionaries", "en", value="../victim.txt"))
    os.mkfifo(dataset / "valid.arrow.fifo")  # an unlisted FIFO is never opened
    args = [command, str(dataset)] if command != "export" else ["export", "fairseq", str(dataset), str(tmp_path / "x")]
    done = _cli(*args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "dictionaries['en']" in done.stderr and "'../victim.txt'" in done.stderr


@pytest.mark.parametrize("case", ["deep list", "list"])
def test_cli_info_malformed_manifest(dataset: Path, case: str) -> None:
    MALFORMED[case][0](dataset / MANIFEST_NAME)
    done = _cli("info", str(dataset))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert MALFORMED[case][1] in done.stderr and len(done.stderr.strip().splitlines()) == 1
