"""Run a command with a memory budget that includes the page cache: a corpus larger than the memory a node has for it.

    python benchmarks/memory_budget.py LIMIT_MB [--evict PATH ...] -- COMMAND ...

The files under each ``--evict`` path are dropped from the page cache first (``posix_fadvise(DONTNEED)``), then
COMMAND runs in a memory control group limited to LIMIT_MB, page cache included, so that whatever it reads beyond
the budget evicts what it read before, as on a node whose RAM is smaller than the corpus. The group is made with
the first of these that works here:

* cgroup v2 (``/sys/fs/cgroup/cgroup.controllers`` lists ``memory``; root): ``memory.max``, no swap;
* cgroup v1 (``/sys/fs/cgroup/memory``; root): ``memory.limit_in_bytes``;
* ``systemd-run --user --scope -p MemoryMax=...`` (a user session of systemd, no root needed).

Where none does, it exits with status 3 and says why (the benchmarks that need a budget report that row as not
run). After COMMAND, the group's pages read in, major faults and page cache held go to standard error, one
``key value`` a line; COMMAND's exit status is this script's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
NO_BUDGET = 3  # exit status when no memory budget can be made here
REPORTED = ("pgpgin", "pgmajfault", "total_cache", "file", "workingset_refault_file")


def evict(paths: list[Path]) -> int:
    """Drop every file under ``paths`` from the page cache; the bytes covered."""
    covered = 0
    for root in paths:
        files = [p for p in root.rglob("*") if p.is_file()] if root.is_dir() else [root]
        for path in files:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                covered += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return covered


def v2_group(limit: int) -> Path | None:
    """A cgroup v2 group limited to ``limit`` bytes (None where v2 or its memory controller is not writable)."""
    controllers = CGROUP / "cgroup.controllers"
    if not controllers.exists() or "memory" not in controllers.read_text().split():
        return None
    group = CGROUP / f"arrowmt-budget-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.max").write_text(f"{limit}\n")
        if (group / "memory.swap.max").exists():
            (group / "memory.swap.max").write_text("0\n")
    except OSError:
        _remove(group)
        return None
    return group


def v1_group(limit: int) -> Path | None:
    """A cgroup v1 memory group limited to ``limit`` bytes (None where v1's memory controller is not writable)."""
    root = CGROUP / "memory"
    if not root.is_dir() or (CGROUP / "cgroup.controllers").exists():
        return None
    group = root / f"arrowmt-budget-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(f"{limit}\n")
    except OSError:
        _remove(group)
        return None
    return group


def _remove(group: Path) -> None:
    with contextlib.suppress(OSError):  # still busy, or never made: nothing to undo
        group.rmdir()


def run_in_group(group: Path, command: list[str]) -> int:
    """Run ``command`` inside ``group`` (it joins the group before exec), report the group's statistics."""
    enter = ["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec "$@"', "budget", *command]
    child = subprocess.Popen(enter)
    forward = lambda signum, frame: child.send_signal(signum)  # noqa: E731
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        status = child.wait()
    finally:
        report(group)
        _remove(group)
    return status


def report(group: Path) -> None:
    stat = group / "memory.stat"
    if not stat.exists():
        return
    for line in stat.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key in REPORTED:
            print(f"{key} {value}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        usage="%(prog)s LIMIT_MB [--evict PATH ...] -- COMMAND ...",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("limit_mb", type=int, help="memory budget in MiB, page cache included")
    p.add_argument("--evict", type=Path, action="append", default=[], help="drop these files from the cache first")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = p.parse_args(argv[:split]), argv[split + 1 :]
    if not command:
        p.error("expected a command after --")
    limit = args.limit_mb << 20
    evict(args.evict)
    group = v2_group(limit) or v1_group(limit)
    if group is not None:
        return run_in_group(group, command)
    scope = ["systemd-run", "--user", "--scope", "--quiet", "-p", f"MemoryMax={limit}", "-p", "MemorySwapMax=0"]
    if shutil.which("systemd-run") and subprocess.run([*scope, "true"], capture_output=True).returncode == 0:
        return subprocess.run([*scope, *command]).returncode
    print(
        "memory_budget: cannot limit memory here: no writable cgroup v2 memory controller or cgroup v1 memory "
        "hierarchy under /sys/fs/cgroup (run as root), and no systemd user session (systemd-run --user)",
        file=sys.stderr,
    )
    return NO_BUDGET


if __name__ == "__main__":
    raise SystemExit(main())
