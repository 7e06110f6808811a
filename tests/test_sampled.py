"""Sampled segmentations (issues 39, 48): word lattices built from the bundled Multi30k sample with a sentencepiece
model trained on it, every row drawn afresh each epoch; checked against sentencepiece itself (decoding, the
model's refusals), for integrity (edited records, damaged files and caches), and through every reader. The laws
themselves are tested statistically in ``tests/test_sampled_law.py``."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from arrowmt import (
    ArrowMTSampledDataset,
    FairseqCollater,
    FormatError,
    InputDataError,
    InvalidParameterError,
    SampledSplit,
    SpecialIds,
    TextConversion,
    TokenBatchSampler,
    add_sampled_segmentations,
    convert_text,
    convert_with_options,
    open_dataset,
    summarize,
    verify_dataset,
)
from arrowmt.format import Dictionary
from arrowmt.plans import ShiftedPlan
from arrowmt.reading import Ragged
from arrowmt.testing import (
    TIE_TOLERANCE,
    Segmenter,
    check_deterministic,
    format_summary,
    groups_by,
    main,
    row_sums,
    sampled_folder,
)
from tests.conftest import MULTI30K, gz_lines, val_sentencepiece
from tests.state_helpers import SamplerLoader, check_resume

spm = pytest.importorskip("sentencepiece")
EPOCHS = 4


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A unigram and a BPE model trained on the sample's validation text (both languages)."""
    folder = tmp_path_factory.mktemp("spm")
    models = {kind: val_sentencepiece(folder, 600, kind, model_type=kind) for kind in ("unigram", "bpe", "char")}
    return {**models, "across": val_sentencepiece(folder, 600, "across", split_by_whitespace=False)}


def converted(out: Path, model: Path, **options: object) -> Path:
    convert_text(str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", testpref=str(MULTI30K / "test"),
                 spm_model=str(model), progress=False, **options)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path]) -> Path:
    out = converted(tmp_path_factory.mktemp("c") / "c", models["unigram"])
    add_sampled_segmentations(out, models["unigram"], alpha=0.1, seed=3, progress=False)
    return out


def text_of(pieces: list[str]) -> str:
    return "".join(pieces).replace("\u2581", " ").strip()


def every_form(sampled: SampledSplit, column: str, epochs: int = EPOCHS) -> list[list[list[int]]]:
    """Each row as epochs 1 .. ``epochs`` draw it, as piece ids."""
    rows = np.arange(len(sampled), dtype=np.int64)
    out: list[list[list[int]]] = [[] for _ in rows]
    for epoch in range(1, epochs + 1):
        spans = sampled.spans(column, rows, epoch)
        for r in rows:
            out[r].append(spans.row(int(r)).tolist())
    return out


def test_every_drawn_row_decodes_to_its_text_and_changes_from_epoch_to_epoch(corpus: Path) -> None:
    sampled = SampledSplit(corpus, "train")
    assert (sampled.seed, sampled.alpha, sampled.info.sampler, len(sampled)) == (3, 0.1, "lattice", 1014)
    for column in ("source", "target"):
        pieces, base = sampled.dictionary(column), sampled.corpus.dictionary(column)
        assert pieces.symbols[: len(base)] == base.symbols  # the corpus's ids stay; new pieces come after
        forms = every_form(sampled, column)
        for r, row_forms in enumerate(forms):
            text = text_of([base.symbols[i] for i in sampled.corpus.row_array(column, r)[:-1]])
            for form in row_forms:
                assert form[-1] == pieces.eos and text_of([pieces.symbols[i] for i in form[:-1]]) == text
        several = np.mean([len({tuple(f) for f in row_forms}) > 1 for row_forms in forms])
        assert several > 0.9, several
        assert sampled.max_length(column) >= max(len(f) for row_forms in forms for f in row_forms)
        lengths = sampled.lengths(column, np.arange(5), 2)
        assert lengths.tolist() == [len(forms[r][1]) for r in range(5)]
        again = sampled.spans(column, np.array([4, 0]), 2)  # a row's draw does not depend on the rows beside it
        assert again.row(0).tolist() == forms[4][1] and again.row(1).tolist() == forms[0][1]
    assert "drawn afresh each epoch" in repr(sampled)


def test_several_pairs_share_one_table_so_a_language_has_one_law_in_every_pair(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    """A folder of several pairs (one dictionary for every language, ``convert text --lang-pairs``) stores one table
    of words and lattices: every column of every pair draws from the same laws, each draw decodes to the row's text,
    and the samples' dictionary is one file per language, as fairseq loads them."""
    out = tmp_path / "pairs"
    convert_text(str(MULTI30K / "val"), out, lang_pairs="de-en,en-de", testpref=str(MULTI30K / "test"),
                 spm_model=str(models["unigram"]), spm_sampling=True, progress=False)  # fmt: skip
    de_en, en_de = SampledSplit(out, "train.de-en"), SampledSplit(out, "train.en-de")
    forms = sampled_folder(out) / "forms"
    assert (forms / "lattice.source.bin").read_bytes()[128:] == (forms / "lattice.target.bin").read_bytes()[128:]
    pieces, base = de_en.dictionary("source"), de_en.corpus.dictionary("source")
    assert de_en.dictionary("target").symbols == pieces.symbols == en_de.dictionary("source").symbols
    for sampled, column in ((de_en, "source"), (en_de, "target")):  # German in both
        drawn = every_form(sampled, column, 2)
        for r in range(0, len(sampled), 97):
            text = text_of([base.symbols[i] for i in sampled.corpus.row_array(column, r)[:-1]])
            assert all(text_of([pieces.symbols[i] for i in form[:-1]]) == text for form in drawn[r])
    assert (forms / "dict.de.txt").read_bytes() == (forms / "dict.en.txt").read_bytes() == (
        forms / "dict.txt").read_bytes()  # fmt: skip
    assert open_dataset(out, "test.en-de", segmentation="sampled").rows == len(SampledSplit(out, "test.en-de"))
    assert verify_dataset(out, progress=False).ok


def test_a_joined_dictionary_stays_one_in_the_samples(tmp_path: Path, models: dict[str, Path]) -> None:
    """A corpus with one dictionary for both sides (``--joined-dictionary``, as a model sharing its embeddings
    needs) has one samples' dictionary too: the corpus's, extended by the pieces either side's lattices use."""
    out = tmp_path / "joined"
    convert_text(str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", joined_dictionary=True, nwordssrc=300,
                 spm_model=str(models["unigram"]), spm_sampling=True, progress=False)  # fmt: skip
    sampled = SampledSplit(out, "train")
    pieces, base = sampled.dictionary("source"), sampled.corpus.dictionary("source")
    assert pieces.symbols == sampled.dictionary("target").symbols and len(pieces) > len(base)
    for column in ("source", "target"):
        drawn = sampled.spans(column, np.arange(50), 1)
        for r in range(50):
            text = text_of([base.symbols[i] for i in sampled.corpus.row_array(column, r)[:-1]])
            assert text_of([pieces.symbols[i] for i in drawn.row(r)[:-1]]) == text


def test_draws_depend_on_seed_epoch_column_row_and_place_only() -> None:
    """The counter-based bits: a pure function of (seed, epoch, column, row, word place, step); exact values."""
    from arrowmt.segments import epoch_key, mix64, occurrence_keys, step_bits

    assert int(mix64(np.array([1], dtype=np.uint64), np.uint64(0))[0]) == 0xE220A8397B1DCDAF  # splitmix64's first
    key = epoch_key(3, 1, "source")
    assert key == epoch_key(3, 1, "source") != epoch_key(3, 2, "source") != epoch_key(3, 1, "target")
    keys = occurrence_keys(key, np.array([5, 9]), np.array([2, 1]))
    assert np.array_equal(keys[:2], occurrence_keys(key, np.array([5]), np.array([2])))  # alone or in a batch
    assert np.array_equal(keys[2:], occurrence_keys(key, np.array([9]), np.array([1])))
    assert len(set(keys.tolist())) == 3
    bits = step_bits(occurrence_keys(key, np.arange(100_000), np.ones(100_000, dtype=np.int64)), 0)
    assert bits.max() < 2**32 and abs(bits.mean() / 2**31 - 1) < 0.01
    assert not np.array_equal(bits, step_bits(occurrence_keys(key, np.arange(100_000), np.ones(100_000, int)), 1))


def test_a_lattice_law_exact_values() -> None:
    """Word ``▁ab`` with pieces ``▁a`` (-1), ``b`` (-2), ``▁ab`` (-2.5): paths ``▁a b`` (-3) and ``▁ab`` (-2.5); at
    alpha 1 the end node's incoming edges share ``1 / (1 + e^-0.5)`` and the rest; bits below the share draw
    ``▁ab``."""
    from arrowmt.segments import Law
    from arrowmt.testing import LatticeTables

    pieces = np.array([10, 11, 12])  # ▁a, ▁ab, b: by end node, then begin
    tables = LatticeTables.of(pieces, np.array([0, 3]), np.array([0, 0, 1]), np.array([1, 2, 2]),
                        np.array([-1.0, -2.5, -2.0]), Path("x"))  # fmt: skip
    assert (tables.start.tolist(), tables.final.tolist(), tables.longest.tolist()) == ([0], [2], [2])
    law = Law.of(tables, 1.0)
    share = 1 / (1 + np.exp(-0.5))
    assert law.threshold.tolist() == [2**32, round(share * 2**32), 2**32]  # node 1: ▁a; node 2: ▁ab, then b
    assert (law.piece.tolist(), law.begin.tolist(), law.first.tolist()) == ([10, 11, 12], [0, 0, 1], [0, 0, 1])
    keys = np.arange(2000, dtype=np.uint64)
    drawn = law.walk(np.zeros(2000, dtype=np.int64), keys)
    one = drawn.lengths() == 1
    assert drawn.values[drawn.offsets[:-1][one]].tolist() == [11] * int(one.sum())
    assert all(drawn.row(k).tolist() == [10, 12] for k in np.flatnonzero(~one)[:20])
    assert abs(one.mean() - share) < 0.04


def test_a_fork_waits_for_numba_to_finish_compiling_so_the_child_never_inherits_its_lock_held() -> None:
    """A thread compiling (or loading) the kernel holds numba's compiler lock: a DataLoader worker forked then would
    hang at its first draw. With the kernel imported, a fork waits for the lock, and the child can take it."""
    pytest.importorskip("numba")
    import signal
    import threading
    import time

    from numba.core.compiler_lock import global_compiler_lock

    from arrowmt.segments import _law

    assert _law.compiled() is not None
    held = threading.Event()

    def compile_for_a_while() -> None:
        with global_compiler_lock:
            held.set()
            time.sleep(0.5)

    thread = threading.Thread(target=compile_for_a_while)
    thread.start()
    held.wait()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the lock is free at once (else the alarm ends it)
        signal.alarm(5)
        global_compiler_lock.acquire()
        os._exit(0)
    waited = time.perf_counter() - started
    thread.join()
    assert os.waitpid(pid, 0)[1] == 0
    assert waited > 0.3  # the fork waited for the compile to end


def test_lattices_a_draw_cannot_walk_are_refused_with_the_word_or_edge() -> None:
    """A word whose end no path of edges reaches, or an edge whose score is not finite, would send a draw's walk
    off its word (the compiled one past its buffer): refused when the tables are made, naming the file."""
    from arrowmt.testing import LatticeTables

    pieces, first = np.array([10, 11, 12]), np.array([0, 1, 3])  # word 0: one edge; word 1: 0->1 missing
    with pytest.raises(FormatError, match=r"x: word 1: no path of edges from its start to its end; rebuild"):
        LatticeTables.of(pieces, first, np.array([0, 1, 1]), np.array([1, 2, 3]), np.zeros(3), Path("x"))
    with pytest.raises(FormatError, match=r"x: edge 2: expected a finite score, got -inf; rebuild"):
        LatticeTables.of(pieces, np.array([0, 3]), np.array([0, 0, 1]), np.array([1, 2, 2]),
                         np.array([-1.0, -2.5, -np.inf]), Path("x"))  # fmt: skip


def test_the_compiled_draw_gives_the_vectorized_draws_bytes(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where numba is installed rows are drawn by the compiled kernel, a block's rows cut among threads; the
    vectorized walk (where it is not) gives the same pieces and lengths, every row, both columns, several epochs, in
    any row order and any cut."""
    pytest.importorskip("numba")
    from arrowmt.segments import _law

    assert _law.compiled() is not None
    monkeypatch.setattr(_law, "ROWS_A_THREAD", 100)  # the sample's 1,014 rows cut among the CPUs
    monkeypatch.setattr(_law, "KERNEL_OCCURRENCES", 0)
    compiled, vectorized = SampledSplit(corpus, "train"), SampledSplit(corpus, "train")
    rows = np.random.default_rng(0).permutation(len(compiled))
    drawn = {(col, e): compiled.spans(col, rows, e) for col in compiled.columns for e in range(3)}
    lengths = {(col, e): compiled.lengths(col, rows[:100], e) for col in compiled.columns for e in range(3)}
    monkeypatch.setattr(_law, "compiled", lambda: None)
    for (col, epoch), spans in drawn.items():
        again = vectorized.spans(col, rows, epoch)
        assert np.array_equal(spans.lengths, again.lengths) and np.array_equal(spans.words, again.words)
        assert np.array_equal(lengths[col, epoch], again.lengths[:100])
        assert spans.words.dtype == again.words.dtype == np.int32
    assert not np.array_equal(drawn["source", 0].words[:1000], drawn["source", 1].words[:1000])


def test_the_same_seed_gives_the_same_lattices_and_draws_in_any_process_and_bpe_dropout_works(
    tmp_path: Path, corpus: Path, models: dict[str, Path]
) -> None:
    again = converted(tmp_path / "again", models["unigram"])
    build = f"import arrowmt; arrowmt.add_sampled_segmentations({str(again)!r}, {str(models['unigram'])!r}, "
    build += "alpha=0.1, seed=3, progress=False)"
    read = f"import arrowmt, numpy; s = arrowmt.SampledSplit({str(again)!r}, 'train'); "
    read += "print(s.spans('target', numpy.arange(1014), 7).words.tolist())"
    subprocess.run([sys.executable, "-c", build], check=True, cwd=tmp_path)  # another process: the same bytes
    for name in ("words/train.arrow", "forms/forms.arrow", "forms/dict.de.txt", "forms/lattice.source.bin"):
        assert (sampled_folder(again) / name).read_bytes() == (sampled_folder(corpus) / name).read_bytes(), name
    there = subprocess.run([sys.executable, "-c", read], check=True, cwd=tmp_path, capture_output=True, text=True)
    here = SampledSplit(corpus, "train").spans("target", np.arange(1014), 7).words.tolist()
    assert json.loads(there.stdout) == here  # the same draws in another process
    assert SampledSplit(corpus, "train", seed=4).spans("target", np.arange(1014), 7).words.tolist() != here
    bpe = converted(tmp_path / "bpe", models["bpe"])
    add_sampled_segmentations(bpe, models["bpe"], alpha=0.1, seed=1, pool=64, progress=False)
    sampled = SampledSplit(bpe, "test")
    assert (sampled.info.sampler, sampled.info.pool) == ("pool", 64)
    base = sampled.corpus.dictionary("target")
    pieces = sampled.dictionary("target")
    forms = every_form(sampled, "target")
    for r, row_forms in enumerate(forms):
        text = text_of([base.symbols[i] for i in sampled.corpus.row_array("target", r)[:-1]])
        assert all(text_of([pieces.symbols[i] for i in form[:-1]]) == text for form in row_forms)
    assert np.mean([len({tuple(f) for f in row_forms}) > 1 for row_forms in forms]) > 0.5
    with pytest.raises(InvalidParameterError, match=r"alpha: .* pools of dropout draws made with alpha 0\.1"):
        SampledSplit(bpe, "test", alpha=0.3)


def test_alpha_is_a_reading_option(corpus: Path) -> None:
    """The samples record alpha 0.1; a reader may draw with another: a larger alpha keeps closer to the best
    segmentation (fewer pieces), without converting again."""
    rows = np.arange(1014)
    pieces = {a: SampledSplit(corpus, "train", alpha=a).lengths("source", rows, 1).sum() for a in (0.1, 0.5, 5.0)}
    fixed = SampledSplit(corpus, "train").corpus.lengths("source", rows, np.int64).sum()
    assert pieces[0.1] > pieces[0.5] > pieces[5.0] >= fixed
    ds = open_dataset(corpus, "train", segmentation="sampled", alpha=0.5)
    assert ds.alpha == 0.5 and ds.lengths("source", rows + 1014).sum() == pieces[0.5]
    with pytest.raises(InvalidParameterError, match="alpha: expected with segmentation='sampled'"):
        open_dataset(corpus, "train", alpha=0.5)
    with pytest.raises(InvalidParameterError, match="alpha: expected a number > 0"):
        SampledSplit(corpus, "train", alpha=0)


def test_words_with_unk_keep_their_pieces(tmp_path: Path, models: dict[str, Path]) -> None:
    out = converted(tmp_path / "small", models["unigram"], nwordssrc=200)  # the source dictionary drops pieces
    add_sampled_segmentations(out, models["unigram"], progress=False)
    sampled = SampledSplit(out, "train")
    base = sampled.corpus.dictionary("source")
    unk_rows = [r for r in range(len(sampled)) if base.unk in sampled.corpus.row_array("source", r)]
    assert unk_rows
    for r in unk_rows[:50]:
        for epoch in range(EPOCHS):
            form = sampled.spans("source", np.array([r]), epoch).row(0).tolist()
            assert form.count(base.unk) == sampled.corpus.row_array("source", r).tolist().count(base.unk)


def test_refusals_name_what_is_wrong(tmp_path: Path, corpus: Path, models: dict[str, Path]) -> None:
    with pytest.raises(InputDataError, match="segments the word"):  # made with another model
        add_sampled_segmentations(corpus, models["bpe"], overwrite=True, progress=False)
    assert SampledSplit(corpus, "train").seed == 3  # the failed build left the samples there as they were
    with pytest.raises(InvalidParameterError, match="overwrite"):
        add_sampled_segmentations(corpus, models["unigram"], progress=False)
    bad_options = {"alpha": -1, "seed": -1, "pool": 0}
    for bad, match in (({name: value}, name) for name, value in bad_options.items()):
        with pytest.raises(InvalidParameterError, match=match):
            add_sampled_segmentations(corpus, models["unigram"], overwrite=True, progress=False, **bad)
    with pytest.raises(InputDataError, match="pieces across words"):  # a model that does not split at white space
        converted(tmp_path / "across", models["across"], spm_sampling=True)
    assert not (tmp_path / "across").exists()  # refused before anything was converted
    with pytest.raises(InvalidParameterError, match=r"cannot sample segmentations \(a char or word model"):
        converted(tmp_path / "char", models["char"], spm_sampling=True)
    assert not (tmp_path / "char").exists()
    with pytest.raises(InvalidParameterError, match="spm_alpha: expected with spm_sampling"):
        converted(tmp_path / "alpha", models["unigram"], spm_alpha=0.5)
    plain = converted(tmp_path / "plain", models["unigram"])
    with pytest.raises(InvalidParameterError, match="holds no sampled segmentations"):
        SampledSplit(plain, "train")
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    converted(copy, models["unigram"], overwrite=True, nwordstgt=100)  # converted again: other ids
    with pytest.raises(FormatError, match="converted again"):
        SampledSplit(copy, "train")
    shown = format_summary(copy, summarize(copy, progress=False))
    assert "converted again since; rebuild them)" in shown, shown


def test_samples_in_the_old_layout_are_refused_with_the_command_that_rebuilds_them(
    tmp_path: Path, corpus: Path
) -> None:
    copy = tmp_path / "old"
    shutil.copytree(corpus, copy)
    for inner in ("words", "forms"):
        manifest = sampled_folder(copy) / inner / "arrowmt.json"
        data = json.loads(manifest.read_text())
        data["provenance"]["segmentation"] = {"samples": 8, "alpha": 0.1, "nbest_size": 64, "seed": 1,
                                              "max_draws": 64, "sampler": "n-best", "corpus": {}}  # fmt: skip
        manifest.write_text(json.dumps(data))
    with pytest.raises(FormatError, match=r"old layout .*add_sampled_segmentations\(corpus, spm_model, overwrite"):
        SampledSplit(copy, "train")
    assert "sampled segmentations: unreadable: " in format_summary(copy, summarize(copy, progress=False))


def test_the_options_as_one_value_convert_the_corpus_then_store_its_samples(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    """``convert_with_options(TextConversion(..., spm_sampling=True))`` writes, byte for byte, what converting
    without samples and then ``add_sampled_segmentations`` write; a bad sampling option is refused when the value
    is made, before any other option is looked at."""
    value = TextConversion(
        prefixes={"train": str(MULTI30K / "val"), "test": str(MULTI30K / "test")}, src_lang="de", tgt_lang="en",
        spm_model=str(models["unigram"]), spm_sampling=True, spm_alpha=0.2, nwords=(-1, 300),
    )  # fmt: skip
    manifest = convert_with_options(value, tmp_path / "value", progress=False)
    assert manifest.splits() == ["test", "train"]
    apart = converted(tmp_path / "apart", models["unigram"], nwordstgt=300)
    add_sampled_segmentations(apart, models["unigram"], alpha=0.2, progress=False)
    files = sorted(p.relative_to(apart) for p in apart.rglob("*") if p.is_file())
    assert sorted(p.relative_to(tmp_path / "value") for p in (tmp_path / "value").rglob("*") if p.is_file()) == files
    assert any(f.parts[0] == "sampled" for f in files)
    assert all((apart / f).read_bytes() == (tmp_path / "value" / f).read_bytes() for f in files)
    for given in ({}, {"spm_model": ""}):
        with pytest.raises(InvalidParameterError, match="spm_sampling: expected with spm_model"):
            TextConversion(prefixes={"train": "x"}, lang_pairs=("de-en",), src_lang="de", spm_sampling=True, **given)


def test_the_command_line_converts_with_samples_and_info_shows_them(
    tmp_path: Path, models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    command = ["convert", "text", str(out), "--source-lang", "de", "--target-lang", "en", "--quiet"]
    command += ["--trainpref", str(MULTI30K / "val"), "--spm-model", str(models["bpe"])]
    assert main([*command, "--spm-samples", "3"]) == 2  # the old switch: refused, naming the new one
    assert "--spm-samples: sampled segmentations are drawn afresh every epoch" in capsys.readouterr().err
    assert not out.exists()
    assert main([*command, "--spm-sampling", "--spm-alpha", "0.2"]) == 0
    sampled = SampledSplit(out, "train")
    assert (sampled.info.sampler, sampled.info.alpha, sampled.info.seed) == ("pool", 0.2, 1)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "sampled segmentations: drawn afresh each epoch, alpha 0.2, seed 1, pool (a pool of 256" in shown, shown
    assert main(["info", "--json", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["segmentation"]["sampler"] == "pool"
    assert main(["convert", "text", str(tmp_path / "no"), "--lang", "de", "--trainpref", str(MULTI30K / "val"),
                 "--spm-sampling", "--quiet"]) == 2  # fmt: skip
    assert "--spm-sampling: expected with --spm-model" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()  # refused before converting
    char = ["convert", "text", str(tmp_path / "char"), "--source-lang", "de", "--target-lang", "en", "--quiet"]
    char += ["--trainpref", str(MULTI30K / "val"), "--spm-model", str(models["char"]), "--spm-sampling"]
    assert main(char) == 2 and "cannot sample segmentations" in capsys.readouterr().err
    assert not (tmp_path / "char").exists()


class _Pieces:
    """A unigram model's piece ids as sentencepiece's processor gives them (id 0: unknown)."""

    def __init__(self, pieces: list[str]) -> None:
        self.ids = {piece: i for i, piece in enumerate(pieces)}

    def piece_to_id(self, pieces: list[str]) -> list[int]:
        return [self.ids.get(piece, 0) for piece in pieces]

    def unk_id(self) -> int:
        return 0


@pytest.mark.parametrize(("other", "accepted"), [(-1.5 - TIE_TOLERANCE / 2, True), (-1.5 - 2 * TIE_TOLERANCE, False)])
def test_a_word_the_corpus_segments_otherwise_is_accepted_only_at_nearly_the_best_score(
    other: float, accepted: bool
) -> None:
    """A unigram model's sentence-wide search sums float32 scores: in a long sentence a word may take a segmentation
    of nearly its best score (seen on a 500,000-pair corpus: 7 pieces at -53.89758 where the word alone takes 6 at
    -53.89756). The corpus has ``▁a bc``; the model alone gives ``▁ab c`` (score -3.0)."""
    pieces = ["<unk>", "\u2581ab", "c", "\u2581a", "bc"]
    scores = np.array([0.0, -1.0, -2.0, -1.5, other])  # the corpus's ▁a bc: -1.5 + other
    corpus = Dictionary.from_counts(pa.array(pieces[1:], pa.large_string()), np.ones(4, dtype=np.int64), 1,
                                    padding_factor=0)  # fmt: skip
    own = Ragged.from_lengths(np.array([2]), corpus.encode_tokens(pa.array(["\u2581a", "bc"])).astype(np.int32))
    best = (np.array([0, 2]), pa.array(["\u2581ab", "c"], pa.large_string()))
    model = Segmenter(_Pieces(pieces), corpus, scores)
    words = pa.array(["\u2581abc"])
    if accepted:
        check_deterministic(best, model, own, np.array([0]), words)
    else:
        with pytest.raises(InputDataError, match="segments the word '\u2581abc' alone as"):
            check_deterministic(best, model, own, np.array([0]), words)


def test_lattices_over_sixteen_bit_nodes_are_found_exact_values() -> None:
    """A BPE word's pool of many long forms can need more nodes than a ``uint16`` counts: such words are found (and
    keep their corpus pieces) instead of wrapping."""
    from arrowmt.testing import Edges, too_many_nodes

    edges = Edges(np.array([0, 2, 2, 3]), pa.array(["a", "b", "c"]), np.array([0, 1, 0]), np.array([1, 70_000, 5]),
                  np.zeros(3, dtype=np.float32))  # fmt: skip
    assert too_many_nodes(edges).tolist() == [True, False, False]


def test_unigram_lattices_hold_exactly_every_piece_found_in_each_word(tmp_path: Path) -> None:
    """Every substring of every word of Multi30k val that is an ordinary piece of the model is an edge of that word's
    lattice, and nothing else is (a brute-force enumeration of the substrings, against the vectorized search that
    looks only at positions still beginning some piece)."""
    spm = pytest.importorskip("sentencepiece")
    from arrowmt.testing import unigram_edges

    processor = spm.SentencePieceProcessor(model_file=str(val_sentencepiece(tmp_path, 600)))
    text = " ".join(line for name in ("val.de", "val.en") for line in gz_lines(MULTI30K / f"{name}.gz"))
    words = sorted({"\u2581" + word for word in text.split()})[:3000]
    edges, kept = unigram_edges(pa.array(words, pa.large_string()), processor)
    pieces = edges.pieces.to_pylist()
    ordinary = {processor.id_to_piece(i) for i in range(processor.get_piece_size())
                if not (processor.is_control(i) or processor.is_unknown(i) or processor.is_unused(i)
                        or processor.is_byte(i) or processor.get_score(i) == 0)}  # fmt: skip
    checked = 0
    for k, word in enumerate(words):
        if kept[k]:
            continue
        span = range(int(edges.first[k]), int(edges.first[k + 1]))
        found = {(int(edges.begin[e]), int(edges.end[e]), pieces[e]) for e in span}
        expected = {(i, j, word[i:j]) for i in range(len(word)) for j in range(i + 1, len(word) + 1)
                    if word[i:j] in ordinary}  # fmt: skip
        assert found == expected, word
        checked += 1
    assert checked > 2500


def test_row_sums_exact_values() -> None:
    assert row_sums(np.array([1, 2, 3, 4, 5]), np.array([2, 0, 3])).tolist() == [3, 0, 12]
    assert row_sums(np.array([True, False, True]), np.array([1, 2])).tolist() == [1, 1]
    assert row_sums(np.zeros(0), np.zeros(0, dtype=np.int64)).tolist() == []
    assert row_sums(np.array([0.25, 0.5, 2.0]), np.array([2, 1])).tolist() == [0.75, 2.0]


def collate_ids(batch: Any) -> list[int]:
    """Row ids and a checksum of the collated tokens (comparable with ==, picklable for workers)."""
    out = FairseqCollater(SpecialIds())(batch)
    return [*out["id"].tolist(), int(out["net_input"]["src_tokens"].sum()), int(out["target"].sum())]


def test_the_sampler_plans_each_epoch_from_its_draws(corpus: Path) -> None:
    ds = open_dataset(corpus, "train", segmentation="sampled")
    assert isinstance(ds, ArrowMTSampledDataset) and ds.rows == len(ds) == 1014 and ds.seed == 3  # the samples'
    sampled = SampledSplit(corpus, "train")
    sampler = TokenBatchSampler(ds, max_tokens=600, seed=5)
    seen = {}
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        batches = [np.asarray(b) for b in sampler]
        ids = np.concatenate(batches)
        assert (ids // 1014 == epoch).all()  # the epoch's indices: e * N + r
        rows = ids % 1014
        assert np.array_equal(np.sort(rows), np.arange(1014))  # every row once an epoch
        drawn = sampled.spans("source", rows, epoch)  # as the epoch draws it
        read = ds.column_spans("source", ids)
        assert all(np.array_equal(read.row(k), drawn.row(k)) for k in range(len(ids)))
        for batch in batches:  # fairseq's budget, exact for the pieces read
            assert len(batch) * int(ds.num_tokens(batch).max()) <= 600
        seen[epoch] = [len(b) for b in batches]
    assert seen[1] != seen[2]  # the batches follow the epoch's lengths
    mixed = [2 * 1014 + 5, 1014 + 5, 1014 + 6, 2 * 1014 + 9]  # indices of two epochs in one batch
    batch = ds.__getitems__(mixed)
    assert [batch[k]["source"].tolist() for k in range(4)] == [ds.row("source", i).tolist() for i in mixed]
    assert len({tuple(batch[k]["source"].tolist()) for k in range(4)}) == 4
    ds.wait_read_ahead()  # epoch 3's copy, written on a thread once epoch 2 was opened
    families = (corpus / ".arrowmt-cache").glob("sampled-*")
    copies = sorted(len([c for c in family.glob("epoch-*") if c.is_dir()]) for family in families)
    assert copies[-1] == 3  # the last two epochs, and the next one
    with pytest.raises(InvalidParameterError, match="segmentation"):
        open_dataset(corpus, "train", segmentation="dropout")


def test_a_damaged_or_missing_epoch_copy_is_written_again_and_reported(
    tmp_path: Path, corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An epoch copy is derived data: a byte flipped, a file truncated or the copy removed is found before a process
    first reads it, and the copy is written again (once, logged), never trusted nor failing for good."""
    fixed = open_dataset(corpus, "train")
    cache = tmp_path / "cache"

    def epoch_rows() -> list[list[int]]:
        ds = ArrowMTSampledDataset(fixed, cache_dir=cache, read_ahead=False)
        return [ds.row("target", 5 * 1014 + r).tolist() for r in range(0, 1014, 50)]

    sound = epoch_rows()
    [copy] = [c for c in cache.glob("sampled-*/epoch-*") if c.is_dir()]
    data = copy / "train.arrow"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one token id changed
    data.write_bytes(bytes(raw))
    with caplog.at_level("WARNING"):
        assert epoch_rows() == sound
    assert "rebuilding epoch copy" in caplog.text and "differs from its manifest" in caplog.text
    data.write_bytes(bytes(raw[:1000]))  # truncated
    assert epoch_rows() == sound
    shutil.rmtree(copy)
    assert epoch_rows() == sound
    (copy / "arrowmt.json").unlink()  # a copy cut short before its manifest
    assert epoch_rows() == sound


def test_every_rank_must_read_with_the_same_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks given different seeds (or alphas) would read some rows twice and others never: refused."""
    import torch.distributed as dist

    from arrowmt.training import _world

    monkeypatch.setattr(_world, "default_world", lambda: (2, 0))

    def gather(values: list[object], value: object) -> None:
        values[0], values[1] = value, {"seed": 9, "alpha": 0.1}

    monkeypatch.setattr(dist, "all_gather_object", gather)
    _world.same_on_every_rank({"seed": 9, "alpha": 0.1}, "x")  # alike: nothing said
    with pytest.raises(InvalidParameterError, match=r"seed: every rank must read .* rank 1 has|rank 1 \{"):
        _world.same_on_every_rank({"seed": 3, "alpha": 0.1}, "the sampled segmentations' seed and alpha")


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 under torch >= 2.10
def test_sampled_batches_resume_exactly_through_loaders_and_workers(corpus: Path) -> None:
    ds = open_dataset(corpus, "train", segmentation="sampled")

    def sampler() -> TokenBatchSampler:
        made = TokenBatchSampler(ds, max_tokens=700, seed=2)
        made.set_epoch(3)
        return made

    check_resume(sampler, consume=13)
    plain = check_resume(lambda: SamplerLoader(DataLoader(ds, batch_sampler=sampler(), collate_fn=collate_ids)), 7)
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def loader() -> Any:
        return stateful.StatefulDataLoader(ds, batch_sampler=sampler(), collate_fn=collate_ids, num_workers=2)

    assert check_resume(loader, consume=11, same_state=False) == plain  # workers read what the main process reads


def test_the_plain_example_trains_on_samples_and_resumes_exactly(tmp_path: Path, models: dict[str, Path]) -> None:
    """examples/train_plain.py --segmentation sampled: the model is sized by the extended dictionaries and the
    longest sampled row; stopped mid-epoch 2 and resumed, it ends with the weights of an uninterrupted run."""
    from tests.test_examples import STEP, parameters_sha256, run_example

    data = tmp_path / "data"
    convert_text(str(MULTI30K / "val"), data, src_lang="de", tgt_lang="en", validpref=str(MULTI30K / "val"),
                 testpref=str(MULTI30K / "test"), spm_model=str(models["unigram"]), spm_sampling=True,
                 progress=False)  # fmt: skip
    args = ("--data", str(data), "--max-tokens", "1024", "--dim", "32", "--bleu-sentences", "10", "--epochs", "2")
    args += ("--segmentation", "sampled", "--save", "ckpt.pt")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    straight = run_example(*args, cwd=tmp_path / "a")
    steps = STEP.findall(straight.out)
    assert {int(e) for _, e, *_ in steps} == {1, 2}
    middle = len(steps) - 3
    run_example(*args, "--stop-after", str(middle), cwd=tmp_path / "b")
    resumed = run_example(*args, "--resume", cwd=tmp_path / "b")
    assert f"resumed from ckpt.pt (epoch 2, step {middle})" in resumed.out
    assert parameters_sha256(resumed.out) == parameters_sha256(straight.out)
    ds = open_dataset(data, "train", segmentation="sampled")
    sizes = re.search(r"^1014 pairs, \d+ batches per epoch, \d+ params, (\d+) positions$", straight.out, re.M)
    assert sizes is not None and int(sizes.group(1)) >= 2 * max(ds.max_length(c) for c in ds.columns) + 2


def test_the_plain_example_decodes_pieces_only_samples_use(
    corpus: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model trained on samples may emit a piece the corpus's own dictionary lacks (seen in the experiment at
    alpha 0.5): the example decodes its test translations with the dictionaries it trained with."""
    import importlib.util

    from tests.test_examples import EXAMPLE

    spec = importlib.util.spec_from_file_location("train_plain", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, example)  # its dataclasses look their module up
    spec.loader.exec_module(example)
    ds = open_dataset(corpus, "train", segmentation="sampled")
    vocab = {column: ds.dictionary(column) for column in ds.columns}
    extra = len(open_dataset(corpus, "train").dictionary("target"))  # the first piece only samples use
    assert extra < len(vocab["target"])
    model = example.build_model(str(corpus), ds, 16)
    with torch.no_grad():
        model.project.bias[extra] = 100.0  # every step emits that piece
    args = example.parse_args(["--data", str(corpus), "--show", "1", "--bleu-sentences", "2"])
    example.report_test(model, str(corpus), args, vocab)
    assert vocab["target"].symbols[extra].replace("\u2581", "") in capsys.readouterr().out


def test_a_failed_rebuild_leaves_the_samples_and_an_edited_record_is_refused(
    tmp_path: Path, corpus: Path, models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import arrowmt.converters._sampled as building  # whole, to make the build fail while writing the lattices

    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(building, "_padded", full_disk)
        with pytest.raises(OSError, match="No space"):
            add_sampled_segmentations(copy, models["unigram"], seed=9, overwrite=True, progress=False)
    assert SampledSplit(copy, "train").info.seed == 3  # the samples built before, whole
    assert not list(copy.glob(".sampled.*"))  # nothing left beside them
    for field, value in (("seed", 4), ("alpha", 0.5), ("sentencepiece_sha256", "0" * 64)):
        for inner in ("words", "forms"):  # both manifests edited alike: only the lattice files' digest sees it
            manifest = sampled_folder(copy) / inner / "arrowmt.json"
            data = json.loads(manifest.read_text())
            data["provenance"]["segmentation"][field] = value
            manifest.write_text(json.dumps(data))
        with pytest.raises(FormatError, match=r"lattice.source.bin: .*segmentation record differs: edited"):
            SampledSplit(copy, "train")
        assert not verify_dataset(copy, progress=False).ok
        shutil.rmtree(sampled_folder(copy))
        shutil.copytree(sampled_folder(corpus), sampled_folder(copy))
    (sampled_folder(copy) / "forms" / "lattice.target.bin").unlink()
    with pytest.raises(FormatError, match=r"lattice.target.bin: no lattice file"):
        SampledSplit(copy, "train")


def test_verify_checks_the_samples_files_and_their_record(tmp_path: Path, corpus: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    report = verify_dataset(copy, progress=False)
    assert report.ok and (report.files, report.side_files) == (2, 5), report  # train, test; words, forms, lattices
    lattice = sampled_folder(copy) / "forms" / "lattice.source.bin"
    original = lattice.read_bytes()
    lattice.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # one edge's end node changed
    [problem] = verify_dataset(copy, progress=False).problems
    assert problem.startswith(f"{lattice}: lattice checksum: chunk ") and "rebuild them with" in problem, problem
    lattice.write_bytes(original)
    words = sampled_folder(copy) / "words" / "train.arrow"
    data = bytearray(words.read_bytes())
    data[-200] ^= 0xFF
    words.write_bytes(bytes(data))
    problems = verify_dataset(copy, progress=False).problems
    assert problems and all(str(words) in problem for problem in problems), problems
    data[-200] ^= 0xFF
    words.write_bytes(bytes(data))
    manifest = sampled_folder(copy) / "words" / "arrowmt.json"
    edited = json.loads(manifest.read_text())
    edited["provenance"]["segmentation"]["seed"] = 99  # the words' record alone: the two folders disagree
    manifest.write_text(json.dumps(edited))
    problems = verify_dataset(copy, progress=False).problems
    assert len(problems) == len(SampledSplit(corpus, "train").corpus.manifest.splits())  # each split, in its samples
    assert all("were made apart" in problem for problem in problems), problems
    assert main(["verify", "--quiet", str(copy)]) == 2


def test_sampled_datasets_pickle_and_read_the_same_in_spawned_workers(corpus: Path) -> None:
    """A worker started by spawn (macOS, Python 3.14's default) unpickles the dataset: the lattice files reopen."""
    ds = open_dataset(corpus, "train", segmentation="sampled")
    again = pickle.loads(pickle.dumps(ds))
    rows = np.arange(20) + 3 * ds.rows  # epoch 3
    pieces = [d.column_spans("target", rows).compact().words for d in (ds, again)]
    assert np.array_equal(*pieces)
    sampler = TokenBatchSampler(ds, max_tokens=2048, seed=2)
    sampler.set_epoch(3)
    collate = FairseqCollater(ds.special_ids)
    expected = [b["net_input"]["src_tokens"] for b in DataLoader(ds, batch_sampler=sampler, collate_fn=collate)]
    spawned = DataLoader(ds, batch_sampler=sampler, collate_fn=collate, num_workers=1, multiprocessing_context="spawn")
    got = [b["net_input"]["src_tokens"] for b in spawned]
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_seeds_keep_their_own_epoch_copies(corpus: Path) -> None:
    """Datasets of several seeds on one corpus, a few epochs apart, each keep reading (another seed's copies never
    displace theirs)."""
    fixed = open_dataset(corpus, "train")
    seeds = [ArrowMTSampledDataset(fixed, seed=seed, read_ahead=False) for seed in (1, 2, 3)]
    for epoch in range(1, 5):
        for ds in seeds:
            assert ds.row("source", epoch * 1014 + 7)[-1] == 2
    families = list((corpus / ".arrowmt-cache").glob("sampled-*"))
    assert len(families) >= 3 and all(len([c for c in f.glob("epoch-*") if c.is_dir()]) <= 3 for f in families)


class TwoBatches:
    """A plan of int32 indices, as a plan file of fewer than 2**31 rows stores them."""

    key = "two"

    def __len__(self) -> int:
        return 1

    def batch(self, b: int) -> np.ndarray:
        return np.array([0, 7], dtype=np.int32)


def test_an_epochs_ids_pass_two_to_the_31_as_int64() -> None:
    """The ids a plan shifts into a later epoch (``e * rows`` on) are int64, however the plan stores them."""
    plan = ShiftedPlan(TwoBatches(), 3 * 2**30)
    assert plan.batch(0).dtype == np.int64 and plan.batch(0).tolist() == [3 * 2**30, 3 * 2**30 + 7]
    assert plan.peek(0).tolist() == plan.batch(0).tolist()


def test_ids_group_by_epoch_exact_values() -> None:
    """Index ``e * rows + r`` is row ``r`` of epoch ``e``: one group for a planned batch, one an epoch otherwise, in
    increasing epochs with the ids' positions; none for no ids (no epoch's copy is opened for an empty batch)."""
    one = groups_by(np.array([13, 11, 10], dtype=np.int64), 5)
    assert [(k, w.tolist(), r.tolist()) for k, w, r in one] == [(2, [0, 1, 2], [3, 1, 0])]
    mixed = groups_by(np.array([7, 2, 8, 4], dtype=np.int64), 5)
    assert [(k, w.tolist(), r.tolist()) for k, w, r in mixed] == [(0, [1, 3], [2, 4]), (1, [0, 2], [2, 3])]
    assert groups_by(np.zeros(0, dtype=np.int64), 5) == []
