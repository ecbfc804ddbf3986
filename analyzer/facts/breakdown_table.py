"""The ``timeline_breakdown`` fact: :mod:`analyzer.facts.breakdown`'s ``timeline_segments`` summed per
device for the whole window, per step and per NVTX range (the definitions are in that module)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts.breakdown import BREAKDOWN_COLUMNS, HOST_CAUSES, empty_frame, step_bounds
from analyzer.facts.breakdown_groups import fix_groups, graph_launch_rows
from analyzer.facts.breakdown_overhead import per_op_columns
from analyzer.facts.breakdown_pieces import intersect, span_of, sum_by
from analyzer.facts.breakdown_ranges import phase_keys
from analyzer.facts.registry import FactContext, fact
from analyzer.facts._util import text_codes

#: segments summed per chunk of this many (a 10 M-kernel trace has about 48 M): the sums are the same
#: for any chunk size
SUM_CHUNK = 1 << 20


@fact("timeline_breakdown", columns=BREAKDOWN_COLUMNS, requires=("timeline_segments", "steps"),
      scope_keys=("device", "scope", "key", "cause"))
def timeline_breakdown(ctx: FactContext) -> pd.DataFrame:
    """Where each GPU's analysis window went, as an exact partition. One row per (device, scope, key,
    cause, detail):

    * ``scope`` ``window`` (``key`` ""): the whole window of the device; its rows sum to the window;
    * ``scope`` ``step`` (``key`` = step name): each step from the previous step's completion to its own
      (the ``steps`` fact), clipped to the window;
    * ``scope`` ``range`` (``key`` = NVTX path cut before the first framework operator, each component's
      trailing number made generic: ``step_N/load_batch``): busy time by the range that launched the op,
      idle time by the range open on the feeding thread; ``key`` "" holds the time outside every range.

    ``cause`` is one of compute, exposed_comm, exposed_copy, launch_bound, host_sync, host_work,
    wait_other, setup, unknown; ``detail`` refines it (kernel category, copy direction and memory kind,
    collective, CUDA call, ``dispatch``, NVTX range, why unknown); see :mod:`analyzer.facts.breakdown`
    for the exact definitions and the ``dispatch_gap_ns`` parameter. ``share`` is the row's part of its
    (device, scope, key) group (sums to 1), ``cause_share`` its part of the device's window total of
    that cause, ``segments`` the number of disjoint intervals summed."""
    seg = ctx.get("timeline_segments")
    ints = ("device", "duration_ns", "segments", "key_cause_ns", "device_host_held_ns", "device_cause_ns",
            "phase_ns", "phase_host_held_ns", "graphed", "graph_launch", "device_graph_launch_ns", "compiled", "group_ns",
            "group_host_held_ns", "per_tensor", "phase_ops", "phase_launch_ns", "phase_syncs", "device_per_op_ns")
    if seg.empty:
        return empty_frame(BREAKDOWN_COLUMNS, ints, ("share", "cause_share", "key_cause_share", "compiled_share",
                                                     "graphed_share", "per_tensor_share"))
    # summed on integer codes (a million-kernel trace has millions of segments), SUM_CHUNK segments at a
    # time (every per-segment temporary bounded; the chunks' groups merged by code), text put back per row
    dev = seg["device"].to_numpy()
    start, end = seg["start"].to_numpy(dtype=np.int64), seg["end"].to_numpy(dtype=np.int64)
    cause_codes, cause_labels = text_codes(seg["cause"])
    detail_codes, detail_labels = text_codes(seg["detail"])
    range_codes, range_labels = text_codes(seg["range_key"])
    # segments are ordered by (device, start): the devices are runs, their values sorted
    dev_labels = np.unique(dev[np.r_[0, np.flatnonzero(dev[1:] != dev[:-1]) + 1]]).astype(np.int64)
    n_cause, n_detail = len(cause_labels), len(detail_labels)

    def frame(scope: str, d: np.ndarray, k: np.ndarray, key_labels: np.ndarray, c: np.ndarray, x: np.ndarray,
              total: np.ndarray, segments: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({
            "device": dev_labels[d], "scope": scope, "key": np.asarray(key_labels, dtype=object)[k],
            "cause": np.asarray(cause_labels, dtype=object)[c], "detail": np.asarray(detail_labels, dtype=object)[x],
            "duration_ns": total, "segments": segments.astype(np.int64)})

    def grouped(a: int, keys: np.ndarray, n_key: int, dur: np.ndarray, pos: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """The (device, key, cause, detail) groups of the chunk's segments from ``a`` (``pos``: those of its
        positions, all: None; ``keys`` and ``dur`` per selected segment), unordered, as ``(code, duration,
        segments, first)``: one mixed-radix integer code per segment, counted directly when the code space
        is small, else factorized (hash, no sort); ``first`` the smallest segment position of each group."""
        if pos is None:  # the chunk's (device, cause, detail) part, found once for its two sums
            dev_code, cause_detail = chunk_codes(a, a + len(keys))
        else:
            dev_code, cause_detail = chunk_codes(a, a, a + np.asarray(pos, dtype=np.int64))
        combined = np.asarray(keys, dtype=np.int64)
        if dev_code is not None:
            combined = dev_code * n_key + combined
        combined = combined * (n_cause * n_detail) + cause_detail
        space = len(dev_labels) * n_key * n_cause * n_detail
        n = len(combined)
        idx = np.arange(a, a + n, dtype=np.int64) if pos is None else a + np.asarray(pos, dtype=np.int64)
        if space <= max(2 * n, 1 << 16):
            counts = np.bincount(combined, minlength=space)
            uniq = np.flatnonzero(counts)
            first = np.full(space, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(first, combined, idx)
            total = sum_by(combined, dur, space)  # exact integers (and faster than a weighted bincount)
            return uniq, total[uniq], counts[uniq], first[uniq]
        group, uniq = pd.factorize(combined)
        segments = np.bincount(group, minlength=len(uniq))
        total = sum_by(group, dur, len(uniq))
        first = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, group, idx)
        return np.asarray(uniq, dtype=np.int64), total, segments, first

    cached: dict[tuple[int, int], tuple[np.ndarray | None, np.ndarray]] = {}

    def chunk_codes(a: int, b: int, rows: np.ndarray | None = None) -> tuple[np.ndarray | None, np.ndarray]:
        """``(device code or None for one device, cause * n_detail + detail)`` of segments ``[a, b)`` (or
        ``rows``); the last slice's kept for the next sum of the same chunk."""
        if rows is None and (a, b) in cached:
            return cached[(a, b)]
        take = (lambda x: x[a:b]) if rows is None else (lambda x: x[rows])
        dev_code = np.searchsorted(dev_labels, take(dev)).astype(np.int64) if len(dev_labels) > 1 else None
        cause_detail = take(cause_codes).astype(np.int64) * n_detail + take(detail_codes)
        if rows is None:
            cached.clear()
            cached[(a, b)] = (dev_code, cause_detail)
        return dev_code, cause_detail

    def merged(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        """The chunks' ``(code, duration, segments, first)`` groups merged on the code."""
        if len(parts) == 1:
            return parts[0]
        g, uniq = pd.factorize(np.concatenate([p[0] for p in parts]))
        first = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(first, g, np.concatenate([p[3] for p in parts]))
        return (np.asarray(uniq, dtype=np.int64), sum_by(g, np.concatenate([p[1] for p in parts]), len(uniq)),
                sum_by(g, np.concatenate([p[2] for p in parts]), len(uniq)), first)

    def decoded(code: np.ndarray, n_key: int) -> tuple[np.ndarray, ...]:
        """``(device, key, cause, detail)`` codes of :func:`grouped`'s group codes."""
        rest, x = np.divmod(code, n_detail)
        rest, c = np.divmod(rest, n_cause)
        d, k = np.divmod(rest, n_key)
        return d, k, c, x

    steps = ctx.get("steps")
    n_range = max(len(range_labels), 1)
    if not steps.empty:
        lo, hi, names = step_bounds(steps)
        n_step = len(lo) + 1  # key len(lo): a segment not inside one step (summed by its pieces instead)
    range_parts: list[tuple[np.ndarray, ...]] = []
    step_parts: list[tuple[np.ndarray, ...]] = []
    for a in range(0, len(start), SUM_CHUNK):
        s_, e_ = start[a:a + SUM_CHUNK], end[a:a + SUM_CHUNK]
        range_parts.append(grouped(a, range_codes[a:a + SUM_CHUNK], n_range, e_ - s_))
        if steps.empty:
            continue
        k = span_of(s_, lo)
        kk = np.maximum(k, 0)
        inside = (k >= 0) & (e_ <= hi[kk]) & (e_ > s_)
        # nearly every segment lies inside one step: all of them in one pass with no gather, the others
        # (crossing a step boundary, or outside every step) cut into their pieces inside steps
        wu, wtotal, wsegs, wfirst = grouped(a, np.where(inside, kk, len(lo)), n_step, e_ - s_)
        del k, kk
        whole = decoded(wu, n_step)[1] != len(lo)
        step_parts.append((wu[whole], wtotal[whole], wsegs[whole], wfirst[whole]))
        rest = np.flatnonzero(~inside)
        ai, ci, s, e = intersect(s_[rest], e_[rest], lo, hi)
        step_parts.append(grouped(a, ci, n_step, e - s, rest[ai]))
        del inside, rest, ai, ci, s, e
    # the range rows, then the window rows summed from them (each window group first appears where its
    # first range group does, so their order is the segments' order of first appearance too)
    ru, rtotal, rsegs, rfirst = merged(range_parts)
    o = np.argsort(rfirst, kind="stable")
    ru, rtotal, rsegs = ru[o], rtotal[o], rsegs[o]
    rd, rk, rc, rx = decoded(ru, n_range)
    wkey, wuniq = pd.factorize((rd * n_cause + rc) * n_detail + rx)
    wrest, wx = np.divmod(np.asarray(wuniq, dtype=np.int64), n_detail)
    wd, wc = np.divmod(wrest, n_cause)
    parts = [frame("window", wd, np.zeros(len(wuniq), dtype=np.int64), np.array([""], dtype=object), wc, wx,
                   sum_by(wkey, rtotal, len(wuniq)), sum_by(wkey, rsegs, len(wuniq))),
             frame("range", rd, rk, range_labels, rc, rx, rtotal, rsegs)]
    if not steps.empty:
        # a group may hold whole segments and pieces (of one chunk or several): merged on the group code
        su, stotal, ssegs, first = merged(step_parts)
        sd, sk, sc, sx = decoded(su, n_step)
        # in the order a pass over (segment, step) pieces meets them
        o = np.lexsort((sk, first))
        step_labels = np.asarray([str(x) for x in names] + [""], dtype=object)
        parts.append(frame("step", sd[o], sk[o], step_labels, sc[o], sx[o], stotal[o], ssegs[o]))
    out = pd.concat(parts, ignore_index=True)
    group_total = out.groupby(["device", "scope", "key"], sort=False)["duration_ns"].transform("sum")
    out["share"] = out["duration_ns"] / group_total.where(group_total > 0, 1)
    out["key_cause_ns"] = out.groupby(["device", "scope", "key", "cause"], sort=False)["duration_ns"].transform("sum")
    is_win = (out["scope"] == "window").to_numpy()
    win = out.loc[is_win].groupby(["device", "cause"])["duration_ns"].sum()
    cause_total = win.reindex(pd.MultiIndex.from_frame(out[["device", "cause"]])).fillna(0).to_numpy(dtype=np.float64)
    safe = np.where(cause_total > 0, cause_total, 1.0)
    out["cause_share"] = np.where(cause_total > 0, out["duration_ns"] / safe, 0.0)
    out["key_cause_share"] = np.where(cause_total > 0, out["key_cause_ns"] / safe, 0.0)
    out["device_cause_ns"] = cause_total.astype(np.int64)
    is_range = (out["scope"] == "range").to_numpy()
    phases = phase_keys(ctx, out["key"].to_numpy(dtype=object)[is_range],
                        out["duration_ns"].to_numpy(dtype=np.int64)[is_range])
    out["phase"] = ""
    out.loc[is_range, "phase"] = phases
    by_phase = [out["device"], out["phase"]]
    out["phase_ns"] = np.where(is_range, out["duration_ns"].where(is_range, 0).groupby(by_phase).transform("sum"), 0)
    held_rows = is_range & out["cause"].isin(HOST_CAUSES).to_numpy()
    out["phase_host_held_ns"] = np.where(
        is_range, out["duration_ns"].where(held_rows, 0).groupby(by_phase).transform("sum"), 0)
    graph_launch_rows(out)  # the eager launch-bound time fix_groups weighs
    per_op_columns(out)  # the per-op host work per-op-host-overhead states and launch-bound leaves out
    fix_groups(ctx, out, is_range, held_rows)
    held = out.loc[is_win & out["cause"].isin(HOST_CAUSES).to_numpy()].groupby("device")["duration_ns"].sum()
    out["device_host_held_ns"] = out["device"].map(held).fillna(0).astype(np.int64)
    # window rows by time; steps in their order; ranges by their time of the row's cause (so the
    # first range row of a cause is the range holding most of it), each group's details by time
    step_rank = {name: i for i, name in enumerate(steps["step"].tolist())} if not steps.empty else {}
    order_key = np.where(out["scope"] == "step", out["key"].map(step_rank).fillna(-1).to_numpy(dtype=np.float64),
                         np.where(out["scope"] == "range", -out["key_cause_ns"].to_numpy(dtype=np.float64), 0.0))
    out = out.assign(_s=out["scope"].map({"window": 0, "step": 1, "range": 2}), _k=order_key)
    out = out.sort_values(["device", "_s", "_k", "key", "cause", "duration_ns"],
                          ascending=[True, True, True, True, True, False], kind="stable")
    for c in ("duration_ns", "segments", "key_cause_ns"):
        out[c] = out[c].astype(np.int64)
    return out[list(BREAKDOWN_COLUMNS)].reset_index(drop=True)
