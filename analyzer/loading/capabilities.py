"""What a trace records, so that a rule which needs something the trace lacks says so instead of
silently passing.

Every loader fills the same model, but not every file carries every field: torch.profiler on ROCm
names copies ``Host -> Device`` (pageable or pinned unknown), a trace without CUDA API tracing has no
synchronization calls to count, a trace without device properties has no SM count. A *capability* is
one such kind of data, named here once. A loader lists the capabilities its file lacks, with the
reason, in :attr:`TraceInfo.unavailable <analyzer.loading.model.TraceInfo.unavailable>`
(:func:`missing_capabilities` derives them from the loaded frames, so every loader judges alike); facts
declare which capabilities their columns need and rules may add their own (``needs:``). A rule whose
needs the trace lacks is reported as *not available in this trace*, with the reason, and not run.

A capability is missing only when the data it describes is absent from every row that should carry
it (no copy says whether its host memory is pinned); a trace with no copies at all lacks nothing: a
rule about copies is then rightly silent.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

#: capability -> what it is (shown in reports and ``analyze rules explain``)
CAPABILITIES: dict[str, str] = {
    "api_calls": "the CUDA runtime/driver API calls (synchronization, allocation, copy and launch calls)",
    "launch_correlation": "which API call launched each GPU operation (correlation ids)",
    "memcpy_memory_kind": "whether each copy's host memory is pageable or pinned",
    "kernel_resources": "registers per thread and shared memory per block of each kernel",
    "kernel_launch_config": "grid and block dimensions of each kernel",
    "gpu_properties": "the GPU's SM count and per-SM limits",
    "memory_events": "the device memory allocations and frees over time",
    "ncu_metrics": "the Nsight Compute metrics a rule judges (throughput, occupancy, FLOP and memory counters) "
                   "in at least one profiled launch",
    "steady_state_loop": "repeated GPU work (a loop whose iterations the window found: steps, annotations "
                         "that repeat like iterations, or a repeating GPU op sequence)",
    "gpu_workload": "GPU work to judge the time between ops by: at least as many GPU ops in the window as the "
                    "shortest loop (MIN_LOOP_OPS); fewer is setup or a single call, whose idle "
                    "time between ops is one-time work, not a cost the program repeats",
}

#: fewer GPU ops than this cannot hold a loop (3 iterations of 2 ops): a capture of setup only (model
#: loading: thousands of allocations and one kernel); the window chooser and the ``gpu_workload``
#: capability read it
MIN_LOOP_OPS = 6

#: what to record for memory events (said once, by the memory rules and the report)
MEMORY_EVENTS_HINT = ("record them with nsys profile --cuda-memory-usage=true, or "
                      "torch.profiler.profile(profile_memory=True)")


def window_capabilities(window: object, gpu_ops: int | None = None) -> dict[str, str]:
    """Capabilities the analysis *window* lacks (the trace may have them all): a capture without repeated
    GPU work (model loading, one serving step, a single pass) has no steady-state loop, so rules about what
    a loop repeats (allocations per iteration) do not apply to it; it is judged as one pass. A window of
    fewer than :data:`MIN_LOOP_OPS` GPU ops (``gpu_ops``, when counted) is setup or a
    single call: the rules that judge the GPU's time between ops (idle gaps, host work, launches,
    synchronizations) have nothing the program repeats to judge."""

    out: dict[str, str] = {}
    if gpu_ops is not None and gpu_ops < MIN_LOOP_OPS:
        out["gpu_workload"] = (f"the window holds {gpu_ops} GPU op{'' if gpu_ops == 1 else 's'}, too few for a "
                               "loop: setup or a single call, whose idle time between ops is one-time work; "
                               "record the program's steady state")
    steps = getattr(window, "steps", None)
    if steps is not None and len(steps) > 0:
        return out
    out["steady_state_loop"] = ("the capture holds no repeated GPU work (no step ranges or repeated "
                                "annotations, no repeating GPU op sequence): setup only, one serving step "
                                "or a single pass, judged as one pass")
    return out


_HOST_SIDE = {"H2D": "src_kind", "D2H": "dst_kind", "H2H": "src_kind"}


def missing_capabilities(*, kernels: pd.DataFrame, memcpy: pd.DataFrame, memset: pd.DataFrame,
                         api: pd.DataFrame, gpus: pd.DataFrame,
                         memory: pd.DataFrame | None = None) -> dict[str, str]:
    """Capabilities (see :data:`CAPABILITIES`) the loaded frames lack, each with a one-line reason.
    ``memory``: the memory frame (None: the loader reads none, so memory events are missing too)."""
    out: dict[str, str] = {}
    if memory is None or not len(memory) or not (memory["device"].to_numpy() >= 0).any():
        what = ("no device memory allocation or free" if memory is None or not len(memory)
                else "memory events, but none that names its device")
        out["memory_events"] = f"the trace records {what} ({MEMORY_EVENTS_HINT})"
    ops = len(kernels) + len(memcpy) + len(memset)
    if ops and api.empty:
        out["api_calls"] = "the trace records no CUDA runtime or driver API calls"
    elif ops:
        joined = sum(_count_not(f["api_name"], "")
                     for f in (kernels, memcpy, memset) if len(f) and "api_name" in f.columns)
        if joined == 0:
            out["launch_correlation"] = ("no GPU operation could be joined to the API call that launched it "
                                         "(the trace has no correlation ids or launch flows)")
    if len(memcpy) and "direction" in memcpy.columns:
        direction = memcpy["direction"].to_numpy(dtype=object)
        host_rows = 0
        known = 0
        for d, col in _HOST_SIDE.items():
            rows = direction == d
            if rows.any() and col in memcpy.columns:
                host_rows += int(rows.sum())
                known += int((memcpy[col].to_numpy(dtype=object)[rows] != "unknown").sum())
        if host_rows and not known:
            out["memcpy_memory_kind"] = "no copy says whether its host memory is pageable or pinned"
    if len(kernels):
        if "registers_per_thread" in kernels.columns and not (kernels["registers_per_thread"].to_numpy() > 0).any():
            out["kernel_resources"] = "the kernels carry no registers-per-thread or shared-memory figures"
        if "block_x" in kernels.columns and not (kernels["block_x"].to_numpy() > 0).any():
            out["kernel_launch_config"] = "the kernels carry no grid or block dimensions"
        used = set(pd.unique(kernels["device"].to_numpy(dtype=np.int64)).tolist()) if "device" in kernels else set()
        described = set()
        if len(gpus) and {"device", "sm_count"} <= set(gpus.columns):
            described = set(gpus.loc[gpus["sm_count"].to_numpy() > 0, "device"].astype(int).tolist())
        lacking = sorted(used - described)
        if lacking:
            which = ", ".join(str(d) for d in lacking[:8])
            out["gpu_properties"] = f"the trace has no SM count or per-SM limits for GPU {which}"
    return out


def _count_not(column: pd.Series, text: str) -> int:
    """Rows of a text column whose value is not ``text``; a categorical is counted on its codes, without
    a Python object per row."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = column.cat.codes.to_numpy()
        categories = column.cat.categories
        return int((codes != categories.get_loc(text)).sum()) if text in categories else len(codes)
    return int((column.to_numpy(dtype=object) != text).sum())
