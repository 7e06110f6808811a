"""Full structural check of an arrowmt folder: every offset, every id, every checksum.

Each split file gets every check that applies, so a corrupted file reports both its
checksum mismatch and *where* it is broken (record batch, row, column). Files are
opened through :class:`SplitFile`, whose validation on open (buffers inside the file,
each record batch's offsets running from 0 to its value count) makes the per-offset
reads here safe; pyarrow's full validation runs last, as a backstop.

The folder-level checks: the manifest lists at least one split file, every listed
dictionary loads, and every column names a dictionary the manifest lists.

A corpus's sampled segmentations (``sampled/``) are checked as two folders of their own, and each split is
opened in its samples. Side files found beside the corpus are checked too: every view (``*.view`` in the
folder or in a folder inside it) is opened over the corpus as a reader opens it
(header, description, row order, CRC-32, made from this corpus), and every cached batch
plan and block table in ``.arrowmt-cache`` must be a regular file whose header and
CRC-32 hold. Cache files of another format version are never read (their names
differ) and are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
from tqdm import tqdm

from arrowmt._errors import ArrowMTError, FormatError
from arrowmt.files import (
    BLOCKS_FORMAT,
    COPY_BLOCKS_FORMAT,
    PLAN_FORMAT,
    SideFile,
    SideFormat,
    check_blocks_header,
    file_sha256,
    open_side_file,
    progress_bar,
    stored_version,
)
from arrowmt.format import (
    CACHE_DIR_NAME,
    MANIFEST_NAME,
    ColumnInfo,
    Dictionary,
    FileEntry,
    Manifest,
    id_outside,
    split_path,
    unterminated_row,
)
from arrowmt.reading import SplitFile, attached_file, local_folder
from arrowmt.segments import (
    BUILD_HINT,
    FORMS_DIR,
    LATTICE_FORMAT,
    LATTICE_NAME,
    WORDS_DIR,
    SampledSplit,
    sampled_folder,
)
from arrowmt.splits import column_place, mismatch_error
from arrowmt.stored import block_orders, check_order_marker, check_row_order, order_files
from arrowmt.views._view import VIEW_SUFFIX, View

VocabSizes = dict[str, tuple[int, str] | None]
"""Dictionary file name listed by the manifest -> (number of symbols, content SHA-256), None if unreadable."""

TERMINATED_FORMATS = ("text", "table")  # what arrowmt's own converters write: every row ends with </s>

Tick = Callable[[int], object]
"""Advances the progress bar by a number of steps."""

CACHE_FILES = (("plan-*.bin", PLAN_FORMAT), ("blocks-*.bin", BLOCKS_FORMAT))
_STALE_CACHE = " (a cache file: delete it and it is rebuilt when needed)"


@dataclass
class VerifyReport:
    """What ``verify`` checked and any problems found (empty ``problems`` means the folder is sound)."""

    files: int = 0
    rows: int = 0
    tokens: int = 0
    problems: list[str] = field(default_factory=list)
    side_files: int = 0  # views, cache files and sampled segmentations' files found sound

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_dataset(
    path: str | os.PathLike[str],
    *,
    progress: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_limit: int | str | None = None,
) -> VerifyReport:
    """Check every file of the folder at ``path``; collect problems rather than stopping at the first.

    ``progress`` shows a bar on an interactive terminal: one step per file checksum and
    per record batch of each column. A URL is read whole from its store (each object's
    SHA-256 and block CRC-32s), and its rows through the cache in ``cache_dir``
    (at most ``cache_limit`` bytes); pyarrow's full validation of the local stream is left out there.
    """
    folder = local_folder(path, cache_dir, cache_limit)
    report = VerifyReport()
    manifest = Manifest.load(folder)
    if not manifest.files:
        report.problems.append(f"{folder / MANIFEST_NAME}: lists no split files (expected at least one)")
    with progress_bar(total=len(manifest.files), desc="verify", unit="step", enabled=progress) as bar:
        _verify_files(folder, manifest, report, bar)
        _verify_side_files(folder, report, bar)
        _verify_plan_orders(folder, manifest, report, bar)
        _verify_samples(folder, manifest, report, bar)
    return report


def _verify_files(folder: Path, manifest: Manifest, report: VerifyReport, bar: tqdm) -> None:
    """Every split file the manifest of ``folder`` lists, checked whole, with the dictionaries they name."""
    vocab_sizes = _dictionary_sizes(folder, manifest, report)
    pieces = _block_pieces(manifest)
    for name, entry in sorted(manifest.files.items()):
        _verify_file(split_path(folder, name), entry, vocab_sizes, report, bar, terminated=name not in pieces)


def _verify_samples(folder: Path, manifest: Manifest, report: VerifyReport, bar: tqdm) -> None:
    """A corpus's sampled segmentations (``sampled/``, if any): both folders' files and the lattice files checked
    whole, then each split opened in its samples as training opens it (made from this corpus, the lattice files
    written with the segmentation record both manifests hold: seed, alpha and model edited are refused)."""
    sampled = sampled_folder(folder)
    if not sampled.is_dir():
        return
    for inner in (sampled / WORDS_DIR, sampled / FORMS_DIR):
        try:
            inner_manifest = Manifest.load(inner)
        except (ArrowMTError, OSError) as exc:
            report.problems.append(f"{exc} (sampled segmentations: rebuild them with {BUILD_HINT})")
            return
        bar.total += len(inner_manifest.files)
        bar.refresh()
        files = VerifyReport()  # the corpus's rows and tokens are counted once, in its own files
        _verify_files(inner, inner_manifest, files, bar)
        report.problems.extend(files.problems)
        report.side_files += files.files
    for path in sorted((sampled / FORMS_DIR).glob(LATTICE_NAME.format(column="*"))):
        _count_or_report(report, lambda path=path: _check_side_file(path, LATTICE_FORMAT), "")
    for split in manifest.splits():
        _count_or_report(report, lambda split=split: _open_in_samples(folder, split), "")


def _open_in_samples(folder: Path, split: str) -> None:
    """FormatError unless ``split`` opens in its samples (not counted as a side file)."""
    SampledSplit(folder, split)


def _block_pieces(manifest: Manifest) -> set[str]:
    """The split files whose rows are pieces of LM blocks (a copy in plan order: ``arrowmt order
    --tokens-per-sample``), not sentences ending with </s>; a malformed entry is reported with the copy's table."""
    try:
        return {name for split in block_orders(manifest) for name in manifest.shards(split)}
    except FormatError:
        return set()


def _verify_file(
    file: Path, entry: FileEntry, vocab_sizes: VocabSizes, report: VerifyReport, bar: tqdm, terminated: bool = True
) -> None:
    """Check one split file; ``terminated``: its rows are sentences, which end with </s> when arrowmt's converters
    wrote them."""
    if not file.is_file():
        report.problems.append(f"{file}: listed in the manifest ({entry.rows} rows) but missing")
        return
    bar.set_postfix_str(file.name)
    remote = attached_file(file)
    if remote is None:
        problems = _checksum_problems(file, entry)
    else:
        problems = remote.store.check_object(remote.index, entry.sha256) + remote.store.check_cached(remote.index)
    bar.update(1)
    try:
        split = SplitFile(file, "sequential")
        bar.total += len(split.layouts[split.columns[0]].values_len) * len(split.columns)
        bar.refresh()
        _check_split(split, entry, vocab_sizes, bar.update, full=remote is None, terminated=terminated)
    except (ArrowMTError, OSError) as exc:
        problems.append(str(exc))
    report.problems.extend(problems)
    if not problems:
        report.files += 1
        report.rows += len(split)
        report.tokens += sum(c.tokens for c in split.metadata.columns.values())


def _checksum_problems(file: Path, entry: FileEntry) -> list[str]:
    try:
        size = file.stat().st_size
        if size != entry.size:
            return [f"{file}: expected {entry.size} bytes (manifest), got {size} (file changed or truncated)"]
        if file_sha256(file) != entry.sha256:
            return [f"{file}: SHA-256 differs from the manifest (file changed or corrupt)"]
    except OSError as exc:
        return [f"{file}: cannot read: {exc.strerror or exc}"]
    return []


def _dictionary_sizes(folder: Path, manifest: Manifest, report: VerifyReport) -> VocabSizes:
    sizes: VocabSizes = {}
    for name in sorted(set(manifest.dictionaries.values())):
        try:
            d = Dictionary.load(folder / name)
            sizes[name] = (len(d), d.sha256())
        except (ArrowMTError, OSError) as exc:
            sizes[name] = None
            report.problems.append(str(exc))
    return sizes


def _check_split(
    split: SplitFile, entry: FileEntry, vocab_sizes: VocabSizes, tick: Tick, full: bool, terminated: bool = True
) -> None:
    if len(split) != entry.rows:
        raise FormatError(f"{split.path}: expected {entry.rows} rows (manifest), got {len(split)} (metadata)")
    ends_with_eos = terminated and split.metadata.source_format in TERMINATED_FORMATS
    eos = split.metadata.special_ids.eos if ends_with_eos else None
    for name, info in split.metadata.columns.items():
        _check_dictionary(split.path, name, info, vocab_sizes)
        _check_column(split, name, info.vocab_size, info.tokens, tick, eos)
    if full:  # a remote file's local cache holds only some blocks at a time
        _validate_with_pyarrow(split.path)


def _check_dictionary(path: Path, name: str, info: ColumnInfo, vocab_sizes: VocabSizes) -> None:
    if info.dictionary not in vocab_sizes:
        raise FormatError(
            f"{path}: column {name!r} names dictionary {info.dictionary!r}, which is not in the folder "
            f"(the manifest lists {sorted(vocab_sizes)})"
        )
    digest = vocab_sizes[info.dictionary] or (info.vocab_size, info.dictionary_sha256)  # unreadable: reported
    if error := mismatch_error(path.parent / info.dictionary, digest, column_place(path, name), info):
        raise error


def _validate_with_pyarrow(path: Path) -> None:
    try:
        with pa.memory_map(str(path)) as source:
            for k, batch in enumerate(ipc.open_stream(source)):
                _validate_batch(path, k, batch)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise FormatError(f"{path}: pyarrow cannot read the stream: {exc}") from exc


def _validate_batch(path: Path, k: int, batch: pa.RecordBatch) -> None:
    try:
        batch.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise FormatError(f"{path}: record batch {k} fails full validation: {exc}") from exc


def _check_column(split: SplitFile, name: str, vocab_size: int, tokens: int, tick: Tick, eos: int | None) -> None:
    """Every offset (the reader's check), every id of every record batch, the token total, and (``eos``
    given) that every row ends with ``eos``."""
    total = 0
    for batch in split.batch_offsets(name):
        split.batch_lengths(name, batch)
        values = split.words_range(batch.values_pos, batch.values_len)
        bad = id_outside(values, batch.offsets, vocab_size)
        if bad is None and eos is not None:
            bad = unterminated_row(values, batch.offsets, eos)
        if bad:
            raise FormatError(f"{split.path}: row {batch.first_row + bad[0]} ({name}): {bad[1]}")
        total += batch.values_len
        tick(1)
    if total != tokens:
        raise FormatError(f"{split.path}: column {name!r}: expected {tokens} tokens (metadata), got {total}")


# ---------------------------------------------------------------- side files


def find_views(folder: Path) -> list[Path]:
    """View files in ``folder`` or in a (not hidden) folder inside it, where views over it are kept."""
    found = list(folder.glob(f"*{VIEW_SUFFIX}"))
    for inner in folder.iterdir():
        if inner.is_dir() and not inner.name.startswith("."):
            found.extend(inner.glob(f"*{VIEW_SUFFIX}"))
    return sorted(found)


def _verify_side_files(folder: Path, report: VerifyReport, bar: tqdm) -> None:
    views = find_views(folder)
    cache = folder / CACHE_DIR_NAME
    cached = [(path, fmt) for pattern, fmt in CACHE_FILES for path in sorted(cache.glob(pattern))]
    bar.total += len(views) + len(cached)
    bar.refresh()
    for path in views:
        _count_or_report(report, lambda path=path: _check_view_file(path, folder), "")
        bar.update(1)
    for path, fmt in cached:
        _count_or_report(report, lambda path=path, fmt=fmt: _check_cache_file(path, fmt), _STALE_CACHE)
        bar.update(1)


def _verify_plan_orders(folder: Path, manifest: Manifest, report: VerifyReport, bar: tqdm) -> None:
    """The side files of splits stored in plan order (copies made by ``arrowmt order``), checked whole: row order
    files, and the block tables of LM blocks (header, chunk table, every chunk; their ranges are checked as
    training reads them)."""
    try:
        rows, blocks = order_files(manifest), block_orders(manifest)
    except ArrowMTError as exc:
        report.problems.append(f"{folder / MANIFEST_NAME}: {exc}")
        return
    row_files = [(folder / name, _split_rows(manifest, split)) for split, name in sorted(rows.items())]
    checks: list[Callable[[], object]] = [lambda path=path, n=n: check_row_order(path, n) for path, n in row_files]
    tables = [(folder / str(e["file"]), str(e["table"]), _split_rows(manifest, s)) for s, e in sorted(blocks.items())]
    checks += [lambda path=path, key=key, n=n: _check_copy_table(path, key, n) for path, key, n in tables]
    checks += [lambda split=split: _check_stored_order(folder, manifest, split) for split in manifest.splits()]
    bar.total += len(checks)
    bar.refresh()
    for check in checks:
        _count_or_report(report, check, "")
        bar.update(1)


def _check_stored_order(folder: Path, manifest: Manifest, split: str) -> None:
    """What the split's files record of the order they are stored in is what the manifest says (a copy in plan
    order whose manifest entries were edited or removed is reported)."""
    path = split_path(folder, manifest.shards(split)[0])
    if path.is_file():  # a missing file is reported as such
        check_order_marker(folder, manifest, split, SplitFile(path, "sequential").metadata.stored_order)


def _check_copy_table(path: Path, key: str, rows: int) -> SideFormat:
    """A copy's block table: its header names the manifest's table key and the split's rows, every chunk sound."""

    def check(side: SideFile) -> None:
        check_blocks_header(path, side.values, {"key": key, "rows": rows}, "the manifest's; make the copy again")

    return _check_side_file(path, COPY_BLOCKS_FORMAT, check)


def _split_rows(manifest: Manifest, split: str) -> int:
    return sum(manifest.files[shard].rows for shard in manifest.shards(split))


def _count_or_report(report: VerifyReport, check: Callable[[], object], advice: str) -> None:
    try:
        if check() is not None:
            report.side_files += 1
    except (ArrowMTError, OSError) as exc:
        report.problems.append(f"{exc}{advice}")


def _check_view_file(path: Path, folder: Path) -> View:
    """The view at ``path`` once every byte of it is checked (every chunk, rows in order); FormatError if bad."""
    view = View(path, folder)
    view.check_all()
    return view


def _check_cache_file(path: Path, fmt: SideFormat) -> SideFormat | None:
    """``fmt`` once ``path`` is found sound (header, chunk table, every chunk), None for a file of another version
    (never read); FormatError if bad."""
    version = stored_version(path, fmt)
    if version is not None and version != fmt.version:
        return None
    return _check_side_file(path, fmt)


def _check_side_file(path: Path, fmt: SideFormat, check: Callable[[SideFile], None] | None = None) -> SideFormat:
    """``fmt`` once ``path`` is found sound (header, ``check`` of its fields, chunk table, every chunk); FormatError
    if bad."""
    side = open_side_file(path, fmt, None, check)
    try:
        side.check_all()
    finally:
        side.map.close()
    return fmt
