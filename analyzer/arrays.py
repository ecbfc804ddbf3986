"""Array helpers every layer may use (numpy only; no analyzer imports)."""
from __future__ import annotations

import numpy as np


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array: ``np.unique(values)``, by one sort and a comparison of
    neighbours for integers. numpy 2.3+ finds ``np.unique``'s values (without ``return_*``) through a hash
    table that is two orders of magnitude slower than a sort for millions of distinct integers (2.5 s
    against 0.02 s for 2 M timestamps); other dtypes (floats with NaN, text) go to ``np.unique``."""
    a = np.asarray(values).ravel()
    if a.dtype.kind not in "iub":
        return np.unique(a)
    if len(a) and a.min() == a.max():  # one value (one device, one thread): no sort of a million rows
        return a[:1].copy()
    a = np.sort(a)
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]
