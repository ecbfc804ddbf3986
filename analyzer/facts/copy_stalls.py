"""Exposed host-device copies and what removing them from the GPU's path can buy.

The timeline breakdown (:mod:`analyzer.facts.breakdown`) counts ``exposed_copy`` time: a copy runs and
no kernel does. That is time the GPU computed nothing, but not all of it is time a fix (prefetching the
copy on a side stream, keeping the data on the GPU) gives back: once the copy is out of the way, the
GPU can start the op that followed it no earlier than the host *submitted* that op (the end of its
launch call). While the copy ran, the host was often still preparing that op (Python dispatch, library
calls): without the copy that time is idle time spent waiting for the host, not saved.

A *stall* is a maximal run of exposed host-device copy time on one device (contiguous ``exposed_copy``
segments whose detail starts with ``H2D`` or ``D2H``), ``[a, b)``. The op after it is the first op of
that device starting at or after ``b`` that is not itself a host-device copy: copies queued one after
another (a ``state_dict()`` copied tensor by tensor, on the compute stream or a side stream) are the
stall's own kind of work, not the work it held back, so stalls with only such copies between them are
one stall, from the first one's start to the last one's end. The host thread that launched the op after
it is the feeding thread. Without the stall that op could start at

    ready = max(a, submission - blocked)

where ``blocked`` is the feeding thread's time in ``[a, submission)`` inside calls that block it on the
device (a pageable or synchronous ``cudaMemcpy``, a synchronization waiting for the copy): a fix that
moves the copy off the path frees the host from those waits too. An asynchronous copy from or to pinned
memory blocks nothing: the host's few microseconds inside it stay with a fix that issues the same call
on a side stream, so a copy nothing waited for (the next op submitted after it ran) gives back nothing.
The stall's *avoidable* part is ``[ready, b)`` (all of it when the next op has no launch call in the
trace, or no op follows). Each exposed-copy segment of the stall gets its part of it (column
``avoidable_ns``).

The link bounds it too: copies from or to pinned memory already move at the rate the link gives them,
so no overlap makes the window shorter than the device's pinned copy time in one direction (the union
of its pinned H2D copies, or of its D2H ones, whichever is longer: column ``link_floor_ns``). Where
the avoidable time summed over the device's stalls exceeds the window less that floor, every stall's
share is scaled down to fit (a program streaming its weights from host memory at the link's rate, with
little compute to hide them behind, gains at most that compute time from prefetching; the rest needs
fewer bytes copied). Pageable copies are left out of the floor: pinning them makes them faster.

Assumptions, stated with the estimate: the host's own time before the next op is unchanged by the fix
(a fix that adds host work at the step's start, such as the event and stream calls of a side-stream
prefetch, buys less), and the ops after the next one keep their pace (the GPU was not waiting for the
host after the stall; a host slower than the GPU there makes the fixed loop launch-bound).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import column, covered_between, text, text_codes, union_intervals
from analyzer.facts.registry import FactContext, fact

COPY_STALL_COLUMNS = {
    "device": "GPU device id",
    "start": "exposed-copy segment start (ns, inside the window)",
    "end": "segment end (ns)",
    "duration": "end - start (ns)",
    "detail": "copy direction and host memory kind ('H2D pinned', 'D2H pageable'...)",
    "nvtx_path": "NVTX path of the thread that launched the copy (timeline_segments)",
    "range_key": "nvtx_path made generic (step_12/h2d -> step_N/h2d), as timeline_segments has it",
    "step": "step the segment's start lies in ('' outside every step or without steps)",
    "stall_start": "start of the stall holding the segment: the run of contiguous exposed host-device copy "
                   "time it belongs to (ns)",
    "stall_end": "end of that stall (ns)",
    "next_submit": "end of the launch call of the op after the stall (ns; -1: no op follows, or it has no "
                   "launch call in the trace)",
    "host_blocked_ns": "the stall's feeding thread's time in calls that block it on the device (blocking "
                       "sync_calls: synchronizations, synchronous or pageable copies) between the stall's "
                       "start and next_submit (ns): what the fix also frees the host from",
    "avoidable_ns": "the segment's part of [ready, stall_end), ready = max(stall_start, next_submit - "
                    "host_blocked_ns): the copy time a fix that takes the copy off the GPU's path can give "
                    "back (ns), scaled down where the device's sum exceeds the window less link_floor_ns",
    "link_floor_ns": "the device's pinned host-device copy time in the window, the longer direction (union "
                     "of its H2D pinned copies or of its D2H pinned ones, ns): no overlap makes the window "
                     "shorter than the link takes to move those bytes",
}

_INTS = ("device", "start", "end", "duration", "stall_start", "stall_end", "next_submit", "host_blocked_ns",
         "avoidable_ns", "link_floor_ns")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in _INTS else object) for c in COPY_STALL_COLUMNS})


@fact("copy_stalls", columns=COPY_STALL_COLUMNS, requires=("timeline_segments", "gpu_ops"),
      scope_keys=("device", "nvtx_path", "step"))
def copy_stalls(ctx: FactContext) -> pd.DataFrame:
    """One row per exposed host-device copy segment of the timeline breakdown, with the part of it a fix
    can give back (see :mod:`analyzer.facts.copy_stalls`), ordered by (device, start)."""
    seg = ctx.get("timeline_segments")
    if seg.empty:
        return _empty()
    # tested on the distinct causes and details, not per segment (millions of rows on a large trace)
    cause, cause_labels = text_codes(seg["cause"])
    detail, detail_labels = text_codes(seg["detail"])
    copy_cause = np.array([c == "exposed_copy" for c in cause_labels], dtype=bool)
    host_device = np.array([d.startswith(("H2D", "D2H")) for d in detail_labels], dtype=bool)
    mine = copy_cause[cause] & host_device[detail]
    del cause, detail
    if not mine.any():
        return _empty()
    s = seg.loc[mine].sort_values(["device", "start"], kind="stable")
    dev = s["device"].to_numpy(dtype=np.int64)
    start = s["start"].to_numpy(dtype=np.int64)
    end = s["end"].to_numpy(dtype=np.int64)
    # stalls: contiguous segments of one device (touching pieces merge), then runs of stalls with no op
    # but host-device copies between them (a queue of copies is one stall: the fix takes all of it off)
    u = union_intervals(start, end, dev)
    stall = np.empty(len(s), dtype=np.int64)
    stall[u.order] = u.block
    nxt = _next_op(ctx, u.group, u.end)
    run = _runs(u.group, nxt)
    stall = run[stall]
    first = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])  # runs are consecutive stalls, in order
    a, b = u.start[first], np.maximum.reduceat(u.end, first)
    submit, blocked = _next_submission(ctx, nxt[first], a)
    ready = np.where(submit >= 0, np.maximum(a, submit - blocked), a)
    ready = np.minimum(ready, b)
    avoid = np.minimum(np.maximum(0, end - np.maximum(start, ready[stall])), end - start)
    floor = _link_floor(ctx, dev)
    avoid = _fit_under_floor(avoid, dev, floor, ctx.window.end_ns - ctx.window.start_ns)
    out = pd.DataFrame({
        "device": dev, "start": start, "end": end, "duration": end - start,
        "detail": s["detail"].to_numpy(dtype=object),
        "nvtx_path": column(s, "nvtx_path", "").to_numpy(dtype=object),
        "range_key": column(s, "range_key", "").to_numpy(dtype=object),
        "step": column(s, "step", "").to_numpy(dtype=object),
        "stall_start": a[stall], "stall_end": b[stall], "next_submit": submit[stall],
        "host_blocked_ns": blocked[stall], "avoidable_ns": avoid, "link_floor_ns": floor,
    })
    return out.reset_index(drop=True)


def _link_floor(ctx: FactContext, dev: np.ndarray) -> np.ndarray:
    """Per row device ``dev``: the longer of its two directions' pinned copy time inside the window (the
    union of the H2D pinned copies' pieces in the window, and of the D2H pinned ones)."""
    out = np.zeros(len(dev), dtype=np.int64)
    mc = ctx.trace.memcpy
    if mc.empty:
        return out
    w0, w1 = ctx.window.start_ns, ctx.window.end_ns
    direction = text(column(mc, "direction", "")).to_numpy(dtype=object)
    host = np.where(direction == "H2D", text(column(mc, "src_kind", "")).to_numpy(dtype=object),
                    np.where(direction == "D2H", text(column(mc, "dst_kind", "")).to_numpy(dtype=object), ""))
    start = np.maximum(mc["start"].to_numpy(dtype=np.int64), w0)
    end = np.minimum(mc["end"].to_numpy(dtype=np.int64), w1)
    device = column(mc, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    longest: dict[int, int] = {}
    for d in ("H2D", "D2H"):
        pick = np.flatnonzero((direction == d) & (host == "pinned") & (end > start))
        if not len(pick):
            continue
        u = union_intervals(start[pick], end[pick], device[pick])
        per = pd.Series(u.end - u.start).groupby(u.group).sum()
        for g, ns in per.items():
            longest[int(g)] = max(longest.get(int(g), 0), int(ns))
    for g, ns in longest.items():
        out[dev == g] = ns
    return out


def _fit_under_floor(avoid: np.ndarray, dev: np.ndarray, floor: np.ndarray, window_ns: int) -> np.ndarray:
    """``avoid`` scaled down per device where its sum exceeds ``window_ns`` less the device's floor."""
    out = avoid.copy()
    for d in np.unique(dev).tolist():
        at = dev == d
        room = max(0, window_ns - int(floor[at][0]))
        total = int(avoid[at].sum())
        if total > room:
            out[at] = (avoid[at] * (room / total)).astype(np.int64)
    return out


def _next_op(ctx: FactContext, dev: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per stall ending at ``b`` on device ``dev``: the row (in ``gpu_ops``) of the first op of the device
    starting at or after ``b`` that is not a host-device copy (-1 none): the work the GPU could have run
    sooner. Copies queued behind the stall are the stall's own kind of work, not what it held back."""
    out = np.full(len(b), -1, dtype=np.int64)
    ops = ctx.get("gpu_ops")
    if ops.empty:
        return out
    label, labels = text_codes(ops["label"])
    transfer = np.array([str(x).startswith(("memcpy H2D", "memcpy D2H")) for x in labels], dtype=bool)
    o_dev = ops["device"].to_numpy(dtype=np.int64)
    o_start = ops["start"].to_numpy(dtype=np.int64)
    for d in np.unique(dev).tolist():
        rows = np.flatnonzero((o_dev == d) & ~transfer[label])
        rows = rows[np.argsort(o_start[rows], kind="stable")]
        at = np.flatnonzero(dev == d)
        k = np.searchsorted(o_start[rows], b[at], side="left")
        ok = k < len(rows)
        out[at[ok]] = rows[k[ok]]
    return out


def _runs(dev: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """Run id per stall (stalls ordered by device and start): consecutive stalls of one device waiting for
    the same next op share a run; a stall with no next op is a run of its own."""
    if not len(dev):
        return np.zeros(0, dtype=np.int64)
    new = np.ones(len(dev), dtype=bool)
    new[1:] = (dev[1:] != dev[:-1]) | (nxt[1:] != nxt[:-1]) | (nxt[1:] < 0)
    return np.cumsum(new) - 1


def _next_submission(ctx: FactContext, nxt: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run of stalls starting at ``a`` whose next op is row ``nxt`` of ``gpu_ops`` (-1 none): that op's
    submission (-1 none, or a call ending before the run) and the time its launching thread spent in
    calls that block it on the device between ``a`` and that submission."""
    from analyzer.facts.breakdown_launch import submission

    n = len(a)
    submit = np.full(n, -1, dtype=np.int64)
    blocked = np.zeros(n, dtype=np.int64)
    has = np.flatnonzero(nxt >= 0)
    if not len(has):
        return submit, blocked
    ops = ctx.get("gpu_ops")
    sub = submission(ctx, ops, nxt[has])
    submit[has] = np.where(sub >= a[has], sub, -1)  # a call ending before the stall: none of it was the host's
    tid = np.full(n, -1, dtype=np.int64)
    tid[has] = ops["tid"].to_numpy(dtype=np.int64)[nxt[has]]
    blocked[:] = _blocked(ctx, tid, a, np.maximum(submit, a))
    return submit, blocked


def _blocked(ctx: FactContext, tid: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per query, thread ``tid``'s time in ``[lo, hi)`` inside calls that block the host on the device
    (their union): the blocking rows of ``sync_calls`` (synchronizations, synchronous copies and memsets,
    asynchronous copies that pageable memory makes synchronous). An asynchronous copy from or to pinned
    memory is not one: the host spends a few microseconds queuing it and waits for nothing, and a fix
    that prefetches the copy on a side stream issues the same call."""
    from analyzer.facts.api import all_sync_call_rows

    out = np.zeros(len(tid), dtype=np.int64)
    if ctx.trace.api.empty or not (hi > lo).any():
        return out
    rows = all_sync_call_rows(ctx.store)
    if rows.empty:
        return out
    rows = rows.loc[rows["blocking"].to_numpy(dtype=bool)]
    if rows.empty:
        return out
    c_tid = column(rows, "tid", -1).fillna(-1).to_numpy(dtype=np.int64)
    u = union_intervals(rows["start"].to_numpy(dtype=np.int64), rows["end"].to_numpy(dtype=np.int64), c_tid)
    for t in np.unique(tid).tolist():
        q = np.flatnonzero((tid == t) & (hi > lo))
        m = u.group == t
        if len(q) and m.any():
            out[q] = covered_between(u.start[m], u.end[m], lo[q], hi[q])
    return out
