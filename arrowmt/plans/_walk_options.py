"""What every arrowmt sampler shares besides its batching spec, as one value (:class:`SamplerOptions`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from arrowmt.io import DEFAULT_DEPTH


@dataclass(frozen=True, kw_only=True)
class SamplerOptions:
    """What every arrowmt sampler shares besides its batching spec: the epoch order (``seed``, ``shuffle``,
    ``shuffle_window``), this process's place in the world (``num_replicas``, ``rank``; default torch.distributed's),
    the read-ahead depth (``prefetch``, 0: off) and where plans are cached (``cache_dir``, default the corpus's).
    Checked when a sampler takes it (``arrowmt.training._options.walk_of``)."""

    seed: int = 1
    shuffle: bool = True
    shuffle_window: int | None = None
    num_replicas: int | None = None
    rank: int | None = None
    prefetch: int = DEFAULT_DEPTH
    cache_dir: str | os.PathLike[str] | None = None


SHARED_OPTIONS = tuple(f.name for f in fields(SamplerOptions))
