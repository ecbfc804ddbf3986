"""CUDA graph replays and kernels whose launch configuration the trace does not record.

A CUDA graph replay is one launch call (``cudaGraphLaunch``, ``cuGraphLaunch``, ``hipGraphLaunch``) that
runs many kernels. The loaders mark each kernel a replay ran (``in_graph`` = 1: node-level nsys tracing,
torch.profiler) and, where the trace holds only the whole execution (nsys' default
``--cuda-graph-trace=graph``), add the execution itself as one kernel row (``in_graph`` = 2). The facts
here group those rows back into replays (one per launch call: the kernels of a replay share the launch's
correlation id) so that rules can speak of the replay rate and of the GPU time between replays, which the
host still bounds: it launches each replay.

Window: replays whose first GPU operation starts in the window.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import column, new_frame, starts_in_window, text_array, text_codes
from analyzer.facts.occupancy import known_launch_config
from analyzer.facts.registry import FactContext, fact
from analyzer.loading.model import GRAPH_EXECUTION

_REPLAY_COLUMNS = {
    "device": "GPU device id",
    "stream": "stream the replay ran on (its first operation's)",
    "start": "first operation's start (ns)",
    "end": "last operation's end (ns)",
    "duration": "end - start (ns)",
    "gpu_ns": "kernel time inside the replay (ns; the whole execution when its kernels are not traced)",
    "kernels": "kernels the trace holds for the replay (0 when only the execution is recorded)",
    "traced_kernels": "1 when the replay's kernels are in the trace, 0 when only the execution is",
    "graph_id": "the CUDA graph's id where the trace says, else -1",
    "pid": "launching process (-1 unknown)",
    "correlation_id": "the graph launch's correlation id",
    "api_name": "the launch call (cudaGraphLaunch, hipGraphLaunch, ...)",
    "api_start": "its start (ns, -1 unknown)",
    "nvtx_path": "NVTX ranges open at the launch",
    "gap_before_ns": "time between the previous replay's end and this one's start, on the same device "
                     "(ns; NaN for the device's first replay in the window, 0 when they overlap)",
}


def _empty_replays() -> pd.DataFrame:
    text = {"api_name", "nvtx_path"}
    return pd.DataFrame({c: pd.Series(dtype=object if c in text else "int64") for c in _REPLAY_COLUMNS})


@fact("graph_replays", columns=_REPLAY_COLUMNS, scope_keys=("device", "nvtx_path"))
def graph_replays(ctx: FactContext) -> pd.DataFrame:
    """One row per CUDA graph replay starting in the window, in start order per device, with the idle
    time between consecutive replays."""
    cols = ["start", "end", "duration", "device", "stream", "correlation_id", "pid", "in_graph", "graph_id",
            "api_name", "api_start", "nvtx_path"]
    k = starts_in_window(ctx.trace.kernels, ctx.window, cols)
    if k.empty or "in_graph" not in k.columns:
        return _empty_replays()
    in_graph = k["in_graph"].fillna(0).to_numpy(dtype=np.int64)
    rows = np.flatnonzero(in_graph > 0)
    if not len(rows):
        return _empty_replays()
    k = k.iloc[rows].reset_index(drop=True)
    in_graph = in_graph[rows]
    pid = column(k, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)
    corr = column(k, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64)
    device = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    # one replay per (device, process, launch correlation id); a row without a correlation id is its own
    from analyzer.loading.attribution import correlation_key

    key = correlation_key(pid & 0xFFFFFF, corr)
    key = np.where(corr < 0, -1 - np.arange(len(k), dtype=np.int64), key)
    _, codes = np.unique(np.stack([key, device], axis=1), axis=0, return_inverse=True)
    codes = np.asarray(codes).reshape(-1)
    start = k["start"].to_numpy(dtype=np.int64)
    end = k["end"].to_numpy(dtype=np.int64)
    dur = k["duration"].to_numpy(dtype=np.int64)
    n = int(codes.max()) + 1
    first = np.full(n, len(k), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(k)))  # rows are in start order: the first row is the first op
    g_start = start[first]
    g_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(g_end, codes, end)
    gpu_ns = np.bincount(codes, weights=dur, minlength=n).astype(np.int64)
    traced = np.bincount(codes, weights=(in_graph == 1), minlength=n).astype(np.int64)
    api_codes, api_labels = text_codes(k["api_name"]) if "api_name" in k.columns else (
        np.full(len(k), -1), np.array([], dtype=object))
    path_codes, path_labels = text_codes(k["nvtx_path"]) if "nvtx_path" in k.columns else (
        np.full(len(k), -1), np.array([], dtype=object))
    out = new_frame({
        "device": device[first],
        "stream": column(k, "stream", -1).fillna(-1).to_numpy(dtype=np.int64)[first],
        "start": g_start,
        "end": g_end,
        "duration": g_end - g_start,
        "gpu_ns": gpu_ns,
        "kernels": traced,
        "traced_kernels": (traced > 0).astype(np.int64),
        "graph_id": column(k, "graph_id", -1).fillna(-1).to_numpy(dtype=np.int64)[first],
        "pid": pid[first],
        "correlation_id": corr[first],
        "api_name": text_array(np.asarray(api_codes)[first], api_labels),
        "api_start": column(k, "api_start", -1).fillna(-1).to_numpy(dtype=np.int64)[first],
        "nvtx_path": text_array(np.asarray(path_codes)[first], path_labels),
    })
    out = out.sort_values(["device", "start"], kind="stable", ignore_index=True)
    gap = np.full(len(out), np.nan)
    dev = out["device"].to_numpy()
    s = out["start"].to_numpy(dtype=np.int64)
    e = out["end"].to_numpy(dtype=np.int64)
    for d in np.unique(dev).tolist():
        idx = np.flatnonzero(dev == d)
        if len(idx) > 1:  # from the latest end so far (a replay may outlast the next one's start)
            reach = np.maximum.accumulate(e[idx])
            gap[idx[1:]] = np.maximum(s[idx[1:]] - reach[:-1], 0)
    out["gap_before_ns"] = gap
    return out.sort_values("start", kind="stable", ignore_index=True)[list(_REPLAY_COLUMNS)]


_UNKNOWN_COLUMNS = {
    "device": "GPU device id",
    "kernels": "kernels starting in the window",
    "kernel_ns": "their summed duration (ns)",
    "unknown_count": "kernels without a recorded grid or block (whole graph executions included)",
    "unknown_ns": "their summed duration (ns)",
    "graph_count": "of those, kernels a CUDA graph replay ran or whole graph executions",
    "example": "the longest such kernel's short name",
}


@fact("unknown_launch_config", columns=_UNKNOWN_COLUMNS, scope_keys=("device",))
def unknown_launch_config(ctx: FactContext) -> pd.DataFrame:
    """Per device: the kernels in the window whose grid or block dimensions the trace does not record
    (torch.profiler on ROCm for graph replays, nsys' whole graph executions). Launch-configuration rules
    (small grids, occupancy) cannot judge them; only devices with such kernels have a row."""
    k = starts_in_window(ctx.trace.kernels, ctx.window, [
        "start", "device", "duration", "short_name", "in_graph", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
        "block_z"])
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "example" else "int64") for c in _UNKNOWN_COLUMNS})
    unknown = ~known_launch_config(k)
    graph = column(k, "in_graph", 0).fillna(0).to_numpy(dtype=np.int64) > 0
    device = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    dur = k["duration"].to_numpy(dtype=np.int64)
    rows = []
    for d in np.unique(device[unknown]).tolist():
        mine = device == d
        sel = mine & unknown
        longest = np.flatnonzero(sel)[int(np.argmax(dur[sel]))]
        rows.append({"device": d, "kernels": int(mine.sum()), "kernel_ns": int(dur[mine].sum()),
                     "unknown_count": int(sel.sum()), "unknown_ns": int(dur[sel].sum()),
                     "graph_count": int((sel & graph).sum()),
                     "example": str(k["short_name"].iloc[longest]) if "short_name" in k.columns else ""})
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "example" else "int64") for c in _UNKNOWN_COLUMNS})
    return pd.DataFrame(rows, columns=list(_UNKNOWN_COLUMNS))


def graph_executions_without_kernels(trace: object) -> int:
    """How many whole graph executions the trace holds without their kernels (``in_graph`` = 2 rows)."""
    k = getattr(trace, "kernels", None)
    if k is None or "in_graph" not in k.columns or k.empty:
        return 0
    return int((k["in_graph"].to_numpy() == GRAPH_EXECUTION).sum())
