"""Monolingual test corpora for the language-model tests: real ``fairseq-preprocess`` output and small handmade ones."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from arrowmt import convert_fairseq
from arrowmt.testing import TOKENS, ColumnData, Ragged, file_sha256
from tests.builders import NUM_SPECIALS, fairseq_mmap, write_columns
from tests.conftest import MULTI30K, fairseq_preprocess

DOCUMENT_EVERY = (9, 31)  # an empty line (a document break) after every 9th and every 31st sentence


def read_gzip(path: Path) -> str:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read()


def documents_text(folder: Path) -> Path:
    """The Multi30k English side as fairseq-preprocess input: ``train.en`` with empty lines between documents.

    ``valid.en`` is the validation side as is. Returns ``folder``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    lines = read_gzip(MULTI30K / "train.en.gz").splitlines()
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        if any(i % k == k - 1 for k in DOCUMENT_EVERY):
            out.append("")
    (folder / "train.en").write_text("\n".join(out) + "\n", encoding="utf-8")
    (folder / "valid.en").write_text(read_gzip(MULTI30K / "val.en.gz"), encoding="utf-8")
    return folder


def preprocess_mono(text: Path, dest: Path, with_lang: bool) -> Path:
    """Run the real ``fairseq-preprocess --only-source`` on ``text``/{train,valid}.en into ``dest``.

    Without ``with_lang``: ``--trainpref train.en`` (gives ``train.bin`` + ``dict.txt``);
    with it: ``--source-lang en --trainpref train`` (gives ``train.en-None.en.bin`` + ``dict.en.txt``).
    """
    if with_lang:
        prefixes = ["--source-lang", "en", "--trainpref", str(text / "train"), "--validpref", str(text / "valid")]
    else:
        prefixes = ["--trainpref", str(text / "train.en"), "--validpref", str(text / "valid.en")]
    fairseq_preprocess(["--only-source", *prefixes, "--destdir", str(dest), "--workers", "1"])
    return dest


def fairseq_mono(tmp: Path, with_lang: bool = False) -> tuple[Path, Path]:
    """(fairseq data-bin, its arrowmt conversion) of the Multi30k English documents."""
    data_bin = preprocess_mono(documents_text(tmp / "text"), tmp / "data-bin", with_lang)
    out = tmp / "arrow"
    convert_fairseq(data_bin, out, progress=False)
    return data_bin, out


def mono_corpus(folder: Path, rows: list[list[int]], rows_per_batch: int | None = None, shards: int = 1) -> Path:
    """A monolingual arrowmt folder holding ``rows`` (ids < 10216) in split ``train``.

    With ``shards`` > 1 the rows are cut into ``train``, ``train1``, ... (fairseq's shard names);
    ``rows_per_batch`` sets the record-batch size.
    """
    dict_path = fairseq_mmap() / "dict.en.txt"
    vocab = NUM_SPECIALS + dict_path.read_text(encoding="utf-8").count("\n")
    for k, part in enumerate(np.array_split(np.arange(len(rows)), shards)):
        ragged = Ragged.from_rows([rows[i] for i in part])
        column = ColumnData(ragged, None, "dict.txt", file_sha256(dict_path), vocab, "test rows")
        write_columns(folder, "train" if k == 0 else f"train{k}", {TOKENS: column}, "test", rows_per_batch)
    return folder
