"""Crash-safe output: a killed, interrupted or failing writer never leaves a partial split file.

Every writer goes through ``arrowmt.format._atomic.atomic_path``: data goes to a
``.arrowmt-tmp-*`` file beside the target, is fsynced and renamed over the target
only when complete. A SIGKILL can leave that temp file behind (nothing runs on
SIGKILL); ``remove_stale_temps`` and the next conversion's ``OutputFolder.prepare``
delete it. Tests run as root, so a read-only folder is simulated (a path under a
*file*, ``/proc``, or ``os.replace``/writes raising ``ENOSPC``).
"""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from arrowmt.converters._output import OutputFolder

from arrowmt._errors import ArrowMTError, FormatError, InputDataError, OutputExistsError
from arrowmt.format._atomic import TEMP_PREFIX, atomic_path, remove_stale_temps
from arrowmt.format._ragged import Ragged
from arrowmt.format._reader import SplitFile
from arrowmt.format._writer import ColumnData, write_split

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 1000
BIG_ROWS = 2_000_000
KILL_AFTER_BYTES = 1 << 20

# Writes 2M random rows in record batches of 16 rows: seconds of work, killed long before the end.
BIG_WRITER = f"""
import sys
import numpy as np
from arrowmt.format._ragged import Ragged
from arrowmt.format._writer import ColumnData, write_split
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
    assert folder.path == out


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


def test_bad_token_mid_write_leaves_nothing(tmp_path: Path) -> None:
    """write_split checks ids batch by batch: the error comes after earlier batches were written."""
    column = small_column(rows=500)
    values = np.array(column.ragged.values)
    values[-1] = VOCAB + 7
    bad = ColumnData(Ragged(column.ragged.offsets, values), None, "dict.txt", "0" * 64, VOCAB, "bad input")
    with pytest.raises(InputDataError, match=f"token id {VOCAB + 7} is outside the dictionary"):
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
