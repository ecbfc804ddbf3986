"""Sorted-interval helpers of the timeline breakdown (:mod:`analyzer.facts.breakdown`): a thread's call
frontier, intersections of two sorted interval lists, merging and complementing pieces. Numpy only."""
from __future__ import annotations

import numpy as np


def _frontier(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For intervals sorted by start: ``(pos, s, e)``, the part of each interval no earlier interval
    covers (the busy frontier it extends), kept where non-empty. Disjoint, sorted, their union is the
    intervals' union."""
    if len(start) == 0:
        z = np.empty(0, dtype=np.int64)
        return z, z, z
    m = np.maximum.accumulate(np.maximum(end, start))
    prev = np.empty_like(m)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = m[:-1]
    s = np.maximum(start, prev)
    keep = np.flatnonzero(m > s)
    return keep, s[keep], m[keep]


def intersect(a_start: np.ndarray, a_end: np.ndarray, c_start: np.ndarray,
              c_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of intervals ``A`` (any) inside the sorted disjoint intervals ``C``:
    ``(a_index, c_index, start, end)``, each non-empty; one ``searchsorted`` per side."""
    lo = np.searchsorted(c_end, a_start, side="right")  # first C ending after a's start
    hi = np.searchsorted(c_start, a_end, side="left")  # C starting before a's end
    count = np.maximum(hi - lo, 0)
    a_idx = np.repeat(np.arange(len(a_start)), count)
    first = np.cumsum(count) - count
    c_idx = np.repeat(lo, count) + (np.arange(int(count.sum())) - np.repeat(first, count))
    s = np.maximum(a_start[a_idx], c_start[c_idx])
    e = np.minimum(a_end[a_idx], c_end[c_idx])
    keep = e > s
    return a_idx[keep], c_idx[keep], s[keep], e[keep]


def _ascending(a: np.ndarray) -> bool:
    """Whether ``a`` is sorted (non-decreasing): one pass, to skip a sort of millions of rows."""
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


def _merge_pieces(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Pieces ``(start, end, *payload)`` of ``a`` (sorted by start) and ``b`` merged in start order, as a
    stable sort of ``a`` then ``b`` orders them: ``b`` sorted on its own (it may hold overlapping pieces,
    e.g. of overlapping graph executions; usually it is sorted already), then each placed by one
    binary search, after the ``a`` pieces starting at the same time; no sort of the whole."""
    if not len(b[0]):
        return a
    if not _ascending(b[0]):
        o = np.argsort(b[0], kind="stable")
        b = tuple(x[o] for x in b)
    if not len(a[0]):
        return b
    n = len(a[0]) + len(b[0])
    at = np.searchsorted(a[0], b[0], side="right") + np.arange(len(b[0]))
    from_a = np.ones(n, dtype=bool)
    from_a[at] = False
    out = []
    for x, y in zip(a, b):
        merged = np.empty(n, dtype=np.result_type(x, y))
        merged[at] = y
        merged[from_a] = x
        out.append(merged)
    return tuple(out)


def _complement(s: np.ndarray, e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of ``[lo, hi)`` not covered by the sorted disjoint intervals ``(s, e)``."""
    gs = np.r_[lo, e]
    ge = np.r_[s, hi]
    gs = np.maximum(gs, lo)
    ge = np.minimum(ge, hi)
    keep = ge > gs
    return gs[keep], ge[keep]


# -- busy time -------------------------------------------------------------------------------------


# -- shared by the segments and the breakdown table ---------------------------------------------------
def sum_by(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Integer ``values`` summed per ``group`` code, exactly."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, group, values)
    return out


def span_of(start: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """For each ``start``, the last of the sorted span starts ``lo`` at or before it (-1: none). For
    sorted starts (the segments of one device), each span's number repeated over its run of starts: one
    pass writing the answer, instead of a binary search per start."""
    if len(start) > 1 and _ascending(start):
        # the starts from first[j] up to first[j + 1] follow span j: one run per span, repeated
        first = np.searchsorted(start, lo, side="left")
        return np.repeat(np.arange(-1, len(lo), dtype=np.int64), np.diff(first, prepend=0, append=len(start)))
    k = np.searchsorted(lo, start, side="right")
    k -= 1
    return k
