"""Real ``fairseq-train`` on a corpus read by URL from a real S3 server: update for update as native fairseq."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from tests.conftest import PLUGIN_DIR
from tests.s3_server import s3, upload
from tests.test_fairseq_native import Side, assert_same_training, train

__all__ = ["s3"]


def test_fairseq_train_from_s3_as_native_fairseq(
    s3: pafs.S3FileSystem, native_data_bin: Path, native_corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = upload(s3, native_corpus, "fairseq")
    size = (native_corpus / "valid.arrow").stat().st_size
    # fairseq lists --data for other valid subsets unless told not to: it cannot list a URL (both sides told)
    native_args = [str(native_data_bin), "--task", "translation", "--ignore-unused-valid-subsets"]
    native = Side("native", native_args, {}, tmp_path_factory.mktemp("native"))
    cache = tmp_path_factory.mktemp("cache")
    task = [url, "--user-dir", str(PLUGIN_DIR), "--task", "translation_arrow", "--arrow-cache-dir", str(cache),
            "--ignore-unused-valid-subsets"]  # fmt: skip
    remote = Side("arrowmt", [*task, "--arrow-cache-limit", str(size // 2)], {}, tmp_path_factory.mktemp("remote"))
    runs = {side.name: train(side, "first", "--max-update", "24") for side in (native, remote)}
    assert_same_training(runs, list(range(1, 25)))
    assert "arrowmt folder" in runs["arrowmt"].log
