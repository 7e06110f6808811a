"""Language pairs: ``de-en`` parsed and checked, and the split names a pair's data takes in one folder.

Several pairs share one folder the way fairseq's multilingual data-bin lays them out:
each pair's split is ``{split}.{src}-{tgt}`` in arrowmt (``train.de-en``; fairseq's shard
``train1`` becomes ``train.de-en1``), and ``{split}.{src}-{tgt}.{lang}.{idx,bin}`` in fairseq.
"""

from __future__ import annotations

import re

from arrowmt._errors import FormatError, InvalidParameterError
from arrowmt.converters._output import OutputFolder

SHARD_NUMBER = "[1-9][0-9]*"  # after a split's name in its shards' names: train1, train2, ... (fairseq's)
SHARD = re.compile(rf"(?P<base>.*?)(?P<k>{SHARD_NUMBER})")


def split_lang_pairs(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"de-en,fr-en"`` or ``["de-en", "fr-en"]`` -> ``("de-en", "fr-en")``; None -> ``()``."""
    if value is None:
        return ()
    expected = "lang_pairs: expected pairs like 'de-en,fr-en' (a string or a list of 'src-tgt' strings)"
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
        items = list(value)
    else:
        raise InvalidParameterError(f"{expected}, got {value!r}")
    pairs = tuple(item.strip() for item in items)
    if not pairs or not all(pairs):
        raise InvalidParameterError(f"{expected}, got {value!r}")
    return pairs


def parse_pair(text: str, name: str = "lang_pairs") -> tuple[str, str]:
    """``"de-en"`` -> ``("de", "en")``: two different language codes joined by one ``-``."""
    parts = text.split("-")
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise InvalidParameterError(
            f"{name}: expected 'src-tgt' with two different language codes (no '-' inside a code), got {text!r}"
        )
    for lang in parts:
        check_language(name, lang)
    return parts[0], parts[1]


def check_language(name: str, lang: str) -> None:
    """``lang`` must name files: ``{pref}.{lang}`` to read and ``dict.{lang}.txt`` to write."""
    if lang != "".join(lang.split()) or "," in lang:
        raise InvalidParameterError(f"{name}: expected a language code without spaces or ',', got {lang!r}")
    try:
        OutputFolder.dictionary_name(lang)
    except InvalidParameterError as exc:
        reason = str(exc).split(": ", 1)[-1]
        raise InvalidParameterError(f"{name}: language {lang!r} cannot name a dictionary file: {reason}") from None


def check_distinct_splits(pairs: tuple[str, ...]) -> None:
    """Each pair once, and no pair that reads as another's shard (``de-en1`` beside ``de-en``: ``train.de-en1``
    is also the second shard of ``train.de-en``)."""
    repeated = sorted({text for text in pairs if pairs.count(text) > 1})
    if repeated:
        raise InvalidParameterError(f"lang_pairs: expected each pair once, got {repeated} more than once")
    for first in pairs:
        for second in pairs:
            if second != first and second.startswith(first) and second[len(first) :].isdigit():
                raise InvalidParameterError(
                    f"lang_pairs: pair {second!r} would name its splits like the shards of pair {first!r} "
                    f"(train.{second} is also shard 1 of train.{first}); rename a language"
                )


def pair_split(split: str, src: str, tgt: str) -> str:
    """The arrowmt name of one pair's split: ``{split}.{src}-{tgt}`` (no shard number)."""
    return f"{split}.{src}-{tgt}"


def arrow_split_names(splits: list[str], src: str, tgt: str) -> dict[str, str]:
    """fairseq split name -> arrowmt split name; ``train1`` (beside ``train``) -> ``train.{src}-{tgt}1``."""
    names = {}
    for split in splits:
        m = SHARD.fullmatch(split)
        if m and m["base"] in splits:
            names[split] = f"{pair_split(m['base'], src, tgt)}{m['k']}"
        else:
            names[split] = pair_split(split, src, tgt)
    return names


def fairseq_split_name(name: str, src: str | None, tgt: str | None) -> str:
    """The inverse of :func:`arrow_split_names`: ``train.de-en`` -> ``train``, ``train.de-en1`` -> ``train1``."""
    m = re.fullmatch(rf"(?P<base>.+)\.{re.escape(f'{src}-{tgt}')}(?P<k>{SHARD_NUMBER})?", name)
    if m is None:
        raise FormatError(
            f"split {name!r}: expected a name like 'train.{src}-{tgt}' or its shard 'train.{src}-{tgt}1' "
            f"(its columns are {src}-{tgt})"
        )
    return f"{m['base']}{m['k'] or ''}"
