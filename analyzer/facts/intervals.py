"""GPU activity as intervals: all GPU ops, their union per device (busy), and the idle gaps.

Busy time counts concurrency once: two kernels overlapping on different streams make one busy
interval. The union is one sort plus a running maximum (see :func:`analyzer.facts._util.union_intervals`).

Which idle time is a *gap*
--------------------------
Gaps are computed on the whole trace's busy timeline of each device, then clipped to the window:
a gap is time between the end of one busy interval and the start of the next. So

* time before a device's first op and after its last op is never a gap (as in ``nsys analyze
  gpu_gaps``): before the first op the program was starting, after the last it was ending;
* a gap that straddles a window edge counts for its part inside the window (the idle time at the
  start of the first step is real idle time of that step);
* with a window the user gave explicitly (``--window 2s:5s``, source ``"user"``), the window edges act
  as op boundaries too: idle time between the window start and the device's first op inside it (and
  between its last op and the window end) is a gap, because the user asked about exactly that span.
  These edge gaps have ``edge=True``.

What the host was doing during a gap is looked up at the gap's middle on the thread that launched
the op after the gap (falling back to the thread that launched the op before it): the innermost NVTX
range open there (else on the process's main thread), and the CUDA API call open there. No API call
open means the host was running its own code (Python, data loading, ...), not waiting on CUDA.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts._util import (
    column,
    categorical_parts,
    covered_until,
    key_groups,
    new_frame,
    text_codes,
    union_intervals,
)
from analyzer.facts.nvtx import innermost_open, main_threads, ranges_only
from analyzer.facts.registry import FactContext, fact
from analyzer.loading.columns import categorical, constant_view, narrow_int

_OP_COLUMNS = {
    "start": "op start (ns)",
    "end": "op end (ns)",
    "duration": "op duration (ns)",
    "device": "GPU device id",
    "stream": "CUDA stream id",
    "op": "kernel | memcpy | memset",
    "label": "kernel short name, 'memcpy H2D', 'memset', ...",
    "correlation_id": "CUDA correlation id",
    "pid": "launching process (-1 unknown)",
    "tid": "launching thread (-1 unknown)",
    "api_name": "launching API call",
    "api_start": "launching API call start (ns, -1 unknown)",
    "nvtx_id": "innermost NVTX range at launch (-1 none)",
    "nvtx_range": "its text",
    "nvtx_path": "its path",
    "in_graph": "0 launched on its own, 1 a kernel a CUDA graph replay ran, 2 a whole graph execution "
                "(the kernels' in_graph; 0 for copies and memsets)",
}


@fact("gpu_ops", columns=_OP_COLUMNS, scope_keys=("device", "stream", "nvtx_path"))
def gpu_ops(ctx: FactContext) -> pd.DataFrame:
    """Every kernel, copy and memset of the whole trace (not windowed), with launch attribution,
    ordered by start. The building block of the interval facts.

    Dtypes follow the trace model's compact ones: times int64, ids int32 where they fit, text as
    categoricals (built from the frames' codes: no string is copied per row)."""
    t = ctx.trace
    parts = [(op, frame) for op, frame in (("kernel", t.kernels), ("memcpy", t.memcpy), ("memset", t.memset))
             if not frame.empty]
    if not parts:
        return empty_typed((c, "int64") for c in _OP_COLUMNS).astype(
            {c: object for c in _TEXT_OP_COLUMNS})

    def stacked(arrays: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]

    # order by (start, end) (stable, like a stable sort_values), then build the columns one at a time:
    # each is concatenated, put in that order and narrowed before the next (all ten columns first, then
    # their ordered copies, peaked at three times the frame: 2.4 GB more at ten million ops)
    start = stacked([f["start"].to_numpy(dtype=np.int64) for _, f in parts])
    end = stacked([f["end"].to_numpy(dtype=np.int64) for _, f in parts])
    sort = np.lexsort((end, start))
    # already in order (a kernels-only trace): no gathers
    order = None if np.array_equal(sort, np.arange(len(sort))) else sort
    del sort

    def ordered(values: np.ndarray) -> np.ndarray:
        return values if order is None else values[order]

    out: dict[str, object] = {}
    for c in _OP_COLUMNS:
        if c in _TEXT_OP_COLUMNS:
            out[c] = categorical_parts([_op_text(op, f, c) for op, f in parts], order)
        elif c == "start":
            out[c] = ordered(start)
        elif c == "end":
            out[c] = ordered(end)
        elif c == "duration":
            out[c] = ordered(end - start)
        else:
            values = ordered(stacked([_int(f, c, _OP_INT_DEFAULTS[c]) for _, f in parts]))
            # a column of one value (device, stream, process, in_graph on most traces) stored once
            out[c] = values.astype(np.int64, copy=False) if c == "api_start" else constant_view(narrow_int(values))
    return pd.DataFrame(out, copy=False)


#: value of an integer op column a frame lacks (or holds missing)
_OP_INT_DEFAULTS = {"device": 0, "stream": -1, "correlation_id": -1, "pid": -1, "tid": -1, "api_start": -1,
                    "nvtx_id": -1, "in_graph": 0}


def _op_text(op: str, frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, labels)`` of the text column ``column`` of gpu_ops for the rows of ``frame`` (ops ``op``)."""
    if column == "op":
        return np.zeros(len(frame), dtype=np.int8), np.array([op], dtype=object)
    if column != "label":
        return _text(frame, column, "")
    if op == "kernel":
        return _text(frame, "short_name", "")
    if op == "memcpy":
        codes, labels = _text(frame, "direction", "other")
        return codes, np.array(["memcpy " + x for x in labels], dtype=object)
    return np.zeros(len(frame), dtype=np.int8), np.array(["memset"], dtype=object)


_TEXT_OP_COLUMNS = ("op", "label", "api_name", "nvtx_range", "nvtx_path")


def _text(frame: pd.DataFrame, name: str, default: str) -> tuple[np.ndarray, np.ndarray]:
    if name in frame.columns:
        return text_codes(frame[name])
    return np.zeros(len(frame), dtype=np.int8), np.array([default], dtype=object)


def _int(frame: pd.DataFrame, name: str, default: int) -> np.ndarray:
    """An id column as integers (missing -> ``default``), in its own width when it has no gaps (the
    ids end up in 32 bits anyway, see ``narrow_int``: no 64-bit copy of a 32-bit column)."""
    if name not in frame.columns:
        return np.full(len(frame), default, dtype=np.int64)
    col = frame[name]
    if col.hasnans:
        col = col.fillna(default)
    values = col.to_numpy()
    return values if isinstance(values.dtype, np.dtype) and values.dtype.kind == "i" else col.to_numpy(dtype=np.int64)


def graph_spans(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(device, start, end, first_op, last_op)`` per CUDA graph replay whose kernels the trace holds
    (``in_graph`` = 1: node-level nsys tracing, torch.profiler) with two kernels or more: from its first
    kernel's start to its last kernel's end; ``first_op`` / ``last_op`` are positions in ``ops`` (the
    kernel starting first, the one ending last). The kernels of a replay share the launch call's
    correlation id (per process and device).

    The span is the graph execution: between two dependent nodes the GPU itself starts the next one (a
    few hundred ns each, the same under nsys and torch.profiler), with no host involved, so the gaps
    between a replay's kernels are GPU work of the execution, as nsys' graph-level trace
    (``--cuda-graph-trace=graph``) counts the whole execution busy."""
    empty = np.empty(0, dtype=np.int64)
    if ops.empty or "in_graph" not in ops.columns:
        return empty, empty, empty, empty, empty
    rows = np.flatnonzero((ops["in_graph"].to_numpy() == 1) & (ops["correlation_id"].to_numpy() >= 0))
    if len(rows) < 2:
        return empty, empty, empty, empty, empty
    from analyzer.loading.attribution import correlation_key

    key = correlation_key(ops["pid"].to_numpy(dtype=np.int64)[rows] & 0xFFFFFF,
                          ops["correlation_id"].to_numpy(dtype=np.int64)[rows])
    dev = ops["device"].to_numpy(dtype=np.int64)[rows]
    _, codes, counts = np.unique(np.stack([key, dev], axis=1), axis=0, return_inverse=True, return_counts=True)
    codes = np.asarray(codes).reshape(-1)
    n = len(counts)
    start = ops["start"].to_numpy(dtype=np.int64)[rows]
    end = ops["end"].to_numpy(dtype=np.int64)[rows]
    first = np.full(n, len(rows), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(rows)))  # ops are in start order: the first row starts first
    g_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(g_end, codes, end)
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, codes, np.where(end == g_end[codes], np.arange(len(rows)), -1))
    keep = (counts >= 2) & (g_end > start[first])
    return dev[first][keep], start[first][keep], g_end[keep], rows[first][keep], rows[last][keep]


@fact(
    "gpu_busy",
    columns={
        "device": "GPU device id",
        "start": "busy interval start (ns, clipped to the window)",
        "end": "busy interval end (ns, clipped to the window)",
        "duration": "busy interval length (ns)",
    },
    requires=("gpu_ops",),
    scope_keys=("device",),
)
def gpu_busy(ctx: FactContext) -> pd.DataFrame:
    """Per device, the union of kernel/memcpy/memset intervals inside the window (ops running
    concurrently on several streams count once), CUDA graph executions whole (:func:`graph_spans`)."""
    ops, w = ctx.get("gpu_ops"), ctx.window
    # clip_to_window on the three columns needed (copying the whole ops frame cost 0.3 s per 1 M ops)
    start, end, device = ops["start"].to_numpy(), ops["end"].to_numpy(), ops["device"].to_numpy()
    g_dev, g_start, g_end, _, _ = graph_spans(ops)
    if len(g_start):
        start, end, device = np.r_[start, g_start], np.r_[end, g_end], np.r_[device, g_dev]
    keep = (end > w.start_ns) & (start < w.end_ns)
    u = union_intervals(np.maximum(start[keep], w.start_ns), np.minimum(end[keep], w.end_ns), device[keep])
    dur = u.end - u.start
    keep = dur > 0
    # device ids in 32 bits (a column per interval: 10 M kernels make millions of intervals)
    return pd.DataFrame({"device": narrow_int(u.group[keep]), "start": u.start[keep], "end": u.end[keep],
                         "duration": dur[keep]})


_GAP_COLUMNS = {
    "device": "GPU device id",
    "start": "gap start (ns, clipped to the window)",
    "end": "gap end (ns, clipped to the window)",
    "duration": "gap length (ns)",
    "prev_op": "label of the op that ended before the gap ('' at a window edge)",
    "next_op": "label of the op that started after the gap ('' at a window edge)",
    "next_api": "CUDA API call that launched the op after the gap",
    "next_nvtx_path": "NVTX path the op after the gap was launched from",
    "host_tid": "thread whose activity is reported (launcher of the next op)",
    "host_pid": "its process",
    "host_nvtx_id": "innermost NVTX range open on the host at the gap's middle (-1 none)",
    "host_nvtx_range": "its text ('' none)",
    "host_nvtx_path": "its path ('' none)",
    "host_nvtx_source": "'thread' (the launching thread), 'main' (process main thread) or 'none'",
    "host_api": "CUDA API call open on host_tid at the gap's middle ('' = host running its own code)",
    "host_api_overlap_ns": "part of the gap during which host_tid was inside any CUDA API call (ns)",
    "edge": "True for the idle time between a user window's edge and the first/last op",
    "host_activity": "what that thread ran during the gap: its CPU samples and OS-runtime calls, when "
                     "recorded ('' otherwise)",
}


def _device_blocks(ops: pd.DataFrame) -> pd.DataFrame:
    """Unclipped busy blocks of the whole trace per device, with the first op of each block and the
    op that ends it (the latest-ending one). CUDA graph executions count whole (:func:`graph_spans`): a
    block holding one starts and ends with real ops all the same (its first and last kernel)."""
    start, end, device = ops["start"].to_numpy(), ops["end"].to_numpy(), ops["device"].to_numpy()
    g_dev, g_start, g_end, g_first, g_last = graph_spans(ops)
    n_ops = len(start)
    if len(g_start):
        start, end, device = np.r_[start, g_start], np.r_[end, g_end], np.r_[device, g_dev]
    u = union_intervals(start, end, device)
    nblocks = len(u.start)
    first_pos = np.full(nblocks, -1, dtype=np.int64)
    last_pos = np.full(nblocks, -1, dtype=np.int64)
    if nblocks:
        ordered = u.order
        is_first = np.r_[True, u.block[1:] != u.block[:-1]]
        first_pos[u.block[is_first]] = ordered[is_first]
        ends = np.asarray(end, dtype=np.int64)[ordered]
        # the op ending last in each block (ties: the later in ``ordered``), as a stable sort by
        # (block, end) would put last: blocks are runs of ``ordered``, so two reductions per run
        starts_of = np.flatnonzero(is_first)
        latest = np.maximum.reduceat(ends, starts_of)
        at = np.where(ends == latest[u.block], np.arange(len(ends)), -1)
        last_pos[u.block[starts_of]] = ordered[np.maximum.reduceat(at, starts_of)]
    if len(g_start):  # a graph span standing for the op: its first or last kernel
        first_pos = np.where(first_pos >= n_ops, g_first[np.maximum(first_pos - n_ops, 0)], first_pos)
        last_pos = np.where(last_pos >= n_ops, g_last[np.maximum(last_pos - n_ops, 0)], last_pos)
    return pd.DataFrame({"device": u.group, "start": u.start, "end": u.end,
                         "first_op": first_pos, "last_op": last_pos}, copy=False)


def api_open_at(api: pd.DataFrame, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Row position in ``api`` of a CUDA API call open at ``t[i]`` on thread ``tid[i]``, or -1.

    Prefers the call that started last (the innermost when driver calls nest in runtime calls);
    falls back to the longest-running earlier call on the thread (a running maximum of end times).
    Per thread (one grouping of the calls and the queries by thread): the last call starting at or
    before ``t`` by ``searchsorted``, and the call holding the running maximum of end times up to it.
    """
    return _host_api(api, tid, t)[0]


#: queries of :func:`_host_api` looked up per chunk of this many (one thread's temporaries bounded)
QUERY_CHUNK = 1 << 18


def _host_api(api: pd.DataFrame, tid: np.ndarray, t: np.ndarray, start: np.ndarray | None = None,
              end: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(api_open_at(api, tid, t), covered)``: with ``start``/``end`` given, ``covered[i]`` is the time of
    ``[start[i], end[i])`` covered by CUDA API calls on thread ``tid[i]`` (zeros otherwise). The calls
    and the queries are grouped by thread once for both (each thread's calls, their union and the
    lookups; a loop over threads only)."""
    n = len(t)
    out = np.full(n, -1, dtype=np.int64)
    covered = np.zeros(n, dtype=np.int64)
    if n == 0 or api.empty:
        return out, covered
    a_start = api["start"].to_numpy(dtype=np.int64)
    a_end = api["end"].to_numpy(dtype=np.int64)
    atid = api["tid"].to_numpy()  # its own dtype: the same stable grouping without an int64 copy
    if len(a_start) < 2 or (a_start[1:] >= a_start[:-1]).all():
        # by start already (the loader's order): a stable grouping by thread keeps each thread's calls
        # in (start, row) order without sorting two million start times again
        a_order, a_from, a_to = key_groups(atid)
    else:
        a_order = np.lexsort((a_start, atid))
        ak = atid[a_order]
        cut = np.flatnonzero(ak[1:] != ak[:-1]) + 1
        a_from, a_to = np.r_[0, cut], np.r_[cut, len(ak)]
    thread_of = atid[a_order[a_from]]
    tid = np.asarray(tid)  # its own integer type (32-bit thread ids: no 64-bit copy per query)
    if tid.dtype.kind not in "iu":
        tid = tid.astype(np.int64)
    t = np.asarray(t, dtype=np.int64)
    q_order, q_from, q_to = key_groups(tid)
    for qa, qb in zip(q_from.tolist(), q_to.tolist()):
        q = q_order[qa:qb]
        g = int(np.searchsorted(thread_of, tid[q[0]]))
        if g == len(thread_of) or thread_of[g] != tid[q[0]]:
            continue
        rows = a_order[a_from[g]:a_to[g]]  # this thread's calls by start
        if rows[-1] - rows[0] == len(rows) - 1 and bool((rows[1:] > rows[:-1]).all()):  # a run (one thread: all)
            starts = a_start[rows[0]:rows[-1] + 1]  # read only: views
            ends = a_end[rows[0]:rows[-1] + 1]
        else:
            starts = a_start[rows]
            ends = a_end[rows]
        run_max = np.maximum.accumulate(ends)
        # the position of the running maximum, built in place (one temporary per call, not three)
        holder = np.arange(len(rows), dtype=np.int32 if len(rows) < np.iinfo(np.int32).max else np.int64)
        holder[ends != run_max] = -1
        np.maximum.accumulate(holder, out=holder)
        want_covered = start is not None and end is not None
        if want_covered:
            # the covered time from the calls themselves, no union built: with the calls by start,
            # ``reach[i]`` (the running maximum of the ends clamped to their starts) and ``upto[i]`` (the
            # length of the union of calls 0..i), the time covered before t is upto[k] - max(reach[k] - t,
            # 0) for k the last call starting at or before t (the part of [t, reach[k]) after t is all
            # covered by the call reaching furthest); the union's blocks and a search into them saved
            reach = np.maximum(run_max, starts, out=run_max)  # starts are sorted: clamping, then the maximum
            upto = np.empty_like(reach)
            upto[0] = starts[0]
            np.maximum(reach[:-1], starts[1:], out=upto[1:])  # where call i's new coverage begins
            np.subtract(reach, upto, out=upto)
            np.cumsum(upto, out=upto)
        del run_max
        # the queries QUERY_CHUNK at a time: each lookup's temporaries (a dozen arrays per query: 10 M
        # gaps at 10 M kernels) stay bounded; the answers are the same for any chunk size
        for qc in range(0, len(q), QUERY_CHUNK):
            qq = q[qc:qc + QUERY_CHUNK]
            tq = t[qq]
            k = np.searchsorted(starts, tq, side="right") - 1
            found = k >= 0
            kk = np.maximum(k, 0)
            own_open = found & (ends[kk] > tq)
            hold = holder[kk]
            hold_open = found & (ends[hold] > tq)
            out[qq] = np.where(own_open, rows[kk], np.where(hold_open, rows[hold], -1))
            del k, found, kk, own_open, hold, hold_open, tq
            if want_covered:
                covered[qq] = (_covered_before(starts, reach, upto, end[qq])  # type: ignore[index]
                               - _covered_before(starts, reach, upto, start[qq]))  # type: ignore[index]
        del holder, starts, ends
        if want_covered:
            del reach, upto
        # this thread's tables freed before the next thread's are made (two threads' at once otherwise)
    return out, covered


def _covered_before(starts: np.ndarray, reach: np.ndarray, upto: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time before each ``t`` covered by calls starting at ``starts`` (sorted), given their ``reach`` and
    ``upto`` (see :func:`_host_api`)."""
    k = np.searchsorted(starts, t, side="right") - 1
    kk = np.maximum(k, 0)
    return np.where(k >= 0, upto[kk] - np.maximum(reach[kk] - t, 0), 0)


@fact("gpu_gaps", columns=_GAP_COLUMNS, requires=("gpu_ops",),
      scope_keys=("device", "host_nvtx_path", "host_api"))
def gpu_gaps(ctx: FactContext) -> pd.DataFrame:
    """Idle gaps between busy intervals of each device inside the window, with what the host was
    doing at the gap's middle (NVTX range, CUDA API call)."""
    w = ctx.window
    ops = ctx.get("gpu_ops")
    if ops.empty:
        return _empty_gaps()
    blocks = _device_blocks(ops)
    dev = blocks["device"].to_numpy()
    same = dev[1:] == dev[:-1]
    idx = np.flatnonzero(same)
    gs = blocks["end"].to_numpy()[idx]
    ge = blocks["start"].to_numpy()[idx + 1]
    prev_pos = blocks["last_op"].to_numpy()[idx]
    next_pos = blocks["first_op"].to_numpy()[idx + 1]
    gdev = dev[idx]
    edge = np.zeros(len(idx), dtype=bool)
    if w.source == "user":
        # the window edges act as op boundaries: idle time from the window start to the first op
        # starting after it, and from the last op ending before the window end to the window end
        # before each device's first busy block and after its last one (clipped below)
        bstart = blocks["start"].to_numpy()
        bend = blocks["end"].to_numpy()
        first = np.flatnonzero(np.r_[True, ~same])
        last = np.flatnonzero(np.r_[~same, True])
        nf, nl = len(first), len(last)
        gdev = np.r_[gdev, dev[first], dev[last]]
        gs = np.r_[gs, np.full(nf, w.start_ns), bend[last]]
        ge = np.r_[ge, bstart[first], np.full(nl, w.end_ns)]
        prev_pos = np.r_[prev_pos, np.full(nf, -1), blocks["last_op"].to_numpy()[last]]
        next_pos = np.r_[next_pos, blocks["first_op"].to_numpy()[first], np.full(nl, -1)]
        edge = np.r_[edge, np.ones(nf + nl, dtype=bool)]
    del blocks, dev, same, idx  # 5 columns x ops rows, not needed past here
    # clip to the window
    cs = np.maximum(gs, w.start_ns)
    ce = np.minimum(ge, w.end_ns)
    del gs, ge
    kept = np.flatnonzero(ce > cs)
    if len(kept) == 0:
        return _empty_gaps()
    # the kept gaps in (device, start) order, each array gathered once
    order = kept[np.lexsort((cs[kept], gdev[kept]))]
    del kept
    gdev, cs, ce, prev_pos, next_pos, edge = (a[order] for a in (gdev, cs, ce, prev_pos, next_pos, edge))
    del order

    # the ops' threads and processes in their own integer type (32 bits: a column per gap, millions at
    # 10 M kernels; narrowed to the same values at the end either way)
    otid, opid = (ops[c].to_numpy() for c in ("tid", "pid"))
    otid, opid = (x if x.dtype.kind in "iu" else x.astype(np.int64) for x in (otid, opid))

    def pick(values: np.ndarray, pos: np.ndarray, missing: object) -> np.ndarray:
        if values.dtype == object or not len(values):
            out = np.full(len(pos), missing, dtype=values.dtype if values.dtype != object else object)
            has = pos >= 0
            out[has] = values[pos[has]]
            return out
        # one gather and a select (masked gathers and stores cost twice that)
        return np.where(pos >= 0, values[np.maximum(pos, 0)], np.asarray(missing, dtype=values.dtype))

    def where_of(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``pos`` made safe to gather with, and where it is -1 (made once per positions, read by each
        column gathered at them)."""
        return np.maximum(pos, 0), pos < 0

    def pick_text(codes_labels: tuple[np.ndarray, np.ndarray],
                  where: tuple[np.ndarray, np.ndarray]) -> pd.Categorical:
        """The text at ``where`` (``""`` where -1) as a categorical, gathered as codes (``codes_labels``:
        :func:`text_codes` of the column)."""
        codes, labels = codes_labels
        safe, miss = where
        if not len(codes):
            return categorical(np.full(len(safe), -1, dtype=np.int8), labels)
        got = codes[safe]
        got[miss] = -1
        return categorical(got, labels)

    host_tid = pick(otid, next_pos, -1)
    host_pid = pick(opid, next_pos, -1)
    fallback = host_tid < 0
    host_tid[fallback] = pick(otid, prev_pos, -1)[fallback]
    host_pid[fallback] = pick(opid, prev_pos, -1)[fallback]
    del otid, opid, fallback

    mid = cs + (ce - cs) // 2
    api = ctx.trace.api
    # first the columns with the largest temporaries (each thread's API calls gathered and merged),
    # while few of the gaps' columns exist yet
    apos, api_overlap = _host_api(api, host_tid, mid, cs, ce)
    host_api = pick_text(text_codes(api["name"]), where_of(apos))  # the call's name as one-byte codes
    del apos
    op_label = text_codes(ops["label"])
    at_next = where_of(next_pos)
    labels = {
        "prev_op": pick_text(op_label, where_of(prev_pos)),
        "next_op": pick_text(op_label, at_next),
        "next_api": pick_text(text_codes(ops["api_name"]), at_next),
        "next_nvtx_path": pick_text(text_codes(ops["nvtx_path"]), at_next),
    }
    del prev_pos, next_pos, at_next, op_label
    nv = ranges_only(ctx.trace.nvtx)
    rpos = innermost_open(nv, host_tid, mid)
    source = np.where(rpos >= 0, 2, 1).astype(np.int8)  # codes into ("main", "none", "thread")
    missing = rpos < 0
    if missing.any() and not nv.empty:
        mains = main_threads(nv)
        # each process's main thread by one binary search into the sorted processes (-1: none)
        m_pid = np.array(sorted(mains), dtype=np.int64)
        m_tid = np.array([mains[k] for k in sorted(mains)], dtype=np.int64)
        miss_pid = host_pid[missing]
        at = np.minimum(np.searchsorted(m_pid, miss_pid), max(len(m_pid) - 1, 0))
        main_tid = np.where(m_pid[at] == miss_pid, m_tid[at], -1) if len(m_pid) else np.full(len(miss_pid), -1)
        del miss_pid, at
        retry = innermost_open(nv, main_tid, mid[missing])
        sub = rpos[missing]
        found = (retry >= 0) & (main_tid != host_tid[missing])
        sub[found] = retry[found]
        rpos[missing] = sub
        src = source[missing]
        src[found] = 0
        source[missing] = src
    nv_id = nv["range_id"].to_numpy(dtype=np.int64) if len(nv) else np.empty(0, dtype=np.int64)
    at_range = where_of(rpos)
    del mid

    # ids in 32 bits where they fit (a row per idle gap: millions at 10 M kernels)
    gaps = new_frame({
        "device": narrow_int(gdev),
        "start": cs,
        "end": ce,
        "duration": ce - cs,
        **labels,
        "host_tid": narrow_int(host_tid),
        "host_pid": narrow_int(host_pid),
        "host_nvtx_id": narrow_int(pick(nv_id, rpos, -1)),
        "host_nvtx_range": pick_text(text_codes(nv["text"]), at_range),
        "host_nvtx_path": pick_text(text_codes(column(nv, "path", "")), at_range),
        "host_nvtx_source": categorical(source, np.array(["main", "none", "thread"], dtype=object)),
        "host_api": host_api,
        "host_api_overlap_ns": api_overlap,
        "edge": edge,
    })
    gaps["host_activity"] = _host_activity(ctx.trace, gaps)
    return gaps


#: gaps shorter than this get no host_activity (CPU samples come every 1-2 ms, OS-runtime calls are
#: recorded from 80 us); at most this many gaps, the longest, are described
HOST_ACTIVITY_MIN_NS = 50_000
HOST_ACTIVITY_MAX_GAPS = 1000


def _host_activity(trace: object, gaps: pd.DataFrame) -> object:
    """What the gap's host thread was doing, from CPU samples and OS-runtime calls ("" without): a
    categorical, like the gaps' other text columns (the described gaps are at most
    :data:`HOST_ACTIVITY_MAX_GAPS`, the other rows all read "": one byte per gap, where a text column
    took 8 MB per million gaps for its offsets alone)."""
    from analyzer.facts.stacks import host_activity

    n = len(gaps)
    pick = np.empty(0, dtype=np.int64)
    labels: list[object] = [""]
    if not (trace.cpu_samples.empty and trace.osrt.empty):  # type: ignore[attr-defined]
        dur = gaps["duration"].to_numpy()
        pick = np.flatnonzero(dur >= HOST_ACTIVITY_MIN_NS)
        if len(pick) > HOST_ACTIVITY_MAX_GAPS:
            # the longest, ties in row order (a stable sort by -duration): the candidates at least as
            # long as the HOST_ACTIVITY_MAX_GAPS-th longest (one partition), then sorted (a few)
            d = dur[pick]
            kth = len(d) - HOST_ACTIVITY_MAX_GAPS
            pick = pick[d >= np.partition(d, kth)[kth]]
            pick = pick[np.argsort(-dur[pick], kind="stable")[:HOST_ACTIVITY_MAX_GAPS]]
        if len(pick):
            spans = gaps.iloc[pick][["start", "end", "host_pid", "host_tid"]]
            labels += list(host_activity(trace, spans))
    # the categorical of code 0 ("") everywhere but the described rows (code i at the i-th of them):
    # its categories from the labels used, then one fill and one scatter (no pass over a code per gap)
    used = np.arange(0 if n > len(pick) else 1, len(labels))
    small = categorical(used, np.array(labels, dtype=object))
    new_codes = np.asarray(small.codes)
    out = np.full(n, new_codes[0] if n > len(pick) else 0, dtype=new_codes.dtype)
    out[pick] = new_codes[len(new_codes) - len(pick):]
    return pd.Categorical.from_codes(out, dtype=small.dtype, validate=False)


def _empty_gaps() -> pd.DataFrame:
    obj = {"prev_op", "next_op", "next_api", "next_nvtx_path", "host_nvtx_range", "host_nvtx_path",
           "host_nvtx_source", "host_api", "host_activity"}
    return empty_typed((c, ("object" if c in obj else "bool" if c == "edge" else "int64"))
                       for c in _GAP_COLUMNS)


@fact(
    "utilization",
    columns={
        "device": "GPU device id",
        "bin": "bin index (0-based)",
        "bin_start": "bin start (ns)",
        "bin_end": "bin end (ns)",
        "busy_ns": "busy time in the bin (ns, concurrency counted once)",
        "util": "busy_ns / bin width (0..1)",
    },
    requires=("gpu_busy", "gpu_ops"),
    scope_keys=("device",),
)
def utilization(ctx: FactContext) -> pd.DataFrame:
    """Busy time per device in ``utilization_bins`` (default 100) equal-width bins over the window;
    busy intervals are split across bins exactly (cumulative busy time at the bin edges)."""
    w = ctx.window
    nbins = int(ctx.options.get("utilization_bins", 100) or 100)
    nbins = max(1, min(nbins, max(1, w.duration_ns)))
    edges = np.round(np.linspace(w.start_ns, w.end_ns, nbins + 1)).astype(np.int64)
    busy = ctx.get("gpu_busy")
    devices = np.unique(ctx.get("gpu_ops")["device"].to_numpy(dtype=np.int64))
    frames = []
    for d in devices:  # loop over devices only
        b = busy.loc[busy["device"].to_numpy() == d]
        cum = covered_until(b["start"].to_numpy(), b["end"].to_numpy(), edges)
        busy_ns = np.diff(cum)
        width = np.diff(edges)
        frames.append(pd.DataFrame({
            "device": d, "bin": np.arange(nbins), "bin_start": edges[:-1], "bin_end": edges[1:],
            "busy_ns": busy_ns, "util": np.where(width > 0, busy_ns / np.maximum(width, 1), 0.0),
        }))
    if not frames:
        return empty_typed((c, "float64" if c == "util" else "int64")
                       for c in ("device", "bin", "bin_start", "bin_end", "busy_ns", "util"))
    return pd.concat(frames, ignore_index=True)
