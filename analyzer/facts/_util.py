"""Vectorized interval helpers shared by the fact modules (no per-row Python loops).

Everything here works on int64 nanosecond arrays. The two workhorses:

* :func:`union_intervals` merges overlapping intervals per group with one sort and a per-group
  running maximum of the end times (an interval opens a new block when it starts after every earlier
  interval of its group has ended);
* :func:`covered_until` evaluates the cumulative covered time of a sorted disjoint interval set at
  many instants with one ``searchsorted``, so "busy time between a and b" is
  ``covered_until(b) - covered_until(a)`` (bins, gap overlaps) without splitting intervals.
"""
from __future__ import annotations

import re

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from analyzer.analysis import Window
from analyzer.loading.columns import categorical, factorize_objects, key_groups

#: a time (ns) before or after every timestamp of a real trace (UTC ones are ~2^60.6), used as a
#: sentinel; small enough that its difference with any timestamp the loaders accept (at most
#: ``analyzer.loading.model.TIME_MAX`` = 2^62) still fits in int64
FAR_NS = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class Union:
    """Result of :func:`union_intervals`.

    ``group``, ``start``, ``end``: the merged blocks, sorted by (group, start).
    ``order``: the input positions in (group, start) order; ``block``: the block index of each
    position in ``order`` (so ``block[i]`` is the block that input ``order[i]`` belongs to).
    """

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    order: np.ndarray
    block: np.ndarray


def union_intervals(start: np.ndarray, end: np.ndarray, group: np.ndarray | None = None) -> Union:
    """Merge overlapping or touching ``[start, end)`` intervals within each group (an interval ending
    before it starts counts as empty)."""
    s_in = np.asarray(start, dtype=np.int64)
    e_in = np.asarray(end, dtype=np.int64)
    g_in = np.zeros(len(s_in), dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    n = len(s_in)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return Union(empty, empty, empty, empty, empty)
    same_g = g_in[1:] == g_in[:-1]
    if ((g_in[1:] > g_in[:-1]) | (same_g & (s_in[1:] >= s_in[:-1]))).all():
        # already in (group, start) order (ops and API calls come sorted by start): the stable
        # lexsort would return the identity, so skip it and the gathers
        order = np.arange(n)
        g, s, e = g_in, s_in, np.maximum(e_in, s_in)
    else:
        order = np.lexsort((s_in, g_in))
        g, s, e = g_in[order], s_in[order], np.maximum(e_in[order], s_in[order])
    new_group = np.empty(n, dtype=bool)
    new_group[0] = True
    new_group[1:] = g[1:] != g[:-1]
    new_block, reach = _opens_and_reach(s, e, new_group)
    first = np.flatnonzero(new_block)
    block = np.cumsum(new_block) - 1
    return Union(
        group=g[first],
        start=s[first],
        end=_block_ends(reach, first),
        order=order,
        block=block,
    )


def block_opens(start: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The one merge rule of every interval union here: for intervals sorted by start within runs of a
    group (``first`` marks each run's first row), True where a merged block opens: at a run's first
    interval, or where an interval starts after every earlier interval of its run has ended (touching
    intervals merge)."""
    return _opens_and_reach(start, end, first)[0]


def _opens_and_reach(start: np.ndarray, end: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`block_opens` and the running maximum of ``end`` within each run it is computed from."""
    run_max = grouped_cummax(end, first) if first[1:].any() else np.maximum.accumulate(end)
    opens = first.copy()
    np.logical_or(opens[1:], start[1:] > run_max[:-1], out=opens[1:])
    return opens, run_max


def _block_ends(run_max: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """Each merged block's end, for intervals clamped to end at or after their start: the running
    maximum (of the block's run) at the block's last interval. It never decreases within a run, and
    every earlier interval of the run ended before the block opened, so that maximum is the block's
    own largest end: one gather per block instead of a reduction over every interval."""
    last = np.empty_like(opens)
    last[:-1] = opens[1:] - 1
    last[-1] = len(run_max) - 1
    return run_max[last]


def grouped_cummax(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running maximum of int64 ``values`` restarting where ``first`` is True (runs of a group). Each
    run is lifted above the previous one by a multiple of the value span, so one ``accumulate`` does
    all runs exactly; pandas' grouped cummax when that could overflow."""
    group = np.cumsum(first) - 1
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span * (int(group[-1]) + 1) < 1 << 62:
        lift = group * span - lo
        return np.maximum.accumulate(values + lift) - lift
    return pd.Series(values).groupby(group).cummax().to_numpy(np.int64)


def union_sorted(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)`` of the merged blocks of one group, as :func:`union_intervals` gives them. For
    intervals already ordered by start (API calls, in the loader's order) it needs no sort and none of
    the order, group and block arrays union_intervals returns (each as large as 10 M calls); ``end``
    may be clamped in place (pass a copy you no longer need)."""
    if len(start) < 2 or not (start[1:] >= start[:-1]).all():
        u = union_intervals(start, end)
        return u.start, u.end
    np.maximum(end, start, out=end)
    first = np.zeros(len(start), dtype=bool)
    first[0] = True
    opens_mask, reach = _opens_and_reach(start, end, first)
    opens = np.flatnonzero(opens_mask)
    return start[opens], _block_ends(reach, opens)


def union_length_sorted(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """Per key, the length of the union of its ``[start, end)`` intervals (overlaps counted once), for
    non-empty intervals already in (key, start) order; indexed by key, named ``union_ns``."""
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    seg = np.flatnonzero(block_opens(start, end, first))
    seg_len = np.maximum.reduceat(end, seg) - start[seg]
    seg_key = key[seg]
    bounds = np.flatnonzero(np.r_[True, seg_key[1:] != seg_key[:-1]])
    return pd.Series(np.add.reduceat(seg_len, bounds), index=seg_key[bounds], name="union_ns")


def covered_until(us: np.ndarray, ue: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Total length of the sorted disjoint intervals ``[us, ue)`` that lies before each instant ``t``."""
    us = np.asarray(us, dtype=np.int64)
    ue = np.asarray(ue, dtype=np.int64)
    t = np.asarray(t, dtype=np.int64)
    if len(us) == 0 or len(t) == 0:
        return np.zeros(len(t), dtype=np.int64)
    return _covered_at(us, ue, _covered_base(us, ue), t)


def covered_between(us: np.ndarray, ue: np.ndarray, a: np.ndarray, b: np.ndarray,
                    base: np.ndarray | None = None) -> np.ndarray:
    """``covered_until(us, ue, b) - covered_until(us, ue, a)``: the covered time inside each ``[a, b)``,
    with the intervals' running total computed once for both sides (``base``: :func:`covered_base` of
    the intervals, given when several calls share them)."""
    us = np.asarray(us, dtype=np.int64)
    ue = np.asarray(ue, dtype=np.int64)
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    if len(us) == 0 or len(a) == 0:
        return np.zeros(len(a), dtype=np.int64)
    if base is None:
        base = _covered_base(us, ue)
    return _covered_at(us, ue, base, b) - _covered_at(us, ue, base, a)


def covered_base(us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """The running total of the sorted disjoint intervals ``[us, ue)`` that :func:`covered_between` reads
    (computed once for several calls over the same intervals)."""
    return _covered_base(np.asarray(us, dtype=np.int64), np.asarray(ue, dtype=np.int64))


def _covered_base(us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """The length covered before interval i starts, less its start: the length before t inside or after
    interval i is that plus min(t, ue[i])."""
    return np.r_[0, np.cumsum(ue - us)[:-1]] - us


def _covered_at(us: np.ndarray, ue: np.ndarray, base: np.ndarray, t: np.ndarray) -> np.ndarray:
    """:func:`covered_until` given :func:`_covered_base`: one gather per side, no masked copies of the queries."""
    k = np.searchsorted(us, t, side="right") - 1  # the last interval starting at or before t
    kk = np.maximum(k, 0)
    return np.where(k >= 0, base[kk] + np.minimum(t, ue[kk]), 0)


def asof_backward(right_key: np.ndarray, right_t: np.ndarray, left_key: np.ndarray,
                  left_t: np.ndarray) -> np.ndarray:
    """For each left row, the position of the right row with the same key whose ``right_t`` is the
    latest at or before ``left_t`` (ties: the last in the right rows' order), or -1: what
    ``pd.merge_asof(left, right, on=t, by=key, direction="backward")`` picks, by one sort per side and
    a ``searchsorted`` per key instead of a merge of the whole frames."""
    n = len(left_t)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or len(right_t) == 0:
        return out
    right_t = np.asarray(right_t, dtype=np.int64)
    left_t = np.asarray(left_t, dtype=np.int64)
    r_order = np.lexsort((right_t, np.asarray(right_key, dtype=np.int64)))  # by key, then t, stable
    rk = np.asarray(right_key, dtype=np.int64)[r_order]
    r_cut = np.r_[0, np.flatnonzero(rk[1:] != rk[:-1]) + 1, len(rk)]
    r_keys = rk[r_cut[:-1]]
    l_order, l_start, l_end = key_groups(np.asarray(left_key, dtype=np.int64))
    lk = np.asarray(left_key, dtype=np.int64)[l_order]
    for a, b in zip(l_start.tolist(), l_end.tolist()):
        g = int(np.searchsorted(r_keys, lk[a]))
        if g == len(r_keys) or r_keys[g] != lk[a]:
            continue
        rows = r_order[r_cut[g]:r_cut[g + 1]]
        q = l_order[a:b]
        k = np.searchsorted(right_t[rows], left_t[q], side="right") - 1
        out[q] = np.where(k >= 0, rows[np.maximum(k, 0)], -1)
    return out


def first_positions(table: np.ndarray, query: np.ndarray) -> np.ndarray:
    """For each ``query`` key, the position in ``table`` of the first row holding it, or -1 (int64 keys):
    ``pd.Index(table[first rows]).get_indexer(query)`` mapped back to ``table`` positions. Keys already
    strictly increasing (correlation ids of API calls in start order) are searched in place instead of
    hashing both sides."""
    table = np.asarray(table, dtype=np.int64)
    query = np.asarray(query, dtype=np.int64)
    if len(table) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    if len(table) < 2 or bool((table[1:] > table[:-1]).all()):
        pos = np.minimum(np.searchsorted(table, query), len(table) - 1)
        return np.where(table[pos] == query, pos, -1)
    first = np.flatnonzero(~pd.Series(table).duplicated().to_numpy())
    idx = pd.Index(table[first]).get_indexer(query)
    return np.where(idx >= 0, first[np.maximum(idx, 0)], -1)


def clip_to_window(frame: pd.DataFrame, window: Window) -> pd.DataFrame:
    """Rows of an interval frame overlapping the window, with ``start``/``end`` clipped to it."""
    if frame.empty:
        return frame.copy()
    keep = (frame["end"].to_numpy() > window.start_ns) & (frame["start"].to_numpy() < window.end_ns)
    out = frame.loc[keep].copy()
    out["start"] = out["start"].clip(lower=window.start_ns)
    out["end"] = out["end"].clip(upper=window.end_ns)
    return out


def window_mask(frame: pd.DataFrame, window: Window) -> np.ndarray:
    """Rows whose ``start`` lies in ``[window.start_ns, window.end_ns)``."""
    s = frame["start"].to_numpy()
    return (s >= window.start_ns) & (s < window.end_ns)


def starts_in_window(frame: pd.DataFrame, window: Window, columns: list[str] | None = None) -> pd.DataFrame:
    """Rows whose ``start`` lies in the window (events counted, not clipped), optionally only
    ``columns``. Avoids copying the rows when the selection is everything or one contiguous run
    (frames sorted by start), which is the common case for big tables."""
    if columns is not None:
        frame = frame[[c for c in columns if c in frame.columns]]
    if frame.empty:
        return frame.copy()
    mask = window_mask(frame, window)
    idx = np.flatnonzero(mask)
    if len(idx) == len(frame):
        return frame.copy(deep=False)
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return frame.iloc[idx[0]: idx[-1] + 1].copy(deep=False)
    return frame.loc[mask].copy()


def new_frame(data: dict[str, object]) -> pd.DataFrame:
    """``pd.DataFrame(data)`` that keeps object (text) arrays as object columns.

    pandas 3 turns every object array of strings into its pyarrow ``str`` dtype on construction (a
    copy of each value into Arrow, ~80 ms per million rows and column), and the fact code reads them
    back with ``to_numpy(dtype=object)`` (another copy) and takes rows from them (slower on Arrow
    strings than on object arrays). Facts with a million rows and five text columns spent seconds on
    that churn; wrapping object arrays in object Series skips it. Values are unchanged.

    ``copy=False``: the arrays become the frame's columns as they are (no consolidation into 2-D
    blocks, which copied every integer column: 0.3 s and one extra copy of the frame per million
    rows). Callers pass arrays they own and do not modify afterwards."""
    wrapped = {
        k: pd.Series(v, dtype=object, copy=False)
        if isinstance(v, np.ndarray) and v.dtype == object else v
        for k, v in data.items()
    }
    return pd.DataFrame(wrapped, copy=False)


def column(frame: pd.DataFrame, name: str, default: object) -> pd.Series:
    """``frame[name]`` or a constant column (for optional extras a loader may not provide)."""
    if name in frame.columns:
        return frame[name]
    return pd.Series([default] * len(frame), index=frame.index)


def text(series: pd.Series) -> pd.Series:
    """A text column with missing values as ``""`` (object dtype, stable across pandas versions).

    Conversions run on the distinct values only (a million launches of a few hundred kernels)."""
    if series.dtype == object and not series.isna().any():
        return series
    codes, uniques = factorize_objects(series)
    values = np.array([str(u) for u in uniques] + [""], dtype=object)  # distinct values only
    return pd.Series(values[codes], index=series.index, dtype=object)


def frame_memo(frame: pd.DataFrame, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per (``frame`` object, ``key``): what several stages derive from one trace table
    (the NVTX ranges and their kinds: the window chooser, the facts and the breakdown each ask) is worked
    out on first use and read afterwards. The value is kept on the frame object itself, so it goes with
    the frame (a frame derived from it, a copy or a pickled one starts with none). Frames are never
    changed in place after loading, so a value stays right for the frame it was made from; arrays
    returned are read-only (a caller changing one in place fails instead of changing what the next
    caller reads)."""
    memo = frame.__dict__.setdefault("_analyzer_memo", {})
    if key in memo:
        return memo[key]
    value = compute()
    for arr in (value if isinstance(value, tuple) else (value,)):
        if isinstance(arr, np.ndarray):
            arr.flags.writeable = False
    return memo.setdefault(key, value)  # two threads asking at once: both read the first one stored


def text_matches(frame: pd.DataFrame, name: str, pattern: re.Pattern[str]) -> np.ndarray:
    """Per row of ``frame``: ``pattern`` matches the start of column ``name``'s text (missing column or
    value: ``""``), tested once per distinct text; the column's codes made once per frame
    (:func:`frame_memo`)."""
    codes, labels = frame_memo(frame, "text_codes:" + name, lambda: text_codes(column(frame, name, "")))
    hit = np.array([bool(pattern.match(str(u))) for u in labels], dtype=bool)
    return hit[codes]


def text_codes(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """A text column as ``(codes, labels)`` with ``labels[codes]`` equal to ``text(series)`` (missing
    -> ``""``): a categorical column's own codes (nothing hashed), else its factorization."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy()
        labels = np.array([str(c) for c in series.cat.categories] + [""], dtype=object)
    else:
        codes, uniques = factorize_objects(series)
        labels = np.array([str(u) for u in uniques] + [""], dtype=object)
    if len(codes) and codes.min() < 0:
        codes = np.where(codes < 0, len(labels) - 1, codes)
    return codes, labels


def concat_codes(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)`` pairs stacked into one (codes shifted into the concatenated labels)."""
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [len(labels) for _, labels in parts[:-1]])
    codes = np.concatenate([c.astype(np.int64) + off for (c, _), off in zip(parts, offsets)])
    return codes, np.concatenate([labels for _, labels in parts])


def text_array(codes: np.ndarray, labels: np.ndarray) -> Any:
    """``labels[codes]`` as the column a frame makes of that object array (pandas 3: its Arrow ``str``
    dtype), gathered in Arrow from the codes: turning a million-row object array into that dtype copies
    every value (0.06-0.1 s per column); a ``take`` from the few labels costs a tenth of that. Object
    array where the frame keeps object columns (no string inference) or a label is not text."""
    codes = np.asarray(codes)
    dtype = _inferred_str_dtype()
    if dtype is None or not all(isinstance(x, str) for x in labels):
        return np.asarray(labels, dtype=object)[codes]
    import pyarrow as pa

    taken = pa.array(list(labels), type=pa.large_string()).take(pa.array(codes))
    return pd.array(taken, dtype=dtype)


@functools.lru_cache(maxsize=1)
def _inferred_str_dtype() -> Any:
    """The dtype pandas gives a column of Python strings (None when it keeps them as object)."""
    dtype = pd.Series(["a"]).dtype
    return None if dtype.kind == "O" and not isinstance(dtype, pd.StringDtype) else dtype


def categorical_parts(parts: list[tuple[np.ndarray, np.ndarray]], order: np.ndarray | None = None) -> pd.Categorical:
    """``categorical(*concat_codes(parts))`` taken at ``order`` (all rows when None): the same
    categorical (sorted, used, distinct categories), with the labels remapped per part first so that
    the rows are written once, as codes of the categorical's own width (one byte for fewer than 128
    texts), instead of as shifted 64-bit codes that are gathered and remapped again."""
    if len(parts) == 1 and order is None:
        return categorical(*parts[0])
    used, texts = [], []
    for codes, labels in parts:
        table_size = len(labels) + 1  # code -1 reads "" (the extra slot), as in ``categorical``
        c = np.asarray(codes)
        c = np.where(c < 0, table_size - 1, c) if len(c) and c.min() < 0 else c
        u = np.flatnonzero(np.bincount(c, minlength=table_size)) if len(c) else np.empty(0, np.intp)
        table = np.empty(table_size, dtype=object)
        table[:-1] = labels
        table[-1] = ""
        used.append((c, u, table_size))
        texts.append(np.array([t if isinstance(t, str) else "" for t in table[u]], dtype=object))
    if not sum(len(c) for c, _, _ in used):
        return categorical(np.empty(0, np.int8), np.empty(0, dtype=object))
    cats, inverse = np.unique(np.concatenate(texts), return_inverse=True)
    inverse = inverse.reshape(-1)
    width = np.int8 if len(cats) < 128 else np.int16 if len(cats) < 32768 else np.int32
    out, at = [], 0
    for c, u, table_size in used:
        remap = np.full(table_size, -1, dtype=width)
        remap[u] = inverse[at:at + len(u)]
        at += len(u)
        out.append(remap[c])
    codes = np.concatenate(out) if len(out) > 1 else out[0]
    if order is not None:
        codes = codes[order]
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))


def map_distinct(series: pd.Series, fn: Callable[[str], object]) -> np.ndarray:
    """``fn`` applied to each distinct text value once, spread back to all rows (object array)."""
    codes, uniques = factorize_objects(text(series))
    values = np.array([fn(u) for u in uniques] + [None], dtype=object)  # distinct values only
    return values[codes]


_NUMBERED = re.compile(r"(?<=[A-Za-z_#\-])\d+(?=/|$)")


def generic_path(path: str) -> str:
    """``step_12/load_batch`` -> ``step_N/load_batch``: the same phase in every step."""
    return _NUMBERED.sub("N", path)
