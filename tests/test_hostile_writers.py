"""Hostile corpora, racing writers, killed publishes (issue 20: items 1-4, 8-10).

* names read from split metadata and view descriptions are plain file names, or refused;
* ``demo --out`` follows the conversion rules (no silent overwrite);
* writers of one output folder exclude each other, publishing re-checks the folder, and
  ``--overwrite`` leaves other live writers' temporaries alone;
* dictionaries are checked against the hash every split file recorded, so no reader
  decodes rows with another corpus's dictionary (a killed publish, a concurrent one);
* hostile input to the CLI and the API ends in one ``ArrowMTError`` (CLI: one line, exit 2);
* killed writers' temporary files are removed by the next write beside them.

Corpora are converted from the bundled Multi30k sample (val and test: different words).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from arrowmt import (
    ArrowMTError,
    Dictionary,
    FileEntry,
    FormatError,
    InputDataError,
    InvalidParameterError,
    Manifest,
    OutputExistsError,
    OutputWriteError,
    VocabularyError,
    _cli,
    build_view,
    convert_text,
    export_parquet,
    open_split,
    open_view,
    summarize,
    verify_dataset,
)
from arrowmt.testing import (
    COMPLETED_NOTE,
    LOCK_SUFFIX,
    METADATA_KEY,
    SOURCE,
    TARGET,
    TEMP_PREFIX,
    OutputFolder,
    OutputLock,
    Ragged,
    StagedOutput,
    check_weights,
    column,
    deferred_signals,
    file_digest,
    lock_path,
    special_ids_of,
    split_path,
    text_symbols_digest,
)
from tests.conftest import MULTI30K, ROOT, gz_lines

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def convert(out: Path, prefix: str = "val", overwrite: bool = False) -> Path:
    """The Multi30k sample's ``prefix`` (val, test or train) as split ``train`` of a de-en folder at ``out``."""
    convert_text(str(MULTI30K / prefix), out, src_lang="de", tgt_lang="en", overwrite=overwrite, progress=False)
    return out


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arrowmt", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=ENV
    )


def one_line_error(done: subprocess.CompletedProcess[str] | tuple[int, str], *pieces: str) -> str:
    """Exit status 2 and exactly one stderr line ``arrowmt: error: ...`` holding every piece (no traceback)."""
    code, err = (done.returncode, done.stderr) if isinstance(done, subprocess.CompletedProcess) else done
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arrowmt: error: "), err
    for piece in pieces:
        assert piece in lines[0], lines[0]
    return lines[0]


def main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The CLI in this process: (exit status, stderr)."""
    code = _cli.main(list(args))
    return code, capsys.readouterr().err


def rewrite_metadata(folder: Path, split: str, change: dict[str, object]) -> None:
    """Set ``columns.source.<key>`` of ``split``'s metadata and record the new file in the manifest (a
    consistent hostile folder: size and SHA-256 match, so only the name check can refuse it)."""
    path = split_path(folder, split)
    reader = ipc.open_stream(path.read_bytes())
    batches = list(reader)
    meta = json.loads(reader.schema.metadata[METADATA_KEY])
    meta["columns"][SOURCE].update(change)
    schema = reader.schema.with_metadata({**reader.schema.metadata, METADATA_KEY: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    path.write_bytes(sink.getvalue().to_pybytes())
    manifest = Manifest.load(folder)
    manifest.files[split] = FileEntry.of(path, manifest.files[split].rows)
    manifest.save(folder)


def everything_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def corpus_a(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(tmp_path_factory.mktemp("a") / "corpus", "val")


@pytest.fixture(scope="module")
def corpus_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert(tmp_path_factory.mktemp("b") / "corpus", "test")


def copy_corpus(corpus: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for path in corpus.iterdir():
        if path.is_file():
            (dest / path.name).write_bytes(path.read_bytes())
    return dest


# ---------------------------------------------------------------- 1. names from split metadata and views


@pytest.mark.parametrize(
    ("key", "value"), [("lang", "../../../ESCAPED"), ("lang", "a/b"), ("lang", ".hidden"), ("dictionary", "../x.txt")]
)
def test_split_metadata_names_are_plain(corpus_a: Path, tmp_path: Path, key: str, value: str) -> None:
    folder = copy_corpus(corpus_a, tmp_path / "hostile")
    rewrite_metadata(folder, "train", {key: value})
    with pytest.raises(FormatError, match=rf"metadata 'columns.source.{key}': expected a plain file name"):
        open_split(folder)
    report = verify_dataset(folder, progress=False)
    assert not report.ok and any("expected a plain file name" in problem for problem in report.problems)


def test_export_fairseq_never_writes_outside_out(corpus_a: Path, tmp_path: Path) -> None:
    folder = copy_corpus(corpus_a, tmp_path / "hostile")
    rewrite_metadata(folder, "train", {"lang": "../../../ESCAPED"})
    work = tmp_path / "x" / "y" / "z"
    work.mkdir(parents=True)
    before = everything_under(tmp_path)
    verified = run_cli("verify", str(folder), "--quiet")
    assert verified.returncode == 2 and "columns.source.lang" in verified.stderr and "OK" not in verified.stdout
    one_line_error(run_cli("export", "fairseq", str(folder), "a/b/out", "--quiet", cwd=work), "plain file name")
    assert everything_under(tmp_path) == before


def hostile_view(corpus: Path, out: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A view file over ``corpus`` whose description is ``text`` (written by the real writer)."""
    real = json.dumps
    with monkeypatch.context() as patch:
        patch.setattr(json, "dumps", lambda obj, **kwargs: text if isinstance(obj, dict) else real(obj, **kwargs))
        build_view(corpus, out)
    return out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"split": "../train"}', "'split': expected a plain file name"),
        ('{"split": "a/b"}', "'split': expected a plain file name"),
        ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ],
    ids=["dotdot", "slash", "nested"],
)
def test_view_description_names_and_nesting(
    corpus_a: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    view = hostile_view(corpus_a, tmp_path / "bad.view", text, monkeypatch)
    with pytest.raises(FormatError, match=message):
        open_view(view, corpus_a)


# ---------------------------------------------------------------- 2. demo --out


def test_demo_refuses_a_dataset_without_overwrite(corpus_a: Path, tmp_path: Path) -> None:
    out = copy_corpus(corpus_a, tmp_path / "mine")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    one_line_error(run_cli("demo", "--out", str(out)), "not empty", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---------------------------------------------------------------- 3. racing writers

# Stages a conversion of the sample into argv[1], says "staged", waits for a line on stdin, publishes.
STAGED_WRITER = """
import sys
from arrowmt.converters._output import OutputFolder
from arrowmt import TextConversion, convert_with_options
real_finish = OutputFolder.finish
def finish_later(self):
    print("staged", flush=True)
    sys.stdin.readline()
    return real_finish(self)
OutputFolder.finish = finish_later
options = TextConversion(src_lang="de", tgt_lang="en", prefixes={"train": sys.argv[2]})
try:
    convert_with_options(options, sys.argv[1], overwrite=sys.argv[3] == "overwrite", progress=False)
except Exception as exc:
    print(f"failed: {type(exc).__name__}: {exc}", flush=True)
    sys.exit(2)
print("published", flush=True)
"""


def start_writer(out: Path, prefix: str, mode: str = "new") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", STAGED_WRITER, str(out), str(MULTI30K / prefix), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


@pytest.mark.parametrize("mode", ["new", "overwrite"])
def test_second_writer_of_one_folder_fails_and_changes_nothing(tmp_path: Path, mode: str) -> None:
    out = tmp_path / "out"
    first = start_writer(out, "val", mode)
    assert first.stdout is not None and first.stdout.readline().strip() == "staged"
    second = start_writer(out, "test", mode)
    out_b, err_b = second.communicate(timeout=120)
    assert second.returncode == 2, (out_b, err_b)
    assert "OutputWriteError" in out_b and f"pid {first.pid}" in out_b and "nothing was changed" in out_b
    assert not out.exists()  # the loser published nothing; the winner has not published yet
    out_a, err_a = first.communicate("go\n", timeout=120)
    assert first.returncode == 0 and "published" in out_a, (out_a, err_a)
    assert verify_dataset(out, progress=False).ok
    assert len(open_split(out)) == 1014  # the first writer's (val) rows, not test's 1000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no lock file, no staging folder left


def test_lock_is_refused_while_held_and_free_after(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lock = OutputLock.acquire(out)
    try:
        with pytest.raises(OutputWriteError, match=rf"another arrowmt process \(pid {os.getpid()}\)"):
            convert(out)
        one_line_error(
            run_cli("convert", "text", str(out), "--src-lang", "de", "--tgt-lang", "en", "--trainpref",
                    str(MULTI30K / "val"), "--quiet"),
            "another arrowmt process", "is writing this output folder",
        )  # fmt: skip
    finally:
        lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    convert(out)
    assert not lock_path(out).exists()


def test_publish_refuses_a_folder_written_meanwhile(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    staged = StagedOutput.begin(out, overwrite=False)
    (staged.path / "a.arrow").write_bytes(b"mine")
    (out / "theirs.arrow").write_bytes(b"another program")
    with pytest.raises(OutputExistsError, match=r"another program wrote theirs\.arrow there"), staged:
        staged.publish(["a.arrow"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert sorted(p.name for p in out.iterdir()) == ["theirs.arrow"]


def test_overwrite_publish_refuses_a_manifest_replaced_meanwhile(corpus_a: Path, tmp_path: Path) -> None:
    out = copy_corpus(corpus_a, tmp_path / "out")
    folder = OutputFolder.prepare(out, {SOURCE: "de", TARGET: "en"}, "text", overwrite=True, progress=False)
    manifest = (out / "arrowmt.json").read_bytes()
    (out / "theirs.json").write_bytes(manifest.replace(b'"text"', b'"TEXT"'))
    os.replace(out / "theirs.json", out / "arrowmt.json")  # another (unlocked) writer publishes meanwhile
    with pytest.raises(OutputWriteError, match=r"another program wrote arrowmt.json"), folder:
        folder.finish()
    assert b'"TEXT"' in (out / "arrowmt.json").read_bytes()  # theirs, untouched


def sleeping_process() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_overwrite_keeps_live_writers_temporaries(corpus_a: Path, tmp_path: Path) -> None:
    out = copy_corpus(corpus_a, tmp_path / "out")
    live = sleeping_process()
    try:
        theirs = out / f"{TEMP_PREFIX}{live.pid}-view.part"  # e.g. a filter writing a view into the corpus
        stale = out / f"{TEMP_PREFIX}{dead_pid()}-view.part"
        for path in (theirs, stale):
            path.write_bytes(b"partial")
        convert(out, "test", overwrite=True)
        assert theirs.read_bytes() == b"partial"
        assert not stale.exists()
    finally:
        live.kill()
        live.wait()


# ---------------------------------------------------------------- 4. dictionaries against the recorded hash


def test_a_replaced_dictionary_is_refused_by_every_reader(corpus_a: Path, corpus_b: Path, tmp_path: Path) -> None:
    folder = copy_corpus(corpus_a, tmp_path / "mixed")
    (folder / "dict.de.txt").write_bytes((corpus_b / "dict.de.txt").read_bytes())
    with pytest.raises(VocabularyError, match=r"dict.de.txt: expected the dictionary .* was encoded with"):
        open_split(folder)
    with pytest.raises(VocabularyError):
        summarize(folder, progress=False)
    with pytest.raises(VocabularyError):
        export_parquet(folder, tmp_path / "pq", text=True, progress=False)
    assert not (tmp_path / "pq").exists()
    assert not verify_dataset(folder, progress=False).ok
    one_line_error(run_cli("info", str(folder), "--quiet"), "dict.de.txt", "was encoded with")


def test_split_dictionary_is_checked_when_loaded(corpus_a: Path, corpus_b: Path, tmp_path: Path) -> None:
    folder = copy_corpus(corpus_a, tmp_path / "c")
    split = open_split(folder)
    assert split.dictionary(SOURCE) == Dictionary.load(folder / "dict.de.txt")
    (folder / "dict.en.txt").write_bytes((corpus_b / "dict.en.txt").read_bytes())  # replaced after opening
    with pytest.raises(VocabularyError, match=r"dict\.en\.txt"):
        split.dictionary(TARGET)
    with pytest.raises(InvalidParameterError, match="column"):
        split.dictionary("nope")


# Converts argv[2] over the folder argv[1] (which holds another corpus) and is SIGKILLed right after
# the renames of the dictionaries, before any split file or the manifest is renamed.
KILLED_PUBLISH = """
import os, signal, sys
real = os.replace
def replace(src, dst):
    published = os.path.dirname(os.fspath(dst)) == sys.argv[1]  # a rename into OUT, not inside staging
    if published and not os.path.basename(dst).startswith("dict."):
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
os.replace = replace
from arrowmt.converters._parallel_text import convert_text
convert_text(sys.argv[2], sys.argv[1], src_lang="de", tgt_lang="en", overwrite=True, progress=False)
"""


def test_sigkill_after_the_dictionary_renames(corpus_a: Path, tmp_path: Path) -> None:
    out = copy_corpus(corpus_a, tmp_path / "out")
    done = subprocess.run([sys.executable, "-c", KILLED_PUBLISH, str(out), str(MULTI30K / "test")], env=ENV)
    assert done.returncode == -signal.SIGKILL
    assert (out / "dict.de.txt").read_bytes() != (corpus_a / "dict.de.txt").read_bytes()  # new dictionaries, old rows
    one_line_error(run_cli("info", str(out), "--quiet"), "was encoded with", "convert again")
    one_line_error(run_cli("export", "parquet", str(out), str(tmp_path / "pq"), "--text", "--quiet"))
    assert not (tmp_path / "pq").exists()
    convert(out, "test", overwrite=True)  # the next conversion repairs it
    assert verify_dataset(out, progress=False).ok


# Converts the two corpora over argv[1] in turn, argv[2] times, each rename slowed down (wide windows).
ALTERNATING_WRITER = """
import os, sys, time
real = os.replace
def slow(src, dst):
    real(src, dst)
    time.sleep(0.003)
os.replace = slow
from arrowmt.converters._parallel_text import convert_text
for k in range(int(sys.argv[2])):
    prefix = sys.argv[3 + k % 2]
    convert_text(prefix, sys.argv[1], src_lang="de", tgt_lang="en", overwrite=True, progress=False)
"""


def first_lines(prefix: str) -> tuple[str, ...]:
    """The first (de, en) line of the sample's ``prefix`` as the converter tokenizes it (split on spaces)."""
    return tuple(" ".join(gz_lines(MULTI30K / f"{prefix}.{lang}.gz")[0].split()) for lang in ("de", "en"))


def test_no_reader_mixes_rows_and_dictionaries_during_overwrites(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    prefixes = []
    for name in ("val", "test"):  # 200 lines each: quick conversions, many publishes
        for lang in ("de", "en"):
            (small / f"{name}.{lang}").write_text("\n".join(gz_lines(MULTI30K / f"{name}.{lang}.gz")[:200]) + "\n")
        prefixes.append(str(small / name))
    expected = {first_lines(name) for name in ("val", "test")}
    out = convert(tmp_path / "out", str(small / "val"))
    writer = subprocess.Popen([sys.executable, "-c", ALTERNATING_WRITER, str(out), "16", *prefixes], env=ENV)
    seen, refused, mixed = 0, 0, []
    try:
        while writer.poll() is None:
            try:
                split = open_split(out)
                rows = tuple(
                    split.dictionary(c).decode(split.row_array(c, 0)[:-1]) for c in (SOURCE, TARGET)
                )  # </s> left out
            except VocabularyError:
                refused += 1  # a dictionary replaced after the split was opened: refused, never mixed
                continue
            seen += 1
            if rows not in expected:
                mixed.append(rows)
    finally:
        writer.wait(timeout=300)
    assert writer.returncode == 0
    assert seen > 20 and not mixed, (seen, refused, mixed[:3])


def test_fairseq_plugin_refuses_a_dictionary_of_the_same_size(corpus_a: Path) -> None:
    pytest.importorskip("fairseq")
    from fairseq.data import Dictionary as FairseqDictionary

    from arrowmt import open_dataset
    from arrowmt.testing import _check_dictionary

    dataset = open_dataset(corpus_a)
    same = FairseqDictionary.load(str(corpus_a / "dict.de.txt"))
    _check_dictionary(dataset, SOURCE, same)
    other = FairseqDictionary.load(str(corpus_a / "dict.de.txt"))
    other.symbols[10], other.symbols[11] = other.symbols[11], other.symbols[10]  # same size, other ids
    with pytest.raises(VocabularyError, match="the task's dictionary"):
        _check_dictionary(dataset, SOURCE, other)


# ---------------------------------------------------------------- 8. one line, exit 2


ROW_FILES = {
    "word": b"abc",
    "fraction": b"1.5",
    "twenty-digits": b"12345678901234567890",
    "binary": bytes(range(128, 256)),
    "negative": b"-1",
    "out-of-range": b"99999999",
}


@pytest.mark.parametrize("content", list(ROW_FILES.values()), ids=list(ROW_FILES))
def test_filter_rows_text_files(
    corpus_a: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    rows = tmp_path / "rows.txt"
    rows.write_bytes(content)
    one_line_error(main(capsys, "filter", str(corpus_a), str(tmp_path / "v.view"), "--rows", str(rows)), "--rows")
    assert not (tmp_path / "v.view").exists()


def test_filter_rows_npy_files(corpus_a: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objects, truncated, floats = tmp_path / "o.npy", tmp_path / "t.npy", tmp_path / "f.npy"
    np.save(objects, np.array([1, "a"], dtype=object), allow_pickle=True)
    np.save(truncated, np.arange(100))
    truncated.write_bytes(truncated.read_bytes()[:100])
    np.save(floats, np.arange(3.0))
    for path in (objects, truncated, floats):
        one_line_error(main(capsys, "filter", str(corpus_a), str(tmp_path / "v.view"), "--rows", str(path)), "--rows")


def test_dask_scheduler_that_is_not_an_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed")
    args = ["convert", "text", str(tmp_path / "o"), "--src-lang", "de", "--tgt-lang", "en"]
    args += ["--trainpref", str(MULTI30K / "val"), "--dask-scheduler", "notaurl", "--quiet"]
    one_line_error(main(capsys, *args), "--dask-scheduler", "notaurl")


def test_huge_numbers_are_parameter_errors(corpus_a: Path, tmp_path: Path) -> None:
    dataset = open_split(corpus_a)
    with pytest.raises(IndexError, match="row numbers"):
        dataset.row_array(SOURCE, 10**30)
    with pytest.raises(InvalidParameterError, match="ids"):
        Dictionary().decode([10**30])
    with pytest.raises(InvalidParameterError, match="padding_factor"):
        Dictionary.build(padding_factor=10**30)
    for option in ("workers", "chunk_bytes", "thresholdsrc", "nwordstgt"):
        with pytest.raises(InvalidParameterError, match=option):
            convert_text(
                str(MULTI30K / "val"), tmp_path / "o", src_lang="de", tgt_lang="en", progress=False, **{option: 10**30}
            )
    assert not (tmp_path / "o").exists()


def test_weights_whose_sum_overflows() -> None:
    with pytest.raises(InvalidParameterError, match="finite sum"):
        check_weights([1e308, 1e308], np.array([5, 5]))
    assert check_weights([1e307, 1e307], np.array([5, 5])).tolist() == [1e307, 1e307]


def big_text(folder: Path, lines: int = 200_000) -> str:
    rng = np.random.default_rng(0)
    words = np.array([f"w{k}" for k in range(5000)])
    for lang in ("de", "en"):
        picks = words[rng.integers(0, 5000, (lines, 8))]
        (folder / f"big.{lang}").write_text("\n".join(" ".join(row) for row in picks) + "\n")
    return str(folder / "big")


def test_ctrl_c_with_workers_is_one_line(tmp_path: Path) -> None:
    prefix = big_text(tmp_path)
    out = tmp_path / "out"
    args = ["convert", "text", str(out), "--src-lang", "de", "--tgt-lang", "en", "--trainpref", prefix]
    proc = subprocess.Popen(
        [sys.executable, "-m", "arrowmt", *args, "--workers", "2", "--chunk-size", "64K", "--quiet"],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.arrowmt-staging-*/*spill*")) and time.monotonic() < deadline:
        time.sleep(0.02)  # the workers are busy tokenizing
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip() == _cli.INTERRUPTED_MESSAGE, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.de", "big.en"]


# ---------------------------------------------------------------- 9. stale temporaries beside a view


def test_build_view_removes_killed_writers_temporaries(corpus_a: Path, tmp_path: Path) -> None:
    views = tmp_path / "views"
    views.mkdir()
    live = sleeping_process()
    try:
        stale = views / f"{TEMP_PREFIX}{dead_pid()}-abc.part"
        legacy = views / f"{TEMP_PREFIX}abc123.part"  # an older version's (no pid)
        theirs = views / f"{TEMP_PREFIX}{live.pid}-def.part"
        for path in (stale, legacy, theirs):
            path.write_bytes(b"partial")
        build_view(corpus_a, views / "all.view")
        assert sorted(p.name for p in views.iterdir()) == sorted(["all.view", theirs.name])
    finally:
        live.kill()
        live.wait()


SIGKILLED_FILTER = """
import os, signal, sys
from arrowmt.files import _atomic
real = _atomic._fsync_file
def killed(path):
    os.kill(os.getpid(), signal.SIGKILL)
_atomic._fsync_file = killed
from arrowmt.views._view import build_view
build_view(sys.argv[1], sys.argv[2])
"""


def test_a_sigkilled_filters_temporary_is_removed_by_the_next(corpus_a: Path, tmp_path: Path) -> None:
    view = tmp_path / "clean.view"
    done = subprocess.run([sys.executable, "-c", SIGKILLED_FILTER, str(corpus_a), str(view)], env=ENV)
    assert done.returncode == -signal.SIGKILL
    assert [p.name.startswith(TEMP_PREFIX) for p in tmp_path.iterdir()] == [True]
    assert run_cli("filter", str(corpus_a), str(view), "--max-len", "1000").returncode == 0
    assert [p.name for p in tmp_path.iterdir()] == ["clean.view"]


# ---------------------------------------------------------------- 10. smaller ones


def test_disk_full_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = pa.OSFile

    def full(path: str, mode: str = "r") -> pa.NativeFile:
        return real("/dev/full", mode) if mode == "wb" else real(path, mode)

    monkeypatch.setattr(pa, "OSFile", full)
    with pytest.raises(OutputWriteError, match=r"\.arrowmt-tmp-\d+-spill-\d+\.arrow: .*No space left on device"):
        convert(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("prefixes", [",", "a,", ",b", "a,,b"])
def test_empty_prefixes_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], prefixes: str) -> None:
    args = ["convert", "text", str(tmp_path / "o"), "--src-lang", "de", "--tgt-lang", "en", "--trainpref", prefixes]
    one_line_error(main(capsys, *args), "--trainpref", "empty")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("row", "found"), [([], "is empty"), ([5, 6], "ends with id 6")])
def test_convert_table_rows_end_with_eos(corpus_a: Path, tmp_path: Path, row: list[int], found: str) -> None:
    from arrowmt import convert_table

    table = pa.table({SOURCE: [[4, 2], row], TARGET: [[4, 2], [5, 2]]})
    with pytest.raises(InputDataError, match=rf"column 'source': row 1 {found}, expected ids ending with </s>"):
        convert_table(table, tmp_path / "t", like=corpus_a, progress=False)
    assert not (tmp_path / "t").exists()


def test_verify_reports_rows_without_eos_in_table_conversions(tmp_path: Path) -> None:
    d = Dictionary([*Dictionary().symbols, "a", "b"])
    with OutputFolder.prepare(tmp_path / "t", {"tokens": None}, "table", overwrite=False, progress=False) as out:
        name = out.add_dictionary(None, d)
        out.write("train", {"tokens": column(Ragged.from_rows([[4, 2], [5]]), None, name, d, "t")}, special_ids_of(d))
        out.finish()
    report = verify_dataset(tmp_path / "t", progress=False)
    assert any("row 1 (tokens): ends with id 5, expected ids ending with </s>" in p for p in report.problems)


def test_a_signal_held_until_publishing_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = os.replace
    sent: list[bool] = []

    def terminated_while_publishing(src: str, dst: str) -> None:
        if not sent and os.path.dirname(os.fspath(dst)) == str(out):  # the first rename into OUT
            sent.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
        real(src, dst)

    out = tmp_path / "out"
    out.mkdir()  # an existing folder: one rename per file
    monkeypatch.setattr(os, "replace", terminated_while_publishing)
    args = ["convert", "text", str(out), "--src-lang", "de", "--tgt-lang", "en", "--trainpref", str(MULTI30K / "val")]
    code, err = main(capsys, *args, "--quiet")
    assert code == _cli.EXIT_TERMINATED
    assert (
        err.strip()
        == "arrowmt: terminated after the new output was published in full (the signal came while publishing)"
    )
    assert verify_dataset(out, progress=False).ok


def test_a_signal_during_a_failed_block_notes_nothing() -> None:
    with pytest.raises(KeyboardInterrupt) as caught, deferred_signals():
        os.kill(os.getpid(), signal.SIGINT)
        raise ArrowMTError("publishing failed")
    assert COMPLETED_NOTE not in getattr(caught.value, "__notes__", ())
    with pytest.raises(KeyboardInterrupt) as caught, deferred_signals():
        os.kill(os.getpid(), signal.SIGINT)
    assert COMPLETED_NOTE in caught.value.__notes__


def test_lock_inside_the_folder_is_not_content(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_SUFFIX).write_bytes(b"")  # a lock file left inside OUT (parent not writable)
    convert(out)  # an "empty" folder: the lock file does not count
    assert verify_dataset(out, progress=False).ok


@pytest.mark.parametrize(
    "text",
    [b"", b"a 1\n", b"a 1", b" 5\n", b"a b 3\nc 4\n", "\u00e9t\u00e9 2\nx 0\n".encode(), b"a 1\r\n", b"a -1\n",
     b"a 1\nb 2 #fairseq:overwrite\n", b"a 1 \n"],
)  # fmt: skip
def test_dictionary_digest_from_bytes_equals_the_loaded_one(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "dict.txt"
    path.write_bytes(text)
    dictionary = Dictionary.load(path)
    fast = text_symbols_digest(text)
    assert fast is None or fast == (len(dictionary), dictionary.sha256())  # None: loaded in full instead
    assert file_digest(path) == (len(dictionary), dictionary.sha256())


def private_mb_to_open(corpus: Path) -> float:
    """Private memory (RssAnon, MiB) that opening ``corpus``'s split train adds to a fresh process."""
    script = (
        "import arrowmt._demo as d, arrowmt.splits._split as s\n"
        "before = d.private_mb()\n"
        f"s.open_split({str(corpus)!r})\n"
        "print(d.private_mb() - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=ENV, check=True)
    return float(done.stdout)


def test_opening_a_split_adds_no_private_memory(corpus_a: Path) -> None:
    """The dictionary check on open must not pull pyarrow's compute kernels (about 25 MB per process) into
    every training rank: the corpus is opened in a fresh process and its private memory measured."""
    assert private_mb_to_open(corpus_a) < 8.0


def test_a_large_dictionary_leaves_no_private_memory(tmp_path: Path) -> None:
    """The digest of a dictionary of ~20k symbols (the sample's train) works through a few MiB of numpy temporaries;
    they are returned to the system, not kept by every rank (4.0 MiB were before)."""
    assert private_mb_to_open(convert(tmp_path / "corpus", "train")) < 2.0
