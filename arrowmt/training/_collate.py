"""Collaters: a plan batch's rows into a training batch of padded int64 tensors, fairseq's way or plainly.

Both take what the DataLoader gives them: a ``GatheredBatch`` (from
``ArrowMTDataset.__getitems__``, the fast path) or a list of sample dicts (``ds[i]``
or fairseq samples), and pad each column in one fancy-indexing step straight out of
the memory map. Pad and eos ids come from ``special_ids`` (a dataset's ``special_ids``).

:class:`FairseqCollater` gives the layout of the fairseq dataset the columns call for:

* parallel data (``source``, ``target``): exactly ``LanguagePairDataset.collater``:
  rows sorted by descending non-pad source length with ``torch.sort`` as fairseq does
  (not stable: ties keep batch order only up to 16 rows), source left-padded,
  ``prev_output_tokens`` = ``[eos] + target[:-1]`` padded like the target,
  ``ntokens`` = non-pad target tokens;
* monolingual data (``tokens``): exactly fairseq's language model pipeline
  (``MonolingualDataset`` over ``TokenBlockDataset`` with ``break_mode="eos"``,
  ``include_targets=True``, ``targets=["future"]``): ``target`` = the tokens,
  ``src_tokens`` = ``[eos] + tokens[:-1]`` (position i predicts token i),
  ``src_lengths`` = row lengths, ``ntokens`` = their sum, batch order kept. The rows
  are decoder tokens, so they follow ``left_pad_target`` (fairseq pads them right);
* an empty batch gives ``{}``, as fairseq's collaters do.

:class:`PlainCollater` gives ``{"id", <column>, <column>_lengths, ...}`` in batch order
(monolingual: ``{"id", "tokens", "lengths"}``), right-padded unless ``left_pad_source``/
``left_pad_target`` ask otherwise. An empty batch from ``__getitems__`` gives ``(0, 0)``
tensors per column; an empty list of samples names no columns, so it gives only ``id``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypedDict

import numpy as np
import torch

from arrowmt._arrays import grown
from arrowmt._checks import check_integer
from arrowmt._errors import InvalidParameterError
from arrowmt.format import SOURCE, TARGET, TOKENS, SpecialIds
from arrowmt.reading import Spans
from arrowmt.training._batch import GatheredBatch
from arrowmt.training._gather import gather_padded, gather_padded_shifted, padded_width

Rows = GatheredBatch | Sequence[Mapping[str, Any]]


class FairseqBatch(TypedDict):
    """A fairseq training batch; ``net_input`` holds ``src_tokens``, ``src_lengths`` and, for
    translation with input feeding, ``prev_output_tokens``."""

    id: torch.Tensor
    nsentences: int
    ntokens: int
    net_input: dict[str, torch.Tensor]
    target: torch.Tensor


@dataclass(frozen=True)
class FairseqCollater:
    """``collate_fn`` building fairseq's training batches (see the module docstring); picklable.

    ``FairseqCollater(ds.special_ids)`` uses the dataset's pad and eos ids. The options
    are ``LanguagePairDataset``'s: fairseq pads the source left and the target right.
    """

    special_ids: SpecialIds = field(default_factory=SpecialIds)
    _: KW_ONLY
    left_pad_source: bool = True
    left_pad_target: bool = False
    input_feeding: bool = True
    pad_to_multiple: int = 1
    shapes: Sequence[tuple[int, int, int]] | None = None

    def __post_init__(self) -> None:
        check_padding(self.special_ids, self.pad_to_multiple, self.shapes, self.input_feeding)

    def __call__(self, batch: Rows) -> FairseqBatch | dict[str, object]:
        gathered = GatheredBatch.from_samples(batch)
        if len(gathered) == 0:
            return {}
        if TOKENS in gathered.columns:
            return self._language_model(gathered)
        missing = [name for name in (SOURCE, TARGET) if name not in gathered.columns]
        if missing:
            raise InvalidParameterError(
                f"batch: expected columns {[SOURCE, TARGET]} (or {TOKENS!r}), got {list(gathered.columns)}"
            )
        return self._translation(gathered)

    def _translation(self, batch: GatheredBatch) -> FairseqBatch:
        shape = batch.holding_shape(self.shapes) if self.shapes is not None else None
        height = None if shape is None else shape[0]  # rows added up to it: a source of one eos, no loss, id -1
        src, src_lengths, order = self._sorted_source(batch.columns[SOURCE], shape and shape[1])
        src = grown(src, height, self.special_ids.pad, self.special_ids.eos, self.left_pad_source)
        net_input = {"src_tokens": as_tensor(src), "src_lengths": as_tensor(grown(src_lengths, height, 1))}
        ids = grown(batch.ids[order], height, -1)
        target_spans = batch.columns[TARGET].select(order)
        if self.input_feeding:
            target, prev = pad_shifted(target_spans, self.special_ids, self.pad_to_multiple, self.left_pad_target,
                                       shape and shape[2], height)  # fmt: skip
            net_input["prev_output_tokens"] = as_tensor(prev)
        else:
            target = pad_rows(target_spans, self.special_ids.pad, self.pad_to_multiple, self.left_pad_target)
        return {
            "id": as_tensor(ids),
            "nsentences": len(batch),
            "ntokens": int(np.count_nonzero(target != self.special_ids.pad)),
            "net_input": net_input,
            "target": as_tensor(target),
        }

    def _sorted_source(self, spans: Spans, width: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded sources in fairseq's order (to ``width``, default the longest), their non-pad lengths, and that
        order.

        fairseq sorts on non-pad token counts. They equal the row lengths unless
        a row holds pad tokens; only then is the order redone from the counts.
        """
        pad, multiple = self.special_ids.pad, self.pad_to_multiple
        order = fairseq_order(spans.lengths)
        src = pad_rows(spans.select(order), pad, multiple, self.left_pad_source, width)
        nonpad = src != pad
        if np.count_nonzero(nonpad) == np.add.reduce(spans.lengths):
            return src, spans.lengths[order], order
        counts = np.empty_like(order)
        counts[order] = nonpad.sum(axis=1)
        order = fairseq_order(counts)
        return pad_rows(spans.select(order), pad, multiple, self.left_pad_source, width), counts[order], order

    def _language_model(self, batch: GatheredBatch) -> FairseqBatch:
        spans = batch.columns[TOKENS]
        target, source = pad_shifted(spans, self.special_ids, self.pad_to_multiple, self.left_pad_target)
        return {
            "id": as_tensor(batch.ids),
            "nsentences": len(batch),
            "ntokens": int(spans.lengths.sum()),
            "net_input": {"src_tokens": as_tensor(source), "src_lengths": as_tensor(spans.lengths)},
            "target": as_tensor(target),
        }


@dataclass(frozen=True)
class PlainCollater:
    """``collate_fn`` padding every column as it is, in batch order (see the module docstring); picklable.

    ``PlainCollater(ds.special_ids)`` pads with the dataset's pad id, on the right unless asked otherwise.
    """

    special_ids: SpecialIds = field(default_factory=SpecialIds)
    _: KW_ONLY
    left_pad_source: bool = False
    left_pad_target: bool = False
    pad_to_multiple: int = 1
    shapes: Sequence[tuple[int, int, int]] | None = None

    def __post_init__(self) -> None:
        check_padding(self.special_ids, self.pad_to_multiple, self.shapes)

    def __call__(self, batch: Rows) -> dict[str, torch.Tensor]:
        gathered = GatheredBatch.from_samples(batch)
        shape = gathered.holding_shape(self.shapes) if self.shapes is not None else None
        height = None if shape is None else shape[0]
        out = {"id": as_tensor(grown(gathered.ids, height, -1))}
        for name, spans in gathered.columns.items():  # rows up to the shape's: a source of one eos, a target of pads
            source = name == SOURCE
            left = self.left_pad_source if source else self.left_pad_target
            width = None if shape is None else shape[1 if source else 2]
            mark = self.special_ids.eos if source else None
            out[name] = as_tensor(
                pad_rows(spans, self.special_ids.pad, self.pad_to_multiple, left, width, height, mark)
            )
            out["lengths" if name == TOKENS else f"{name}_lengths"] = as_tensor(
                grown(spans.lengths, height, int(source))
            )
        return out


def pad_rows(spans: Spans, pad: int, multiple: int, left_pad: bool, width: int | None = None,
             height: int | None = None, mark: int | None = None) -> np.ndarray:  # fmt: skip
    """The rows as a ``(B, W)`` int64 matrix filled with ``pad``, W the longest row rounded up to ``multiple``
    (or ``width``, at least the longest row); with ``height``, rows of ``pad`` added up to it (:func:`grown`, each
    holding ``mark`` where a row's first token goes)."""
    width = padded_width(spans.lengths, multiple) if width is None else width
    rows = gather_padded(spans.words, spans.starts, spans.lengths, width, pad, left_pad)
    return grown(rows, height, pad, mark, left_pad)


def pad_shifted(spans: Spans, ids: SpecialIds, multiple: int, left_pad: bool, width: int | None = None,
                height: int | None = None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`pad_rows` and the same rows as ``[eos] + row[:-1]`` (fairseq's decoder input), from one gather; with
    ``height``, rows added up to it: targets of pads (no loss), decoder inputs of one ``eos`` (an attention row with
    a key)."""
    width = padded_width(spans.lengths, multiple) if width is None else width
    target, prev = gather_padded_shifted(spans.words, spans.starts, spans.lengths, width, ids.pad, ids.eos, left_pad)
    return grown(target, height, ids.pad), grown(prev, height, ids.pad, ids.eos, left_pad)


def check_padding(special_ids: SpecialIds, pad_to_multiple: int, shapes: Sequence[tuple[int, int, int]] | None = None,
                  input_feeding: bool = True) -> None:  # fmt: skip
    """The ids a collater writes are token ids (>= 0) and the width multiple is >= 1; a collater with ``shapes`` (a
    sampler's ``batch_shapes()``, none when its plan has no row) has ``pad_to_multiple`` 1 and ``input_feeding``."""
    if not isinstance(special_ids, SpecialIds):
        raise InvalidParameterError(
            f"special_ids: expected a SpecialIds (a dataset's special_ids), got {special_ids!r}"
        )
    check_integer("special_ids.pad", special_ids.pad, 0)
    check_integer("special_ids.eos", special_ids.eos, 0)
    check_integer("pad_to_multiple", pad_to_multiple, 1)
    if shapes is not None and (pad_to_multiple != 1 or not input_feeding):
        raise InvalidParameterError(
            f"shapes: expected with pad_to_multiple=1 (fairseq's --required-seq-len-multiple 1) and "
            f"input_feeding=True, got pad_to_multiple={pad_to_multiple}, input_feeding={input_feeding}"
        )


def fairseq_order(src_lengths: np.ndarray) -> np.ndarray:
    """Batch order by descending source length, ties broken exactly as fairseq's collater does.

    fairseq calls ``torch.sort(descending=True)``, which is not stable: past 16
    rows, equal lengths come out in an order of torch's choosing. The same call
    on the same int64 lengths reproduces that order exactly.
    """
    lengths = np.asarray(src_lengths, dtype=np.int64)
    if not lengths.flags.writeable:  # torch warns on read-only arrays
        lengths = lengths.copy()
    return torch.from_numpy(lengths).sort(descending=True).indices.numpy()


def as_tensor(array: np.ndarray) -> torch.Tensor:
    """int64 tensor owning ``array``'s memory (arrays here are fresh, so no copy)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
