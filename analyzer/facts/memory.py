"""Device memory over time: the level per GPU after every allocation and free, its peak per step and
per NVTX range, and how much it grows per step across the steady state.

What the level counts depends on what the trace recorded (``measure``):

* ``allocated`` (torch.profiler ``profile_memory=True``): PyTorch's caching allocator reports its running
  total with every block it hands out or takes back; that total is the level (tensors alive).
* ``reserved`` (nsys ``--cuda-memory-usage=true``): every ``cudaMalloc``/``cudaFree`` (and their driver,
  pool and static kin) of device memory; the level is what the process holds from the device. Under
  PyTorch that is the caching allocator's reserved segments: it follows the tensors alive in steps of a
  segment (2 MiB to hundreds of MiB) and never shrinks on its own.

A free whose address no earlier event of the trace allocated freed memory allocated before the capture:
the level starts high enough that it never goes below zero, and the count is reported
(``unmatched_frees``). Events of several processes on one GPU add up (each holds its own memory); the
allocator's totals are per process, so the level is then their signed sizes summed.

Growth per step is the Theil-Sen slope (the median of the slopes between every two steps) of the level
at each step's end across the window's steps, with the 25th and 75th percentiles of those slopes as its
spread: one step that frees a cache or allocates once moves neither.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import generic_path, text
from analyzer.facts.registry import FactContext, fact
from analyzer.loading.columns import empty_typed
from analyzer.loading.model import DEVICE_MEMORY_KINDS

TIMELINE_COLUMNS = {
    "device": "GPU (CUDA device ordinal)",
    "start": "time of the event (ns); the level holds from here to the next event",
    "op": "alloc | free",
    "delta": "signed size of the event (B): > 0 allocated, < 0 freed",
    "bytes": "device memory in use after the event (B), as `measure` counts it",
    "allocated": "the allocator's allocated total after the event (B), -1 when the trace has none",
    "reserved": "the allocator's reserved total after the event (B), -1 when the trace has none",
    "measure": "allocated (torch.profiler allocator totals) | reserved (CUDA allocations, nsys)",
    "address": "address allocated or freed, -1 when unknown",
    "freed_at": "for an allocation: when its address was next freed (ns), -1 when not in the trace",
    "matched": "for a free: an earlier event of the trace allocated its address",
    "pid": "process",
    "nvtx_path": "NVTX range open where the event happened, step numbers as N (step_N/forward)",
}

STEP_COLUMNS = {
    "device": "GPU",
    "step": "step name",
    "index": "step position in the window (0 = first)",
    "start": "step start (ns)",
    "end": "step end (ns, CPU end of the range)",
    "start_bytes": "device memory in use at the step's start (B)",
    "end_bytes": "device memory in use at the step's end (B)",
    "peak_bytes": "highest level inside the step (B)",
    "peak_time": "when the step reached it (ns)",
    "peak_range": "NVTX range of the event that set the peak (step numbers as N), '' at the step's start",
    "growth": "end_bytes - start_bytes (B)",
    "measure": "allocated | reserved (see memory_timeline)",
}

RANGE_COLUMNS = {
    "device": "GPU",
    "nvtx_path": "NVTX range (step numbers as N), '' outside every range",
    "events": "allocations and frees inside the window in this range",
    "alloc_bytes": "bytes allocated (B)",
    "free_bytes": "bytes freed (B)",
    "net_bytes": "alloc_bytes - free_bytes (B)",
    "kept_bytes": "bytes allocated here and not freed before the window's end (B)",
    "peak_bytes": "highest level reached by an event in this range (B)",
    "peak_steps": "window steps whose peak this range set",
}

GROWTH_COLUMNS = {
    "device": "GPU",
    "measure": "allocated | reserved (see memory_timeline)",
    "steps": "window steps with a level (0: the window has no steps)",
    "first_step": "first window step's name",
    "last_step": "last window step's name",
    "bytes_per_step": "growth per step (B): Theil-Sen slope of the level at each step's end",
    "slope_low": "25th percentile of the slopes between two steps (B/step)",
    "slope_high": "75th percentile of the slopes between two steps (B/step)",
    "growing_steps": "share of step-to-step changes of the step-end level that are increases (0..1)",
    "start_bytes": "level at the first window step's end (B)",
    "end_bytes": "level at the last window step's end (B)",
    "total_growth": "end_bytes - start_bytes (B)",
    "peak_bytes": "highest level inside the window (B)",
    "peak_step": "step that reached it ('' when the window has no steps)",
    "peak_range": "NVTX range of the event that set it (step numbers as N)",
    "growth_range": "NVTX range that allocated most of the bytes still held at the window's end",
    "growth_range_share": "its share of those bytes (0..1)",
    "peak_held_in": "NVTX range whose allocations hold most of the memory at the peak (allocated before it, "
    "not yet freed; the deepest range holding half or more)",
    "peak_held_share": "its share of the memory held at the peak that the trace saw allocated (0..1)",
    "capacity_bytes": "the GPU's memory (B), 0 when the trace does not say",
    "peak_share": "peak_bytes / capacity_bytes (0 when unknown)",
    "headroom_bytes": "capacity_bytes - peak_bytes (B; -1 when the capacity is unknown)",
    "steps_to_fill": "steps until the level reaches capacity at bytes_per_step (-1: not growing or unknown)",
    "fill_step": "the step at which the level would reach capacity, named like the window's steps "
    "(step_22 + 1465 steps: step_1487); '' when not growing, the capacity is unknown or the steps are not numbered",
    "unmatched_frees": "frees of memory no event of the trace allocated (allocated before the capture)",
    "held_before_bytes": "level before the GPU's first memory event of the trace (B): memory allocated before "
    "the capture began (a lower bound where the trace's levels count from their lowest point)",
    "processes": "processes with memory events on this GPU",
}


def _empty(columns: dict[str, str], text_cols: tuple[str, ...] = (), real: tuple[str, ...] = ()) -> pd.DataFrame:
    return empty_typed((c, object if c in text_cols else "float64" if c in real else "int64") for c in columns)


@fact("memory_timeline", columns=TIMELINE_COLUMNS, scope_keys=("device",), needs=("memory_events",))
def memory_timeline(ctx: FactContext) -> pd.DataFrame:
    """Device memory in use per GPU after every allocation and free of device memory (the whole trace:
    a level depends on everything allocated before the window)."""
    m = ctx.trace.memory
    empty = _empty(TIMELINE_COLUMNS, ("op", "measure", "nvtx_path"))
    empty["matched"] = empty["matched"].astype(bool)
    if not len(m):
        return empty
    kind = text(m["mem_kind"]).to_numpy(dtype=object)
    device = m["device"].to_numpy(dtype=np.int64)
    keep = np.isin(kind, list(DEVICE_MEMORY_KINDS)) & (device >= 0)
    if not keep.any():
        return empty
    m = m.loc[keep]
    parts = [_device_levels(g) for _d, g in m.groupby(m["device"].to_numpy(dtype=np.int64), sort=True)]
    return pd.concat(parts, ignore_index=True)


def _device_levels(m: pd.DataFrame) -> pd.DataFrame:
    """The level after each event of one GPU (events of the allocator when the trace has them)."""
    source = text(m["source"]).to_numpy(dtype=object)
    if (source == "allocator").any():
        m = m.loc[source == "allocator"]
    m = m.iloc[np.argsort(m["start"].to_numpy(dtype=np.int64), kind="stable")]
    start = m["start"].to_numpy(dtype=np.int64)
    is_free = text(m["op"]).to_numpy(dtype=object) == "free"
    size = m["bytes"].to_numpy(dtype=np.int64)
    delta = np.where(is_free, -size, size)
    pid = m["pid"].to_numpy(dtype=np.int64)
    allocated = m["total_allocated"].to_numpy(dtype=np.int64)
    reserved = m["total_reserved"].to_numpy(dtype=np.int64)
    allocator = text(m["source"]).iloc[0] == "allocator"
    one_process = len(np.unique(pid)) <= 1
    if allocator and one_process and (allocated >= 0).any():
        level = _fill_totals(allocated, delta)
    else:  # CUDA allocations, or allocator totals of several processes: the signed sizes summed
        level = np.cumsum(delta)
        lowest = int(level.min()) if len(level) else 0
        if lowest < 0:
            level -= lowest  # memory freed that the capture never saw allocated
        if not allocator:
            allocated = np.full(len(level), -1, dtype=np.int64)
            reserved = np.full(len(level), -1, dtype=np.int64)
    address = m["address"].to_numpy(dtype=np.int64)
    freed_at, matched = _pair_by_address(address, start, is_free)
    return pd.DataFrame({
        "device": m["device"].to_numpy(dtype=np.int64), "start": start,
        "op": np.where(is_free, "free", "alloc").astype(object), "delta": delta, "bytes": level,
        "allocated": allocated, "reserved": reserved,
        "measure": "allocated" if allocator else "reserved", "address": address,
        "freed_at": freed_at, "matched": matched, "pid": pid,
        "nvtx_path": _generic(text(m["nvtx_path"]).to_numpy(dtype=object)),
    })


def _fill_totals(total: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """The allocator's running total, with events that lack it (-1) filled from the nearest earlier
    event that has it plus the sizes since (the nearest later one for leading events)."""
    if (total >= 0).all():
        return total.copy()
    running = np.cumsum(delta)
    offset = pd.Series(np.where(total >= 0, total - running, np.nan)).ffill().bfill().to_numpy()
    return (running + offset).astype(np.int64)


def _generic(paths: np.ndarray) -> np.ndarray:
    uniq, inv = np.unique(paths.astype(str), return_inverse=True)
    return np.array([generic_path(p) for p in uniq], dtype=object)[inv.reshape(-1)] if len(paths) else paths


def _pair_by_address(address: np.ndarray, start: np.ndarray, is_free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per allocation, when its address is next freed (-1 never); per free, whether the event before it
    at that address allocated it. Events without an address pair with nothing."""
    n = len(address)
    freed_at = np.full(n, -1, dtype=np.int64)
    matched = np.zeros(n, dtype=bool)
    if n < 2:
        return freed_at, matched
    order = np.lexsort((np.arange(n), start, address))
    a, f = address[order], is_free[order]
    same = (a[1:] == a[:-1]) & (a[1:] >= 0)
    pair = same & ~f[:-1] & f[1:]  # an allocation followed by a free of its address
    first = order[:-1][pair]
    second = order[1:][pair]
    freed_at[first] = start[second]
    matched[second] = True
    return freed_at, matched


def _level_at(times: np.ndarray, level: np.ndarray, before: int, t: np.ndarray) -> np.ndarray:
    """The level at each time in ``t`` (after every event at or before it)."""
    pos = np.searchsorted(times, t, side="right") - 1
    return np.where(pos >= 0, level[np.clip(pos, 0, None)], before)


@fact("memory_steps", columns=STEP_COLUMNS, requires=("memory_timeline",), scope_keys=("device", "step"),
      needs=("memory_events",))
def memory_steps(ctx: FactContext) -> pd.DataFrame:
    """Device memory at the start, end and peak of each window step, per GPU, with the NVTX range of
    the event that set the peak."""
    tl = ctx.get("memory_timeline")
    spans = ctx.window.steps
    empty = _empty(STEP_COLUMNS, ("step", "peak_range", "measure"))
    if not len(tl) or spans is None or not len(spans.starts):
        return empty
    s_start = np.asarray(spans.starts, dtype=np.int64)
    s_end = np.asarray(spans.ends, dtype=np.int64)
    names = np.asarray(spans.names, dtype=object)
    rows = []
    for device, g in tl.groupby("device", sort=True):
        times = g["start"].to_numpy(dtype=np.int64)
        level = g["bytes"].to_numpy(dtype=np.int64)
        paths = g["nvtx_path"].to_numpy(dtype=object)
        before = int(level[0] - g["delta"].iloc[0])
        at_start = _level_at(times, level, before, s_start)
        at_end = _level_at(times, level, before, s_end)
        lo = np.searchsorted(times, s_start, side="right")
        hi = np.searchsorted(times, s_end, side="right")
        peak = at_start.copy()
        peak_time = s_start.copy()
        peak_range = np.full(len(s_start), "", dtype=object)
        for i in range(len(s_start)):  # one slice per step
            if hi[i] > lo[i]:
                j = lo[i] + int(np.argmax(level[lo[i]:hi[i]]))
                if level[j] > peak[i]:
                    peak[i], peak_time[i], peak_range[i] = level[j], times[j], paths[j]
        rows.append(pd.DataFrame({
            "device": int(device), "step": names, "index": np.arange(len(s_start), dtype=np.int64),
            "start": s_start, "end": s_end, "start_bytes": at_start, "end_bytes": at_end, "peak_bytes": peak,
            "peak_time": peak_time, "peak_range": peak_range, "growth": at_end - at_start,
            "measure": str(g["measure"].iloc[0]),
        }))
    return pd.concat(rows, ignore_index=True)[list(STEP_COLUMNS)]


@fact("memory_ranges", columns=RANGE_COLUMNS, requires=("memory_timeline", "memory_steps"),
      scope_keys=("device", "nvtx_path"), needs=("memory_events",))
def memory_ranges(ctx: FactContext) -> pd.DataFrame:
    """Per GPU and NVTX range (step numbers as N) inside the window: bytes allocated, freed and kept,
    the highest level an event of the range reached, and how many steps' peaks it set (which phase
    sets the peak)."""
    tl = ctx.get("memory_timeline")
    empty = _empty(RANGE_COLUMNS, ("nvtx_path",))
    if not len(tl):
        return empty
    w = ctx.window
    t = tl["start"].to_numpy(dtype=np.int64)
    inside = tl.loc[(t >= w.start_ns) & (t < w.end_ns)]
    if not len(inside):
        return empty
    delta = inside["delta"].to_numpy(dtype=np.int64)
    freed = inside["freed_at"].to_numpy(dtype=np.int64)
    kept = (delta > 0) & ((freed < 0) | (freed >= w.end_ns))
    frame = pd.DataFrame({
        "device": inside["device"].to_numpy(dtype=np.int64), "nvtx_path": inside["nvtx_path"].to_numpy(dtype=object),
        "alloc": np.where(delta > 0, delta, 0), "free": np.where(delta < 0, -delta, 0),
        "kept": np.where(kept, delta, 0), "level": inside["bytes"].to_numpy(dtype=np.int64),
    })
    out = frame.groupby(["device", "nvtx_path"], sort=True).agg(
        events=("alloc", "size"), alloc_bytes=("alloc", "sum"), free_bytes=("free", "sum"),
        kept_bytes=("kept", "sum"), peak_bytes=("level", "max")).reset_index()
    out["net_bytes"] = out["alloc_bytes"] - out["free_bytes"]
    steps = ctx.get("memory_steps")
    counts = steps.loc[steps["peak_range"] != ""].groupby(["device", "peak_range"]).size() if len(steps) else None
    out["peak_steps"] = [int(counts.get((d, p), 0)) if counts is not None else 0
                         for d, p in zip(out["device"], out["nvtx_path"])]
    return out[list(RANGE_COLUMNS)].astype({c: "int64" for c in RANGE_COLUMNS if c != "nvtx_path"})


def _step_after(last: str, ahead: float) -> str:
    """``step_22`` and 1465 steps ahead -> ``step_1487``; ``""`` when ``last`` ends in no number or
    nothing is ahead."""
    m = re.match(r"^(.*?)(\d+)$", last)
    if not m or ahead < 0:
        return ""
    return f"{m.group(1)}{int(m.group(2)) + int(ahead)}"


def _deepest_majority(paths: list[str], sizes: object) -> tuple[str, float]:
    """The deepest NVTX range (itself and the ranges inside it) holding at least half of ``sizes``, with
    its share: ``step_N/forward`` when its ops split the bytes (``aten::gelu`` 47%, ``aten::addmm`` 47%);
    ``("", 0.0)`` when there are none."""
    weights = np.asarray(sizes, dtype=np.float64)
    total = float(weights.sum()) if len(weights) else 0.0
    if total <= 0:
        return "", 0.0
    under: dict[str, float] = {}
    for path, b in zip(paths, weights.tolist()):
        parts = path.split("/") if path else [""]
        for i in range(1, len(parts) + 1):
            key = "/".join(parts[:i])
            under[key] = under.get(key, 0.0) + b
    best = max((p for p, b in under.items() if b >= total / 2),
               key=lambda p: (p.count("/") if p else -1, under[p], p), default="")
    return best, (under[best] / total if best in under else 0.0)


def _held_at(g: pd.DataFrame, t: int) -> tuple[str, float]:
    """The NVTX range whose allocations hold most of one GPU's memory at time ``t`` (allocated at or
    before it, not yet freed), with its share of the memory the trace saw allocated and still held."""
    start = g["start"].to_numpy(dtype=np.int64)
    delta = g["delta"].to_numpy(dtype=np.int64)
    freed = g["freed_at"].to_numpy(dtype=np.int64)
    alive = (delta > 0) & (start <= t) & ((freed < 0) | (freed > t))
    if not alive.any():
        return "", 0.0
    return _deepest_majority(g["nvtx_path"].to_numpy(dtype=object)[alive].astype(str).tolist(), delta[alive])


def theil_sen(y: np.ndarray, max_points: int = 400) -> tuple[float, float, float]:
    """Slope of ``y`` against its position: the median of the slopes between every two points, with
    their 25th and 75th percentiles (a long series is thinned evenly to ``max_points`` first)."""
    n = len(y)
    if n < 2:
        return 0.0, 0.0, 0.0
    x = np.arange(n, dtype=np.float64)
    yf = y.astype(np.float64)
    if n > max_points:
        pick = np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))
        x, yf = x[pick], yf[pick]
    i, j = np.triu_indices(len(x), k=1)
    slopes = (yf[j] - yf[i]) / (x[j] - x[i])
    lo, mid, hi = np.percentile(slopes, [25, 50, 75])
    return float(mid), float(lo), float(hi)


@fact("memory_growth", columns=GROWTH_COLUMNS, requires=("memory_timeline", "memory_steps", "memory_ranges"),
      scope_keys=("device",), needs=("memory_events",))
def memory_growth(ctx: FactContext) -> pd.DataFrame:
    """One row per GPU: the peak inside the window (step and NVTX range that set it) against the GPU's
    capacity, and the growth per step across the window's steps (Theil-Sen slope of the step-end level,
    its spread, the range that allocated what stays, steps until the GPU fills)."""
    tl = ctx.get("memory_timeline")
    empty = _empty(GROWTH_COLUMNS, ("measure", "first_step", "last_step", "peak_step", "peak_range", "growth_range",
                                    "fill_step", "peak_held_in"),
                   ("bytes_per_step", "slope_low", "slope_high", "growing_steps", "growth_range_share", "peak_share",
                    "steps_to_fill", "peak_held_share"))
    if not len(tl):
        return empty
    steps = ctx.get("memory_steps")
    ranges = ctx.get("memory_ranges")
    gpus = ctx.trace.gpus
    capacity = {int(d): int(b) for d, b in zip(gpus["device"], gpus["memory_bytes"])} if len(gpus) else {}
    w = ctx.window
    rows = []
    for device, g in tl.groupby("device", sort=True):
        device = int(device)
        times = g["start"].to_numpy(dtype=np.int64)
        level = g["bytes"].to_numpy(dtype=np.int64)
        before = int(level[0] - g["delta"].iloc[0])
        at_window_start = int(_level_at(times, level, before, np.array([w.start_ns]))[0])
        inside = (times >= w.start_ns) & (times < w.end_ns)
        peak, peak_range, peak_time = at_window_start, "", int(w.start_ns)
        if inside.any():
            j = int(np.flatnonzero(inside)[np.argmax(level[inside])])
            if level[j] > peak:
                peak, peak_range, peak_time = int(level[j]), str(g["nvtx_path"].iloc[j]), int(times[j])
        s = steps.loc[steps["device"] == device] if len(steps) else steps
        n = len(s)
        row: dict[str, object] = {
            "device": device, "measure": str(g["measure"].iloc[0]), "steps": n,
            "first_step": str(s["step"].iloc[0]) if n else "", "last_step": str(s["step"].iloc[-1]) if n else "",
            "peak_bytes": peak, "peak_step": "", "peak_range": peak_range,
        }
        slope = lo = hi = growing = 0.0
        start_b = end_b = at_window_start
        if n:
            end = s["end_bytes"].to_numpy(dtype=np.int64)
            slope, lo, hi = theil_sen(end)
            growing = float((np.diff(end) > 0).mean()) if n > 1 else 0.0
            start_b, end_b = int(end[0]), int(end[-1])
            k = int(np.argmax(s["peak_bytes"].to_numpy(dtype=np.int64)))
            if int(s["peak_bytes"].iloc[k]) >= peak:
                row.update(peak_bytes=int(s["peak_bytes"].iloc[k]), peak_range=str(s["peak_range"].iloc[k]))
                peak_time = int(s["peak_time"].iloc[k])
            row["peak_step"] = str(s["step"].iloc[k])
        r = ranges.loc[ranges["device"] == device] if len(ranges) else ranges
        kept = r.loc[r["kept_bytes"].to_numpy() > 0] if len(r) else r
        kept_path, kept_share = _deepest_majority(kept["nvtx_path"].astype(str).tolist() if len(kept) else [],
                                                  kept["kept_bytes"].to_numpy(dtype=np.float64) if len(kept) else [])
        held_path, held_share = _held_at(g, peak_time)
        cap = capacity.get(device, 0)
        peak_b = int(row["peak_bytes"])  # type: ignore[call-overload]
        if before * 2 >= peak_b:  # most of the peak was allocated before the capture: no range of it holds that
            held_path, held_share = "", 0.0
        to_fill = -1.0
        if cap > 0 and slope > 0:
            to_fill = float(np.ceil(max(cap - end_b, 0) / slope))
        row.update(
            fill_step=_step_after(str(row["last_step"]), to_fill),
            bytes_per_step=slope, slope_low=lo, slope_high=hi, growing_steps=growing, start_bytes=start_b,
            end_bytes=end_b, total_growth=end_b - start_b,
            growth_range=kept_path, growth_range_share=kept_share,
            peak_held_in=held_path, peak_held_share=held_share,
            capacity_bytes=cap, peak_share=peak_b / cap if cap > 0 else 0.0,
            headroom_bytes=cap - peak_b if cap > 0 else -1, steps_to_fill=to_fill,
            unmatched_frees=int(((g["op"] == "free") & ~g["matched"].astype(bool)).sum()),
            processes=int(g["pid"].nunique()), held_before_bytes=before,
        )
        rows.append(row)
    return pd.DataFrame(rows)[list(GROWTH_COLUMNS)]
