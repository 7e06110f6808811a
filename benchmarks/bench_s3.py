"""A corpus read from S3 (a local moto server) through a node-local cache of 25% of its size: arrowmt vs the peers.

Systems, each reading the same rows from the same bucket, 2 epochs, shuffled, one process (one rank),
``num_workers=0``, in a fresh process with a fresh cache folder:

* ``arrowmt``: the arrowmt folder as it is (``train.arrow`` + its block index ``train.arrow.blocks`` +
  ``arrowmt.json`` + dictionaries), opened by URL with a node-local cache: :func:`open_arrowmt` (**the
  hook for the arrowmt row**, issue 18's interface; a row whose reader fails is reported with its error
  and the other rows are still printed);
* ``arrowmt-ordered``: the same reader on the copy ``arrowmt order`` makes of that folder
  (``--max-tokens 4096 --seed 1``, the sampler's options): each planned batch's rows stored together, the
  same batches;
* ``arrowmt-window``: the same copy, the same batches, epochs shuffled within windows
  (``TokenBatchSampler(shuffle_window=WINDOW)``: each window of ~``WINDOW`` batches is drawn from 16
  stretches of the copy, as the peers shuffle within the shards they hold): long range requests;
* ``streaming``: Mosaic ``streaming`` 0.13.0: MDS shards (``MDSWriter``, columns ``source``/``target``
  ``ndarray:int32``, no compression) read by ``StreamingDataset(remote=..., local=..., cache_limit=...,
  shuffle=True, batch_size=R)``;
* ``litdata``: ``litdata`` 0.2.76: chunks written by ``optimize()`` (samples ``{"source", "target"}``
  as int32 arrays, no compression) read by ``StreamingDataset(Dir(cache, url), max_cache_size=...,
  shuffle=True)``.

Batches: arrowmt's are its own (``TokenBatchSampler(max_tokens=4096)``: length-bucketed, about 4096
tokens each). The peers have no token-budget batching: they get a fixed ``R`` rows per batch, ``R`` =
the corpus's rows divided by arrowmt's number of batches at ``max_tokens=4096`` (computed here from the
local corpus), so every system delivers the same number of batches and the same mean number of real
tokens per batch (the peers' batches are padded more, since their rows are not grouped by length).
Every batch is finished the same way, a fairseq-style padded dict (``benchmarks/run_one.py``'s
``pad_fairseq_flat`` for the peers, ``arrowmt.FairseqCollater`` for arrowmt).

Cache: ``--cache-frac`` (0.25) of the bytes that system stores in the bucket (its own corpus copy; the
three copies are within a few % of each other). Shards/chunks are ``--shard-mb`` MB (8: Mosaic refuses a
``cache_limit`` under 4 shards, so 64 MB shards would not fit a 55 MB cache at 1M pairs).

Measured, per epoch: bytes the server sent (GET bodies, the server's counters: ``s3_server.py``), GET
requests, tokens/s (real tokens, source + target, per wall second of the epoch), time to the first batch
(epoch 1: from the constructor, after the imports; epoch 2: from ``iter()``), the reader's CPU seconds and
the server's, the cache folder's size at the end, and the process's private memory from
``/proc/self/smaps_rollup`` (USS = Private_Clean + Private_Dirty, Private_Dirty alone, RssAnon; at the end
of the epoch and the peak, sampled every 0.2 s). Every run also checks it saw every row once per epoch
(row and token counts against the corpus's).

Run it in ``.venv-peers`` (``benchmarks/setup-peers.sh``)::

    .venv-peers/bin/python benchmarks/bench_s3.py prepare --data /work/main/bench-data/synth-1000000
    .venv-peers/bin/python benchmarks/bench_s3.py run --data /work/main/bench-data/synth-1000000 --repeat 2 \
        --epoch-seconds arrowmt=120     # arrowmt's epochs cut after 120 s, counts extrapolated (~)
    .venv-peers/bin/python benchmarks/bench_s3.py table benchmarks/results/s3-1000000.json
    .venv-peers/bin/python benchmarks/bench_s3.py serve --data ...   # the bucket, for trying a reader by hand

``run`` writes ``benchmarks/results/s3-ROWS.json`` (``--json``) and prints one table.

Against another commit (a change to the read path is measured against the commit before it): ``--base WORKTREE``
runs each arrowmt system also with that checkout's arrowmt, interleaved, as ``SYSTEM@base``, on that commit's own
copies of the corpus (its format may differ: ``prepare --base`` converts DATA/data-bin with it into
DATA/base-COMMIT)::

    git worktree add --detach bench-data/ab/577e3ab 577e3ab
    .venv-peers/bin/python benchmarks/bench_s3.py prepare --data DATA --base bench-data/ab/577e3ab
    .venv-peers/bin/python benchmarks/bench_s3.py run --data DATA --systems arrowmt-window litdata \
        --base bench-data/ab/577e3ab --repeat 3

Every system's reader imports all of arrowmt's modules before its baseline (but the integrations), so that the
private memory it adds is data on every commit, not the code a commit happens to load on open.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BASE_ENV = "ARROWMT_BENCH_BASE"  # a checkout of another commit, for the "@base" systems (``run --base``)
ROOT = Path(os.environ.get(BASE_ENV) or HERE.parent)
sys.path.insert(0, str(ROOT))  # run from a checkout: arrowmt (this one's, or the base commit's)


def _alias_converters(root: Path) -> None:
    """Before 0603b00 the checkout kept ``converters/`` at the top, installed as ``arrowmt.converters``
    (pyproject's package-dir): import it under that name from ``root``."""
    import importlib.util

    folder = root / "converters"
    if not folder.is_dir() or (root / "arrowmt" / "converters").is_dir():
        return
    spec = importlib.util.spec_from_file_location(
        "arrowmt.converters", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["arrowmt.converters"] = module
    spec.loader.exec_module(module)


_alias_converters(ROOT)
sys.path.insert(0, str(HERE))  # run_one's padding

BUCKET = "arrowmt-bench"
SYSTEMS = ("arrowmt", "arrowmt-ordered", "arrowmt-window", "streaming", "litdata")
BASE_SUFFIX = "@base"  # a system read with the arrowmt of ``run --base`` (a worktree of another commit)
PREFIX = {  # folder under DATA and in the bucket
    "arrowmt": "arrowmt",
    "arrowmt-ordered": "arrowmt-ordered",
    "arrowmt-window": "arrowmt-ordered",  # the same copy, read in windows
    "streaming": "mds",
    "litdata": "litdata",
}
MAX_TOKENS = 4096
WINDOW = 256  # arrowmt-window's shuffle_window, batches (runs of 16 batches: ~0.25 MB stretches of the copy)
SEED = 1
CREDENTIALS = {  # moto accepts any; set so that no SDK looks further (files, instance metadata)
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


# ---------------------------------------------------------------- the arrowmt row (HOOK)


def open_arrowmt(
    url: str, cache_dir: str, cache_limit: int, rows_per_batch: int, shuffle_window: int | None = None
) -> tuple[Any, Any]:
    """HOOK for the arrowmt row: ``(loader, set_epoch)`` for the corpus at ``url`` (``s3://BUCKET/arrowmt``).

    The interface of issue 18: ``arrowmt.open_dataset(url, split, cache_dir=, cache_limit=)``, the
    endpoint and credentials from the environment (``AWS_ENDPOINT_URL`` = this benchmark's server,
    ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_DEFAULT_REGION``), then the usual
    ``TokenBatchSampler`` + ``FairseqCollater`` in a ``DataLoader``. ``rows_per_batch`` (the peers'
    fixed batch) is not used: arrowmt batches by tokens. Before the feature, this raised (a ``TypeError``
    on ``cache_dir``) and ``run`` reported the row with that error. A folder converted before block indexes
    existed needs ``arrowmt index DATA/arrowmt`` before ``run`` (the upload takes ``train.arrow.blocks``).
    """
    from torch.utils.data import DataLoader

    import arrowmt

    dataset = arrowmt.open_dataset(url, "train", cache_dir=cache_dir, cache_limit=cache_limit)
    sampler = arrowmt.TokenBatchSampler(
        dataset, max_tokens=MAX_TOKENS, seed=SEED, shuffle=True, shuffle_window=shuffle_window
    )
    collater = arrowmt.FairseqCollater(dataset.special_ids)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collater, num_workers=0)
    return loader, sampler.set_epoch


# ---------------------------------------------------------------- the peers


def allow_cpu_torchvision() -> None:
    """Let ``import torchvision`` work next to the CPU torch (``import streaming`` imports it).

    PyPI's torchvision wheels are CUDA builds: their ``_C`` library needs ``libtorch_cuda.so`` and does
    not load next to ``torch==2.13.0+cpu``, and then ``torchvision/_meta_registrations.py`` fails
    registering fake kernels for the ops ``torchvision::nms`` / ``qnms`` that the library would have
    defined. Defining those two schemas first lets the import finish; no torchvision op is used here.
    """
    import torch

    if hasattr(torch.ops.torchvision, "nms"):
        return
    try:
        import torchvision  # noqa: F401

        return
    except RuntimeError:
        pass
    for name in list(sys.modules):  # the half-imported package
        if name == "torchvision" or name.startswith("torchvision."):
            del sys.modules[name]
    global _TORCHVISION_SCHEMAS  # keep the library object alive: its definitions die with it
    _TORCHVISION_SCHEMAS = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        _TORCHVISION_SCHEMAS.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


_TORCHVISION_SCHEMAS = None


def collate_rows(samples: list[dict]) -> dict:
    """The peers' ``collate_fn``: rows ``{"source", "target"}`` -> fairseq's padded batch (as arrowmt's)."""
    import numpy as np
    from run_one import pad_fairseq_flat

    src = [np.asarray(s["source"]) for s in samples]
    tgt = [np.asarray(s["target"]) for s in samples]
    src_len = np.fromiter((a.shape[0] for a in src), dtype=np.int64, count=len(src))
    tgt_len = np.fromiter((a.shape[0] for a in tgt), dtype=np.int64, count=len(tgt))
    ids = np.arange(len(samples), dtype=np.int64)  # the shards keep no row id
    return pad_fairseq_flat(ids, np.concatenate(src), src_len, np.concatenate(tgt), tgt_len)


def open_streaming(
    url: str, cache_dir: str, cache_limit: int, rows_per_batch: int, shuffle_block: int = 0
) -> tuple[Any, Any]:
    """Mosaic streaming: ``StreamingDataset`` over the MDS shards; S3 endpoint from ``S3_ENDPOINT_URL``.

    ``shuffle_block``: ``shuffle_block_size`` (rows; 0: streaming's default, max(4M / nodes, 2**18) rows).
    Its shuffle (``py1e``) draws each sample from a block of that many rows spread over the block's
    shards, so a block whose shards do not fit in ``cache_limit`` evicts a shard for most samples.
    """
    allow_cpu_torchvision()
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    clean_stale_shared_memory()
    dataset = StreamingDataset(
        remote=url,
        local=cache_dir,
        cache_limit=cache_limit,
        shuffle=True,
        shuffle_seed=SEED,
        shuffle_block_size=shuffle_block or None,
        batch_size=rows_per_batch,
    )
    loader = DataLoader(dataset, batch_size=rows_per_batch, collate_fn=collate_rows, num_workers=0)
    return loader, None  # streaming counts its epochs itself, one per iter()


def open_litdata(url: str, cache_dir: str, cache_limit: int, rows_per_batch: int) -> tuple[Any, Any]:
    """litdata: ``StreamingDataset`` over the optimized chunks, endpoint in ``storage_options``."""
    allow_cpu_torchvision()
    from litdata import StreamingDataset
    from litdata.streaming import downloader
    from litdata.streaming.cache import Dir
    from torch.utils.data import DataLoader

    # litdata fetches chunks with obstore, whose client refuses http:// unless told; litdata passes its own
    # client options (so AWS_ALLOW_HTTP is not read) and has no setting for it: add it to those options.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"

    options = {
        "endpoint_url": os.environ["AWS_ENDPOINT_URL"],
        "aws_access_key_id": os.environ["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "region_name": os.environ["AWS_DEFAULT_REGION"],
    }
    dataset = StreamingDataset(
        input_dir=Dir(path=cache_dir, url=url),
        max_cache_size=cache_limit,
        shuffle=True,
        seed=SEED,
        storage_options=options,
    )
    loader = DataLoader(dataset, batch_size=rows_per_batch, collate_fn=collate_rows, num_workers=0)
    return loader, dataset.set_epoch


OPENERS = {
    "arrowmt": open_arrowmt,
    "arrowmt-ordered": open_arrowmt,
    "arrowmt-window": lambda *args: open_arrowmt(*args, shuffle_window=WINDOW),
    "streaming": open_streaming,
    "litdata": open_litdata,
}


# ---------------------------------------------------------------- the peers' copies (prepare)


def arrow_rows(path: Path, start: int = 0, stop: int | None = None) -> Any:
    """(source, target) int32 arrays of rows ``[start, stop)`` of an arrowmt split file (an Arrow IPC stream)."""
    import numpy as np
    import pyarrow as pa

    row = 0
    with pa.memory_map(str(path)) as source:
        for batch in pa.ipc.open_stream(source):
            n = batch.num_rows
            if stop is not None and row >= stop:
                return
            if row + n <= start:
                row += n
                continue
            cols = []
            for name in ("source", "target"):
                arr = batch.column(name)
                cols.append((arr.offsets.to_numpy(), arr.values.to_numpy()))
            (so, sv), (to, tv) = cols
            lo, hi = max(start - row, 0), n if stop is None else min(stop - row, n)
            for i in range(lo, hi):
                yield np.array(sv[so[i] : so[i + 1]], dtype=np.int32), np.array(tv[to[i] : to[i + 1]], dtype=np.int32)
            row += n


def write_mds(split_file: Path, out: Path, shard_bytes: int) -> None:
    allow_cpu_torchvision()
    from streaming import MDSWriter

    columns = {"source": "ndarray:int32", "target": "ndarray:int32"}
    with MDSWriter(out=str(out), columns=columns, size_limit=shard_bytes, compression=None) as writer:
        for src, tgt in arrow_rows(split_file):
            writer.write({"source": src, "target": tgt})


def _litdata_rows(span: tuple[str, int, int]) -> Any:
    """``optimize()``'s ``fn``: the rows of one span of the split file, one sample each."""
    path, start, stop = span
    for src, tgt in arrow_rows(Path(path), start, stop):
        yield {"source": src, "target": tgt}


def write_litdata(split_file: Path, out: Path, shard_bytes: int, rows: int) -> None:
    allow_cpu_torchvision()
    from litdata import optimize

    step = 100_000
    spans = [(str(split_file), a, min(a + step, rows)) for a in range(0, rows, step)]
    optimize(
        fn=_litdata_rows,
        inputs=spans,
        output_dir=str(out),
        chunk_bytes=shard_bytes,
        num_workers=1,
        keep_data_ordered=True,
        mode="overwrite",
        verbose=False,
    )


def corpus_info(data: Path) -> dict[str, Any]:
    return json.loads((data / "corpus.json").read_text())


def prepare_base(args: argparse.Namespace) -> int:
    """The base commit's folders (``prepare --base``): converted from DATA/data-bin and ordered with its arrowmt
    (in a process that imports it: ``convert-base``)."""
    out = base_data(args.data, args.base)
    if (out / PREFIX["arrowmt-ordered"] / "arrowmt.json").exists() and not args.force:
        print(f"{out}: exists")
        return 0
    t0 = time.perf_counter()
    command = [sys.executable, str(Path(__file__).resolve()), "convert-base", str(args.data), str(out)]
    subprocess.run(command, env={**os.environ, BASE_ENV: str(args.base.resolve())}, check=True)
    print(f"{out}: the base's copies in {time.perf_counter() - t0:.0f} s")
    return 0


def convert_base(data: Path, out: Path) -> int:
    """``out``/arrowmt and its copy in plan order, by the arrowmt imported (the base's, see :func:`prepare_base`)."""
    import arrowmt

    arrowmt.convert_fairseq(data / "data-bin", out / "arrowmt", overwrite=True, progress=False)
    ordered = out / PREFIX["arrowmt-ordered"]
    arrowmt.order_copy(out / "arrowmt", ordered, max_tokens=MAX_TOKENS, seed=SEED, overwrite=True)
    return 0


def prepare(args: argparse.Namespace) -> int:
    if args.base is not None:
        return prepare_base(args)
    info = corpus_info(args.data)
    ordered = args.data / PREFIX["arrowmt-ordered"]
    if args.force or not (ordered / "arrowmt.json").exists():
        import arrowmt

        t0 = time.perf_counter()
        arrowmt.order_copy(args.data / "arrowmt", ordered, max_tokens=MAX_TOKENS, seed=SEED, overwrite=True)
        print(f"{ordered}: copy in plan order in {time.perf_counter() - t0:.0f} s")
    split_file = args.data / "arrowmt" / "train.arrow"
    shard_bytes = int(args.shard_mb * 1_000_000)
    for system, writer in (("streaming", write_mds), ("litdata", write_litdata)):
        out = args.data / PREFIX[system]
        stamp = out / ".bench-s3.json"
        want = {"rows": info["rows"], "shard_bytes": shard_bytes}
        if stamp.exists() and json.loads(stamp.read_text()) == want and not args.force:
            print(f"{out}: exists ({want})")
            continue
        if out.exists():
            shutil.rmtree(out)
        t0 = time.perf_counter()
        if system == "litdata":
            writer(split_file, out, shard_bytes, info["rows"])
        else:
            writer(split_file, out, shard_bytes)
        stamp.write_text(json.dumps(want))
        print(f"{out}: {system} copy in {time.perf_counter() - t0:.0f} s, {_folder_bytes(out) / 1e6:.1f} MB")
    return 0


def _uploaded_files(folder: Path) -> list[Path]:
    """The files of a corpus copy that go to the bucket (no hidden files or folders: local caches, stamps)."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in _uploaded_files(folder))


# ---------------------------------------------------------------- the server and the bucket


class Server:
    """``s3_server.py`` in a process of its own (stops with this process, or after ``max_seconds``)."""

    def __init__(self, max_seconds: float) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="arrowmt-s3-"))
        ready = self.tmp / "ready.json"
        self.log = open(self.tmp / "server.log", "w")  # noqa: SIM115
        command = [sys.executable, str(HERE / "s3_server.py"), "--ready-file", str(ready)]
        command += ["--max-seconds", str(max_seconds), "--parent-pid", str(os.getpid())]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"s3_server did not start: {(self.tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.1)
        found = json.loads(ready.read_text())
        self.endpoint, self.pid = found["endpoint"], found["pid"]
        if not self.endpoint.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"unexpected endpoint {self.endpoint}")

    def env(self) -> dict[str, str]:
        """The environment a reader gets: this server as the S3 endpoint for every client in use."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "S3_ENDPOINT_URL": self.endpoint}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def counters(endpoint: str, reset: bool = False) -> dict[str, Any]:
    """The server's counters (``reset``: zero them and return the zeroed state)."""
    url = endpoint + "/__counters" + ("/reset" if reset else "")
    request = urllib.request.Request(url, method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def s3_filesystem(endpoint: str) -> Any:
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        secret_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region=CREDENTIALS["AWS_DEFAULT_REGION"],
        endpoint_override=endpoint,
        allow_bucket_creation=True,
        request_timeout=900.0,  # moto joins a multi-GB multipart upload in one request (minutes at 12.6M pairs)
    )


def base_data(data: Path, base: Path) -> Path:
    """Where ``prepare --base`` puts the base commit's arrowmt folders (its format may not be this one's)."""
    return data / f"base-{commits(base)['base']}"


def folder_of(data: Path, system: str, base: Path | None) -> Path:
    """The local corpus folder ``system`` reads (an "@base" system: the base commit's copy)."""
    if system.endswith(BASE_SUFFIX):
        assert base is not None
        return base_data(data, base) / PREFIX[system.removesuffix(BASE_SUFFIX)]
    return data / PREFIX[system]


def prefix_of(system: str) -> str:
    """Where in the bucket ``system``'s copy is."""
    if system.endswith(BASE_SUFFIX):
        return "base/" + PREFIX[system.removesuffix(BASE_SUFFIX)]
    return PREFIX[system]


def upload(data: Path, endpoint: str, systems: list[str], base: Path | None = None) -> dict[str, int]:
    """Copy each system's corpus folder to ``s3://BUCKET/PREFIX``; bytes stored per system."""
    s3 = s3_filesystem(endpoint)
    s3.create_dir(BUCKET)
    stored = {}
    for system in with_base(systems, base):
        folder = folder_of(data, system, base)
        if not folder.is_dir():
            hint = f" --base {base}" if system.endswith(BASE_SUFFIX) else ""
            raise SystemExit(f"{folder}: missing (run `bench_s3.py prepare --data {data}{hint}` first)")
        total = 0
        for path in _uploaded_files(folder):
            key = f"{BUCKET}/{prefix_of(system)}/{path.relative_to(folder).as_posix()}"
            with open(path, "rb") as source, s3.open_output_stream(key) as sink:
                shutil.copyfileobj(source, sink, 1 << 24)
            total += path.stat().st_size
        stored[system] = total
    return stored


# ---------------------------------------------------------------- one reader, in a fresh process


def smaps() -> dict[str, float]:
    """MiB: USS (Private_Clean + Private_Dirty), Private_Dirty, Private_Clean, Pss, Rss, RssAnon."""
    out: dict[str, float] = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Dirty", "Private_Clean"):
                out[key] = int(rest.split()[0]) / 1024
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                out["RssAnon"] = int(line.split()[1]) / 1024
    out["USS"] = out["Private_Dirty"] + out["Private_Clean"]
    return out


class Peak:
    """The largest of each ``smaps()`` number, sampled every ``interval`` s from a thread."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak = smaps()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        now = smaps()
        self.peak = {k: max(v, self.peak.get(k, 0.0)) for k, v in now.items()}

    def take(self) -> dict[str, float]:
        """The peaks since the last ``take`` (then start again from now)."""
        self.sample()
        peak, self.peak = self.peak, smaps()
        return peak

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one by default), from ``/proc/PID/stat``."""
    with open(f"/proc/{pid or 'self'}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def du(folder: str) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # a shard evicted meanwhile
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def load_all(package: Any) -> None:
    """Import every module of arrowmt but its integrations and command line (which modules a read loads differs
    from commit to commit: a corpus by URL loads the remote cache's on open)."""
    import pkgutil

    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not any(part in module.name for part in (".integrations", "._cli", ".__main__")):
            __import__(module.name)


def reader(args: argparse.Namespace) -> int:
    """Run one system for ``--epochs`` epochs and print its measurements as JSON (the last stdout line)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    allow_cpu_torchvision()  # every system imports the same libraries: one baseline for the memory growth
    import litdata  # noqa: F401
    import streaming  # noqa: F401

    import arrowmt

    if not Path(arrowmt.__file__).resolve().is_relative_to(ROOT.resolve()):
        raise SystemExit(f"imported {arrowmt.__file__}, expected the arrowmt of {ROOT}")
    load_all(arrowmt)  # loaded on first use: load it now, like the peers' imports above (the growth: data, not code)
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    server_pid = args.server_pid
    base = smaps()
    peak = Peak()

    def server_state() -> tuple[dict[str, Any], float]:
        return counters(endpoint)["total"], cpu_seconds(server_pid)

    def diff(a: tuple[dict[str, Any], float], b: tuple[dict[str, Any], float]) -> dict[str, Any]:
        return {
            "get_bytes": b[0]["get_bytes"] - a[0]["get_bytes"],
            "get_requests": b[0]["get_requests"] - a[0]["get_requests"],
            "requests": b[0]["requests"] - a[0]["requests"],
            "server_cpu_s": round(b[1] - a[1], 2),
        }

    url = f"s3://{BUCKET}/{args.bucket_prefix or PREFIX[args.system]}"
    s0, c0, t0 = server_state(), cpu_seconds(), time.perf_counter()
    extra = {"shuffle_block": args.shuffle_block} if args.system == "streaming" else {}
    loader, set_epoch = OPENERS[args.system](url, args.cache_dir, args.cache_limit, args.rows_per_batch, **extra)
    setup_s = time.perf_counter() - t0
    s1 = server_state()
    result: dict[str, Any] = {
        "system": args.system,
        "setup_s": round(setup_s, 3),
        "setup": {**diff(s0, s1), "cpu_s": round(cpu_seconds() - c0, 2), "memory_mib": smaps()},
        "cache_limit": args.cache_limit,
        "epochs": [],
        "memory_base_mib": base,
    }
    for epoch in range(1, args.epochs + 1):
        if set_epoch is not None:
            set_epoch(epoch)
        e0, c0 = server_state(), cpu_seconds()
        t_start = t0 if epoch == 1 else time.perf_counter()  # epoch 1: time to first batch counts the setup
        t1 = time.perf_counter()
        first = None
        rows = batches = src_tokens = tgt_tokens = 0
        cut = False
        for batch in loader:
            if first is None:
                first = time.perf_counter() - t_start
            batches += 1
            rows += int(batch["nsentences"])
            src_tokens += int(batch["net_input"]["src_lengths"].sum())
            tgt_tokens += int(batch["ntokens"])
            if args.max_batches and batches >= args.max_batches:
                break
            if args.epoch_seconds and time.perf_counter() - t1 > args.epoch_seconds:
                cut = True
                break  # a partial epoch: its bytes and time per row are extrapolated in the table
        wall = time.perf_counter() - t1
        e1 = server_state()
        result["epochs"].append(
            {
                "epoch": epoch,
                "wall_s": round(wall, 3),
                "first_batch_s": round(first if first is not None else float("nan"), 3),
                "batches": batches,
                "rows": rows,
                "src_tokens": src_tokens,
                "tgt_tokens": tgt_tokens,
                "tokens_per_s": (src_tokens + tgt_tokens) / wall,
                "partial": cut,
                "cpu_s": round(cpu_seconds() - c0, 2),
                **diff(e0, e1),
                "cache_bytes": du(args.cache_dir),
                "memory_mib": smaps(),
                "memory_peak_mib": peak.take(),
            }
        )
        print(f"{args.system}: epoch {epoch} done in {wall:.1f} s", file=sys.stderr, flush=True)
    peak.stop()
    print(json.dumps(result))
    return 0


# ---------------------------------------------------------------- run: every system, a table, JSON


def rows_per_batch(data: Path) -> tuple[int, int]:
    """(rows per peer batch, arrowmt's batches per epoch at max_tokens=4096) for the local corpus."""
    import arrowmt

    dataset = arrowmt.open_dataset(data / "arrowmt", "train")
    sampler = arrowmt.TokenBatchSampler(dataset, max_tokens=MAX_TOKENS, seed=SEED, shuffle=True)
    n = len(sampler)
    return round(len(dataset) / n), n


def run_reader(
    system: str, args: argparse.Namespace, server: Server, limit: int, rows: int, shuffle_block: int
) -> dict[str, Any]:
    cache = Path(tempfile.mkdtemp(prefix=f"arrowmt-s3-{system}-", dir=args.cache_root))
    label, at_base = system, system.endswith(BASE_SUFFIX)  # "arrowmt-window@base": the base commit's arrowmt
    system = system.removesuffix(BASE_SUFFIX)
    command = [sys.executable, str(Path(__file__).resolve()), "reader", system]
    command += ["--cache-dir", str(cache), "--cache-limit", str(limit), "--rows-per-batch", str(rows)]
    command += ["--bucket-prefix", prefix_of(label)]
    command += ["--epochs", str(args.epochs), "--server-pid", str(server.pid), "--shuffle-block", str(shuffle_block)]
    if args.max_batches:
        command += ["--max-batches", str(args.max_batches)]
    budget = dict(item.split("=") for item in args.epoch_seconds).get(system)
    if budget:
        command += ["--epoch-seconds", budget]
    env = {**os.environ, **server.env(), BASE_ENV: str(args.base) if at_base else ""}
    counters(server.endpoint, reset=True)
    started = time.perf_counter()
    try:
        with subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        ) as p:
            try:
                out, err = p.communicate(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                fetched = counters(server.endpoint)["total"]
                return {"system": label, "error": f"not done in {args.timeout:.0f} s", "fetched": fetched}
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if p.returncode != 0:
        errors = [line for line in err.splitlines() if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", line)]
        last = errors[-1] if errors else f"exit {p.returncode}"
        print(f"{system}: exit {p.returncode}\n{err[-3000:]}", file=sys.stderr)
        return {"system": label, "error": last, "exit": p.returncode, "wall_s": time.perf_counter() - started}
    result = json.loads(out.strip().splitlines()[-1])
    result["system"] = label
    result["objects"] = counters(server.endpoint)["objects"]
    return result


def with_base(systems: list[str], base: Path | None) -> list[str]:
    """``systems``, each arrowmt one followed by itself read with the arrowmt at ``base`` (when given)."""
    if base is None:
        return systems
    return [s for system in systems for s in ([system, system + BASE_SUFFIX] if "arrowmt" in system else [system])]


def shuffle_block(args: argparse.Namespace, info: dict[str, Any], limit: int, stored: int) -> int:
    """streaming's ``shuffle_block_size``: ``--shuffle-block``, or (-1) the rows of half the cache limit."""
    if args.shuffle_block >= 0:
        return args.shuffle_block
    return max(1, int(info["rows"] * limit / stored / 2))


def check(result: dict[str, Any], info: dict[str, Any], max_batches: int) -> None:
    """Every epoch saw every row once (counts of rows and tokens); mismatches are recorded, not fatal."""
    if max_batches:
        return
    want = (info["rows"], info["tokens"]["de"], info["tokens"]["en"])
    for e in result.get("epochs", []):
        if e.get("partial"):
            continue
        got = (e["rows"], e["src_tokens"], e["tgt_tokens"])
        e["complete"] = got == want
        if got != want:
            print(f"{result['system']} epoch {e['epoch']}: rows/tokens {got}, corpus {want}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    info = corpus_info(args.data)
    rows, arrowmt_batches = (args.rows_per_batch, None) if args.rows_per_batch else rows_per_batch(args.data)
    server = Server(max_seconds=args.max_server_seconds)
    try:
        t0 = time.perf_counter()
        stored = upload(args.data, server.endpoint, args.systems, args.base)
        print(f"uploaded {stored} in {time.perf_counter() - t0:.0f} s to {server.endpoint}", file=sys.stderr)
        runs = []
        for k in range(args.repeat):
            for system in with_base(args.systems, args.base):
                copy = stored[system]
                limit = int(args.cache_frac * copy)
                result = run_reader(system, args, server, limit, rows, shuffle_block(args, info, limit, copy))
                result.update(repeat=k, stored_bytes=copy)
                check(result, info, args.max_batches)
                runs.append(result)
                print(f"{system} #{k + 1}: {result.get('error', 'done')}", file=sys.stderr, flush=True)
    finally:
        server.stop()
    header = {
        "rows": info["rows"],
        "tokens": info["tokens"],
        "stored_bytes": stored,
        "cache_frac": args.cache_frac,
        "shard_mb": args.shard_mb,
        "rows_per_batch": rows,
        "streaming_shuffle_block": shuffle_block(
            args, info, int(args.cache_frac * stored["streaming"]), stored["streaming"]
        )
        if "streaming" in stored
        else None,
        "arrowmt_batches_4096": arrowmt_batches,
        "epochs": args.epochs,
        "max_batches": args.max_batches,
        "epoch_seconds": args.epoch_seconds,
        "repeat": args.repeat,
        "base": str(args.base) if args.base else None,
        "commits": commits(args.base),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": _versions(),
    }
    text = table({"header": header, "runs": runs})
    print(text)
    path = args.json or HERE / "results" / f"s3-{info['rows']}.json"
    path.write_text(json.dumps({"header": header, "runs": runs}, indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def commits(base: Path | None) -> dict[str, str]:
    """The commit of this checkout and of ``base`` (the "@base" systems')."""
    found = {}
    for name, folder in (("head", HERE.parent), ("base", base)):
        if folder is not None:
            out = subprocess.run(
                ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            )
            found[name] = out.stdout.strip() or "?"
    return found


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    found = {}
    for name in ("arrowmt", "mosaicml-streaming", "litdata", "moto", "pyarrow", "torch"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = "-"
    return found


def _spread(values: list[float], fmt: str) -> str:
    """Median, and the range when there are several runs."""
    if not values:
        return ""
    mid = statistics.median(values)
    if len(values) == 1:
        return fmt.format(mid)
    return f"{fmt.format(mid)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def table(saved: dict[str, Any]) -> str:
    """One markdown table: a line per system and epoch, medians over the repeats (range in brackets)."""
    header, runs = saved["header"], saved["runs"]
    rows = header["rows"]
    systems = list(dict.fromkeys(r["system"] for r in runs))
    lines = [
        f"{header['rows']:,} pairs; cache {header['cache_frac']:.0%} of each system's copy; "
        f"peers {header['rows_per_batch']} rows/batch; {header['repeat']} run(s): median (min-max)",
        "",
        "| system | epoch | stored MB | cache limit MB | fetched MB | x stored | GETs | tokens/s | first batch s "
        "| CPU s (server) | cache MB at end | USS +MiB end / peak | RssAnon +MiB end / peak | complete |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for system in systems:
        mine = [r for r in runs if r["system"] == system]
        ok = [r for r in mine if "error" not in r]
        for r in mine:
            if "error" in r:
                got = r.get("fetched", {}).get("get_bytes")
                fetched = f"{got / 1e6:.0f} MB before the end" if got is not None else ""
                lines.append(f"| {system} | | | | {fetched} | | | error: {r['error'][:200]} | | | | | | |")
        if not ok:
            continue
        stored = ok[0]["stored_bytes"] / 1e6
        limit = ok[0]["cache_limit"] / 1e6
        setup = [r["setup"] for r in ok]
        lines.append(
            f"| {system} | setup | {stored:.0f} | {limit:.0f} | "
            f"{_spread([s['get_bytes'] / 1e6 for s in setup], '{:.2f}')} | | "
            f"{_spread([s['get_requests'] for s in setup], '{:.0f}')} | | "
            f"{_spread([r['setup_s'] for r in ok], '{:.2f}')} | "
            f"{_spread([s['cpu_s'] for s in setup], '{:.1f}')} | | | | |"
        )
        for k in range(len(ok[0]["epochs"])):
            pairs = [(r, r["epochs"][k]) for r in ok if len(r["epochs"]) > k]
            es = [e for _, e in pairs]
            mark = " ~" if any(e.get("partial") for e in es) else ""
            lines.append(
                f"| {system} | {k + 1} | {stored:.0f} | {limit:.0f} | "
                f"{_spread([e['get_bytes'] / 1e6 * _scale(e, rows) for e in es], '{:.0f}')}{mark} | "
                f"{_spread([e['get_bytes'] / 1e6 / stored * _scale(e, rows) for e in es], '{:.2f}')}{mark} | "
                f"{_spread([e['get_requests'] * _scale(e, rows) for e in es], '{:.0f}')}{mark} | "
                f"{_spread([e['tokens_per_s'] / 1e6 for e in es], '{:.2f}M')} | "
                f"{_spread([e['first_batch_s'] for e in es], '{:.2f}')} | "
                f"{_spread([e['cpu_s'] for e in es], '{:.0f}')} "
                f"({_spread([e['server_cpu_s'] for e in es], '{:.0f}')}) | "
                f"{_spread([e['cache_bytes'] / 1e6 for e in es], '{:.0f}')} | "
                f"{_spread([_grown(r, e, 'memory_mib', 'USS') for r, e in pairs], '{:.0f}')} / "
                f"{_spread([_grown(r, e, 'memory_peak_mib', 'USS') for r, e in pairs], '{:.0f}')} | "
                f"{_spread([_grown(r, e, 'memory_mib', 'RssAnon') for r, e in pairs], '{:.0f}')} / "
                f"{_spread([_grown(r, e, 'memory_peak_mib', 'RssAnon') for r, e in pairs], '{:.0f}')} | "
                f"{_complete(es)} |"
            )
    return "\n".join(lines)


def _scale(epoch: dict[str, Any], rows: int) -> float:
    """1, or for a partial epoch (``--epoch-seconds``) the factor that extrapolates its counts to all rows."""
    return rows / epoch["rows"] if epoch.get("partial") and epoch["rows"] else 1.0


def _complete(epochs: list[dict[str, Any]]) -> str:
    if any(e.get("partial") for e in epochs):
        done = min(e["rows"] for e in epochs)
        return f"partial: {done:,}+ rows, counts extrapolated (~)"
    if all(e.get("complete") for e in epochs):
        return "yes"
    return "NO" if any("complete" in e for e in epochs) else ""


def _grown(run: dict[str, Any], epoch: dict[str, Any], which: str, key: str) -> float:
    """MiB of ``key`` at ``which`` (end of the epoch, or its peak) above the run's baseline (after the imports)."""
    return epoch[which][key] - run["memory_base_mib"][key]


def serve(args: argparse.Namespace) -> int:
    """Start the server, upload the corpus copies, print the environment to use, wait (Ctrl-C stops)."""
    server = Server(max_seconds=args.max_server_seconds)
    try:
        stored = upload(args.data, server.endpoint, args.systems, args.base)
        print(f"uploaded {stored}")
        for key, value in server.env().items():
            print(f"export {key}={value}")
        print(f"# counters: curl {server.endpoint}/__counters ; reset: curl -X POST {server.endpoint}/__counters/reset")
        print(
            f"# the bucket: s3://{BUCKET}/{{{','.join(prefix_of(s) for s in with_base(args.systems, args.base))}}}",
            flush=True,
        )
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    def data_option(q: argparse.ArgumentParser) -> None:
        q.add_argument("--data", type=Path, required=True, help="corpus folder from make_corpus.py")
        q.add_argument("--shard-mb", type=float, default=8.0, help="peers' shard / chunk size, MB")

    q = sub.add_parser("prepare", help="write the peers' copies (DATA/mds, DATA/litdata) of DATA/arrowmt")
    data_option(q)
    q.add_argument("--force", action="store_true", help="write them again even if they exist")
    q.add_argument("--base", type=Path, help="write instead the arrowmt folders of this checkout of another commit")

    for name in ("run", "serve"):
        q = sub.add_parser(name)
        data_option(q)
        q.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
        q.add_argument("--max-server-seconds", type=float, default=4 * 3600.0, help="the server stops after this")
        q.add_argument(
            "--base",
            type=Path,
            help="a checkout of another commit (git worktree): each arrowmt system also runs with its arrowmt, "
            "interleaved, as SYSTEM@base",
        )
    q = sub.choices["run"]
    q.add_argument("--cache-frac", type=float, default=0.25, help="cache limit, a fraction of the stored copy")
    q.add_argument("--epochs", type=int, default=2)
    q.add_argument("--repeat", type=int, default=1, help="runs of every system (interleaved)")
    q.add_argument("--rows-per-batch", type=int, default=0, help="peers' batch (0: match arrowmt's batch count)")
    q.add_argument("--max-batches", type=int, default=0, help="stop each epoch after this many (0: whole epoch)")
    q.add_argument("--timeout", type=float, default=1800.0, help="seconds one reader may take")
    q.add_argument(
        "--epoch-seconds",
        nargs="*",
        default=[],
        metavar="SYSTEM=SECONDS",
        help="end that system's epochs after SECONDS (a partial epoch, extrapolated), e.g. arrowmt=120",
    )
    q.add_argument("--cache-root", default=None, help="where the cache folders go (default: the temp folder)")
    q.add_argument("--json", type=Path, help="default benchmarks/results/s3-ROWS.json")
    q.add_argument(
        "--shuffle-block",
        type=int,
        default=-1,
        help="streaming's shuffle_block_size in rows (-1: the rows of half its cache limit; 0: its default)",
    )

    q = sub.add_parser("reader", help="(internal) one system in this process, JSON out")
    q.add_argument("system", choices=SYSTEMS)
    q.add_argument("--cache-dir", required=True)
    q.add_argument("--cache-limit", type=int, required=True)
    q.add_argument("--bucket-prefix", default="", help="the copy's folder in the bucket (default: the system's)")
    q.add_argument("--rows-per-batch", type=int, required=True)
    q.add_argument("--epochs", type=int, default=2)
    q.add_argument("--max-batches", type=int, default=0)
    q.add_argument("--server-pid", type=int, required=True)
    q.add_argument("--shuffle-block", type=int, default=0)
    q.add_argument("--epoch-seconds", type=float, default=0.0, help="stop an epoch after this long (0: never)")

    q = sub.add_parser("convert-base", help="(internal) the base commit's folders, by its arrowmt")
    q.add_argument("data", type=Path)
    q.add_argument("out", type=Path)

    q = sub.add_parser("table", help="print the table of a saved JSON")
    q.add_argument("json", type=Path)

    args = p.parse_args(argv)
    if args.command == "prepare":
        return prepare(args)
    if args.command == "run":
        return run(args)
    if args.command == "serve":
        return serve(args)
    if args.command == "reader":
        return reader(args)
    if args.command == "convert-base":
        return convert_base(args.data, args.out)
    print(table(json.loads(args.json.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
