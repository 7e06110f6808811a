"""Hostile split files: every malformed input gives a clear ArrowMTError, never a crash or wrong tokens.

pyarrow does not validate list offsets when it reads a stream, so a corrupt file can
read out of bounds or die of SIGBUS. Every read of a possibly corrupt file here runs in
a separate worker process (:class:`ReadWorker`): a crash fails the test instead of
killing pytest. The contract checked for every file (:func:`assert_consistent`):
opening it and reading every row and every length either raises ``ArrowMTError`` /
``IndexError`` naming the file, or returns exactly the rows pyarrow reads from a
stream whose every batch passes ``validate(full=True)``.

The end of the module covers files changed under a live memory map (``FileStamp``,
``check_unchanged``, unpickling), documented in ``docs/reliability.md``.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from arrowmt import (
    ArrowMTDataset,
    Dictionary,
    FileEntry,
    FormatError,
    Manifest,
    TokenBatchSampler,
    open_blocks,
    open_mixture,
    verify_dataset,
)
from arrowmt.reading import _reader as reader_module
from arrowmt.testing import (
    MANIFEST_NAME,
    METADATA_KEY,
    OFFSETS_CRC_KEY,
    OFFSETS_PIECES_BINARY_KEY,
    OFFSETS_PIECES_KEY,
    PIECE_ROWS,
    SPECIALS,
    ColumnData,
    OutputFolder,
    Ragged,
    SplitFile,
    ensure_offsets_checked,
    offsets_crc,
    special_ids_of,
    split_path,
    write_split,
)
from tests.builders import lengths_dataset

ROOT = Path(__file__).resolve().parents[1]
ROWS = 30
RPB = 8  # batches of 8, 8, 8, 6 rows
VOCAB = 50
LANGS = {"source": "de", "target": "en"}
SPLIT = "train"

# ---------------------------------------------------------------- the worker process

WORKER = r"""
import json, sys, traceback
import pyarrow as pa
import pyarrow.ipc as ipc
from arrowmt._errors import ArrowMTError
from arrowmt.reading._reader import SplitFile
from arrowmt.views._verify import verify_dataset

def read_arrowmt(path):
    try:
        split = SplitFile(path)
        out = {"status": "ok", "rows": {}, "lengths": {}}
        for column in split.columns:
            out["lengths"][column] = split.lengths(column).tolist()
            out["rows"][column] = [split.row(column, i).tolist() for i in range(len(split))]
        return out
    except (ArrowMTError, IndexError) as exc:
        return {"status": "error", "type": type(exc).__name__, "message": str(exc)}
    except BaseException:
        return {"status": "unexpected", "message": traceback.format_exc()}

def read_pyarrow(path):
    try:
        with pa.memory_map(path) as source:
            reader = ipc.open_stream(source)
            batches = list(reader)
            for batch in batches:
                batch.validate(full=True)
            names = reader.schema.names
            rows = {n: [r for b in batches for r in b.column(n).to_pylist()] for n in names}
        return {"valid": True, "rows": rows}
    except Exception as exc:
        return {"valid": False, "message": f"{type(exc).__name__}: {exc}"}

def run_verify(folder):
    try:
        return {"status": "ok", "problems": verify_dataset(folder).problems}
    except ArrowMTError as exc:
        return {"status": "error", "message": str(exc)}
    except BaseException:
        return {"status": "unexpected", "message": traceback.format_exc()}

def say(**fields):
    print(json.dumps(fields), flush=True)

for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "read":
        say(phase="arrowmt")
        mine = read_arrowmt(request["path"])
        say(phase="pyarrow")
        say(phase="done", arrowmt=mine, pyarrow=read_pyarrow(request["path"]))
    else:
        say(phase="verify")
        say(phase="done", verify=run_verify(request["path"]))
"""


class ReadWorker:
    """A long-lived Python process that reads possibly corrupt files on request.

    A request answers a dict; if the process dies (segfault, SIGBUS) the answer is
    ``{"crashed": ...}`` naming the signal and the phase it died in, and the next
    request starts a fresh process.
    """

    def __init__(self) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        return subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def read(self, path: Path) -> dict[str, Any]:
        """Open ``path`` with SplitFile, read every row and length; read it with pyarrow too."""
        return self._request({"op": "read", "path": str(path)})

    def verify(self, folder: Path) -> dict[str, Any]:
        """Run ``verify_dataset`` on ``folder``."""
        return self._request({"op": "verify", "path": str(folder)})["verify"]

    def _request(self, request: dict[str, str]) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        phase = "start"
        while line := self._proc.stdout.readline():
            answer = json.loads(line)
            phase = answer.pop("phase")
            if phase == "done":
                return answer
        return self._crash_report(request, phase)

    def _crash_report(self, request: dict[str, str], phase: str) -> dict[str, Any]:
        assert self._proc is not None
        code = self._proc.wait()
        self._stop(self._proc)
        self._proc = None
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace")[-3000:]
        self._stderr.seek(0)
        self._stderr.truncate()
        what = signal.Signals(-code).name if code < 0 else f"exit status {code}"
        return {"crashed": f"worker died ({what}) in phase {phase!r} of {request}\n{tail}"}

    def close(self) -> None:
        if self._proc is not None:
            self._stop(self._proc)
        self._stderr.close()

    @staticmethod
    def _stop(proc: subprocess.Popen[str]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


def assert_consistent(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """The reading contract; returns arrowmt's side of ``result``."""
    assert "crashed" not in result, result.get("crashed")
    mine = result["arrowmt"]
    assert mine["status"] != "unexpected", f"{path}: not an ArrowMTError:\n{mine['message']}"
    if mine["status"] == "error":
        assert str(path) in mine["message"], f"error does not name the file: {mine['message']}"
        return mine
    ref = result["pyarrow"]
    assert ref["valid"], f"arrowmt read {path} although pyarrow's full validation fails: {ref['message']}"
    assert mine["rows"] == ref["rows"], f"{path}: arrowmt rows differ from pyarrow's"
    assert mine["lengths"] == {c: [len(r) for r in rows] for c, rows in ref["rows"].items()}
    return mine


@pytest.fixture(scope="module")
def worker() -> Iterator[ReadWorker]:
    w = ReadWorker()
    yield w
    w.close()


# ---------------------------------------------------------------- a valid dataset


def corpus() -> dict[str, list[list[int]]]:
    """Deterministic rows: source has empty rows 5 and 17, every other row is 1..6 tokens."""
    rng = np.random.default_rng(7)
    src_len = rng.integers(1, 7, ROWS)
    src_len[[5, 17]] = 0
    tgt_len = rng.integers(0, 8, ROWS)
    return {
        name: [rng.integers(len(SPECIALS), VOCAB, n).tolist() for n in lengths]
        for name, lengths in (("source", src_len), ("target", tgt_len))
    }


def dictionary() -> Dictionary:
    return Dictionary([*SPECIALS, *(f"w{i}" for i in range(VOCAB - len(SPECIALS)))])


def column_data(rows: list[list[int]], lang: str) -> ColumnData:
    d = dictionary()
    return ColumnData(Ragged.from_rows(rows), lang, f"dict.{lang}.txt", d.sha256(), len(d), f"test {lang}")


def write_corpus_split(path: Path, rows: dict[str, list[list[int]]] | None = None) -> Path:
    """Write the corpus (or ``rows``) as one split of 4 record batches."""
    data = rows or corpus()
    columns = {name: column_data(data[name], lang) for name, lang in LANGS.items()}
    write_split(path, SPLIT, columns, source_format="synthetic", rows_per_batch=RPB)
    return path


def make_dataset(folder: Path) -> Path:
    """A complete arrowmt folder: dictionaries, ``train.arrow`` and the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang in LANGS.values():
        dictionary().save(folder / f"dict.{lang}.txt")
    path = write_corpus_split(split_path(folder, SPLIT))
    manifest = Manifest(
        languages=dict(LANGS),
        dictionaries={lang: f"dict.{lang}.txt" for lang in LANGS.values()},
        source_format="synthetic",
    )
    manifest.files[SPLIT] = FileEntry.of(path, ROWS)
    manifest.save(folder)
    return folder


@pytest.fixture()
def dataset(tmp_path: Path) -> Path:
    return make_dataset(tmp_path / "ds")


@pytest.fixture()
def split_file(dataset: Path) -> Path:
    return split_path(dataset, SPLIT)


def read_table(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return ipc.open_stream(source).read_all()


def write_stream(path: Path, schema: pa.Schema, batches: list[pa.RecordBatch]) -> Path:
    with ipc.new_stream(str(path), schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return path


def with_metadata(schema: pa.Schema, edit: Callable[[dict[str, Any]], object]) -> pa.Schema:
    """``schema`` with its arrowmt metadata JSON passed through ``edit`` (which may return raw bytes)."""
    meta = json.loads(schema.metadata[METADATA_KEY])
    raw = edit(meta)
    payload = raw if isinstance(raw, bytes) else json.dumps(meta).encode()
    return schema.with_metadata({METADATA_KEY: payload})


def expect_format_error(path: Path, *pieces: str) -> FormatError:
    """Opening ``path`` raises FormatError naming the file and containing ``pieces``."""
    with pytest.raises(FormatError) as info:
        SplitFile(path)
    message = str(info.value)
    assert str(path) in message
    for piece in pieces:
        assert piece in message, message
    return info.value


# ---------------------------------------------------------------- the valid file


def test_valid_split_reads_back_exactly(split_file: Path, worker: ReadWorker) -> None:
    mine = assert_consistent(split_file, worker.read(split_file))
    assert mine["status"] == "ok"
    assert mine["rows"] == corpus()
    split = SplitFile(split_file)
    assert [int(n) for n in split.layouts["source"].values_len] == [
        sum(map(len, corpus()["source"][b : b + RPB])) for b in range(0, ROWS, RPB)
    ]
    assert verify_dataset(split_file.parent).ok


def test_pickle_round_trip(split_file: Path) -> None:
    again = pickle.loads(pickle.dumps(SplitFile(split_file)))
    assert again.row("target", 29).tolist() == corpus()["target"][29]


# ---------------------------------------------------------------- not a split file at all


def test_missing_file_and_folder(tmp_path: Path) -> None:
    expect_format_error(tmp_path / "absent.arrow", "no such split file")
    expect_format_error(tmp_path, "cannot map")


@pytest.mark.parametrize("size", [0, 1, 7])
def test_empty_or_tiny_file(tmp_path: Path, size: int) -> None:
    path = tmp_path / "tiny.arrow"
    path.write_bytes(b"\xff" * size)
    expect_format_error(path, f"{size} bytes is too small", "expected >= 8")


def test_garbage_file(tmp_path: Path, worker: ReadWorker) -> None:
    path = tmp_path / "garbage.arrow"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096).astype(np.uint8).tobytes())
    assert assert_consistent(path, worker.read(path))["status"] == "error"


def test_truncated_at_every_seventh_byte(split_file: Path, tmp_path: Path, worker: ReadWorker) -> None:
    data = split_file.read_bytes()
    cuts = sorted({*range(0, len(data), 7), *range(len(data) - 9, len(data))})
    for cut in cuts:
        path = tmp_path / f"cut{cut}.arrow"
        path.write_bytes(data[:cut])
        mine = assert_consistent(path, worker.read(path))
        # Only the 8-byte end-of-stream marker may go missing without losing data.
        if cut < len(data) - 8:
            assert mine["status"] == "error", f"truncated at {cut} of {len(data)} bytes but read fine"
        path.unlink()


def test_arrow_ipc_file_format(split_file: Path, tmp_path: Path) -> None:
    table = read_table(split_file)
    path = tmp_path / "feather.arrow"
    with ipc.new_file(str(path), table.schema) as writer:
        for batch in table.to_batches():
            writer.write_batch(batch)
    expect_format_error(path, "Arrow IPC *file* (Feather v2)", "IPC streams")


def test_foreign_arrow_stream(tmp_path: Path) -> None:
    table = pa.table({"source": pa.array([[1, 2], [3]], pa.list_(pa.int32()))})
    path = write_stream(tmp_path / "foreign.arrow", table.schema, table.to_batches())
    expect_format_error(path, "no arrowmt metadata", "not written by arrowmt")


def test_compressed_stream(split_file: Path, tmp_path: Path) -> None:
    table = read_table(split_file)
    path = tmp_path / "zstd.arrow"
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_stream(str(path), table.schema, options=options) as writer:
        for batch in table.to_batches():
            writer.write_batch(batch)
    expect_format_error(path, "record batch 0, column 'source'", "not inside the mapped file", "uncompressed")


# ---------------------------------------------------------------- schema and metadata


@pytest.mark.parametrize(
    "arrow_type",
    [pa.list_(pa.int64()), pa.string(), pa.large_list(pa.int32()), pa.list_(pa.int16()), pa.int32()],
    ids=str,
)
def test_wrong_column_type(split_file: Path, tmp_path: Path, arrow_type: pa.DataType) -> None:
    table = read_table(split_file)
    fake = pa.array([None] * ROWS, arrow_type).fill_null(_filler(arrow_type))
    schema = table.schema.set(1, pa.field("target", arrow_type))
    batches = [
        pa.RecordBatch.from_arrays([b.column(0), fake.slice(k * RPB, b.num_rows)], schema=schema)
        for k, b in enumerate(table.to_batches())
    ]
    path = write_stream(tmp_path / "typed.arrow", schema, batches)
    expect_format_error(path, "column 'target'", "expected type list<item: int32>", f"got {arrow_type}")


def _filler(arrow_type: pa.DataType) -> pa.Scalar:
    if pa.types.is_string(arrow_type):
        return pa.scalar("word")
    if pa.types.is_integer(arrow_type):
        return pa.scalar(5, arrow_type)
    return pa.scalar([5, 6], arrow_type)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["source", "target", "extra"], "got ['source', 'target', 'extra']"),
        (["source"], "got ['source']"),
        (["target", "source"], "got ['target', 'source']"),
        (["source", "tgt"], "got ['source', 'tgt']"),
    ],
)
def test_columns_differ_from_metadata(split_file: Path, tmp_path: Path, names: list[str], expected: str) -> None:
    table = read_table(split_file)
    pick = [table.column(min(i, 1)) for i in range(len(names))]
    changed = pa.Table.from_arrays(pick, names=names).replace_schema_metadata(table.schema.metadata)
    path = write_stream(tmp_path / "cols.arrow", changed.schema, changed.to_batches(max_chunksize=RPB))
    expect_format_error(path, "schema columns: expected ['source', 'target']", expected)


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda meta: meta.__setitem__(key, value)


METADATA_CASES: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "not json": (lambda m: b"{not json", "metadata is malformed"),
    "not utf-8": (lambda m: b"\xff\xfe{}", "metadata is malformed"),
    "json list": (lambda m: b"[1, 2]", "metadata is malformed"),
    "json null": (lambda m: b"null", "metadata is malformed"),
    "nested too deeply": (lambda m: b"[" * 100_000, "metadata is nested too deeply"),
    "wrong version": (_set("format_version", 3), "'format_version': expected one of [1, 2], got 3"),
    "wrong format": (_set("format", "other"), "'format': expected 'arrowmt', got 'other'"),
    "missing key": (lambda m: m.pop("split"), "metadata is malformed"),
    "unknown key": (_set("colour", "blue"), "metadata is malformed"),
    "rows as text": (_set("rows", "30"), "metadata 'rows': expected an integer >= 0, got '30'"),
    "negative rows": (_set("rows", -1), "metadata 'rows': expected an integer >= 0, got -1"),
    "rows_per_batch 0": (_set("rows_per_batch", 0), "'rows_per_batch': expected an integer >= 1, got 0"),
    "rows_per_batch float": (_set("rows_per_batch", 8.0), "'rows_per_batch': expected an integer >= 1, got 8.0"),
    "rows_per_batch bool": (_set("rows_per_batch", True), "'rows_per_batch': expected an integer >= 1"),
    "no columns": (_set("columns", {}), "metadata 'columns': expected at least one column"),
    "columns not a dict": (_set("columns", ["source"]), "metadata is malformed"),
    "vocab_size text": (
        lambda m: m["columns"]["source"].__setitem__("vocab_size", "50"),
        "'columns.source.vocab_size': expected an integer >= 0, got '50'",
    ),
    "dictionary not text": (
        lambda m: m["columns"]["source"].__setitem__("dictionary", ["dict.de.txt"]),
        "'columns.source.dictionary': expected a string, got ['dict.de.txt']",
    ),
    "pad id text": (
        lambda m: m["special_ids"].__setitem__("pad", "1"),
        "metadata 'special_ids.pad': expected an integer >= 0, got '1'",
    ),
    "tokens negative": (
        lambda m: m["columns"]["target"].__setitem__("tokens", -3),
        "'columns.target.tokens': expected an integer >= 0, got -3",
    ),
}


@pytest.mark.parametrize("case", list(METADATA_CASES))
def test_metadata_garbage(split_file: Path, tmp_path: Path, case: str) -> None:
    edit, expected = METADATA_CASES[case]
    table = read_table(split_file)
    schema = with_metadata(table.schema, edit)
    path = write_stream(tmp_path / "meta.arrow", schema, table.cast(schema).to_batches(max_chunksize=RPB))
    expect_format_error(path, expected)


@pytest.mark.parametrize(
    ("edit", "chunks", "expected"),
    [
        (_set("rows_per_batch", 16), [8, 8, 8, 6], "expected 2 record batches for 30 rows at 16 rows each, got 4"),
        (_set("rows_per_batch", 4), [8, 8, 8, 6], "expected 8 record batches for 30 rows at 4 rows each, got 4"),
        (None, [8, 6, 8, 8], "record batch 1: expected 8 rows, got 6"),
        (None, [8, 8, 8, 2, 4], "expected 4 record batches for 30 rows at 8 rows each, got 5"),
        (_set("rows", 31), [8, 8, 8, 6], "record batch 3: expected 7 rows, got 6"),
        (_set("rows", 24), [8, 8, 8, 6], "expected 3 record batches for 24 rows at 8 rows each, got 4"),
    ],
)
def test_batches_disagree_with_metadata(
    split_file: Path,
    tmp_path: Path,
    edit: Callable[[dict[str, Any]], object] | None,
    chunks: list[int],
    expected: str,
) -> None:
    table = read_table(split_file).combine_chunks()
    schema = with_metadata(table.schema, edit) if edit else table.schema
    starts = np.cumsum([0, *chunks[:-1]])
    batches = [table.cast(schema).slice(int(s), n).to_batches()[0] for s, n in zip(starts, chunks, strict=True)]
    expect_format_error(write_stream(tmp_path / "rpb.arrow", schema, batches), expected)


# ---------------------------------------------------------------- nulls


@pytest.mark.parametrize("where", ["row", "token"])
def test_validity_bitmap_with_nulls(split_file: Path, tmp_path: Path, worker: ReadWorker, where: str) -> None:
    table = read_table(split_file)
    batches = table.to_batches()
    rows = batches[1].column(0).to_pylist()
    rows[2] = None if where == "row" else [5, None]
    nullable = pa.schema([f.with_nullable(True) for f in table.schema], metadata=table.schema.metadata)
    arrays = [pa.array(rows, pa.list_(pa.int32())), batches[1].column(1)]
    batches[1] = pa.RecordBatch.from_arrays(arrays, schema=nullable)
    path = write_stream(tmp_path / "nulls.arrow", nullable, [b.cast(nullable) for b in batches])
    assert_consistent(path, worker.read(path))
    expect_format_error(path, "record batch 1, column 'source'", "expected no nulls, got 1")


# ---------------------------------------------------------------- corrupt offsets and values


def poke(path: Path, word: int, value: int) -> None:
    """Overwrite int32 number ``word`` of ``path`` in place."""
    with open(path, "r+b") as handle:
        handle.seek(word * 4)
        handle.write(np.array([value], dtype="<i4").tobytes())


def offset_word(path: Path, column: str, batch: int, index: int) -> tuple[int, int, int]:
    """(word position, current value, values in the batch) of offset ``index`` of a record batch."""
    split = SplitFile(path)
    layout = split.layouts[column]
    pos = int(layout.offsets_pos[batch]) + index
    return pos, int(split.words[pos]), int(layout.values_len[batch])


# (column, batch, offset index, new value from (old value, previous offset, values in batch),
#  what reading gives: "open" error / "read" error / "ok", a piece of the reader's message,
#  a piece of verify's structural message)
OFFSET_CASES: dict[str, tuple[str, int, int, Callable[[int, int, int], int], str, str, str]] = {
    "middle past values": ("source", 1, 3, lambda v, p, n: n + 100, "read", "row 10 (source)", "row 10 (source)"),
    "middle decreasing": ("source", 1, 3, lambda v, p, n: p - 1, "read", "row 10 (source)", "row 10 (source)"),
    "middle negative": ("source", 1, 3, lambda v, p, n: -5, "read", "offsets ", "row 10 (source)"),
    "middle int32 max": ("target", 2, 5, lambda v, p, n: 2**31 - 1, "read", "row 20 (target)", "row 20 (target)"),
    "middle int32 min": ("target", 0, 1, lambda v, p, n: -(2**31), "read", "row 0 (target)", "row 0 (target)"),
    "first negative": ("source", 1, 0, lambda v, p, n: -1, "open", "record batch 1", "record batch 1"),
    "last past values": ("target", 3, 6, lambda v, p, n: n + 1, "open", "record batch 3", "record batch 3"),
    # Valid Arrow (pyarrow reads it) but not what arrowmt writes: rows would silently shift.
    "first not zero": ("source", 1, 0, lambda v, p, n: 1, "open", "record batch 1", "offsets run 1.."),
    "last short of values": ("source", 2, 8, lambda v, p, n: n - 1, "open", "record batch 2", "offsets run 0.."),
}


@pytest.mark.parametrize("case", list(OFFSET_CASES))
def test_corrupt_offsets(dataset: Path, worker: ReadWorker, case: str) -> None:
    column, batch, index, new_value, outcome, read_piece, verify_piece = OFFSET_CASES[case]
    path = split_path(dataset, SPLIT)
    pos, old, n_values = offset_word(path, column, batch, index)
    previous = offset_word(path, column, batch, index - 1)[1] if index else 0
    poke(path, pos, new_value(old, previous, n_values))

    mine = assert_consistent(path, worker.read(path))
    assert mine["status"] == ("ok" if outcome == "ok" else "error"), mine
    if outcome == "read":
        assert "offsets" in mine["message"] and "invalid" in mine["message"], mine["message"]
    if outcome != "ok":
        assert read_piece in mine["message"], mine["message"]
    if outcome == "open":
        with pytest.raises(FormatError):  # caught on open, so safe in-process
            SplitFile(path)

    found = worker.verify(dataset)
    assert found["status"] == "ok", found
    assert any("SHA-256 differs" in p for p in found["problems"]), found["problems"]
    assert any(verify_piece in p for p in found["problems"]), found["problems"]


@pytest.mark.parametrize(("batch", "index", "delta"), [(0, 0, 2), (1, 0, 1), (2, 8, -1), (3, 6, -3)])
def test_batch_offsets_must_start_at_zero_and_end_at_the_value_count(
    split_file: Path, batch: int, index: int, delta: int
) -> None:
    """A shifted first/last offset is valid Arrow (pyarrow reads shifted rows) but never arrowmt: refused on open."""
    pos, old, n_values = offset_word(split_file, "target", batch, index)
    poke(split_file, pos, old + delta)
    first, last = (old + delta, n_values) if index == 0 else (0, old + delta)
    expect_format_error(
        split_file, f"record batch {batch}, column 'target': offsets run {first}..{last}, expected 0..{n_values}"
    )
    pa_table = read_table(split_file)
    for b in pa_table.to_batches():
        b.validate(full=True)  # pyarrow accepts the file: only arrowmt's check stops the shifted rows


def test_check_offsets_and_the_once_per_file_memo(split_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check_offsets`` finds a corrupt middle offset; ``ensure_offsets_checked`` checks a file state once."""
    checked: list[Path] = []
    check = SplitFile.check_offsets
    monkeypatch.setattr(SplitFile, "check_offsets", lambda self: (checked.append(self.path), check(self))[1])
    split = SplitFile(split_file)
    ensure_offsets_checked(split)
    ensure_offsets_checked(SplitFile(split_file))  # written just now ("racy"): checked again, not remembered
    assert checked == [split_file] * 2
    monkeypatch.setattr(reader_module, "RACY_NS", -(10**18))  # as if the file were old
    ensure_offsets_checked(split)
    ensure_offsets_checked(SplitFile(split_file))  # same identity: remembered
    assert checked == [split_file] * 3
    pos, _, n_values = offset_word(split_file, "source", 2, 4)
    poke(split_file, pos, n_values + 7)  # in place: same inode and size
    os.utime(split_file, ns=(split.identity.mtime_ns, split.identity.mtime_ns + 1))  # in case of one clock tick
    again = SplitFile(split_file)
    assert again.identity != split.identity and again.identity.inode == split.identity.inode
    with pytest.raises(FormatError, match=r"row 19 \(source\): offsets \d+\.\.\d+ are invalid") as info:
        ensure_offsets_checked(again)
    assert str(split_file) in str(info.value)
    with pytest.raises(FormatError):
        ensure_offsets_checked(again)  # a failed check is not remembered
    assert checked == [split_file] * 5


@pytest.mark.parametrize("case", ["valid", *(c for c, v in OFFSET_CASES.items() if v[4] != "open")])
def test_whole_column_lengths_check_offsets_as_spans_does(dataset: Path, case: str) -> None:
    """``lengths(column)`` (one diff per record batch) gives the lengths or the error of ``spans`` on every row.

    In-process: both only read offsets, which the open checked lie inside the map.
    """
    path = split_path(dataset, SPLIT)
    if case != "valid":
        column, batch, index, new_value, *_ = OFFSET_CASES[case]
        pos, old, n_values = offset_word(path, column, batch, index)
        previous = offset_word(path, column, batch, index - 1)[1] if index else 0
        poke(path, pos, new_value(old, previous, n_values))
    split = SplitFile(path)
    for column in split.columns:
        try:
            expected = split.spans(column, np.arange(len(split)))[1]
        except FormatError as exc:
            for dtype in (np.int64, np.int32):
                with pytest.raises(FormatError) as caught:
                    split.lengths(column, dtype=dtype)
                assert str(caught.value) == str(exc)
            continue
        for dtype in (np.int64, np.int32, np.uint32):
            got = split.lengths(column, dtype=dtype)
            assert got.dtype == dtype and got.tolist() == expected.tolist()
        assert split.lengths(column).dtype == np.int64
        assert split.lengths(column, np.array([3, 0]), np.int32).tolist() == expected[[3, 0]].tolist()
    if case == "valid":
        ds = ArrowMTDataset(dataset, SPLIT)
        src, tgt = (ds.lengths(c, dtype=np.int32) for c in ("source", "target"))
        assert src.dtype == np.int32 and src.tolist() == [len(r) for r in corpus()["source"]]
        assert ds.num_tokens().tolist() == np.maximum(src, tgt).tolist() and ds.num_tokens().dtype == np.int64
        assert ds.num_tokens(np.array([4, 2])).tolist() == np.maximum(src, tgt)[[4, 2]].tolist()
        with pytest.raises(ValueError, match="dtype"):
            split.lengths("source", dtype=np.int16)


def shift_offset(path: Path, column: str, batch: int, index: int, to: Callable[[int, int, int], int]) -> None:
    """Overwrite offset ``index`` of a record batch with ``to(old, previous, next)``."""
    pos, old, _ = offset_word(path, column, batch, index)
    previous, following = (offset_word(path, column, batch, index + d)[1] for d in (-1, 1))
    poke(path, pos, to(old, previous, following))


def test_shifted_offset_is_caught_by_the_offsets_checksum(dataset: Path, worker: ReadWorker) -> None:
    """A middle offset moved within its neighbours is valid Arrow and passes every range check: rows 11 and 12
    would shift. The record batch's offsets checksum refuses them before any of its rows is returned."""
    path = split_path(dataset, SPLIT)
    shift_offset(path, "target", 1, 4, lambda old, previous, following: old + 1 if old < following else old - 1)
    mine = assert_consistent(path, worker.read(path))
    assert (
        mine["status"] == "error"
        and "record batch 1 (target): offsets checksum of rows 8..15: expected CRC-32" in (mine["message"])
    )
    split = SplitFile(path)  # in-process is safe: every offset stays inside its batch
    assert split.row("target", 7).tolist() == corpus()["target"][7]  # other record batches read fine
    assert split.row("source", 12).tolist() == corpus()["source"][12]  # and so does the other column
    for read in (lambda: split.row("target", 12), lambda: split.lengths("target"), lambda: ArrowMTDataset(dataset)[9]):
        with pytest.raises(FormatError, match=r"record batch 1 \(target\): offsets checksum"):
            read()
    problems = worker.verify(dataset)["problems"]
    assert problems[0] == f"{path}: SHA-256 differs from the manifest (file changed or corrupt)"
    assert any("record batch 1 (target): offsets checksum" in p for p in problems[1:]), problems


def test_a_decreasing_offset_never_gives_a_longer_row(dataset: Path) -> None:
    """Offset 4 of batch 1 below offset 3: row 11 fails the range check, row 12 would read longer."""
    path = split_path(dataset, SPLIT)
    shift_offset(path, "source", 1, 4, lambda old, previous, following: previous - 1)
    ds = ArrowMTDataset(dataset)
    with pytest.raises(FormatError, match=r"row 11 \(source\): offsets"):
        ds[11]
    with pytest.raises(FormatError, match=r"record batch 1 \(source\): offsets checksum"):
        ds[12]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_plan_cached_before_the_corruption_serves_only_sound_batches(dataset: Path, prefetch: int) -> None:
    """The batch plan, cached while the file was sound, is reused: every batch served before the error is correct,
    and none holds a row of the corrupt record batch (rows 8..15). Read-ahead meets the error a few batches early."""
    sampler = TokenBatchSampler(ArrowMTDataset(dataset), max_tokens=12, seed=9, prefetch=0)
    reference = [(list(b), ArrowMTDataset(dataset).__getitems__(list(b))) for b in sampler]
    first_corrupt = next(k for k, (ids, _) in enumerate(reference) if set(ids) & set(range(8, 16)))
    assert first_corrupt > 0, "corpus or seed changed: pick a seed whose first batch is sound"
    shift_offset(split_path(dataset, SPLIT), "target", 1, 4, lambda old, previous, following: old + 1)
    ds = ArrowMTDataset(dataset)
    served = []
    with pytest.raises(FormatError, match="offsets checksum"):
        for ids in TokenBatchSampler(ds, max_tokens=12, seed=9, prefetch=prefetch):
            served.append((list(ids), ds.__getitems__(list(ids))))
    assert len(served) == first_corrupt if prefetch == 0 else len(served) <= first_corrupt
    for (ids, got), (want_ids, want) in zip(served, reference, strict=False):
        assert ids == want_ids and not set(ids) & set(range(8, 16))
        assert [row["target"].tolist() for row in got] == [row["target"].tolist() for row in want]


def test_a_mixture_gather_checks_the_offsets_checksum(tmp_path: Path) -> None:
    """A mixture locates rows of every corpus in one gather, past the readers: it checks the checksum too."""
    a, b = make_dataset(tmp_path / "a"), make_dataset(tmp_path / "b")
    mixture = open_mixture({"a": a, "b": b})
    ids = np.arange(2 * ROWS)
    want = mixture.__getitems__(ids)  # sound: record batches checked on this first use
    shift_offset(split_path(b, SPLIT), "target", 1, 4, lambda old, previous, following: old + 1)
    mixture = open_mixture({"a": a, "b": b})
    assert [row["target"].tolist() for row in mixture.__getitems__(ids[:ROWS])] == [
        row["target"].tolist() for row in want
    ][:ROWS]
    for rows in (ids[ROWS:], np.array([3, ROWS + 12])):
        with pytest.raises(FormatError, match=r"b/train.arrow: record batch 1 \(target\): offsets checksum"):
            mixture.__getitems__(rows)


def test_lm_document_starts_check_the_offsets_checksum(tmp_path: Path) -> None:
    """LM blocks read flat token ranges; the rows' starts inside a block come from the offsets: checked first."""
    corpus = lengths_dataset(tmp_path / "lm", [5] * 40)  # one column "tokens", one record batch
    ds = open_blocks(corpus, "train", 12, "none")
    assert ds.__getitems__([0, 1]).document_starts()[1].tolist() == [5, 10, 3, 8]
    shift_offset(split_path(corpus, "train"), "tokens", 0, 2, lambda old, previous, following: old + 1)
    gathered = open_blocks(corpus, "train", 12, "none").__getitems__([0, 1])
    with pytest.raises(FormatError, match=r"record batch 0 \(tokens\): offsets checksum"):
        gathered.document_starts()


def rewrite(path: Path, custom: list[dict[bytes, bytes]] | None) -> Path:
    """``path`` written again by pyarrow, each record batch with the custom metadata ``custom`` (None: none)."""
    table = read_table(path)
    out = path.with_name("rewritten.arrow")
    with ipc.new_stream(str(out), table.schema) as writer:
        for k, batch in enumerate(table.to_batches(max_chunksize=RPB)):
            writer.write_batch(batch, custom_metadata=None if custom is None else custom[k])
    os.replace(out, path)
    return path


def test_record_batches_without_offsets_checksums_read_as_before(dataset: Path, worker: ReadWorker) -> None:
    """Batches without a checksum (written before it existed, or rewritten by another Arrow tool): read, no warning."""
    path = rewrite(split_path(dataset, SPLIT), None)
    manifest = Manifest.load(dataset)
    manifest.files[SPLIT] = FileEntry.of(path, ROWS)
    manifest.save(dataset)
    assert not SplitFile(path).offset_checks.present.any()
    assert assert_consistent(path, worker.read(path))["rows"] == corpus()
    assert verify_dataset(dataset, progress=False).ok
    shift_offset(path, "source", 1, 4, lambda old, previous, following: following + 1)
    with pytest.raises(FormatError, match=r"row 12 \(source\): offsets .* are invalid"):  # the range checks remain
        SplitFile(path).lengths("source")


def test_the_writer_records_every_batch_offsets_checksum(split_file: Path) -> None:
    split = SplitFile(split_file)
    assert split.offset_checks.present.tolist() == [True] * 4
    for column in split.columns:
        assert [offsets_crc(b.offsets) for b in split.batch_offsets(column)] == split.offset_checks.expected[
            :, split.columns.index(column)
        ].tolist()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"{not json", "record batch 0: offsets checksum: expected JSON"),
        (b'{"source":1}', "offsets checksum: expected a CRC-32 per column ['source', 'target'], got"),
        (b'{"source":1,"target":-1}', "offsets checksum: expected a CRC-32 per column"),
        (b'{"source":1,"target":"1"}', "offsets checksum: expected a CRC-32 per column"),
    ],
    ids=["not json", "a column missing", "negative", "text"],
)
def test_malformed_offsets_checksums_are_named_on_open(split_file: Path, value: bytes, expected: str) -> None:
    expect_format_error(rewrite(split_file, [{OFFSETS_CRC_KEY: value}] * 4), expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b'[1, "a"]', "record batch 0: offsets piece checksums: expected rows per piece and, per column"),
        (b'{"rows":0,"crcs":{"source":[1],"target":[1]}}', "a CRC-32 per piece of its 8 rows, got"),
        (b'{"rows":4,"crcs":{"source":[1],"target":[1]}}', "a CRC-32 per piece of its 8 rows, got"),
        (b'{"rows":8,"crcs":{"source":[1],"target":[-1]}}', "a CRC-32 per piece of its 8 rows, got"),
        (b'{"rows":8,"source":[1],"target":[1]}', "a CRC-32 per piece of its 8 rows, got"),
    ],
    ids=["not an object", "no rows", "too few pieces", "negative", "not nested"],
)
def test_malformed_offsets_piece_checksums_are_named_on_open(split_file: Path, value: bytes, expected: str) -> None:
    expect_format_error(rewrite(split_file, [{OFFSETS_PIECES_KEY: value}] * 4), expected)


def test_a_malformed_whole_checksum_is_refused_beside_pieces(split_file: Path) -> None:
    """Readers check the pieces, and still refuse a file whose whole-batch entry (version 1) is not a CRC-32 per
    column."""
    with ipc.open_stream(str(split_file)) as reader:
        written = [dict(custom) for _, custom in reader.iter_batches_with_custom_metadata()]
    assert all(list(m) == [OFFSETS_PIECES_BINARY_KEY] for m in written)
    broken = [{**m, OFFSETS_CRC_KEY: b'{"source":1}'} for m in written]
    expect_format_error(rewrite(split_file, broken), "offsets checksum: expected a CRC-32 per column")


def test_a_row_used_cold_checks_only_its_piece_of_offsets(tmp_path: Path) -> None:
    """One record batch of 3,000 rows: pieces of offsets of PIECE_ROWS rows (the last one shorter). Reading a row
    checks its piece only; a piece changed on disk fails its rows and no other."""
    path = split_path(lengths_dataset(tmp_path / "c", [2] * 3000, [3] * 3000), "train")
    split = SplitFile(path)
    pieces = -(-3000 // PIECE_ROWS)
    assert split.offset_checks.first.tolist() == [0, pieces] and split.offset_checks.piece_rows.tolist() == [PIECE_ROWS]
    split.spans("source", np.array([1500]))
    assert split.offset_checks.pieces["source"].checked.tolist() == [k == 1500 // PIECE_ROWS for k in range(pieces)]
    assert not split.offset_checks.pieces["target"].checked.any()
    shift_offset(path, "source", 0, 2500, lambda old, previous, following: old + 1)
    split = SplitFile(path)
    assert split.lengths("source", np.array([5, 1500])).tolist() == [2, 2]
    first = 2500 // PIECE_ROWS * PIECE_ROWS
    with pytest.raises(
        FormatError,
        match=rf"record batch 0 \(source\): offsets checksum of rows {first}\.\.{min(first + PIECE_ROWS, 3000) - 1}",
    ):
        split.spans("source", np.array([first]))


def test_token_outside_dictionary_is_flagged_by_verify(dataset: Path, worker: ReadWorker) -> None:
    path = split_path(dataset, SPLIT)
    split = SplitFile(path)
    start = int(split.spans("source", np.array([9]))[0][0])
    del split
    poke(path, start, 10**6)
    mine = assert_consistent(path, worker.read(path))
    assert mine["rows"]["source"][9][0] == 10**6
    problems = worker.verify(dataset)["problems"]
    assert any("row 9 (source): token id 1000000 outside the dictionary (expected 0..49)" in p for p in problems)


def test_verify_reports_manifest_disagreements(dataset: Path) -> None:
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    manifest["files"][SPLIT]["rows"] = 31
    manifest["files"]["valid"] = {**manifest["files"][SPLIT], "file": "valid.arrow"}
    (dataset / MANIFEST_NAME).write_text(json.dumps(manifest))
    problems = verify_dataset(dataset).problems
    assert any("train.arrow: expected 31 rows (manifest), got 30" in p for p in problems), problems
    assert any("valid.arrow: listed in the manifest (31 rows) but missing" in p for p in problems), problems


def test_verify_flags_a_manifest_without_files(dataset: Path) -> None:
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    manifest["files"] = {}
    (dataset / MANIFEST_NAME).write_text(json.dumps(manifest))
    report = verify_dataset(dataset, progress=False)
    assert not report.ok and report.files == 0
    assert report.problems == [f"{dataset / MANIFEST_NAME}: lists no split files (expected at least one)"]


@pytest.mark.parametrize("listed", [True, False])
def test_verify_flags_a_column_naming_a_dictionary_not_in_the_folder(dataset: Path, listed: bool) -> None:
    """The column's dictionary is unknown to the manifest, or listed there but missing from the folder."""
    path = split_path(dataset, SPLIT)
    table = read_table(path)
    schema = with_metadata(table.schema, lambda m: m["columns"]["target"].__setitem__("dictionary", "dict.fr.txt"))
    new = write_stream(path.with_name("new.arrow"), schema, table.cast(schema).to_batches(max_chunksize=RPB))
    os.replace(new, path)  # not written in place: the table maps the old file
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    manifest["files"][SPLIT] = FileEntry.of(path, ROWS).__dict__
    if listed:
        manifest["dictionaries"]["fr"] = "dict.fr.txt"
    (dataset / MANIFEST_NAME).write_text(json.dumps(manifest))
    problems = verify_dataset(dataset, progress=False).problems
    if listed:
        assert len(problems) == 1 and "dict.fr.txt" in problems[0], problems
    else:
        assert problems == [
            f"{path}: column 'target' names dictionary 'dict.fr.txt', which is not in the folder "
            "(the manifest lists ['dict.de.txt', 'dict.en.txt'])"
        ]


def test_rows_out_of_range(split_file: Path) -> None:
    split = SplitFile(split_file)
    for call in (
        lambda: split.row("source", ROWS),
        lambda: split.row("source", -1),
        lambda: split.spans("target", np.array([0, 3, ROWS + 5])),
        lambda: split.lengths("target", np.array([-2])),
    ):
        with pytest.raises(IndexError, match=r"out of range \(expected 0 <= row < 30\)") as info:
            call()
        assert str(split_file) in str(info.value)


# ---------------------------------------------------------------- files changed under a live map


def rewrite_tokens(path: Path, shift: int) -> dict[str, list[list[int]]]:
    """Rewrite the split (atomically, as every arrowmt writer does) with the same lengths, other ids."""
    rows = {
        name: [[(t - len(SPECIALS) + shift) % (VOCAB - len(SPECIALS)) + len(SPECIALS) for t in r] for r in col]
        for name, col in corpus().items()
    }
    write_corpus_split(path, rows)
    return rows


def test_rewrite_keeps_the_old_map_and_is_detected(split_file: Path) -> None:
    old = SplitFile(split_file)
    before = old.row("target", 29).copy()
    new_rows = rewrite_tokens(split_file, shift=1)
    assert old.row("target", 29).tolist() == before.tolist() == corpus()["target"][29]  # old inode
    assert SplitFile(split_file).row("target", 29).tolist() == new_rows["target"][29]
    with pytest.raises(FormatError, match="file changed under the live memory map") as info:
        old.check_unchanged()
    assert str(split_file) in str(info.value)


def test_truncate_in_place_is_detected(split_file: Path) -> None:
    split = SplitFile(split_file)
    split.check_unchanged()
    os.truncate(split_file, split.stamp.size // 2)  # no row is touched afterwards: that would SIGBUS
    with pytest.raises(FormatError, match=rf"size {split.stamp.size} -> {split.stamp.size // 2}"):
        split.check_unchanged()
    split_file.unlink()
    with pytest.raises(FormatError, match="no such split file"):
        split.check_unchanged()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="documents Linux mmap semantics")
def test_touching_a_truncated_mapped_page_is_sigbus(split_file: Path) -> None:
    """What docs/reliability.md states: the reader detects the change but cannot stop the OS signal."""
    script = (
        "import os, sys\n"
        "from arrowmt._errors import FormatError\n"
        "from arrowmt.reading._reader import SplitFile\n"
        "split = SplitFile(sys.argv[1])\n"
        "split.row('target', 29)\n"
        "os.truncate(sys.argv[1], 0)\n"
        "try:\n"
        "    split.check_unchanged()\n"
        "except FormatError:\n"
        "    print('detected', flush=True)\n"
        "split.row('target', 29).sum()\n"
        "print('survived', flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, str(split_file)], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.stdout.split() == ["detected"], done.stdout + done.stderr
    assert done.returncode == -signal.SIGBUS, done.returncode


@pytest.mark.parametrize("how", ["rewrite", "touch"])
def test_unpickling_a_split_after_a_change(split_file: Path, how: str) -> None:
    blob = pickle.dumps(SplitFile(split_file))
    if how == "rewrite":
        rewrite_tokens(split_file, shift=2)
    else:
        st = split_file.stat()
        os.utime(split_file, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(FormatError, match="file changed since it was first opened") as info:
        pickle.loads(blob)
    assert str(split_file) in str(info.value)


def test_unpickling_a_dataset_after_same_size_rewrite(dataset: Path) -> None:
    """The size still matches the manifest, but the stamp (mtime) does not: a DataLoader worker refuses."""
    blob = pickle.dumps(ArrowMTDataset(dataset, SPLIT))
    size = split_path(dataset, SPLIT).stat().st_size
    rewrite_tokens(split_path(dataset, SPLIT), shift=3)
    assert split_path(dataset, SPLIT).stat().st_size == size
    with pytest.raises(FormatError, match=f"split '{SPLIT}' files changed since the dataset was opened"):
        pickle.loads(blob)


def test_unpickling_a_dataset_after_resize(dataset: Path) -> None:
    ds = ArrowMTDataset(dataset, SPLIT)
    blob = pickle.dumps(ds)
    rows = corpus()
    rows["source"][0] = rows["source"][0] * 40  # more tokens: a bigger file
    write_corpus_split(split_path(dataset, SPLIT), rows)
    with pytest.raises(FormatError, match="as recorded in the manifest") as info:
        pickle.loads(blob)
    assert str(split_path(dataset, SPLIT)) in str(info.value)
    assert ds[0]["source"].tolist() == corpus()["source"][0]  # the open dataset keeps its old map


def test_dataset_manifest_size_differs(dataset: Path) -> None:
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    size = manifest["files"][SPLIT]["size"]
    manifest["files"][SPLIT]["size"] = size + 8
    (dataset / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(FormatError, match=f"expected {size + 8} bytes and 30 rows") as info:
        ArrowMTDataset(dataset, SPLIT)
    assert f"got {size} bytes and 30 rows" in str(info.value)


def test_conversion_rerun_keeps_open_maps(dataset: Path) -> None:
    """A converter re-run (--overwrite) replaces files by rename: an open dataset keeps its old inode."""
    ds = ArrowMTDataset(dataset, SPLIT)
    old_split = SplitFile(split_path(dataset, SPLIT))
    out = OutputFolder.prepare(dataset, dict(LANGS), "synthetic", overwrite=True, progress=False)
    names = {lang: out.add_dictionary(lang, dictionary()) for lang in LANGS.values()}
    rows = {name: [[4] * 3 for _ in range(ROWS + 2)] for name in LANGS}
    columns = {n: column_data(rows[n], lang) for n, lang in LANGS.items()}
    assert {c.dictionary_file for c in columns.values()} == set(names.values())
    out.write(SPLIT, columns, special_ids_of(dictionary()))
    out.finish()

    assert ds[29]["target"].tolist() == corpus()["target"][29]
    assert old_split.row("source", 29).tolist() == corpus()["source"][29]
    with pytest.raises(FormatError, match="file changed under the live memory map"):
        ds.check_unchanged()
    again = ArrowMTDataset(dataset, SPLIT)
    assert len(again) == ROWS + 2 and again[31]["target"].tolist() == [4, 4, 4]
