"""The ``steps`` fact: one row per iteration of the program's loop inside the window, with its duration.

The iterations are those the window chooser found (:attr:`analyzer.analysis.Window.steps`): the user's
NVTX step ranges, else the periods of a repeating GPU op sequence.

What a step *costs* is measured from completion to completion. A step is complete when its range has
ended on the CPU and every GPU op launched inside it (by the loader's attribution: nested ranges and the
process's other threads included) has finished; ``duration`` is the time from the previous step's
completion to this one's. This is the loop's throughput whichever side is the bottleneck:

* a host-bound loop (data loading, Python overhead, synchronizing every step): the GPU finishes early,
  completions follow the CPU ranges, and the duration is the CPU time per iteration including anything
  the loop does between two step ranges;
* a GPU-bound loop whose host runs ahead (asynchronous launches, no synchronization): the CPU range only
  times the *launches*; completions follow the GPU, and the duration is the GPU time per iteration.

Timing the CPU range alone would report the launch time in the second case (a step "0.4 ms long" whose
GPU work takes 30 ms). For the first step, the previous completion is the end of the GPU work launched
before it (the host may have queued it ahead), or the step's start when the GPU was already idle.

For op-sequence periods (no NVTX), a period's ops are the ``period`` ops from its first one (in start
order); it completes when the last of them ends. For iterations marked by an annotation that occurs once
per iteration (``Optimizer.step#...``, source ``annotation``), an iteration's ops are those launched
between one instance's start and the next; it completes like an NVTX step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts.registry import FactContext, fact

STEP_COLUMNS = {
    "step": "step name (NVTX text, or 'period N')",
    "start": "step start (ns): the range's start, or the period's first op start",
    "end": "CPU end of the range (ns); for a period, the start of the next period",
    "gpu_end": "end of the last GPU op launched inside (ns, -1 none)",
    "done": "completion (ns): the later of the CPU end and the GPU end (a period: its last op's end)",
    "duration": "time from the previous step's completion to this one's (ns)",
    "cpu_ns": "CPU time of the range (ns; a period: its span)",
    "gpu_ns": "GPU op time (kernels, copies, memsets) launched inside (ns)",
    "kernel_count": "kernels launched inside",
}


def _empty() -> pd.DataFrame:
    return empty_typed((c, object if c == "step" else "int64") for c in STEP_COLUMNS)


@fact("steps", columns=STEP_COLUMNS, requires=("gpu_ops", "nvtx_instances"), scope_keys=("step",))
def steps(ctx: FactContext) -> pd.DataFrame:
    """One row per loop iteration inside the window (NVTX steps, else op-sequence periods) with its
    duration from the previous iteration's completion (CPU range ended and its GPU work finished) to
    its own: the loop's time per iteration whether the host or the GPU is the bottleneck."""
    spans = ctx.window.steps
    if spans is None or len(spans) == 0:
        return _empty()
    ops = ctx.get("gpu_ops")
    start = np.asarray(spans.starts, dtype=np.int64)
    end = np.asarray(spans.ends, dtype=np.int64)
    o_start = ops["start"].to_numpy(dtype=np.int64)
    o_end = ops["end"].to_numpy(dtype=np.int64)
    if spans.source == "periodic":
        gpu_end, gpu_ns, kcount, prev_done = _periods(ops, start, end, spans.period)
        done = np.where(gpu_end >= 0, gpu_end, end)
    elif spans.source == "annotation":  # from one annotation to the next: the GPU work launched between
        gpu_end, gpu_ns, kcount = _launched(ops, start, end)
        done = np.maximum(end, gpu_end)
        launch = np.where(ops["api_start"].to_numpy(dtype=np.int64) >= 0, ops["api_start"].to_numpy(dtype=np.int64),
                          o_start)
        before = launch < start[0]
        prev_done = int(o_end[before].max()) if before.any() else int(start[0])
    else:
        inst = ctx.get("nvtx_instances").set_index("range_id")
        ids = np.asarray(spans.range_ids, dtype=np.int64)
        found = inst.reindex(ids)
        gpu_end = found["gpu_end"].fillna(-1).to_numpy(dtype=np.int64)
        gpu_ns = found["gpu_ns"].fillna(0).to_numpy(dtype=np.int64)
        kcount = found["kernel_count"].fillna(0).to_numpy(dtype=np.int64)
        done = np.maximum(end, gpu_end)
        api = ops["api_start"].to_numpy(dtype=np.int64)
        launch = np.where(api >= 0, api, o_start)
        before = launch < start[0]
        prev_done = int(o_end[before].max()) if before.any() else int(start[0])
    first_prev = min(max(int(start[0]), prev_done), int(done[0]))
    previous = np.concatenate(([first_prev], done[:-1]))
    return pd.DataFrame({
        "step": np.asarray(spans.names, dtype=object),
        "start": start,
        "end": end,
        "gpu_end": gpu_end,
        "done": done,
        "duration": np.maximum(done - previous, 0),
        "cpu_ns": end - start,
        "gpu_ns": gpu_ns,
        "kernel_count": kcount,
    })


def _launched(ops: pd.DataFrame, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per span ``[start, end)`` (by launch time: the API call, else the op's start): last end, op time and
    kernel count of the GPU ops launched inside (-1 / 0 / 0 without any)."""
    api = ops["api_start"].to_numpy(dtype=np.int64)
    o_start = ops["start"].to_numpy(dtype=np.int64)
    launch = np.where(api >= 0, api, o_start)
    o_end = ops["end"].to_numpy(dtype=np.int64)
    is_kernel = (ops["op"].to_numpy() == "kernel").astype(np.int64)
    n = len(start)
    grp = np.searchsorted(start, launch, side="right") - 1
    inside = grp >= 0
    inside[inside] = launch[inside] < end[grp[inside]]
    g = grp[inside]
    gpu_end = np.full(n, -1, dtype=np.int64)
    np.maximum.at(gpu_end, g, o_end[inside])
    gpu_ns = np.bincount(g, weights=(o_end - o_start)[inside], minlength=n).astype(np.int64)
    kcount = np.bincount(g, weights=is_kernel[inside], minlength=n).astype(np.int64)
    return gpu_end, gpu_ns, kcount


def _periods(
    ops: pd.DataFrame, start: np.ndarray, end: np.ndarray, period: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Per period ``[start, end)`` (by op start): last op end, op time, kernel count; and the completion
    of the period before the first one (its ``period`` ops before the first op)."""
    o_start = ops["start"].to_numpy(dtype=np.int64)
    o_end = ops["end"].to_numpy(dtype=np.int64)
    dur = o_end - o_start
    is_kernel = (ops["op"].to_numpy() == "kernel").astype(np.int64)
    n = len(start)
    grp = np.searchsorted(start, o_start, side="right") - 1  # the period an op may belong to
    inside = grp >= 0
    inside[inside] = o_start[inside] < end[grp[inside]]
    g = grp[inside]
    gpu_end = np.full(n, -1, dtype=np.int64)
    np.maximum.at(gpu_end, g, o_end[inside])
    gpu_ns = np.bincount(g, weights=dur[inside], minlength=n).astype(np.int64)
    kcount = np.bincount(g, weights=is_kernel[inside], minlength=n).astype(np.int64)
    lo = np.searchsorted(o_start, start, side="left")
    first = int(lo[0])
    prev_lo = max(0, first - max(1, period))
    prev_done = int(o_end[prev_lo:first].max()) if first > prev_lo else int(start[0])
    return gpu_end, gpu_ns, kcount, prev_done
