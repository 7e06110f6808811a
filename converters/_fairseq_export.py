"""Export an arrowmt folder back to fairseq's mmap binarized format (``.idx`` + ``.bin``)."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
from arrowmt.converters._fairseq_binary import MMAP_MAGIC

from arrowmt.format._atomic import atomic_path, prepare_output_dir, remove_unlisted
from arrowmt.format._manifest import Manifest, split_path
from arrowmt.format._progress import progress_bar
from arrowmt.format._reader import SplitFile

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
    """Write every split of the arrowmt folder ``path`` as fairseq mmap files in ``out``; return the prefixes."""
    folder, dest = Path(path), prepare_output_dir(out, overwrite)
    manifest = Manifest.load(folder)
    for name in sorted(set(manifest.dictionaries.values())):
        with atomic_path(dest / name) as tmp:
            shutil.copyfile(folder / name, tmp)
    prefixes = []
    for split in manifest.files:
        shard = SplitFile(split_path(folder, split))
        prefixes += [_export_column(shard, split, c, dest, manifest, progress) for c in shard.columns]
    keep = {f"{p.name}.{ext}" for p in prefixes for ext in ("idx", "bin")} | set(manifest.dictionaries.values())
    remove_unlisted(dest, ("*.idx", "*.bin", "dict*.txt"), keep)
    return prefixes


def _prefix(dest: Path, split: str, column: str, manifest: Manifest) -> Path:
    langs = manifest.languages
    if column == "tokens":
        return dest / split
    return dest / f"{split}.{langs['source']}-{langs['target']}.{langs[column]}"


def _export_column(shard: SplitFile, split: str, column: str, dest: Path, manifest: Manifest, progress: bool) -> Path:
    dtype = index_dtype(shard.metadata.columns[column].vocab_size)
    prefix = _prefix(dest, split, column, manifest)
    lengths = shard.lengths(column)  # checks every offset, so each batch's values below are its rows
    with atomic_path(f"{prefix}.bin") as tmp, open(tmp, "wb") as handle:
        bar = progress_bar(len(shard), f"export {prefix.name}", "rows", progress)
        with bar:
            for batch in shard.batch_offsets(column):
                begin, end = batch.values_pos + int(batch.offsets[0]), batch.values_pos + int(batch.offsets[-1])
                handle.write(shard.words[begin:end].astype(dtype).tobytes())
                bar.update(batch.offsets.shape[0] - 1)
    with atomic_path(f"{prefix}.idx") as tmp:
        tmp.write_bytes(mmap_index_bytes(lengths, dtype))
    return prefix
