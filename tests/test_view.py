"""Views: filtered row lists over a split, built vectorized, mapped, read like the split itself."""

from __future__ import annotations

import pickle
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from arrowmt import (
    FairseqCollater,
    FileEntry,
    FormatError,
    InvalidParameterError,
    Manifest,
    OutputExistsError,
    Split,
    TokenBatchSampler,
    build_view,
    open_dataset,
    open_view,
    open_view_dataset,
    verify_dataset,
)
from arrowmt.testing import (
    CACHE_DIR_NAME,
    CHUNK_BYTES,
    HEADER_BYTES,
    SOURCE,
    TARGET,
    ColumnData,
    Ragged,
    main,
    plan_key,
    split_path,
    write_split,
    write_table,
)
from arrowmt.views import _view
from tests.builders import lengths_dataset, multi30k_dataset
from tests.hostile_files import body_start, fifo_at, flip_bit, reseal, unblocking

VOCAB = 50


def write_rows(folder: Path, name: str, rows: dict[str, list[list[int]]], rows_per_batch: int = 3) -> Path:
    """Split file ``name`` with exactly these rows (several small record batches) and a manifest listing it."""
    folder.mkdir(parents=True, exist_ok=True)
    columns = {
        column: ColumnData(Ragged.from_rows(values), None, "dict.txt", "0" * 64, VOCAB, f"test {column}")
        for column, values in rows.items()
    }
    path = split_path(folder, name)
    meta = write_split(path, name, columns, rows_per_batch=rows_per_batch)
    try:
        manifest = Manifest.load(folder)
    except FormatError:
        manifest = Manifest(languages=dict.fromkeys(rows), dictionaries={"": "dict.txt"}, source_format="test")
    manifest.files[name] = FileEntry.of(path, meta.rows)
    manifest.save(folder)
    return folder


def random_pairs(seed: int, n: int, repeat: float = 0.3) -> dict[str, list[list[int]]]:
    """Pairs of short random rows where about ``repeat`` of them copy an earlier pair or one of its sides."""
    rng = np.random.default_rng(seed)
    src: list[list[int]] = []
    tgt: list[list[int]] = []
    for _ in range(n):
        if src and rng.random() < repeat:
            k = int(rng.integers(len(src)))
            choice = rng.integers(3)  # same pair, same source only, same target only
            src.append(list(src[k]) if choice != 2 else rng.integers(4, 9, rng.integers(0, 4)).tolist())
            tgt.append(list(tgt[k]) if choice != 1 else rng.integers(4, 9, rng.integers(0, 4)).tolist())
        else:
            src.append(rng.integers(4, 9, rng.integers(0, 4)).tolist())
            tgt.append(rng.integers(4, 9, rng.integers(0, 4)).tolist())
    return {SOURCE: src, TARGET: tgt}


def first_occurrences(rows: dict[str, list[list[int]]], candidates: list[int]) -> list[int]:
    """Reference dedup: the candidates whose pair did not occur earlier among the candidates."""
    seen: set[tuple] = set()
    kept = []
    for i in candidates:
        key = tuple(tuple(rows[c][i]) for c in rows)
        if key not in seen:
            seen.add(key)
            kept.append(i)
    return kept


# ---------------------------------------------------------------- filters, exact values


def test_length_and_ratio_filters_keep_exactly_the_expected_rows(tmp_path: Path) -> None:
    src = [1, 5, 10, 3, 250, 251, 4, 0, 6, 2]
    tgt = [1, 5, 16, 6, 250, 10, 6, 0, 9, 3]
    corpus = lengths_dataset(tmp_path / "c", src, tgt)
    report = build_view(corpus, tmp_path / "v.view", max_len=250, min_len=1, max_len_ratio=1.5)
    # dropped by length: 251 (row 5), 0 (row 7); by ratio: 10/16, 3/6 (rows 2, 3)
    assert report.dropped == {"not_listed": 0, "length": 2, "ratio": 2, "duplicate": 0}
    view = open_view(tmp_path / "v.view", corpus)
    assert view.rows.tolist() == [0, 1, 4, 6, 8, 9]
    assert report.kept == len(view) == 6
    assert view.lengths(SOURCE).tolist() == [1, 5, 250, 4, 6, 2]
    assert view.lengths(TARGET, np.array([2, 5])).tolist() == [250, 3]


def test_ratio_of_empty_rows_and_row_lists(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [0, 0, 2, 3, 3], [0, 1, 3, 3, 5])
    report = build_view(corpus, tmp_path / "v.view", max_len_ratio=1.5, rows=np.array([4, 1, 0, 1, 2]))
    assert report.dropped == {"not_listed": 1, "length": 0, "ratio": 2, "duplicate": 0}  # row 3; rows 1, 4
    assert open_view(tmp_path / "v.view", corpus).rows.tolist() == [0, 2]


def test_dedup_matches_a_reference_on_multi_batch_multi_shard_splits(tmp_path: Path) -> None:
    first, second = random_pairs(1, 40), random_pairs(2, 25)
    second[SOURCE][:5], second[TARGET][:5] = first[SOURCE][:5], first[TARGET][:5]  # repeats across shards
    write_rows(tmp_path / "c", "train", first)
    write_rows(tmp_path / "c", "train1", second, rows_per_batch=4)
    joined = {c: first[c] + second[c] for c in first}
    report = build_view(tmp_path / "c", tmp_path / "c" / "dedup.view", dedup=True)
    view = open_view(tmp_path / "c" / "dedup.view")  # the corpus is the folder holding the view
    expected = first_occurrences(joined, list(range(65)))
    assert view.rows.tolist() == expected
    assert report.dropped["duplicate"] == 65 - len(expected) > 10


def test_dedup_after_other_filters_and_monolingual(tmp_path: Path) -> None:
    rows = random_pairs(3, 50)
    write_rows(tmp_path / "c", "train", rows)
    build_view(tmp_path / "c", tmp_path / "v.view", dedup=True, max_len=2, rows=np.arange(5, 50))
    candidates = [i for i in range(5, 50) if len(rows[SOURCE][i]) <= 2 and len(rows[TARGET][i]) <= 2]
    assert open_view(tmp_path / "v.view", tmp_path / "c").rows.tolist() == first_occurrences(rows, candidates)
    mono = {"tokens": rows[SOURCE]}
    write_rows(tmp_path / "m", "train", mono)
    build_view(tmp_path / "m", tmp_path / "m.view", dedup=True)
    assert open_view(tmp_path / "m.view", tmp_path / "m").rows.tolist() == first_occurrences(mono, list(range(50)))


def test_dedup_is_exact_even_when_every_hash_collides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = random_pairs(4, 60, repeat=0.5)
    write_rows(tmp_path / "c", "train", rows)

    def colliding(source: Split, column: str, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(len(source), dtype=np.uint32) if out is None else out
        out[...] = 7
        return out

    monkeypatch.setattr(_view, "column_hashes", colliding)
    build_view(tmp_path / "c", tmp_path / "v.view", dedup=True)
    kept = open_view(tmp_path / "v.view", tmp_path / "c").rows.tolist()
    # colliding different pairs are never dropped; duplicates of the first row of each key group are
    reference = set(first_occurrences(rows, list(range(60))))
    assert reference <= set(kept) and 0 in kept


def test_column_hashes_equal_for_equal_rows_anywhere(tmp_path: Path) -> None:
    rows = {"tokens": [[5, 6, 7], [9], [5, 6, 7], [], [7, 6, 5], [], [5, 6, 7, 0], [9]]}
    write_rows(tmp_path / "c", "train", rows, rows_per_batch=3)
    hashes = _view.column_hashes(Split(tmp_path / "c"), "tokens").tolist()
    assert hashes[0] == hashes[2] and hashes[1] == hashes[7] and hashes[3] == hashes[5] == 0
    assert len({hashes[0], hashes[1], hashes[4]}) == 3


# ---------------------------------------------------------------- file format and reading


def test_file_costs_four_bytes_per_kept_row_and_is_checked(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", list(range(1, 101)), list(range(1, 101)))
    path = tmp_path / "v.view"
    report = build_view(corpus, path, max_len=90)
    size = path.stat().st_size
    raw = path.read_bytes()
    description = size - body_start(raw) - 4 * report.kept
    assert body_start(raw) == HEADER_BYTES + 24  # the chunk table: 16 bytes, one CRC-32, padding
    assert report.kept == 90 and 0 < description <= 512 and description % 8 == 0
    with pytest.raises(OutputExistsError):
        build_view(corpus, path, max_len=10)
    assert open_view(path, corpus).rows.shape == (90,)  # the refused rewrite left it intact
    broken = tmp_path / "broken.view"
    for data, match in (
        (raw[:-4], "view size"),
        (b"X" + raw[1:], "magic"),
        (raw[: size - 8] + np.array([7, 3], dtype="<u4").tobytes(), "view checksum: chunk 0 of 1"),
    ):
        broken.write_bytes(data)
        with pytest.raises(FormatError, match=match):
            open_view(broken, corpus)
    for rows, match in (([7, 3], "view row 88: expected rows in strictly increasing order"), ([88, 100], "< 100")):
        forged = bytearray(raw[: size - 8] + np.array(rows, dtype="<u4").tobytes())
        reseal(forged)  # checksums that match: the row checks must catch it
        broken.write_bytes(bytes(forged))
        view = open_view(broken, corpus)
        with pytest.raises(FormatError, match=match):
            view.check_all()
        with pytest.raises(FormatError, match=match):
            view.rows  # noqa: B018
    with pytest.raises(FormatError, match=r"view rows: expected < 100 \(the split's rows\), found 100"):
        view.corpus_rows(np.array([0, 89]))
    assert view.corpus_rows(np.array([0, 88])).tolist() == [0, 88]


def alternating_view(tmp_path: Path) -> tuple[Path, Path]:
    """(corpus, view): rows alternate 10 and 16 tokens; the view keeps rows of at most 15 (the even rows)."""
    corpus = lengths_dataset(tmp_path / "c", [10, 16] * 20, [10, 16] * 20)
    return corpus, build_view(corpus, tmp_path / "v.view", max_len=15).path


def test_open_dataset_on_a_view_file_names_open_view_dataset(tmp_path: Path) -> None:
    _, view = alternating_view(tmp_path)
    with pytest.raises(InvalidParameterError, match=r"is a view file .* open it with arrowmt.open_view_dataset\("):
        open_dataset(view, "train")


def test_a_flipped_bit_in_a_row_number_is_refused(tmp_path: Path) -> None:
    """Row 4 -> 5 keeps the rows increasing: without the checksum the view served a row its filter dropped."""
    corpus, path = alternating_view(tmp_path)
    view = open_view(path, corpus)
    assert view.lengths(SOURCE).max() == 10
    at = path.stat().st_size - 4 * len(view) + 4 * 2  # the third kept row: corpus row 4
    assert int(view.rows[2]) == 4
    del view
    flip_bit(path, at)
    message = (
        r"v\.view: view checksum: chunk 0 of 1 \(file bytes 152\.\.\d+\): expected CRC-32 [0-9a-f]{8} \(chunk "
        r"table\), found [0-9a-f]{8} \(contents changed on disk\); rebuild it with `arrowmt filter`"
    )
    with pytest.raises(FormatError, match=message):  # the description shares the first chunk: checked at open
        open_view(path, corpus)


def test_every_flipped_bit_is_refused(tmp_path: Path) -> None:
    """One bit flipped in any byte the checksum covers (all but the header's padding) fails the open."""
    corpus, path = alternating_view(tmp_path)
    raw = path.read_bytes()
    broken = tmp_path / "broken.view"
    covered = [k for k in range(len(raw)) if not 112 + 4 <= k < HEADER_BYTES]  # the CRC-32 sits at 112
    for k in covered:
        data = bytearray(raw)
        data[k] ^= 1 << (k % 8)
        broken.write_bytes(bytes(data))
        with pytest.raises(FormatError):
            open_view(broken, corpus)
    assert open_view(path, corpus).rows.tolist() == list(range(0, 40, 2))


def test_a_version_1_view_is_refused_with_the_command_that_rebuilds_it(tmp_path: Path) -> None:
    corpus, path = alternating_view(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[16:20] = (1).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"view magic/version: .* v3, found .* v1; rebuild it with `arrowmt filter`"):
        open_view(path, corpus)


def as_version_2(raw: bytes) -> bytes:
    """A view file as version 2 wrote it: no chunk table, one CRC-32 of the header fields and the whole body."""
    fields, body = bytearray(raw[:112]), raw[body_start(raw) :]
    fields[16:20] = (2).to_bytes(4, "little")
    crc = zlib.crc32(bytes(fields) + body).to_bytes(4, "little")
    return (bytes(fields) + crc).ljust(HEADER_BYTES, b"\x00") + body


def test_a_version_2_view_is_still_read_and_checked_whole_at_open(tmp_path: Path) -> None:
    corpus, path = alternating_view(tmp_path)
    old = corpus / "old.view"
    old.write_bytes(as_version_2(path.read_bytes()))
    view = open_view(old, corpus)
    assert view.rows.tolist() == list(range(0, 40, 2)) and view.corpus_rows(np.array([3])).tolist() == [6]
    assert view.fingerprint() == open_view(path, corpus).fingerprint()  # the same rows: plans over it are reused
    assert verify_dataset(corpus, progress=False).side_files == 1  # verify checks it too
    flip_bit(old, old.stat().st_size - 4 * 17)  # a row number
    with pytest.raises(FormatError, match=r"view checksum: expected CRC-32 [0-9a-f]{8} \(header\), found "):
        open_view(old, corpus)


def big_view(tmp_path: Path) -> tuple[Path, Path, int]:
    """(corpus, view, body start): 300,000 kept rows (1.2 MB of row numbers: many chunks)."""
    corpus = lengths_dataset(tmp_path / "big", np.full(300_001, 2), np.full(300_001, 2))
    path = build_view(corpus, corpus / "big.view", rows=np.arange(1, 300_001)).path
    return corpus, path, body_start(path.read_bytes())


def test_a_corrupt_chunk_of_a_view_fails_the_rows_in_it_and_keeps_the_file(tmp_path: Path) -> None:
    """Opening reads the first chunk (the description's); rows of the second are checked when first read. A view is
    not a cache: it is never removed, the message says how to rebuild it."""
    corpus, path, body = big_view(tmp_path)
    description = path.stat().st_size - body - 4 * 300_000
    second = (CHUNK_BYTES - description) // 4  # the first row in the second chunk
    flip_bit(path, body + CHUNK_BYTES + 4 * 1000)
    view = open_view(path, corpus)
    assert len(view) == 300_000 and view.corpus_rows(np.array([0, second - 1])).tolist() == [1, second]
    chunks = -(-(path.stat().st_size - body) // CHUNK_BYTES)
    message = (
        rf"big\.view: view checksum: chunk 1 of {chunks} \(file bytes {body + CHUNK_BYTES}\."
        rf"\.{body + 2 * CHUNK_BYTES - 1}\): .*; rebuild it with `arrowmt filter`"
    )
    with pytest.raises(FormatError, match=message):
        view.corpus_rows(np.array([5, second]))
    with pytest.raises(FormatError, match=message):
        view.lengths(SOURCE)  # every row
    assert path.exists()
    problems = verify_dataset(corpus, progress=False).problems
    assert any(p.startswith(f"{path}: view checksum: chunk 1 of {chunks}") for p in problems), problems


def test_a_mixture_checks_the_chunks_of_its_views(tmp_path: Path) -> None:
    """The mixture's gather reads a view's rows through the address space: only after their chunks are checked."""
    from arrowmt import open_mixture

    corpus, path, _ = big_view(tmp_path)
    mixture = open_mixture({"view": path, "corpus": corpus})
    assert mixture.__getitems__([0, 7, 300_000]).ids.tolist() == [0, 7, 300_000]
    view = mixture.corpora[0]
    checked = view._rows.checks.checked
    assert view.mapped_rows.shape == (300_000,) and checked[0] and not checked[1:].any()
    flip_bit(path, path.stat().st_size - 4)  # the last row: the last chunk, not checked yet (the map sees the change)
    last = checked.shape[0] - 1
    with pytest.raises(FormatError, match=rf"big\.view: view checksum: chunk {last} of {last + 1}"):
        mixture.__getitems__([1, 299_999])
    assert mixture.__getitems__([1, 2]).ids.tolist() == [1, 2]


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_view_path_that_is_not_a_regular_file_is_refused_without_opening_it(tmp_path: Path, kind: str) -> None:
    corpus = lengths_dataset(tmp_path / "c", [3, 4], [3, 4])
    path = tmp_path / "v.view"
    if kind == "fifo":
        fifo_at(path)
    else:
        path.mkdir()
    expected = {"fifo": "a FIFO", "folder": "a folder"}[kind]
    with (
        unblocking(path),
        pytest.raises(FormatError, match=f"v.view \\(view\\): expected a regular file, got {expected}"),
    ):
        open_view(path, corpus)


def test_verify_checks_views_and_cache_files(tmp_path: Path) -> None:
    """``verify`` opens every view beside the corpus and checks every cached plan and block table."""
    corpus, _ = alternating_view(tmp_path)
    baseline = verify_dataset(corpus, progress=False).problems  # the synthetic corpus has no dictionary file
    views = corpus / "views"
    good = build_view(corpus, views / "good.view", max_len=12).path
    bad = build_view(corpus, views / "bad.view", min_len=12).path
    TokenBatchSampler(open_dataset(corpus), max_tokens=64, seed=1)  # caches a plan in the corpus
    cache = corpus / CACHE_DIR_NAME
    (plan,) = cache.glob("plan-*.bin")
    key = plan_key({"test": "blocks"})
    table = cache / f"blocks-{key[:32]}.bin"
    write_table(table, key, 2, 30, np.array([0, 10]), np.array([10, 30]), np.array([0, 0]))
    report = verify_dataset(corpus, progress=False)
    assert report.problems == baseline and report.side_files == 4 and good.exists()
    for path in (bad, plan, table):
        flip_bit(path, path.stat().st_size - 4 if path == bad else body_start(path.read_bytes()) + 8)
    fifo_at(corpus / "stray.view")
    problems = [p for p in verify_dataset(corpus, progress=False).problems if p not in baseline]
    assert len(problems) == 4, problems
    assert any(p.startswith(f"{bad}: view checksum") for p in problems), problems
    assert any(p.startswith(f"{plan}: plan checksum") and "delete it" in p for p in problems), problems
    assert any(p.startswith(f"{table}: block table checksum") for p in problems), problems
    assert any("stray.view (view): expected a regular file, got a FIFO" in p for p in problems), problems


def test_verify_skips_cache_files_of_another_version(tmp_path: Path) -> None:
    """A plan of another format version is never read (plans are named by a key holding the version)."""
    corpus = lengths_dataset(tmp_path / "c", [3, 4], [3, 4])
    TokenBatchSampler(open_dataset(corpus), max_tokens=64, seed=1)
    (plan,) = (corpus / CACHE_DIR_NAME).glob("plan-*.bin")
    before = verify_dataset(corpus, progress=False)
    raw = bytearray(plan.read_bytes())
    raw[16:20] = (1).to_bytes(4, "little")
    plan.write_bytes(bytes(raw))
    after = verify_dataset(corpus, progress=False)
    assert (before.side_files, after.side_files) == (1, 0) and after.problems == before.problems


def test_view_refuses_another_corpus_and_needs_one(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [1, 2, 3], [1, 2, 3])
    other = lengths_dataset(tmp_path / "other", [1, 2, 4], [1, 2, 3])
    build_view(corpus, tmp_path / "views" / "v.view", max_len=2)
    with pytest.raises(FormatError, match="rebuild the view"):
        open_view(tmp_path / "views" / "v.view", other)
    with pytest.raises(InvalidParameterError, match="corpus"):
        open_view(tmp_path / "views" / "v.view")
    build_view(corpus, corpus / "views" / "v.view", max_len=2)
    assert len(open_view(corpus / "views" / "v.view")) == 2  # a folder inside the corpus


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_len": 0}, "max_len"),
        ({"min_len": 5, "max_len": 4}, "min_len"),
        ({"max_len_ratio": 0.5}, "max_len_ratio"),
        ({"rows": np.array([0, 9])}, "out of range"),
        ({"rows": np.array([0.5])}, "rows"),
    ],
)
def test_bad_filters(tmp_path: Path, options: dict, match: str) -> None:
    corpus = lengths_dataset(tmp_path / "c", [1, 2, 3], [1, 2, 3])
    with pytest.raises((InvalidParameterError, IndexError), match=match):
        build_view(corpus, tmp_path / "v.view", **options)
    assert not (tmp_path / "v.view").exists()


def test_ratio_needs_a_parallel_split(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [1, 2, 3])
    with pytest.raises(InvalidParameterError, match="parallel"):
        build_view(corpus, tmp_path / "v.view", max_len_ratio=2)


def test_view_dataset_reads_the_kept_rows_like_the_corpus(tmp_path: Path) -> None:
    corpus = multi30k_dataset(tmp_path / "c", "valid")
    build_view(corpus, corpus / "short.view", split="valid", max_len=12, max_len_ratio=1.3)
    ds, full = open_view_dataset(corpus / "short.view"), open_dataset(corpus, "valid")
    rows = ds.rows.astype(np.int64)
    assert 100 < len(ds) < len(full)
    assert ds[3]["id"] == 3 and torch.equal(ds[3][SOURCE], full[int(rows[3])][SOURCE])
    assert np.array_equal(ds.num_tokens(), full.num_tokens(rows))
    picked = [5, 0, len(ds) - 1]
    collate = FairseqCollater(ds.special_ids)
    via_view, via_corpus = collate(ds.__getitems__(picked)), collate(full.__getitems__(rows[picked].tolist()))
    assert torch.equal(via_view["net_input"]["src_tokens"], via_corpus["net_input"]["src_tokens"])
    assert torch.equal(via_view["target"], via_corpus["target"])
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == len(ds) and torch.equal(clone[7][TARGET], ds[7][TARGET])
    ds.check_unchanged()
    with pytest.raises(IndexError, match="view"):
        ds[len(ds)]


def test_sampler_over_a_view_batches_only_kept_rows(tmp_path: Path) -> None:
    corpus = multi30k_dataset(tmp_path / "c", "valid")
    build_view(corpus, corpus / "v.view", split="valid", max_len=14)
    ds = open_view_dataset(corpus / "v.view")
    sampler = TokenBatchSampler(ds, max_tokens=256, seed=3)
    seen = np.sort(np.concatenate([np.asarray(b) for b in sampler]))
    assert np.array_equal(seen, np.arange(len(ds)))
    assert ds.num_tokens().max() <= 14
    plain = TokenBatchSampler(open_dataset(corpus, "valid"), max_tokens=256, seed=3)
    assert plain.plan_key != sampler.plan_key  # the view has its own plan


def test_pickled_view_detects_a_replaced_view_file(tmp_path: Path) -> None:
    corpus = lengths_dataset(tmp_path / "c", [1, 2, 3, 4], [1, 2, 3, 4])
    build_view(corpus, tmp_path / "v.view", max_len=3)
    state = pickle.dumps(open_view(tmp_path / "v.view", corpus))
    build_view(corpus, tmp_path / "v.view", max_len=2, overwrite=True)
    with pytest.raises(FormatError, match="changed"):
        pickle.loads(state)


# ---------------------------------------------------------------- command line


def test_cli_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = lengths_dataset(tmp_path / "c", [1, 2, 3, 40, 2], [1, 2, 9, 40, 2])
    out = tmp_path / "clean.view"
    assert main(["filter", str(corpus), str(out), "--max-len", "30", "--max-len-ratio", "1.5", "--dedup"]) == 0
    printed = capsys.readouterr().out
    assert "kept 2 of 5 rows" in printed and "length 1, ratio 1, duplicate 1" in printed
    assert open_view(out, corpus).rows.tolist() == [0, 1]
    assert main(["filter", str(corpus), str(out), "--max-len", "30"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    rows = tmp_path / "rows.txt"
    rows.write_text("4\n0\n")
    assert main(["filter", str(corpus), str(out), "--rows", str(rows), "--overwrite", "--quiet"]) == 0
    assert open_view(out, corpus).rows.tolist() == [0, 4]


# ---------------------------------------------------------------- the fairseq plugin


def test_translation_arrow_trains_on_a_view(tmp_path: Path) -> None:
    import warnings

    from arrowmt import convert_fairseq
    from tests.conftest import fairseq_fixture, import_fairseq

    import_fairseq()
    corpus = tmp_path / "c"
    convert_fairseq(fairseq_fixture() / "mmap", corpus, progress=False)
    view = build_view(corpus, corpus / "short.view", max_len=10).path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import arrowmt.integrations.fairseq_plugin as plugin

        resolved = {"train_subset": "train", "required_seq_len_multiple": 1, "dataset_impl": None}
        cfg = plugin.TranslationArrowConfig(data=str(corpus), arrow_train_view=str(view), **resolved)
        task = plugin.TranslationArrowTask.setup_task(cfg)
        task.load_dataset("train")
        itr = task.get_batch_iterator(task.dataset("train"), max_tokens=512, seed=1, epoch=1)
        ids = np.concatenate([b["id"].numpy() for b in itr.next_epoch_itr(shuffle=True)])
    kept = open_view(view)
    assert 0 < len(kept) < 29000 and np.array_equal(np.sort(ids), np.arange(len(kept)))
    assert task.dataset("train").arrow.lengths(SOURCE).max() <= 10


def test_every_public_member_of_a_dataset_works_on_a_view_dataset(tmp_path: Path) -> None:
    """A view dataset goes wherever a dataset goes: each public member of ``ArrowMTDataset`` gives, for view row
    ``i``, what the dataset gives for the corpus row the view keeps there (the table below must name every one)."""
    import inspect

    from arrowmt import ArrowMTDataset, Split, View, convert_fairseq
    from tests.conftest import fairseq_fixture

    corpus = tmp_path / "c"
    convert_fairseq(fairseq_fixture() / "mmap", corpus, progress=False)  # with its dictionaries
    build_view(corpus, tmp_path / "v.view", split="valid", rows=np.arange(0, 1000, 2))
    ds, view = open_dataset(corpus, "valid"), open_view_dataset(tmp_path / "v.view", corpus)
    mine, theirs = np.array([3, 0, 7]), np.array([6, 0, 14])

    def spans(s: object) -> list[list[int]]:
        return [s.row(k).tolist() for k in range(len(s))]

    same = {  # member -> (what the view gives, what the dataset gives for the same rows)
        "row": (lambda: view.row("source", 3).tolist(), lambda: ds.row("source", 6).tolist()),
        "row_array": (lambda: view.row_array("target", 7).tolist(), lambda: ds.row_array("target", 14).tolist()),
        "lengths": (lambda: view.lengths("source", mine).tolist(), lambda: ds.lengths("source", theirs).tolist()),
        "num_tokens": (lambda: view.num_tokens(mine).tolist(), lambda: ds.num_tokens(theirs).tolist()),
        "locate": (lambda: [a.tolist() for a in view.locate(mine)], lambda: [a.tolist() for a in ds.locate(theirs)]),
        "column_spans": (
            lambda: spans(view.column_spans("target", mine)),
            lambda: spans(ds.column_spans("target", theirs)),
        ),
        "located_spans": (
            lambda: spans(view.located_spans("source", *view.locate(mine))),
            lambda: spans(ds.located_spans("source", *ds.locate(theirs))),
        ),
        "word_ranges": (
            lambda: [r.starts.tolist() for r in view.word_ranges(mine, True)],
            lambda: [r.starts.tolist() for r in ds.word_ranges(theirs, True)],
        ),
        "dictionary": (lambda: view.dictionary("source").sha256(), lambda: ds.dictionary("source").sha256()),
        "columns": (lambda: view.columns, lambda: ds.columns),
        "metadata": (lambda: view.metadata, lambda: ds.metadata),
        "special_ids": (lambda: view.special_ids, lambda: ds.special_ids),
        "is_monolingual": (lambda: view.is_monolingual, lambda: ds.is_monolingual),
        "path": (lambda: view.path, lambda: ds.path),
        "split": (lambda: view.split, lambda: ds.split),
        "manifest": (lambda: view.manifest.files, lambda: ds.manifest.files),
        "check_unchanged": (lambda: view.check_unchanged(), lambda: ds.check_unchanged()),
        "advise": (lambda: view.advise("random"), lambda: ds.advise("random")),
    }
    own = {  # members whose value is the view's own
        "fingerprint": lambda: view.fingerprint() != ds.fingerprint() and len(view.fingerprint()) == 64,
        "stretch_ranges": lambda: view.stretch_ranges(np.array([0]), np.array([2])) is None,
        "access": lambda: view.corpus.access == ds.access == "random",
        "cumulative": lambda: ds.cumulative.tolist() == [0, len(ds)],
        "shard_names": lambda: ds.shard_names == ["valid"],
        "shards": lambda: len(ds.shards) == 1,
        "row_order": lambda: ds.row_order is None,
    }
    public = {name for name, _ in inspect.getmembers(ArrowMTDataset) if not name.startswith("_")} | set(vars(ds))
    public = {name for name in public if not name.startswith("_")}
    assert public <= set(same) | set(own), sorted(public - set(same) - set(own))
    for name, (view_call, dataset_call) in same.items():
        assert view_call() == dataset_call(), name
    for name, check in own.items():
        assert check(), name
    # composition, not inheritance: the view dataset holds the corpus split; it is not one (no Split internals)
    assert not isinstance(view, Split) and isinstance(view.corpus, Split)
    assert isinstance(view, View) and type(view).row is type(ds).row  # one torch side for both
