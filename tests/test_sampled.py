"""Sampled segmentations (issue 39): built from the bundled Multi30k sample with a sentencepiece model trained
on it, checked against sentencepiece itself (decoding, its own sampler's distribution)."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
import sys
from collections import Counter
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
from arrowmt.files import open_side_file, write_side_file
from arrowmt.format import Dictionary
from arrowmt.plans import ShiftedPlan
from arrowmt.reading import Ragged
from arrowmt.testing import (
    DRAWS_FORMAT,
    TIE_TOLERANCE,
    Segmenter,
    check_deterministic,
    epoch_samples,
    format_summary,
    groups_by,
    layer_rows,
    main,
    row_sums,
    sampled_folder,
)
from tests.conftest import MULTI30K, gz_lines, val_sentencepiece
from tests.state_helpers import SamplerLoader, check_resume

spm = pytest.importorskip("sentencepiece")
K = 4


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A unigram and a BPE model trained on the sample's validation text (both languages)."""
    folder = tmp_path_factory.mktemp("spm")
    models = {kind: val_sentencepiece(folder, 600, kind, model_type=kind) for kind in ("unigram", "bpe")}
    return {**models, "across": val_sentencepiece(folder, 600, "across", split_by_whitespace=False)}


def converted(out: Path, model: Path, **options: object) -> Path:
    convert_text(str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", testpref=str(MULTI30K / "test"),
                 spm_model=str(model), progress=False, **options)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path]) -> Path:
    out = converted(tmp_path_factory.mktemp("c") / "c", models["unigram"])
    add_sampled_segmentations(out, models["unigram"], samples=K, alpha=0.1, seed=3, progress=False)
    return out


def text_of(pieces: list[str]) -> str:
    return "".join(pieces).replace("\u2581", " ").strip()


def every_form(sampled: SampledSplit, column: str) -> list[list[list[int]]]:
    """Each row in each of its samples, as piece ids."""
    rows = np.arange(len(sampled), dtype=np.int64)
    out: list[list[list[int]]] = [[] for _ in rows]
    for s in range(sampled.samples):
        spans = sampled.spans(column, rows, np.full(rows.shape, s))
        for r in rows:
            out[r].append(spans.row(int(r)).tolist())
    return out


def test_every_sampled_row_decodes_to_its_text_and_takes_several_forms(corpus: Path) -> None:
    sampled = SampledSplit(corpus, "train")
    assert sampled.samples == K and len(sampled) == 1014
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
        lengths = sampled.lengths(column, np.arange(5), np.array([0, 1, 2, 3, 0]))
        assert lengths.tolist() == [len(forms[r][s]) for r, s in enumerate([0, 1, 2, 3, 0])]


def test_several_pairs_share_one_table_so_a_language_reads_alike_in_every_pair(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    """A folder of several pairs (one dictionary for every language, ``convert text --lang-pairs``) stores one table
    of words and forms: a row of a language takes the same pieces and ids in every pair and column it is in, each
    form decodes to the row's text, and the samples' dictionary is one file per language, as fairseq loads them."""
    out = tmp_path / "pairs"
    convert_text(str(MULTI30K / "val"), out, lang_pairs="de-en,en-de", testpref=str(MULTI30K / "test"),
                 spm_model=str(models["unigram"]), spm_samples=K, progress=False)  # fmt: skip
    de_en, en_de = SampledSplit(out, "train.de-en"), SampledSplit(out, "train.en-de")
    rows = np.arange(len(de_en), dtype=np.int64)
    for sample in range(K):
        samples = np.full(rows.shape, sample)
        for mine, theirs in (("source", "target"), ("target", "source")):
            a, b = de_en.spans(mine, rows, samples), en_de.spans(theirs, rows, samples)
            assert np.array_equal(a.lengths, b.lengths) and np.array_equal(a.compact().words, b.compact().words)
    pieces, base = de_en.dictionary("source"), de_en.corpus.dictionary("source")
    assert de_en.dictionary("target").symbols == pieces.symbols == en_de.dictionary("source").symbols
    forms = every_form(de_en, "source")
    for r in range(0, len(de_en), 97):
        text = text_of([base.symbols[i] for i in de_en.corpus.row_array("source", r)[:-1]])
        assert all(text_of([pieces.symbols[i] for i in form[:-1]]) == text for form in forms[r])
    folder = sampled_folder(out) / "forms"
    assert (
        (folder / "dict.de.txt").read_bytes()
        == (folder / "dict.en.txt").read_bytes()
        == (folder / "dict.txt").read_bytes()
    )
    assert open_dataset(out, "test.en-de", segmentation="sampled").rows == len(SampledSplit(out, "test.en-de"))
    assert verify_dataset(out, progress=False).ok


def test_epochs_take_rows_in_different_samples_the_same_everywhere() -> None:
    rows = np.arange(10_000)
    one, again, two = (epoch_samples(3, e, rows, K) for e in (1, 1, 2))
    assert np.array_equal(one, again) and not np.array_equal(one, two)
    assert one.min() == 0 and one.max() == K - 1 and abs(np.bincount(one) / 2500 - 1).max() < 0.1
    forms_seen = np.stack([epoch_samples(3, e, rows, K) for e in range(1, 5)])
    assert np.mean([len(set(c)) > 1 for c in forms_seen.T]) > 0.9  # across 4 epochs most rows take >1 form


def test_pieces_follow_sentencepieces_own_sampler(corpus: Path, models: dict[str, Path]) -> None:
    """The pieces the stored samples use, over every row and sample, against sentencepiece sampling the
    sentences themselves from their 64 best segmentations: their distributions differ no more than two runs of
    sentencepiece's own sampler."""
    processor = spm.SentencePieceProcessor(model_file=str(models["unigram"]))
    lines = gz_lines(MULTI30K / "val.de.gz")
    sampled = SampledSplit(corpus, "train")
    pieces = sampled.dictionary("source")
    ours = Counter(pieces.symbols[i] for row in every_form(sampled, "source") for form in row for i in form[:-1])

    def sentencepiece_run(seed: int) -> Counter:
        spm.set_random_generator_seed(seed)
        drawn = [processor.encode(lines, out_type=str, enable_sampling=True, alpha=0.1, nbest_size=-1)
                 for _ in range(K)]  # fmt: skip
        return Counter(p for run in drawn for line in run for p in line)

    def distance(a: Counter, b: Counter) -> float:
        na, nb = sum(a.values()), sum(b.values())
        return 0.5 * sum(abs(a[p] / na - b[p] / nb) for p in set(a) | set(b))

    first, second = sentencepiece_run(11), sentencepiece_run(12)
    between_runs = distance(first, second)
    assert distance(ours, first) < 2 * between_runs + 0.01, (distance(ours, first), between_runs)
    assert abs(sum(ours.values()) / sum(first.values()) - 1) < 0.02  # as many pieces as sentencepiece's sampler


def test_the_same_seed_gives_the_same_samples_in_any_process_and_bpe_dropout_works(
    tmp_path: Path, corpus: Path, models: dict[str, Path]
) -> None:
    again = converted(tmp_path / "again", models["unigram"])
    build = f"import arrowmt; arrowmt.add_sampled_segmentations({str(again)!r}, {str(models['unigram'])!r}, "
    build += f"samples={K}, alpha=0.1, seed=3, progress=False)"
    subprocess.run([sys.executable, "-c", build], check=True, cwd=tmp_path)  # another process: the same bytes
    for name in ("words/train.arrow", "forms/forms.arrow", "forms/dict.de.txt"):
        assert (sampled_folder(again) / name).read_bytes() == (sampled_folder(corpus) / name).read_bytes(), name
    add_sampled_segmentations(again, models["unigram"], samples=K, alpha=0.1, seed=4, overwrite=True, progress=False)
    assert (sampled_folder(again) / "forms/forms.arrow").read_bytes() != (
        sampled_folder(corpus) / "forms/forms.arrow"
    ).read_bytes()
    bpe = converted(tmp_path / "bpe", models["bpe"])
    add_sampled_segmentations(bpe, models["bpe"], samples=K, alpha=0.1, seed=1, progress=False)
    sampled = SampledSplit(bpe, "valid" if False else "test")
    base = sampled.corpus.dictionary("target")
    pieces = sampled.dictionary("target")
    forms = every_form(sampled, "target")
    for r, row_forms in enumerate(forms):
        text = text_of([base.symbols[i] for i in sampled.corpus.row_array("target", r)[:-1]])
        assert all(text_of([pieces.symbols[i] for i in form[:-1]]) == text for form in row_forms)
    assert np.mean([len({tuple(f) for f in row_forms}) > 1 for row_forms in forms]) > 0.5


def test_words_with_unk_keep_their_pieces(tmp_path: Path, models: dict[str, Path]) -> None:
    out = converted(tmp_path / "small", models["unigram"], nwordssrc=200)  # the source dictionary drops pieces
    add_sampled_segmentations(out, models["unigram"], samples=K, progress=False)
    sampled = SampledSplit(out, "train")
    base = sampled.corpus.dictionary("source")
    unk_rows = [r for r in range(len(sampled)) if base.unk in sampled.corpus.row_array("source", r)]
    assert unk_rows
    for r in unk_rows[:50]:
        for s in range(K):
            form = sampled.spans("source", np.array([r]), np.array([s])).row(0).tolist()
            assert form.count(base.unk) == sampled.corpus.row_array("source", r).tolist().count(base.unk)


def test_refusals_name_what_is_wrong(tmp_path: Path, corpus: Path, models: dict[str, Path]) -> None:
    with pytest.raises(InputDataError, match="segments the word"):  # made with another model
        add_sampled_segmentations(corpus, models["bpe"], samples=K, overwrite=True, progress=False)
    assert SampledSplit(corpus, "train").samples == K  # the failed build left the samples there as they were
    with pytest.raises(InvalidParameterError, match="overwrite"):
        add_sampled_segmentations(corpus, models["unigram"], samples=K, progress=False)
    bad_options = {"samples": 0, "alpha": -1, "nbest_size": 1, "seed": -1, "max_draws": 257}
    for bad, match in (({name: value}, name) for name, value in bad_options.items()):
        with pytest.raises(InvalidParameterError, match=match):
            add_sampled_segmentations(corpus, models["unigram"], overwrite=True, progress=False, **bad)
    with pytest.raises(InputDataError, match="pieces across words"):  # a model that does not split at white space
        converted(tmp_path / "across", models["across"], spm_samples=2)
    with pytest.raises(InvalidParameterError, match="spm_alpha: expected with spm_samples"):
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
    with pytest.raises(InvalidParameterError, match="samples"):
        SampledSplit(corpus, "train").spans("source", np.array([0]), np.array([K]))


def test_the_options_as_one_value_convert_the_corpus_then_store_its_samples(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    """``convert_with_options(TextConversion(..., spm_samples=K))`` writes, byte for byte, what converting without
    samples and then ``add_sampled_segmentations`` write; a bad sampling option is refused when the value is made,
    before any other option is looked at."""
    value = TextConversion(
        prefixes={"train": str(MULTI30K / "val"), "test": str(MULTI30K / "test")}, src_lang="de", tgt_lang="en",
        spm_model=str(models["unigram"]), spm_samples=2, spm_alpha=0.2, nwords=(-1, 300),
    )  # fmt: skip
    manifest = convert_with_options(value, tmp_path / "value", progress=False)
    assert manifest.splits() == ["test", "train"]
    apart = converted(tmp_path / "apart", models["unigram"], nwordstgt=300)
    add_sampled_segmentations(apart, models["unigram"], samples=2, alpha=0.2, progress=False)
    files = sorted(p.relative_to(apart) for p in apart.rglob("*") if p.is_file())
    assert sorted(p.relative_to(tmp_path / "value") for p in (tmp_path / "value").rglob("*") if p.is_file()) == files
    assert any(f.parts[0] == "sampled" for f in files)
    assert all((apart / f).read_bytes() == (tmp_path / "value" / f).read_bytes() for f in files)
    for given in ({}, {"spm_model": ""}):
        with pytest.raises(InvalidParameterError, match="spm_samples: expected with spm_model"):
            TextConversion(prefixes={"train": "x"}, lang_pairs=("de-en",), src_lang="de", spm_samples=2, **given)


def test_the_command_line_converts_with_samples_and_info_shows_them(
    tmp_path: Path, models: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    command = ["convert", "text", str(out), "--source-lang", "de", "--target-lang", "en", "--quiet"]
    command += ["--trainpref", str(MULTI30K / "val"), "--spm-model", str(models["bpe"])]
    assert main([*command, "--spm-samples", "3", "--spm-alpha", "0.2"]) == 0
    sampled = SampledSplit(out, "train")
    assert (sampled.samples, sampled.info.alpha, sampled.info.seed) == (3, 0.2, 1)
    capsys.readouterr()
    assert main(["info", str(out)]) == 0
    assert (
        "sampled segmentations: 3 a row, alpha 0.2, nbest_size 64, seed 1, 64 draws of a frequent word, dropout"
        in capsys.readouterr().out
    )
    assert main(["info", "--json", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["segmentation"]["samples"] == 3
    assert main(["convert", "text", str(tmp_path / "no"), "--lang", "de", "--trainpref", str(MULTI30K / "val"),
                 "--spm-samples", "3", "--quiet"]) == 2  # fmt: skip
    assert "--spm-samples: expected with --spm-model" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()  # refused before converting


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


def test_layer_rows_and_row_sums_exact_values() -> None:
    assert layer_rows(np.array([5, 3, 3, 1])).tolist() == [0, 5, 8, 11]
    assert row_sums(np.array([1, 2, 3, 4, 5]), np.array([2, 0, 3])).tolist() == [3, 0, 12]
    assert row_sums(np.array([True, False, True]), np.array([1, 2])).tolist() == [1, 1]
    assert row_sums(np.zeros(0), np.zeros(0, dtype=np.int64)).tolist() == []
    assert row_sums(np.array([0.25, 0.5, 2.0]), np.array([2, 1])).tolist() == [0.75, 2.0]


def collate_ids(batch: Any) -> list[int]:
    """Row ids and a checksum of the collated tokens (comparable with ==, picklable for workers)."""
    out = FairseqCollater(SpecialIds())(batch)
    return [*out["id"].tolist(), int(out["net_input"]["src_tokens"].sum()), int(out["target"].sum())]


def test_the_sampler_plans_each_epoch_from_its_samples(corpus: Path) -> None:
    ds = open_dataset(corpus, "train", segmentation="sampled")
    assert isinstance(ds, ArrowMTSampledDataset) and ds.rows == 1014 and ds.seed == 3  # the samples' seed
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
        in_sample = sampled.spans("source", rows, epoch_samples(3, epoch, rows, K))  # in its sample of the epoch
        read = ds.column_spans("source", ids)
        assert all(np.array_equal(read.row(k), in_sample.row(k)) for k in range(len(ids)))
        for batch in batches:  # fairseq's budget, exact for the pieces read
            assert len(batch) * int(ds.num_tokens(batch).max()) <= 600
        seen[epoch] = [len(b) for b in batches]
    assert seen[1] != seen[2]  # the batches follow the epoch's lengths
    mixed = [2 * 1014 + 5, 1014 + 5, 1014 + 6, 2 * 1014 + 9]  # indices of two epochs in one batch
    batch = ds.__getitems__(mixed)
    assert [batch[k]["source"].tolist() for k in range(4)] == [ds.row("source", i).tolist() for i in mixed]
    assert len({tuple(batch[k]["source"].tolist()) for k in range(4)}) == 4
    assert len(list((corpus / ".arrowmt-cache").glob("sampled-*/epoch-*[!k]"))) == 2  # the last two epochs kept
    with pytest.raises(InvalidParameterError, match="segmentation"):
        open_dataset(corpus, "train", segmentation="dropout")


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
                 testpref=str(MULTI30K / "test"), spm_model=str(models["unigram"]), spm_samples=K,
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


def test_a_failed_rebuild_leaves_the_samples_and_edited_layers_are_refused(
    tmp_path: Path, corpus: Path, models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import arrowmt.converters._sampled as building  # whole, to make the build fail while writing the forms

    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(building, "_padded", full_disk)
        with pytest.raises(OSError, match="No space"):
            add_sampled_segmentations(copy, models["unigram"], samples=2, seed=9, overwrite=True, progress=False)
    assert SampledSplit(copy, "train").info.seed == 3  # the samples built before, whole
    assert not list(copy.glob(".sampled.*"))  # nothing left beside them
    manifest = sampled_folder(copy) / "forms" / "arrowmt.json"
    data = json.loads(manifest.read_text())
    original = json.loads(json.dumps(data["provenance"]["layers"]))
    layers = data["provenance"]["layers"]["source"]
    t = next(t for t in range(1, len(layers) - 2) if layers[t] - layers[t + 1] >= 2)
    layers[t], layers[t + 1] = layers[t] - 1, layers[t + 1] + 1  # the same count, still falling: other draws read
    manifest.write_text(json.dumps(data))
    with pytest.raises(FormatError, match=r"draws.source.bin: expected .* \(layers digest differs\)"):
        SampledSplit(copy, "train")
    manifest.write_text(json.dumps({**data, "provenance": {**data["provenance"], "layers": original}}))
    draws = sampled_folder(copy) / "forms" / "draws.source.bin"
    sound = draws.read_bytes()
    side = open_side_file(draws, DRAWS_FORMAT, None)
    words, count, forms, digest = side.values
    first = np.frombuffer(side.body(0, 4 * (words + 1)), dtype=np.uint32).copy()
    body = side.body(4 * (words + 1), 4 * (words + 1) + count)
    side.map.close()
    first[5], first[6] = first[6], first[5]  # written with sound checksums: only the check of the rows sees it
    write_side_file(draws, DRAWS_FORMAT, (words, count, forms, digest), [first, np.frombuffer(body, np.uint8)])
    with pytest.raises(FormatError, match="first form row rising from 0"):
        SampledSplit(copy, "train")
    draws.write_bytes(sound)
    (sampled_folder(copy) / "forms" / "draws.target.bin").unlink()  # as samples made before draws files
    with pytest.raises(FormatError, match=r"draws.target.bin: missing \(samples made before draws files"):
        SampledSplit(copy, "train")


def test_verify_checks_the_samples_files_and_their_layers(tmp_path: Path, corpus: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(corpus, copy)
    report = verify_dataset(copy, progress=False)
    assert report.ok and (report.files, report.side_files) == (2, 5), report  # train, test; their words, forms, draws
    draws = sampled_folder(copy) / "forms" / "draws.source.bin"
    original = draws.read_bytes()
    draws.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))  # one draw names another form
    [problem] = verify_dataset(copy, progress=False).problems
    assert problem.startswith(f"{draws}: draws checksum: chunk ") and "rebuild the samples with" in problem, problem
    draws.write_bytes(original)
    words = sampled_folder(copy) / "words" / "train.arrow"
    data = bytearray(words.read_bytes())
    data[-200] ^= 0xFF
    words.write_bytes(bytes(data))
    problems = verify_dataset(copy, progress=False).problems
    assert problems and all(str(words) in problem for problem in problems), problems
    data[-200] ^= 0xFF
    words.write_bytes(bytes(data))
    manifest = sampled_folder(copy) / "forms" / "arrowmt.json"
    edited = json.loads(manifest.read_text())
    edited["provenance"]["layers"]["target"][0] += 1  # one word more than the words' dictionary holds
    manifest.write_text(json.dumps(edited))
    problems = verify_dataset(copy, progress=False).problems
    assert len(problems) == len(SampledSplit(corpus, "train").corpus.manifest.splits())  # each split, in its samples
    assert all("provenance['layers']['target']" in problem for problem in problems), problems
    assert main(["verify", "--quiet", str(copy)]) == 2


def test_sampled_datasets_pickle_and_read_the_same_in_spawned_workers(corpus: Path) -> None:
    """A worker started by spawn (macOS, Python 3.14's default) unpickles the dataset: the draws files reopen."""
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
    seeds = [ArrowMTSampledDataset(fixed, seed=seed) for seed in (1, 2, 3)]
    for epoch in range(1, 5):
        for ds in seeds:
            assert ds.row("source", epoch * 1014 + 7)[-1] == 2
    families = list((corpus / ".arrowmt-cache").glob("sampled-*"))
    assert len(families) >= 3 and all(len([c for c in f.glob("epoch-*") if c.is_dir()]) <= 2 for f in families)


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
