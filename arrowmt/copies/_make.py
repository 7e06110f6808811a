"""``arrowmt order``: a copy of a corpus whose training split is stored in the order its batch plan reads it
(sentence rows, or a monolingual split's LM blocks).

Training reads each batch's rows from all over a split (fairseq's batches are rows of
similar length, drawn across the corpus). When the corpus does not fit in memory, or sits
on object storage, every such row costs a page or a block. The copy stores the rows of each
planned batch together, one batch after another (the batches are still shuffled per epoch),
and keeps the original row numbers and the plan's batch offsets (:mod:`arrowmt.stored._row_order`):
a sampler with the same batching options reads that plan from the copy instead of building
it (:mod:`arrowmt.stored._stored_plan`), and each batch is one contiguous read.
Other options still give the original's batches, with less locality.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from arrowmt._errors import InvalidParameterError
from arrowmt.blocks import (
    BlockParams,
    TokenStream,
    cache_folder,
    check_monolingual,
    load_block_plan,
    load_blocks,
    table_source,
    write_table,
)
from arrowmt.bucketing import plan_order
from arrowmt.copies._block_rows import BlockRows
from arrowmt.copies._write import write_copy, write_reordered
from arrowmt.format import BLOCK_ORDER_KEY, TOKENS, Manifest
from arrowmt.plans import BlockSpec, PlanParams, load_plan, plan_fields
from arrowmt.reading import local_only
from arrowmt.splits import Split
from arrowmt.storage import local_output
from arrowmt.stored import ROWS, block_order_name, ordered_by, refuse_stored_order

ORDER_CACHE_SUFFIX = ".arrowmt-order"  # the plan's folder beside OUT while the copy is made
CHUNK_TOKENS = 1 << 22  # tokens of blocks a block copy gathers at a time (16 MiB; ~170 MiB peak, temporaries too)


def order_copy(
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    split: str = "train",
    cache_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **batching: int | bool | None,
) -> Manifest:
    """Copy ``corpus`` to ``out`` with ``split`` stored in the order of the plan a
    :class:`~arrowmt.TokenBatchSampler` with the options ``batching`` makes (its names and defaults:
    ``max_tokens=4096``, ``max_sentences``, ``required_batch_size_multiple=1``, ``max_source_positions``,
    ``max_target_positions``, ``seed=1``, ``skip_invalid_size_inputs=False``).

    ``cache_dir``: where the plan is read from or built into (default: a folder beside ``out``, removed after; the
    corpus is only read, so a read-only one is copied too). ``out`` must lie outside the corpus."""
    params = PlanParams.of_options(batching, "order_copy")
    check_out(corpus, out)
    data = Split(corpus, split)
    with plan_cache(out, cache_dir) as folder:
        plan = load_plan(data, params, folder)
        order = plan_order(plan.indices, len(data))
        ordered = ordered_by(split, plan.key, plan_fields(params))
        return write_reordered(corpus, out, split, order, plan.offsets, ordered, overwrite=overwrite, progress=progress)


def order_blocks(
    corpus: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    split: str = "train",
    tokens_per_sample: int | None = 1024,
    break_mode: str = "none",
    document_sep_len: int = 1,
    cache_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **batching: int | bool | None,
) -> Manifest:
    """Copy the monolingual ``corpus`` to ``out`` with the LM blocks of ``split`` (``tokens_per_sample``,
    ``break_mode``, ``document_sep_len`` as :func:`~arrowmt.open_blocks` takes them) stored in the order of the
    plan a :class:`~arrowmt.BlockBatchSampler` with the options ``batching`` makes (its names and defaults:
    ``max_tokens=4096``, ``max_sentences``, ``required_batch_size_multiple=1``, ``max_positions``, ``seed=1``,
    ``skip_invalid_size_inputs=False``).

    The copy gives the same blocks, batches and samples for those block options, and each of that plan's
    batches is one contiguous read; its rows are pieces of blocks, so only the LM block readers open it.
    ``cache_dir`` and ``out`` as in :func:`order_copy`."""
    spec = BlockSpec.of_options(batching, "order_blocks")
    params = BlockParams(tokens_per_sample, break_mode, document_sep_len)
    if params.break_mode == "eos":
        raise InvalidParameterError(
            "break_mode: expected 'none', 'complete' or 'complete_doc' (break mode 'eos' has no copy in plan order: "
            "its blocks are the rows, read from the corpus as converted), got 'eos'"
        )
    check_out(corpus, out)
    data = Split(corpus, split)
    refuse_stored_order(data.manifest, data.path, "order", reads=(ROWS,))
    check_monolingual(data)
    stream = TokenStream(data)
    with plan_cache(out, cache_dir) as cache:
        table = load_blocks(stream, params, cache)
        plan = load_block_plan(table, spec, cache_folder(data, cache), f"{data.path} split {split!r}", params)
        chunk = max(1, CHUNK_TOKENS // (tokens_per_sample or 1))
        rows = BlockRows(stream, table, plan_order(plan.indices, len(table)), chunk)

        def side(folder: Path) -> dict[str, object]:
            name = block_order_name(split)
            write_table(folder / name, table.key, len(rows), rows.tokens, rows.starts, rows.ends, rows.offsets)
            entry = {"file": name, "table": table.key, "source": table_source(data), "blocks": params.key_fields(),
                     "plan": spec.key_fields()}  # fmt: skip
            return {BLOCK_ORDER_KEY: {split: entry}}

        return write_copy(
            corpus, out, split, lambda _data: {TOKENS: rows}, side, overwrite=overwrite, progress=progress
        )


def check_out(corpus: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """InvalidParameterError unless ``corpus`` is a folder's path and ``out`` lies outside it (and it outside ``out``):
    a copy written over its corpus (``order C C --overwrite``) would replace the only original."""
    for name, value in (("corpus", corpus), ("out", out)):
        if not isinstance(value, str | os.PathLike):
            raise InvalidParameterError(
                f"{name}: expected the path of an arrowmt folder (a copy is made of a whole split, not of a view or "
                f"a mixture), got {type(value).__name__}"
            )
    source, target = local_only(corpus, "corpus", "order").resolve(), local_output(out).resolve()
    if target == source or source in target.parents or target in source.parents:
        raise InvalidParameterError(
            f"out: expected a folder outside the corpus {corpus} (the copy would replace or hold the original), "
            f"got {out}"
        )


@contextlib.contextmanager
def plan_cache(out: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None) -> Iterator[Path]:
    """Where a copy's plan (and block table) is built: ``cache_dir`` when given, else a folder beside ``out``
    (``.OUT.arrowmt-order``), removed afterwards. Nothing is written into the corpus."""
    if cache_dir is not None:
        yield Path(cache_dir)
        return
    target = local_output(out)
    folder = target.parent / f".{target.name}{ORDER_CACHE_SUFFIX}"
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
