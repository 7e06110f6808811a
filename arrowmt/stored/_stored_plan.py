"""The plan a copy in plan order was stored by (``arrowmt order``), read from the copy instead of built.

A copy made by :func:`arrowmt.order_copy` stores a split's rows batch after batch in the
order of one plan, and its row order file (:mod:`arrowmt.stored._row_order`) keeps that
plan's batch offsets; the manifest's provenance names the plan's fields under
:data:`ORDERED_BY_KEY`. A sampler that asks the copy for that plan gets a
:class:`StoredPlan`: batch ``b`` is ``order[offsets[b]:offsets[b + 1]]``, the very bytes that
then place its rows in one stretch of the files. Nothing is built (no row lengths are read
at setup), no plan file is written, and a batch reads no plan pages beside the row order's:
the batch offsets (8 bytes a batch) are read whole when the plan is opened (read-ahead asks for the pages
of the batches to come: :meth:`StoredPlan.word_ranges`), and a batch handed
out is noted with its stretch (:meth:`~arrowmt.stored.RowOrder.note`), so that reading it in
the same process needs no ``where`` lookup.
Its key is the key the built plan would have, so a sampler's state moves freely between the
two.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from arrowmt._errors import FormatError
from arrowmt.files import check_batch_offsets, check_contents, checked_batch
from arrowmt.format import Manifest
from arrowmt.io import WordRanges
from arrowmt.reading import FileIdentity, indices_within
from arrowmt.stored._block_order import block_orders
from arrowmt.stored._row_order import ORDERED_BY_KEY, RowOrder, open_row_order

if TYPE_CHECKING:
    from arrowmt.stored._stretches import Copy

logger = logging.getLogger(__name__)


def ordered_by(split: str, original_key: str, fields: Mapping[str, object]) -> dict[str, object]:
    """The provenance entry of a copy of ``split`` stored by the plan of ``fields`` (key ``original_key`` in the
    original corpus)."""
    return {"split": split, "plan": original_key, "fields": dict(fields)}


class StoredPlan:
    """The batches of the plan a split's rows are stored by (a :class:`~arrowmt.plans.Plan`), checked as read."""

    built = False

    def __init__(self, order: RowOrder, key: str, rows: int) -> None:
        self.order = order
        self.key = key
        self.rows = rows
        self.path: Path = order.path
        # 8 bytes a batch, read and checked in one pass now instead of a page per batch later
        check_batch_offsets(self.path, order.offsets.whole(), order.planned)

    def __len__(self) -> int:
        return len(self.order.offsets) - 1

    @property
    def samples(self) -> int:
        """Sample indices in the plan, all batches together (from the header: nothing read)."""
        return self.order.planned

    @property
    def dropped(self) -> int:
        """Samples left out of the plan because they were too long."""
        return self.rows - self.order.planned

    def batch(self, b: int) -> np.ndarray:
        """Sample indices of batch ``b`` (a read-only view of the map), from chunks checked on their first use; the
        row order notes where they are stored (no ``where`` lookup when the batch is read in this process)."""
        rows = self.peek(b)
        self.order.note(int(self.order.offsets.raw[b]), rows)
        return rows

    def peek(self, b: int) -> np.ndarray:
        """Batch ``b``, not noted (a pass planned ahead by a thread would push the batches read next out of the
        row order's notes)."""
        return checked_batch(self.path, b, self.order.offsets, self.order.order, self.order.planned, self.rows)

    def word_ranges(self, batches: np.ndarray) -> list[WordRanges]:
        """Where the indices of plan batches ``batches`` lie in the row order file, for read-ahead (a cold copy's
        read-ahead otherwise waited for each batch's page of it in the batch loop): the batch offsets were read and
        checked at open, the indices are not read."""
        start, end = self.stretches(indices_within(batches, len(self)))  # the copy stores rows in the order's order
        return [self.order.order.word_ranges(start, end - start)]

    def stretches(self, batches: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where ``batches`` are stored: the stretches of rows ``[starts[i], ends[i])`` of the copy."""
        offsets = self.order.offsets.raw
        batches = np.asarray(batches, dtype=np.int64)
        return offsets[batches], offsets[batches + 1]

    @property
    def indices(self) -> np.ndarray:
        """Every batch's indices, batch after batch: reads and checks the whole plan."""
        self.check_all()
        return self.order.order.raw[: self.order.planned]

    @property
    def offsets(self) -> np.ndarray:
        """Where each batch starts in :attr:`indices`, and their end: reads and checks the whole plan."""
        self.check_all()
        return self.order.offsets.raw

    def check_all(self) -> None:
        """Check every chunk the plan lies in, that offsets run from 0 to the planned rows, and every index."""
        indices = self.order.order.slice(0, self.order.planned)
        check_contents(self.path, indices, self.order.offsets.whole(), self.rows)

    def __reduce__(self) -> tuple[object, tuple[Path, str, int, FileIdentity]]:
        return (_reopen, (self.path, self.key, self.rows, self.order.identity))


def _reopen(path: Path, key: str, rows: int, identity: FileIdentity) -> StoredPlan:
    """The plan pickled, from the same file (FormatError naming it if it was replaced meanwhile: other batches)."""
    order = open_row_order(path, rows)
    if order.identity != identity:
        raise FormatError(
            f"{path}: row order file replaced since the plan was opened ({identity} -> {order.identity}); "
            "open the dataset and sampler again"
        )
    return StoredPlan(order, key, rows)


def stored_plan(dataset: Copy, fields: Mapping[str, object], key: str) -> StoredPlan | None:
    """The plan of ``fields`` (named ``key``) as ``dataset`` stores it, or None when its rows are stored by no plan
    or by another one."""
    order = getattr(dataset, "row_order", None)  # views (and other plan sources) store no plan
    if order is None:
        return None
    entry = dataset.manifest.provenance.get(ORDERED_BY_KEY)
    if not isinstance(entry, dict) or entry.get("split") != dataset.split:
        return None
    stored = entry.get("fields")
    if stored != dict(fields):
        logger.warning("%s", other_plan(dataset, stored, fields))
        return None
    return StoredPlan(order, key, len(dataset))


def other_plan(dataset: Copy, stored: object, fields: Mapping[str, object]) -> str:
    """Why the plan asked for is built instead of read from the copy: the fields that differ, stored vs asked."""
    differ, pairs = changed_fields(stored if isinstance(stored, dict) else {}, fields)
    return (
        f"{dataset.path}: split {dataset.split!r} is stored in the order of another plan ({pairs}): its batches are "
        f"planned anew and read as rows spread over the copy; make a copy with these options from the original: "
        f"{remake_command(dataset.manifest.provenance, dataset.path, fields, differ, dataset.split)}"
    )


FLAGS = {"break_mode": "--sample-break-mode"}  # fields whose `arrowmt order` option is not named after them
NO_OPTION = ("plan_version", "reverse")  # recorded fields that no option sets
COPIED_FROM_KEY = "copied_from"  # provenance key of a copy: the folder it was made from, as given (shown, never opened)


def order_command(fields: Mapping[str, object], split: str = "train", corpus: str = "CORPUS", out: str = "OUT") -> str:
    """The ``arrowmt order`` command that stores ``split`` of ``corpus`` in ``out`` in the order of the plan of
    ``fields`` (batching options, and a copy of LM blocks' block options)."""
    words = [f"arrowmt order {shlex.quote(corpus)} {shlex.quote(out)}"]
    words += [f"--split {split}"] if split != "train" else []
    for name, value in fields.items():
        if name in NO_OPTION or value is None or value is False:
            continue
        flag = FLAGS.get(name, "--" + name.replace("_", "-"))
        words.append(flag if value is True else f"{flag} {value}")
    return " ".join(words)


def remake_command(
    provenance: Mapping[str, object], copy: Path, fields: Mapping[str, object], differ: list[str], split: str
) -> str:
    """The ``arrowmt order`` command that makes, from the original of ``copy`` (its provenance names it; CORPUS
    where it does not), a copy beside it stored by the plan of ``fields`` (``differ``: the fields that changed,
    which name it)."""
    original = provenance.get(COPIED_FROM_KEY)
    named = "-".join(f"{name}{'' if fields.get(name) is True else fields.get(name)}" for name in differ)
    out = copy.with_name(f"{copy.name}-{named.replace('_', '-')}" if named else f"{copy.name}-2")
    return order_command(fields, split, original if isinstance(original, str) and original else "CORPUS", str(out))


def other_block_plan(where: str, table: Path, stored: Mapping[str, object], fields: Mapping[str, object]) -> str:
    """Why a plan of LM blocks other than the one the copy's block table ``table`` is stored by is built: the fields
    that differ, and the command that makes a copy for ``fields`` (block and batching options)."""
    differ, pairs = changed_fields(stored, {k: v for k, v in fields.items() if k in stored})
    copy = table.parent
    manifest = Manifest.load(copy)
    split = next((name for name, entry in block_orders(manifest).items() if entry.get("file") == table.name), "train")
    return (
        f"{where}: stores LM blocks in the order of another plan ({pairs}): the same batches, read as blocks spread "
        "over the copy; make a copy with these options from the original: "
        f"{remake_command(manifest.provenance, copy, fields, differ, split)}"
    )


def changed_fields(stored: Mapping[str, object], asked: Mapping[str, object]) -> tuple[list[str], str]:
    """The fields whose stored and asked values differ, and them as ``name=stored (asked value)``, comma-separated."""
    differ = sorted(k for k in {*stored, *asked} if stored.get(k) != asked.get(k))
    return differ, ", ".join(f"{k}={stored.get(k)!r} (asked {asked.get(k)!r})" for k in differ)
