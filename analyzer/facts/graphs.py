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

import re

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts._util import column, covered_between, frame_memo, new_frame, starts_in_window, text_array, text_codes, union_intervals
from analyzer.facts.occupancy import known_launch_config
from analyzer.facts.registry import FactContext, fact
from analyzer.loading.api_names import CAPTURE_BEGIN, CAPTURE_END, GRAPH_SETUP_APIS  # noqa: F401 (re-exported)
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
    "tid": "launching thread (-1 unknown)",
    "correlation_id": "the graph launch's correlation id",
    "api_name": "the launch call (cudaGraphLaunch, hipGraphLaunch, ...)",
    "api_start": "its start (ns, -1 unknown)",
    "nvtx_path": "NVTX ranges open at the launch",
    "gap_before_ns": "time between the previous replay's end and this one's start, on the same device "
                     "(ns; NaN for the device's first replay in the window, 0 when they overlap)",
    "idle_before_ns": "of that gap, the time the device ran nothing at all (ns; other GPU work in the gap, "
                      "e.g. eager kernels between two replays, is not idle; NaN as gap_before_ns)",
    "host_idle_before_ns": "of idle_before_ns, the time the timeline breakdown charges to the host (causes "
                           "launch_bound, host_sync, host_work: the thread feeding the GPU had not submitted the "
                           "next work), less the eager launches between them (launch_bound time of the gaps "
                           "between two eager ops, not a replay's launch: launch-bound's); the rest is the GPU "
                           "waiting with the replay already queued (another stream, an event, another rank) or "
                           "setup (ns; NaN as gap_before_ns)",
    "updates_before": "graph updates since the device's previous replay started: executable-graph updates "
                      "(cudaGraphExecUpdate, cudaGraphExec*SetParams ...) and instantiations (the API calls, or "
                      "nsys' CUDA_GRAPH_EVENTS where they count more); 0 for the device's first replay in the window",
}

#: calls that change an instantiated graph in place (CUDA names; HIP's map to them)
GRAPH_UPDATE_API = re.compile(r"^cu(?:da)?GraphExec\w*(?:Update|SetParams|SetEvent|SetEnabled)\w*$")


def _empty_replays() -> pd.DataFrame:
    text = {"api_name", "nvtx_path"}
    real = {"gap_before_ns", "idle_before_ns", "host_idle_before_ns"}
    return empty_typed((c, object if c in text else "float64" if c in real else "int64")
                       for c in _REPLAY_COLUMNS)


@fact("graph_replays", columns=_REPLAY_COLUMNS, requires=("gpu_busy", "timeline_segments"),
      scope_keys=("device", "nvtx_path"))
def graph_replays(ctx: FactContext) -> pd.DataFrame:
    """One row per CUDA graph replay starting in the window, in start order per device, with the idle
    time between consecutive replays."""
    cols = ["start", "end", "duration", "device", "stream", "correlation_id", "pid", "tid", "in_graph", "graph_id",
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
        "tid": column(k, "tid", -1).fillna(-1).to_numpy(dtype=np.int64)[first],
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
    lo = s - np.nan_to_num(gap).astype(np.int64)
    out["idle_before_ns"] = _idle_in_gaps(ctx.get("gpu_busy"), dev, lo, s, np.isnan(gap))
    out["host_idle_before_ns"] = _host_time_in_gaps(ctx.get("timeline_segments"), dev, lo, s, np.isnan(gap))
    out["updates_before"] = _updates_between(ctx, dev, s)
    return out.sort_values("start", kind="stable", ignore_index=True)[list(_REPLAY_COLUMNS)]


def _updates_between(ctx: FactContext, device: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per replay (rows in (device, start) order): graph updates and instantiations in ``[previous replay's
    start, this start)`` on the same device; 0 for a device's first replay."""
    out = np.zeros(len(start), dtype=np.int64)
    if len(start) < 2:
        return out
    api = ctx.trace.api
    upd_t = inst_t = np.empty(0, dtype=np.int64)
    if len(api):
        from analyzer.facts.api import api_base_codes

        codes, base = api_base_codes(ctx.store)
        names = [str(b) if b is not None else "" for b in base]
        is_upd = np.array([bool(GRAPH_UPDATE_API.match(b)) for b in names], dtype=bool)[codes]
        is_inst = np.array([b in GRAPH_SETUP_APIS and "Upload" not in b for b in names], dtype=bool)[codes]
        t = api["start"].to_numpy(np.int64)
        upd_t, inst_t = np.sort(t[is_upd]), np.sort(t[is_inst])
    info = ctx.trace.extras.get("cuda_graphs") if isinstance(ctx.trace.extras, dict) else None
    ev = info.get("instantiated_at") if isinstance(info, dict) else None
    ev_t = np.sort(np.asarray([x for x in ev if isinstance(x, int)] if isinstance(ev, list) else [], dtype=np.int64))

    def between(times: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.searchsorted(times, hi, side="left") - np.searchsorted(times, lo, side="left")

    for d in np.unique(device).tolist():
        idx = np.flatnonzero(device == d)
        if len(idx) < 2:
            continue
        lo, hi = start[idx[:-1]], start[idx[1:]]
        out[idx[1:]] = between(upd_t, lo, hi) + np.maximum(between(inst_t, lo, hi), between(ev_t, lo, hi))
    return out


def _host_time_in_gaps(segments: pd.DataFrame, device: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                       none: np.ndarray) -> np.ndarray:
    """Per gap ``[lo, hi)`` on ``device``: the time the timeline breakdown charges to the host inside it
    (:data:`~analyzer.facts.breakdown.HOST_CAUSES`) but the eager launches (launch-bound time that is not
    a replay's launch, :func:`~analyzer.facts.breakdown.graph_launch_time`: ops a graph break or an eager
    optimizer launches one by one between the replays, launch-bound's finding); NaN where ``none``."""
    from analyzer.facts.breakdown import HOST_CAUSES, graph_launch_time

    if segments.empty:
        return np.where(none, np.nan, 0.0)
    cause_codes, causes = text_codes(segments["cause"])
    host_cause = np.array([str(c) in HOST_CAUSES for c in causes] + [False], dtype=bool)
    launch = np.array([str(c) == "launch_bound" for c in causes] + [False], dtype=bool)
    detail_codes, details = text_codes(segments["detail"])
    eager = np.array([not graph_launch_time(str(x)) for x in details] + [False], dtype=bool)
    # text_codes' codes are never negative: read as they are (narrow), no per-segment copy
    host = segments[host_cause[cause_codes] & ~(launch[cause_codes] & eager[detail_codes])]
    return _covered_in_gaps(host, device, lo, hi, none)


def _idle_in_gaps(busy: pd.DataFrame, device: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  none: np.ndarray) -> np.ndarray:
    """Per gap ``[lo, hi)`` on ``device``: its length minus the device's busy time inside it (``busy``:
    the gpu_busy union per device); NaN where ``none``."""
    return (hi - lo).astype(np.float64) - _covered_in_gaps(busy, device, lo, hi, none)


def _covered_in_gaps(intervals: pd.DataFrame, device: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     none: np.ndarray) -> np.ndarray:
    """Per gap ``[lo, hi)`` on ``device``: the time the disjoint intervals of that device (``intervals``:
    ``device``, ``start``, ``end``) cover inside it (:func:`~analyzer.facts._util.covered_between`); NaN
    where ``none``."""
    out = np.where(none, np.nan, 0.0)
    if intervals.empty:
        return out
    dev = intervals["device"].to_numpy(np.int64)
    starts, ends = intervals["start"].to_numpy(np.int64), intervals["end"].to_numpy(np.int64)
    for d in np.unique(device).tolist():
        mine = np.flatnonzero((device == d) & ~none)
        rows = np.flatnonzero(dev == d)
        if not len(mine) or not len(rows):
            continue
        rows = rows[np.argsort(starts[rows], kind="stable")]
        out[mine] = covered_between(starts[rows], ends[rows], lo[mine], hi[mine])
    return out


_UNKNOWN_COLUMNS = {
    "device": "GPU device id",
    "kernels": "kernels starting in the window",
    "kernel_ns": "their summed duration (ns)",
    "unknown_count": "kernels without a recorded grid or block (whole graph executions are not counted: "
                     "they are no kernels)",
    "unknown_ns": "their summed duration (ns)",
    "graph_count": "of those, kernels a CUDA graph replay ran",
    "example": "the longest such kernel's short name",
}


@fact("unknown_launch_config", columns=_UNKNOWN_COLUMNS, scope_keys=("device",), per_kernel=True)
def unknown_launch_config(ctx: FactContext) -> pd.DataFrame:
    """Per device: the kernels in the window whose grid or block dimensions the trace does not record
    (torch.profiler on ROCm for graph replays, nsys' whole graph executions). Launch-configuration rules
    (small grids, occupancy) cannot judge them; only devices with such kernels have a row."""
    k = starts_in_window(ctx.trace.kernels, ctx.window, [
        "start", "device", "duration", "short_name", "in_graph", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
        "block_z"])
    if k.empty:
        return empty_typed((c, object if c == "example" else "int64") for c in _UNKNOWN_COLUMNS)
    in_graph = column(k, "in_graph", 0).fillna(0).to_numpy(dtype=np.int64)
    # whole graph executions are no kernels: graph-replays says how to record their kernels
    unknown = ~known_launch_config(k) & (in_graph != GRAPH_EXECUTION)
    graph = in_graph > 0
    device = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    dur = k["duration"].to_numpy(dtype=np.int64)
    rows = []
    for d in np.unique(device[unknown]).tolist():
        mine = (device == d) & (in_graph != GRAPH_EXECUTION)
        sel = mine & unknown
        longest = np.flatnonzero(sel)[int(np.argmax(dur[sel]))]
        rows.append({"device": d, "kernels": int(mine.sum()), "kernel_ns": int(dur[mine].sum()),
                     "unknown_count": int(sel.sum()), "unknown_ns": int(dur[sel].sum()),
                     "graph_count": int((sel & graph).sum()),
                     "example": str(k["short_name"].iloc[longest]) if "short_name" in k.columns else ""})
    if not rows:
        return empty_typed((c, object if c == "example" else "int64") for c in _UNKNOWN_COLUMNS)
    return pd.DataFrame(rows, columns=list(_UNKNOWN_COLUMNS))


# ---------------------------------------------------------------------------------------------------
# one-time work the steady state does not repeat: torch.compile's compilation, CUDA graph capture

#: ranges torch.profiler records while torch.compile compiles (dynamo, AOT autograd, inductor): the
#: ``(dynamo_timed)`` phases and the named stages around them. ``Torch-Compiled Region``,
#: ``CompiledFunction`` and ``TorchDynamo Cache Lookup`` run the compiled code on every call: not compilation.
COMPILE_RANGE = re.compile(
    r"\(dynamo_timed\)$|^(?:dynamo|entire_frame_compile|backend_compile|inductor_compile|compile_fx_inner"
    r"|fx_codegen_and_compile|compile_attempt_\d+|_compile\.compile_inner|async_compile\.\w+"
    r"|compile_fx\.<locals>\.\w+|create_aot_dispatcher_function|GraphLowering\.compile_to_fn)$")

def compile_spans(trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """``(tid, start, end)``: per host thread, the union of its torch.compile compilation ranges
    (:data:`COMPILE_RANGE`: nested stages counted once), sorted by (tid, start); empty when the trace has
    none (nsys records them only where the program marks them). Worked out once per trace."""
    nv = trace.nvtx
    if nv is None or not len(nv):
        z = np.empty(0, dtype=np.int64)
        return z, z, z
    return frame_memo(nv, "compile_spans", lambda: _compile_spans(nv))  # type: ignore[no-any-return]


def _compile_spans(nv: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes, labels = frame_memo(nv, "text_codes:text", lambda: text_codes(nv["text"]))
    hit = np.array([bool(COMPILE_RANGE.search(str(x))) for x in labels] + [False], dtype=bool)
    rows = hit[np.where(codes < 0, len(labels), codes)]
    tid = nv["tid"].to_numpy(np.int64)[rows]
    u = union_intervals(nv["start"].to_numpy(np.int64)[rows], nv["end"].to_numpy(np.int64)[rows], tid)
    return u.group, u.start, u.end


def relabel_compilation(ctx: FactContext, seg: pd.DataFrame, host_causes: tuple[str, ...]) -> pd.DataFrame:
    """``timeline_segments`` with its host-held idle segments (``host_causes``) that start inside a
    compilation range of their feeding thread renamed ``compile`` (the host in Dynamo, AOT autograd or
    Inductor, including the first call's Triton autotuning: :func:`compile_spans`); the per-call
    ``Torch-Compiled Region`` / ``TorchDynamo Cache Lookup`` (guards) are not compilation."""
    from analyzer.facts.breakdown_pieces import relabel_inside

    tid, start, end = compile_spans(ctx.trace)
    return relabel_inside(seg, host_causes, tid, start, end, "compile")


_SETUP_COLUMNS = {
    "kind": "'torch.compile' (compilation ranges), 'compiler processes' (ptxas, cc1 ... started by the "
            "program, from OS runtime calls) or 'CUDA graph capture' (capture spans, instantiation)",
    "count": "ranges or calls of this kind in the trace",
    "total_ns": "their union on the host (ns): nested compilation stages counted once",
    "before_window_ns": "the part inside the setup before the window (from the first GPU operation to the "
                        "window's start, as setup_ns counts it; ns)",
    "in_window_ns": "the part inside the window (ns): recompilation or capture in the steady state",
    "first_start": "the first one's start (ns)",
}


@fact("setup_activity", columns=_SETUP_COLUMNS, scope_keys=("kind",))
def setup_activity(ctx: FactContext) -> pd.DataFrame:
    """One row per kind of one-time work found in the whole trace (torch.compile compilation, CUDA graph
    capture and instantiation), with how much of it lies before the window (setup) and inside it. Kinds
    the trace does not show have no row (nsys shows compilation only where the program marks it)."""
    t, w = ctx.trace, ctx.window
    parts: list[tuple[str, np.ndarray, np.ndarray]] = []
    nv = t.nvtx
    if len(nv):
        codes, labels = text_codes(nv["text"])
        hit = np.array([bool(COMPILE_RANGE.search(str(x))) for x in labels] + [False], dtype=bool)
        rows = hit[np.where(codes < 0, len(labels), codes)]
        if rows.any():
            parts.append(("torch.compile", nv["start"].to_numpy(np.int64)[rows], nv["end"].to_numpy(np.int64)[rows]))
    if len(t.api):
        from analyzer.facts.api import api_base_codes

        codes, base = api_base_codes(ctx.store)
        begin = np.array([b in CAPTURE_BEGIN for b in base], dtype=bool)[codes]
        end = np.array([b in CAPTURE_END for b in base], dtype=bool)[codes]
        setup = np.array([b in GRAPH_SETUP_APIS for b in base], dtype=bool)[codes]
        s, e = _capture_spans(t.api, begin, end)
        if setup.any() or len(s):
            s = np.concatenate([s, t.api["start"].to_numpy(np.int64)[setup]])
            e = np.concatenate([e, t.api["end"].to_numpy(np.int64)[setup]])
            parts.append(("CUDA graph capture", s, e))
    if not any(kind == "CUDA graph capture" for kind, _, _ in parts):
        # no capture or instantiation call recorded (driver-level capture, a thread without CUDA tracing):
        # nsys' CUDA_GRAPH_EVENTS still dates each instantiation (instants: counted, no duration)
        info = t.extras.get("cuda_graphs") if isinstance(t.extras, dict) else None
        at = info.get("instantiated_at") if isinstance(info, dict) else None
        if isinstance(at, list) and at:
            inst = np.asarray([x for x in at if isinstance(x, int)], dtype=np.int64)
            if len(inst):
                parts.append(("CUDA graph capture", inst, inst))
    s, e = _compiler_process_spans(t)
    if len(s):
        parts.append(("compiler processes", s, e))
    rows_out = []
    for kind, s, e in parts:
        order = np.argsort(s, kind="stable")
        u = union_intervals(s[order], np.maximum(e[order], s[order]))
        setup_start = w.start_ns - max(int(getattr(w, "setup_ns", 0) or 0), 0)  # the first GPU operation
        before = np.clip(np.minimum(u.end, w.start_ns) - np.maximum(u.start, setup_start), 0, None).sum()
        inside = np.clip(np.minimum(u.end, w.end_ns) - np.maximum(u.start, w.start_ns), 0, None).sum()
        rows_out.append({"kind": kind, "count": len(s), "total_ns": int((u.end - u.start).sum()),
                         "before_window_ns": int(before), "in_window_ns": int(inside),
                         "first_start": int(s.min())})
    if not rows_out:
        return empty_typed((c, object if c == "kind" else "int64") for c in _SETUP_COLUMNS)
    return pd.DataFrame(rows_out, columns=list(_SETUP_COLUMNS))


#: compilers a program starts to build GPU code at run time (Triton: ptxas; inductor's C++ wrapper and
#: torch.utils.cpp_extension: gcc/cc1/ld; NVRTC-less JIT: nvcc, cicc), by their process/thread name
COMPILER_PROCESSES = frozenset({"ptxas", "cc1", "cc1plus", "gcc", "gcc-real", "g++", "c++", "ld", "ld.gold",
                                "as", "nvcc", "cicc", "nvlink", "fatbinary", "clang", "clang++", "ld.lld"})


def _compiler_process_spans(trace: object) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)``: per compiler process the trace saw (nsys with OS runtime tracing records the
    program's child processes), the span of its OS runtime calls. Where compilation is visible in an nsys
    trace without torch.profiler's ranges."""
    threads = getattr(trace, "threads", None)
    osrt = getattr(trace, "osrt", None)
    if threads is None or osrt is None or not len(threads) or not len(osrt):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    names = threads["name"].astype(str).str.strip().str.lower()
    compilers = threads.loc[names.isin(COMPILER_PROCESSES).to_numpy(), "pid"].to_numpy(np.int64)
    if not len(compilers):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    o = osrt.loc[np.isin(osrt["pid"].to_numpy(np.int64), compilers), ["pid", "start", "end"]]
    if o.empty:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    span = o.groupby("pid").agg(start=("start", "min"), end=("end", "max"))
    return span["start"].to_numpy(np.int64), span["end"].to_numpy(np.int64)


def _capture_spans(api: pd.DataFrame, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of stream captures: each BeginCapture call to the next EndCapture call's end on
    the same thread (a capture left open runs to the thread's last call)."""
    rows, e = capture_rows(api, begin, end)
    return api["start"].to_numpy(np.int64)[rows], e


def capture_rows(api: pd.DataFrame, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, ends)``: the rows of ``api`` that begin a stream capture (``begin``), and the end of the
    capture each opens: the next EndCapture call's end on the same thread (``end``; a capture left open
    runs to the thread's last call)."""
    if not begin.any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    tid = column(api, "tid", -1).fillna(-1).to_numpy(np.int64)
    start = api["start"].to_numpy(np.int64)
    stop = api["end"].to_numpy(np.int64)
    out_r, out_e = [], []
    for th in np.unique(tid[begin]).tolist():
        mine = tid == th
        r = np.flatnonzero(begin & mine)
        r = r[np.argsort(start[r], kind="stable")]
        e_starts = start[end & mine]
        e_ends = stop[end & mine]
        order = np.argsort(e_starts, kind="stable")
        e_starts, e_ends = e_starts[order], e_ends[order]
        pos = np.searchsorted(e_starts, start[r], side="left")
        last = int(stop[mine].max())
        out_r.append(r)
        out_e.append(np.where(pos < len(e_ends), e_ends[np.minimum(pos, len(e_ends) - 1)] if len(e_ends) else last,
                              last))
    return np.concatenate(out_r), np.concatenate(out_e)


def capture_blocks(ctx: FactContext) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, ends)`` of ``ctx.trace.api``'s stream captures (:func:`capture_rows` on the calls whose
    CUDA or HIP name begins or ends a capture): what the timeline breakdown counts as graph capture."""
    from analyzer.facts.api import api_base_codes

    if not len(ctx.trace.api):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    codes, base = api_base_codes(ctx.store)
    begin = np.array([b in CAPTURE_BEGIN for b in base], dtype=bool)[codes]
    if not begin.any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    end = np.array([b in CAPTURE_END for b in base], dtype=bool)[codes]
    return capture_rows(ctx.trace.api, begin, end)
