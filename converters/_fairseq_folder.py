"""Convert a fairseq ``data-bin`` folder (mmap, legacy lazy/cached or Megatron-LM files) to arrowmt."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from arrowmt.converters._fairseq_binary import detect_index_format, read_indexed
from arrowmt.converters._output import OutputFolder, column, special_ids_of

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt.format._manifest import Manifest
from arrowmt.format._vocab import Dictionary

logger = logging.getLogger(__name__)

PAIR_FILE = re.compile(r"(?P<split>[^.]+)\.(?P<src>[^.-]+)-(?P<tgt>[^.-]+)\.(?P<lang>[^.]+)\.idx")
MONO_FILE = re.compile(r"(?P<split>[^.]+)\.idx")


@dataclass(frozen=True)
class Discovered:
    """What a data-bin folder holds: language pairs with their splits, and monolingual splits."""

    pairs: dict[tuple[str, str], list[str]]
    mono: list[str]


def discover(data_bin: Path) -> Discovered:
    """Find every ``{split}.{src}-{tgt}.{lang}`` pair and monolingual ``{split}`` in ``data_bin``."""
    if not data_bin.is_dir():
        raise InvalidParameterError(f"data_bin: expected a fairseq data-bin folder, got {data_bin} (not a folder)")
    pairs: dict[tuple[str, str], set[str]] = {}
    mono: set[str] = set()
    for idx in sorted(data_bin.glob("*.idx")):
        if m := PAIR_FILE.fullmatch(idx.name):
            if m["lang"] in (m["src"], m["tgt"]):
                pairs.setdefault((m["src"], m["tgt"]), set()).add(m["split"])
        elif m := MONO_FILE.fullmatch(idx.name):
            mono.add(m["split"])
    return Discovered({k: sorted(v) for k, v in pairs.items()}, sorted(mono))


def convert_fairseq(
    data_bin: str | Path,
    out: str | Path,
    *,
    pair: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Convert the fairseq ``data_bin`` folder to an arrowmt folder at ``out``.

    A folder with one language pair (or only monolingual data) converts as is;
    with several pairs, choose one with ``pair="de-en"``.
    """
    data_bin = Path(data_bin)
    found = discover(data_bin)
    if found.pairs or pair:
        src, tgt = _choose_pair(data_bin, found, pair)
        if found.mono:
            logger.warning(
                "%s: monolingual splits %s are not converted with pair %s-%s", data_bin, found.mono, src, tgt
            )
        return _convert_pair(data_bin, Path(out), src, tgt, found.pairs[(src, tgt)], overwrite, progress)
    if found.mono:
        return _convert_mono(data_bin, Path(out), found.mono, overwrite, progress)
    raise InputDataError(
        f"{data_bin}: no fairseq binarized data found (expected files like train.de-en.de.idx or train.idx)"
    )


def _choose_pair(data_bin: Path, found: Discovered, pair: str | None) -> tuple[str, str]:
    names = [f"{s}-{t}" for s, t in found.pairs]
    if pair is None:
        if len(names) > 1:
            raise InvalidParameterError(f"pair: {data_bin} holds several language pairs {names}; choose one")
        return next(iter(found.pairs))
    src, _, tgt = pair.partition("-")
    if (src, tgt) not in found.pairs:
        raise InvalidParameterError(f"pair: expected one of {names} found in {data_bin}, got {pair!r}")
    return src, tgt


def _load_dict(data_bin: Path, lang: str | None) -> tuple[Path, Dictionary]:
    path = data_bin / (f"dict.{lang}.txt" if lang else "dict.txt")
    if not path.is_file():
        raise InputDataError(f"{path}: dictionary missing (fairseq data-bin folders hold one per language)")
    return path, Dictionary.load(path)


def _convert_pair(
    data_bin: Path, out: Path, src: str, tgt: str, splits: list[str], overwrite: bool, progress: bool
) -> Manifest:
    fmt = detect_index_format(data_bin / f"{splits[0]}.{src}-{tgt}.{src}.idx")
    folder = OutputFolder.prepare(out, {"source": src, "target": tgt}, f"fairseq-{fmt}", overwrite, progress)
    dicts = {lang: _load_dict(data_bin, lang) for lang in (src, tgt)}
    names = {lang: folder.add_dictionary(lang, d, source=p) for lang, (p, d) in dicts.items()}
    for split in splits:
        columns = {}
        for role, lang in (("source", src), ("target", tgt)):
            prefix = data_bin / f"{split}.{src}-{tgt}.{lang}"
            columns[role] = column(read_indexed(prefix), lang, names[lang], dicts[lang][1], f"{prefix}.bin")
        folder.write(split, columns, special_ids_of(dicts[src][1]))
    return folder.finish()


def _convert_mono(data_bin: Path, out: Path, splits: list[str], overwrite: bool, progress: bool) -> Manifest:
    fmt = detect_index_format(data_bin / f"{splits[0]}.idx")
    folder = OutputFolder.prepare(out, {"tokens": None}, f"fairseq-{fmt}", overwrite, progress)
    path, dictionary = _load_dict(data_bin, None)
    name = folder.add_dictionary(None, dictionary, source=path)
    for split in splits:
        prefix = data_bin / split
        ragged = read_indexed(prefix)
        folder.write(
            split,
            {"tokens": column(ragged, None, name, dictionary, f"{prefix}.bin")},
            special_ids_of(dictionary),
        )
    return folder.finish()
