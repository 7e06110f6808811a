"""Monolingual splits whose LM blocks are stored in plan order (``arrowmt order --tokens-per-sample``).

Such a copy stores each token block of the original split together, one after another
in the order a block batch plan reads them: its rows are the pieces of the original rows
each block covers, so they are not sentences. Its block table (``<split>.lm-blocks``, a
block table side file indexed by the original block numbers; see
:mod:`arrowmt.copies._block_rows`) is listed in the manifest's provenance under
:data:`BLOCK_ORDER_KEY` with the key of the original's table and the block options it
was made for and the batching options of the plan it is stored by::

    "block_order": {"train": {"file": "train.lm-blocks", "table": "<64 hex>",
                              "source": {"blocks": "<the original's fingerprint>", "blocks_version": 3, "rows": N},
                              "blocks": {"break_mode": "none", ...}, "plan": {"max_tokens": 8192, "seed": 1, ...}}}

The table key is the hash of ``source`` and ``blocks`` (as the original's block table is
named), so block options edited in the manifest no longer match it.

Readers of rows as sentences refuse such a copy (:func:`~arrowmt.stored._stored_order.refuse_stored_order`);
the LM block readers read its table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from arrowmt._errors import FormatError
from arrowmt.files import SHA256_HEX
from arrowmt.format import BLOCK_ORDER_KEY, Manifest, plain_name_error

BLOCKS_SUFFIX = ".lm-blocks"  # not ".blocks": that ends the block index of a split file
ENTRY_FIELDS = ("file", "table", "source", "blocks", "plan")


@dataclass(frozen=True)
class BlockOrder:
    """What a copy's manifest says of one split's blocks: its table file, the original table's key and the fields
    of the original it hashes besides the block options, the block options it holds and the batching options of
    the plan it is stored by."""

    path: Path
    table: str
    source: dict[str, object]
    blocks: dict[str, object]
    plan: dict[str, object]


def block_order_name(split: str) -> str:
    return f"{split}{BLOCKS_SUFFIX}"


def block_orders(manifest: Manifest) -> dict[str, dict[str, object]]:
    """Split -> entry of the splits ``manifest`` stores as blocks in plan order (none: other folders), checked."""
    listed = manifest.provenance.get(BLOCK_ORDER_KEY) or {}
    if not isinstance(listed, dict):
        raise FormatError(f"manifest provenance {BLOCK_ORDER_KEY!r}: expected split -> entry, got {listed!r}")
    for split, entry in listed.items():
        where = f"manifest provenance {BLOCK_ORDER_KEY!r}[{split!r}]"
        if not isinstance(entry, dict) or sorted(entry) != sorted(ENTRY_FIELDS):
            raise FormatError(f"{where}: expected an object with the fields {list(ENTRY_FIELDS)}, got {entry!r}")
        name, table = entry["file"], entry["table"]
        if plain_name_error(name) or name != block_order_name(str(split)):
            raise FormatError(f"{where}['file']: expected {block_order_name(str(split))!r}, got {name!r}")
        if not isinstance(table, str) or not SHA256_HEX.fullmatch(table):
            raise FormatError(f"{where}['table']: expected 64 lowercase hex digits, got {table!r}")
        for name, what in (("source", "original's"), ("blocks", "block"), ("plan", "batching")):
            if not isinstance(entry[name], dict):
                raise FormatError(f"{where}[{name!r}]: expected the {what} options as an object, got {entry[name]!r}")
    return {str(k): v for k, v in listed.items()}


def read_block_order(folder: Path, manifest: Manifest, split: str) -> BlockOrder | None:
    """The blocks in plan order of ``split`` in ``folder``, or None when it is not such a copy."""
    entry = block_orders(manifest).get(split)
    if entry is None:
        return None
    parts = (dict(entry[name]) for name in ("source", "blocks", "plan"))  # type: ignore[call-overload]
    return BlockOrder(folder / str(entry["file"]), str(entry["table"]), *parts)
