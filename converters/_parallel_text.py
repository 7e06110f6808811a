"""Convert raw parallel text (``{pref}.{lang}``, plain or .gz) to an arrowmt folder, like fairseq-preprocess."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from arrowmt.converters._output import OutputFolder, column, special_ids_of
from arrowmt.converters._text import (
    Encoded,
    check_same_line_count,
    encode_parallel,
    encode_sentencepiece,
    read_lines,
    sentencepiece_pieces,
    tokenize,
)

from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt.format._manifest import Manifest
from arrowmt.format._vocab import Dictionary

SPLITS = ("train", "valid", "test")


@dataclass(frozen=True)
class TextConversion:
    """What to convert and how (the fairseq-preprocess options that matter for the data)."""

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
    shards: dict[str, list[str]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.src_lang == self.tgt_lang:
            raise InvalidParameterError(f"tgt_lang: expected a language other than src_lang, got {self.tgt_lang!r}")
        if not self.prefixes.get("train") and not (self.srcdict and self.tgtdict):
            raise InvalidParameterError(
                "trainpref: expected a training prefix (dictionaries are built from it) unless both "
                "srcdict and tgtdict are given, got none"
            )
        for split, value in self.prefixes.items():
            if value:
                self.shards[split] = [p for p in value.split(",") if p]


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
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Convert raw parallel text ``{pref}.{lang}`` (plain or .gz) to an arrowmt folder at ``out``.

    The options are ``fairseq-preprocess``'s; a prefix may list shards separated by commas.
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
    )
    return convert_with_options(options, out, overwrite=overwrite, progress=progress)


def convert_with_options(
    options: TextConversion, out: str | Path, overwrite: bool = False, progress: bool = True
) -> Manifest:
    """Encode every split's text with fairseq-compatible dictionaries and write an arrowmt folder."""
    langs = (options.src_lang, options.tgt_lang)
    files = {(name, lang): text_file(prefix, lang) for name, prefix in _named_shards(options) for lang in langs}
    folder = OutputFolder.prepare(out, {"source": langs[0], "target": langs[1]}, "text", overwrite, progress)
    dicts = _dictionaries(options, files)
    names = {lang: folder.add_dictionary(lang, dicts[lang]) for lang in langs}
    shards = [name for name, _ in _named_shards(options)]
    encoded = {lang: _encode_all(options, [files[(n, lang)] for n in shards], dicts[lang]) for lang in langs}
    for k, name in enumerate(shards):
        src, tgt = files[(name, langs[0])], files[(name, langs[1])]
        check_same_line_count(src, encoded[langs[0]][k].n_lines, tgt, encoded[langs[1]][k].n_lines)
        columns = {
            role: column(encoded[lang][k].ragged, lang, names[lang], dicts[lang], str(files[(name, lang)]))
            for role, lang in zip(("source", "target"), langs, strict=False)
        }
        folder.write(name, columns, special_ids_of(dicts[langs[0]]))
    return folder.finish()


def _named_shards(options: TextConversion) -> list[tuple[str, str]]:
    """(file-level split name, prefix): ``train``, ``train1``, ... for comma-separated prefixes."""
    named = []
    for split in SPLITS:
        for k, prefix in enumerate(options.shards.get(split, [])):
            named.append((f"{split}{k or ''}", prefix))
    return named


def _dictionaries(options: TextConversion, files: dict[tuple[str, str], Path]) -> dict[str, Dictionary]:
    src, tgt = options.src_lang, options.tgt_lang
    given = {src: options.srcdict, tgt: options.tgtdict}
    if options.joined_dictionary and not all(given.values()):
        joined = _build(options, [p for (n, _), p in files.items() if n.startswith("train")], 0)
        return {src: joined, tgt: joined}
    return {
        lang: Dictionary.load(given[lang]) if given[lang] else _build(options, _train_files(files, lang), k)
        for k, lang in enumerate((src, tgt))
    }


def _train_files(files: dict[tuple[str, str], Path], lang: str) -> list[Path]:
    return [path for (name, file_lang), path in files.items() if file_lang == lang and name.startswith("train")]


def _build(options: TextConversion, paths: list[Path], side: int) -> Dictionary:
    tokens = [_tokens(options, path) for path in paths]
    return Dictionary.build(
        *tokens,
        threshold=options.thresholds[side],
        nwords=options.nwords[side],
        padding_factor=options.padding_factor,
    )


def _tokens(options: TextConversion, path: Path) -> pa.ListArray:
    if options.spm_model:
        return sentencepiece_pieces(read_lines(path), options.spm_model)
    return tokenize(read_lines(path))


def _encode_all(options: TextConversion, paths: list[Path], dictionary: Dictionary) -> list[Encoded]:
    if options.spm_model:
        return [encode_sentencepiece(read_lines(p), options.spm_model, dictionary) for p in paths]
    return encode_parallel(paths, dictionary, workers=options.workers)
