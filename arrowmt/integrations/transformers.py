"""Hugging Face ``transformers``: arrowmt's token-budget batches in ``Trainer`` and ``Seq2SeqTrainer``, resumable.

``Trainer`` batches a fixed number of rows (``per_device_train_batch_size``); translation and
language models train on batches of about the same number of *tokens* (fairseq's
``--max-tokens``). :class:`ArrowMTTrainer` and :class:`ArrowMTSeq2SeqTrainer` are the two
trainers with one more argument, ``batch_sampler``: an arrowmt ``TokenBatchSampler`` (over
``open_dataset``) or ``BlockBatchSampler`` (over ``open_blocks``, token blocks of a
monolingual corpus). Every training epoch is the sampler's epoch (the Trainer's epoch ``e``
is the sampler's ``e + 1``: arrowmt counts epochs from 1, as fairseq does); where epochs differ
in length (sampled segmentations: ``open_dataset(..., segmentation="sampled")``), the Trainer's
epochs are windows of the first epoch's length over the sampler's epochs, so that no batch is
left out or repeated (:class:`TrainerBatches`).
:class:`TransformersCollater` (the default ``data_collator``) turns its batches into
``input_ids``, ``attention_mask``, ``labels`` (pads ``-100``) and, for an encoder-decoder,
``decoder_input_ids``.

Checkpoints: at every save, :class:`SamplerCheckpoint` writes the sampler's position, the
number of batches the model has trained on in the epoch (not the number the DataLoader
has read ahead), to ``arrowmt-sampler-<rank>.json`` in the checkpoint folder.
``train(resume_from_checkpoint=...)`` loads it, so training continues with exactly the
batch that came next, as if it had not stopped (the Trainer restores the model, optimizer,
scheduler and random states; arrowmt the data). The Trainer would otherwise skip the
epoch's first batches by iterating the sampler over them (accelerate's
``skip_first_batches``); here the sampler is already past them and hands the Trainer that
many empty placeholders instead (:class:`TrainerBatches`), so that no batch is read, built
or planned again and the Trainer's own step count stays as it expects.

The DataLoader is not handed to ``accelerate``: arrowmt's samplers already deal each rank
its own batches (rank and world size from ``torch.distributed``, which ``TrainingArguments``
sets up: build the sampler after the arguments, or pass ``num_replicas``/``rank``), and the
Trainer moves each batch to the device itself.

Needs ``transformers`` (and ``accelerate``, which ``Trainer`` uses): ``pip install
'arrowmt[transformers]'``.
"""

from __future__ import annotations

import inspect
import itertools
import json
import os
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from arrowmt._arrays import grown
from arrowmt._checks import check_integer, check_optional_integer
from arrowmt._errors import InputDataError, InvalidParameterError
from arrowmt._optional import require
from arrowmt.files import write_bytes_atomic
from arrowmt.format import SOURCE, TARGET, TOKENS, SpecialIds
from arrowmt.integrations.accelerators import has_accelerator
from arrowmt.integrations.workers import advise_workers
from arrowmt.reading import Spans
from arrowmt.training import GatheredBatch, GatheredBlocks, PlanSampler, as_tensor, check_padding, pad_rows, pad_shifted

_transformers = require("transformers", "transformers", "the transformers integration")
_trainer_utils = require("transformers.trainer_utils", "transformers", "the transformers integration")
_trainer = require("transformers.trainer", "transformers", "the transformers integration")

LABEL_PAD = -100  # the label id Hugging Face losses ignore
STATE_FILE = "arrowmt-sampler-{rank}.json"  # in each checkpoint folder, one per rank

# ----- collating --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TransformersCollater:
    """``collate_fn`` giving a Hugging Face model its keyword arguments, right-padded int64 tensors; picklable.

    * parallel rows (``source``, ``target``: ``open_dataset``): ``input_ids`` = the sources,
      ``attention_mask``, ``labels`` = the targets with ``label_pad_token_id`` (-100) for
      padding, ``decoder_input_ids`` = ``[decoder_start_token_id] + target[:-1]`` padded with
      ``pad`` (the default start is ``eos``, as fairseq's ``prev_output_tokens``; Marian models
      start with ``pad``: pass ``model.config.decoder_start_token_id``);
    * token blocks (``open_blocks``) or monolingual rows (``tokens``): ``input_ids`` = the
      tokens, ``attention_mask``, ``labels`` = the tokens with -100 for padding (a causal
      language model shifts them itself: position i predicts token i + 1).

    Rows keep the batch order. ``pad_to_multiple_of`` rounds the width up. ``shapes`` (a ``TokenBatchSampler``'s
    ``batch_shapes()``; the trainers pass them for a sampler made with ``batch_shapes=N``) pads each parallel batch
    to the first shape that holds it, adding rows of one ``eos`` source token and no label (id -1 in no output).
    """

    special_ids: SpecialIds = field(default_factory=SpecialIds)
    _: KW_ONLY
    decoder_start_token_id: int | None = None
    label_pad_token_id: int = LABEL_PAD
    pad_to_multiple_of: int = 1
    shapes: Sequence[tuple[int, int, int]] | None = None

    @classmethod
    def for_model(cls, dataset: Any, model: Any, **options: Any) -> TransformersCollater:
        """The collater of the arrowmt ``dataset`` (its special ids) for ``model``: an encoder-decoder's
        ``config.decoder_start_token_id``; a model sharing one embedding between source and target is refused when
        ``dataset`` has two dictionaries (:func:`check_shared_embeddings`). The trainers' default ``data_collator``;
        ``options``: the other fields."""
        special_ids = getattr(dataset, "special_ids", None)
        if not isinstance(special_ids, SpecialIds):
            raise InvalidParameterError(
                "train_dataset: expected an arrowmt dataset (open_dataset or open_blocks: it knows its special ids), "
                f"got {type(dataset).__name__}; or pass data_collator=TransformersCollater(...)"
            )
        check_shared_embeddings(model, dataset)
        config = getattr(model, "config", None)
        start = getattr(config, "decoder_start_token_id", None)
        encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        return cls(special_ids, decoder_start_token_id=start if encoder_decoder else None, **options)

    def __post_init__(self) -> None:
        check_padding(self.special_ids, self.pad_to_multiple_of, self.shapes)
        check_optional_integer("decoder_start_token_id", self.decoder_start_token_id, 0)
        check_integer("label_pad_token_id", self.label_pad_token_id, -(2**63), 2**63, high_name="2**63")

    def __call__(self, batch: GatheredBlocks | GatheredBatch | Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if isinstance(batch, GatheredBlocks):
            return self._causal(batch.tokens)
        gathered = GatheredBatch.from_samples(batch)
        if TOKENS in gathered.columns:
            return self._causal(gathered.columns[TOKENS])
        missing = [name for name in (SOURCE, TARGET) if name not in gathered.columns]
        if missing:
            raise InvalidParameterError(
                f"batch: expected columns {[SOURCE, TARGET]} (or {TOKENS!r}, or token blocks), "
                f"got {list(gathered.columns)}"
            )
        shape = gathered.holding_shape(self.shapes) if self.shapes is not None else None
        return self._seq2seq(gathered.columns[SOURCE], gathered.columns[TARGET], shape)

    def _causal(self, spans: Spans) -> dict[str, torch.Tensor]:
        tokens = pad_rows(spans, self.special_ids.pad, self.pad_to_multiple_of, False)
        mask = _mask(tokens.shape, spans.lengths)
        return {
            "input_ids": as_tensor(tokens),
            "attention_mask": as_tensor(mask),
            "labels": as_tensor(np.where(mask, tokens, self.label_pad_token_id)),
        }

    def _seq2seq(
        self, source: Spans, target: Spans, shape: tuple[int, int, int] | None = None
    ) -> dict[str, torch.Tensor]:
        ids, multiple = self.special_ids, self.pad_to_multiple_of
        height, widths = (None, (None, None)) if shape is None else (shape[0], shape[1:])
        # rows up to the shape's: a source of one eos (its mask 1), no label
        inputs = pad_rows(source, ids.pad, multiple, False, widths[0], height, ids.eos)
        labels, decoder_inputs = pad_shifted(target, ids, multiple, False, widths[1], height)
        source_lengths, target_lengths = grown(source.lengths, height, 1), grown(target.lengths, height, 0)
        if self.decoder_start_token_id is not None and decoder_inputs.shape[1]:
            decoder_inputs[:, 0] = self.decoder_start_token_id
        return {
            "input_ids": as_tensor(inputs),
            "attention_mask": as_tensor(_mask(inputs.shape, source_lengths)),
            "labels": as_tensor(np.where(_mask(labels.shape, target_lengths), labels, self.label_pad_token_id)),
            "decoder_input_ids": as_tensor(decoder_inputs),
        }


def _mask(shape: tuple[int, ...], lengths: np.ndarray) -> np.ndarray:
    """1 where a ``(rows, width)`` right-padded matrix holds a token, 0 on padding."""
    return (np.arange(shape[1])[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)


# ----- the sampler inside a Trainer -------------------------------------------------------------


def _fingerprint(dataset: Any) -> object:
    """The content identity of an arrowmt dataset (split, view, mixture, blocks); its identity otherwise."""
    fingerprint = getattr(dataset, "fingerprint", None)
    return fingerprint() if callable(fingerprint) else id(dataset)


class TrainerBatches(Sampler[list[int]]):
    """An arrowmt batch sampler as a Trainer iterates it: epochs of a fixed length, a position to resume from.

    The Trainer plans its steps once, from the length of the first epoch; an arrowmt epoch may be longer or
    shorter than the first (sampled segmentations plan each epoch from its own lengths). So the Trainer's epochs
    are windows of ``len(self)`` batches (the sampler's first epoch's) over the sampler's epochs one after another,
    the sampler moving to its next epoch when one ends: with one plan for every epoch, the windows are the
    sampler's epochs (the Trainer's epoch ``e`` is the sampler's ``e + 1``).

    :meth:`count` counts the batches the model has trained on (the Trainer's ``training_step`` calls it);
    :meth:`state_dict` records the sampler's position after the last of them. Each Trainer epoch continues from that
    position (batches a stopped epoch had read ahead are read again). After :meth:`resume`, the next iteration
    starts with as many empty placeholders as the Trainer's ``skip_first_batches`` discards, then continues where
    the state says.
    """

    def __init__(self, sampler: PlanSampler) -> None:
        if not isinstance(sampler, PlanSampler):
            raise InvalidParameterError(
                "batch_sampler: expected an arrowmt TokenBatchSampler or BlockBatchSampler, "
                f"got {type(sampler).__name__}"
            )
        self.sampler = sampler
        self.length = len(sampler)
        self._handed: deque[tuple[dict[str, Any], int]] = deque()  # each epoch batches came from: state, length
        self._trained = 0  # batches trained on in the oldest of those epochs (its position)
        self._placeholders = 0
        self._resumed = False

    def __len__(self) -> int:
        return self.length

    def rows_per_batch(self) -> float:
        """The mean rows of a batch of the sampler's current plan (every rank's batches together)."""
        plan = self.sampler.plan
        return plan.samples / max(len(plan), 1)

    def set_epoch(self, epoch: int) -> None:
        """The Trainer's epoch ``epoch`` (from 0): its first starts the sampler's epoch 1 afresh, unless a state was
        loaded; the others are windows over the sampler's next batches (see the class)."""
        if epoch == 0 and not self._resumed:
            self.sampler.set_epoch(1)
            self._handed = deque()
        self._resumed = False

    def __iter__(self) -> Iterator[list[int]]:
        placeholders, self._placeholders = self._placeholders, 0
        if self._handed:  # from the last batch trained on, not from what an earlier epoch read ahead
            self.sampler.load_state_dict(self.state_dict())
            self._handed = deque()
        window = itertools.islice(self._epochs(), self.length - placeholders)
        return itertools.chain(itertools.repeat([], placeholders), window)

    def _epochs(self) -> Iterator[list[int]]:
        """The sampler's batches from where it stands, epoch after epoch."""
        while True:
            if self.sampler.batches_done >= len(self.sampler):
                self.sampler.set_epoch(self.sampler.epoch + 1)
            state = self.sampler.state_dict()
            if not self._handed:
                self._trained = state["batches_done"]
            self._handed.append((state, len(self.sampler)))
            yield from self.sampler

    def count(self) -> None:
        """One more batch trained on."""
        if len(self._handed) > 1 and self._trained >= self._handed[0][1]:
            self._handed.popleft()  # the batch is the next epoch's first
            self._trained = self._handed[0][0]["batches_done"]
        self._trained += 1

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state after the last batch trained on (batches read ahead are not counted)."""
        return {**self._handed[0][0], "batches_done": self._trained} if self._handed else self.sampler.state_dict()

    def resume(self, state: dict[str, Any], skipped: int) -> None:
        """Load ``state``; ``skipped``: the batches the Trainer will skip at the start of its epoch (placeholders)."""
        self.sampler.load_state_dict(state)
        self._handed, self._resumed = deque(), True
        self._placeholders = skipped if 0 < skipped < self.length else 0


class _EpochLoader(DataLoader):
    """A DataLoader whose ``set_epoch`` (which the Trainer calls) reaches the batch sampler."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]


class SamplerCheckpoint(_transformers.TrainerCallback):  # type: ignore[misc]
    """Saves the sampler's position in every checkpoint folder (``arrowmt-sampler-<rank>.json``)."""

    def __init__(self, batches: TrainerBatches) -> None:
        self.batches = batches

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        folder = Path(args.output_dir) / f"{_trainer_utils.PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.batches.state_dict(), indent=1, sort_keys=True) + "\n"
        write_bytes_atomic(folder / STATE_FILE.format(rank=args.process_index), text.encode("utf-8"))


def load_sampler_state(checkpoint: str | os.PathLike[str], rank: int) -> dict[str, Any]:
    """The sampler state rank ``rank`` saved in ``checkpoint`` (rank 0's when this rank saved none: another
    world size, which arrowmt's samplers resume from any rank's state)."""
    folder = Path(checkpoint)
    for name in (STATE_FILE.format(rank=rank), STATE_FILE.format(rank=0)):
        path = folder / name
        if path.is_file():
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
            except RecursionError:
                raise InputDataError(
                    f"{path}: expected an arrowmt sampler state (JSON), got one nested too deeply"
                ) from None
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise InputDataError(f"{path}: expected an arrowmt sampler state (JSON), got: {exc}") from None
            if not isinstance(state, dict):
                raise InputDataError(f"{path}: expected a JSON object, got {type(state).__name__}")
            return state
    raise InputDataError(
        f"{folder}: no {STATE_FILE.format(rank=rank)} (the arrowmt sampler's position): expected a checkpoint "
        "saved by ArrowMTTrainer/ArrowMTSeq2SeqTrainer"
    )


def check_shared_embeddings(model: Any, dataset: Any) -> None:
    """InvalidParameterError when ``model`` shares one embedding between its encoder and decoder but ``dataset``'s
    source and target have different dictionaries (source id k and target id k would share a row: it trains, on
    nothing)."""
    config = getattr(model, "config", None)
    shared = getattr(config, "share_encoder_decoder_embeddings", None)
    inner = getattr(model, "model", model)
    if shared is False or not (shared or hasattr(inner, "shared") or hasattr(model, "shared")):
        return
    dictionary = getattr(dataset, "dictionary", None)
    columns = getattr(dataset, "columns", ())
    if dictionary is None or SOURCE not in columns or TARGET not in columns:
        return
    source, target = dictionary(SOURCE), dictionary(TARGET)
    if source.symbols != target.symbols:
        raise InvalidParameterError(
            f"model: shares one embedding between source and target (config.share_encoder_decoder_embeddings), "
            f"but train_dataset has two dictionaries ({len(source)} source and {len(target)} target types): source id "
            "k and target id k would share a row; convert with one dictionary (convert text --joined-dictionary, "
            "fairseq-preprocess --joined-dictionary) or build the model with share_encoder_decoder_embeddings=False"
        )


# ----- the trainers -----------------------------------------------------------------------------


class _ArrowMTBatches:
    """What both trainers add to ``Trainer``: the arrowmt batch sampler, its checkpoints and resume."""

    def __init__(self, *args: Any, batch_sampler: PlanSampler, **kwargs: Any) -> None:
        self._batches = TrainerBatches(batch_sampler)
        given = inspect.signature(super().__init__).bind_partial(*args, **kwargs).arguments  # type: ignore[misc]
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        if given.get("data_collator") is None:
            spec = getattr(batch_sampler, "spec", None)
            shaped = {"shapes": batch_sampler.batch_shapes()} if getattr(spec, "batch_shapes", None) else {}
            self.data_collator = TransformersCollater.for_model(self.train_dataset, self.model, **shaped)  # type: ignore[attr-defined]
        self._check_world()
        self._check_dataset()
        check_shared_embeddings(self.model, self.train_dataset)  # type: ignore[attr-defined]
        self._fit_arguments()
        self.add_callback(SamplerCheckpoint(self._batches))  # type: ignore[attr-defined]

    def _check_world(self) -> None:
        sampler, run = self._batches.sampler, self.args  # type: ignore[attr-defined]
        if (sampler.num_replicas, sampler.rank) != (run.world_size, run.process_index):
            raise InvalidParameterError(
                f"batch_sampler: expected rank {run.process_index} of {run.world_size} (the Trainer's), got rank "
                f"{sampler.rank} of {sampler.num_replicas}: build the sampler after the TrainingArguments (they set "
                "up torch.distributed) or pass num_replicas and rank"
            )

    def _fit_arguments(self) -> None:
        """Pinned memory only where an accelerator reads it (a CPU run would warn at every loader)."""
        if self.args.dataloader_pin_memory and not has_accelerator():  # type: ignore[attr-defined]
            self.args.dataloader_pin_memory = False  # type: ignore[attr-defined]

    def get_total_train_batch_size(self, args: Any) -> int:
        """Rows a step trains on, every process and accumulated batch together: the Trainer counts
        ``per_device_train_batch_size`` rows a batch (its ``train_samples_per_second`` and "Total train batch size"
        come from this); an arrowmt batch holds a token budget, its rows are the plan's mean."""
        batches_a_step = super().get_total_train_batch_size(args) // max(self._train_batch_size, 1)  # type: ignore[misc]
        return max(round(self._batches.rows_per_batch() * batches_a_step), 1)

    def _get_collator_with_removed_columns(self, data_collator: Any, description: str | None = None) -> Any:
        """The collater as it is: arrowmt's rows are not `datasets` rows, and its collaters make exactly the model's
        inputs, so the Trainer's column-removing wrapper (``remove_unused_columns``) has nothing to remove."""
        return data_collator

    def _check_dataset(self) -> None:
        planned, given = self._batches.sampler.dataset, self.train_dataset  # type: ignore[attr-defined]
        if planned is not None and given is not None and _fingerprint(planned) != _fingerprint(given):
            raise InvalidParameterError(
                f"batch_sampler: expected a sampler over train_dataset ({given!r}), got one over {planned!r}: "
                "its batches would index rows of another dataset"
            )

    def get_train_dataloader(self) -> DataLoader:
        """The training batches: the arrowmt sampler's, collated by ``data_collator``."""
        if self.train_dataset is None:  # type: ignore[attr-defined]
            raise InvalidParameterError("train_dataset: expected the dataset the batch sampler plans, got None")
        args = self.args  # type: ignore[attr-defined]
        workers = args.dataloader_num_workers
        advise_workers(workers, "TrainingArguments(dataloader_num_workers)", "dataloader_num_workers=0")
        return _EpochLoader(
            self.train_dataset,  # type: ignore[attr-defined]
            batch_sampler=self._batches,
            collate_fn=self.data_collator,  # type: ignore[attr-defined]
            num_workers=workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None,
        )

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self._batches.count()
        return super().training_step(*args, **kwargs)  # type: ignore[misc]

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``; from a checkpoint, the sampler continues with the batch that came next."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = _trainer_utils.get_last_checkpoint(self.args.output_dir) or True  # type: ignore[attr-defined]
        if isinstance(checkpoint, (str, os.PathLike)):
            state = load_sampler_state(checkpoint, self.args.process_index)  # type: ignore[attr-defined]
            self._batches.resume(state, self._skipped(Path(checkpoint)))
        return super().train(checkpoint, *args, **kwargs)  # type: ignore[misc]

    def _skipped(self, checkpoint: Path) -> int:
        """The batches the Trainer skips at the start of its epoch when it resumes from ``checkpoint``: its own
        arithmetic (``Trainer._init_training_state``), over this world's epoch length."""
        args = self.args  # type: ignore[attr-defined]
        if args.ignore_data_skip:
            return 0
        state = _transformers.TrainerState.load_from_json(str(checkpoint / _trainer.TRAINER_STATE_NAME))
        accumulation = args.gradient_accumulation_steps
        per_epoch = max(len(self._batches) // accumulation + int(len(self._batches) % accumulation > 0), 1)
        return int(state.global_step % per_epoch) * accumulation


class ArrowMTTrainer(_ArrowMTBatches, _transformers.Trainer):  # type: ignore[misc]
    """``transformers.Trainer`` training on an arrowmt batch sampler (``batch_sampler=``); see the module docstring."""


class ArrowMTSeq2SeqTrainer(_ArrowMTBatches, _transformers.Seq2SeqTrainer):  # type: ignore[misc]
    """``transformers.Seq2SeqTrainer`` training on an arrowmt batch sampler (``batch_sampler=``)."""
