"""How split names group into shards (fairseq's train, train1, train2, ... rule), exact values."""

from __future__ import annotations

import pytest

from arrowmt.format._manifest import FileEntry, Manifest


def _manifest(*names: str) -> Manifest:
    files = {n: FileEntry(file=f"{n}.arrow", rows=1, size=1, sha256="0" * 64) for n in names}
    return Manifest(languages={"source": "de", "target": "en"}, dictionaries={}, source_format="x", files=files)


@pytest.mark.parametrize(
    ("names", "split", "shards"),
    [
        (("train", "train1", "train2", "valid"), "train", ["train", "train1", "train2"]),
        (("train", "train2"), "train", ["train"]),  # fairseq stops at the first missing number
        (("train1", "train10"), "train1", ["train1"]),  # train10 is train + 10, never a shard of train1
        (("train1", "train11"), "train1", ["train1", "train11"]),
        (("test", "test2016"), "test", ["test"]),
        (("valid",), "train", []),
    ],
)
def test_shards(names: tuple[str, ...], split: str, shards: list[str]) -> None:
    assert _manifest(*names).shards(split) == shards


@pytest.mark.parametrize(
    ("names", "splits"),
    [
        (("train", "train1", "train2", "valid", "test"), ["test", "train", "valid"]),
        (("train", "train2"), ["train", "train2"]),
        (("train1", "train10"), ["train1", "train10"]),
        (("test", "test2016"), ["test", "test2016"]),
    ],
)
def test_splits(names: tuple[str, ...], splits: list[str]) -> None:
    assert _manifest(*names).splits() == splits
