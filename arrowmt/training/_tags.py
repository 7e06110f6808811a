"""Tags at read time: language tokens (fairseq's ``--encoder-langtok``/``--decoder-langtok``) and
back-translation tags, prepended to each row by the collater. The corpus is never copied.

A mixture gives each corpus its :class:`Tags` (token ids to put before every source
row and every target row). :class:`TagCollater` wraps any collater: it rebuilds the
batch's rows with their corpus's tags in front, in one vectorized gather per column,
and hands them to the wrapped collater, so a tagged batch is exactly the batch
fairseq builds from ``PrependTokenDataset(dataset, tag)``. The batch plan counts the
tags too (see :class:`~arrowmt.training._mixture.Mixture`), as fairseq's sizes do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError
from arrowmt.format import SOURCE, TARGET
from arrowmt.mixing import corpus_of
from arrowmt.reading import Spans, exclusive_cumsum, take_flat
from arrowmt.training._batch import GatheredBatch

if TYPE_CHECKING:
    from arrowmt.format import Dictionary

LANG_TOKEN = "__{}__"  # fairseq's "multilingual" language-token style
ENCODER_LANGTOK = ("src", "tgt")


@dataclass(frozen=True)
class Tags:
    """Token ids put before every row of one corpus: ``source`` before its source rows, ``target`` its targets."""

    source: tuple[int, ...] = ()
    target: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for side in (SOURCE, TARGET):
            ids = tuple(getattr(self, side))
            for k, token in enumerate(ids):
                check_integer(f"tags.{side}[{k}]", token, 0, 2**31)
            object.__setattr__(self, side, tuple(int(t) for t in ids))

    def extra(self, column: str) -> int:
        """Tokens added to each row of ``column``."""
        return len(self.source) if column == SOURCE else len(self.target) if column == TARGET else 0


def language_token_ids(dictionary: Dictionary, languages: Sequence[str], style: str = LANG_TOKEN) -> dict[str, int]:
    """The id of each language's token once fairseq adds them to ``dictionary`` (in ``languages`` order).

    fairseq's multilingual tasks append ``__xx__`` for every language of ``--langs``/
    ``--lang-dict`` to the loaded dictionary; a symbol already in it keeps its id. The
    model's vocabulary then has ``len(dictionary)`` plus the new symbols.
    """
    ids: dict[str, int] = {}
    added = 0
    for lang in languages:
        symbol = style.format(lang)
        if symbol in dictionary:
            ids[lang] = dictionary.index(symbol)
        elif lang not in ids:
            ids[lang] = len(dictionary) + added
            added += 1
    return ids


def langtok_tags(
    pairs: Sequence[tuple[str, str]],
    token_ids: Mapping[str, int],
    encoder_langtok: str | None = None,
    decoder_langtok: bool = False,
    source_prefix: Sequence[int] = (),
) -> list[Tags]:
    """Each pair's tags as fairseq's options set them, plus ``source_prefix`` (e.g. a back-translation tag) first.

    ``encoder_langtok="src"`` puts the source language's token before the source,
    ``"tgt"`` the target language's; ``decoder_langtok`` puts the target language's
    token before the target.
    """
    if encoder_langtok not in (None, *ENCODER_LANGTOK):
        raise InvalidParameterError(f"encoder_langtok: expected None, 'src' or 'tgt', got {encoder_langtok!r}")
    tags = []
    for src, tgt in pairs:
        source = list(source_prefix)
        if encoder_langtok is not None:
            source.append(_token(token_ids, src if encoder_langtok == "src" else tgt))
        target = [_token(token_ids, tgt)] if decoder_langtok else []
        tags.append(Tags(tuple(source), tuple(target)))
    return tags


def _token(token_ids: Mapping[str, int], lang: str) -> int:
    if lang not in token_ids:
        raise InvalidParameterError(f"token_ids: expected a token for language {lang!r}, got {sorted(token_ids)}")
    return token_ids[lang]


class TagTable:
    """Every corpus's tags for one column as one ragged table: corpus ``k``'s are ``ids[starts[k]:starts[k + 1]]``."""

    def __init__(self, tags: Sequence[Tags], column: str) -> None:
        rows = [list(t.source if column == SOURCE else t.target) for t in tags]
        self.lengths = np.array([len(r) for r in rows], dtype=np.int64)
        self.starts = exclusive_cumsum(self.lengths)
        self.ids = np.array([i for r in rows for i in r], dtype=np.int32)

    def prepend(self, spans: Spans, corpus: np.ndarray) -> Spans:
        """``spans`` with the tags of each row's corpus in front, in one compact array (a few numpy steps)."""
        extra = self.lengths[corpus]
        if not extra.any():
            return spans
        body = compact_words(spans)
        lengths = spans.lengths + extra
        starts = exclusive_cumsum(lengths)
        words = np.empty(body.shape[0] + int(extra.sum()), dtype=body.dtype)
        within = np.arange(words.shape[0] - body.shape[0]) - np.repeat(exclusive_cumsum(extra), extra)
        tag_at = np.repeat(starts, extra) + within
        is_body = np.ones(words.shape[0], dtype=bool)
        is_body[tag_at] = False
        words[is_body] = body
        words[tag_at] = self.ids[np.repeat(self.starts[corpus], extra) + within]
        return Spans(words, starts, lengths)


def compact_words(spans: Spans) -> np.ndarray:
    """The rows' tokens back to back: ``spans.words`` itself when it already holds exactly that."""
    lengths = spans.lengths
    if spans.words.shape[0] == int(lengths.sum()) and np.array_equal(spans.starts, exclusive_cumsum(lengths)):
        return spans.words
    return take_flat(spans.words, spans.starts, lengths)


class TagCollater:
    """``collate_fn`` that puts each row's corpus tags in front of it, then calls ``collater``; picklable.

    A batch's ids are rows of corpora laid end to end: corpus ``k`` holds ids
    ``offsets[k]`` to ``offsets[k + 1] - 1`` (``Mixture.offsets``), and ``tags[k]`` are its tags.
    """

    def __init__(self, collater: Callable[[GatheredBatch], Any], tags: Sequence[Tags], offsets: np.ndarray) -> None:
        if len(tags) + 1 != np.shape(offsets)[0]:
            raise InvalidParameterError(f"tags: expected {np.shape(offsets)[0] - 1} (one per corpus), got {len(tags)}")
        self.collater = collater
        self.tables = {column: TagTable(tags, column) for column in (SOURCE, TARGET)}
        self.offsets = np.asarray(offsets, dtype=np.int64)

    def __call__(self, batch: GatheredBatch | Sequence[Mapping[str, Any]]) -> Any:
        return self.collater(self.tagged(GatheredBatch.from_samples(batch)))

    def tagged(self, batch: GatheredBatch) -> GatheredBatch:
        """The rows of ``batch`` with their tags in front (ids and other columns unchanged)."""
        if len(batch) == 0:
            return batch
        corpus = corpus_of(self.offsets, batch.ids)
        columns = {
            name: self.tables[name].prepend(spans, corpus) if name in self.tables else spans
            for name, spans in batch.columns.items()
        }
        return GatheredBatch(batch.ids, columns)
