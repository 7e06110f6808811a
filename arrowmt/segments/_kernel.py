"""The draw of whole rows compiled (numba, ``pip install 'arrowmt[sentencepiece]'``): the same bits, the same walk
and the same bytes as the vectorized draw (:meth:`arrowmt.segments._law.Law.walk` over
:func:`arrowmt.segments._bits.occurrence_keys`), one occurrence after another, without the GIL, so an epoch's copy
drawn on a thread runs beside the loop that reads the epoch before.

Imported only where numba is installed (:func:`compiled`); the vectorized draw serves everywhere else.
"""

from __future__ import annotations

import numba
import numpy as np

from arrowmt.segments._bits import M1, M2, MIX, POSITION, STEP

_S27, _S30, _S31, _S32 = np.uint64(27), np.uint64(30), np.uint64(31), np.uint64(32)


@numba.njit(nogil=True, cache=True, inline="always")
def _mix(z: np.uint64, key: np.uint64) -> np.uint64:  # pragma: no cover - compiled
    z = z * MIX + key
    z = (z ^ (z >> _S30)) * M1
    z = (z ^ (z >> _S27)) * M2
    return z ^ (z >> _S31)


@numba.njit(nogil=True, cache=True)
def draw_rows(rows: np.ndarray, counts: np.ndarray, ids: np.ndarray, key: np.uint64, final: np.ndarray,
              start: np.ndarray, first: np.ndarray, threshold: np.ndarray, piece: np.ndarray, begin: np.ndarray,
              out: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled  # fmt: skip
    """Draw every word occurrence of ``rows`` (``counts[i]`` words of ids ``ids``, rows after rows) under the epoch
    ``key``; the pieces go to ``out`` (at least the rows' longest draws; empty: lengths only). Returns each row's
    number of pieces."""
    lengths = np.empty(rows.shape[0], dtype=np.int64)
    keep = out.shape[0] > 0
    o = 0
    p = 0
    for i in range(rows.shape[0]):
        row_key = _mix(np.uint64(rows[i]), key)
        before = p
        for j in range(counts[i]):
            w = ids[o]
            o += 1
            occurrence = _mix(row_key + np.uint64(j) * POSITION, key)
            node = final[w]
            stop = start[w]
            step = np.uint64(0)
            first_piece = p
            while node != stop:
                bits = _mix(occurrence + step * STEP, step) >> _S32
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
