"""Crash-safe output: a killed, interrupted or failing writer never leaves a partial split file.

Every writer goes through ``arrowmt.files._atomic.atomic_path``: data goes to a
``.arrowmt-tmp-*`` file beside the target, is fsynced and renamed over the target
only when complete. A SIGKILL can leave that temp file behind (nothing runs on
SIGKILL); ``remove_stale_temps`` and the next conversion's ``OutputFolder.prepare``
delete it. Whole folders go through ``StagedOutput``: a staging folder beside the
target, published by renames (see the last section). Tests run as root, so a
read-only folder is simulated (a path under a *file*, ``/proc``, or
``os.replace``/writes raising ``ENOSPC``).
"""

from __future__ import annotations

import errno
import gc
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arrowmt
from arrowmt import (
    ArrowMTError,
    Dictionary,
    FormatError,
    InputDataError,
    InvalidParameterError,
    OutputExistsError,
    SpecialIds,
    StorageError,
    open_split,
)
from arrowmt.testing import (
    STAGING_MARK,
    TEMP_PREFIX,
    ColumnData,
    OutputFolder,
    Ragged,
    SplitFile,
    StagedOutput,
    atomic_output,
    atomic_path,
    deferred_signals,
    remove_stale_staging,
    remove_stale_temps,
    write_split,
)
from tests.conftest import MULTI30K, fairseq_fixture

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 1000
BIG_ROWS = 2_000_000
KILL_AFTER_BYTES = 1 << 20

# Writes 2M random rows in record batches of 16 rows: seconds of work, killed long before the end.
BIG_WRITER = f"""
import sys
import numpy as np
from arrowmt.reading._ragged import Ragged
from arrowmt.writing._writer import ColumnData, write_split
rng = np.random.default_rng(0)
lengths = rng.integers(1, 20, {BIG_ROWS})
values = rng.integers(4, {VOCAB}, int(lengths.sum()), dtype=np.int32)
column = ColumnData(Ragged.from_lengths(lengths, values), None, "dict.txt", "0" * 64, {VOCAB}, "random")
print("writing", flush=True)
write_split(sys.argv[1], "train", {{"tokens": column}}, rows_per_batch=16)
print("finished", flush=True)
"""


def small_column(rows: int = 100, seed: int = 0, vocab: int = VOCAB) -> ColumnData:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 12, rows)
    values = rng.integers(4, vocab, int(lengths.sum()), dtype=np.int32)
    return ColumnData(Ragged.from_lengths(lengths, values), None, "dict.txt", "0" * 64, vocab, f"seed {seed}")


def write_small(path: Path, seed: int = 0, **kwargs: object) -> bytes:
    write_split(path, "train", {"tokens": small_column(seed=seed)}, rows_per_batch=16, **kwargs)  # type: ignore[arg-type]
    return path.read_bytes()


def temps(folder: Path) -> list[Path]:
    return sorted(folder.glob(TEMP_PREFIX + "*"))


# ---------------------------------------------------------------- SIGKILL mid-write


def start_big_writer(target: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.Popen(
        [sys.executable, "-c", BIG_WRITER, str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def kill_mid_write(proc: subprocess.Popen[str], folder: Path, timeout: float = 120.0) -> Path:
    """SIGKILL ``proc`` once its temp file in ``folder`` holds a megabyte; return that temp file."""
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        partial = [p for p in temps(folder) if p.stat().st_size >= KILL_AFTER_BYTES]
        if partial:
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
            proc.stdout.close()
            return partial[0]
        assert proc.poll() is None, "the writer finished before it could be killed"
        time.sleep(0.005)
    proc.kill()
    raise AssertionError(f"no temp file of {KILL_AFTER_BYTES} bytes appeared in {folder}")


def test_sigkill_mid_write_leaves_no_split(tmp_path: Path) -> None:
    fresh, existing = tmp_path / "fresh", tmp_path / "existing"
    fresh.mkdir()
    existing.mkdir()
    old = write_small(existing / "train.arrow")
    writers = [start_big_writer(fresh / "train.arrow"), start_big_writer(existing / "train.arrow")]
    stale = [kill_mid_write(proc, folder) for proc, folder in zip(writers, (fresh, existing), strict=True)]

    assert not (fresh / "train.arrow").exists()
    assert (existing / "train.arrow").read_bytes() == old  # the old split survives, untouched
    assert len(SplitFile(existing / "train.arrow")) == 100
    for folder, partial in zip((fresh, existing), stale, strict=True):
        assert temps(folder) == [partial]
        with pytest.raises(FormatError):  # a partial stream is never mistaken for a split
            SplitFile(partial)

    assert remove_stale_temps(fresh) == stale[:1]
    assert list(fresh.iterdir()) == []
    OutputFolder.prepare(existing, {"tokens": None}, "synthetic", overwrite=True, progress=False)
    assert temps(existing) == []
    assert (existing / "train.arrow").read_bytes() == old


def test_next_conversion_removes_stale_temps(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name in ("abc123.part", "zzz.part"):
        (out / f"{TEMP_PREFIX}{name}").write_bytes(b"partial")
    (out / "keep.txt").write_text("not ours")
    folder = OutputFolder.prepare(out, {"tokens": None}, "synthetic", overwrite=True, progress=False)
    assert temps(out) == []
    assert (out / "keep.txt").exists()
    assert folder.out == out
    assert folder.path.parent == tmp_path and folder.path.name.startswith(f".out{STAGING_MARK}{os.getpid()}-")
    folder.abort()
    assert sorted(tmp_path.iterdir()) == [out]


# ---------------------------------------------------------------- exceptions inside the block


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()], ids=["exception", "ctrl-c"])
def test_exception_inside_atomic_path_removes_temp(tmp_path: Path, error: BaseException) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(type(error)), atomic_path(target) as tmp:
        tmp.write_bytes(b"x" * 10_000)
        assert tmp.parent == tmp_path and tmp.name.startswith(TEMP_PREFIX)
        raise error
    assert list(tmp_path.iterdir()) == []


def test_exception_inside_atomic_path_keeps_existing_target(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.write_bytes(b"new")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert temps(tmp_path) == []


def test_an_arrowmt_error_inside_atomic_path_passes_through(tmp_path: Path) -> None:
    """An error that already names its file (e.g. the remote object being copied) is not renamed a write failure."""
    target = tmp_path / "out.bin"
    with pytest.raises(StorageError, match="s3://b/obj: cannot read"), atomic_output(target) as handle:
        handle.write(b"partial")
        raise StorageError("s3://b/obj: cannot read: gone")
    assert list(tmp_path.iterdir()) == []


def test_bad_token_mid_write_leaves_nothing(tmp_path: Path) -> None:
    """write_split checks ids batch by batch: the error comes after earlier batches were written."""
    column = small_column(rows=500)
    values = np.array(column.ragged.values)
    values[-1] = VOCAB + 7
    bad = ColumnData(Ragged(column.ragged.offsets, values), None, "dict.txt", "0" * 64, VOCAB, "bad input")
    with pytest.raises(InputDataError, match=f"token id {VOCAB + 7} outside the dictionary"):
        write_split(tmp_path / "train.arrow", "train", {"tokens": bad}, rows_per_batch=16)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- refusing to write


def test_overwrite_false_refuses_existing(tmp_path: Path) -> None:
    target = tmp_path / "train.arrow"
    old = write_small(target)
    with pytest.raises(OutputExistsError, match="output exists") as info:
        write_small(target, seed=1, overwrite=False)
    assert str(target) in str(info.value)
    assert target.read_bytes() == old
    assert temps(tmp_path) == []


def test_folder_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file")
    target = blocker / "train.arrow"
    with pytest.raises(ArrowMTError, match="cannot create output") as info:
        write_small(target)
    assert str(target) in str(info.value) and str(blocker) in str(info.value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux /proc")
def test_unwritable_folder() -> None:
    target = Path("/proc/arrowmt-no-such-dir/train.arrow")
    with pytest.raises(ArrowMTError, match="cannot create output") as info:
        write_small(target)
    assert str(target) in str(info.value)


def enospc(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_rename_fails_with_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "train.arrow"
    monkeypatch.setattr(os, "replace", enospc)
    with pytest.raises(ArrowMTError, match="writing failed: No space left on device") as info:
        write_small(target)
    assert str(target) in str(info.value)
    assert list(tmp_path.iterdir()) == []


class FullDisk(io.FileIO):
    """A file that takes ``room`` bytes, then fails every write with ENOSPC (as a full disk does)."""

    room = 4096
    written = 0

    def __init__(self, path: str, mode: str) -> None:
        super().__init__(path, "wb")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        size = memoryview(data).nbytes
        if FullDisk.written + size > FullDisk.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        FullDisk.written += size
        return super().write(data)


@pytest.mark.parametrize("disk", ["after 4 KiB", "/dev/full"])
def test_disk_full_during_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, disk: str) -> None:
    target = tmp_path / "train.arrow"
    old = write_small(target)
    if disk == "/dev/full":
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full")
        real = pa.OSFile
        monkeypatch.setattr(pa, "OSFile", lambda path, mode: real("/dev/full", mode))
    else:
        monkeypatch.setattr(FullDisk, "written", 0)
        monkeypatch.setattr(pa, "OSFile", FullDisk)
    with pytest.raises(ArrowMTError, match="No space left on device") as info:
        write_small(target, seed=1)
    assert str(target) in str(info.value)
    assert disk == "/dev/full" or FullDisk.written > 0  # the temp file did hold partial data
    assert target.read_bytes() == old
    assert temps(tmp_path) == []


# ---------------------------------------------------------------- determinism


def test_same_input_gives_identical_bytes(tmp_path: Path) -> None:
    first = write_small(tmp_path / "a.arrow", seed=3)
    second = write_small(tmp_path / "b.arrow", seed=3)
    assert first == second
    assert write_small(tmp_path / "a.arrow", seed=3) == first  # overwriting in place too
    assert write_small(tmp_path / "c.arrow", seed=4) != first
    assert temps(tmp_path) == []
    assert (tmp_path / "a.arrow").stat().st_mode & 0o777 == 0o644


# ---------------------------------------------------------------- staged folders


def stage(target: Path, files: dict[str, bytes], overwrite: bool = True) -> StagedOutput:
    staged = StagedOutput.begin(target, overwrite)
    for name, data in files.items():
        (staged.path / name).write_bytes(data)
    return staged


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_fresh_target_appears_complete_in_one_rename(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "out"
    staged = stage(target, {"x.arrow": b"x", "manifest.json": b"{}"})
    assert not target.exists()  # nothing at the target before publishing
    assert staged.path.parent == target.parent
    staged.publish(["x.arrow", "manifest.json"])
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json", "x.arrow"]
    assert sorted(target.parent.iterdir()) == [target]  # no staging left beside it
    assert stat_mode(target) == 0o777 & ~current_umask()


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize("how", ["abort", "exception", "ctrl-c"])
def test_failed_fresh_output_leaves_nothing(tmp_path: Path, how: str) -> None:
    target = tmp_path / "a" / "b" / "out"
    if how == "abort":
        stage(target, {"x.arrow": b"x"}).abort()
    else:
        error = RuntimeError("boom") if how == "exception" else KeyboardInterrupt()
        with pytest.raises(type(error)), stage(target, {"x.arrow": b"x"}):
            raise error
    assert list(tmp_path.iterdir()) == []  # the parent folders this run created are gone too


def test_existing_target_gets_only_published_and_removed_names(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    for name, data in {"x.arrow": b"old", "old.arrow": b"old", "foreign.arrow": b"theirs"}.items():
        (target / name).write_bytes(data)
    (target / "cache").mkdir()
    (target / "cache" / "plan").write_bytes(b"p")
    staged = stage(target, {"x.arrow": b"new", "m.json": b"{}"})
    staged.publish(["x.arrow", "m.json"], remove={"old.arrow", "missing.arrow", "x.arrow"}, remove_dirs={"cache"})
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {
        "x.arrow": b"new",
        "m.json": b"{}",
        "foreign.arrow": b"theirs",
    }
    assert sorted(tmp_path.iterdir()) == [target]


def test_publish_refuses_a_folder_in_the_way(tmp_path: Path) -> None:
    target = tmp_path / "out"
    (target / "b.arrow").mkdir(parents=True)
    staged = stage(target, {"a.arrow": b"a", "b.arrow": b"b"})
    with pytest.raises(ArrowMTError, match="cannot replace a folder with a file; nothing was changed"), staged:
        staged.publish(["a.arrow", "b.arrow"])
    assert sorted(p.name for p in target.iterdir()) == ["b.arrow"]
    assert sorted(tmp_path.iterdir()) == [target]


def test_staging_inside_target_when_its_parent_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out"
    target.mkdir()
    real = tempfile.mkdtemp

    def refuse_parent(prefix: str, dir: Path) -> str:
        if Path(dir) == tmp_path:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(prefix=prefix, dir=dir)

    monkeypatch.setattr(tempfile, "mkdtemp", refuse_parent)
    staged = stage(target, {"x.arrow": b"x"})
    assert staged.path.parent == target and staged.path.name.startswith(STAGING_MARK)
    staged.publish(["x.arrow"])
    assert sorted(p.name for p in target.iterdir()) == ["x.arrow"]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_staging_of_dead_runs_removed(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    dead, alive = dead_pid(), os.getppid()
    stale = [tmp_path / f".out{STAGING_MARK}{dead}-abc", target / f"{STAGING_MARK}{dead}-def"]
    kept = [
        tmp_path / f".out{STAGING_MARK}{alive}-abc",  # a run that is still going
        tmp_path / f".out{STAGING_MARK}notapid",  # not named by arrowmt
        tmp_path / f".other{STAGING_MARK}{dead}-abc",  # another target's
    ]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "x.arrow.part").write_bytes(b"partial")
    assert remove_stale_staging(target) == sorted(stale)
    assert all(folder.is_dir() for folder in kept)
    stale[1].mkdir()
    with StagedOutput.begin(target, overwrite=False):  # a killed run's staging is not content of the target
        assert not stale[1].exists()


def test_ctrl_c_while_publishing_waits_until_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "gone.arrow").write_bytes(b"old")
    staged = stage(target, {name: name.encode() for name in ("a.arrow", "b.arrow", "m.json")})
    real = os.replace

    def interrupted(src: Path, dst: Path) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # a handler would run here
        real(src, dst)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        staged.publish(["a.arrow", "b.arrow", "m.json"], remove={"gone.arrow"})
    assert sorted(p.name for p in target.iterdir()) == ["a.arrow", "b.arrow", "m.json"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deferred_signals_delivered_once_to_the_previous_handler() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, _frame: seen.append(number))
    try:
        with deferred_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            assert seen == []
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------- OutputFolder on top of a staged folder

WORKER = """
import sys
import numpy as np
from arrowmt.reading._ragged import Ragged
from arrowmt.writing._writer import ColumnData, write_split
ragged = Ragged.from_lengths(np.array([2, 3]), np.array([5, 6, 7, 8, 2], dtype=np.int32))
column = ColumnData(ragged, None, "dict.txt", "0" * 64, 10, "worker")
write_split(sys.argv[1], "train1", {"tokens": column})
"""


def test_worker_process_writes_into_the_staging_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = OutputFolder.prepare(out, {"tokens": None}, "synthetic", overwrite=False, progress=False)
    folder.write("train", {"tokens": small_column()}, SpecialIds())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    subprocess.run([sys.executable, "-c", WORKER, str(folder.split_file("train1"))], check=True, env=env)
    assert folder.record("train1").rows == 2
    assert not out.exists()  # nothing published yet
    manifest = folder.finish()
    assert manifest.shards("train") == ["train", "train1"]
    assert len(open_split(out, "train")) == 102
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("name", ["../x", "/abs/train", ".hidden", "a/b", ""])
def test_output_folder_refuses_names_that_are_paths(tmp_path: Path, name: str) -> None:
    with OutputFolder.prepare(tmp_path / "out", {"tokens": None}, "synthetic", False, False) as folder:
        with pytest.raises(InvalidParameterError, match="expected a plain file name"):
            folder.write(name, {"tokens": small_column()}, SpecialIds())
        if "/" in name:  # a language becomes part of dict.<lang>.txt
            with pytest.raises(InvalidParameterError, match="expected a plain file name"):
                folder.add_dictionary(name, Dictionary())
    assert list(tmp_path.iterdir()) == []


def test_unfinished_output_folder_is_cleaned_when_dropped(tmp_path: Path) -> None:
    folder = OutputFolder.prepare(tmp_path / "out", {"tokens": None}, "synthetic", False, False)
    folder.write("train", {"tokens": small_column()}, SpecialIds())
    staging = folder.path
    assert (staging / "train.arrow").is_file()
    del folder
    gc.collect()
    assert not staging.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("converter", ["text", "fairseq"])
def test_converters_change_nothing_before_publishing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, converter: str
) -> None:
    """Every converter writes through OutputFolder: until the final renames, OUT is exactly as before."""

    def convert(out: Path) -> None:
        if converter == "text":
            val = str(MULTI30K / "val")
            arrowmt.convert_text(val, out, src_lang="de", tgt_lang="en", overwrite=True, progress=False)
        else:
            arrowmt.convert_fairseq(fairseq_fixture() / "mmap", out, overwrite=True, progress=False)

    out = tmp_path / "out"
    convert(out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("publishing refused")

    monkeypatch.setattr(StagedOutput, "publish", refuse)
    for target in (out, tmp_path / "fresh"):
        with pytest.raises(RuntimeError, match="publishing refused"):
            convert(target)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, no fresh folder


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # the point of the test
def test_a_lock_released_by_a_thread_is_free_while_a_child_forked_meanwhile_lives(tmp_path: Path) -> None:
    """A thread writes a cache file under its lock while a DataLoader forks its workers: the children share the
    open lock file, so closing it alone would leave the lock held for as long as they live (the next epoch's
    copy would wait forever). Releasing it explicitly frees it at once."""
    import threading

    from arrowmt.files import exclusive_lock

    lock = tmp_path / "copy.lock"
    held, done = threading.Event(), threading.Event()

    def writer() -> None:
        with exclusive_lock(lock):
            held.set()
            done.wait()

    thread = threading.Thread(target=writer)
    thread.start()
    held.wait()
    child = os.fork()
    if child == 0:  # a worker that lives on, holding a copy of the open lock file
        time.sleep(3)
        os._exit(0)
    try:
        done.set()
        thread.join()
        start = time.monotonic()
        with exclusive_lock(lock):
            assert time.monotonic() - start < 1
    finally:
        os.waitpid(child, 0)
