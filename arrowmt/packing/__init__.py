"""Layer 15, packed batches: a plan's packed batches (``packed=True`` on a sampler) as tensors of one shape, for
compilers (``torch.compile``, CUDA graphs) that pay for every new shape.

Imports the training layer (its batches and collation helpers) and those below it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arrowmt._lazy import attach

if TYPE_CHECKING:
    from arrowmt.packing._collate import PackedCollater

__getattr__, __dir__, __all__ = attach(__name__, __file__)
