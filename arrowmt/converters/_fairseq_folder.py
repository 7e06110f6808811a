"""Convert a fairseq ``data-bin`` folder (mmap, legacy lazy/cached or Megatron-LM files) to arrowmt."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._version import __version__
from arrowmt.converters._fairseq_binary import detect_index_format, open_indexed
from arrowmt.converters._output import OutputFolder, column, special_ids_of
from arrowmt.converters._pairs import parse_pair
from arrowmt.format import SOURCE, TARGET, TOKENS, Dictionary, Manifest
from arrowmt.storage import DOWNLOAD_FIRST, local_only_path, local_output
from arrowmt.writing import ColumnData, check_same_rows

logger = logging.getLogger(__name__)

PAIR_FILE = re.compile(r"(?P<split>[^.]+)\.(?P<src>[^.-]+)-(?P<tgt>[^.-]+)\.(?P<lang>[^.]+)\.idx")
MONO_FILE = re.compile(r"(?P<split>[^.]+)\.idx")


NO_TARGET = "None"  # fairseq-preprocess --only-source --source-lang xx names files {split}.xx-None.xx


@dataclass(frozen=True)
class Discovered:
    """What a data-bin folder holds: language pairs with their splits, and monolingual splits.

    Monolingual splits are ``{split}`` files with ``dict.txt`` (``mono_lang`` None) or
    ``{split}.{lang}-None.{lang}`` files with ``dict.{lang}.txt`` (``mono_lang`` set).
    """

    pairs: dict[tuple[str, str], list[str]]
    mono: list[str]
    mono_lang: str | None = None


def discover(data_bin: Path) -> Discovered:
    """Find every ``{split}.{src}-{tgt}.{lang}`` pair and monolingual split in ``data_bin``."""
    if not data_bin.is_dir():
        raise InvalidParameterError(f"data_bin: expected a fairseq data-bin folder, got {data_bin} (not a folder)")
    pairs: dict[tuple[str, str], set[str]] = {}
    mono: dict[str | None, set[str]] = {}
    for idx in sorted(data_bin.glob("*.idx")):
        if m := PAIR_FILE.fullmatch(idx.name):
            if m["tgt"] == NO_TARGET and m["lang"] == m["src"]:
                mono.setdefault(m["src"], set()).add(m["split"])
            elif m["lang"] in (m["src"], m["tgt"]):
                pairs.setdefault((m["src"], m["tgt"]), set()).add(m["split"])
        elif m := MONO_FILE.fullmatch(idx.name):
            mono.setdefault(None, set()).add(m["split"])
    if len(mono) > 1:
        layouts = sorted("{split}" if lang is None else f"{{split}}.{lang}-None.{lang}" for lang in mono)
        raise InputDataError(f"{data_bin}: expected one monolingual layout, found files named {layouts}")
    lang, splits = next(iter(mono.items()), (None, set()))
    return Discovered({k: sorted(v) for k, v in pairs.items()}, sorted(splits), lang)


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
    with several pairs, every pair becomes splits ``{split}.{src}-{tgt}`` of one
    folder (:mod:`arrowmt.converters._multi_pair`), or ``pair="de-en"`` picks one.
    """
    data_bin = local_only_path(data_bin, "data_bin", "a local fairseq data-bin folder", DOWNLOAD_FIRST)
    found = discover(data_bin)
    out = local_output(out)
    if len(found.pairs) > 1 and pair is None:
        from arrowmt.converters._multi_pair import convert_multi_pair

        return convert_multi_pair(data_bin, out, found, overwrite, progress)
    if found.pairs or pair:
        src, tgt = _choose_pair(data_bin, found, pair)
        if found.mono:
            logger.warning(
                "%s: monolingual splits %s are not converted with pair %s-%s", data_bin, found.mono, src, tgt
            )
        return _convert_pair(data_bin, out, src, tgt, found.pairs[(src, tgt)], overwrite, progress)
    if found.mono:
        return _convert_mono(data_bin, out, found.mono, found.mono_lang, overwrite, progress)
    raise InputDataError(
        f"{data_bin}: no fairseq binarized data found (expected files like train.de-en.de.idx or train.idx)"
    )


def _choose_pair(data_bin: Path, found: Discovered, pair: str | None) -> tuple[str, str]:
    names = [f"{s}-{t}" for s, t in found.pairs]
    if pair is None:
        if len(names) > 1:
            raise InvalidParameterError(f"pair: {data_bin} holds several language pairs {names}; choose one")
        return next(iter(found.pairs))
    src, tgt = parse_pair(pair, "pair")
    if (src, tgt) not in found.pairs:
        raise InvalidParameterError(f"pair: expected one of {names} found in {data_bin}, got {pair!r}")
    return src, tgt


def _load_dict(data_bin: Path, lang: str | None) -> tuple[Path, Dictionary]:
    path = data_bin / OutputFolder.dictionary_name(lang)
    if not path.is_file():
        raise InputDataError(f"{path}: dictionary missing (fairseq data-bin folders hold one per language)")
    return path, Dictionary.load(path)


@dataclass(frozen=True)
class _Side:
    """One column of the output: its language, dictionary (file and contents) and role."""

    role: str
    lang: str | None
    dict_path: Path
    dictionary: Dictionary


def _read_splits(
    data_bin: Path, splits: list[str], sides: list[_Side], prefix: Callable[[str, str | None], str]
) -> dict[str, dict[str, ColumnData]]:
    """Every split's columns, read and checked (index headers, sizes, row counts) before anything is written.

    ``prefix(split, lang)`` is the data-bin file name without ``.idx``/``.bin``. The files are
    checked block by block here, and read block by block while written (bounded memory).
    """
    inputs = {}
    for split in splits:
        columns = {}
        for side in sides:
            path = data_bin / prefix(split, side.lang)
            name = OutputFolder.dictionary_name(side.lang)
            columns[side.role] = column(open_indexed(path), side.lang, name, side.dictionary, f"{path}.bin")
        rows = {role: len(c.ragged) for role, c in columns.items()}
        check_same_rows(split, rows, {role: c.origin for role, c in columns.items()})
        inputs[split] = columns
    return inputs


def fairseq_provenance(data_bin: Path, inputs: dict[str, dict[str, ColumnData]]) -> dict[str, object]:
    """How a folder was converted from a data-bin: converter, version, the data-bin, each split's files."""
    return {
        "converter": "arrowmt.convert_fairseq",
        "arrowmt_version": __version__,
        "data_bin": str(data_bin.resolve()),
        "inputs": {split: {role: c.origin for role, c in columns.items()} for split, columns in inputs.items()},
    }


def _write_all(
    data_bin: Path,
    out: Path,
    languages: dict[str, str | None],
    source_format: str,
    sides: list[_Side],
    inputs: dict[str, dict[str, ColumnData]],
    overwrite: bool,
    progress: bool,
) -> Manifest:
    """Stage the dictionaries and every split, then publish them to ``out`` at once."""
    with OutputFolder.prepare(out, languages, source_format, overwrite, progress) as folder:
        for side in sides:
            folder.add_dictionary(side.lang, side.dictionary, source=side.dict_path)
        for split, columns in inputs.items():
            folder.write(split, columns, special_ids_of(sides[0].dictionary))
        folder.manifest.provenance = {**folder.manifest.provenance, **fairseq_provenance(data_bin, inputs)}
        return folder.finish()


def _convert_pair(
    data_bin: Path, out: Path, src: str, tgt: str, splits: list[str], overwrite: bool, progress: bool
) -> Manifest:
    fmt = detect_index_format(data_bin / f"{splits[0]}.{src}-{tgt}.{src}.idx")
    sides = [_Side(role, lang, *_load_dict(data_bin, lang)) for role, lang in ((SOURCE, src), (TARGET, tgt))]
    inputs = _read_splits(data_bin, splits, sides, lambda split, lang: f"{split}.{src}-{tgt}.{lang}")
    languages: dict[str, str | None] = {SOURCE: src, TARGET: tgt}
    return _write_all(data_bin, out, languages, f"fairseq-{fmt}", sides, inputs, overwrite, progress)


def _mono_prefix(split: str, lang: str | None) -> str:
    return split if lang is None else f"{split}.{lang}-{NO_TARGET}.{lang}"


def _convert_mono(
    data_bin: Path, out: Path, splits: list[str], lang: str | None, overwrite: bool, progress: bool
) -> Manifest:
    fmt = detect_index_format(data_bin / f"{_mono_prefix(splits[0], lang)}.idx")
    sides = [_Side(TOKENS, lang, *_load_dict(data_bin, lang))]
    inputs = _read_splits(data_bin, splits, sides, _mono_prefix)
    return _write_all(data_bin, out, {TOKENS: lang}, f"fairseq-{fmt}", sides, inputs, overwrite, progress)
