"""The draw of whole rows compiled (numba, ``pip install 'arrowmt[sentencepiece]'``): the same bits, the same walk
and the same bytes as the vectorized draw (:meth:`arrowmt.segments._law.Law.walk` over
:func:`arrowmt.segments._bits.occurrence_keys`), one occurrence after another, without the GIL, so an epoch's copy
drawn on threads runs beside the loop that reads the epoch before.

splitmix64's constants come in as an argument (:data:`arrowmt.segments._bits.CONSTANTS`), so a kernel numba keeps
in its cache never holds other constants than the vectorized draw's. A process never forks while numba compiles or
loads the kernel (its lock is taken around every fork), so a DataLoader worker forked then never inherits it held.
Imported only where numba is installed (:func:`arrowmt.segments._law.compiled`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba.core.compiler_lock import global_compiler_lock


def _compiled(function: Callable[..., Any], **options: object) -> Any:
    """``function`` compiled without the GIL, kept in numba's cache where a folder for it is writable (else compiled
    in each process)."""
    try:
        return numba.njit(nogil=True, cache=True, **options)(function)
    except RuntimeError:  # numba found no writable cache folder
        return numba.njit(nogil=True, **options)(function)


os.register_at_fork(before=global_compiler_lock.acquire, after_in_parent=global_compiler_lock.release,
                    after_in_child=global_compiler_lock.release)  # fmt: skip


def _mix(z: np.uint64, key: np.uint64, c: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    z = z * c[0] + key
    z = (z ^ (z >> c[5])) * c[1]
    z = (z ^ (z >> c[6])) * c[2]
    return z ^ (z >> c[7])


_mix = _compiled(_mix, inline="always")


def draw_rows(rows: np.ndarray, counts: np.ndarray, ids: np.ndarray, key: np.uint64, final: np.ndarray,
              start: np.ndarray, first: np.ndarray, threshold: np.ndarray, piece: np.ndarray, begin: np.ndarray,
              out: np.ndarray, c: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled  # fmt: skip
    """Draw every word occurrence of ``rows`` (``counts[i]`` words of ids ``ids``, rows after rows) under the epoch
    ``key`` with splitmix64's constants ``c``; the pieces go to ``out`` (at least the rows' longest draws; empty:
    lengths only). Returns each row's number of pieces."""
    lengths = np.empty(rows.shape[0], dtype=np.int64)
    keep = out.shape[0] > 0
    o = 0
    p = 0
    for i in range(rows.shape[0]):
        row_key = _mix(np.uint64(rows[i]), key, c)
        before = p
        for j in range(counts[i]):
            w = ids[o]
            o += 1
            occurrence = _mix(row_key + np.uint64(j) * c[3], key, c)
            node = final[w]
            stop = start[w]
            step = np.uint64(0)
            first_piece = p
            while node != stop:
                bits = _mix(occurrence + step * c[4], step, c) >> c[8]
                edge = first[node]
                while threshold[edge] <= bits:
                    edge += 1
                if keep:
                    out[p] = piece[edge]
                p += 1
                node = begin[edge]
                step += np.uint64(1)
            a, b = first_piece, p - 1
            while keep and a < b:  # drawn from the end: reversed in place
                out[a], out[b] = out[b], out[a]
                a += 1
                b -= 1
        lengths[i] = p - before
    return lengths


draw_rows = _compiled(draw_rows)
