"""Whether read-ahead is worth asking for: it switches itself off while the pages it would ask for are resident.

Read-ahead of local maps (:func:`arrowmt.io._advice.will_need`) is for pages that are not in the page cache
yet. While a corpus is in the page cache, which is where most training runs live, every request is wasted work:
locating the rows of the batches to come, merging their pages into runs, a system call. So every reader of this
pass of a prefetcher asks its own gate, and the checks' own read-ahead (:func:`read_ahead`) the process's,
:data:`RESIDENCY`, before preparing a request (one per source of requests: pages a source asked for itself are
resident when sampled and would switch another source off), and the gate samples instead of asking the kernel
each time:

* :meth:`Residency.due` says whether a request should be prepared at all (a counter, no system call);
* :meth:`Residency.resident` samples whether a prepared request's pages are in the page cache (``mincore`` of
  at most :data:`SAMPLE_PAGES` of them): after two resident samples in a row the gate skips the next 4 requests,
  then 8, ... up to :data:`MAX_SKIP`; the first sample that finds a page missing turns read-ahead back on for every
  request.

So in the page cache read-ahead costs a counter decrement per batch and a sample every :data:`MAX_SKIP` batches;
under memory pressure it is back at the first page found missing. Read-ahead is only a hint: the gate never
changes what is read, and a page not asked for is read at its first access. A forked DataLoader worker starts
from its parent's state, and a request through a remote cache never asks a gate (its reads are fetches, planned
by the prefetcher).
"""

from __future__ import annotations

from collections.abc import Sequence

from arrowmt.io._advice import WordRanges, resident_pages, sample_pages, spread, will_need

SAMPLE_PAGES = 16  # pages sampled per request at most, spread over its ranges
MAX_SKIP = 64  # requests skipped at most between samples while resident


class Residency:
    """The read-ahead gate of this process (see the module): a streak of resident samples, and requests to skip."""

    def __init__(self) -> None:
        self.streak = 0  # samples found resident in a row
        self.skip = 0  # requests still to skip
        self.sampled = 0  # samples taken (for tests and benchmarks)

    def due(self) -> bool:
        """Whether the next request should be prepared and sampled (False: the pages were resident lately)."""
        if self.skip:
            self.skip -= 1
            return False
        return True

    def resident(self, ranges: Sequence[WordRanges]) -> bool:
        """Whether a sample of the pages of local ``ranges`` is all in the page cache (False when unknown), noted."""
        self.sampled += 1
        found = pages_resident(ranges)
        if found:
            self.streak += 1
            if self.streak >= 2:
                self.skip = min(2**self.streak, MAX_SKIP)
        else:
            self.streak = self.skip = 0
        return found

    def reset(self) -> None:
        """Ask again from the next request on (nothing known of residency); nothing sampled yet."""
        self.streak = self.skip = self.sampled = 0


def pages_resident(ranges: Sequence[WordRanges]) -> bool:
    """Whether a sample of the pages of local ``ranges`` (at most :data:`SAMPLE_PAGES`, spread over them) is all in
    the page cache (False when unknown); nothing is noted."""
    if len(ranges) > SAMPLE_PAGES:  # many maps (a mixture's corpora): some of them, spread over the request
        ranges = [ranges[k] for k in spread(len(ranges), SAMPLE_PAGES).tolist()]
    per_part = max(1, SAMPLE_PAGES // len(ranges)) if ranges else 0
    for part in ranges:
        picks = sample_pages(part, per_part)
        if picks.shape[0] == 0:
            continue
        found = resident_pages(part, picks)
        if found is None or found < picks.shape[0]:
            return False
    return True  # every sampled page (or nothing to sample)


def read_ahead(ranges: Sequence[WordRanges]) -> int:
    """:func:`~arrowmt.io._advice.will_need` of local ``ranges`` through the gate: nothing while their pages were
    found resident lately, or are found resident now; the pages asked for."""
    if not RESIDENCY.due() or RESIDENCY.resident(ranges):
        return 0
    return will_need(ranges)


RESIDENCY = Residency()
