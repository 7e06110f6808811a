"""The ``arrowmt`` command line: one-line errors with exit 2, hints, ``info`` (text and JSON), flags in messages,
help for every option, progress bars on a terminal. Commands run as ``python -m arrowmt`` subprocesses."""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from arrowmt import Dictionary, FormatError, InvalidParameterError, Manifest, OutputExistsError, _cli, summarize
from arrowmt.testing import MANIFEST_NAME, OutputFolder, Ragged, column, special_ids_of, split_path
from tests.conftest import fairseq_fixture

ROOT = Path(__file__).resolve().parents[1]
LANGS = {"source": "de", "target": "en"}
UNK = 3
# Rows of ids: <unk> (3) twice in the source, once in the target; 2 is </s>.
ROWS = {
    "train": {"source": [[4, 3, 2], [5, 2], [3, 6, 7, 2]], "target": [[4, 2], [3, 5, 2], [6, 2]]},
    "valid": {"source": [[4, 2]], "target": [[5, 6, 2]]},
}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowmt", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *pieces: str) -> str:
    """Exit status 2, no traceback, exactly one stderr line ``arrowmt: error: ...`` holding every piece."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arrowmt: error: "), done.stderr
    for piece in pieces:
        assert piece in lines[0], lines[0]
    return lines[0]


def build(folder: Path, provenance: dict[str, object] | None = None) -> Path:
    """A small two-split arrowmt folder written by the converters' OutputFolder (with ``provenance``)."""
    d = Dictionary([*Dictionary().symbols, "a", "b", "c", "d"])
    with OutputFolder.prepare(folder, dict(LANGS), "synthetic", overwrite=False, progress=False) as out:
        names = {lang: out.add_dictionary(lang, d) for lang in LANGS.values()}
        for split, columns in ROWS.items():
            data = {
                role: column(Ragged.from_rows(rows), LANGS[role], names[LANGS[role]], d, f"test {split}")
                for role, rows in columns.items()
            }
            out.write(split, data, special_ids_of(d))
        out.manifest.provenance = provenance or {}
        out.finish()
    return folder


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return build(tmp_path / "ds", {"converter": "test", "options": {"threshold": 2}})


# ---------------------------------------------------------------- every user error: one line, exit 2


def test_info_on_a_file(tmp_path: Path) -> None:
    path = tmp_path / "hostname"
    path.write_text("box\n")
    assert_one_line_error(run("info", str(path)), str(path), "expected an arrowmt dataset folder", "arrowmt convert")


def test_missing_path_hints_at_convert(tmp_path: Path) -> None:
    for command in (["info"], ["verify"], ["export", "fairseq"]):
        extra = [str(tmp_path / "out")] if command[0] == "export" else []
        done = run(*command, str(tmp_path / "nope"), *extra)
        assert_one_line_error(done, f"{tmp_path / 'nope'} does not exist", "arrowmt convert fairseq DATA_BIN OUT")
        assert not (tmp_path / "out").exists()


def test_fairseq_data_bin_hints_at_convert_fairseq() -> None:
    data_bin = fairseq_fixture() / "mmap"
    done = run("info", str(data_bin))
    assert_one_line_error(
        done,
        "is not a converted arrowmt dataset",
        f"fairseq data-bin folder: convert it first with 'arrowmt convert fairseq {data_bin} OUT'",
    )


@pytest.mark.parametrize("case", ["folder", "deep json", "dangling link", "binary", "empty"])
def test_bad_manifest(dataset: Path, case: str) -> None:
    manifest = dataset / MANIFEST_NAME
    manifest.unlink()
    if case == "folder":
        manifest.mkdir()
    elif case == "deep json":
        manifest.write_text("[" * 100_000)
    elif case == "dangling link":
        manifest.symlink_to(dataset / "gone.json")
    elif case == "binary":
        manifest.write_bytes(b"\xff\xfe\x00garbage")
    else:
        manifest.write_bytes(b"")
    for command in ("info", "verify"):
        assert_one_line_error(run(command, str(dataset)), str(manifest))


def test_unreadable_manifest(
    dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """As if ``chmod 000`` (which root ignores): opening the manifest is refused."""
    manifest = dataset / MANIFEST_NAME
    real_open = os.open

    def refuse(path: object, *args: object, **kwargs: object) -> int:
        if Path(os.fsdecode(path)) == manifest:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    assert _cli.main(["info", str(dataset)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"arrowmt: error: {manifest}") and "Permission denied" in lines[0]


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    done = run("convert", "text", str(tmp_path / "x"), "--src-lang", "de")
    assert_one_line_error(done, "--src-lang, --tgt-lang: expected both languages (or --lang-pairs), got 'de', None")
    assert_one_line_error(run("info"), "error: info: the following arguments are required: path")
    assert_one_line_error(run("nonsense"), "invalid choice: 'nonsense'")


def test_os_error_is_one_line_and_bugs_keep_their_traceback(
    dataset: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def denied(path: object, **_kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", "/data/corpus/train.arrow")

    monkeypatch.setattr("arrowmt._info.summarize", denied)
    assert _cli.main(["info", str(dataset)]) == 2
    assert capsys.readouterr().err.splitlines()[0] == "arrowmt: error: /data/corpus/train.arrow: Permission denied"

    def bug(path: object, **_kwargs: object) -> None:
        raise TypeError("a programming error")

    monkeypatch.setattr("arrowmt._info.summarize", bug)
    with pytest.raises(TypeError, match="a programming error"):
        _cli.main(["info", str(dataset)])


def test_interrupt(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(path: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("arrowmt._info.summarize", interrupted)
    assert _cli.main(["info", "x"]) == 130
    assert capsys.readouterr().err.strip() == _cli.INTERRUPTED_MESSAGE


# ---------------------------------------------------------------- messages speak CLI


def test_existing_output_names_the_flag(dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "back"
    out.mkdir()
    (out / "theirs.txt").write_text("x")
    line = assert_one_line_error(run("export", "fairseq", str(dataset), str(out)), "pass --overwrite to replace it")
    assert "overwrite=True" not in line
    with pytest.raises(OutputExistsError, match="pass overwrite=True to replace it"):  # the API speaks Python
        from arrowmt import export_fairseq

        export_fairseq(dataset, out, progress=False)


def test_parameter_errors_name_the_flag(tmp_path: Path) -> None:
    text = tmp_path / "corpus"
    for lang in ("de", "en"):
        (tmp_path / f"corpus.{lang}").write_text("a b\n")
    done = run("convert", "text", str(tmp_path / "o"), "--src-lang", "de", "--tgt-lang", "de", "--trainpref", str(text))
    assert_one_line_error(done, "--tgt-lang: expected a language other than --src-lang, got 'de'")
    done = run("convert", "fairseq", str(fairseq_fixture() / "mmap"), str(tmp_path / "o"), "--pair", "fr-en")
    assert_one_line_error(done, "--pair: expected one of ['de-en']", "got 'fr-en'")


@pytest.mark.parametrize(
    ("message", "names_parameter", "expected"),
    [
        (
            "x: output exists; pass overwrite=True to replace it",
            False,
            "x: output exists; pass --overwrite to replace it",
        ),
        ("pair: expected one of ['de-en'], got 'x'", True, "--pair: expected one of ['de-en'], got 'x'"),
        ("pair: a path named pair: stays", False, "pair: a path named pair: stays"),
        (
            "tgt_lang: expected other than src_lang, got 'de'",
            True,
            "--tgt-lang: expected other than --src-lang, got 'de'",
        ),
        ("pass spm_model='m.model' or workers=4", False, "pass --spm-model m.model or --workers 4"),
        (
            "/data/src_lang/x.txt and src_lang.txt: not parameters",
            False,
            "/data/src_lang/x.txt and src_lang.txt: not parameters",
        ),
        ("data_bin: expected a folder", True, "data_bin: expected a folder"),
    ],
)
def test_cli_message(message: str, names_parameter: bool, expected: str) -> None:
    flags = {
        "overwrite": "--overwrite",
        "pair": "--pair",
        "src_lang": "--src-lang",
        "tgt_lang": "--tgt-lang",
        "spm_model": "--spm-model",
        "workers": "--workers",
        "data_bin": "data_bin",
    }
    assert _cli.cli_message(message, flags, names_parameter) == expected


def test_convert_text_takes_fairseq_preprocess_short_language_flags(tmp_path: Path) -> None:
    """``-s de -t en`` as fairseq-preprocess users type them; messages still name the long flags."""
    text = tmp_path / "train"
    for lang, line in (("de", "ein haus"), ("en", "a house")):
        (tmp_path / f"train.{lang}").write_text(f"{line}\n" * 3)
    done = run("convert", "text", str(tmp_path / "out"), "-s", "de", "-t", "en", "--trainpref", str(text), "--quiet")
    assert done.returncode == 0, done.stderr
    assert Manifest.load(tmp_path / "out").languages == {"source": "de", "target": "en"}
    done = run("convert", "text", str(tmp_path / "x"), "-s", "de")
    assert_one_line_error(done, "--src-lang, --tgt-lang: expected both languages (or --lang-pairs), got 'de', None")


def test_flags_come_from_the_running_command() -> None:
    parser = _cli.build_parser()
    args = parser.parse_args(["convert", "text", "out", "--src-lang", "de", "--tgt-lang", "en"])
    flags = _cli._flags(parser, args)
    assert flags["src_lang"] == "--src-lang" and flags["overwrite"] == "--overwrite" and flags["out"] == "out"
    assert "pair" not in flags  # a flag of another command
    message = _cli.cli_message(str(InvalidParameterError("workers: expected >= 1, got 0")), flags, True)
    assert message == "--workers: expected >= 1, got 0"


# ---------------------------------------------------------------- help for every option


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_option_and_command_has_help() -> None:
    parsers = list(_parsers(_cli.build_parser()))
    assert {p.prog for p in parsers} >= {"arrowmt convert text", "arrowmt info", "arrowmt export fairseq"}
    for parser in parsers:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing = [c.dest for c in action._choices_actions if not c.help]
                assert not missing, f"{parser.prog}: commands without help: {missing}"
            else:
                assert action.help and action.help != argparse.SUPPRESS, f"{parser.prog}: {action.dest} has no help"


def test_help_runs_for_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for parser in _parsers(_cli.build_parser()):
        with pytest.raises(SystemExit) as done:
            _cli.main([*parser.prog.split()[1:], "--help"])
        assert done.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {parser.prog} "), parser.prog
    assert run("convert", "text", "--help").stdout.startswith("usage: arrowmt convert text ")  # as a command too


# ---------------------------------------------------------------- info


def test_info_shows_provenance_and_unk_rate(dataset: Path) -> None:
    done = run("info", str(dataset))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{dataset}: source=de, target=en; from synthetic"
    assert "  converter: test" in lines and lines[lines.index("  options:") + 1] == "    threshold: 2"  # readable
    table = {tuple(line.split()[:2]): line.split() for line in lines if line.startswith(("train", "valid"))}
    assert table[("train", "source")][-1] == f"{100 * 2 / 9:.2f}"  # 2 <unk> of 9 tokens
    assert table[("train", "target")][-1] == f"{100 * 1 / 7:.2f}"
    assert table[("valid", "source")][-1] == "0.00"


def test_info_json_parses_and_matches_the_data(dataset: Path) -> None:
    done = run("info", "--json", str(dataset))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["path"] == str(dataset) and data["languages"] == LANGS
    assert data["provenance"] == {"converter": "test", "options": {"threshold": 2}}
    assert data["source_format"] == "synthetic" and data["dictionaries"] == Manifest.load(dataset).dictionaries
    splits = {s["split"]: s for s in data["splits"]}
    assert sorted(splits) == ["train", "valid"] and splits["train"]["rows"] == 3
    for split, columns in ROWS.items():
        for summary in splits[split]["columns"]:
            rows = columns[summary["column"]]
            flat = np.concatenate([np.array(r) for r in rows])
            assert summary["tokens"] == flat.size and summary["unk_tokens"] == int((flat == UNK).sum())
            assert summary["unk_rate"] == pytest.approx((flat == UNK).mean())
            assert summary["max"] == max(map(len, rows)) and set(summary["percentiles"]) == {"50", "90", "99"}


def test_unk_count_is_per_record_batch(tmp_path: Path) -> None:
    """Many small record batches: the vectorized count equals a plain count over every row."""
    from arrowmt.testing import ColumnData, write_split

    rng = np.random.default_rng(5)
    rows = [rng.integers(0, 12, rng.integers(0, 9)).tolist() for _ in range(500)]
    folder = tmp_path / "many"
    folder.mkdir()
    d = Dictionary([*Dictionary().symbols, *"abcdefgh"])
    d.save(folder / "dict.txt")
    data = ColumnData(Ragged.from_rows(rows), None, "dict.txt", d.sha256(), len(d), "test")
    meta = write_split(split_path(folder, "train"), "train", {"tokens": data}, rows_per_batch=7)
    from arrowmt import FileEntry

    manifest = Manifest(languages={"tokens": None}, dictionaries={"": "dict.txt"}, source_format="test")
    manifest.files["train"] = FileEntry.of(split_path(folder, "train"), meta.rows)
    manifest.save(folder)
    (summary,) = summarize(folder, progress=False)
    assert summary.columns[0].unk_tokens == sum(r.count(UNK) for r in rows)


def test_summarize_reads_the_manifest_once(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One manifest read for every split (it once was read again per split)."""
    from arrowmt.format import _manifest

    splits = Manifest.load(dataset).splits()
    reads: list[Path] = []
    original = _manifest.read_json
    monkeypatch.setattr(_manifest, "read_json", lambda path, *args: reads.append(path) or original(path, *args))
    assert [s.split for s in summarize(dataset, progress=False)] == splits and len(splits) >= 2
    assert reads == [dataset / MANIFEST_NAME]


# ---------------------------------------------------------------- verify


def test_verify_ok_and_corrupt(dataset: Path) -> None:
    done = run("verify", str(dataset))
    assert done.returncode == 0 and done.stdout.strip() == f"{dataset}: OK (2 files, 4 rows, 21 tokens)", done
    with open(split_path(dataset, "train"), "r+b") as handle:
        handle.seek(-24, os.SEEK_END)
        handle.write(b"\x7f\x7f\x7f\x7f")
    done = run("verify", str(dataset))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert all(line.startswith("arrowmt: verify: ") for line in done.stderr.strip().splitlines())
    assert "SHA-256 differs" in done.stderr


# ---------------------------------------------------------------- progress bars on a terminal


def run_on_terminal(*args: str) -> tuple[int, str]:
    """Run ``python -m arrowmt ARGS`` with stdout and stderr on a pseudo-terminal; its exit status and output."""
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # tqdm draws nothing at 0 columns
    proc = subprocess.Popen(
        [sys.executable, "-m", "arrowmt", *args], stdout=child_fd, stderr=child_fd, cwd=ROOT, close_fds=True
    )
    os.close(child_fd)
    chunks = []
    while True:
        ready, _, _ = select.select([main_fd], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pseudo-terminal behaviour checked on Linux")
@pytest.mark.parametrize(("command", "bar"), [("verify", "verify: "), ("info", "info: ")])
def test_progress_bars_show_on_a_terminal_only(dataset: Path, command: str, bar: str) -> None:
    status, output = run_on_terminal(command, str(dataset))
    assert status == 0 and bar in output and "\r" in output, output
    status, output = run_on_terminal(command, str(dataset), "--quiet")
    assert status == 0 and bar not in output, output
    done = run(command, str(dataset))  # not a terminal: no bar either
    assert bar not in done.stderr


def test_convert_output_is_left_alone_by_info(dataset: Path) -> None:
    """info and verify only read: the folder is byte for byte the same afterwards."""
    before = {p.name: p.read_bytes() for p in dataset.iterdir()}
    assert run("info", "--json", str(dataset)).returncode == 0
    assert run("verify", str(dataset)).returncode == 0
    assert {p.name: p.read_bytes() for p in dataset.iterdir()} == before
    shutil.rmtree(dataset)


# ---------------------------------------------------------------- first contact (issue 19)


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["nonsense"], "arrowmt: error: argument COMMAND: invalid choice: 'nonsense'"),
        (["info"], "arrowmt: error: info: the following arguments are required: path"),
        (["convert", "nope"], "arrowmt: error: convert: argument SOURCE: invalid choice: 'nope'"),
    ],
)
def test_usage_errors_name_the_program_once(args: list[str], start: str) -> None:
    """A mistyped command printed 'arrowmt: error: arrowmt: ...'."""
    line = assert_one_line_error(run(*args))
    assert line.startswith(start) and line.count("arrowmt") == 2, line  # the prefix and the --help hint


def test_filter_without_a_criterion_is_refused(dataset: Path, tmp_path: Path) -> None:
    """It wrote a view of every row, silently."""
    out = tmp_path / "all.view"
    done = run("filter", str(dataset), str(out))
    assert_one_line_error(done, "expected at least one of --max-len, --min-len, --max-len-ratio, --dedup, --rows")
    assert not out.exists()
    assert run("filter", str(dataset), str(out), "--dedup", "--quiet").returncode == 0 and out.is_file()


def test_opening_a_data_bin_says_to_convert_it_first() -> None:
    """The API names the fix the CLI names."""
    import arrowmt

    data_bin = fairseq_fixture() / "mmap"
    with pytest.raises(FormatError, match=r"fairseq data-bin folder: convert it first with 'arrowmt convert fairseq "):
        arrowmt.open_dataset(data_bin, "train")


def test_info_shows_nested_and_long_provenance_readably() -> None:
    from arrowmt.testing import _readable

    value = {"plan": {"seed": 1, "max_tokens": 4096}, "rows": list(range(400)), "note": "x"}
    assert _readable("order", value, "  ") == [
        "  order:",
        "    note: x",
        "    plan:",
        "      max_tokens: 4096",
        "      seed: 1",
        "    rows: [400 items: 0, ..., 399]",
    ]
    long = "x" * 200  # one item too long to show whole: shown as it is, not as "1 items"
    [line] = _readable("inputs", [long], "")
    assert line.startswith("inputs: [xxx") and "items" not in line


def test_info_json_into_a_closed_pipe_is_quiet(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``arrowmt info --json | head -1``: the reader left; no 'Broken pipe' error, the status of a tool SIGPIPE ends."""
    read, write = os.pipe()
    os.close(read)
    with open(write, "w", buffering=1) as closed, contextlib.redirect_stdout(closed):
        status = _cli.main(["info", "--json", str(dataset)])
    assert status == _cli.EXIT_BROKEN_PIPE and capsys.readouterr().err == ""


def test_demo_takes_quiet_and_describes_itself() -> None:
    done = run("demo", "--help")
    assert done.returncode == 0 and "Convert the real Multi30k de-en sample" in done.stdout and "--quiet" in done.stdout
