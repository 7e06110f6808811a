"""What a row source over a corpus split (a view, sampled segmentations) tells of the split it reads: its facts."""

from __future__ import annotations

from pathlib import Path

from arrowmt.format import Manifest, SpecialIds, SplitMetadata
from arrowmt.splits._split import Split


class OverSplit:
    """The facts of ``self.corpus``, the split the rows come from: its folder, name, columns, manifest, metadata,
    special ids and whether it is monolingual (a subclass may give its own, e.g. the dictionaries its ids use)."""

    corpus: Split

    @property
    def path(self) -> Path:
        return self.corpus.path

    @property
    def split(self) -> str:
        return self.corpus.split

    @property
    def manifest(self) -> Manifest:
        return self.corpus.manifest

    @property
    def columns(self) -> tuple[str, ...]:
        return self.corpus.columns

    @property
    def metadata(self) -> SplitMetadata:
        return self.corpus.metadata

    @property
    def special_ids(self) -> SpecialIds:
        return self.corpus.special_ids

    @property
    def is_monolingual(self) -> bool:
        return self.corpus.is_monolingual
