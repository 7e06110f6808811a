"""Layer 2, I/O: how mapped bytes are read and trusted, for the format and training layers above.

* access advice and exact read-ahead of word ranges of memory maps (:mod:`arrowmt.io._advice`), asked on a
  read-ahead thread where the system allows (:mod:`arrowmt.io._advisor`), and switched off while the pages are
  found resident (:mod:`arrowmt.io._residency`: sampled, not per request);
* integrity on first use: byte pieces with recorded CRC-32s, checked once each per process, an "already checked"
  bitmap tested in one numpy step per batch (:mod:`arrowmt.io._pieces`);
* plan-driven read-ahead of the batches to come, which also moves a remote cache's use clock
  (:mod:`arrowmt.io._prefetch`).

Imports the storage layer only (the remote cache's block files); knows nothing of the corpus format and never
imports torch.
"""

from arrowmt._lazy import attach
from arrowmt.io._advice import (
    DEFAULT_ACCESS,
    PAGE,
    WORD,
    WordRanges,
    advise,
    check_access,
    spread,
    will_need,
)
from arrowmt.io._pieces import CrcPieces, ManyPieces, byte_crcs
from arrowmt.io._prefetch import (
    DEFAULT_DEPTH,
    BatchAt,
    Dealt,
    PassRanges,
    PlanRanges,
    Prefetcher,
    RowSource,
    check_depth,
    prefetch_source,
)
from arrowmt.io._residency import RESIDENCY, Residency, pages_resident, read_ahead

__getattr__, __dir__, __all__ = attach(__name__, __file__)
