"""CUDA API facts: host-device synchronization, memory allocation, copies and kernel launches.

API names are matched after the loader's normalization (version suffix such as ``_v3020`` stripped;
this module strips it again defensively). Window: calls and copies whose start lies in the window.
"""
from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from analyzer.arrays import sorted_distinct
from analyzer.loading.columns import empty_typed

from analyzer.facts._util import (
    column,
    factorize_objects,
    first_positions,
    map_distinct,
    starts_in_window,
    text,
    text_codes,
)
from analyzer.facts.stacks import attach_locations
from analyzer.loading.api_names import (  # noqa: F401 (re-exported)
    ALLOC_APIS, HIP_TO_CUDA, LAUNCH_APIS, SYNC_APIS, cuda_equivalent)
from analyzer.facts.registry import FactContext, FactStore, fact

_VERSION = re.compile(r"_v\d+$")
_PER_THREAD = re.compile(r"_pt(sz|ds)$")

_NON_BLOCKING_KINDS = {"stream_wait_event"}
# synchronous copies/memsets: cudaMemcpy, cudaMemcpy2D, cudaMemcpyToSymbol, cuMemcpyDtoH, ... (not *Async)
_SYNC_MEMCPY = re.compile(r"^(?:cudaMemcpy|cuMemcpy)(?!.*Async)")
_SYNC_MEMSET = re.compile(r"^(?:cudaMemset|cuMemset)(?!.*Async)")


TINY_KERNEL_NS = 10_000


def base_api_names(names: pd.Series) -> pd.Series:
    """API names without a ``_v1234`` version suffix (and ``_ptsz``/``_ptds`` per-thread variants)."""
    return pd.Series(map_distinct(names, _base_name), index=names.index, dtype=object)


def _base_name(name: str) -> str:
    return cuda_equivalent(_PER_THREAD.sub("", _VERSION.sub("", name)))


def api_base_codes(store: FactStore) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, base)`` for ``store.trace.api["name"]``: a code per API row and the base name (see
    :func:`base_api_names`) per distinct name, so ``base[codes]`` is ``base_api_names(api["name"])``.

    Several facts and the scalars classify API names; factorizing two million names once per trace
    instead of twice per fact saved about a second on a million-kernel trace."""

    def compute() -> tuple[np.ndarray, np.ndarray]:
        # the column's own dictionary codes when it has them (no per-row strings); missing -> ""
        codes, labels = text_codes(store.trace.api["name"])
        base = np.empty(len(labels) + 1, dtype=object)  # + the missing-value slot, like map_distinct
        base[:] = [_base_name(u) for u in labels] + [None]
        return codes, base

    return store.memo("api_base_codes", compute)


def is_launch_api(store: FactStore) -> np.ndarray:
    """Per row of ``store.trace.api``: its base name is a kernel launch API (:data:`LAUNCH_APIS`)."""
    codes, base = api_base_codes(store)
    return np.array([b in LAUNCH_APIS for b in base], dtype=bool)[codes]


def _api_rows(ctx: FactContext, classify: Callable[[str], object]) -> tuple[pd.DataFrame, np.ndarray]:
    """API rows in the window for which ``classify(base name)`` is not None, with the base name in
    ``name``, and the classification per returned row. Names are classified once per distinct name."""
    api = ctx.trace.api
    if api.empty:
        return api.copy(), np.empty(0, dtype=object)
    codes, base_u = api_base_codes(ctx.store)
    label = np.array([classify(b) for b in base_u[:-1]] + [None], dtype=object)  # per distinct name
    st = api["start"].to_numpy()
    keep = pd.notna(label)[codes] & (st >= ctx.window.start_ns) & (st < ctx.window.end_ns)
    out = api.loc[keep].reset_index(drop=True)
    kept = codes[keep]
    out["name"] = base_u[kept]
    return out, label[kept]


def sync_kind(name: str) -> str | None:
    if name in SYNC_APIS:
        return SYNC_APIS[name]
    if _SYNC_MEMCPY.match(name):
        return "memcpy"
    if _SYNC_MEMSET.match(name):
        return "memset"
    if ("Memcpy" in name or "MemcpyAsync" in name) and "Async" in name:
        return "async_copy"  # becomes pageable_async_memcpy when its copy touches pageable memory
    return None


_LOCATION_DOC = "where in the program the call comes from ('' without call stacks; analyzer.facts.stacks)"

_GPU_WAIT_DOC = ("GPU idle time the timeline breakdown charged to this call as host_sync (ns): the wait "
                 "inside it, the return from it, the refill before its return (0 for a call that does "
                 "not block)")

_API_ROW = {
    "start": "call start (ns)", "end": "call end (ns)", "duration": "call duration (ns)",
    "name": "API name (version suffix stripped)", "pid": "process", "tid": "thread",
    "correlation_id": "correlation id", "nvtx_id": "innermost NVTX range open at the call (-1)",
    "nvtx_range": "its text", "nvtx_path": "its path",
}


@fact(
    "sync_calls",
    columns=_API_ROW | {
        "sync_kind": "device | stream | event | stream_wait_event | memcpy | memset | pageable_async_memcpy",
        "blocking": "True when the host thread waits for the device",
        "direction": "copy direction for memcpy kinds ('' otherwise)",
        "bytes": "copy/memset size (B, -1 unknown)",
        "code_location": _LOCATION_DOC,
        "gpu_wait_ns": _GPU_WAIT_DOC,
    },
    scope_keys=("nvtx_path", "name", "tid"),
    needs=("api_calls",),
    requires=("timeline_segments",),
)
def sync_calls(ctx: FactContext) -> pd.DataFrame:
    """CUDA API calls in the window that make the host wait for the device: explicit synchronization,
    synchronous copies/memsets, and asynchronous copies that pageable memory makes synchronous."""
    from analyzer.facts.breakdown_sync import charged_ns

    rows = all_sync_call_rows(ctx.store)
    st = rows["start"].to_numpy()
    rows = rows.loc[(st >= ctx.window.start_ns) & (st < ctx.window.end_ns)].reset_index(drop=True)
    rows = attach_locations(rows, ctx.store)
    rows["gpu_wait_ns"] = charged_ns(ctx.get("timeline_segments"), rows, rows["blocking"].to_numpy(dtype=bool))
    return rows


def all_sync_call_rows(store: FactStore) -> pd.DataFrame:
    """:func:`sync_call_rows` of the whole trace, once per store (the ``sync_calls`` fact takes those
    in its window, the phase index the blocking ones). Each row depends on its own call and copy
    only, so the window's rows are these rows filtered by start. Callers must not modify it."""
    def compute() -> pd.DataFrame:
        codes, base = api_base_codes(store)
        return sync_call_rows(store.trace.api, store.trace.memcpy, codes, base)

    return store.memo("all_sync_call_rows", compute)


def sync_call_rows(
    api: pd.DataFrame,
    memcpy: pd.DataFrame,
    codes: np.ndarray | None = None,
    base: np.ndarray | None = None,
    *,
    window: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """The rows of the ``sync_calls`` fact from an API and a memcpy frame: calls whose start lies in
    ``window`` (all when ``None``) and that synchronize host and device. ``codes``/``base`` are
    :func:`api_base_codes` of ``api`` (computed here when not given). Shared by the fact and the
    phase index (which counts the blocking calls inside each NVTX range)."""
    if api.empty:
        rows = api.iloc[0:0].copy()
        labels = np.empty(0, dtype=object)
    else:
        if codes is None or base is None:
            codes, uniques = factorize_objects(text(api["name"]))
            base = np.array([_base_name(u) for u in uniques] + [None], dtype=object)
        label = np.array([sync_kind(b) for b in base[:-1]] + [None], dtype=object)  # per distinct name
        keep = pd.notna(label)[codes]
        if window is not None:
            st = api["start"].to_numpy()
            keep &= (st >= window[0]) & (st < window[1])
        # only the columns read below (the call's row and the copy join's key), not every API column
        rows = api.loc[keep, [c for c in api.columns if c in _API_ROW or c == "correlation_id"]].reset_index(drop=True)
        kept = codes[keep]
        rows["name"] = base[kept]
        labels = label[kept]
    api = rows
    kind = pd.Series(labels, index=api.index, dtype=object)
    # async copies touching pageable host memory are staged synchronously by the driver
    mc = memcpy
    direction = pd.Series("", index=api.index, dtype=object)
    nbytes = pd.Series(-1, index=api.index, dtype=np.int64)
    if len(mc) and len(api) and api["correlation_id"].dtype.kind in "iu":
        # each call's first copy with its correlation id (a sorted or hashed lookup of the ids, not a
        # frame merge): the left join on the copies without duplicate ids below, value for value
        mc_corr = mc["correlation_id"].to_numpy(dtype=np.int64)
        pos = first_positions(mc_corr, api["correlation_id"].to_numpy(dtype=np.int64))
        at = np.maximum(pos, 0)
        mc_dir = text(column(mc, "direction", "")).to_numpy()
        has = (pos >= 0) & pd.notna(mc_dir[at])
        direction[has] = mc_dir[at[has]]
        nbytes[has] = column(mc, "bytes", -1).fillna(-1).to_numpy(dtype=np.int64)[at[has]]
        mc_pageable = ((text(column(mc, "src_kind", "")) == "pageable")
                       | (text(column(mc, "dst_kind", "")) == "pageable")).to_numpy()
        pageable = has & mc_pageable[at]
        kind = kind.where(~(pageable & (kind == "async_copy").to_numpy()), "pageable_async_memcpy")
    elif len(mc) and len(api):
        mc_info = pd.DataFrame({
            "correlation_id": mc["correlation_id"].to_numpy(dtype=np.int64),
            "_dir": text(column(mc, "direction", "")).to_numpy(),
            "_bytes": column(mc, "bytes", -1).fillna(-1).to_numpy(dtype=np.int64),
            "_pageable": ((text(column(mc, "src_kind", "")) == "pageable")
                          | (text(column(mc, "dst_kind", "")) == "pageable")).to_numpy(),
        }).drop_duplicates("correlation_id")
        joined = api[["correlation_id"]].merge(mc_info, on="correlation_id", how="left")
        has = joined["_dir"].notna().to_numpy()
        direction[has] = joined["_dir"].to_numpy()[has]
        nbytes[has] = joined["_bytes"].to_numpy()[has].astype(np.int64)
        pageable = has & joined["_pageable"].fillna(False).to_numpy(dtype=bool)
        kind = kind.where(~(pageable & (kind == "async_copy").to_numpy()), "pageable_async_memcpy")
    kind = kind.where(kind != "async_copy", None)
    keep = kind.notna().to_numpy()
    out = api.loc[keep, [c for c in _API_ROW if c in api.columns]].copy()
    for c in _API_ROW:
        if c not in out.columns:
            out[c] = "" if c in ("nvtx_range", "nvtx_path") else -1
    out["sync_kind"] = kind[keep].astype(object)
    out["blocking"] = ~out["sync_kind"].isin(_NON_BLOCKING_KINDS)
    out["direction"] = direction[keep]
    out["bytes"] = nbytes[keep]
    return out.reset_index(drop=True)


@fact(
    "alloc_calls",
    columns=_API_ROW | {
        "op": "alloc | free",
        "memory": "device | pinned | managed | pool | virtual",
        "bytes": "size (B) when the export records it, else -1",
        "step": "index of the window's step (NVTX step instance or period of the repeating GPU work, see "
        "the window) the call starts in, -1 when outside every step or the window has no steps",
        "tenth": "which tenth of the window the call starts in (0..9)",
        "code_location": _LOCATION_DOC,
        "gpu_wait_ns": _GPU_WAIT_DOC,
    },
    scope_keys=("nvtx_path", "name", "tid"),
    needs=("api_calls",),
    requires=("timeline_segments",),
)
def alloc_calls(ctx: FactContext) -> pd.DataFrame:
    """CUDA API calls in the window that allocate or free device, pinned or managed memory, with the
    window step they fall in (so rules can tell allocations that recur every step from a one-off)."""
    api, info = _api_rows(ctx, ALLOC_APIS.get)
    out = api.loc[:, [c for c in _API_ROW if c in api.columns]].copy()
    for c in _API_ROW:
        if c not in out.columns:
            out[c] = "" if c in ("nvtx_range", "nvtx_path") else -1
    out["op"] = [i[0] for i in info]  # matched rows only
    out["memory"] = [i[1] for i in info]
    out["bytes"] = column(api, "bytes", -1).fillna(-1).to_numpy(dtype=np.int64)
    out = out.reset_index(drop=True)
    starts = out["start"].to_numpy(dtype=np.int64) if len(out) else np.zeros(0, np.int64)
    spans = ctx.window.steps
    out["step"] = step_index(starts, tuple(zip(spans.starts, spans.ends)) if spans else ())
    w = ctx.window
    rel = (starts.astype(np.float64) - float(w.start_ns)) / float(max(w.duration_ns, 1))
    out["tenth"] = np.clip(np.floor(rel * 10), 0, 9).astype(np.int64)
    out = attach_locations(out, ctx.store)
    from analyzer.facts.breakdown_sync import charged_ns

    out["gpu_wait_ns"] = charged_ns(ctx.get("timeline_segments"), out)
    return out


def step_index(times: np.ndarray, steps: tuple[tuple[int, int], ...]) -> np.ndarray:
    """For each time, the index of the (start, end) step containing it, -1 when none does (``steps``
    as ``Window.steps`` gives them; overlapping steps count for the later one)."""
    if not len(steps) or not len(times):
        return np.full(len(times), -1, dtype=np.int64)
    bounds = np.asarray(steps, dtype=np.int64)
    order = np.argsort(bounds[:, 0], kind="stable")
    bounds = bounds[order]
    idx = np.searchsorted(bounds[:, 0], times, side="right") - 1
    inside = (idx >= 0) & (times < bounds[np.clip(idx, 0, None), 1])
    return np.where(inside, order[np.clip(idx, 0, None)], -1).astype(np.int64)


_COPY_EXTRA = {
    "throughput": "bytes / duration (B/s; NaN for zero-length copies)",
    "pageable": "True when the host side is pageable memory",
    "is_async": "True when launched by an *Async API",
    "pinned_rate_gbps": "rate a pinned copy reaches on this copy's GPU, GB/s (= bytes/ns): measured on the "
    "trace's own large pinned copies, else the GPU table, else an assumed PCIe 3 x16 link (see the hardware fact)",
    "pinned_rate_source": "where pinned_rate_gbps came from, as a message prints it",
    "code_location": "where in the program the launching call comes from ('' without call stacks)",
}


@fact(
    "copy_throughput",
    columns={c: f"memcpy column {c}" for c in (
        "start", "end", "duration", "device", "stream", "bytes", "direction", "src_kind", "dst_kind",
        "api_name", "nvtx_path")} | _COPY_EXTRA,
    scope_keys=("device", "stream", "nvtx_path", "direction"),
    column_needs={c: ("memcpy_memory_kind",) for c in ("src_kind", "dst_kind", "pageable")},
)
def copy_throughput(ctx: FactContext) -> pd.DataFrame:
    """Memcpy operations starting in the window, with their achieved throughput."""
    mc = starts_in_window(ctx.trace.memcpy, ctx.window).reset_index(drop=True)
    dur = mc["duration"].to_numpy(dtype=np.float64) if len(mc) else np.empty(0)
    b = mc["bytes"].to_numpy(dtype=np.float64) if len(mc) else np.empty(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mc["throughput"] = np.where(dur > 0, b / dur * 1e9, np.nan)
    mc["pageable"] = ((text(column(mc, "src_kind", "")) == "pageable")
                      | (text(column(mc, "dst_kind", "")) == "pageable")).to_numpy(dtype=bool)
    mc["is_async"] = map_distinct(column(mc, "api_name", ""), lambda n: "Async" in n).astype(bool)
    for c in ("api_name", "nvtx_path"):
        if c not in mc.columns:
            mc[c] = ""
    from analyzer.facts.hardware import device_hardware
    from analyzer.hardware import pinned_copy_rate

    hw = device_hardware(ctx.store)
    devices = mc["device"].to_numpy() if len(mc) else np.zeros(0, np.int64)
    # per distinct device, then spread to the copies
    dev_codes, dev_uniq = pd.factorize(devices)
    rates = [pinned_copy_rate(hw.get(int(d))) for d in dev_uniq]
    mc["pinned_rate_gbps"] = np.array([(r.value or 0.0) / 1e9 for r in rates], dtype=np.float64)[dev_codes]
    mc["pinned_rate_source"] = pd.Series(np.array([r.detail for r in rates] + [None], dtype=object)[dev_codes],
                                         index=mc.index, dtype=object)
    if "pid" in mc.columns and "api_start" in mc.columns:
        return attach_locations(mc, ctx.store, start="api_start")
    mc["code_location"] = ""
    return mc


@fact(
    "memcpy_summary",
    columns={
        "direction": "H2D | D2H | D2D | P2P | H2H | other",
        "src_kind": "source memory kind", "dst_kind": "destination memory kind",
        "count": "copies", "bytes": "total bytes", "total_ns": "total copy time (ns)",
        "mean_bytes": "mean copy size (B)", "throughput": "bytes / total time (B/s)",
        "sync_count": "copies issued by a synchronous (non-Async) API",
    },
    requires=("copy_throughput",),
    scope_keys=("direction",),
    column_needs={c: ("memcpy_memory_kind",) for c in ("src_kind", "dst_kind")},
)
def memcpy_summary(ctx: FactContext) -> pd.DataFrame:
    """Copies in the window per direction and memory kinds."""
    mc = ctx.get("copy_throughput")
    cols = ["direction", "src_kind", "dst_kind", "count", "bytes", "total_ns", "mean_bytes", "throughput",
            "sync_count"]
    if mc.empty:
        return empty_typed((c, object if c in cols[:3] else "float64") for c in cols)
    mc = mc.assign(_sync=~mc["is_async"] & (mc["api_name"] != ""))
    out = mc.groupby(["direction", "src_kind", "dst_kind"], sort=False).agg(
        count=("duration", "size"), bytes=("bytes", "sum"), total_ns=("duration", "sum"),
        mean_bytes=("bytes", "mean"), sync_count=("_sync", "sum"),
    ).reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["throughput"] = np.where(out["total_ns"] > 0, out["bytes"] / out["total_ns"] * 1e9, np.nan)
    return out.sort_values("total_ns", ascending=False, ignore_index=True)[cols]


@fact(
    "launch_stats",
    columns={
        "device": "GPU device id",
        "kernel_count": "kernels starting in the window",
        "kernel_ns": "summed kernel duration (ns)",
        "median_ns": "median kernel duration (ns)",
        "mean_ns": "mean kernel duration (ns)",
        "tiny_count": f"kernels shorter than {TINY_KERNEL_NS // 1000} us",
        "tiny_share": "tiny_count / kernel_count",
        "tiny_time_share": "time of tiny kernels / kernel_ns",
        "launch_count": "launch API calls for these kernels (joined by correlation id)",
        "launch_api_ns": "summed launch API duration (ns)",
        "launch_api_median_ns": "median launch API duration (ns)",
        "launch_api_mean_ns": "mean launch API duration (ns)",
        "launch_delay_median_ns": "median time from launch API start to kernel start (ns)",
        "launch_rate": "kernels per second of window",
        "window_ns": "window length (ns)",
    },
    scope_keys=("device",),
    column_needs={c: ("api_calls", "launch_correlation") for c in (
        "launch_count", "launch_api_ns", "launch_api_median_ns", "launch_api_mean_ns", "launch_delay_median_ns")},
)
def launch_stats(ctx: FactContext) -> pd.DataFrame:
    """Per device: how many kernels, how short, and what launching them cost on the host."""
    w = ctx.window
    k = starts_in_window(ctx.trace.kernels, w, ["start", "duration", "device", "correlation_id", "pid",
                                                 "api_start", "in_graph"])
    cols = list(launch_stats_columns())
    if k.empty:
        return empty_typed((c, "float64") for c in cols)
    api = ctx.trace.api
    # per-kernel arrays, each made when needed (the join keys are freed once joined: a frame of every
    # column in int64 held 0.5 GB more at ten million kernels)
    api_start = column(k, "api_start", -1).fillna(-1).to_numpy(dtype=np.int64)
    delay = once_per_graph_launch(k, np.where(api_start >= 0, k["start"].to_numpy(dtype=np.int64) - api_start,
                                              np.nan))
    del api_start
    if len(api):
        api_ns = _launch_api_ns(api, is_launch_api(ctx.store),
                                column(k, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64),
                                column(k, "pid", -1).fillna(-1).to_numpy(dtype=np.int64))
    else:
        api_ns = np.full(len(k), np.nan)
    api_ns = once_per_graph_launch(k, api_ns)
    duration = k["duration"].to_numpy(dtype=np.int64)
    tiny = duration < TINY_KERNEL_NS
    device = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    out = _device_stats(device, duration, tiny, api_ns, delay)
    if out is None:  # sums beyond float64's exact integers: the groupby's own (compensated) sums
        joined = pd.DataFrame({"device": device, "duration": duration, "tiny": tiny,
                               "tiny_ns": np.where(tiny, duration, 0), "delay": delay, "api_ns": api_ns})
        out = joined.groupby("device", sort=True).agg(
            kernel_count=("duration", "size"), kernel_ns=("duration", "sum"), median_ns=("duration", "median"),
            mean_ns=("duration", "mean"), tiny_count=("tiny", "sum"), tiny_ns=("tiny_ns", "sum"),
            launch_count=("api_ns", "count"), launch_api_ns=("api_ns", "sum"),
            launch_api_median_ns=("api_ns", "median"), launch_api_mean_ns=("api_ns", "mean"),
            launch_delay_median_ns=("delay", "median"),
        ).reset_index()
    out["tiny_share"] = out["tiny_count"] / out["kernel_count"]
    out["tiny_time_share"] = np.where(out["kernel_ns"] > 0, out["tiny_ns"] / out["kernel_ns"].clip(lower=1), 0)
    out["window_ns"] = w.duration_ns
    out["launch_rate"] = out["kernel_count"] / (w.duration_ns / 1e9) if w.duration_ns > 0 else np.nan
    return out[cols]


def once_per_graph_launch(k: pd.DataFrame, api_ns: np.ndarray) -> np.ndarray:
    """``api_ns`` (a value per kernel from its launch call: the call's duration, the delay to the kernel)
    with a CUDA graph launch counted once: the kernels one ``cudaGraphLaunch`` replays share its
    correlation id, so a plain join charges the call to each of them; only the replay's first kernel
    keeps it (NaN for the others)."""
    in_graph = column(k, "in_graph", 0)
    if in_graph.hasnans:
        in_graph = in_graph.fillna(0)
    values = in_graph.to_numpy()
    # in its own integer type (no 64-bit copy per kernel); other types as integers, as before
    graph = (values if values.dtype.kind in "iub" else in_graph.to_numpy(dtype=np.int64)) > 0
    if not graph.any():
        return api_ns
    from analyzer.loading.attribution import correlation_key

    rows = np.flatnonzero(graph)
    key = correlation_key(column(k, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)[rows] & 0xFFFFFF,
                          column(k, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64)[rows])
    _, first = np.unique(key, return_index=True)
    repeat = np.ones(len(rows), dtype=bool)
    repeat[first] = False
    out = api_ns.astype(np.float64, copy=True)
    out[rows[repeat]] = np.nan
    return out


def _device_stats(device: np.ndarray, duration: np.ndarray, tiny: np.ndarray, api_ns: np.ndarray,
                  delay: np.ndarray) -> pd.DataFrame | None:
    """:func:`launch_stats`' per-device aggregates with numpy on each device's rows (one device in
    most traces: no groupby over a million launches). Values equal the groupby's: counts and integer
    sums exact, means as sum / count, medians as the mean of the two middle values (NaN skipped). None
    where a float64 sum could round (beyond 2**52 ns), which the groupby compensates."""
    api_float = api_ns.dtype.kind == "f"
    for values in (duration, api_ns, delay):
        if not len(values):
            continue
        if values.dtype.kind == "f":  # NaN skipped (NaN only where every value is)
            lo, hi = np.fmin.reduce(values), np.fmax.reduce(values)
            if np.isnan(lo):
                continue
        else:
            lo, hi = values.min(), values.max()
        if max(abs(float(lo)), abs(float(hi))) * len(values) < 2.0 ** 52:
            continue  # no sum of these values reaches 2**52: the exact sums below are safe
        finite = values[~np.isnan(values)] if values.dtype.kind == "f" else values
        if len(finite) and float(np.abs(finite).sum(dtype=np.float64)) >= 2.0 ** 52:
            return None
    devices = sorted_distinct(device)
    rows = []
    for d in devices.tolist():
        mine = slice(None) if len(devices) == 1 else device == d
        dur, api, dl = duration[mine], api_ns[mine], delay[mine]
        api = api[~np.isnan(api)] if api_float else api
        dl = dl[~np.isnan(dl)]
        n, kernel_ns = len(dur), int(dur.sum())
        api_sum = float(api.sum()) if api_float else int(api.sum())
        rows.append({
            "device": d,
            "kernel_count": n,
            "kernel_ns": kernel_ns,
            "median_ns": float(np.median(dur)),
            "mean_ns": kernel_ns / n,
            "tiny_count": int(tiny[mine].sum()),
            "tiny_ns": int(dur[tiny[mine]].sum()),
            "launch_count": len(api),
            "launch_api_ns": api_sum,
            "launch_api_median_ns": float(np.median(api)) if len(api) else np.nan,
            "launch_api_mean_ns": api_sum / len(api) if len(api) else np.nan,
            "launch_delay_median_ns": float(np.median(dl)) if len(dl) else np.nan,
        })
    out = pd.DataFrame(rows)
    for c in ("device", "kernel_count", "kernel_ns", "tiny_count", "tiny_ns", "launch_count"):
        out[c] = out[c].astype(np.int64)
    out["launch_api_ns"] = out["launch_api_ns"].astype(np.float64 if api_float else np.int64)
    return out


def _launch_api_ns(api: pd.DataFrame, is_launch: np.ndarray, kcorr: np.ndarray, kpid: np.ndarray) -> np.ndarray:
    """Per kernel (correlation id ``kcorr``, process ``kpid``; -1 unknown): the duration of its launch
    call (the first launch API row of the same process and correlation id; correlation id alone when no
    kernel knows its process), NaN when none: a left merge on those keys, done as one int64 key per row
    and a hash lookup."""
    by_pid = bool((kpid >= 0).any())
    keys = ["pid", "correlation_id"] if by_pid else ["correlation_id"]
    if any(api[c].hasnans for c in keys):
        launches = api.loc[is_launch, ["correlation_id", "pid", "duration"]]
        # a missing key never equals a kernel's (filled) one
        launches = launches.dropna(subset=keys)
    else:  # integer keys, none missing (nsys): the launch rows' three columns gathered, no frame made
        rows = np.flatnonzero(is_launch)
        launches = pd.DataFrame({c: api[c].to_numpy()[rows] for c in ("correlation_id", "pid", "duration")},
                                copy=False)
    lcorr = launches["correlation_id"].to_numpy(np.int64)
    lpid = launches["pid"].fillna(-1).to_numpy(np.int64)
    if by_pid and not all(len(a) == 0 or (a.min() >= -1 and a.max() < 1 << 31) for a in (lpid, kpid)) or not all(
            len(a) == 0 or (a.min() >= -1 and a.max() < 1 << 32) for a in (lcorr, kcorr)):
        # keys that do not pack losslessly (not seen in real exports): the merge itself
        on = ["pid", "correlation_id"] if by_pid else ["correlation_id"]
        right = launches.rename(columns={"duration": "api_ns"})[[*on, "api_ns"]].drop_duplicates(on)
        left = pd.DataFrame({"pid": kpid, "correlation_id": kcorr})[on]
        return left.merge(right, on=on, how="left")["api_ns"].to_numpy(np.float64)
    from analyzer.loading.attribution import correlation_key

    lkey = correlation_key(lpid, lcorr) if by_pid else lcorr
    del lcorr, lpid
    kkey = correlation_key(kpid, kcorr) if by_pid else kcorr
    del kcorr, kpid
    pos = first_positions(lkey, kkey)  # the merge after drop_duplicates keeps the first
    del lkey, kkey
    dur = launches["duration"].to_numpy()
    if len(dur) and (pos >= 0).all():  # every kernel matched: the merge keeps the column's dtype
        return dur[pos]
    return np.where(pos >= 0, dur.astype(np.float64)[np.maximum(pos, 0)] if len(dur) else np.nan, np.nan)


def launch_stats_columns() -> tuple[str, ...]:
    from analyzer.facts.registry import FACTS

    return tuple(FACTS["launch_stats"].columns)
