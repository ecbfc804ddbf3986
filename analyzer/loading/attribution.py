"""Correlation and NVTX attribution, vectorized.

Three jobs:

1. :func:`nest_ranges` gives every NVTX range its depth, parent and path per thread by containment.
2. :class:`NvtxTimeline` answers "which NVTX range is innermost-open at time t on thread T" (and, for
   the process fallback, "the deepest range open at t on any thread of process P") for millions of
   queries with ``numpy.searchsorted`` over per-thread step functions.
3. :func:`join_correlation` joins GPU operations to the API call that launched them on
   ``(pid, correlationId)``: correlation ids are unique per process, not per trace.

Why a process fallback: PyTorch launches backward kernels from its autograd worker thread while the
main thread holds the ``backward`` range; looking only at the launching thread would leave them
unattributed.

Definitions (half-open ranges ``[start, end)``):

- a range is *open* at ``t`` when ``start <= t < end``;
- the *innermost* open range of a thread at ``t`` is the most recently started one among those open
  (for properly nested ranges this is the deepest);
- ``depth``/``parent`` follow containment on the same thread: the parent is the innermost range that
  started before and ends no earlier.

Properly nested threads (always the case for push/pop) are handled with array operations only; a
thread whose start/end ranges overlap without nesting falls back to a stack sweep over that thread's
(small) NVTX rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzer.arrays import sorted_distinct
from analyzer.loading.columns import TextCodes, key_groups, narrow_int, take

NONE = -1


# ----------------------------------------------------------------------------------------------------
# nesting
# ----------------------------------------------------------------------------------------------------
def nest_ranges(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, set[int]]:
    """Depth and parent (row index or -1) of each range, by containment within its ``thread``, and the
    set of threads whose ranges overlap without nesting.

    All inputs are equal-length int64 arrays; ``end >= start`` is assumed (clip before)."""
    n = len(start)
    crossed: set[int] = set()
    groups = _groups(thread)
    if len(groups) == 1:  # one thread: no gather/scatter copies
        depth, parent, laminar = _nest_one_thread(start, end)
        if not laminar:
            crossed.add(int(thread[0]))
        return depth, parent, crossed
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, NONE, dtype=np.int64)
    for rows in groups:
        d, p, laminar = _nest_one_thread(start[rows], end[rows])
        depth[rows] = d
        parent[rows] = np.where(p >= 0, rows[np.maximum(p, 0)], NONE)
        if not laminar:
            crossed.add(int(thread[rows[0]]))
    return depth, parent, crossed


def _groups(key: np.ndarray) -> list[np.ndarray]:
    """Row indices grouped by ``key`` (one array per distinct value in ascending key order, rows in
    ascending order); few distinct keys (threads, processes) are found by comparison, not by a sort of
    the column (:func:`~analyzer.loading.columns.key_groups`)."""
    if len(key) == 0:
        return []
    if (key == key[0]).all():
        return [np.arange(len(key), dtype=np.int64)]
    order, starts, ends = key_groups(key)
    return [order[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def _nest_one_thread(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Depth, parent (local indices) and "properly nested" flag of one thread's ranges.

    In (start, outer-first) order, ``depth_i`` is the number of earlier ranges still open at ``s_i``:
    ``i`` minus the earlier ranges that ended by ``s_i``. The parent is the last earlier range one level
    up. Both are exact when the ranges nest; the containment check on every parent detects when they do
    not (then a stack sweep decides)."""
    n = len(s)
    order: np.ndarray | None = None
    if _sorted_by_start_outer_first(s, e):  # the loader passes rows already in this order
        ss, es = s, e
    else:
        order = np.lexsort((-e, s))
        ss, es = s[order], e[order]
    # ended_before_i = (#ranges with end <= s_i) - (#zero-length ranges at >= i with start s_i): ranges
    # after i cannot end by s_i unless they are zero-length and start at s_i.
    depth = np.searchsorted(np.sort(es), ss, side="right")
    zl_from = np.zeros(n + 1, dtype=np.int64)
    np.cumsum((es == ss)[::-1], out=zl_from[n - 1::-1] if n else zl_from[:0])
    depth -= zl_from[:n]
    depth += zl_from[np.searchsorted(ss, ss, side="right")]
    np.subtract(np.arange(n, dtype=np.int64), depth, out=depth)
    del zl_from
    parent = np.full(n, NONE, dtype=np.int64)
    ok = n == 0 or bool(depth.min() >= 0)
    if ok and n:
        # (depth, position) keys in sorted order: a stable sort by depth keeps positions ascending
        small = depth.max() < 2**15
        by_depth = np.argsort(depth.astype(np.int16) if small else depth, kind="stable")
        keys = depth[by_depth] * n + by_depth
        del by_depth
        child = np.flatnonzero(depth > 0)
        if len(child):
            q = (depth[child] - 1) * n + child
            pos = np.searchsorted(keys, q) - 1
            del q
            valid = pos >= 0
            cand = keys[np.maximum(pos, 0)]
            del pos, keys
            p = cand % n
            valid &= (cand - p) // n == depth[child] - 1
            del cand
            ok = bool(valid.all()) and bool((es[child] <= es[p]).all()) and bool((ss[p] <= ss[child]).all())
            parent[child] = p
    if not ok:
        depth, parent = _nest_sweep(ss, es)
    if order is None:
        return depth, parent, ok
    out_depth = np.empty(n, dtype=np.int64)
    out_parent = np.empty(n, dtype=np.int64)
    out_depth[order] = depth
    out_parent[order] = np.where(parent >= 0, order[np.maximum(parent, 0)], NONE)
    return out_depth, out_parent, ok


def _sorted_by_start_outer_first(s: np.ndarray, e: np.ndarray) -> bool:
    if len(s) < 2:
        return True
    ds = np.diff(s)
    return bool(((ds > 0) | ((ds == 0) & (e[1:] <= e[:-1]))).all())


def _nest_sweep(ss: np.ndarray, es: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stack sweep for a thread whose ranges overlap without nesting (sorted by start, outer first)."""
    n = len(ss)
    depth = np.zeros(n, dtype=np.int64)
    parent = np.full(n, NONE, dtype=np.int64)
    s_list, e_list = ss.tolist(), es.tolist()
    stack: list[int] = []
    for i in range(n):
        si, ei = s_list[i], e_list[i]
        while stack and e_list[stack[-1]] <= si:
            stack.pop()
        for j in reversed(stack):
            if e_list[j] >= ei and e_list[j] > si:
                parent[i] = j
                depth[i] = depth[j] + 1
                break
        stack.append(i)
    return depth, parent


def build_paths(text: np.ndarray, depth: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """``/``-joined texts from the outermost range down (object array).

    Level by level over integer path codes: a path is (parent path, text), factorized per level, so each
    distinct path string is built once and shared by all ranges that have it (a replayed training loop
    has millions of ranges but a few hundred paths)."""
    if len(text) == 0:
        return np.empty(0, dtype=object)
    text_codes, text_uniq = pd.factorize(text)
    paths = path_codes(TextCodes(text_codes, np.asarray(text_uniq, dtype=object)), depth, parent)
    return paths.labels[paths.codes]


def path_codes(text: TextCodes, depth: np.ndarray, parent: np.ndarray) -> TextCodes:
    """:func:`build_paths` of ranges whose texts are codes (every code valid), as codes into the paths
    built, one per distinct (parent path, text); a text holding ``/`` can make two of them equal."""
    n = len(text.codes)
    path_code = np.full(n, -1, dtype=np.int64)
    path_strings: list[str] = []
    text_codes = np.asarray(text.codes, dtype=np.int64)
    text_uniq = [str(t) for t in text.labels.tolist()]
    n_text = max(len(text_uniq), 1)
    for d in range(int(depth.max()) + 1 if n else 0):
        rows = np.flatnonzero(depth == d)
        if len(rows) == 0:
            continue
        parent_code = path_code[parent[rows]] if d else np.full(len(rows), -1, dtype=np.int64)
        key = (parent_code + 1) * n_text + text_codes[rows]
        uniq, inv = np.unique(key, return_inverse=True)
        base = len(path_strings)
        pcs, tcs = np.divmod(uniq, n_text)
        path_strings.extend([text_uniq[tc] if pc == 0 else path_strings[pc - 1] + "/" + text_uniq[tc]
                             for pc, tc in zip(pcs.tolist(), tcs.tolist())])
        path_code[rows] = base + inv.reshape(-1)
    table = np.empty(len(path_strings), dtype=object)
    table[:] = path_strings
    return TextCodes(path_code, table)


# ----------------------------------------------------------------------------------------------------
# innermost-open-range step functions
# ----------------------------------------------------------------------------------------------------
@dataclass
class _Steps:
    """A step function of time: ``state[k]`` holds on ``[times[k], times[k+1])``; -1 before times[0]."""

    times: np.ndarray
    state: np.ndarray

    def at(self, t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.times, t, side="right") - 1
        out = self.state[np.maximum(k, 0)]
        return np.where(k >= 0, out, NONE)


def _thread_steps(rows: np.ndarray, s: np.ndarray, e: np.ndarray, depth: np.ndarray,
                  parent: np.ndarray, laminar: bool) -> _Steps:
    """Innermost open range (global row id) of one thread as a step function.

    Properly nested (laminar) threads: each start switches to that range, each end back to its parent;
    at equal times ends come before starts, inner ends first and outer starts first, so the last
    event at a time gives the state after it."""
    keep = e > s  # zero-length ranges and marks are never open
    rows, s, e = rows[keep], s[keep], e[keep]
    n = len(rows)
    if n == 0:
        return _Steps(np.empty(0, np.int64), np.empty(0, np.int64))
    if not laminar:
        return _sweep_steps(rows, s, e)
    d = depth[rows]
    times = np.concatenate([s, e])
    state = np.concatenate([rows, parent[rows]])
    # at equal times: ends (inner first: -depth ascending), then starts (outer first): one key for both,
    # starts offset past every end
    top = int(d.max()) + 1
    tie = np.concatenate([d + 2 * top, top - d])
    order = np.lexsort((tie, times))
    return _Steps(times[order], state[order])


def _sweep_steps(rows: np.ndarray, s: np.ndarray, e: np.ndarray) -> _Steps:
    """Most-recently-started open range, by a stack with lazy deletion (non-nested threads only)."""
    n = len(rows)
    times = np.concatenate([s, e])
    local = np.concatenate([np.arange(n), np.arange(n)])
    is_start = np.concatenate([np.ones(n, np.int64), np.zeros(n, np.int64)])
    # equal times: ends first; among starts the longer (outer) first, so the inner one ends on top
    tie = np.concatenate([-e, np.zeros(n, np.int64)])
    order = np.lexsort((local, tie, is_start, times))
    closed = [False] * n
    stack: list[int] = []
    state = np.empty(2 * n, dtype=np.int64)
    ev_local = local[order].tolist()
    ev_start = is_start[order].tolist()
    rows_l = rows.tolist()
    for k in range(2 * n):
        i = ev_local[k]
        if ev_start[k]:
            stack.append(i)
        else:
            closed[i] = True
        while stack and closed[stack[-1]]:
            stack.pop()
        state[k] = rows_l[stack[-1]] if stack else NONE
    return _Steps(times[order], state)


class NvtxTimeline:
    """Innermost-open-range lookups over an NVTX range table.

    ``thread`` is a per-range thread key (nsys ``globalTid``), ``pid`` its process. Marks and
    zero-length ranges are never open."""

    def __init__(self, thread: np.ndarray, pid: np.ndarray, start: np.ndarray, end: np.ndarray,
                 depth: np.ndarray, parent: np.ndarray, crossed: set[int] | None = None) -> None:
        crossed = crossed or set()
        self._depth = depth
        self._start = start
        self._threads: dict[int, _Steps] = {}
        self._thread_pid: dict[int, int] = {}
        for rows in _groups(thread):
            key = int(thread[rows[0]])
            self._threads[key] = _thread_steps(rows, start[rows], end[rows], depth, parent, key not in crossed)
            self._thread_pid[key] = int(pid[rows[0]])
        self._procs: dict[int, _Steps] = {}
        by_pid: dict[int, list[_Steps]] = {}
        for key, steps in self._threads.items():
            if len(steps.times):
                by_pid.setdefault(self._thread_pid[key], []).append(steps)
        # rank ranges by (depth, start, id): the process fallback picks the deepest open range,
        # ties broken by the most recent start
        n = len(start)
        rank = np.empty(n, dtype=np.int64)
        rank[np.lexsort((start, depth))] = np.arange(n)  # lexsort is stable: ties keep the row order
        for p, steps_list in by_pid.items():
            if len(steps_list) == 1:
                self._procs[p] = steps_list[0]
                continue
            times = sorted_distinct(np.concatenate([st.times for st in steps_list]))
            best = np.full(len(times), NONE, dtype=np.int64)
            best_rank = np.full(len(times), -1, dtype=np.int64)
            for st in steps_list:
                cur = st.at(times)
                cur_rank = np.where(cur >= 0, rank[np.maximum(cur, 0)], -1)
                better = cur_rank > best_rank
                best[better] = cur[better]
                best_rank[better] = cur_rank[better]
            self._procs[p] = _Steps(times, best)

    def thread_at(self, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Innermost range open at ``t[i]`` on thread ``thread[i]`` (-1 if none)."""
        out = np.full(len(t), NONE, dtype=np.int64)
        if self._threads and len(t):
            _steps_at(out, thread, t, self._threads)
        return out

    def process_at(self, pid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Deepest range open at ``t[i]`` on any thread of process ``pid[i]`` (-1 if none)."""
        out = np.full(len(t), NONE, dtype=np.int64)
        if self._procs and len(t):
            _steps_at(out, pid, t, self._procs)
        return out


#: :func:`_steps_at` finds the rows of at most this many step functions by comparison, not by grouping
#: the queries (NVTX ranges usually come from one or two threads)
_FEW_STEPS = 4


def _steps_at(out: np.ndarray, key: np.ndarray, t: np.ndarray, steps: dict[int, _Steps]) -> None:
    """``out[i] = steps[key[i]].at(t[i])`` where ``key[i]`` has a step function with steps."""
    live = {k: st for k, st in steps.items() if len(st.times)}
    if len(live) <= _FEW_STEPS:
        for k, st in live.items():
            match = key == k
            if match.all():
                out[:] = st.at(t)
                continue
            rows = np.flatnonzero(match)
            if len(rows):
                out[rows] = st.at(t[rows])
        return
    for rows in _groups(key):
        found = live.get(int(key[rows[0]]))
        if found is not None:
            out[rows] = found.at(t[rows])


# ----------------------------------------------------------------------------------------------------
# correlation
# ----------------------------------------------------------------------------------------------------
def correlation_key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One int64 per (pid, correlationId): pid (24 bits) above the 32-bit correlation id."""
    key = np.asarray(pid, dtype=np.int64) << 32
    key |= np.asarray(corr, dtype=np.int64) & 0xFFFFFFFF
    return key


class CorrelationIndex:
    """API calls indexed by (pid, correlationId) for repeated joins (kernels, memcpy, memset, sync).

    Correlation ids are unique per process, not per trace. When several API rows share a key (a runtime
    call and the driver call it made), the row with the lowest ``priority`` wins (runtime = 0)."""

    def __init__(self, api_pid: np.ndarray, api_corr: np.ndarray, priority: np.ndarray | None = None) -> None:
        pid = np.asarray(api_pid)
        #: the calls' one process (the low 32 bits the key keeps of it), when they all share one: the key
        #: is then the correlation id's low 32 bits alone, in the same order (no int64 key per call: at
        #: 20.8 M calls 167 MB, or none at all for an int32 column already in order, which nsys writes)
        self._one_pid: int | None = None
        if len(pid) and pid.dtype.kind in "iu" and bool((pid == pid[0]).all()):
            self._one_pid = int(pid[0]) & 0xFFFFFFFF
            self._by_pid = self._build(_low32(api_corr), priority)
        else:
            self._by_pid = self._build(correlation_key(api_pid, api_corr), priority)
        self._by_corr: tuple[np.ndarray, np.ndarray | None] | None = None
        self._corr, self._priority = api_corr, priority

    @staticmethod
    def _build(key: np.ndarray, priority: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """The distinct keys sorted, and the row of each (the first, or the lowest ``priority``); rows
        ``None``: the keys are the rows' own, distinct and in row order (nsys API tables), no sort."""
        if len(key) < 2 or bool((key[1:] > key[:-1]).all()):
            return key, None
        order = np.argsort(key, kind="stable")
        sk = key[order]
        first = np.ones(len(sk), dtype=bool)
        first[1:] = sk[1:] != sk[:-1]
        if priority is not None and not first.all():
            order = np.lexsort((priority, key))
            sk = key[order]
        return sk[first], order[first]

    def lookup(self, op_pid: np.ndarray | None, op_corr: np.ndarray) -> np.ndarray:
        """Row index of each operation's launching call, -1 when unmatched. Joins on the correlation id
        alone when the operations' pids are unknown (exports without ``globalPid``)."""
        n = len(op_corr)
        if n == 0 or len(self._by_pid[0]) == 0:
            return np.full(n, NONE, dtype=np.int64)
        same: np.ndarray | None = None  # the operation's process is the calls' one (one-process index)
        if op_pid is not None and (op_pid >= 0).all():
            sk, rows = self._by_pid
            if self._one_pid is not None:
                key = _low32(op_corr)
                op = np.asarray(op_pid)
                narrow = op.dtype.kind in "iu" and op.dtype.itemsize <= 4  # values >= 0 are their low 32 bits
                same = (op == self._one_pid if narrow and self._one_pid <= np.iinfo(op.dtype).max
                        else (np.asarray(op, dtype=np.int64) & 0xFFFFFFFF) == self._one_pid)
            else:
                key = correlation_key(op_pid, op_corr)
        else:
            if self._by_corr is None:
                self._by_corr = self._build(np.asarray(self._corr, dtype=np.int64), self._priority)
            sk, rows = self._by_corr
            key = np.asarray(op_corr, dtype=np.int64)
        pos = np.searchsorted(sk, key)
        np.minimum(pos, len(sk) - 1, out=pos)
        found = sk[pos] == key
        if same is not None:
            found &= same
        return np.where(found, pos if rows is None else rows[pos], NONE)


def _low32(corr: np.ndarray) -> np.ndarray:
    """The low 32 bits of correlation ids as ``uint32`` (the part :func:`correlation_key` keeps), a view
    of an ``int32`` column."""
    corr = np.asarray(corr)
    if corr.dtype == np.uint32:
        return corr
    if corr.dtype == np.int32:
        return corr.view(np.uint32)
    return (np.asarray(corr, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32)


def join_correlation(op_pid: np.ndarray | None, op_corr: np.ndarray, api_pid: np.ndarray,
                     api_corr: np.ndarray, priority: np.ndarray | None = None) -> np.ndarray:
    """One-shot :meth:`CorrelationIndex.lookup` (first API row wins ties unless ``priority`` is given)."""
    return CorrelationIndex(api_pid, api_corr, priority).lookup(op_pid, op_corr)


# ----------------------------------------------------------------------------------------------------
# GPU operations -> launching call -> range (shared by every loader)
# ----------------------------------------------------------------------------------------------------
def range_columns(text: TextCodes, path: TextCodes, ids: np.ndarray) -> dict[str, Any]:
    """nvtx_id / nvtx_range / nvtx_path for rows whose innermost range is ``ids`` (-1: none), the texts as
    codes into the ranges' distinct texts and paths (one gather, no string touched)."""
    return {"nvtx_id": ids, "nvtx_range": text.take(ids), "nvtx_path": path.take(ids)}


class Launches:
    """The API calls as a join target: the correlation index plus per-call columns, read with
    :func:`take` so that a failed join (row index -1) gathers "unknown" (-1).

    ``api`` holds integer arrays ``start``, ``pid``, ``tid``, ``correlation_id`` and ``is_driver``
    (driver calls lose correlation-id ties against runtime calls); ``thread_nvtx`` is the innermost
    range open on each call's own thread at its start. ``pid``, ``tid`` and ``thread_nvtx`` are kept in
    32 bits when their values fit (:func:`narrow_int`; a loader that passes them narrowed already shares
    them): at 10 M kernels the calls are 20.8 M rows, and each int64 column of them 167 MB."""

    def __init__(self, api: dict[str, np.ndarray], name: TextCodes, thread_nvtx: np.ndarray,
                 timeline: NvtxTimeline, nvtx: pd.DataFrame) -> None:
        self.index = CorrelationIndex(api["pid"], api["correlation_id"], api["is_driver"])
        self.name = name
        self.start = np.asarray(api["start"], dtype=np.int64)
        self.pid = narrow_int(api["pid"])
        self.tid = narrow_int(api["tid"])
        self.thread_nvtx = narrow_int(thread_nvtx)
        self.nvtx = nvtx
        self._timeline = timeline

    def process_nvtx(self, calls: np.ndarray, thread: np.ndarray) -> np.ndarray:
        """Process-fallback range of the calls ``calls`` (row indices, -1 none) whose ranges on their own
        thread are ``thread`` (``take(self.thread_nvtx, calls)``): the deepest range open at the call's
        start on any thread of its process, looked up only for calls with no range on their own thread
        (-1 for the others). Asked per join for the calls that launched its operations: most of a
        trace's calls launch nothing (half of the 2 M calls of a 1 M-kernel trace are on a thread
        without ranges), so a lookup for every call cost twice the queries and a trace-long array."""
        out = np.full(len(calls), NONE, dtype=np.int64)
        need = np.flatnonzero((thread < 0) & (calls >= 0))
        if len(need):
            rows = calls[need]
            out[need] = self._timeline.process_at(self.pid[rows], self.start[rows])
        return out


_HOW = np.array(["none", "process", "thread"], dtype=object)

#: :func:`launch_columns` joins the operations this many at a time, so that its per-operation
#: temporaries (the call row, the thread and process ranges: int64 each) are never as long as the table
LAUNCH_CHUNK = 1 << 20


def launch_columns(launch: Launches, op_pid: np.ndarray | None, op_corr: np.ndarray,
                   text: TextCodes, path: TextCodes) -> dict[str, Any]:
    """The attribution columns (:data:`~analyzer.loading.model.ATTRIBUTION_COLUMNS`) of GPU operations:
    their launching call joined on (pid, correlation id) (on the id alone when ``op_pid`` is None), the
    range open on the call's thread, else the process fallback. ``text``/``path``: the ranges' texts
    and paths as codes (see :func:`range_columns`).

    Joined :data:`LAUNCH_CHUNK` operations at a time into columns allocated once for all of them, in the
    types of the columns they gather (32 bits for the call's pid, tid and range where the calls' columns
    are: :class:`Launches`), and codes in 32 bits: at 10 M kernels the whole-table int64 temporaries of
    one join (call rows, both ranges, the chosen range, pid, tid and four codes) were about 0.8 GB of the
    loader's peak. The values are those of one join over all operations."""
    n = len(op_corr)
    own_pid = narrow_int(op_pid) if op_pid is not None else None
    pid_dtype = np.result_type(launch.pid.dtype, own_pid.dtype if own_pid is not None else np.int64)
    if own_pid is None and launch.pid.dtype == np.int32:
        pid_dtype = np.dtype(np.int32)  # the fill -1 fits
    range_dtype = np.result_type(launch.thread_nvtx.dtype, np.int32)
    out_name = np.empty(n, dtype=_code_type(launch.name))
    out_start = np.empty(n, dtype=launch.start.dtype)
    out_pid = np.empty(n, dtype=pid_dtype)
    out_tid = np.empty(n, dtype=launch.tid.dtype)
    how = np.zeros(n, dtype=np.int8)
    nvtx_id = np.empty(n, dtype=range_dtype)
    for lo in range(0, n, LAUNCH_CHUNK):
        hi = min(lo + LAUNCH_CHUNK, n)
        part_pid = own_pid[lo:hi] if own_pid is not None else None
        idx = launch.index.lookup(part_pid, op_corr[lo:hi])
        thread_id = take(launch.thread_nvtx, idx)
        proc_id = launch.process_nvtx(idx, thread_id)
        has_thread = thread_id >= 0
        nvtx_id[lo:hi] = np.where(has_thread, thread_id, proc_id)
        part_how = how[lo:hi]
        part_how[proc_id >= 0] = 1
        part_how[has_thread] = 2
        del thread_id, proc_id, has_thread
        out_name[lo:hi] = take(launch.name.codes, idx)
        out_start[lo:hi] = take(launch.start, idx)
        found = idx >= 0
        out_pid[lo:hi] = np.where(found, take(launch.pid, idx), part_pid if part_pid is not None else NONE)
        out_tid[lo:hi] = take(launch.tid, idx)
    out: dict[str, Any] = {
        "api_name": TextCodes(out_name, launch.name.labels),
        "api_start": out_start,
        "pid": out_pid,
        "tid": out_tid,
        "attribution": TextCodes(how, _HOW),
    }
    out.update(range_columns(narrow_codes(text), narrow_codes(path), nvtx_id))
    return out


def _code_type(text: TextCodes) -> np.dtype:
    """The type for codes into ``text``'s labels: 32 bits where they fit (codes are label positions)."""
    return np.dtype(np.int32) if len(text.labels) < 2**31 - 1 else np.asarray(text.codes).dtype


def narrow_codes(text: TextCodes) -> TextCodes:
    """``text`` with its codes in 32 bits where they fit (no copy when they are already): the range
    texts and paths that every join gathers by operation."""
    codes = np.asarray(text.codes)
    dtype = _code_type(text)
    return text if codes.dtype == dtype else TextCodes(codes.astype(dtype), text.labels)


def graph_membership(api_name: TextCodes, graph_node_id: np.ndarray,
                     preset: np.ndarray | None = None, correlation_id: np.ndarray | None = None) -> np.ndarray:
    """``in_graph`` of GPU operations (:data:`~analyzer.loading.model.KERNEL_COLUMNS`): 1 where the
    operation ran inside a CUDA graph replay (launched by a graph launch call, or carrying a graph node
    id: CUPTI writes 0 for none), else 0; ``preset`` values above 0 (whole graph executions) are kept.

    With ``correlation_id`` (the kernels of one trace): also 1 for kernels whose launch call the trace
    lacks but whose correlation id (> 0) two kernels or more share. One launch call starts one kernel
    except a graph launch, so such kernels are one graph replay whose ``cudaGraphLaunch`` was not
    recorded (torch.profiler's CPU side starting after its GPU side: the first replays of a window)."""
    from analyzer.loading.api_names import cuda_equivalent
    from analyzer.loading.common import strip_api_suffix
    from analyzer.loading.api_names import GRAPH_LAUNCH_APIS
    from analyzer.loading.model import GRAPH_KERNEL

    is_graph_api = np.array([cuda_equivalent(strip_api_suffix(str(t))) in GRAPH_LAUNCH_APIS
                             for t in api_name.labels] + [False], dtype=bool)
    codes = np.asarray(api_name.codes)
    out = np.where(is_graph_api[np.where(codes < 0, len(api_name.labels), codes)], GRAPH_KERNEL, 0).astype(np.int8)
    node = np.asarray(graph_node_id)
    if len(node) == len(out):
        out[node > 0] = GRAPH_KERNEL
    if correlation_id is not None and len(correlation_id) == len(out):
        corr = np.asarray(correlation_id, dtype=np.int64)
        orphan = np.flatnonzero((codes < 0) & (corr > 0))
        if len(orphan):
            ids, counts = np.unique(corr[orphan], return_counts=True)
            shared = np.isin(corr[orphan], ids[counts >= 2])
            out[orphan[shared]] = GRAPH_KERNEL
    if preset is not None and len(preset) == len(out):
        out = np.where(np.asarray(preset) > 0, np.asarray(preset, dtype=np.int8), out)
    return out
