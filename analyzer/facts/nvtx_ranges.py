"""The NVTX range table's own questions, before any fact: which rows are ranges (not marks), each row's
parent, and which range was open on a thread at an instant. The phase index
(:mod:`analyzer.facts.phase_index`), the window chooser and the NVTX facts (:mod:`analyzer.facts.nvtx`)
share these.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import asof_backward, column, frame_memo, key_groups, text


def ranges_only(nvtx: pd.DataFrame) -> pd.DataFrame:
    """NVTX ranges without instantaneous marks: one frame per ``nvtx`` frame, made on first use
    (:func:`analyzer.facts._util.frame_memo`), so that what is derived from it (the operator ranges,
    :func:`analyzer.facts.nvtx.operator_ranges`) is worked out once too. Never change it in place."""
    if nvtx.empty:
        return nvtx

    def compute() -> pd.DataFrame:
        kind = text(column(nvtx, "kind", "pushpop"))
        return nvtx.loc[(kind != "mark").to_numpy() & (nvtx["end"].to_numpy() > nvtx["start"].to_numpy())]

    return frame_memo(nvtx, "ranges_only", compute)


def parent_positions(nvtx: pd.DataFrame) -> np.ndarray:
    """For each row of ``nvtx``, the row position of its parent range (``-1`` for roots/unknown); once
    per frame, read-only."""
    def compute() -> np.ndarray:
        index = pd.Index(nvtx["range_id"].to_numpy())
        parent = column(nvtx, "parent_id", -1).fillna(-1).to_numpy(dtype=np.int64)
        return index.get_indexer(parent).astype(np.int64)

    return frame_memo(nvtx, "parent_positions", compute)


def innermost_open(nvtx: pd.DataFrame, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row position in ``nvtx`` of the innermost range open at ``t[i]`` on thread ``tid[i]``, or -1.

    ``nvtx`` must hold ranges only (see :func:`ranges_only`). For properly nested ranges, the range
    latest to start at or before ``t`` on the thread is either open at ``t`` or nested inside the
    innermost open one, so one as-of lookup per thread plus a walk up the parents finds it.

    The answer only changes at a range's start or end on the thread, so with many more queries than
    ranges (millions of timeline segments) it is found once per such instant and each query takes the
    answer of the latest instant at or before it: one as-of lookup, no walk per query. Many batches of
    queries against one table: :class:`InnermostOpen`, which finds those answers once.
    """
    return shared_innermost(nvtx)(tid, t)


def shared_innermost(nvtx: pd.DataFrame) -> "InnermostOpen":
    """The one :class:`InnermostOpen` of the range table ``nvtx`` (:func:`analyzer.facts._util.frame_memo`):
    the gaps, the breakdown, the refills and the loop search ask the same table, whose answers at every
    range start and end are then found once."""
    return frame_memo(nvtx, "innermost_open", lambda: InnermostOpen(nvtx))


class InnermostOpen:
    """:func:`innermost_open` against one range table for any number of query batches (the timeline's
    idle segments, classified in chunks, ask two batches per chunk): the answer at every range start and
    end, per thread in time order, is found once, on the first batch that has many more queries than
    ranges; a batch with few queries walks as :func:`innermost_open` does. Every answer is the one
    :func:`innermost_open` gives for that batch alone."""

    def __init__(self, nvtx: pd.DataFrame) -> None:
        self.nvtx = nvtx
        self._table: tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]] | None = None

    def __call__(self, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        nvtx = self.nvtx
        n = len(t)
        if n == 0 or nvtx.empty:
            return np.full(n, -1, dtype=np.int64)
        if n <= 4 * len(nvtx):
            return _innermost_walk(nvtx, tid, t)
        if self._table is None:
            r_tid = nvtx["tid"].to_numpy(dtype=np.int64)
            at_tid = np.r_[r_tid, r_tid]
            at_t = np.r_[nvtx["start"].to_numpy(dtype=np.int64), nvtx["end"].to_numpy(dtype=np.int64)]
            self._table = _value_tables(at_tid, at_t, _innermost_walk(nvtx, at_tid, at_t))
        return _asof_lookup(self._table, np.asarray(tid, dtype=np.int64), np.asarray(t, dtype=np.int64))


def _value_tables(r_tid: np.ndarray, r_t: np.ndarray, value: np.ndarray,
                  ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """What :func:`_asof_lookup` reads: the threads (sorted), and per thread its instants in (t, row) order
    (ties keep the later row last) and the values behind a -1 (position k + 1: instant k's value)."""
    r_order = np.lexsort((r_t, r_tid))  # by thread, then t, stable: ties keep the later row last
    rk = r_tid[r_order]
    r_cut = np.r_[0, np.flatnonzero(rk[1:] != rk[:-1]) + 1, len(rk)]
    times, tables = [], []
    for g in range(len(r_cut) - 1):
        rows = r_order[r_cut[g]:r_cut[g + 1]]
        times.append(r_t[rows])
        tables.append(np.r_[-1, value[rows]].astype(np.int64, copy=False))
    return rk[r_cut[:-1]], r_cut, times, tables


def _asof_lookup(index: tuple[np.ndarray, np.ndarray, list[np.ndarray], list[np.ndarray]], tid: np.ndarray,
                 t: np.ndarray) -> np.ndarray:
    """The value of the instant :func:`asof_backward` picks for each query (-1 where none): per thread one
    ``searchsorted`` into its table; a thread's queries are gathered and scattered only when several
    threads ask (no masks or selects over the queries)."""
    r_keys, _cut, times, tables = index
    out = np.full(len(t), -1, dtype=np.int64)
    one = len(t) > 0 and tid.min() == tid.max()
    if one:
        q_order, q_from, q_to = np.arange(len(t)), np.zeros(1, dtype=np.int64), np.full(1, len(t))
    else:
        q_order, q_from, q_to = key_groups(tid)
    for a, b in zip(q_from.tolist(), q_to.tolist()):
        key = int(tid[q_order[a]])
        g = int(np.searchsorted(r_keys, key))
        if g == len(r_keys) or r_keys[g] != key:
            continue
        if one:
            out = tables[g][np.searchsorted(times[g], t, side="right")]
        else:
            q = q_order[a:b]
            out[q] = tables[g][np.searchsorted(times[g], t[q], side="right")]
    return out


def _innermost_walk(nvtx: pd.DataFrame, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """:func:`innermost_open` by an as-of lookup of each query and a walk up the parents."""
    starts = nvtx["start"].to_numpy(dtype=np.int64)
    ends = nvtx["end"].to_numpy(dtype=np.int64)
    parent = parent_positions(nvtx)
    cand = asof_backward(nvtx["tid"].to_numpy(dtype=np.int64), starts, tid, t)
    tt = np.asarray(t, dtype=np.int64)
    max_depth = int(column(nvtx, "depth", 0).max()) + 2 if len(nvtx) else 1
    # walk up from the queries whose candidate closed before t, one level per pass, over the queries
    # still walking only (the first pass tests all of them; most stop there)
    todo = np.arange(len(cand))
    for _ in range(max(max_depth, 1) + 64):  # bounded walk; depth is small in practice
        c = cand[todo]
        closed = (c >= 0) & (ends[np.maximum(c, 0)] <= tt[todo])
        if not closed.any():
            break
        todo = todo[closed]
        cand[todo] = parent[c[closed]]
    return cand
