"""The GPU utilization chart (busy share per bin, idle gaps, SM/tensor activity and memory lines, NVTX
lanes) and the idle-gaps summary.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis
from analyzer.reports.format import fmt_bytes, fmt_duration, truncate
from analyzer.reports.sections.common import Unavailable, optional_fact, required_fact, table_view
from analyzer.reports.viewmodel import (
    Column,
    GapSummary,
    Limits,
    NvtxLane,
    Span,
    UtilizationChart,
    UtilSeries,
)


def _rebin(starts: np.ndarray, ends: np.ndarray, busy: np.ndarray, width: np.ndarray, n: int):
    """Merge consecutive bins so that at most ``n`` remain (busy time adds up, util is busy/width)."""
    if len(starts) <= n:
        util = np.divide(busy, width, out=np.zeros(len(busy)), where=width > 0)
        return starts, ends, util
    group = (np.arange(len(starts)) * n) // len(starts)
    bounds = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    s = starts[bounds]
    e = np.maximum.reduceat(ends, bounds)
    b = np.add.reduceat(busy, bounds)
    w = np.add.reduceat(width, bounds)
    util = np.divide(b, w, out=np.zeros(len(b)), where=w > 0)
    return s, e, util


def utilization_chart(analysis: Analysis, names: dict[int, str], limits: Limits) -> UtilizationChart:
    w = analysis.window
    util = required_fact(analysis, "utilization", ("device", "bin_start", "bin_end", "busy_ns"))
    try:
        gaps = required_fact(analysis, "gpu_gaps", ("device", "start", "end", "duration"))
    except Unavailable:
        gaps = None
    devices = sorted(int(d) for d in pd.unique(util["device"]))
    series = []
    for dev in devices[: limits.devices]:
        part = util[util["device"] == dev].sort_values("bin_start", kind="stable")
        starts = part["bin_start"].to_numpy(dtype="int64")
        ends = part["bin_end"].to_numpy(dtype="int64")
        busy = part["busy_ns"].to_numpy(dtype="float64")
        s, e, u = _rebin(starts, ends, busy, (ends - starts).astype("float64"), limits.util_bins)
        dev_gaps: tuple[Span, ...] = ()
        if gaps is not None and len(gaps):
            # order the two key columns only, then take the few rows shown (a million-row gaps
            # frame was filtered and sorted whole: ~0.5 s)
            keys = gaps.loc[gaps["device"].to_numpy() == dev, ["duration", "start"]]
            top = _longest(keys, ["duration", "start"], [False, True], limits.chart_gaps)
            g = gaps.loc[top].sort_values("start", kind="stable")
            dev_gaps = tuple(
                Span(int(a), int(b), f"idle {fmt_duration(int(d))}")
                for a, b, d in zip(g["start"].tolist(), g["end"].tolist(), g["duration"].tolist())
            )
        sm, tensor = _metric_lines(analysis, dev, s, e)
        mem, mem_top, mem_label = _memory_line(analysis, dev, s, e)
        series.append(
            UtilSeries(
                device=dev,
                label=f"GPU {dev}" + (f" \u00b7 {names[dev]}" if dev in names else ""),
                bin_start=tuple(int(x) for x in s),
                bin_end=tuple(int(x) for x in e),
                util=tuple(float(f"{x:.4f}") for x in u),
                gaps=dev_gaps,
                sm_active=sm,
                tensor_active=tensor,
                memory=mem,
                memory_top=mem_top,
                memory_label=mem_label,
            )
        )
    return UtilizationChart(
        start_ns=int(w.start_ns),
        end_ns=int(w.end_ns),
        series=tuple(series),
        lanes=_nvtx_lanes(analysis, limits),
        devices_total=len(devices),
        gaps_total=0 if gaps is None else len(gaps),
    )


def _longest(keys: pd.DataFrame, by: list[str], ascending: list[bool], k: int) -> pd.Index:
    """Index of the first ``k`` rows of ``keys.sort_values(by, ascending, kind="stable")``, where
    ``by[0]`` is ``duration`` sorted descending: only rows at least as long as the k-th longest can be
    among them, so only those are sorted (a million gaps, a few dozen shown)."""
    d = keys["duration"].to_numpy()
    if 0 < k < len(d) // 4:
        threshold = np.partition(d, len(d) - k)[len(d) - k]  # the k-th longest
        keys = keys.iloc[np.flatnonzero(d >= threshold)]  # ties included, original order kept
    return keys.sort_values(by, ascending=ascending, kind="stable").index[:k]


def _metric_lines(analysis: Analysis, device: int, starts: np.ndarray,
                  ends: np.ndarray) -> tuple[tuple[float | None, ...], tuple[float | None, ...]]:
    """Mean SM-active and tensor-active share (0..1) of the samples in each chart bin; ``()`` when the
    trace has no GPU metrics for ``device``."""
    gm = analysis.trace.gpu_metrics
    if gm.empty or not len(starts):
        return (), ()
    mine = gm.loc[gm["device"].to_numpy() == device]
    if mine.empty:
        return (), ()
    metric = mine["metric"].astype(str).to_numpy()
    edges = np.r_[starts, ends[-1:]]
    out = []
    for name in ("sm_active", "tensor_active"):
        sel = metric == name
        t = mine["start"].to_numpy()[sel]
        v = mine["value"].to_numpy(dtype="float64")[sel]
        idx = np.searchsorted(edges, t, side="right") - 1
        ok = (idx >= 0) & (idx < len(starts))
        sums = np.bincount(idx[ok], weights=v[ok], minlength=len(starts))
        counts = np.bincount(idx[ok], minlength=len(starts))
        out.append(tuple(float(f"{sums[i] / counts[i] / 100:.4f}") if counts[i] else None
                         for i in range(len(starts))))
    return out[0], out[1]


def _memory_line(analysis: Analysis, device: int, starts: np.ndarray,
                 ends: np.ndarray) -> tuple[tuple[int, ...], int, str]:
    """The highest device memory level in each chart bin (B), the top of the line's scale (the highest
    of them) and its label (with the share of the GPU's memory); ``()`` without memory events for
    ``device``."""
    if not len(starts) or "memory_events" in analysis.trace.info.unavailable:
        return (), 0, ""
    tl = optional_fact(analysis, "memory_timeline")
    growth = optional_fact(analysis, "memory_growth")
    if tl is None or growth is None or not len(tl):
        return (), 0, ""
    mine = tl.loc[tl["device"].to_numpy() == device]
    row = growth.loc[growth["device"].to_numpy() == device]
    if mine.empty or row.empty:
        return (), 0, ""
    t = mine["start"].to_numpy(dtype=np.int64)
    level = mine["bytes"].to_numpy(dtype=np.int64)
    before = int(level[0] - mine["delta"].iloc[0])
    pos = np.searchsorted(t, starts, side="right") - 1
    out = np.where(pos >= 0, level[np.clip(pos, 0, None)], before)  # the level as each bin opens
    idx = np.searchsorted(np.r_[starts, ends[-1:]], t, side="right") - 1
    ok = (idx >= 0) & (idx < len(starts))
    np.maximum.at(out, idx[ok], level[ok])
    cap = int(row["capacity_bytes"].iloc[0])
    top = max(int(out.max()), 1)  # the highest level drawn: growth stays visible on a large GPU
    what = "allocated" if str(row["measure"].iloc[0]) == "allocated" else "held from CUDA"
    label = f"memory {what}, 0 to {fmt_bytes(top)}" + (
        f" ({100.0 * top / cap:.1f}% of the GPU's {fmt_bytes(cap)})" if cap > 0 else "")
    return tuple(int(x) for x in out), top, label


def _nvtx_lanes(analysis: Analysis, limits: Limits) -> tuple[NvtxLane, ...]:
    """Top-level NVTX ranges in the window, on the threads that spend the most time inside them."""
    nvtx = analysis.trace.nvtx
    need = {"start", "end", "text", "kind", "pid", "tid", "depth"}
    if not len(nvtx) or not need <= set(nvtx.columns):
        return ()
    w = analysis.window
    top = nvtx[(nvtx["depth"] == 0) & (nvtx["kind"] != "mark") & (nvtx["end"] > w.start_ns) & (nvtx["start"] < w.end_ns)]
    if not len(top):
        return ()
    top = top.assign(
        _s=top["start"].clip(lower=w.start_ns), _e=top["end"].clip(upper=w.end_ns)
    )
    top = top.assign(_d=top["_e"] - top["_s"])
    per_thread = (
        top.groupby(["pid", "tid"], sort=True)["_d"].sum().reset_index()
        .sort_values(["_d", "pid", "tid"], ascending=[False, True, True], kind="stable")
    )
    lanes = []
    for pid, tid in zip(per_thread["pid"].tolist()[: limits.nvtx_lane_threads],
                        per_thread["tid"].tolist()[: limits.nvtx_lane_threads]):
        part = top[(top["pid"] == pid) & (top["tid"] == tid)]
        keep = part.sort_values(["_d", "_s"], ascending=[False, True], kind="stable").head(limits.nvtx_lane_ranges)
        keep = keep.sort_values("_s", kind="stable")
        spans = tuple(
            Span(int(a), int(b), truncate(str(t), limits.cell_chars))
            for a, b, t in zip(keep["_s"].tolist(), keep["_e"].tolist(), keep["text"].tolist())
        )
        lanes.append(NvtxLane(f"NVTX \u00b7 pid {int(pid)} / tid {int(tid)}", spans, len(part)))
    return tuple(lanes)


def gap_summary(analysis: Analysis, devices: int, limits: Limits) -> GapSummary:
    cols = (
        Column("device", "GPU", "int"), Column("start", "At", "time"), Column("duration", "Idle", "ns"),
        Column("prev_op", "After", "code"), Column("next_op", "Before", "code"),
        Column("host_nvtx_path", "Host NVTX range", "code"), Column("host_api", "Host API", "code"),
    )
    gaps = required_fact(analysis, "gpu_gaps", ("device", "start", "end", "duration"))
    keys = ["duration", "start", "device"]  # sort the keys only, take the rows shown (see utilization_chart)
    ordered = gaps.loc[_longest(gaps[keys], keys, [False, True, True], max(0, limits.gap_rows))]
    dur = gaps["duration"].to_numpy(dtype="float64")
    window = analysis.window.duration_ns * max(1, devices)
    return GapSummary(
        count=len(gaps),
        total_ns=int(dur.sum()) if len(dur) else 0,
        largest_ns=int(dur.max()) if len(dur) else 0,
        median_ns=float(np.median(dur)) if len(dur) else 0.0,
        share=(float(dur.sum()) / window) if window > 0 else None,
        table=table_view(ordered, cols, limits.gap_rows, limits.cell_chars, "longest first", total=len(gaps)),
    )
