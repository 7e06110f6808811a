"""Turn a batch of rows into padded int64 tensors, fairseq's way or plainly.

``Collater`` takes what the DataLoader gives it: a ``GatheredBatch`` (from
``ArrowMTDataset.__getitems__``, the fast path) or a list of sample dicts
(``ds[i]`` or fairseq samples). Each column is padded in one fancy-indexing
step straight out of the memory map.

Modes:

* ``"fairseq"``, parallel data: exactly ``LanguagePairDataset.collater``: rows
  sorted by descending non-pad source length with ``torch.sort`` as fairseq does
  (not stable: ties keep batch order only up to 16 rows), source left-padded,
  ``prev_output_tokens`` = ``[eos] + target[:-1]`` padded like the target,
  ``ntokens`` = non-pad target tokens, an empty batch gives ``{}``.
* ``"fairseq"``, monolingual (``tokens``) data: exactly fairseq's language
  model pipeline (``MonolingualDataset`` over ``TokenBlockDataset`` with
  ``break_mode="eos"``, ``include_targets=True``, ``targets=["future"]``):
  ``target`` = the tokens, ``src_tokens`` = ``[eos] + tokens[:-1]`` (so the
  target is the input shifted left by one: position i predicts token i),
  ``src_lengths`` = row lengths, ``ntokens`` = their sum, batch order kept.
  Monolingual rows are decoder tokens, so they follow ``left_pad_target``
  (fairseq language models pad on the right).
* ``"plain"``: ``{"id", <column>, <column>_lengths, ...}`` in batch order
  (monolingual: ``{"id", "tokens", "lengths"}``), right-padded unless
  ``left_pad_source``/``left_pad_target`` ask otherwise. An empty batch from
  ``__getitems__`` gives ``(0, 0)`` tensors per column; an empty list of
  samples names no columns, so it gives only an empty ``id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from arrowmt._errors import InvalidParameterError
from arrowmt.format._schema import SOURCE, TARGET, TOKENS
from arrowmt.training._batch import GatheredBatch, Spans
from arrowmt.training._gather import gather_padded, gather_padded_shifted, padded_width

MODES = ("fairseq", "plain")


class Collater:
    """Callable collate_fn for ``torch.utils.data.DataLoader``; picklable (plain attributes only).

    ``left_pad_source``/``left_pad_target`` default (None) to the mode's
    convention: fairseq pads the source left and the target right; plain pads
    everything right.
    """

    def __init__(
        self,
        pad: int = 1,
        eos: int = 2,
        left_pad_source: bool | None = None,
        left_pad_target: bool | None = None,
        mode: str = "fairseq",
        input_feeding: bool = True,
        pad_to_multiple: int = 1,
    ) -> None:
        _check_params(pad, eos, mode, pad_to_multiple)
        self.pad = int(pad)
        self.eos = int(eos)
        self.mode = mode
        fairseq = mode == "fairseq"
        self.left_pad_source = fairseq if left_pad_source is None else bool(left_pad_source)
        self.left_pad_target = False if left_pad_target is None else bool(left_pad_target)
        self.input_feeding = bool(input_feeding)
        self.pad_to_multiple = int(pad_to_multiple)

    @classmethod
    def for_dataset(cls, ds: Any, **kw: Any) -> Collater:
        """A collater using ``ds.special_ids`` for pad and eos; other ``kw`` as for ``__init__``."""
        ids = ds.special_ids
        return cls(**{"pad": ids.pad, "eos": ids.eos, **kw})

    def __repr__(self) -> str:
        return (
            f"Collater(pad={self.pad}, eos={self.eos}, left_pad_source={self.left_pad_source}, "
            f"left_pad_target={self.left_pad_target}, mode={self.mode!r}, "
            f"input_feeding={self.input_feeding}, pad_to_multiple={self.pad_to_multiple})"
        )

    def __call__(self, batch: GatheredBatch | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        gathered = GatheredBatch.from_samples(batch)
        if self.mode == "plain":
            return self._plain(gathered)
        if len(gathered) == 0:
            return {}
        if TOKENS in gathered.columns:
            return self._fairseq_lm(gathered)
        _require(gathered, (SOURCE, TARGET))
        return self._fairseq_pair(gathered)

    def _pad(self, spans: Spans, left_pad: bool) -> np.ndarray:
        width = padded_width(spans.lengths, multiple=self.pad_to_multiple)
        return gather_padded(spans.words, spans.starts, spans.lengths, width, self.pad, left_pad)

    def _pad_shifted(self, spans: Spans, left_pad: bool) -> tuple[np.ndarray, np.ndarray]:
        """The padded rows and the same rows as ``[eos] + row[:-1]`` (fairseq's decoder input)."""
        width = padded_width(spans.lengths, multiple=self.pad_to_multiple)
        return gather_padded_shifted(spans.words, spans.starts, spans.lengths, width, self.pad, self.eos, left_pad)

    def _fairseq_pair(self, batch: GatheredBatch) -> dict[str, Any]:
        src, src_lengths, order = self._fairseq_source(batch.columns[SOURCE])
        target_spans = batch.columns[TARGET].select(order)
        net_input = {"src_tokens": _tensor(src), "src_lengths": _tensor(src_lengths)}
        if self.input_feeding:
            target, prev = self._pad_shifted(target_spans, self.left_pad_target)
            net_input["prev_output_tokens"] = _tensor(prev)
        else:
            target = self._pad(target_spans, self.left_pad_target)
        return {
            "id": _tensor(batch.ids[order]),
            "nsentences": len(batch),
            "ntokens": int(np.count_nonzero(target != self.pad)),
            "net_input": net_input,
            "target": _tensor(target),
        }

    def _fairseq_source(self, spans: Spans) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded sources in fairseq's order, their non-pad lengths, and that order.

        fairseq sorts on non-pad token counts. They equal the row lengths unless
        a row holds pad tokens; only then is the order redone from the counts.
        """
        order = _fairseq_order(spans.lengths)
        src = self._pad(spans.select(order), self.left_pad_source)
        nonpad = src != self.pad
        if np.count_nonzero(nonpad) == np.add.reduce(spans.lengths):
            return src, spans.lengths[order], order
        counts = np.empty_like(order)
        counts[order] = nonpad.sum(axis=1)
        order = _fairseq_order(counts)
        return self._pad(spans.select(order), self.left_pad_source), counts[order], order

    def _fairseq_lm(self, batch: GatheredBatch) -> dict[str, Any]:
        spans = batch.columns[TOKENS]
        target, source = self._pad_shifted(spans, self.left_pad_target)
        return {
            "id": _tensor(batch.ids),
            "nsentences": len(batch),
            "ntokens": int(spans.lengths.sum()),
            "net_input": {"src_tokens": _tensor(source), "src_lengths": _tensor(spans.lengths)},
            "target": _tensor(target),
        }

    def _plain(self, batch: GatheredBatch) -> dict[str, Any]:
        out: dict[str, Any] = {"id": _tensor(batch.ids)}
        for name, spans in batch.columns.items():
            left = self.left_pad_source if name == SOURCE else self.left_pad_target
            out[name] = _tensor(self._pad(spans, left))
            out["lengths" if name == TOKENS else f"{name}_lengths"] = _tensor(spans.lengths)
        return out


def _fairseq_order(src_lengths: np.ndarray) -> np.ndarray:
    """Batch order by descending source length, ties broken exactly as fairseq's collater does.

    fairseq calls ``torch.sort(descending=True)``, which is not stable: past 16
    rows, equal lengths come out in an order of torch's choosing. The same call
    on the same int64 lengths reproduces that order exactly.
    """
    lengths = np.asarray(src_lengths, dtype=np.int64)
    if not lengths.flags.writeable:  # torch warns on read-only arrays
        lengths = lengths.copy()
    return torch.from_numpy(lengths).sort(descending=True).indices.numpy()


def _tensor(array: np.ndarray) -> torch.Tensor:
    """int64 tensor owning ``array``'s memory (arrays here are fresh, so no copy)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))


def _require(batch: GatheredBatch, names: tuple[str, ...]) -> None:
    missing = [n for n in names if n not in batch.columns]
    if missing:
        raise InvalidParameterError(f"batch: expected columns {list(names)} (or {TOKENS!r}), got {list(batch.columns)}")


def _check_params(pad: int, eos: int, mode: str, pad_to_multiple: int) -> None:
    if mode not in MODES:
        raise InvalidParameterError(f"mode: expected one of {list(MODES)}, got {mode!r}")
    if int(pad_to_multiple) < 1:
        raise InvalidParameterError(f"pad_to_multiple: expected >= 1, got {pad_to_multiple}")
    for name, value in (("pad", pad), ("eos", eos)):
        if int(value) < 0:
            raise InvalidParameterError(f"{name}: expected a token id >= 0, got {value}")
