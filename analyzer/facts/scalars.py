"""Built-in scalar variables for rule conditions (``gpu_idle_ns / window_ns > 0.3``...).

All times are ns inside the analysis window; sums over devices where several GPUs are active (shares
divide by ``device_count * window_ns``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyzer.facts._util import window_mask

if TYPE_CHECKING:
    from analyzer.facts.registry import FactStore

SCALAR_DOCS: dict[str, str] = {
    "window_ns": "analysis window length (ns)",
    "window_start_ns": "window start (ns, trace-relative)",
    "window_end_ns": "window end (ns)",
    "setup_ns": "one-time setup before the window (ns)",
    "setup_compile_ns": "of setup_ns, the host time torch.compile spent compiling (dynamo/inductor ranges; ns)",
    "setup_graph_capture_ns": "of setup_ns, CUDA graph capture and instantiation (ns)",
    "setup_compiler_ns": "of setup_ns, time compiler processes the program started (ptxas, cc1 ...) ran (ns)",
    "trace_ns": "capture length (ns)",
    "device_count": "GPUs with activity in the window",
    "kernel_count": "kernels starting in the window",
    "kernel_time_ns": "summed kernel duration (ns)",
    "compute_kernel_count": "kernels starting in the window that are not communication (NCCL ...) kernels",
    "compute_kernel_time_ns": "their summed duration (ns): what compute rules divide by",
    "comm_kernel_count": "communication (NCCL ...) kernels starting in the window",
    "comm_kernel_time_ns": "their summed duration (ns; transfer plus waiting for other ranks)",
    "memcpy_count": "copies starting in the window",
    "memcpy_time_ns": "summed copy duration (ns)",
    "memcpy_bytes": "bytes copied",
    "memset_time_ns": "summed memset duration (ns)",
    "gpu_busy_ns": "union of GPU op time per device, summed over devices (ns)",
    "gpu_idle_ns": "summed gpu_gaps durations (ns)",
    "gpu_busy_share": "gpu_busy_ns / (device_count * window_ns)",
    "gpu_idle_share": "gpu_idle_ns / (device_count * window_ns)",
    "api_launch_count": "kernel launch API calls in the window",
    "api_launch_ns": "summed launch API time (ns)",
    "sync_call_count": "blocking host-device synchronization calls in the window",
    "sync_time_ns": "summed blocking sync call time (ns)",
    "alloc_call_count": "allocation / free calls in the window",
    "alloc_time_ns": "summed allocation / free call time (ns)",
    "memory_growth_per_step": "growth per step (B) of the GPU whose memory grows fastest and steadily (three "
    "quarters of its step-to-step slopes above zero, see the memory_growth fact); 0 when no GPU's memory grows "
    "so or the trace has no memory events",
    "window_steps": "steps the window is made of (NVTX step instances or periods of the repeating GPU op "
    "sequence); 0 when the window has no such structure",
    "timeline": "1 when the input has a timeline (an Nsight Systems trace), 0 for an Nsight Compute report "
    "analyzed on its own (the window is then its profiled kernel time)",
    "launch_bound_ns": "idle GPU time while the host was launching work (timeline_breakdown's launch_bound: "
    "launch calls, Python dispatch between them, launch latency), summed over devices (ns)",
    "host_sync_ns": "idle GPU time while the host was blocked in an explicit synchronization "
    "(cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize) or returning from one, and the "
    "GPU's refill after one (timeline_breakdown's host_sync, detail 'refill (call)') (ns)",
    "host_copy_wait_ns": "idle GPU time while the host was blocked in a copy or memset it waits for (synchronous "
    "cudaMemcpy, asynchronous copies from or to pageable memory), and the GPU's refill after one (ns)",
    "host_alloc_wait_ns": "idle GPU time while the host was inside an allocation or free call, and the GPU's "
    "refill after one (ns)",
    "host_work_ns": "idle GPU time while the host ran its own code with no CUDA call (timeline_breakdown's "
    "host_work) (ns)",
    "exposed_copy_ns": "time copies and memsets ran with no kernel running on their GPU (ns)",
    "exposed_comm_ns": "time communication kernels ran with no compute kernel on their GPU (ns)",
    "wait_other_ns": "idle GPU time with the next op already queued (another stream, an event, a rank) (ns)",
    "ncu_softmax_launches": "Nsight Compute launches of softmax kernels joined to this trace (0 without ncu data);"
    " trace-only softmax estimates defer to the measured rule when this is non-zero",
}


def _ncu_softmax_launches(store: FactStore) -> float:
    ncu = store.trace.ncu
    kernels = ncu.kernels if ncu is not None else None
    if kernels is None or not len(kernels):
        return 0.0
    from analyzer.facts.categories import classify_names, load_categories

    matched = kernels["matched"].to_numpy(dtype=bool) if "matched" in kernels else np.ones(len(kernels), bool)
    names = kernels["name"].astype(str)
    categories = classify_names(names, names, load_categories(store.options.get("categories_file")))
    return float((np.asarray(categories) == "softmax")[matched].sum())


#: the facts :func:`trace_scalars` reads, in the order it reads them (a plan computes them in this order):
#: the timeline breakdown first, whose segments are the analysis' largest transient (4.8 M rows per
#: million kernels), before ``gpu_busy`` and ``gpu_gaps`` are held (100 MB per million kernels less at
#: the peak)
SCALAR_FACTS: tuple[str, ...] = ("timeline_breakdown", "gpu_busy", "gpu_gaps", "sync_calls", "alloc_calls",
                                 "setup_activity", "memory_growth")


def trace_scalars(store: FactStore) -> dict[str, float]:
    """The scalars in :data:`SCALAR_DOCS` for one trace and window (from the facts :data:`SCALAR_FACTS`)."""
    from analyzer.facts.api import is_launch_api

    from analyzer.facts.comm import comm_kernel_mask
    from analyzer.facts.registry import FactContext

    t, w = store.trace, store.window
    by_cause = breakdown_scalars(store.get("timeline_breakdown"))  # first: see SCALAR_FACTS
    km, mm, sm = (window_mask(f, w) if len(f) else np.zeros(0, bool) for f in (t.kernels, t.memcpy, t.memset))
    comm = comm_kernel_mask(FactContext(trace=t, window=w, store=store, options=store.options))
    comm = comm if len(comm) == len(km) else np.zeros(len(km), dtype=bool)
    busy = store.get("gpu_busy")
    gaps = store.get("gpu_gaps")
    if len(t.api):
        am = window_mask(t.api, w) & is_launch_api(store)
        launch_ns = t.api["duration"].to_numpy()[am]
    else:
        launch_ns = np.zeros(0)
    sync = store.get("sync_calls")
    sync = sync.loc[sync["blocking"].to_numpy(dtype=bool)] if len(sync) else sync
    alloc = store.get("alloc_calls")
    setup = store.get("setup_activity")
    setup_of = dict(zip(setup["kind"].astype(str), setup["before_window_ns"].astype(float))) if len(setup) else {}
    growth = store.get("memory_growth")
    steady = growth.loc[growth["slope_low"].to_numpy(dtype=float) > 0] if len(growth) else growth
    devices = int(busy["device"].nunique()) if len(busy) else 0
    span = float(max(devices, 1) * w.duration_ns)
    busy_ns = float(busy["duration"].sum()) if len(busy) else 0.0
    idle_ns = float(gaps["duration"].sum()) if len(gaps) else 0.0

    def total(frame: pd.DataFrame, mask: np.ndarray | None = None, col: str = "duration") -> float:
        if not len(frame):
            return 0.0
        values = frame[col].to_numpy()
        return float(values[mask].sum() if mask is not None else values.sum())

    return {
        "window_ns": float(w.duration_ns),
        "window_start_ns": float(w.start_ns),
        "window_end_ns": float(w.end_ns),
        "setup_ns": float(w.setup_ns),
        "setup_compile_ns": setup_of.get("torch.compile", 0.0),
        "setup_graph_capture_ns": setup_of.get("CUDA graph capture", 0.0),
        "setup_compiler_ns": setup_of.get("compiler processes", 0.0),
        "trace_ns": float(t.info.duration_ns),
        "device_count": float(devices),
        "kernel_count": float(km.sum()),
        "kernel_time_ns": total(t.kernels, km),
        "compute_kernel_count": float((km & ~comm).sum()),
        "compute_kernel_time_ns": total(t.kernels, km & ~comm),
        "comm_kernel_count": float((km & comm).sum()),
        "comm_kernel_time_ns": total(t.kernels, km & comm),
        "memcpy_count": float(mm.sum()),
        "memcpy_time_ns": total(t.memcpy, mm),
        "memcpy_bytes": total(t.memcpy, mm, "bytes"),
        "memset_time_ns": total(t.memset, sm),
        "gpu_busy_ns": busy_ns,
        "gpu_idle_ns": idle_ns,
        "gpu_busy_share": busy_ns / span if span > 0 else 0.0,
        "gpu_idle_share": idle_ns / span if span > 0 else 0.0,
        "api_launch_count": float(len(launch_ns)),
        "api_launch_ns": float(launch_ns.sum()),
        "sync_call_count": float(len(sync)),
        "sync_time_ns": total(sync),
        "alloc_call_count": float(len(alloc)),
        "alloc_time_ns": total(alloc),
        **by_cause,
        "ncu_softmax_launches": _ncu_softmax_launches(store),
        "timeline": 0.0 if t.ncu_only else 1.0,
        "memory_growth_per_step": float(steady["bytes_per_step"].max()) if len(steady) else 0.0,
        "window_steps": float(len(getattr(w, "steps", ()) or ())),
    }


def breakdown_scalars(breakdown: pd.DataFrame) -> dict[str, float]:
    """The window's time per cause from the ``timeline_breakdown`` fact, summed over devices, with the
    host_sync time split by the call (explicit synchronization, a copy, an allocation): each rule's
    impact is one of these, so no nanosecond is counted by two rules."""
    from analyzer.facts.breakdown import host_wait_kind

    names = ("launch_bound_ns", "host_sync_ns", "host_copy_wait_ns", "host_alloc_wait_ns", "host_work_ns",
             "exposed_copy_ns", "exposed_comm_ns", "wait_other_ns")
    out = dict.fromkeys(names, 0.0)
    if breakdown.empty:
        return out
    win = breakdown.loc[breakdown["scope"].to_numpy(object) == "window"]
    by = win.groupby(["cause", "detail"], sort=False)["duration_ns"].sum()
    for (cause, detail), ns in by.items():
        if cause == "host_sync":
            key = {"sync": "host_sync_ns", "copy": "host_copy_wait_ns", "alloc": "host_alloc_wait_ns"}[
                host_wait_kind(str(detail))]
        else:
            key = f"{cause}_ns"
        if key in out:
            out[key] += float(ns)
    return out


__all__ = ["SCALAR_DOCS", "SCALAR_FACTS", "breakdown_scalars", "trace_scalars"]
