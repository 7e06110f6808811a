"""What a raw-text conversion reads: its options (fairseq-preprocess's), language pairs and input files.

One pair (``src_lang``/``tgt_lang``) reads ``{pref}.{lang}`` and names its splits ``train``,
``valid``, ``test`` as fairseq-preprocess does; one language (``lang``, fairseq's ``--only-source``)
reads ``{pref}.{lang}`` into the one column ``tokens`` (a language model's corpus). Several
pairs (``lang_pairs``, fairseq's ``--lang-pairs de-en,fr-en``) go into one folder as fairseq's
multilingual recipe lays them out: split ``{split}.{src}-{tgt}`` per pair, one dictionary shared
by every language (built over every train file, as ``--joined-dictionary`` builds it, or given)
and saved as ``dict.{lang}.txt`` per language. A pair reads ``{pref}.{src}-{tgt}.{lang}`` (the recipe's
per-pair files) or, when those do not exist, ``{pref}.{lang}`` (a corpus aligned across
all its languages, like Multi30k); a file shared by several pairs is read once.
"""

from __future__ import annotations

import filecmp
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from arrowmt._checks import check_integer
from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt.converters._pairs import check_distinct_splits, check_language, pair_split, parse_pair
from arrowmt.converters._text_chunks import DEFAULT_CHUNK_BYTES
from arrowmt.format import SOURCE, TARGET, TOKENS
from arrowmt.storage import DOWNLOAD_FIRST, local_only_path

if TYPE_CHECKING:
    from arrowmt.converters._sampled import SamplingOptions

SPLITS = ("train", "valid", "test")
MAX_WORKERS = 4096  # local worker processes
NO_THRESHOLD = 0  # fairseq-preprocess's default --thresholdsrc/--thresholdtgt: keep every word
ALL_WORDS = -1  # its default --nwordssrc/--nwordstgt: no cap
JOINED = "joined"  # the dictionary key of a joined dictionary (one for every language)
TEXT_SUFFIXES = ("", ".gz")


@dataclass(frozen=True)
class TextConversion:
    """What to convert and how: :func:`~arrowmt.convert_text`'s options as one value, for
    :func:`~arrowmt.convert_with_options` (``prefixes``: split -> ``trainpref``/``validpref``/``testpref``;
    ``thresholds`` and ``nwords``: the source's and the target's; the others as ``convert_text`` names them).

    Either ``src_lang`` and ``tgt_lang`` (one pair), ``lang_pairs`` (``("de-en", "fr-en")``:
    several pairs, one shared dictionary) or ``lang`` (monolingual text: column ``tokens``, the
    source options for its dictionary) name the languages.
    """

    prefixes: dict[str, str | None]
    src_lang: str | None = None
    tgt_lang: str | None = None
    lang_pairs: tuple[str, ...] = ()
    lang: str | None = None
    srcdict: str | None = None
    tgtdict: str | None = None
    joined_dictionary: bool = False
    thresholds: tuple[int, int] = (NO_THRESHOLD, NO_THRESHOLD)
    nwords: tuple[int, int] = (ALL_WORDS, ALL_WORDS)
    spm_model: str | None = None
    spm_sampling: bool = False
    spm_alpha: float | None = None
    workers: int = 1
    padding_factor: int = 8
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    shard_rows: int | None = None
    executor: Executor | None = field(default=None, compare=False, repr=False)
    pairs: tuple[tuple[str, ...], ...] = field(init=False)  # each corpus's column languages (one when monolingual)
    shards: dict[str, list[str]] = field(init=False, default_factory=dict)
    sampling: SamplingOptions | None = field(init=False, default=None, compare=False)  # spm_sampling's, checked

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling", self._sampling())  # refused before anything else is looked at
        for name in ("srcdict", "tgtdict", "spm_model"):
            if getattr(self, name):
                object.__setattr__(self, name, str(_local(getattr(self, name), name, "a local file")))
        object.__setattr__(self, "pairs", self._resolve_pairs())
        self._check_dictionary_options()
        check_integer("workers", self.workers, 1, MAX_WORKERS)
        check_integer("chunk_bytes", self.chunk_bytes, 1, 2**63, high_name="2**63")
        for side, suffix in enumerate(("src", "tgt")):  # counts are int64
            check_integer(f"threshold{suffix}", self.thresholds[side], -(2**63), 2**63, high_name="2**63")
            check_integer(f"nwords{suffix}", self.nwords[side], -(2**63), 2**63, high_name="2**63")
        if self.shard_rows is not None and self.shard_rows < 1:
            raise InvalidParameterError(
                f"shard_rows: expected >= 1 (or None: one file per prefix), got {self.shard_rows}"
            )
        for split, value in self.prefixes.items():
            if value:
                if not all(value.split(",")):
                    raise InvalidParameterError(
                        f"{split}pref: expected file prefixes separated by commas, got an empty one in {value!r}"
                    )
                where = "the prefix of local text files"
                self.shards[split] = [str(_local(prefix, f"{split}pref", where)) for prefix in value.split(",")]

    def _sampling(self) -> SamplingOptions | None:
        """The sampled segmentations to store once the corpus is written (``spm_sampling``, ``spm_alpha``), checked;
        None: none (the samples' code is then not loaded)."""
        if not self.spm_sampling and self.spm_alpha is None:
            return None
        from arrowmt.converters._sampled import sampling_options

        return sampling_options(self.spm_sampling, self.spm_alpha, self.spm_model)

    @property
    def multi(self) -> bool:
        """Several pairs in one folder (``lang_pairs``): pair-qualified split names, one dictionary."""
        return bool(self.lang_pairs)

    @property
    def mono(self) -> bool:
        """Monolingual text (``lang``): one column, ``tokens``."""
        return self.lang is not None

    @property
    def joined(self) -> bool:
        """One dictionary for every language (``joined_dictionary``, always with ``lang_pairs``)."""
        return self.joined_dictionary or self.multi

    @property
    def languages(self) -> list[str]:
        """Every language, each once, in order of first appearance."""
        return list(dict.fromkeys(lang for pair in self.pairs for lang in pair))

    def column_languages(self) -> dict[str, str | None]:
        """The manifest's languages per column: the pair's, or None with several pairs (each split names its own)."""
        if self.multi:
            return {SOURCE: None, TARGET: None}
        return dict(zip(column_roles(self.pairs[0]), self.pairs[0], strict=True))

    def dictionary_key(self, lang: str) -> str:
        """Which dictionary encodes ``lang``: :data:`JOINED` or the language itself."""
        return JOINED if self.joined else lang

    def given_dictionaries(self) -> dict[str, str]:
        """Dictionary key -> existing dict.txt to use (fairseq: a joined dictionary is srcdict, else tgtdict)."""
        if self.joined:
            given = self.srcdict or self.tgtdict
            return {JOINED: given} if given else {}
        paths = dict(zip(self.pairs[0], (self.srcdict, self.tgtdict), strict=False))
        return {lang: path for lang, path in paths.items() if path}

    def limits(self, key: str) -> tuple[int, int]:
        """(threshold, nwords) of the dictionary ``key`` builds; a joined one uses the source values (fairseq)."""
        side = 1 if key == self.tgt_lang and not self.joined else 0
        return self.thresholds[side], self.nwords[side]

    def _resolve_pairs(self) -> tuple[tuple[str, ...], ...]:
        if self.lang is not None:
            return (self._resolve_mono(),)
        if self.lang_pairs:
            for name, value in (("src_lang", self.src_lang), ("tgt_lang", self.tgt_lang)):
                if value is not None:
                    raise InvalidParameterError(
                        f"{name}: expected it unset when lang_pairs names the languages, got {value!r}"
                    )
            pairs = tuple(parse_pair(text) for text in self.lang_pairs)
            check_distinct_splits(self.lang_pairs)
            return pairs
        if not self.src_lang or not self.tgt_lang:
            raise InvalidParameterError(
                f"src_lang, tgt_lang: expected both languages (or lang_pairs), got {self.src_lang!r}, {self.tgt_lang!r}"
            )
        if self.src_lang == self.tgt_lang:
            raise InvalidParameterError(f"tgt_lang: expected a language other than src_lang, got {self.tgt_lang!r}")
        for name, lang in (("src_lang", self.src_lang), ("tgt_lang", self.tgt_lang)):
            check_language(name, lang)
        return ((self.src_lang, self.tgt_lang),)

    def _resolve_mono(self) -> tuple[str]:
        """``(lang,)``, after checking that no option of a second language is set."""
        if not self.lang:
            raise InvalidParameterError(f"lang: expected a language code (files {{pref}}.{{lang}}), got {self.lang!r}")
        check_language("lang", self.lang)
        pair_options = {
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "lang_pairs": self.lang_pairs or None,
            "tgtdict": self.tgtdict,
            "joined_dictionary": self.joined_dictionary or None,
            "thresholdtgt": self.thresholds[1] if self.thresholds[1] != NO_THRESHOLD else None,
            "nwordstgt": self.nwords[1] if self.nwords[1] != ALL_WORDS else None,
        }
        for name, value in pair_options.items():
            if value is not None:
                raise InvalidParameterError(
                    f"{name}: expected it unset with lang (monolingual text: one language, whose dictionary the "
                    f"source options set), got {value!r}"
                )
        return (self.lang,)

    def _check_dictionary_options(self) -> None:
        if self.joined and self.srcdict and self.tgtdict and not _same_file(self.srcdict, self.tgtdict):
            raise InvalidParameterError(
                "tgtdict: a joined dictionary is one file for every language; expected tgtdict unset (or the "
                f"srcdict file), got srcdict={self.srcdict!r}, tgtdict={self.tgtdict!r}"
            )
        if self.joined:
            limits = (("thresholdtgt", self.thresholds, NO_THRESHOLD), ("nwordstgt", self.nwords, ALL_WORDS))
            for name, (src, tgt), unset in limits:
                if tgt not in (unset, src):
                    raise InvalidParameterError(
                        f"{name}: a joined dictionary is built with the source limits, as fairseq-preprocess "
                        f"builds it; expected {unset} (unset) or {src} (the source value), got {tgt}"
                    )
        needed = {self.dictionary_key(lang) for lang in self.languages}
        if not self.prefixes.get("train") and not needed <= set(self.given_dictionaries()):
            raise InvalidParameterError(
                "trainpref: expected a training prefix (dictionaries are built from it) unless every dictionary "
                "is given (srcdict and tgtdict; one of them for a joined one; srcdict with lang), got none"
            )

    def data_options(self) -> dict[str, object]:
        """Every option that decides the output (how it is run, e.g. workers or chunk size, does not)."""
        return {
            "source_lang": self.src_lang,
            "target_lang": self.tgt_lang,
            "lang_pairs": list(self.lang_pairs) or None,
            "lang": self.lang,
            "trainpref": self.prefixes.get("train"),
            "validpref": self.prefixes.get("valid"),
            "testpref": self.prefixes.get("test"),
            "srcdict": self.srcdict,
            "tgtdict": self.tgtdict,
            "joined_dictionary": self.joined,
            "thresholdsrc": self.thresholds[0],
            "thresholdtgt": self.thresholds[1],
            "nwordssrc": self.nwords[0],
            "nwordstgt": self.nwords[1],
            "padding_factor": self.padding_factor,
            "spm_model": self.spm_model,
            "shard_rows": self.shard_rows,
        }


def _same_file(first: str, second: str) -> bool:
    """Whether two dictionary paths hold the same bytes (paths that cannot be read compare as strings)."""
    try:
        return filecmp.cmp(first, second, shallow=False)
    except OSError:
        return first == second


# ----- input files ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixFiles:
    """One prefix of one pair's split, and its text file per language (source first).

    ``kind`` is train, valid or test; ``split`` the arrowmt split it belongs to (``train``,
    or ``train.de-en`` with several pairs); ``name`` its file-level name (``train1``,
    ``train.de-en1``: a shard of the split). A prefix listed twice for one split
    (``--trainpref P,P``) is its text twice: rows and dictionary counts, as one file
    holding it twice would give; a file that several pairs read is read (and counted) once.
    """

    kind: str
    split: str
    name: str
    files: dict[str, Path]
    repeat: int = 0  # how many earlier prefixes of this pair and split are the same text (read again)

    @property
    def langs(self) -> tuple[str, ...]:
        return tuple(self.files)


def column_roles(langs: tuple[str, ...]) -> tuple[str, ...]:
    """The columns that text in ``langs`` fills: ``tokens`` for one language, ``source`` and ``target`` for a pair."""
    return (TOKENS,) if len(langs) == 1 else (SOURCE, TARGET)


def prefix_files(options: TextConversion) -> list[PrefixFiles]:
    """Every prefix of every pair and split, its files found (plain or .gz); missing files raise at once."""
    named = []
    for langs in options.pairs:
        for kind in SPLITS:
            split = pair_split(kind, *langs) if options.multi else kind
            shards = options.shards.get(kind, [])
            for k, prefix in enumerate(shards):
                files = pair_files(prefix, *langs) if options.multi else single_files(prefix, langs)
                named.append(PrefixFiles(kind, split, f"{split}{k or ''}", files, shards[:k].count(prefix)))
    return named


def text_file(prefixes: list[str], lang: str) -> Path:
    """The first of ``{prefix}.{lang}``, ``{prefix}.{lang}.gz`` (for each prefix in turn) that exists."""
    candidates = [Path(f"{prefix}.{lang}{suffix}") for prefix in prefixes for suffix in TEXT_SUFFIXES]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    others = ", ".join(str(c) if c.parent != candidates[0].parent else c.name for c in candidates[1:])
    raise InputDataError(f"{candidates[0]}: text file missing (also looked for {others})")


def single_files(prefix: str, langs: tuple[str, ...]) -> dict[str, Path]:
    """One pair's (or one language's) files: ``{prefix}.{lang}``, as fairseq-preprocess reads them."""
    return {lang: text_file([prefix], lang) for lang in langs}


def pair_files(prefix: str, src: str, tgt: str) -> dict[str, Path]:
    """A pair's files among several: ``{prefix}.{src}-{tgt}.{lang}`` if the pair has such files, else
    ``{prefix}.{lang}``; both languages must be found the same way."""
    own = f"{prefix}.{src}-{tgt}"
    files = {lang: text_file([own, prefix], lang) for lang in (src, tgt)}
    per_pair = {lang: path.name.startswith(Path(own).name + ".") for lang, path in files.items()}
    if per_pair[src] != per_pair[tgt]:
        first, second = (files[src], files[tgt]) if per_pair[src] else (files[tgt], files[src])
        raise InputDataError(
            f"{second}: pair {src}-{tgt} reads {first} (a per-pair file, {own}.<lang>) but found no per-pair "
            f"file for the other language; name both {own}.{src} and {own}.{tgt}, or neither"
        )
    return files


def _local(path: str, name: str, expected: str) -> Path:
    """The local path option ``name`` gives (a ``file://`` URL's path); InvalidParameterError for another URL."""
    return local_only_path(path, name, expected, DOWNLOAD_FIRST)
