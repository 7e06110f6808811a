"""``arrowmt order``: a corpus stored in plan order reads the original's rows and batches, each batch in one stretch."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import arrowmt
import arrowmt.stored
from arrowmt import FormatError, InvalidParameterError
from arrowmt.files import write_side_file
from arrowmt.format import CACHE_DIR_NAME, MANIFEST_NAME
from arrowmt.plans import BatchPlan, PlanParams, load_plan
from arrowmt.reading import SplitFile
from arrowmt.splits import Split
from arrowmt.stored import StoredPlan, order_marker
from arrowmt.testing import (
    NOTED,
    ORDER_FORMAT,
    PIECE_ROWS,
    STRETCH_PIECE_ROWS,
    build_plan,
    inverse_order,
    key_fields,
    open_row_order,
    plan_key,
    plan_order,
    write_row_order,
    write_split,
)
from arrowmt.views import verify_dataset
from tests.conftest import MULTI30K
from tests.state_helpers import check_resume

MAX_TOKENS = 700


def test_plan_order_exact() -> None:
    assert plan_order(np.array([4, 1, 3]), 6).tolist() == [4, 1, 3, 0, 2, 5]
    assert inverse_order(np.array([4, 1, 3, 0, 2, 5])).tolist() == [3, 1, 4, 2, 0, 5]
    with pytest.raises(InvalidParameterError, match="at most once"):
        plan_order(np.array([1, 1]), 3)


def test_a_planned_batch_is_translated_from_two_pages(tmp_path: Path) -> None:
    rows = 100_000  # 400 KB per map: a hundred 4 KiB chunks each
    order = np.random.default_rng(0).permutation(rows)
    write_row_order(tmp_path / "train.rows", order, np.array([0, 300, 300, rows - 5]))
    maps = open_row_order(tmp_path / "train.rows", rows)
    assert (len(maps.offsets), maps.planned) == (4, rows - 5)
    assert maps.stored(order[50_000:50_300]).tolist() == list(range(50_000, 50_300))
    assert maps.where.checks is maps.order.checks  # one file, one chunk table
    assert int(maps.where.checks.checked.sum()) == 2  # the first row's where chunk and the stretch's order chunk
    scattered = order[[5, 70_000, 12]]
    assert maps.stored(scattered).tolist() == [5, 70_000, 12]
    assert maps.stored(order[10:20][::-1]).tolist() == list(range(19, 9, -1))  # not in stored order: row by row
    assert maps.stored(order[rows - 3 :]).tolist() == [rows - 3, rows - 2, rows - 1]
    assert maps.stored(order[:1]).tolist() == [0]
    assert maps.stored(order[:0]).tolist() == []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("order") / "corpus"
    arrowmt.convert_text(
        str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", testpref=str(MULTI30K / "test"), progress=False
    )
    return out


@pytest.fixture(scope="module")
def ordered(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("order") / "ordered"
    arrowmt.order_copy(corpus, out, max_tokens=MAX_TOKENS, seed=3, progress=False)
    return out


def batches(path: Path, **kw: object) -> list[list[int]]:
    dataset = arrowmt.open_dataset(path, "train")
    sampler = arrowmt.TokenBatchSampler(dataset, **{"max_tokens": MAX_TOKENS, "seed": 3, **kw})  # type: ignore[arg-type]
    collate = arrowmt.FairseqCollater(dataset.special_ids)
    out = []
    for ids in sampler:
        batch = collate(dataset.__getitems__(ids))
        out.append([list(map(int, ids)), batch["net_input"]["src_tokens"].tolist(), batch["target"].tolist()])
    return out


def test_rows_and_batches_are_the_originals(corpus: Path, ordered: Path) -> None:
    original, copy = arrowmt.open_dataset(corpus, "train"), arrowmt.open_dataset(ordered, "train")
    assert len(copy) == len(original)
    for i in (0, 5, 500, len(original) - 1):
        assert copy[i]["source"].tolist() == original[i]["source"].tolist()
    assert np.array_equal(copy.lengths("target"), original.lengths("target"))
    assert batches(ordered) == batches(corpus)
    assert batches(ordered, seed=9, num_replicas=2, rank=1) == batches(corpus, seed=9, num_replicas=2, rank=1)


def test_each_planned_batch_is_one_stretch_of_the_file(ordered: Path) -> None:
    dataset = arrowmt.open_dataset(ordered, "train")
    sampler = arrowmt.TokenBatchSampler(dataset, max_tokens=MAX_TOKENS, seed=3)
    for ids in sampler:
        _, local = dataset.locate(ids)
        assert np.array_equal(np.sort(local), np.arange(local.min(), local.min() + local.size))


def params(seed: int = 3) -> PlanParams:
    return PlanParams(max_tokens=MAX_TOKENS, seed=seed)


def test_the_copy_serves_the_plan_it_is_stored_by(ordered: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = Split(ordered, "train")
    built = build_plan(copy, params())  # what the copy's own lengths plan
    monkeypatch.setattr(Split, "lengths", lambda *a, **k: pytest.fail("the stored plan reads no lengths"))
    plan = load_plan(copy, params(), None)
    assert isinstance(plan, StoredPlan)
    assert not list((ordered / CACHE_DIR_NAME).glob(f"plan-{plan.key[:32]}*"))  # nothing built, nothing written
    assert plan.key == plan_key({"dataset": copy.fingerprint(), "rows": len(copy), **key_fields(params())})
    assert np.array_equal(plan.indices, built.indices) and np.array_equal(plan.offsets, built.offsets)
    assert (len(plan), plan.samples, plan.dropped) == (built.offsets.size - 1, built.indices.size, built.dropped)
    assert [plan.batch(b).tolist() for b in (0, len(plan) - 1)] == [
        built.indices[built.offsets[b] : built.offsets[b + 1]].tolist() for b in (0, len(plan) - 1)
    ]
    assert pickle.loads(pickle.dumps(plan)).batch(3).tolist() == plan.batch(3).tolist()
    with pytest.raises(IndexError, match=f"plan batch {len(plan)}: expected 0..{len(plan) - 1}"):
        plan.batch(len(plan))


def test_another_plan_of_the_copy_is_built_with_a_warning_naming_what_differs(
    corpus: Path, ordered: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A plan other than the copy's (here another seed) is built as for any corpus, and a warning says which options
    differ from the copy's: the copy then reads no faster than the corpus."""
    copy = Split(ordered, "train")
    with caplog.at_level(logging.WARNING, logger="arrowmt.stored._stored_plan"):
        plan = load_plan(copy, params(seed=4), tmp_path)
    assert not isinstance(plan, StoredPlan) and len(caplog.records) == 1
    assert f"{ordered}: split 'train' is stored in the order of another plan (seed=3 (asked 4))" in caplog.text
    original = Path(arrowmt.Manifest.load(ordered).provenance["copied_from"])
    assert original.samefile(corpus)  # the copy names its original: the command is ready to run
    command = (
        f"arrowmt order {original} {ordered}-seed4 --max-tokens {MAX_TOKENS} --required-batch-size-multiple 1 --seed 4"
    )
    assert caplog.records[0].getMessage().endswith(f"make a copy with these options from the original: {command}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="arrowmt.stored._stored_plan"):
        load_plan(Split(ordered, "test"), params(seed=4), tmp_path)  # a split stored as it was: nothing to say
        assert isinstance(load_plan(copy, params(), tmp_path), StoredPlan)
    assert not caplog.records


def test_a_batch_the_stored_plan_hands_out_is_placed_without_a_where_lookup(
    ordered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = arrowmt.open_dataset(ordered, "train")
    sampler = arrowmt.TokenBatchSampler(dataset, max_tokens=MAX_TOKENS, seed=3, prefetch=0)
    assert dataset.row_order is not None and isinstance(sampler.plan, StoredPlan)
    monkeypatch.setattr(dataset.row_order.where, "take", lambda rows: pytest.fail("where looked up"))
    for ids in sampler:
        if len(ids) > 1:
            _, local = dataset.locate(np.array(ids))
            assert np.array_equal(local, np.arange(local[0], local[0] + local.size))


def test_plan_offsets_that_cannot_be_stored_are_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match=r"offsets \(of the plan stored in .*train\.rows\): .* 3 values"):
        write_row_order(tmp_path / "train.rows", np.arange(5), np.array([0, 4, 2]))
    assert not (tmp_path / "train.rows").exists()


def test_another_split_of_the_copy_builds_its_plan(ordered: Path, tmp_path: Path) -> None:
    assert isinstance(load_plan(Split(ordered, "test"), params(), tmp_path), BatchPlan)


def test_the_row_order_body_starts_on_a_page_and_older_versions_are_refused(tmp_path: Path) -> None:
    path = write_row_order(tmp_path / "train.rows", np.arange(10), np.array([0, 10]))
    maps = open_row_order(path, 10)
    assert maps.where.raw.ctypes.data % 4096 == 0  # the map is page-aligned, so is the body
    raw = bytearray(path.read_bytes())
    raw[1000] ^= 1  # chunk table padding: covered by the header's checksum
    (tmp_path / "bad.rows").write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="checksum"):
        open_row_order(tmp_path / "bad.rows", 10)
    old = dataclasses.replace(ORDER_FORMAT, version=3, aligned=False)
    sections = [np.arange(10, dtype="<i4"), np.arange(10, dtype="<i4"), np.array([0, 10], dtype="<i8")]
    write_side_file(tmp_path / "old.rows", old, (10, 4, 1, 10), sections)
    with pytest.raises(FormatError, match=r"v4, found .* v3; make the copy again"):
        open_row_order(tmp_path / "old.rows", 10)


def test_verify_reports_a_bad_row_order_entry(ordered: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ordered, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    manifest["provenance"]["row_order"] = {"train": "../train.rows"}
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    problems = verify_dataset(copy, progress=False).problems
    assert any("arrowmt.json: manifest provenance 'row_order'" in p for p in problems), problems


def test_noted_batches_located_together_are_placed_stretch_by_stretch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-ahead locates several planned batches at once: each noted batch is placed from its note (no ``where``
    lookup), and rows after them that fill no stretch come from ``where``."""
    order = np.random.default_rng(2).permutation(5000)
    write_row_order(tmp_path / "train.rows", order, np.array([0, 5000]))
    maps = open_row_order(tmp_path / "train.rows", 5000)
    for start, stop in ((300, 420), (40, 41 + 99), (4000, 4100)):
        maps.note(start, order[start:stop])
    rows = np.concatenate([order[300:420], order[40:140], order[4000:4100]])
    monkeypatch.setattr(maps.where, "take", lambda positions: pytest.fail("where looked up"))
    assert maps.stored(rows).tolist() == [*range(300, 420), *range(40, 140), *range(4000, 4100)]
    monkeypatch.undo()
    tail = order[[7, 9]]  # not a stretch: each from where
    assert maps.stored(np.concatenate([order[300:420], tail])).tolist() == [*range(300, 420), 7, 9]


def test_a_wrong_note_falls_back_to_where(tmp_path: Path) -> None:
    order = np.random.default_rng(1).permutation(5000)
    write_row_order(tmp_path / "train.rows", order, np.array([0, 5000]))
    maps = open_row_order(tmp_path / "train.rows", 5000)
    maps.note(7, order[100:110])  # not where those rows are
    assert maps.stored(order[100:110]).tolist() == list(range(100, 110))
    for k in range(NOTED + 5):  # the oldest notes go first
        maps.note(k, np.array([k, k + 1]))
    assert len(maps.stretches) == NOTED and 0 not in maps.stretches and NOTED + 4 in maps.stretches
    maps.note(5, np.array([5, 6]))  # noted again: the newest, kept past the next note
    maps.note(NOTED + 9, np.array([NOTED + 9, 1]))
    assert 5 in maps.stretches and 6 not in maps.stretches


def test_other_options_build_their_plan_on_the_copy(ordered: Path, tmp_path: Path) -> None:
    plan = load_plan(Split(ordered, "train"), params(seed=9), tmp_path)
    assert isinstance(plan, BatchPlan) and plan.built


def test_a_changed_stored_plan_is_refused_naming_the_file(ordered: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ordered, copy)
    rows = copy / "train.rows"
    raw = bytearray(rows.read_bytes())
    raw[-12] ^= 1  # the plan's last batch offsets
    rows.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"train\.rows: row order checksum: chunk .* make the copy again"):
        load_plan(Split(copy, "train"), params(), None)  # the offsets are read whole when the plan is opened


def test_stored_plan_offsets_that_decrease_are_refused_naming_the_file(tmp_path: Path) -> None:
    order = np.arange(10)
    sections = [inverse_order(order).astype("<i4"), order.astype("<i4"), np.array([0, 6, 4, 10], dtype="<i8")]
    path = write_side_file(tmp_path / "train.rows", ORDER_FORMAT, (10, 4, 3, 10), sections)  # checksums sound
    with pytest.raises(FormatError, match=r"train\.rows: plan offsets: .*batch 1 ends before it starts"):
        StoredPlan(open_row_order(path, 10), "key", 10)


def test_a_pickled_stored_plan_refuses_a_replaced_file(ordered: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ordered, copy)
    plan = load_plan(Split(copy, "train"), params(), None)
    pickled = pickle.dumps(plan)
    replacement = copy / "new.rows"
    shutil.copyfile(copy / "train.rows", replacement)
    replacement.replace(copy / "train.rows")  # the same bytes, another file
    with pytest.raises(FormatError, match=r"train\.rows: row order file replaced since the plan was opened"):
        pickle.loads(pickled)


def test_a_sampler_state_moves_between_the_stored_and_the_built_plan(
    ordered: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = arrowmt.open_dataset(ordered, "train")

    def sampler() -> arrowmt.TokenBatchSampler:
        return arrowmt.TokenBatchSampler(dataset, max_tokens=MAX_TOKENS, seed=3, num_replicas=2, rank=1)

    stored = sampler()
    assert isinstance(stored.plan, StoredPlan)
    walk = iter(stored)
    [next(walk) for _ in range(4)]
    state, rest = stored.state_dict(), list(walk)
    assert rest
    monkeypatch.setattr(arrowmt.stored, "stored_plan", lambda *args: None)
    built = sampler()
    assert isinstance(built.plan, BatchPlan) and built.plan.key == stored.plan.key
    built.load_state_dict(state)
    assert list(built) == rest


def test_the_ordered_split_checks_its_offsets_in_small_pieces(ordered: Path) -> None:
    assert set(SplitFile(ordered / "train.arrow").offset_checks.piece_rows.tolist()) == {STRETCH_PIECE_ROWS}
    assert set(SplitFile(ordered / "test.arrow").offset_checks.piece_rows.tolist()) == {PIECE_ROWS}


def test_read_ahead_names_the_stored_plan_pages_of_the_batches_to_come(ordered: Path) -> None:
    """A cold copy's read-ahead asks for the row order's pages holding the batches to come (it waited for each batch's
    page in the batch loop): the ranges are exactly the batches' indices."""
    plan = load_plan(Split(ordered, "train"), params(), None)
    assert isinstance(plan, StoredPlan)
    batches = np.array([0, 5, len(plan) - 1])
    (part,) = plan.word_ranges(batches)
    words = np.frombuffer(part.mapped, dtype=np.int32)
    named = [words[start : start + count].tolist() for start, count in zip(part.starts, part.lengths, strict=True)]
    assert named == [plan.batch(int(b)).tolist() for b in batches]
    sampler = arrowmt.TokenBatchSampler(arrowmt.open_dataset(ordered, "train"), max_tokens=MAX_TOKENS, seed=3)
    next(iter(sampler))
    assert sampler.prefetcher is not None and sampler.prefetcher.plan_ranges is not None


def test_a_pass_left_midway_stops_its_read_ahead(ordered: Path) -> None:
    sampler = arrowmt.TokenBatchSampler(arrowmt.open_dataset(ordered, "train"), max_tokens=MAX_TOKENS, seed=3)
    walk = iter(sampler)
    next(walk)
    assert sampler.prefetcher is not None and not sampler.prefetcher.closed
    walk.close()
    assert sampler.prefetcher.closed


def test_verify_checks_the_row_order_file_whole(ordered: Path, tmp_path: Path) -> None:
    sound = verify_dataset(ordered, progress=False)
    assert sound.ok and sound.side_files >= 1
    copy = tmp_path / "copy"
    shutil.copytree(ordered, copy)
    maps = open_row_order(copy / "train.rows", len(Split(ordered, "train")))
    order, offsets = maps.order.whole().copy(), maps.offsets.whole().copy()
    order[0] = order[1]  # checksums written anew: only the contents check sees it
    write_row_order(copy / "train.rows", order, offsets)
    problems = verify_dataset(copy, progress=False).problems
    assert any("train.rows: row order: expected `order` a permutation" in p for p in problems), problems


def test_resume_on_the_ordered_copy(ordered: Path) -> None:
    dataset = arrowmt.open_dataset(ordered, "train")
    check_resume(lambda: arrowmt.TokenBatchSampler(dataset, max_tokens=MAX_TOKENS, seed=3), consume=5)


def test_other_splits_are_copied_as_they_are(corpus: Path, ordered: Path) -> None:
    a, b = arrowmt.open_split(corpus, "test"), arrowmt.open_split(ordered, "test")
    assert (ordered / "test.arrow").read_bytes() == (corpus / "test.arrow").read_bytes() or all(
        np.array_equal(a.row_array("target", i), b.row_array("target", i)) for i in range(len(a))
    )


def test_readers_of_rows_as_stored_refuse_the_copy(ordered: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="stores rows in plan order"):
        arrowmt.export_fairseq(ordered, tmp_path / "back", progress=False)
    with pytest.raises(InvalidParameterError, match="stores rows in plan order"):
        arrowmt.order_copy(ordered, tmp_path / "again", progress=False)


def test_an_unknown_batching_option_is_refused_by_name_before_anything_is_written(corpus: Path, tmp_path: Path) -> None:
    """The batching options are keywords into one spec: a misspelt one is named with the options taken."""
    with pytest.raises(InvalidParameterError, match=r"order_copy: unexpected option 'max_token' \(expected any of"):
        arrowmt.order_copy(corpus, tmp_path / "typo", max_token=700, progress=False)
    with pytest.raises(InvalidParameterError, match=r"order_blocks: unexpected option 'max_source_positions'"):
        arrowmt.order_blocks(corpus, tmp_path / "typo", max_source_positions=8, progress=False)
    with pytest.raises(InvalidParameterError, match="max_tokens"):  # the spec checks each value, as the samplers do
        arrowmt.order_copy(corpus, tmp_path / "typo", max_tokens=0, progress=False)
    assert not (tmp_path / "typo").exists()


def test_order_command(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    command = [sys.executable, "-m", "arrowmt", "order", str(corpus), str(out), "--max-tokens", "700", "--seed", "3"]
    done = subprocess.run([*command, "--quiet"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert batches(out) == batches(corpus)
    verify = subprocess.run([sys.executable, "-m", "arrowmt", "verify", str(out)], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stderr


def test_a_stored_batch_is_located_as_its_stretch(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each batch of the stored plan, located as one stretch of stored rows, covers exactly its rows' tokens in each
    column: one range per record batch it touches (record batches of 100 rows here, so many stretches cross one;
    a range over the boundary would cover the other column's tokens between them)."""
    monkeypatch.setitem(write_split.__kwdefaults__, "rows_per_batch", 100)
    arrowmt.order_copy(corpus, tmp_path / "small", max_tokens=MAX_TOKENS, seed=3, progress=False)
    copy = arrowmt.open_dataset(tmp_path / "small", "train")
    assert copy.shards[0].rows_per_batch == 100
    plan = load_plan(copy, params(), tmp_path)
    assert isinstance(plan, StoredPlan)
    parts = copy.stretch_ranges(*plan.stretches(np.arange(len(plan))))
    assert parts is not None and len(parts) == len(copy.columns)
    crossing = 0
    starts, ends = plan.stretches(np.arange(len(plan)))
    for (part, owner), column in zip(parts, copy.columns, strict=True):
        for b, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            mine = owner == b
            got = sorted(zip(part.starts[mine].tolist(), (part.starts + part.lengths)[mine].tolist(), strict=True))
            assert got == merged(*copy.shards[0].spans(column, np.arange(start, end))), (column, b)
            crossing += int(mine.sum() > 1)
    assert crossing > 5
    empty, owner = copy.stretch_ranges(np.array([3, len(copy)]), np.array([3, len(copy)]))[0]
    assert empty.lengths.tolist() == [0, 0] and owner.tolist() == [0, 1]


def merged(starts: np.ndarray, lengths: np.ndarray) -> list[tuple[int, int]]:
    """Word ranges ``[starts[i], starts[i] + lengths[i])`` merged where one ends where the next begins."""
    out: list[list[int]] = []
    for start, length in sorted(zip(starts.tolist(), lengths.tolist(), strict=True)):
        if out and out[-1][1] == start:
            out[-1][1] = start + length
        else:
            out.append([start, start + length])
    return [(a, b) for a, b in out]


def test_a_worker_refuses_a_row_order_changed_since_the_dataset_was_opened(ordered: Path, tmp_path: Path) -> None:
    """A DataLoader worker reopens the copy by path: a row-order map rewritten meanwhile (the split files untouched)
    would place its batches by other rows, so unpickling refuses it as it refuses changed split files."""
    copy = tmp_path / "ordered"
    shutil.copytree(ordered, copy)
    blob = pickle.dumps(arrowmt.open_dataset(copy, "train"))
    assert len(pickle.loads(blob)) == len(arrowmt.open_dataset(copy, "train"))  # unchanged: reopened
    rows = copy / "train.rows"
    st = rows.stat()
    os.utime(rows, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(FormatError, match="split 'train' files changed since the dataset was opened") as info:
        pickle.loads(blob)
    assert str(copy) in str(info.value)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_copy_is_made_without_writing_into_its_corpus(tmp_path: Path) -> None:
    """The plan (and an LM copy's block table) is built beside OUT and removed after, or in ``cache_dir``: the
    corpus is only read (a read-only corpus can be copied)."""
    corpus = tmp_path / "corpus"
    arrowmt.convert_text(str(MULTI30K / "val"), corpus, src_lang="de", tgt_lang="en", progress=False)
    before = _listing(corpus)
    arrowmt.order_copy(corpus, tmp_path / "copy", max_tokens=MAX_TOKENS, seed=3, progress=False)
    mono = tmp_path / "mono"
    arrowmt.convert_text(str(MULTI30K / "val"), mono, lang="en", progress=False)
    mono_before = _listing(mono)
    arrowmt.order_blocks(mono, tmp_path / "lm", tokens_per_sample=64, max_tokens=512, progress=False)
    assert _listing(corpus) == before and _listing(mono) == mono_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "corpus", "lm", "mono"]  # nothing left beside
    arrowmt.order_copy(corpus, tmp_path / "kept", max_tokens=MAX_TOKENS, seed=3, cache_dir=tmp_path / "plans")
    assert len(list((tmp_path / "plans").glob("plan-*.bin"))) == 1 and _listing(corpus) == before


@pytest.mark.parametrize("where", ["itself", "inside", "around"])
def test_a_copy_over_its_own_corpus_is_refused(tmp_path: Path, where: str) -> None:
    """``arrowmt order C C --overwrite`` would replace the original with its copy: refused, nothing touched."""
    corpus = tmp_path / "corpus"
    arrowmt.convert_text(str(MULTI30K / "val"), corpus, src_lang="de", tgt_lang="en", progress=False)
    before = {name: (corpus / name).read_bytes() for name in os.listdir(corpus) if (corpus / name).is_file()}
    out = {"itself": corpus, "inside": corpus / "copy", "around": tmp_path}[where]
    with pytest.raises(InvalidParameterError, match=r"out: expected a folder outside the corpus"):
        arrowmt.order_copy(corpus, out, max_tokens=MAX_TOKENS, overwrite=True, progress=False)
    done = subprocess.run(
        [sys.executable, "-m", "arrowmt", "order", str(corpus), str(out), "--overwrite", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "out: expected a folder outside the corpus" in done.stderr
    assert {name: (corpus / name).read_bytes() for name in before} == before


def test_a_copy_of_a_view_or_a_mixture_is_refused(tmp_path: Path) -> None:
    """A copy is made of a whole split, named by its folder: a view object (or a mixture) is refused by name."""
    corpus = tmp_path / "corpus"
    arrowmt.convert_text(str(MULTI30K / "val"), corpus, src_lang="de", tgt_lang="en", progress=False)
    arrowmt.build_view(corpus, tmp_path / "short.view", max_len=8)
    view = arrowmt.open_view_dataset(tmp_path / "short.view", corpus)
    with pytest.raises(InvalidParameterError, match=r"corpus: expected the path of an arrowmt folder .*ArrowMTView"):
        arrowmt.order_copy(view, tmp_path / "copy", max_tokens=MAX_TOKENS, progress=False)
    assert not (tmp_path / "copy").exists()


def edited_copy(ordered: Path, tmp_path: Path, edit: Callable[[dict], None]) -> Path:
    """A copy of ``ordered`` whose manifest ``edit`` changed (the split files untouched)."""
    copy = tmp_path / "edited"
    shutil.copytree(ordered, copy)
    manifest = json.loads((copy / MANIFEST_NAME).read_text())
    edit(manifest)
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    return copy


def test_the_copy_records_the_plan_it_is_stored_by_in_its_files(ordered: Path, corpus: Path) -> None:
    assert Split(ordered, "train").shards[0].metadata.stored_order == order_marker(
        "train", json.loads((ordered / MANIFEST_NAME).read_text())["provenance"]["ordered_by"]
    )
    assert Split(ordered, "test").shards[0].metadata.stored_order is None  # other splits are copied as they are
    assert b"stored_order" not in (corpus / "train.arrow").read_bytes()  # plain files are written as before


def test_an_edited_plan_in_the_copys_manifest_is_refused(ordered: Path, tmp_path: Path) -> None:
    """Issue 36: the recorded seed edited to 4 gave a sampler with seed 4 the plan of seed 3, and verify said OK."""
    copy = edited_copy(ordered, tmp_path, lambda m: m["provenance"]["ordered_by"]["fields"].update(seed=4))
    with pytest.raises(FormatError, match=r"provenance 'ordered_by' is not the plan it was stored by \(edited\)"):
        arrowmt.TokenBatchSampler(arrowmt.open_dataset(copy, "train"), max_tokens=MAX_TOKENS, seed=4)
    problems = verify_dataset(copy, progress=False).problems
    assert any("'ordered_by' is not the plan it was stored by" in p and "make the copy again" in p for p in problems)


def test_a_copy_whose_row_order_entry_was_removed_is_refused(ordered: Path, tmp_path: Path) -> None:
    """Issue 36: without its row order entry the copy read as a plain corpus (other rows), and verify said OK."""
    copy = edited_copy(ordered, tmp_path, lambda m: m["provenance"].pop("row_order"))
    with pytest.raises(FormatError, match=r"stored in plan order \(its files record 'train.rows'\), but the manifest"):
        arrowmt.open_dataset(copy, "train")
    problems = verify_dataset(copy, progress=False).problems
    assert any("provenance 'row_order' names None for it: the manifest was edited" in p for p in problems), problems
    assert len(arrowmt.open_dataset(copy, "test")) == 1000  # the splits stored as they were still open
