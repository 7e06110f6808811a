"""Hugging Face ``Trainer`` on arrowmt's token-budget batches: collated inputs, and a resume that continues exactly.

Models are built from small configs (no downloads): a Marian translation model on parallel
Multi30k, a GPT-2 causal LM on token blocks of its English side.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from arrowmt import (
    BlockBatchSampler,
    Dictionary,
    InputDataError,
    InvalidParameterError,
    MissingDependencyError,
    TokenBatchSampler,
    build_view,
    convert_text,
    open_blocks,
    open_dataset,
    open_view_dataset,
)
from tests.conftest import MULTI30K, val_sentencepiece

transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("arrowmt.integrations.transformers")

MAX_TOKENS = 384


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k val (1,014 de-en pairs), one joined dictionary (a Marian model shares its vocabulary)."""
    out = tmp_path_factory.mktemp("hf") / "de-en"
    convert_text(str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", joined_dictionary=True, progress=False)
    return out


@pytest.fixture(scope="module")
def mono(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The English side of Multi30k val as a language model's corpus."""
    out = tmp_path_factory.mktemp("hf") / "en"
    convert_text(str(MULTI30K / "val"), out, lang="en", progress=False)
    return out


# ----- the collater -----------------------------------------------------------------------------


def test_seq2seq_inputs_labels_and_decoder_inputs(parallel: Path) -> None:
    ds = open_dataset(parallel, "train")
    ids = [5, 0, 700]
    batch = hf.TransformersCollater(ds.special_ids, decoder_start_token_id=7)(ds.__getitems__(ids))
    assert set(batch) == {"input_ids", "attention_mask", "labels", "decoder_input_ids"}
    pad, eos = ds.special_ids.pad, ds.special_ids.eos
    for k, i in enumerate(ids):
        src, tgt = ds.row("source", i).long(), ds.row("target", i).long()
        n, m = len(src), len(tgt)
        assert batch["input_ids"][k, :n].tolist() == src.tolist() and set(batch["input_ids"][k, n:].tolist()) <= {pad}
        assert batch["attention_mask"][k].tolist() == [1] * n + [0] * (batch["input_ids"].shape[1] - n)
        assert batch["labels"][k, :m].tolist() == tgt.tolist() and set(batch["labels"][k, m:].tolist()) <= {-100}
        assert tgt[-1] == eos
        assert batch["decoder_input_ids"][k, :m].tolist() == [7, *tgt[:-1].tolist()]
        assert set(batch["decoder_input_ids"][k, m:].tolist()) <= {pad}
    default = hf.TransformersCollater(ds.special_ids)(ds.__getitems__(ids))
    assert default["decoder_input_ids"][:, 0].tolist() == [eos] * 3  # fairseq's prev_output_tokens
    assert all(t.dtype == torch.int64 for t in batch.values())


def test_causal_lm_inputs_from_blocks_and_rows(mono: Path) -> None:
    blocks = open_blocks(mono, "train", tokens_per_sample=16, break_mode="complete")
    collate = hf.TransformersCollater(blocks.special_ids, pad_to_multiple_of=8)
    batch = collate(blocks.__getitems__([3, 1, 9]))
    assert set(batch) == {"input_ids", "attention_mask", "labels"} and batch["input_ids"].shape[1] % 8 == 0
    for k, i in enumerate([3, 1, 9]):
        tokens = blocks[i]["target"].tolist()
        n = len(tokens)
        assert batch["input_ids"][k, :n].tolist() == tokens == batch["labels"][k, :n].tolist()
        assert batch["attention_mask"][k].sum() == n and set(batch["labels"][k, n:].tolist()) <= {-100}
    rows = open_dataset(mono, "train")
    whole = hf.TransformersCollater(rows.special_ids)(rows.__getitems__([0, 1]))
    assert whole["labels"][0, : len(rows.row("tokens", 0))].tolist() == rows.row("tokens", 0).tolist()


def test_collater_refuses_other_batches() -> None:
    with pytest.raises(InvalidParameterError, match="batch: expected columns"):
        hf.TransformersCollater()([{"id": 0, "text": torch.tensor([1])}])
    with pytest.raises(InvalidParameterError, match="decoder_start_token_id"):
        hf.TransformersCollater(decoder_start_token_id=-1)


# ----- training and resuming --------------------------------------------------------------------


class StopAt(transformers.TrainerCallback):
    """Stops training after optimizer step ``step`` (a checkpoint is saved there)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


class CountingPlan:
    """A sampler's plan that counts the batches it is asked for (prefetch is off in these samplers)."""

    def __init__(self, plan: Any) -> None:
        self.plan, self.calls = plan, 0

    def __len__(self) -> int:
        return len(self.plan)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plan, name)

    def batch(self, b: int) -> np.ndarray:
        self.calls += 1
        return self.plan.batch(b)


def _arguments(out: Path, **kw: Any) -> Any:
    common = {
        "output_dir": str(out), "use_cpu": True, "report_to": [], "seed": 3, "logging_steps": 1,
        "save_strategy": "steps", "save_steps": 4, "learning_rate": 3e-3, "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }  # fmt: skip
    return transformers.Seq2SeqTrainingArguments(**{**common, **kw})


def _losses(trainer: Any) -> dict[int, tuple[float, float]]:
    return {e["step"]: (e["loss"], e["grad_norm"]) for e in trainer.state.log_history if "loss" in e}


def _parameters_sha256(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def _run(
    make_trainer: Any, out: Path, stop: int | None = None, resume: bool = False, count: bool = True
) -> tuple[Any, CountingPlan | None]:
    """A trainer's run; ``count``: its sampler walks a :class:`CountingPlan` of its plan (every epoch that plan)."""
    trainer = make_trainer(out)
    plan = CountingPlan(trainer._batches.sampler.plan) if count else None
    if plan is not None:
        trainer._batches.sampler.plan = plan
    if stop is not None:
        trainer.add_callback(StopAt(stop))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch/transformers deprecation notes; pytest makes warnings errors
        trainer.train(resume_from_checkpoint=True if resume else None)
    return trainer, plan


def _assert_resume_continues_exactly(make_trainer: Any, tmp_path: Path, stop: int) -> None:
    """Per-step losses and gradient norms, and the final parameters, of a run stopped at ``stop`` and resumed
    from its checkpoint, equal an uninterrupted run's; the resumed sampler makes only the batches trained on."""
    straight, made = _run(make_trainer, tmp_path / "straight")
    first, _ = _run(make_trainer, tmp_path / "split", stop=stop)
    saved = json.loads((tmp_path / "split" / f"checkpoint-{stop}" / "arrowmt-sampler-0.json").read_text())
    resumed, plan = _run(make_trainer, tmp_path / "split", resume=True)
    assert straight.state.global_step > stop and resumed.state.global_step == straight.state.global_step
    expected = _losses(straight)
    assert len(expected) == straight.state.global_step
    assert {**_losses(first), **_losses(resumed)} == expected
    assert _parameters_sha256(resumed.model) == _parameters_sha256(straight.model)
    per_epoch = len(straight._batches)
    assert 0 < saved["batches_done"] < per_epoch  # stopped inside an epoch
    before = (saved["epoch"] - 1) * per_epoch + saved["batches_done"]
    assert plan.calls == made.calls - before  # no batch before the resume point is made again


def test_seq2seq_trainer_resumes_with_exactly_the_next_batch(parallel: Path, tmp_path: Path) -> None:
    """Marian from a config, two epochs, gradient accumulation over an odd number of batches per epoch."""
    vocab = len(Dictionary.load(parallel / "dict.de.txt"))
    ds = open_dataset(parallel, "train")

    def make_trainer(out: Path) -> Any:
        args = _arguments(out, num_train_epochs=2, gradient_accumulation_steps=2)
        torch.manual_seed(0)
        config = transformers.MarianConfig(
            vocab_size=vocab, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=128,
            pad_token_id=ds.special_ids.pad, eos_token_id=ds.special_ids.eos,
            decoder_start_token_id=ds.special_ids.pad, forced_eos_token_id=ds.special_ids.eos,
        )  # fmt: skip
        sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5, prefetch=0)
        model = transformers.MarianMTModel(config)
        return hf.ArrowMTSeq2SeqTrainer(model=model, args=args, train_dataset=ds, batch_sampler=sampler)

    trainer = make_trainer(tmp_path / "probe")
    assert len(trainer._batches) % 2 == 1, "the epoch should not divide into accumulation steps"
    assert trainer.data_collator.decoder_start_token_id == ds.special_ids.pad
    _assert_resume_continues_exactly(make_trainer, tmp_path, stop=len(trainer._batches) // 2 // 4 * 4)


def test_causal_lm_trainer_on_blocks_resumes_with_exactly_the_next_batch(mono: Path, tmp_path: Path) -> None:
    """GPT-2 from a config on 32-token blocks, stopped in its second epoch."""
    blocks = open_blocks(mono, "train", tokens_per_sample=32)
    vocab = len(Dictionary.load(mono / "dict.en.txt"))
    per_epoch = len(BlockBatchSampler(blocks, max_tokens=256, seed=5, prefetch=0))

    def make_trainer(out: Path) -> Any:
        args = _arguments(out, max_steps=per_epoch + per_epoch // 2)
        torch.manual_seed(0)
        ids = blocks.special_ids
        config = transformers.GPT2Config(
            vocab_size=vocab, n_positions=32, n_embd=16, n_layer=1, n_head=2,
            bos_token_id=ids.bos, eos_token_id=ids.eos, pad_token_id=ids.pad,
        )  # fmt: skip
        sampler = BlockBatchSampler(blocks, max_tokens=256, seed=5, prefetch=0)
        model = transformers.GPT2LMHeadModel(config)
        return hf.ArrowMTTrainer(model=model, args=args, train_dataset=blocks, batch_sampler=sampler)

    stop = (per_epoch + per_epoch // 4) // 4 * 4
    assert per_epoch < stop < per_epoch + per_epoch // 2
    _assert_resume_continues_exactly(make_trainer, tmp_path, stop=stop)
    saved = json.loads((tmp_path / "split" / f"checkpoint-{stop}" / "arrowmt-sampler-0.json").read_text())
    assert saved["epoch"] == 2  # the Trainer's second epoch is the sampler's epoch 2 (arrowmt counts from 1)


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Multi30k val segmented by a sentencepiece model trained on it, one joined dictionary (a Marian model shares
    its embeddings), with its words' lattices."""
    pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("hf-spm")
    out, model = folder / "de-en", val_sentencepiece(folder, 600)
    convert_text(str(MULTI30K / "val"), out, src_lang="de", tgt_lang="en", spm_model=str(model), spm_sampling=True,
                 joined_dictionary=True, progress=False)  # fmt: skip
    return out


def test_a_model_sharing_its_embeddings_is_refused_on_two_dictionaries(tmp_path: Path) -> None:
    """Source id k and target id k would share an embedding row: a Marian model that shares them (its default) is
    refused on a corpus with a dictionary per side, and accepted once it does not share them."""
    two = tmp_path / "two"
    convert_text(str(MULTI30K / "val"), two, src_lang="de", tgt_lang="en", progress=False)
    ds = open_dataset(two, "train")
    vocab = max(len(ds.dictionary(column)) for column in ds.columns)

    def trainer(**sharing: bool) -> Any:
        config = transformers.MarianConfig(vocab_size=vocab, d_model=8, encoder_layers=1, decoder_layers=1,
                                           encoder_attention_heads=1, decoder_attention_heads=1, encoder_ffn_dim=8,
                                           decoder_ffn_dim=8, pad_token_id=ds.special_ids.pad, **sharing)  # fmt: skip
        sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=1)
        return hf.ArrowMTSeq2SeqTrainer(model=transformers.MarianMTModel(config), args=_arguments(tmp_path / "out"),
                                        train_dataset=ds, batch_sampler=sampler)  # fmt: skip

    with pytest.raises(InvalidParameterError, match=r"model: shares one embedding .* \(\d+ source and \d+ target"):
        trainer()
    shared = trainer(share_encoder_decoder_embeddings=False).model
    shared.config.share_encoder_decoder_embeddings = True  # as a model that shares them says
    with pytest.raises(InvalidParameterError, match=r"model: shares one embedding"):  # a collater for one's own loop
        hf.TransformersCollater.for_model(ds, shared)
    assert trainer(share_encoder_decoder_embeddings=False).train_dataset is ds


def test_seq2seq_trainer_reads_sampled_segmentations_and_resumes_exactly(sampled: Path, tmp_path: Path) -> None:
    """``open_dataset(..., segmentation="sampled")`` through ``ArrowMTSeq2SeqTrainer``: each epoch planned from its
    samples; a run stopped in its second epoch and resumed equals an uninterrupted run (losses, parameters)."""
    ds = open_dataset(sampled, "train", segmentation="sampled")
    vocab = max(len(ds.dictionary(column)) for column in ds.columns)  # the dictionaries extended by the samples
    positions = max(ds.max_length(column) for column in ds.columns)

    def make_trainer(out: Path) -> Any:
        args = _arguments(out, num_train_epochs=2)
        torch.manual_seed(0)
        config = transformers.MarianConfig(
            vocab_size=vocab, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=positions,
            pad_token_id=ds.special_ids.pad, eos_token_id=ds.special_ids.eos,
            decoder_start_token_id=ds.special_ids.pad, forced_eos_token_id=ds.special_ids.eos,
        )  # fmt: skip
        sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5, prefetch=0)
        return hf.ArrowMTSeq2SeqTrainer(model=transformers.MarianMTModel(config), args=args, train_dataset=ds,
                                        batch_sampler=sampler)  # fmt: skip

    straight, _ = _run(make_trainer, tmp_path / "straight", count=False)
    planned = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5)
    per_epoch = []
    for epoch in (1, 2, 3):
        planned.set_epoch(epoch)
        per_epoch.append(len(planned))
    assert len(set(per_epoch)) > 1  # each epoch planned from its own lengths
    # the Trainer's two epochs are two windows of the first epoch's length over the sampler's epochs, one after
    # another: no batch left out or repeated
    trained = straight.state.global_step
    assert trained == 2 * per_epoch[0]
    done = trained - per_epoch[0]  # batches of sampler epoch 2 on
    after = (
        {"epoch": 3, "batches_done": done - per_epoch[1]} if done > per_epoch[1] else {"epoch": 2, "batches_done": done}
    )
    assert {k: straight._batches.state_dict()[k] for k in after} == after
    stop = (per_epoch[0] + per_epoch[1] // 2) // 4 * 4
    assert per_epoch[0] < stop < trained
    first, _ = _run(make_trainer, tmp_path / "split", stop=stop, count=False)
    resumed, _ = _run(make_trainer, tmp_path / "split", resume=True, count=False)
    assert {**_losses(first), **_losses(resumed)} == _losses(straight)
    assert _parameters_sha256(resumed.model) == _parameters_sha256(straight.model)


def test_an_epoch_stopped_early_continues_from_its_last_trained_batch(parallel: Path) -> None:
    """Batches a stopped Trainer epoch read ahead but never trained on come again in the next one; the windows
    (Trainer epochs) run over the sampler's epochs one after another."""
    ds = open_dataset(parallel, "train")
    straight = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5, prefetch=0)
    expected = []
    for epoch in (1, 2):
        straight.set_epoch(epoch)
        expected += list(straight)
    batches = hf.TrainerBatches(TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5, prefetch=0))
    batches.set_epoch(0)
    first = iter(batches)
    got = [next(first) for _ in range(5)]  # read ahead
    batches.count()
    batches.count()  # two trained on, then the epoch stops (should_epoch_stop)
    batches.set_epoch(1)
    got = got[:2] + list(batches)
    assert got == expected[: len(got)] and len(got) == 2 + len(batches)
    assert batches.state_dict()["epoch"] == 1 and batches.state_dict()["batches_done"] == 2


def _tiny_marian(parallel: Path) -> Any:
    """A Marian model of width 8 over ``parallel``'s joined dictionary (for checks that train nothing)."""
    config = transformers.MarianConfig(
        vocab_size=len(Dictionary.load(parallel / "dict.de.txt")), d_model=8, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=1, decoder_attention_heads=1, encoder_ffn_dim=8, decoder_ffn_dim=8,
        pad_token_id=1, eos_token_id=2, decoder_start_token_id=1,
    )  # fmt: skip
    return transformers.MarianMTModel(config)


def test_evaluation_on_an_arrowmt_split_with_the_trainers_defaults(parallel: Path, tmp_path: Path) -> None:
    """``eval_dataset=open_dataset(...)`` with the Trainer's default arguments (``remove_unused_columns=True``,
    ``dataloader_pin_memory=True``) evaluates, on a CPU without a warning: the trainer sets what arrowmt needs."""
    ds = open_dataset(parallel, "train")
    args = transformers.Seq2SeqTrainingArguments(output_dir=str(tmp_path), report_to=[], disable_tqdm=True)
    assert args.remove_unused_columns and args.dataloader_pin_memory  # the defaults
    trainer = hf.ArrowMTSeq2SeqTrainer(
        model=_tiny_marian(parallel), args=args, train_dataset=ds, eval_dataset=ds,
        batch_sampler=TokenBatchSampler(ds, max_tokens=MAX_TOKENS),
    )  # fmt: skip
    assert trainer.args.dataloader_pin_memory == hf.has_accelerator()
    metrics = trainer.evaluate()
    assert np.isfinite(metrics["eval_loss"])


def test_samples_per_second_counts_the_rows_trained_on(parallel: Path, tmp_path: Path) -> None:
    """``train_samples_per_second`` and the total batch size count rows of token batches (the plan's mean rows a
    batch, times accumulation), not ``per_device_train_batch_size``: within a quarter of the rows trained on."""
    ds = open_dataset(parallel, "train")
    sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5, prefetch=0)
    args = _arguments(tmp_path / "out", max_steps=6, gradient_accumulation_steps=2, save_strategy="no")
    trainer = hf.ArrowMTSeq2SeqTrainer(model=_tiny_marian(parallel), args=args, train_dataset=ds, batch_sampler=sampler)
    per_batch = sampler.plan.samples / len(sampler.plan)
    assert trainer.get_total_train_batch_size(args) == round(2 * per_batch)
    assert abs(2 * per_batch - 2 * args.per_device_train_batch_size) > per_batch / 2  # the Trainer's own count is off
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = trainer.train()
    sampler.set_epoch(1)
    trained = sum(len(batch) for batch in itertools.islice(iter(sampler), 12))
    counted = output.metrics["train_samples_per_second"] * output.metrics["train_runtime"]
    assert abs(counted - trained) < trained / 4


def test_dataloader_workers_are_advised_against_once(
    parallel: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arrowmt.integrations import workers

    monkeypatch.setattr(workers, "_ADVISED", set())
    ds = open_dataset(parallel, "train")
    args = _arguments(tmp_path / "out", max_steps=1, dataloader_num_workers=1)
    trainer = hf.ArrowMTSeq2SeqTrainer(model=_tiny_marian(parallel), args=args, train_dataset=ds,
                                       batch_sampler=TokenBatchSampler(ds, max_tokens=MAX_TOKENS))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="arrowmt.integrations.workers"):
        trainer.get_train_dataloader()
        trainer.get_train_dataloader()
    assert len(caplog.records) == 1 and "dataloader_num_workers=0 reads the batches in the main" in caplog.text


def test_wrong_sampler_world_and_checkpoint_are_refused(parallel: Path, tmp_path: Path) -> None:
    ds = open_dataset(parallel, "train")
    model, args = _tiny_marian(parallel), _arguments(tmp_path / "out", max_steps=2)
    other_rank = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, num_replicas=2, rank=1)
    with pytest.raises(InvalidParameterError, match=r"batch_sampler: expected rank 0 of 1 .*got rank 1 of 2"):
        hf.ArrowMTSeq2SeqTrainer(model=model, args=args, train_dataset=ds, batch_sampler=other_rank)
    with pytest.raises(InvalidParameterError, match="batch_sampler: expected an arrowmt TokenBatchSampler"):
        hf.ArrowMTSeq2SeqTrainer(model=model, args=args, train_dataset=ds, batch_sampler=[[0, 1]])
    build_view(parallel, tmp_path / "short.view", max_len=8)
    short = open_view_dataset(tmp_path / "short.view", parallel)  # another row list: batch ids mean other rows
    with pytest.raises(InvalidParameterError, match=r"batch_sampler: expected a sampler over train_dataset .*train"):
        hf.ArrowMTSeq2SeqTrainer(
            model=model, args=args, train_dataset=ds, batch_sampler=TokenBatchSampler(short, max_tokens=MAX_TOKENS)
        )
    again = open_dataset(parallel, "train")  # the same split opened again: its sampler fits
    hf.ArrowMTSeq2SeqTrainer(
        model=model, args=args, train_dataset=ds, batch_sampler=TokenBatchSampler(again, max_tokens=MAX_TOKENS)
    )
    sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS)
    trainer = hf.ArrowMTSeq2SeqTrainer(model=model, args=args, train_dataset=ds, batch_sampler=sampler)
    nested = tmp_path / "nested"
    nested.mkdir()
    (nested / "arrowmt-sampler-0.json").write_text("[" * 100_000)
    with pytest.raises(InputDataError, match=r"arrowmt-sampler-0\.json: expected an arrowmt sampler state .*nested"):
        hf.load_sampler_state(nested, 0)
    foreign = tmp_path / "out" / "checkpoint-2"  # as a plain Trainer leaves it: no sampler position
    foreign.mkdir(parents=True)
    with pytest.raises(InputDataError, match=r"checkpoint-2: no arrowmt-sampler-0\.json"):
        trainer.train(resume_from_checkpoint=str(foreign))


def test_without_transformers_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "arrowmt.integrations.transformers")
    with pytest.raises(MissingDependencyError, match=r"pip install 'arrowmt\[transformers\]'"):
        importlib.import_module("arrowmt.integrations.transformers")


def test_batch_shapes_pad_to_few_shapes_without_changing_the_loss(parallel: Path, tmp_path: Path) -> None:
    """A sampler made with ``batch_shapes=3`` gives the trainer's default collater its shapes: every batch of an
    epoch in at most 3 shapes, the added rows without a label; Marian's loss on each batch equals its loss on the same
    rows padded only to their longest (the added rows and padding change nothing)."""
    ds = open_dataset(parallel, "train")
    sampler = TokenBatchSampler(ds, max_tokens=MAX_TOKENS, seed=5, prefetch=0, batch_shapes=3)
    model = _tiny_marian(parallel).eval()
    args = _arguments(tmp_path / "out", max_steps=2, save_strategy="no")
    trainer = hf.ArrowMTSeq2SeqTrainer(model=model, args=args, train_dataset=ds, batch_sampler=sampler)
    shaped = trainer.data_collator
    assert list(shaped.shapes) == sampler.batch_shapes() and 1 <= len(shaped.shapes) <= 3
    plain = hf.TransformersCollater.for_model(ds, model)
    sampler.set_epoch(1)
    shapes, compared = set(), 0
    for rows in sampler:
        batch = shaped(ds.__getitems__(list(rows)))
        shapes.add((tuple(batch["input_ids"].shape), tuple(batch["labels"].shape)))
        assert (batch["labels"][len(rows) :] == hf.LABEL_PAD).all()
        if compared < 4 and len(rows) < batch["input_ids"].shape[0]:  # batches with added rows
            with torch.no_grad():
                loss = model(**batch).loss
                expected = model(**plain(ds.__getitems__(list(rows)))).loss
            assert torch.allclose(loss, expected, rtol=1e-5)
            compared += 1
    assert len(shapes) <= 3 and compared >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        output = trainer.train()
    assert np.isfinite(output.training_loss)
