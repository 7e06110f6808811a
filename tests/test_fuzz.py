"""Property test: a mutated split file reads consistently or fails with a clear error, never crashes.

Each example mutates a valid split (byte flips, truncation, random ranges, int32
words written over the list offsets) and hands it to one long-lived worker process
(:class:`test_reader_hostile.ReadWorker`): opening it with ``SplitFile`` and reading
every row and length must raise ``ArrowMTError``/``IndexError`` naming the file, or
give exactly the rows pyarrow reads from a stream that passes ``validate(full=True)``.
A segfault or SIGBUS kills only the worker and fails the example, so hypothesis
reports (and shrinks) the offending mutation.

The targeted-offsets property also runs ``verify_dataset`` on a folder whose
manifest records the mutated file's checksum (corruption written before the
manifest, e.g. by a buggy writer): whatever the reader or pyarrow's full validation
rejects, verify must report from the file's structure alone.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_reader_hostile import SPLIT, ReadWorker, assert_consistent, make_dataset

from arrowmt import FileEntry, Manifest
from arrowmt.testing import SplitFile, split_path

Mutation = tuple[
    object, ...
]  # ("flip", pos, mask) | ("truncate", size) | ("overwrite", pos, data) | ("word", pos, value)
INT32 = st.integers(-(2**31), 2**31 - 1)
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Base:
    """The valid split every example starts from."""

    folder: Path
    data: bytes
    offset_words: tuple[int, ...]  # word positions of every list offset in the file
    scratch: Path


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    folder = make_dataset(tmp_path_factory.mktemp("fuzz") / "ds")
    path = split_path(folder, SPLIT)
    split = SplitFile(path)
    words = []
    for layout in split.layouts.values():
        for b, pos in enumerate(layout.offsets_pos):
            n = min(split.rows_per_batch, len(split) - b * split.rows_per_batch)
            words.extend(range(int(pos), int(pos) + n + 1))
    scratch = tmp_path_factory.mktemp("mutated")
    return Base(folder, path.read_bytes(), tuple(words), scratch)


@pytest.fixture(scope="module")
def worker() -> Iterator[ReadWorker]:
    w = ReadWorker()
    yield w
    w.close()


def byte_mutations(size: int) -> st.SearchStrategy[Mutation]:
    position = st.integers(0, size - 1)
    return st.one_of(
        st.tuples(st.just("flip"), position, st.integers(1, 255)),
        st.tuples(st.just("truncate"), st.integers(0, size - 1)),
        st.tuples(st.just("overwrite"), position, st.binary(min_size=1, max_size=32)),
        st.tuples(st.just("word"), st.integers(0, size // 4 - 1), INT32),
    )


def offset_mutations(offset_words: tuple[int, ...]) -> st.SearchStrategy[Mutation]:
    plausible = st.one_of(st.integers(-3, 64), INT32)
    return st.tuples(st.just("word"), st.sampled_from(offset_words), plausible)


def mutate(data: bytes, mutations: list[Mutation]) -> bytes:
    out = bytearray(data)
    for kind, *args in mutations:
        if kind == "flip":
            pos, mask = args
            if pos < len(out):
                out[pos] ^= mask
        elif kind == "truncate":
            del out[args[0] :]
        elif kind == "overwrite":
            pos, chunk = args
            out[pos : pos + len(chunk)] = chunk[: max(0, len(out) - pos)]
        else:
            pos, value = args
            if pos * 4 + 4 <= len(out):
                out[pos * 4 : pos * 4 + 4] = np.array([value], dtype="<i4").tobytes()
    return bytes(out)


_names = itertools.count()


def write_mutated(base: Base, data: bytes) -> Path:
    """A fresh file per example: the worker may still hold a map of the previous one."""
    path = base.scratch / f"m{next(_names)}.arrow"
    path.write_bytes(data)
    return path


def folder_with(base: Base, data: bytes) -> Path:
    """A copy of the dataset holding ``data`` as its split, the manifest recording its checksum."""
    folder = base.scratch / f"ds{next(_names)}"
    shutil.copytree(base.folder, folder)
    path = split_path(folder, SPLIT)
    path.write_bytes(data)
    manifest = Manifest.load(folder)
    manifest.files[SPLIT] = FileEntry.of(path, manifest.files[SPLIT].rows)
    manifest.save(folder)
    return folder


def test_mutated_bytes_read_consistently_or_fail_cleanly(base: Base, worker: ReadWorker) -> None:
    @SETTINGS
    @given(mutations=st.lists(byte_mutations(len(base.data)), min_size=1, max_size=4))
    def check(mutations: list[Mutation]) -> None:
        path = write_mutated(base, mutate(base.data, mutations))
        try:
            assert_consistent(path, worker.read(path))
        finally:
            os.unlink(path)

    check()


def test_mutated_offsets_are_caught_by_reader_or_verify(base: Base, worker: ReadWorker) -> None:
    @SETTINGS
    @given(mutations=st.lists(offset_mutations(base.offset_words), min_size=1, max_size=3))
    def check(mutations: list[Mutation]) -> None:
        folder = folder_with(base, mutate(base.data, mutations))
        path = split_path(folder, SPLIT)
        try:
            result = worker.read(path)
            mine = assert_consistent(path, result)
            found = worker.verify(folder)
            assert found["status"] == "ok", found
            if mine["status"] == "error" or not result["pyarrow"]["valid"]:
                assert found["problems"], f"verify passed a file the reader or pyarrow rejects: {mine}"
            if mine["status"] == "ok" and found["problems"]:
                assert all(str(path) in p for p in found["problems"]), found["problems"]
        finally:
            shutil.rmtree(folder)

    check()
