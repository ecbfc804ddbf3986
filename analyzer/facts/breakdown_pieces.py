"""Sorted-interval helpers of the timeline breakdown (:mod:`analyzer.facts.breakdown`): a thread's call
frontier, intersections of two sorted interval lists, merging and complementing pieces, placing the
parts' segments in (device, start) order. Numpy only."""
from __future__ import annotations

import numpy as np

from analyzer.loading.columns import constant_view
from analyzer.resources import release_free_memory


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


def _gathered(parts: list[dict[str, np.ndarray]], dest: np.ndarray, bounds: list[int], name: str,
              busy_fill: int | None = None) -> np.ndarray:
    """Column ``name`` in segment order (``dest``: each segment's place, parts one after another from
    ``bounds``), as wide as its parts (32-bit codes and ids), each part's array freed once placed;
    ``busy_fill``: the value of the first part (busy time), which has no such column."""
    own = parts if busy_fill is None else parts[1:]
    dtype = np.result_type(*(x[name] for x in own))
    if busy_fill is None and name == "device":  # one device (the common case): the value, nothing to place
        lows = {int(x[name].min()) for x in parts if len(x[name])}
        if len(lows) == 1 and all(x[name].max() == x[name].min() for x in parts if len(x[name])):
            for x in parts:
                del x[name]
            return np.broadcast_to(np.array(lows.pop(), dtype=dtype), bounds[-1])  # no memory per row
    out = np.empty(bounds[-1], dtype=dtype)
    for i, x in enumerate(parts):
        if i == 0 and busy_fill is not None:
            out[dest[:bounds[1]]] = busy_fill
        else:
            out[dest[bounds[i]:bounds[i + 1]]] = x.pop(name)
    return out


def gathered_edges(parts: list[dict[str, np.ndarray]], dest: np.ndarray,
                   bounds: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Columns ``start`` and ``end`` as :func:`_gathered` makes them, ``start`` written into an array of
    ``n + 1`` edges; where every segment ends where the next one starts (one device: its segments tile
    the window), ``end`` is the same edges from the second on and its own array is freed (8 bytes a row,
    48 M rows at 10 M kernels)."""
    n = bounds[-1]
    edges = np.empty(n + 1, dtype=np.result_type(*(x["start"] for x in parts)))
    start = edges[:-1]
    for i, x in enumerate(parts):
        start[dest[bounds[i]:bounds[i + 1]]] = x.pop("start")
    end = _gathered(parts, dest, bounds, "end")
    if n and end.dtype == edges.dtype and np.array_equal(end[:-1], start[1:]):
        edges[-1] = end[-1]
        return start, edges[1:]
    return start, end


def _runs(starts: list[np.ndarray]) -> list[tuple[int, int, int]] | None:
    """The parts' maximal ascending runs of starts, ``(part, first, stop)`` in the parts' order; ``None`` where
    there are more than :data:`_PLACE_RUNS` (the idle part: a few runs per chunk of gaps)."""
    runs: list[tuple[int, int, int]] = []
    for p, s in enumerate(starts):
        if not len(s):
            continue
        cuts = [0]
        for a in range(0, len(s) - 1, _PLACE_CHUNK):  # descents a chunk at a time (no n-long mask)
            x = s[a:a + _PLACE_CHUNK + 1]
            cuts.extend((np.flatnonzero(x[1:] < x[:-1]) + a + 1).tolist())
            if len(runs) + len(cuts) > _PLACE_RUNS:
                return None
        cuts.append(len(s))
        runs.extend((p, lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:]))
    return runs


def _places_by_time(starts: list[np.ndarray], runs: list[tuple[int, int, int]], dest: np.ndarray) -> None:
    """:func:`_places` of one device's segments, written into ``dest``: the time axis cut into spans of about
    :data:`_PLACE_CHUNK` segments (edges read from a sample of the starts); each span's segments taken from
    every ascending run (one binary search per run and edge), in the parts' order, stably sorted by start,
    and placed after the earlier spans'. The same places as a stable sort of all starts (a segment's rank
    by start, then by its part and row), with no joined copy of the starts and no sort of them all."""
    n = len(dest)
    every = max(n // (1 << 16), 1)
    sample = np.sort(np.concatenate([s[::every] for s in starts]))
    spans = max(-(-n // _PLACE_CHUNK), 1)
    edges = np.unique(sample[(np.arange(1, spans) * len(sample)) // spans]) if spans > 1 else sample[:0]
    del sample
    first = np.cumsum([0] + [len(s) for s in starts])
    cuts = [np.r_[lo, lo + np.searchsorted(starts[p][lo:hi], edges, side="left"), hi] for p, lo, hi in runs]
    placed = 0
    for j in range(len(edges) + 1):
        pieces = [(starts[p], first[p], c[j], c[j + 1]) for (p, _, _), c in zip(runs, cuts) if c[j + 1] > c[j]]
        if not pieces:
            continue
        values = np.concatenate([s[a:b] for s, _, a, b in pieces])
        rows = np.concatenate([np.arange(f + a, f + b, dtype=dest.dtype) for _, f, a, b in pieces])
        order = np.argsort(values, kind="stable")
        del values
        dest[rows[order]] = np.arange(placed, placed + len(rows), dtype=dest.dtype)
        placed += len(rows)


def _places(devices: list[np.ndarray], starts: list[np.ndarray]) -> np.ndarray:
    """Each segment's place in (device, start) order (stable) among the parts' segments, in 32 bits
    where the count fits."""
    lows = [int(d.min()) for d in devices if len(d)]
    highs = [int(d.max()) for d in devices if len(d)]
    n = sum(len(s) for s in starts)
    if n >= TRIM_SEGMENTS:  # a big build: the pages its freed temporaries left in the heap, before placing
        release_free_memory()
    dest = np.empty(n, dtype=np.int32 if n < np.iinfo(np.int32).max else np.int64)
    one_device = bool(lows) and min(lows) == max(highs)
    runs = _runs(starts) if one_device else None
    if runs is not None:  # one device (48 M segments at 10 M kernels): span by span, no joined starts
        _places_by_time(starts, runs, dest)
        return dest
    all_start = np.concatenate(starts)
    if one_device:
        order = np.argsort(all_start, kind="stable")
    else:
        order = np.lexsort((all_start, np.concatenate(devices)))
    del all_start
    for a in range(0, n, _PLACE_CHUNK):  # the inverse permutation a chunk at a time (no n-long arange)
        dest[order[a:a + _PLACE_CHUNK]] = np.arange(a, min(a + _PLACE_CHUNK, n), dtype=dest.dtype)
    return dest


#: :func:`_places` writes the places this many at a time
_PLACE_CHUNK = 1 << 20
#: :func:`_places` sorts span by span up to this many ascending runs of starts (else all starts at once)
_PLACE_RUNS = 1 << 12
#: :func:`_places` of this many segments or more first hands the heap's freed pages back (glibc keeps them)
TRIM_SEGMENTS = 1 << 20


def spread(small, codes: np.ndarray | None = None, repeats: np.ndarray | None = None):  # type: ignore[no-untyped-def]
    """The categorical ``small`` (a :func:`analyzer.loading.columns.categorical` of a few values, every one of
    them used by the rows) read per row, ``small[codes]`` or each value ``repeats`` times: the same
    categories and codes as a categorical of the rows' labels, with one pass over the rows instead of two."""
    import pandas as pd

    own = np.asarray(small.codes)
    out = own[codes] if codes is not None else np.repeat(own, np.asarray(repeats, dtype=np.int64))
    try:
        return pd.Categorical.from_codes(out, dtype=small.dtype, validate=False)
    except TypeError:  # pandas < 2.1 always validates
        return pd.Categorical.from_codes(out, dtype=small.dtype)


def shared_columns(seg, constant: tuple[str, ...] = ("device", "waited_tid")):  # type: ignore[no-untyped-def]
    """``seg`` (``timeline_segments``) with the same values and types in less memory where its rows allow:
    ``start`` and ``end`` as two views of one array of edges when every segment ends where the next one
    starts (one device: its segments tile the window), and each column of ``constant`` holding one value
    as that value broadcast (no memory per row: one device, no cross-thread wait). A 10 M-kernel trace
    has about 48 M segments: 8 bytes a row for ``end``, 4 for each constant 32-bit column. The columns
    are read-only as every column of a frame is (copy on write); any other frame is returned as it is."""
    import pandas as pd

    n = len(seg)
    if n < 2:
        return seg
    cols: dict[str, np.ndarray] = {}
    start, end = seg["start"].to_numpy(), seg["end"].to_numpy()
    shared = start.base is not None and start.base is end.base  # already (gathered_edges)
    if not shared and start.dtype == end.dtype and np.array_equal(end[:-1], start[1:]):
        edges = np.empty(n + 1, dtype=start.dtype)
        edges[:-1] = start
        edges[-1] = end[-1]
        cols["start"], cols["end"] = edges[:-1], edges[1:]
    del start, end
    for name in constant:  # the trace model's own constant columns are stored the same way
        values = seg[name].to_numpy()
        view = constant_view(values, min_rows=2)
        if view is not values:
            cols[name] = view
    if not cols:
        return seg
    return pd.DataFrame({c: cols[c] if c in cols else seg[c] for c in seg.columns}, index=seg.index, copy=False)
