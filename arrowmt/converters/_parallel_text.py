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
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm import tqdm

from arrowmt._errors import InvalidParameterError
from arrowmt._version import __version__
from arrowmt.converters._output import OutputFolder, special_ids_of
from arrowmt.converters._pairs import split_lang_pairs
from arrowmt.converters._tasks import TaskRunner, open_runner
from arrowmt.converters._text import SentencePieceModel, check_same_line_count
from arrowmt.converters._text_chunks import (
    DEFAULT_CHUNK_BYTES,
    ColumnPlan,
    DictionaryTask,
    EncodeTask,
    SpillSlice,
    TextChunk,
    TokenizedChunk,
    TokenizeTask,
    WriteTask,
    build_dictionary,
    encode_chunk,
    text_chunks,
    tokenize_chunk,
    write_file,
)
from arrowmt.converters._text_inputs import (
    ALL_WORDS,
    NO_THRESHOLD,
    PrefixFiles,
    TextConversion,
    column_roles,
    prefix_files,
)
from arrowmt.files import progress_bar, temp_prefix
from arrowmt.format import SOURCE, TARGET, TOKENS, ColumnInfo, Dictionary, Manifest, SpecialIds

SOURCE_FORMAT = "text"
UNKNOWN_WARNING_RATE = 0.05  # above this share of <unk> per column, the CLI warns loudly
MERGE_ROWS = 1 << 20  # merge buffered per-chunk counts once they hold this many entries


def convert_text(  # noqa: PLR0913  # fairseq-preprocess's options, by its names
    trainpref: str | None,
    out: str | Path,
    *,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    lang_pairs: str | list[str] | tuple[str, ...] | None = None,
    lang: str | None = None,
    validpref: str | None = None,
    testpref: str | None = None,
    srcdict: str | None = None,
    tgtdict: str | None = None,
    joined_dictionary: bool = False,
    thresholdsrc: int = NO_THRESHOLD,
    thresholdtgt: int = NO_THRESHOLD,
    nwordssrc: int = ALL_WORDS,
    nwordstgt: int = ALL_WORDS,
    spm_model: str | None = None,
    spm_sampling: bool = False,
    spm_alpha: float | None = None,
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

    * ``src_lang``/``tgt_lang``: one pair; splits ``train``, ``valid``, ``test``.
    * ``lang_pairs`` (instead): several pairs, ``"de-en,fr-en"`` or a list, into one folder
      laid out like fairseq's multilingual data-bin: split ``{split}.{src}-{tgt}`` per pair,
      one dictionary for every language (built over every train file as
      ``--joined-dictionary`` builds it, or ``srcdict``) saved as ``dict.{lang}.txt``. A pair
      reads ``{pref}.{src}-{tgt}.{lang}`` if it exists, else ``{pref}.{lang}``.
    * ``lang`` (instead): monolingual text ``{pref}.{lang}``, as ``fairseq-preprocess
      --only-source --source-lang {lang}`` binarizes it (a language model's corpus): one column
      ``tokens``, its dictionary ``dict.{lang}.txt`` built with the source options (``srcdict``,
      ``thresholdsrc``, ``nwordssrc``); read it with ``open_blocks`` or the fairseq plugin.
    * ``workers``: local worker processes (1: all in this process); with ``executor``, how
      many tasks it runs at once (read from the executor when not given).
    * ``executor``: any ``concurrent.futures.Executor`` to run the chunks on, e.g.
      ``distributed.Client(...).get_executor()`` for a Dask cluster (its workers must see the
      input files and ``out`` at the same paths: they write the output files themselves).
    * ``shard_rows``: write each split as files of this many rows (``train``, ``train1``, ...;
      readers join them); default: one file per prefix.
    * ``spm_sampling`` (with ``spm_model``): also store the lattices of every word, so that each epoch reads every row
      in a segmentation drawn afresh (subword regularization, sentencepiece's law with ``spm_alpha``, by default
      that function's ``alpha``; a model that cannot sample is refused before anything is converted; see
      :func:`~arrowmt.converters.add_sampled_segmentations`, which this calls once the corpus is written), read
      with ``open_dataset(out, split, segmentation="sampled")``.

    The output is byte-identical whatever ``workers``, ``chunk_bytes`` or ``executor``.
    Returns the manifest; ``manifest.provenance`` records the options, the sentencepiece
    model's SHA-256 and the share of tokens that became ``<unk>`` per split and column.
    """
    options = TextConversion(
        prefixes={"train": trainpref, "valid": validpref, "test": testpref},
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        lang_pairs=split_lang_pairs(lang_pairs),
        lang=lang,
        srcdict=srcdict,
        tgtdict=tgtdict,
        joined_dictionary=joined_dictionary,
        thresholds=(thresholdsrc, thresholdtgt),
        nwords=(nwordssrc, nwordstgt),
        spm_model=spm_model,
        spm_sampling=spm_sampling,
        spm_alpha=spm_alpha,
        workers=workers,
        chunk_bytes=chunk_bytes,
        shard_rows=shard_rows,
        executor=executor,
    )
    return convert_with_options(options, out, overwrite=overwrite, progress=progress)


# ----- pass bookkeeping -------------------------------------------------------------------------


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
    """A text file after pass 1: its language and chunks, in order."""

    path: Path
    lang: str
    chunks: list[ChunkRef] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(chunk.rows for chunk in self.chunks)


class Spilled(dict[tuple[Path, str, int], SpilledFile]):
    """Every text file to read, once per dictionary that encodes it: a file several pairs read is read once
    (and counted once: fairseq-preprocess counts a joined dictionary's files as a set of paths); a prefix one
    split lists again (:attr:`PrefixFiles.repeat`) is read again."""

    def __init__(self, options: TextConversion, prefixes: list[PrefixFiles]) -> None:
        super().__init__()
        self._dictionary_key = options.dictionary_key
        for p in prefixes:
            for lang, path in p.files.items():
                self.setdefault(self.key(p, lang), SpilledFile(path, lang))

    def key(self, prefix: PrefixFiles, lang: str) -> tuple[Path, str, int]:
        return prefix.files[lang], self._dictionary_key(lang), prefix.repeat

    def file(self, prefix: PrefixFiles, lang: str) -> SpilledFile:
        return self[self.key(prefix, lang)]


# ----- the conversion ---------------------------------------------------------------------------


def convert_with_options(
    options: TextConversion, out: str | Path, overwrite: bool = False, progress: bool = True
) -> Manifest:
    """:func:`convert_text` with its options as one value (a :class:`TextConversion`): encode every split's text
    with fairseq-compatible dictionaries, write an arrowmt folder at ``out``, then store the sampled
    segmentations ``options`` asks for. Returns the manifest."""
    if options.sampling is not None and options.spm_model:
        from arrowmt.converters._sampled import add_sampled_segmentations, check_model  # only when asked for

        check_model(options.spm_model, options.sampling.alpha)  # a model that cannot sample: nothing published
    manifest = _convert(options, out, overwrite, progress)
    if options.sampling is not None and options.spm_model:
        add_sampled_segmentations(out, options.spm_model, **options.sampling.as_options(), overwrite=overwrite,
                                  progress=progress)  # fmt: skip
    return manifest


def _convert(options: TextConversion, out: str | Path, overwrite: bool, progress: bool) -> Manifest:
    """Encode every split's text with fairseq-compatible dictionaries and write an arrowmt folder."""
    prefixes = prefix_files(options)
    spm = SentencePieceModel.load(options.spm_model) if options.spm_model else None
    given = {key: Dictionary.load(path) for key, path in options.given_dictionaries().items()}
    with OutputFolder.prepare(out, options.column_languages(), SOURCE_FORMAT, overwrite, progress) as folder:
        counted = {lang: options.dictionary_key(lang) for lang in options.languages}
        counted = {lang: key for lang, key in counted.items() if key not in given}
        plan = _TokenizePlan(counted, _Spills(folder.path), options.chunk_bytes, spm)
        files = Spilled(options, prefixes)
        try:
            with open_runner(options.executor, _parallelism(options, files)) as runner:
                spilled, counts = _tokenize_all(runner, files, prefixes, plan, progress)
                _check_line_counts(prefixes, spilled)
                infos, specials = _dictionaries(runner, options, folder, given, counts)
                saved = {lang: (str(folder.path / i.dictionary), i.dictionary_sha256) for lang, i in infos.items()}
                _encode_all(runner, spilled, saved, plan.spills, progress)
                tasks = _write_tasks(options, folder, prefixes, spilled, infos, specials)
                written = _write_all(runner, tasks, progress)
        finally:
            plan.spills.remove()
        for name in written:
            folder.record(name)
        folder.manifest.provenance = _provenance(options, spm, prefixes, spilled)
        if options.multi:
            folder.manifest.language_pairs = list(options.lang_pairs)
        return folder.finish()


def _parallelism(options: TextConversion, files: Spilled) -> int:
    """Local worker processes: ``workers``, but no more than ``chunk_bytes`` go into the text (on disk): a
    process costs about 0.4 s of CPU to start, a 32 MiB chunk 0.5 s to tokenize. With an executor, ``workers``."""
    if options.executor is not None:
        return options.workers
    size = sum(target.path.stat().st_size for target in files.values())
    return max(1, min(options.workers, -(-size // options.chunk_bytes)))


def _column_info(folder: OutputFolder, lang: str, dictionary: Dictionary) -> ColumnInfo:
    """Save ``lang``'s dictionary in ``folder``; the column description of text in ``lang`` (as a source: the
    role is set per split)."""
    name = folder.add_dictionary(lang, dictionary)
    return ColumnInfo(SOURCE, lang, name, dictionary.sha256(), len(dictionary), 0)


def _dictionaries(
    runner: TaskRunner,
    options: TextConversion,
    folder: OutputFolder,
    given: dict[str, Dictionary],
    counts: dict[str, TokenCounts],
) -> tuple[dict[str, ColumnInfo], SpecialIds]:
    """Each language's dictionary saved in ``folder`` and its column description, and the special ids: a given
    dictionary is saved here, the others are built from their counts like fairseq-preprocess, one task per
    dictionary (in parallel; each worker keeps the one it built for the chunks it encodes)."""
    langs = {key: [lang for lang in options.languages if options.dictionary_key(lang) == key] for key in counts}
    tasks = []
    for key, counted in counts.items():
        paths = [folder.path / folder.dictionary_name(lang) for lang in langs[key]]
        tasks.append(counted.task(*options.limits(key), options.padding_factor, paths))
    built = dict(zip(counts, runner.map(build_dictionary, tasks), strict=True))
    infos: dict[str, ColumnInfo] = {}
    specials: list[SpecialIds] = []
    for lang in options.languages:
        key = options.dictionary_key(lang)
        if key in given:
            infos[lang] = _column_info(folder, lang, given[key])
            specials.append(special_ids_of(given[key]))
        else:
            result = built[key]
            infos[lang] = ColumnInfo(SOURCE, lang, folder.record_dictionary(lang), result.sha256, result.size, 0)
            specials.append(result.special_ids)
    return infos, specials[0]


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
        table = pa.table({"symbol": chunk.vocabulary.cast(pa.large_string()), "count": _int64_array(chunk.counts)})
        self._tables.append(table)
        self._pending += table.num_rows
        if self._pending > max(MERGE_ROWS, self._merged):
            self._merge()

    def _merge(self) -> None:
        """One table of distinct symbols: ids by hashing (``dictionary_encode``), counts summed per id."""
        if len(self._tables) > 1:
            table = pa.concat_tables(self._tables)
            ids = pc.dictionary_encode(table["symbol"].combine_chunks())
            counts = _values(table["count"].combine_chunks(), np.int64)
            sums = np.bincount(_values(ids.indices, np.int32), weights=counts, minlength=len(ids.dictionary))
            self._tables = [pa.table({"symbol": ids.dictionary, "count": _int64_array(sums.astype(np.int64))})]
        self._merged = sum(table.num_rows for table in self._tables)
        self._pending = 0

    def task(self, threshold: int, nwords: int, padding_factor: int, paths: list[Path]) -> DictionaryTask:
        """The task building (and saving at ``paths``) the dictionary ``fairseq-preprocess`` builds from this text."""
        self._merge()
        table = self._tables[0] if self._tables else pa.table({"symbol": pa.array([], pa.large_string())})
        counts = _values(table["count"].combine_chunks(), np.int64) if self._tables else np.zeros(0, np.int64)
        return DictionaryTask(
            table["symbol"].combine_chunks(), counts, self.lines, threshold, nwords, padding_factor,
            tuple(str(path) for path in paths),
        )  # fmt: skip


def _values(array: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    """The values of a primitive Arrow array without nulls, as a NumPy view (``to_numpy`` would make pyarrow
    import pandas in this process, 0.5 s, to look for pandas objects)."""
    size = np.dtype(dtype).itemsize
    buffer = array.buffers()[1]
    if buffer is None:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype, count=len(array), offset=array.offset * size)


def _int64_array(values: np.ndarray) -> pa.Array:
    """``values`` as an int64 Arrow array, without pyarrow's pandas check (:func:`_values`)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), values.shape[0], [None, pa.py_buffer(values)])


class _Spills:
    """Pass-1 spill files, named as temporary files inside the output folder (a later run clears leftovers)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._numbers = itertools.count()
        self._paths: list[Path] = []

    def new(self) -> str:
        path = self.folder / f"{temp_prefix()}spill-{next(self._numbers):06d}.arrow"
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
    spilled: Spilled,
    prefixes: list[PrefixFiles],
    plan: _TokenizePlan,
    progress: bool,
) -> tuple[Spilled, dict[str, TokenCounts]]:
    """Pass 1 over every chunk of every distinct file, in order: spill files per file, merged counts per
    dictionary (each train file counted once, however many pairs read it)."""
    train = {spilled.key(p, lang) for p in prefixes if p.kind == "train" for lang in p.files}
    counts = {key: TokenCounts() for key in set(plan.counted.values())}
    planned: deque[tuple[SpilledFile, TextChunk, str]] = deque()
    total = sum(target.path.stat().st_size for target in spilled.values())

    def tasks(read_bar: tqdm) -> Iterator[TokenizeTask]:
        for key, target in spilled.items():
            count = key in train and target.lang in plan.counted
            for chunk in text_chunks(target.path, plan.chunk_bytes):
                spill = plan.spills.new()
                planned.append((target, chunk, spill))
                read_bar.update(chunk.disk_bytes)
                yield TokenizeTask(chunk, spill, count, plan.spm)

    with (
        progress_bar(total, "read", "B", progress) as read_bar,
        progress_bar(total, "count", "B", progress) as count_bar,
        contextlib.closing(runner.map(tokenize_chunk, tasks(read_bar))) as results,
    ):
        for result in results:
            target, chunk, spill = planned.popleft()
            if result.bad is not None:
                raise result.bad.error(chunk.path, first_line=target.rows, first_byte=chunk.start)
            target.chunks.append(ChunkRef(spill, result.rows, chunk.disk_bytes))
            if result.vocabulary is not None:
                counts[plan.counted[target.lang]].add(result)
            count_bar.update(chunk.disk_bytes)
    return spilled, counts


def _check_line_counts(prefixes: list[PrefixFiles], spilled: Spilled) -> None:
    for p in prefixes:
        first, *others = (spilled.file(p, lang) for lang in p.langs)
        for other in others:
            check_same_line_count(first.path, first.rows, other.path, other.rows)


# ----- pass 2 -----------------------------------------------------------------------------------


def _encode_all(
    runner: TaskRunner,
    spilled: Spilled,
    saved: dict[str, tuple[str, str]],
    spills: _Spills,
    progress: bool,
) -> None:
    """Every chunk's ids through its language's saved dictionary ``saved[lang]`` (file, SHA-256); each spill
    is replaced by its encoded chunk as soon as that is written."""
    refs = [(chunk, saved[target.lang]) for target in spilled.values() for chunk in target.chunks]
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
    files: dict[str, list[SpilledFile]]  # per language (source first), in order

    @property
    def langs(self) -> tuple[str, ...]:
        return tuple(self.files)


def _streams(options: TextConversion, prefixes: list[PrefixFiles], spilled: Spilled) -> list[_Stream]:
    groups: dict[str, list[PrefixFiles]] = {}
    for p in prefixes:
        groups.setdefault(p.name if options.shard_rows is None else p.split, []).append(p)
    return [
        _Stream(
            members[0].split,
            [p.name for p in members],
            {lang: [spilled.file(p, lang) for p in members] for lang in members[0].langs},
        )
        for members in groups.values()
    ]


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
    spilled: Spilled,
    infos: dict[str, ColumnInfo],
    specials: SpecialIds,
) -> list[tuple[WriteTask, int]]:
    """One task per output file, with the on-disk bytes of text it stands for (progress)."""
    tasks = []
    for stream in _streams(options, prefixes, spilled):
        roles = column_roles(stream.langs)
        columns_of = {lang: replace(infos[lang], role=role) for role, lang in zip(roles, stream.langs, strict=True)}
        rows = sum(f.rows for f in stream.files[stream.langs[0]])
        for name, start, stop in _file_ranges(stream, rows, options.shard_rows):
            columns = {
                columns_of[lang].role: ColumnPlan(
                    columns_of[lang],
                    ",".join(str(f.path) for f in stream.files[lang]),
                    _slices(stream.files[lang], start, stop),
                )
                for lang in stream.langs
            }
            task = WriteTask(str(folder.split_file(name)), name, stop - start, columns, specials, SOURCE_FORMAT)
            tasks.append((task, _disk_share(stream, start, stop, rows)))
    return tasks


def _disk_share(stream: _Stream, start: int, stop: int, rows: int) -> int:
    """The text bytes on disk that rows ``start:stop`` stand for (their share of the stream's files)."""
    disk = sum(chunk.disk_bytes for files in stream.files.values() for f in files for chunk in f.chunks)
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
    spilled: Spilled,
) -> dict[str, object]:
    """How the corpus was made: converter, version, options, inputs, sentencepiece model, unknown tokens."""
    inputs: dict[str, list[dict[str, object]]] = {}
    for p in prefixes:
        entry: dict[str, object] = {lang: str(path) for lang, path in p.files.items()}
        entry["lines"] = spilled.file(p, p.langs[0]).rows
        inputs.setdefault(p.split, []).append(entry)
    return {
        "converter": "arrowmt.convert_text",
        "arrowmt_version": __version__,
        "options": options.data_options(),
        "sentencepiece_sha256": spm.sha256 if spm else None,
        "inputs": inputs,
        "unknown_tokens": unknown_report(prefixes, spilled),
    }


def unknown_report(prefixes: list[PrefixFiles], spilled: Spilled) -> dict[str, dict[str, dict[str, object]]]:
    """Per split and column: ids written (``</s>`` included, as fairseq counts tokens), how many became
    ``<unk>`` (fairseq's "replaced") and that share in percent."""
    report: dict[str, dict[str, dict[str, object]]] = {}
    for split in dict.fromkeys(p.split for p in prefixes):
        members = [p for p in prefixes if p.split == split]
        report[split] = {}
        for role, lang in zip(column_roles(members[0].langs), members[0].langs, strict=True):
            chunks = [chunk for p in members for chunk in spilled.file(p, lang).chunks]
            tokens, unknown = sum(c.tokens for c in chunks), sum(c.unknown for c in chunks)
            percent = round(100.0 * unknown / tokens, 3) if tokens else 0.0
            report[split][role] = {"lang": lang, "tokens": tokens, "unknown": unknown, "percent": percent}
    return report


def unknown_lines(manifest: Manifest) -> tuple[list[str], list[str]]:
    """Lines reporting each split's and column's ``<unk>`` share (as fairseq-preprocess prints "% replaced"),
    and a warning for every share above :data:`UNKNOWN_WARNING_RATE` (a wrong dictionary, usually)."""
    report = manifest.provenance.get("unknown_tokens")
    options = manifest.provenance.get("options")
    joined = isinstance(options, dict) and bool(options.get("joined_dictionary"))
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
                option = "--tgtdict" if role == TARGET else "--srcdict"
                side = "" if role == TOKENS else f"{role} "
                dictionary = "joined dictionary" if joined else f"{side}dictionary ({option} or the train text)"
                warnings.append(
                    f"{100 * share:.1f}% of the {role} ({lang}) tokens of {split} became <unk> "
                    f"(more than {100 * UNKNOWN_WARNING_RATE:.0f}%): check that the {dictionary} "
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
