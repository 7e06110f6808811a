"""Export an arrowmt folder back to fairseq's mmap binarized format (``.idx`` + ``.bin``)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from pathlib import Path

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.converters._fairseq_binary import MMAP_MAGIC
from arrowmt.converters._pairs import fairseq_split_name
from arrowmt.files import StagedOutput, atomic_path, progress_bar, reading, write_bytes_atomic
from arrowmt.format import SOURCE, TARGET, TOKENS, Manifest, id_outside, plain_name_error, read_json
from arrowmt.reading import SplitFile, local_only
from arrowmt.splits import check_split_dictionaries, open_shard
from arrowmt.stored import refuse_stored_order

logger = logging.getLogger(__name__)

LM_DICTIONARY = "dict.txt"  # the dictionary of fairseq's monolingual {split} files
EXPORT_RECORD = ".arrowmt-export.json"  # what the export wrote, so that a later one removes only that
EXPORT_FORMAT = "arrowmt-fairseq-export"
EXPORTED_SUFFIXES = (".idx", ".bin", ".txt")
UINT16_LIMIT = 65500
DTYPE_CODES = {np.dtype("<u2"): 8, np.dtype("<i4"): 4}


def index_dtype(vocab_size: int) -> np.dtype:
    """The token dtype fairseq picks for a vocabulary: uint16 below 65,500 symbols, else int32."""
    return np.dtype("<u2") if vocab_size < UINT16_LIMIT else np.dtype("<i4")


def mmap_index_bytes(lengths: np.ndarray, dtype: np.dtype) -> bytes:
    """A fairseq mmap ``.idx`` (version 1) for rows of ``lengths`` tokens stored as ``dtype``."""
    sizes = lengths.astype("<i4")
    pointers = np.zeros(len(lengths), dtype="<i8")
    np.cumsum(lengths[:-1] * dtype.itemsize, out=pointers[1:])
    header = MMAP_MAGIC + struct.pack("<QBQ", 1, DTYPE_CODES[dtype], len(lengths))
    return header + sizes.tobytes() + pointers.tobytes()


def export_fairseq(path: str | Path, out: str | Path, overwrite: bool = False, progress: bool = True) -> list[Path]:
    """Write every split of the arrowmt folder ``path`` as fairseq mmap files in ``out``; return the prefixes.

    Everything is staged beside ``out`` and published at once (see :class:`StagedOutput`),
    with a record of the files written (``.arrowmt-export.json``). With ``overwrite``, the
    files an earlier export recorded there and this one does not write are deleted;
    nothing else in ``out`` is touched.
    """
    folder = local_only(path, "path", "export")
    with reading(folder):  # the manifest and every split file from one publish
        manifest = Manifest.load(folder)
        refuse_stored_order(manifest, folder, "export")
        shards = {split: open_shard(folder, manifest, split, "sequential") for split in manifest.files}
    with StagedOutput.begin(out, overwrite) as staged:
        earlier = earlier_export(staged.target)
        copies = {name: name for name in manifest.dictionaries.values()} | _language_model_dictionary(shards)
        dictionaries = sorted(copies)
        for name in dictionaries:
            with atomic_path(staged.path / name) as tmp:
                shutil.copyfile(folder / copies[name], tmp)
        check_split_dictionaries(staged.path, shards.values())  # the copies are the splits' dictionaries
        prefixes = []
        for split, shard in shards.items():
            prefixes += [_export_column(shard, split, c, staged.path, manifest, progress) for c in shard.columns]
        names = sorted({f"{p.name}.{ext}" for p in prefixes for ext in ("idx", "bin")} | set(dictionaries))
        write_bytes_atomic(staged.path / EXPORT_RECORD, _record_bytes(names))
        staged.publish([*names, EXPORT_RECORD], remove=earlier)
    return [staged.target / p.name for p in prefixes]


def _language_model_dictionary(shards: dict[str, SplitFile]) -> dict[str, str]:
    """``{"dict.txt": the token column's dictionary}`` for a monolingual folder whose dictionary has another name
    (``convert text --lang en`` writes ``dict.en.txt``): fairseq's ``language_modeling`` task, like ``arrowmt
    convert fairseq``, reads the ``{split}`` files' dictionary as ``dict.txt``."""
    if not shards or any(shard.columns != (TOKENS,) for shard in shards.values()):
        return {}
    names = {shard.metadata.columns[TOKENS].dictionary for shard in shards.values()}
    if len(names) != 1:
        return {}
    name = names.pop()
    return {} if name == LM_DICTIONARY else {LM_DICTIONARY: name}


def earlier_export(out: Path) -> frozenset[str]:
    """The files an earlier :func:`export_fairseq` recorded in ``out`` (none without a readable record)."""
    path = out / EXPORT_RECORD
    if not os.path.lexists(path):
        return frozenset()
    try:
        data = read_json(path, "export record")
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, list) or not all(_exported_name(name) for name in files):
            raise FormatError(f"{path}: expected {{'files': [.idx, .bin, .txt file names]}}, got {str(data)[:80]}")
    except FormatError as exc:
        logger.warning("%s; files it may list are left in place", exc)
        return frozenset()
    return frozenset(files)


def _exported_name(name: object) -> bool:
    return plain_name_error(name) is None and str(name).endswith(EXPORTED_SUFFIXES)


def _record_bytes(names: list[str]) -> bytes:
    return (json.dumps({"format": EXPORT_FORMAT, "files": names}, indent=2) + "\n").encode("utf-8")


def _prefix(dest: Path, name: str, column: str, shard: SplitFile, manifest: Manifest) -> Path:
    """fairseq's name for one column of split file ``name``: ``{split}.{src}-{tgt}.{lang}`` (with several
    pairs, arrowmt's ``train.de-en1`` is fairseq's ``train1.de-en``), or ``{split}`` for a token column."""
    if column == TOKENS:
        return dest / name
    langs = shard.metadata.languages
    src, tgt = langs[SOURCE], langs[TARGET]
    split = fairseq_split_name(name, src, tgt) if manifest.language_pairs else name
    return dest / f"{split}.{src}-{tgt}.{langs[column]}"


def _export_column(shard: SplitFile, name: str, column: str, dest: Path, manifest: Manifest, progress: bool) -> Path:
    vocab_size = shard.metadata.columns[column].vocab_size
    dtype = index_dtype(vocab_size)
    prefix = _prefix(dest, name, column, shard, manifest)
    lengths = shard.lengths(column)  # checks every offset, so each batch's values below are its rows
    with atomic_path(f"{prefix}.bin") as tmp, open(tmp, "wb") as handle:
        bar = progress_bar(len(shard), f"export {prefix.name}", "rows", progress)
        with bar:
            for batch in shard.batch_offsets(column):
                begin, end = batch.values_pos + int(batch.offsets[0]), batch.values_pos + int(batch.offsets[-1])
                values = shard.words_range(begin, end - begin)
                if bad := id_outside(values, batch.offsets, vocab_size):  # narrowing would wrap it silently
                    raise FormatError(f"{shard.path}: row {batch.first_row + bad[0]} ({column}): {bad[1]}")
                handle.write(values.astype(dtype).tobytes())
                bar.update(batch.offsets.shape[0] - 1)
    with atomic_path(f"{prefix}.idx") as tmp:
        tmp.write_bytes(mmap_index_bytes(lengths, dtype))
    return prefix
