"""The length ratio of a pair: one definition for ``arrowmt filter --max-len-ratio`` and the notebook.

A pair's ratio is its longer side's token count over its shorter side's, counting the
stored tokens (``</s>`` included, as every arrowmt length and fairseq's sizes do). The
filter keeps a pair when ``length_ratio(...) <= max_len_ratio``, so a threshold ``t``
drops exactly the pairs whose ratio is ``> t``.
"""

from __future__ import annotations

import numpy as np

from arrowmt._errors import InvalidParameterError


def length_ratio(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Longer over shorter token count of each pair (float64, >= 1), from two equally long length arrays.

    A pair with one empty side has ratio ``inf`` (no finite threshold keeps it); a pair
    with both sides empty has ratio 1.
    """
    a, b = np.asarray(first), np.asarray(second)
    if a.shape != b.shape or a.ndim != 1 or (a.size and (a.dtype.kind not in "iu" or b.dtype.kind not in "iu")):
        raise InvalidParameterError(
            f"first, second: expected two 1-D integer arrays of equal length, got {a.dtype} {a.shape} "
            f"and {b.dtype} {b.shape}"
        )
    longer = np.maximum(a, b).astype(np.float64)
    shorter = np.minimum(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(longer, shorter, out=longer)
    longer[np.isnan(longer)] = 1.0  # 0 / 0: both sides empty
    return longer
