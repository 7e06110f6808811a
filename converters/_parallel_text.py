"""Convert raw parallel text (``{pref}.{lang}``, plain or .gz) to an arrowmt folder, like fairseq-preprocess.

Any corpus size in bounded memory: every text file is cut into newline-aligned chunks,
each chunk is tokenized once in a worker (pass 1: counts for the dictionaries, rows of
local ids spilled in the staging folder), the dictionaries are built from the merged counts
exactly as ``fairseq-preprocess`` builds them, each chunk is then encoded in a worker
(pass 2: ids through the dictionary) and each output file written by a worker from the
encoded chunks (pass 3). The output is byte-identical whatever the number of workers,
the chunk size or the executor. See :mod:`arrowmt.converters._text_chunks`.

Disk: the spilled chunks take about as much room as the output (4 bytes per token),
beside it, until the conversion ends.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from arrowmt.converters._output import OutputFolder, special_ids_of
from arrowmt.converters._tasks import TaskRunner, open_runner
from arrowmt.converters._text import SentencePieceModel, check_same_line_count
from arrowmt.converters._text_chunks import (
    DEFAULT_CHUNK_BYTES,
    ColumnPlan,
    EncodeTask,
    SpillSlice,
    TextChunk,
    TokenizedChunk,
    TokenizeTask,
    WriteTask,
    encode_chunk,
    text_chunks,
    tokenize_chunk,
    write_file,
)
from tqdm import tqdm

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._version import __version__
from arrowmt.format._atomic import TEMP_PREFIX
from arrowmt.format._manifest import Manifest
from arrowmt.format._metadata import ColumnInfo
from arrowmt.format._progress import progress_bar
from arrowmt.format._schema import SOURCE, TARGET
from arrowmt.format._vocab import Dictionary

SPLITS = ("train", "valid", "test")
SOURCE_FORMAT = "text"
UNKNOWN_WARNING_RATE = 0.05  # above this share of <unk> per column, the CLI warns loudly
MERGE_ROWS = 1 << 20  # merge buffered per-chunk counts once they hold this many entries


@dataclass(frozen=True)
class TextConversion:
    """What to convert and how (the fairseq-preprocess options that matter for the data, and how to run)."""

    src_lang: str
    tgt_lang: str
    prefixes: dict[str, str | None]
    srcdict: str | None = None
    tgtdict: str | None = None
    joined_dictionary: bool = False
    thresholds: tuple[int, int] = (0, 0)
    nwords: tuple[int, int] = (-1, -1)
    spm_model: str | None = None
    workers: int = 1
    padding_factor: int = 8
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    shard_rows: int | None = None
    executor: Executor | None = field(default=None, compare=False, repr=False)
    shards: dict[str, list[str]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.src_lang == self.tgt_lang:
            raise InvalidParameterError(f"tgt_lang: expected a language other than src_lang, got {self.tgt_lang!r}")
        if not self.prefixes.get("train") and not (self.srcdict and self.tgtdict):
            raise InvalidParameterError(
                "trainpref: expected a training prefix (dictionaries are built from it) unless both "
                "srcdict and tgtdict are given, got none"
            )
        for name, value, minimum in (("workers", self.workers, 1), ("chunk_bytes", self.chunk_bytes, 1)):
            if value < minimum:
                raise InvalidParameterError(f"{name}: expected >= {minimum}, got {value}")
        if self.shard_rows is not None and self.shard_rows < 1:
            raise InvalidParameterError(
                f"shard_rows: expected >= 1 (or None: one file per prefix), got {self.shard_rows}"
            )
        for split, value in self.prefixes.items():
            if value:
                self.shards[split] = [p for p in value.split(",") if p]

    def data_options(self) -> dict[str, object]:
        """Every option that decides the output (how it is run, e.g. workers or chunk size, does not)."""
        return {
            "source_lang": self.src_lang,
            "target_lang": self.tgt_lang,
            "trainpref": self.prefixes.get("train"),
            "validpref": self.prefixes.get("valid"),
            "testpref": self.prefixes.get("test"),
            "srcdict": self.srcdict,
            "tgtdict": self.tgtdict,
            "joined_dictionary": self.joined_dictionary,
            "thresholdsrc": self.thresholds[0],
            "thresholdtgt": self.thresholds[1],
            "nwordssrc": self.nwords[0],
            "nwordstgt": self.nwords[1],
            "padding_factor": self.padding_factor,
            "spm_model": self.spm_model,
            "shard_rows": self.shard_rows,
        }


def text_file(prefix: str, lang: str) -> Path:
    """``{prefix}.{lang}`` if it exists, else ``{prefix}.{lang}.gz``."""
    plain = Path(f"{prefix}.{lang}")
    gz = Path(f"{prefix}.{lang}.gz")
    if plain.is_file():
        return plain
    if gz.is_file():
        return gz
    raise InputDataError(f"{plain}: text file missing (also looked for {gz.name})")


def convert_text(
    trainpref: str | None,
    out: str | Path,
    *,
    src_lang: str,
    tgt_lang: str,
    validpref: str | None = None,
    testpref: str | None = None,
    srcdict: str | None = None,
    tgtdict: str | None = None,
    joined_dictionary: bool = False,
    thresholdsrc: int = 0,
    thresholdtgt: int = 0,
    nwordssrc: int = -1,
    nwordstgt: int = -1,
    spm_model: str | None = None,
    workers: int = 1,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    shard_rows: int | None = None,
    executor: Executor | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Convert raw parallel text ``{pref}.{lang}`` (plain or .gz) to an arrowmt folder at ``out``.

    The options are ``fairseq-preprocess``'s; a prefix may list shards separated by commas
    (``train``, ``train1``, ...). Memory stays bounded whatever the corpus size: text is read
    in chunks of ``chunk_bytes`` (each tokenized once, in a worker).

    * ``workers``: local worker processes (1: all in this process); with ``executor``, how
      many tasks it runs at once (read from the executor when not given).
    * ``executor``: any ``concurrent.futures.Executor`` to run the chunks on, e.g.
      ``distributed.Client(...).get_executor()`` for a Dask cluster (its workers must see the
      input files and ``out`` at the same paths: they write the output files themselves).
    * ``shard_rows``: write each split as files of this many rows (``train``, ``train1``, ...;
      readers join them); default: one file per prefix.

    The output is byte-identical whatever ``workers``, ``chunk_bytes`` or ``executor``.
    Returns the manifest; ``manifest.provenance`` records the options, the sentencepiece
    model's SHA-256 and the share of tokens that became ``<unk>`` per split and column.
    """
    options = TextConversion(
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        prefixes={"train": trainpref, "valid": validpref, "test": testpref},
        srcdict=srcdict,
        tgtdict=tgtdict,
        joined_dictionary=joined_dictionary,
        thresholds=(thresholdsrc, thresholdtgt),
        nwords=(nwordssrc, nwordstgt),
        spm_model=spm_model,
        workers=workers,
        chunk_bytes=chunk_bytes,
        shard_rows=shard_rows,
        executor=executor,
    )
    return convert_with_options(options, out, overwrite=overwrite, progress=progress)


# ----- inputs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixFiles:
    """One prefix of a split: its file-level name (``train``, ``train1``, ...) and text file per language."""

    split: str
    name: str
    files: dict[str, Path]


@dataclass
class ChunkRef:
    """One chunk of a text file through the passes: its spill (then encoded) file, rows, on-disk bytes,
    and once encoded its ids (``</s>`` included) and ids that became ``<unk>``."""

    path: str
    rows: int
    disk_bytes: int
    tokens: int = 0
    unknown: int = 0


@dataclass
class SpilledFile:
    """A text file after pass 1: its chunks, in order."""

    path: Path
    chunks: list[ChunkRef] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(chunk.rows for chunk in self.chunks)


def _prefix_files(options: TextConversion) -> list[PrefixFiles]:
    langs = (options.src_lang, options.tgt_lang)
    named = []
    for split in SPLITS:
        for k, prefix in enumerate(options.shards.get(split, [])):
            named.append(PrefixFiles(split, f"{split}{k or ''}", {lang: text_file(prefix, lang) for lang in langs}))
    return named


# ----- the conversion ---------------------------------------------------------------------------


def convert_with_options(
    options: TextConversion, out: str | Path, overwrite: bool = False, progress: bool = True
) -> Manifest:
    """Encode every split's text with fairseq-compatible dictionaries and write an arrowmt folder."""
    langs = (options.src_lang, options.tgt_lang)
    prefixes = _prefix_files(options)
    spm = SentencePieceModel.load(options.spm_model) if options.spm_model else None
    paths = {options.src_lang: options.srcdict, options.tgt_lang: options.tgtdict}
    given = {lang: Dictionary.load(path) for lang, path in paths.items() if path}
    with OutputFolder.prepare(out, {SOURCE: langs[0], TARGET: langs[1]}, SOURCE_FORMAT, overwrite, progress) as folder:
        plan = _TokenizePlan(_counted_dictionaries(options, given), _Spills(folder.path), options.chunk_bytes, spm)
        try:
            with open_runner(options.executor, options.workers) as runner:
                spilled, counts = _tokenize_all(runner, prefixes, plan, progress)
                _check_line_counts(prefixes, spilled, langs)
                dicts = _dictionaries(options, given, counts)
                names = {lang: folder.add_dictionary(lang, dicts[lang]) for lang in langs}
                saved = {lang: (str(folder.path / names[lang]), dicts[lang].sha256()) for lang in langs}
                _encode_all(runner, spilled, saved, plan.spills, progress)
                tasks = _write_tasks(options, folder, prefixes, spilled, dicts, names)
                written = _write_all(runner, tasks, progress)
        finally:
            plan.spills.remove()
        for name in written:
            folder.record(name)
        folder.manifest.provenance = _provenance(options, spm, prefixes, spilled)
        return folder.finish()


def _counted_dictionaries(options: TextConversion, given: dict[str, Dictionary]) -> dict[str, str]:
    """Which languages' train text is counted, and into which dictionary (``joined`` or the language)."""
    langs = (options.src_lang, options.tgt_lang)
    if options.joined_dictionary and len(given) < 2:
        return dict.fromkeys(langs, "joined")
    return {lang: lang for lang in langs if lang not in given}


def _dictionaries(
    options: TextConversion, given: dict[str, Dictionary], counts: dict[str, TokenCounts]
) -> dict[str, Dictionary]:
    langs = (options.src_lang, options.tgt_lang)
    if options.joined_dictionary and len(given) < 2:
        joined = counts["joined"].dictionary(options.thresholds[0], options.nwords[0], options.padding_factor)
        return dict.fromkeys(langs, joined)
    built = {
        lang: counts[lang].dictionary(options.thresholds[k], options.nwords[k], options.padding_factor)
        for k, lang in enumerate(langs)
        if lang not in given
    }
    return {lang: given.get(lang) or built[lang] for lang in langs}


class TokenCounts:
    """Token counts merged over chunks (a table of distinct tokens, merged in large steps) and lines counted."""

    def __init__(self) -> None:
        self.lines = 0
        self._tables: list[pa.Table] = []
        self._pending = 0
        self._merged = 0

    def add(self, chunk: TokenizedChunk) -> None:
        assert chunk.vocabulary is not None and chunk.counts is not None
        self.lines += chunk.rows
        table = pa.table({"symbol": chunk.vocabulary.cast(pa.large_string()), "count": pa.array(chunk.counts)})
        self._tables.append(table)
        self._pending += table.num_rows
        if self._pending > max(MERGE_ROWS, self._merged):
            self._merge()

    def _merge(self) -> None:
        """One table of distinct symbols: ids by hashing (``dictionary_encode``), counts summed per id."""
        if len(self._tables) > 1:
            table = pa.concat_tables(self._tables)
            ids = pc.dictionary_encode(table["symbol"].combine_chunks())
            sums = np.bincount(ids.indices.to_numpy(), weights=table["count"].to_numpy(), minlength=len(ids.dictionary))
            self._tables = [pa.table({"symbol": ids.dictionary, "count": pa.array(sums.astype(np.int64))})]
        self._merged = sum(table.num_rows for table in self._tables)
        self._pending = 0

    def dictionary(self, threshold: int, nwords: int, padding_factor: int) -> Dictionary:
        """The dictionary ``fairseq-preprocess`` builds from the same text."""
        self._merge()
        if not self._tables:
            return Dictionary.from_counts(
                pa.array([], pa.large_string()), pa.array([], pa.int64()).to_numpy(), self.lines,
                threshold=threshold, nwords=nwords, padding_factor=padding_factor,
            )  # fmt: skip
        table = self._tables[0]
        return Dictionary.from_counts(
            table["symbol"].combine_chunks(),
            table["count"].to_numpy(),
            self.lines,
            threshold=threshold,
            nwords=nwords,
            padding_factor=padding_factor,
        )


class _Spills:
    """Pass-1 spill files, named as temporary files inside the output folder (a later run clears leftovers)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._numbers = itertools.count()
        self._paths: list[Path] = []

    def new(self) -> str:
        path = self.folder / f"{TEMP_PREFIX}spill-{next(self._numbers):06d}.arrow"
        self._paths.append(path)
        return str(path)

    def remove(self) -> None:
        for path in self._paths:
            path.unlink(missing_ok=True)


@dataclass(frozen=True)
class _TokenizePlan:
    """How pass 1 runs: which languages' train text is counted into which dictionary, where chunks spill."""

    counted: dict[str, str]
    spills: _Spills
    chunk_bytes: int
    spm: SentencePieceModel | None


def _tokenize_all(
    runner: TaskRunner,
    prefixes: list[PrefixFiles],
    plan: _TokenizePlan,
    progress: bool,
) -> tuple[dict[tuple[str, str], SpilledFile], dict[str, TokenCounts]]:
    """Pass 1 over every chunk of every file, in order: spill files per file, merged counts per dictionary."""
    spilled = {(p.name, lang): SpilledFile(path) for p in prefixes for lang, path in p.files.items()}
    counts = {key: TokenCounts() for key in set(plan.counted.values())}
    planned: deque[tuple[tuple[str, str], TextChunk, str]] = deque()
    total = sum(path.stat().st_size for p in prefixes for path in p.files.values())

    def tasks(read_bar: tqdm) -> Iterator[TokenizeTask]:
        for p in prefixes:
            for lang, path in p.files.items():
                count = p.split == "train" and lang in plan.counted
                for chunk in text_chunks(path, plan.chunk_bytes):
                    spill = plan.spills.new()
                    planned.append(((p.name, lang), chunk, spill))
                    read_bar.update(chunk.disk_bytes)
                    yield TokenizeTask(chunk, spill, count, plan.spm)

    with (
        progress_bar(total, "read", "B", progress) as read_bar,
        progress_bar(total, "count", "B", progress) as count_bar,
        contextlib.closing(runner.map(tokenize_chunk, tasks(read_bar))) as results,
    ):
        for result in results:
            key, chunk, spill = planned.popleft()
            target = spilled[key]
            if result.bad is not None:
                raise result.bad.error(chunk.path, first_line=target.rows, first_byte=chunk.start)
            target.chunks.append(ChunkRef(spill, result.rows, chunk.disk_bytes))
            if result.vocabulary is not None:
                counts[plan.counted[key[1]]].add(result)
            count_bar.update(chunk.disk_bytes)
    return spilled, counts


def _check_line_counts(
    prefixes: list[PrefixFiles], spilled: dict[tuple[str, str], SpilledFile], langs: tuple[str, str]
) -> None:
    for p in prefixes:
        src, tgt = (spilled[(p.name, lang)] for lang in langs)
        check_same_line_count(src.path, src.rows, tgt.path, tgt.rows)


# ----- pass 2 -----------------------------------------------------------------------------------


def _encode_all(
    runner: TaskRunner,
    spilled: dict[tuple[str, str], SpilledFile],
    saved: dict[str, tuple[str, str]],
    spills: _Spills,
    progress: bool,
) -> None:
    """Every chunk's ids through its language's saved dictionary ``saved[lang]`` (file, SHA-256); each spill
    is replaced by its encoded chunk as soon as that is written."""
    refs = [(chunk, saved[lang]) for (_, lang), spilled_file in spilled.items() for chunk in spilled_file.chunks]
    tasks = [EncodeTask(chunk.path, spills.new(), *dictionary) for chunk, dictionary in refs]
    total = sum(chunk.disk_bytes for chunk, _ in refs)
    with (
        progress_bar(total, "encode", "B", progress) as bar,
        contextlib.closing(runner.map(encode_chunk, tasks)) as results,
    ):
        for (chunk, _), task, result in zip(refs, tasks, results, strict=True):
            Path(task.spill).unlink(missing_ok=True)
            chunk.path, chunk.tokens, chunk.unknown = task.encoded, result.tokens, result.unknown
            bar.update(chunk.disk_bytes)


# ----- pass 3 -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stream:
    """Rows written as one sequence of files: a prefix (one file), or a whole split cut into shards."""

    split: str
    names: list[str]  # file-level names of the prefixes it joins (the first names the files)
    files: dict[str, list[SpilledFile]]  # per language, in order


def _streams(options: TextConversion, prefixes: list[PrefixFiles], spilled: dict) -> list[_Stream]:
    langs = (options.src_lang, options.tgt_lang)
    if options.shard_rows is None:
        return [_Stream(p.split, [p.name], {lang: [spilled[(p.name, lang)]] for lang in langs}) for p in prefixes]
    streams = []
    for split in SPLITS:
        members = [p for p in prefixes if p.split == split]
        if members:
            files = {lang: [spilled[(p.name, lang)] for p in members] for lang in langs}
            streams.append(_Stream(split, [p.name for p in members], files))
    return streams


def _file_ranges(stream: _Stream, rows: int, shard_rows: int | None) -> list[tuple[str, int, int]]:
    """(file-level name, first row, end row) of each output file of ``stream``."""
    if shard_rows is None:
        return [(stream.names[0], 0, rows)]
    starts = range(0, max(rows, 1), shard_rows)
    return [(f"{stream.split}{k or ''}", start, min(start + shard_rows, rows)) for k, start in enumerate(starts)]


def _slices(files: list[SpilledFile], start: int, stop: int) -> tuple[SpillSlice, ...]:
    """The spill rows holding rows ``start:stop`` of the concatenation of ``files``."""
    slices, first = [], 0
    for chunk in (chunk for f in files for chunk in f.chunks):
        lo, hi = max(start, first), min(stop, first + chunk.rows)
        if lo < hi:
            slices.append(SpillSlice(chunk.path, lo - first, hi - first))
        first += chunk.rows
    return tuple(slices)


def _write_tasks(
    options: TextConversion,
    folder: OutputFolder,
    prefixes: list[PrefixFiles],
    spilled: dict[tuple[str, str], SpilledFile],
    dicts: dict[str, Dictionary],
    names: dict[str, str],
) -> list[tuple[WriteTask, int]]:
    """One task per output file, with the on-disk bytes of text it stands for (progress)."""
    langs = (options.src_lang, options.tgt_lang)
    infos = {
        lang: ColumnInfo(role, lang, names[lang], dicts[lang].sha256(), len(dicts[lang]), 0)
        for role, lang in zip((SOURCE, TARGET), langs, strict=True)
    }
    specials = special_ids_of(dicts[langs[0]])
    tasks = []
    for stream in _streams(options, prefixes, spilled):
        rows = sum(f.rows for f in stream.files[langs[0]])
        for name, start, stop in _file_ranges(stream, rows, options.shard_rows):
            columns = {
                infos[lang].role: ColumnPlan(
                    infos[lang],
                    ",".join(str(f.path) for f in stream.files[lang]),
                    _slices(stream.files[lang], start, stop),
                )
                for lang in langs
            }
            task = WriteTask(str(folder.split_file(name)), name, stop - start, columns, specials, SOURCE_FORMAT)
            tasks.append((task, _disk_share(stream, langs, start, stop, rows)))
    return tasks


def _disk_share(stream: _Stream, langs: tuple[str, str], start: int, stop: int, rows: int) -> int:
    """The text bytes on disk that rows ``start:stop`` stand for (their share of the stream's files)."""
    disk = sum(chunk.disk_bytes for lang in langs for f in stream.files[lang] for chunk in f.chunks)
    return disk * (stop - start) // rows if rows else disk


def _write_all(runner: TaskRunner, tasks: list[tuple[WriteTask, int]], progress: bool) -> list[str]:
    """Pass 3: every output file, written by the runner's workers; returns their names."""
    written = []
    with (
        progress_bar(sum(share for _, share in tasks), "write", "B", progress) as bar,
        contextlib.closing(runner.map(write_file, [task for task, _ in tasks])) as results,
    ):
        for (_, share), name in zip(tasks, results, strict=True):
            written.append(name)
            bar.update(share)
    return written


# ----- provenance -------------------------------------------------------------------------------


def _provenance(
    options: TextConversion,
    spm: SentencePieceModel | None,
    prefixes: list[PrefixFiles],
    spilled: dict[tuple[str, str], SpilledFile],
) -> dict[str, object]:
    """How the corpus was made: converter, version, options, inputs, sentencepiece model, unknown tokens."""
    inputs: dict[str, list[dict[str, object]]] = {}
    for p in prefixes:
        entry: dict[str, object] = {lang: str(path) for lang, path in p.files.items()}
        entry["lines"] = spilled[(p.name, options.src_lang)].rows
        inputs.setdefault(p.split, []).append(entry)
    return {
        "converter": "arrowmt.convert_text",
        "arrowmt_version": __version__,
        "options": options.data_options(),
        "sentencepiece_sha256": spm.sha256 if spm else None,
        "inputs": inputs,
        "unknown_tokens": unknown_report(options, prefixes, spilled),
    }


def unknown_report(
    options: TextConversion, prefixes: list[PrefixFiles], spilled: dict[tuple[str, str], SpilledFile]
) -> dict[str, dict[str, dict[str, object]]]:
    """Per split and column: ids written (``</s>`` included, as fairseq counts tokens), how many became
    ``<unk>`` (fairseq's "replaced") and that share in percent."""
    report: dict[str, dict[str, dict[str, object]]] = {}
    for split in SPLITS:
        members = [p for p in prefixes if p.split == split]
        if not members:
            continue
        report[split] = {}
        for role, lang in ((SOURCE, options.src_lang), (TARGET, options.tgt_lang)):
            chunks = [chunk for p in members for chunk in spilled[(p.name, lang)].chunks]
            tokens, unknown = sum(c.tokens for c in chunks), sum(c.unknown for c in chunks)
            percent = round(100.0 * unknown / tokens, 3) if tokens else 0.0
            report[split][role] = {"lang": lang, "tokens": tokens, "unknown": unknown, "percent": percent}
    return report


def unknown_lines(manifest: Manifest) -> tuple[list[str], list[str]]:
    """Lines reporting each split's and column's ``<unk>`` share (as fairseq-preprocess prints "% replaced"),
    and a warning for every share above :data:`UNKNOWN_WARNING_RATE` (a wrong dictionary, usually)."""
    report = manifest.provenance.get("unknown_tokens")
    lines: list[str] = []
    warnings: list[str] = []
    if not isinstance(report, dict):
        return lines, warnings
    for split, roles in sorted(report.items()):
        for role, stats in roles.items():
            lang, tokens, unknown = stats["lang"], stats["tokens"], stats["unknown"]
            share = unknown / tokens if tokens else 0.0
            lines.append(f"[{lang}] {split} {role}: {tokens} tokens, {100 * share:.2f}% replaced by <unk>")
            if share > UNKNOWN_WARNING_RATE:
                option = "--srcdict" if role == SOURCE else "--tgtdict"
                warnings.append(
                    f"{100 * share:.1f}% of the {role} ({lang}) tokens of {split} became <unk> "
                    f"(more than {100 * UNKNOWN_WARNING_RATE:.0f}%): check that the dictionary ({option}) "
                    "and the tokenization match this text"
                )
    return lines, warnings


BYTE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_byte_size(text: str, name: str = "chunk_bytes") -> int:
    """``"32M"`` -> 33554432: a positive number of bytes with an optional K, M or G suffix (powers of 1024)."""
    number, suffix = text.strip().upper().rstrip("B"), ""
    if number and number[-1] in BYTE_SUFFIXES:
        number, suffix = number[:-1], number[-1]
    if not number.isdigit() or int(number) < 1:
        raise InvalidParameterError(
            f"{name}: expected a positive size in bytes such as 65536, 512K or 32M, got {text!r}"
        )
    return int(number) * BYTE_SUFFIXES[suffix]
