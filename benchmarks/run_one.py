"""Benchmark ONE data pipeline in this (fresh) process and print its results as JSON.

Systems (each yields fairseq-style padded batches: ``id``, ``nsentences``, ``ntokens``,
``net_input`` = {``src_tokens`` (left-padded), ``src_lengths``, ``prev_output_tokens``},
``target``):

* ``arrowmt``: ``open_dataset`` + ``TokenBatchSampler`` (fairseq's order and batches,
  memory-mapped plan cache) + ``FairseqCollater`` over ``ds.__getitems__`` in a torch
  ``DataLoader(num_workers=0)``. ``--plan cold`` deletes the plan cache first (plan built),
  ``--plan warm`` expects it to exist (run cold once first).
* ``fairseq``: ``load_indexed_dataset(..., "mmap")`` x2 + ``LanguagePairDataset`` +
  ``ordered_indices`` + ``filter_indices_by_size`` + ``batch_by_size`` + the
  ``EpochBatchIterator`` (a ``DataLoader(num_workers=0)`` calling ``collater``), as
  ``fairseq-train`` does.
* ``--num-workers N`` gives arrowmt's and fairseq's DataLoader N worker processes; ``--loader readahead``
  reads arrowmt's batches through ``ReadAheadLoader`` (a thread 4 batches ahead) instead.
* ``hf``: ``datasets.Dataset.from_file`` on the arrowmt split file, lengths from the Arrow
  offsets, a seeded shuffle then a stable sort by max(source, target) length, and a greedy
  token-budget batching (``n * longest <= max_tokens``, a few integer steps per batch),
  ``with_format("numpy")`` in a ``DataLoader(num_workers=0)`` with a padding collate (the
  usual HF + PyTorch recipe).
* ``hf-arrow``: the same plan, but batches read as ``with_format("arrow")`` tables and
  padded with one numpy fancy-indexing step per column (a best-case hand-tuned HF reader).

Memory is read from ``/proc/self/status`` (RssAnon) and ``/proc/self/smaps_rollup``
(Private_Dirty, Private_Clean, Pss) right after the imports (baseline), after setup and after
the batches; the "private" numbers reported are the growth over the baseline, i.e. what
the data pipeline itself costs on top of the interpreter and its libraries.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import hashlib
import json
import logging
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

SYSTEMS = ("arrowmt", "fairseq", "hf", "hf-arrow")
MEM_SAMPLE_EVERY = 256
DIGEST_BATCHES = 8
PAD, EOS = 1, 2


# ---------------------------------------------------------------- memory


def read_memory() -> dict[str, float]:
    """RssAnon / RssFile (status) and Private_Dirty / Private_Clean / Pss / Rss (smaps_rollup), in MiB."""
    out: dict[str, float] = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmHWM"):
                out[key] = int(rest.split()[0]) / 1024
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Private_Dirty", "Private_Clean", "Anonymous"):
                out[key] = int(rest.split()[0]) / 1024
    out["USS"] = out["Private_Dirty"] + out["Private_Clean"]
    return out


def read_bytes() -> int:
    """Bytes this process caused to be read from storage (``/proc/self/io`` read_bytes; -1 where absent)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def rss_anon() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class PeakSampler:
    """Polls RssAnon from a thread every ``interval`` s while the block runs (transient peaks of setup)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = rss_anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_anon())

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon())


def source_digest() -> str:
    """SHA-256 over arrowmt's and the converters' source files: which code version was measured."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted(root.glob("arrowmt/**/*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------- shared helpers


def greedy_token_batches(sizes: np.ndarray, max_tokens: int) -> np.ndarray:  # noqa: F821
    """Batch boundaries over rows sorted by ascending size: each batch has n * max_size <= max_tokens.

    Loops once per batch (the rows are sorted, so a batch's longest row is its last one).
    """
    import numpy as np

    n = sizes.shape[0]
    bounds = [0]
    start = 0
    while start < n:
        count = max(1, max_tokens // int(sizes[start]))
        while start + count <= n and count > 1 and count * int(sizes[start + count - 1]) > max_tokens:
            count = max(1, max_tokens // int(sizes[start + count - 1]))
        start = min(n, start + count)
        bounds.append(start)
    return np.asarray(bounds, dtype=np.int64)


def pad_fairseq_flat(ids, src_flat, src_len, tgt_flat, tgt_len) -> dict:  # noqa: ANN001
    """fairseq collater output from flat (concatenated) rows, one fancy-index step per column."""
    import numpy as np
    import torch

    order = np.argsort(-src_len, kind="stable")
    src_off = np.concatenate([[0], np.cumsum(src_len)])[:-1][order]
    tgt_off = np.concatenate([[0], np.cumsum(tgt_len)])[:-1][order]
    src_len, tgt_len = src_len[order], tgt_len[order]
    b = src_len.shape[0]
    ws, wt = int(src_len.max()), int(tgt_len.max())
    cols = np.arange(ws)
    shift = ws - src_len  # left pad
    src_pos = cols[None, :] - shift[:, None]
    src_ok = src_pos >= 0
    src = np.where(src_ok, src_flat[np.where(src_ok, src_off[:, None] + src_pos, 0)], PAD)
    colt = np.arange(wt)
    tgt_ok = colt[None, :] < tgt_len[:, None]
    tgt = np.where(tgt_ok, tgt_flat[np.where(tgt_ok, tgt_off[:, None] + colt[None, :], 0)], PAD)
    prev = np.full((b, wt), PAD, dtype=tgt.dtype)
    prev[:, 0] = EOS
    prev[:, 1:] = np.where(tgt_ok[:, 1:], tgt[:, :-1], PAD)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    return {
        "id": t(ids[order]),
        "nsentences": b,
        "ntokens": int(tgt_len.sum()),
        "net_input": {"src_tokens": t(src), "src_lengths": t(src_len), "prev_output_tokens": t(prev)},
        "target": t(tgt),
    }


def pad_fairseq_rows(samples: list[dict]) -> dict:
    """fairseq collater output from per-row dicts {"id", "source", "target"} (numpy rows)."""
    import numpy as np
    import torch

    samples = sorted(samples, key=lambda s: -len(s["source"]))
    b = len(samples)
    ws = max(len(s["source"]) for s in samples)
    wt = max(len(s["target"]) for s in samples)
    src = np.full((b, ws), PAD, dtype=np.int64)
    tgt = np.full((b, wt), PAD, dtype=np.int64)
    prev = np.full((b, wt), PAD, dtype=np.int64)
    for k, s in enumerate(samples):
        a, t = s["source"], s["target"]
        src[k, ws - len(a) :] = a
        tgt[k, : len(t)] = t
        prev[k, 0] = EOS
        prev[k, 1 : len(t)] = t[:-1]
    return {
        "id": torch.tensor([s["id"] for s in samples]),
        "nsentences": b,
        "ntokens": int((tgt != PAD).sum()),
        "net_input": {
            "src_tokens": torch.from_numpy(src),
            "src_lengths": torch.from_numpy((src != PAD).sum(axis=1)),
            "prev_output_tokens": torch.from_numpy(prev),
        },
        "target": torch.from_numpy(tgt),
    }


# ---------------------------------------------------------------- systems


class Pipeline:
    """What every system provides: ``num_batches`` after setup and ``epoch(epoch)`` yielding batches."""

    num_batches: int

    def epoch(self, epoch: int):  # noqa: ANN201
        raise NotImplementedError


class ArrowMT(Pipeline):
    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        from torch.utils.data import DataLoader

        from arrowmt import FairseqCollater, TokenBatchSampler, open_dataset

        self.ds = open_dataset(data / args.folder)
        if args.access:
            self.ds.advise(args.access)
        self.sampler = TokenBatchSampler(
            self.ds,
            max_tokens=args.max_tokens,
            seed=args.seed,
            num_replicas=args.world,
            rank=args.rank,
            prefetch=args.prefetch,
        )
        self.collater = FairseqCollater(self.ds.special_ids)
        self.num_batches = len(self.sampler)
        if args.loader == "readahead":
            from arrowmt import ReadAheadLoader

            self.loader = ReadAheadLoader(self.ds, self.sampler, self.collater)
        else:
            workers = args.num_workers
            self.loader = DataLoader(self.ds, batch_sampler=self.sampler, collate_fn=self.collater, num_workers=workers)

    def epoch(self, epoch: int):  # noqa: ANN201
        self.sampler.set_epoch(epoch)
        return iter(self.loader)


class ArrowMTDirect(ArrowMT):
    """arrowmt without the DataLoader: sampler -> ``__getitems__`` -> ``FairseqCollater`` (for profiling)."""

    def epoch(self, epoch: int):  # noqa: ANN201
        self.sampler.set_epoch(epoch)
        return (self.collater(self.ds.__getitems__(b)) for b in self.sampler)


class Fairseq(Pipeline):
    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        from fairseq.data import Dictionary, LanguagePairDataset, data_utils, iterators

        db = data / "data-bin"
        src_dict = Dictionary.load(str(db / "dict.de.txt"))
        tgt_dict = Dictionary.load(str(db / "dict.en.txt"))
        src = data_utils.load_indexed_dataset(str(db / "train.de-en.de"), src_dict, "mmap")
        tgt = data_utils.load_indexed_dataset(str(db / "train.de-en.en"), tgt_dict, "mmap")
        ds = LanguagePairDataset(
            src, src.sizes, src_dict, tgt, tgt.sizes, tgt_dict, left_pad_source=True, left_pad_target=False
        )
        with data_utils.numpy_seed(args.seed):
            indices = ds.ordered_indices()
        indices, _ = ds.filter_indices_by_size(indices, (1024, 1024))
        batches = ds.batch_by_size(indices, max_tokens=args.max_tokens, required_batch_size_multiple=1)
        self.itr = iterators.EpochBatchIterator(
            dataset=ds,
            collate_fn=ds.collater,
            batch_sampler=batches,
            seed=args.seed,
            num_shards=args.world,
            shard_id=args.rank,
            num_workers=args.num_workers,
            epoch=1,
        )
        self.num_batches = -(-len(batches) // args.world)

    def epoch(self, epoch: int):  # noqa: ANN201
        assert epoch == self.itr.next_epoch_idx
        return self.itr.next_epoch_itr(shuffle=True)


class HFPlan(Pipeline):
    """HF ``Dataset.from_file`` + lengths from the Arrow offsets + length order + greedy batches."""

    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        import numpy as np
        import pyarrow.compute as pc
        from datasets import Dataset

        self.ds = Dataset.from_file(str(data / "arrowmt" / "train.arrow"))
        src = pc.list_value_length(self.ds.data.column("source")).to_numpy().astype(np.int64)
        tgt = pc.list_value_length(self.ds.data.column("target")).to_numpy().astype(np.int64)
        num_tokens = np.maximum(src, tgt)
        perm = np.random.RandomState(args.seed).permutation(num_tokens.shape[0])
        order = perm[np.argsort(num_tokens[perm], kind="stable")]  # shuffled, then by max(src, tgt)
        sizes = num_tokens[order]
        bounds = greedy_token_batches(sizes, args.max_tokens)
        self.order, self.bounds = order, bounds
        self.world, self.rank = args.world, args.rank
        self.num_batches = -(-(bounds.shape[0] - 1) // args.world)
        self.seed = args.seed
        del src, tgt, num_tokens, perm, sizes

    def batches(self, epoch: int):  # noqa: ANN201
        import numpy as np

        perm = np.random.RandomState(self.seed + epoch).permutation(self.bounds.shape[0] - 1)
        for b in perm[self.rank :: self.world]:  # this rank's share, as a distributed sampler deals them
            yield self.order[self.bounds[b] : self.bounds[b + 1]]


class HF(HFPlan):
    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        super().__init__(data, args)
        from torch.utils.data import DataLoader

        self.rows = self.ds.with_format("numpy")
        self.sampler = _EpochBatches(self)
        self.loader = DataLoader(self.rows, batch_sampler=self.sampler, collate_fn=self._collate, num_workers=0)

    def _collate(self, rows: list[dict]) -> dict:
        for row, i in zip(rows, self.sampler.current, strict=True):
            row["id"] = int(i)
        return pad_fairseq_rows(rows)

    def epoch(self, epoch: int):  # noqa: ANN201
        self.sampler.epoch = epoch
        return iter(self.loader)


class _EpochBatches:
    """A batch sampler over an HFPlan's batches that remembers the batch being fetched (for ids)."""

    def __init__(self, plan: HFPlan) -> None:
        self.plan, self.epoch, self.current = plan, 1, None

    def __len__(self) -> int:
        return self.plan.num_batches

    def __iter__(self):  # noqa: ANN204
        for b in self.plan.batches(self.epoch):
            self.current = b
            yield b.tolist()


class HFArrow(HFPlan):
    def __init__(self, data: Path, args: argparse.Namespace) -> None:
        super().__init__(data, args)
        self.table = self.ds.with_format("arrow")

    def epoch(self, epoch: int):  # noqa: ANN201
        import numpy as np

        for idx in self.batches(epoch):
            t = self.table[idx]
            cols = []
            for name in ("source", "target"):
                arr = t.column(name).combine_chunks()
                offsets = arr.offsets.to_numpy()
                flat = arr.values.to_numpy()[offsets[0] : offsets[-1]]
                cols += [flat, np.diff(offsets).astype(np.int64)]
            yield pad_fairseq_flat(idx, *cols)


PIPELINES = {"arrowmt": ArrowMT, "arrowmt-direct": ArrowMTDirect, "fairseq": Fairseq, "hf": HF, "hf-arrow": HFArrow}


def import_system(system: str) -> None:
    """Import everything the system needs (timed and measured separately from setup)."""
    import numpy  # noqa: F401
    import torch
    import torch.utils.data

    torch.set_num_threads(1)
    if system.startswith("arrowmt"):
        import arrowmt.training._collate
        import arrowmt.training._dataset
        import arrowmt.training._sampler  # noqa: F401
    elif system == "fairseq":
        logging.disable(logging.WARNING)
        import fairseq.data
        import fairseq.data.iterators  # noqa: F401
    else:
        logging.disable(logging.WARNING)
        import datasets  # noqa: F401
        import pyarrow.compute  # noqa: F401


def clear_plan_cache(data: Path) -> list[str]:
    """Remove arrowmt's batch-plan cache files for this dataset, so the plan is built again."""
    removed = []
    for path in find_plan_cache(data):
        path.unlink()
        removed.append(str(path))
    return removed


def find_plan_cache(data: Path) -> list[Path]:
    """Plan files in the default cache folder (``<dataset>/.arrowmt-cache/plan-*.bin``)."""
    folder = data / "arrowmt" / ".arrowmt-cache"
    return sorted(folder.glob("plan-*.bin")) if folder.is_dir() else []


def in_repository(path: str | Path) -> str:
    """``path`` as results record it: relative to the repository when inside it (no machine's own paths)."""
    root = Path(__file__).resolve().parent.parent
    resolved = Path(path).resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(path)


def digest_batch(h: hashlib._Hash, batch: dict) -> None:
    for t in (batch["id"], batch["net_input"]["src_tokens"], batch["net_input"]["prev_output_tokens"]):
        h.update(t.numpy().astype("<i8").tobytes())
    h.update(batch["target"].numpy().astype("<i8").tobytes())


def run(args: argparse.Namespace) -> dict:
    data = args.data
    result: dict = {
        "system": args.system,
        "rows": args.rows,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "plan": args.plan if args.system.startswith("arrowmt") else None,
        "cpus": sorted(os.sched_getaffinity(0)),
        "source_digest": source_digest(),
        "loadavg_start": os.getloadavg(),
    }
    mem_start = read_memory()
    t0 = time.perf_counter()
    import_system(args.system)
    result["import_s"] = time.perf_counter() - t0
    if args.system.startswith("arrowmt") and args.plan == "cold":
        result["plan_cache_removed"] = [in_repository(p) for p in clear_plan_cache(data)]
    base = read_memory()

    io0 = read_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    with PeakSampler() as setup_peak:
        pipe = PIPELINES[args.system](data, args)
    result["setup_s"] = time.perf_counter() - t0
    result["setup_cpu_s"] = time.process_time() - c0
    after_setup = read_memory()
    if args.system.startswith("arrowmt"):
        result["plan_cache_files"] = [in_repository(p) for p in find_plan_cache(data)]
        result["plan_built"] = bool(pipe.sampler.plan.built)
        if args.plan == "warm" and result["plan_built"]:
            result["warning"] = "--plan warm but the plan was built (no cache yet); run --plan cold first"
        rows = len(pipe.ds)
    elif args.system == "fairseq":
        rows = len(pipe.itr.dataset)
    else:
        rows = len(pipe.ds)
    if args.rows and rows != args.rows:
        raise SystemExit(f"{data}: expected {args.rows} rows, found {rows}")
    result["num_batches"] = pipe.num_batches

    limit = args.max_batches or pipe.num_batches
    h = hashlib.sha256()
    tokens = sentences = batches = 0
    first_batch = float("nan")
    peak_anon = after_setup["RssAnon"]
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    io1 = read_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in pipe.epoch(1):
        if batches == 0:
            first_batch = time.perf_counter() - t0
        if batches < DIGEST_BATCHES:
            digest_batch(h, batch)
        tokens += int(batch["net_input"]["src_lengths"].sum()) + int(batch["ntokens"])
        sentences += int(batch["nsentences"])
        batches += 1
        if batches % MEM_SAMPLE_EVERY == 0:
            peak_anon = max(peak_anon, rss_anon())
        if batches >= limit:
            break
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    io2 = read_bytes()
    after = read_memory()
    peak_anon = max(peak_anon, after["RssAnon"])

    result.update(
        batches=batches,
        full_epoch=batches >= pipe.num_batches,
        sentences=sentences,
        tokens=tokens,
        epoch_s=elapsed,
        first_batch_s=first_batch,
        loadavg_end=os.getloadavg(),
        epoch_cpu_s=cpu,
        epoch_user_s=ru1.ru_utime - ru0.ru_utime,
        epoch_sys_s=ru1.ru_stime - ru0.ru_stime,
        epoch_minor_faults=ru1.ru_minflt - ru0.ru_minflt,
        epoch_major_faults=ru1.ru_majflt - ru0.ru_majflt,
        read_bytes_setup=io1 - io0,
        read_bytes_epoch=io2 - io1,
        read_amplification=(io2 - io1) / (4 * tokens) if tokens else float("nan"),
        world=args.world,
        rank=args.rank,
        prefetch=args.prefetch if args.system.startswith("arrowmt") else None,
        num_workers=args.num_workers,
        loader=args.loader if args.system.startswith("arrowmt") else None,
        access=args.access if args.system.startswith("arrowmt") else None,
        tokens_per_s=tokens / elapsed if elapsed else float("nan"),
        tokens_per_cpu_s=tokens / cpu if cpu else float("nan"),
        batches_per_s=batches / elapsed if elapsed else float("nan"),
        first_batches_sha256=h.hexdigest(),
        memory_mib={"start": mem_start, "baseline": base, "after_setup": after_setup, "after_batches": after},
        private_mib={
            "rss_anon_setup": after_setup["RssAnon"] - base["RssAnon"],
            "rss_anon_batches": after["RssAnon"] - base["RssAnon"],
            "rss_anon_peak": peak_anon - base["RssAnon"],
            "rss_anon_setup_peak": setup_peak.peak - base["RssAnon"],
            "private_dirty_setup": after_setup["Private_Dirty"] - base["Private_Dirty"],
            "private_dirty_batches": after["Private_Dirty"] - base["Private_Dirty"],
            "uss_setup": after_setup["USS"] - base["USS"],
            "uss_batches": after["USS"] - base["USS"],
        },
    )
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("system", choices=sorted(PIPELINES))
    p.add_argument("--data", type=Path, required=True, help="corpus folder from make_corpus.py")
    p.add_argument("--rows", type=int, default=0, help="expected row count (checked; 0: any)")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--plan", choices=("cold", "warm"), default="warm", help="arrowmt: build or reuse the plan")
    p.add_argument("--max-batches", type=int, default=0, help="stop after this many batches (0: full epoch)")
    p.add_argument("--cpu", type=int, default=0, help="pin to this core (-1: no pinning)")
    p.add_argument("--json", type=Path, help="also write the result here")
    p.add_argument("--world", type=int, default=1, help="ranks in the (simulated) world: this process is one")
    p.add_argument("--rank", type=int, default=0, help="which rank of --world this process is")
    p.add_argument("--prefetch", type=int, default=8, help="arrowmt: batches read ahead (0: off)")
    p.add_argument(
        "--folder",
        default="arrowmt",
        help="arrowmt: the corpus folder inside --data (arrowmt-ordered: a copy in plan order)",
    )
    p.add_argument("--num-workers", type=int, default=0, help="arrowmt and fairseq: DataLoader worker processes")
    p.add_argument(
        "--loader",
        choices=("dataloader", "readahead"),
        default="dataloader",
        help="arrowmt: torch's DataLoader, or ReadAheadLoader (a thread reading 4 batches ahead; no workers)",
    )
    p.add_argument(
        "--access", choices=("random", "sequential", "normal"), help="arrowmt: access advice (default: the library's)"
    )
    args = p.parse_args(argv)
    if args.cpu >= 0:
        os.sched_setaffinity(0, {args.cpu})
    result = run(args)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
