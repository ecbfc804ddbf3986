"""Phase tables: what each NVTX range costs on the CPU and on the GPU, exactly.

Every GPU op (kernel, memcpy, memset) is attributed by the loader to the NVTX range stack open when
it was launched, on the launching thread or, when that thread had none open, on another thread of the
same process (PyTorch's autograd thread launches the backward kernels while the main thread sits in
``backward``). A range's GPU time is the work launched inside it or inside any range nested in it:
no time-window overlap guessing, so asynchronous kernels that run after the range closed still count
for the range that launched them.

Definitions used by every table here (all times integer ns unless the column says otherwise):

``cpu``        wall time of the range instances (``end - start`` on the thread that pushed them)
``gpu_ns``     sum of durations of kernels + memcpy + memset launched inside (concurrent streams add up)
``kernel_ns``  the same, kernels only
``busy_ns``    per instance, the length of the union of those ops' ``[start, end)`` intervals (all
               devices together), summed over instances; not clipped to the range, so work queued
               inside and executed after the range closed counts
``busy_share`` ``busy_ns / cpu_total_ns``: the fraction of the range's wall time the GPU spent on its
               work; above 1 when the GPU kept running the range's work after the CPU left it
``gpu_span``   per instance, from its first op's start to its last op's end (what nsys' NVTX GPU
               projection recipes report as the projected duration), summed over instances
``waited``     an instance waited for its work when it ended at or after its last op ended (e.g. a
               ``torch.cuda.synchronize()`` inside it); otherwise its wall time measured the launches
``phase_ns``   per instance what a timer synchronizing before and after the range would measure,
               summed: from its start (or the end of earlier GPU work it queued behind) to its end
               or its GPU work's end, whichever is later; ``measure`` says whether that is its CPU
               wall time (``cpu_wall``), comes from the GPU timeline (``gpu``) or ``mixed`` across
               instances; see :func:`analyzer.facts.phase_index.range_timing`

Warmup is excluded by default: ranges matching ``warmup*`` and everything nested inside them
(``exclude=()`` keeps them). Enclosing ranges stay inclusive of everything launched inside them.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.errors import ParameterError
from analyzer.arrays import sorted_distinct
from analyzer.loading.model import Trace
from analyzer.facts.phase_index import (
    AGGREGATE_TIMING_COLUMNS,
    DEFAULT_EXCLUDE,
    PhaseIndex,
    aggregate_timing,
)

__all__ = [
    "PHASE_COLUMNS", "ModelConfig", "attention_split", "category_mix", "kernel_categories",
    "phase_table", "step_split", "top_kernels",
]

#: Columns of :func:`phase_table` (and of the ``phases`` fact), with units.
PHASE_COLUMNS: dict[str, str] = {
    "name": "NVTX range text",
    "path": "range path (outermost first) of the first instance; with by='path' the grouping key",
    "paths": "number of distinct paths the grouped instances have",
    "count": "number of range instances",
    "cpu_total_ns": "sum of instance wall times (ns)",
    "cpu_mean_ns": "mean instance wall time (ns)",
    "cpu_std_ns": "sample standard deviation of instance wall times (ns; 0 for one instance)",
    "cpu_min_ns": "shortest instance (ns)",
    "cpu_max_ns": "longest instance (ns)",
    "cpu_p50_ns": "median instance wall time (ns, linear interpolation)",
    "cpu_p95_ns": "95th percentile instance wall time (ns, linear interpolation)",
    "gpu_ns": "kernel+memcpy+memset time launched inside the range, nested ranges included (ns)",
    "gpu_mean_ns": "gpu_ns per instance (ns)",
    "kernel_ns": "kernel time launched inside the range, nested ranges included (ns)",
    "kernel_count": "kernels launched inside the range, nested ranges included",
    "op_count": "kernels+memcpy+memset launched inside the range, nested ranges included",
    "busy_ns": "per instance union of its ops' intervals, summed over instances (ns)",
    "busy_share": "busy_ns / cpu_total_ns (can exceed 1: async work outliving the range)",
    "gpu_span_ns": "per instance, last op end - first op start (nsys' 'projected' span), summed (ns)",
    "top_kernel": "kernel with the most time inside the range",
    "top_kernel_ns": "its total time inside the range (ns)",
    "top_kernel_count": "its launches inside the range",
    "top_kernel_mean_ns": "its mean duration inside the range (ns)",
    "top_kernels": "top 3 kernels by time: 'name (n=COUNT, mean=US us)' joined by ' | '",
    **{c: d for c, d in AGGREGATE_TIMING_COLUMNS.items() if c != "gpu_span_ns"},
    "gpu_span_mean_ns": "gpu_span_ns per instance (ns)",
    "tail_mean_ns": "tail_ns per instance (ns)",
    "phase_mean_ns": "phase_ns per instance (ns): the phase's time per instance, by the number that measures it",
}

def _index(trace: Trace, index: PhaseIndex | None) -> PhaseIndex:
    if index is None:
        return PhaseIndex.build(trace)
    if index.trace is not trace:
        raise ValueError("index was built for another trace")
    return index


def kernel_categories(trace: Trace, categories_file: str | Path | None = None) -> pd.Series:
    """One category per kernel row of the whole trace (aligned to ``trace.kernels`` positions): the
    ``kernel_categories`` fact's column (:func:`analyzer.facts.categories.kernel_category_codes`, the
    table of ``categories.yaml`` or ``categories_file``) without its window."""
    from analyzer.facts.categories import kernel_category_codes, load_categories

    cats = kernel_category_codes(trace.kernels, load_categories(categories_file))
    return pd.Series(np.asarray(cats, dtype=object), dtype=object, name="category")


def _group_of(ids: np.ndarray, gcode: np.ndarray, instance: np.ndarray) -> np.ndarray:
    """``gcode`` of each of ``instance`` (every one among ``ids``, which are distinct): by a table indexed by
    range id where the ids are small non-negative numbers (the loaders number ranges from 0), else by
    ``reindex``; one gather per kernel instead of a hash lookup."""
    instance = np.asarray(instance, dtype=np.int64)
    if len(ids) and int(ids.min()) >= 0 and int(ids.max()) < 4 * len(ids) + (1 << 20):
        table = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
        table[ids] = gcode
        return table[instance]
    return pd.Series(gcode, index=ids).reindex(instance).to_numpy(np.int64)


def _top_by_group(group: np.ndarray, name: np.ndarray, duration: np.ndarray, n: int) -> pd.DataFrame:
    """Top ``n`` kernel name codes per group code by total time: ``group, name, total, count``.
    Ties broken by name code (first seen)."""
    group, name, duration = (np.asarray(a, dtype=np.int64) for a in (group, name, duration))
    per = _totals_by_pair(group, name, duration)
    if per is None:
        frame = pd.DataFrame({"group": group, "name": name, "duration": duration})
        per = frame.groupby(["group", "name"], sort=False)["duration"].agg(total="sum", count="size").reset_index()
    per = per.sort_values(["group", "total", "name"], ascending=[True, False, True], kind="stable")
    return per.groupby("group", sort=False).head(n)


def _totals_by_pair(group: np.ndarray, name: np.ndarray, duration: np.ndarray) -> pd.DataFrame | None:
    """``group, name, total, count`` per distinct (group, name) code pair (in pair order; callers sort),
    by two ``bincount`` over one packed key instead of a two-key groupby (0.1 s per million kernels).
    None where that is not exact: negative codes or durations, sums beyond float64's integers, or a
    key range much larger than the rows."""
    if not len(group) or min(group.min(), name.min(), duration.min()) < 0:
        return None
    if float(duration.sum(dtype=np.float64)) >= 2.0 ** 52:  # every partial sum an exact float64 integer
        return None
    names = int(name.max()) + 1
    span = (int(group.max()) + 1) * names
    if span > max(4 * len(group), 1 << 20):
        return None
    key = group * names + name
    count = np.bincount(key, minlength=span)
    used = np.flatnonzero(count)
    total = np.bincount(key, weights=duration, minlength=span)[used].astype(np.int64)
    return pd.DataFrame({"group": used // names, "name": used % names, "total": total,
                         "count": count[used].astype(np.int64)})


def _fmt_top(top: pd.DataFrame, names: np.ndarray) -> pd.Series:
    """``group -> "name (n=COUNT, mean=US us) | ..."`` (a handful of rows per group)."""
    if top.empty:
        return pd.Series(dtype=object)
    mean_us = (top["total"] / top["count"] / 1e3).map(lambda v: f"{v:.1f}")
    text = (pd.Series(names[top["name"].to_numpy()], index=top.index, dtype=object) + " (n="
            + top["count"].astype(str).astype(object) + ", mean=" + mean_us.astype(object) + " us)")
    return text.groupby(top["group"].to_numpy(), sort=False).agg(" | ".join)


def phase_table(
    trace: Trace,
    *,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    include: str | Iterable[str] | None = None,
    by: Literal["name", "path"] = "name",
    window: tuple[int, int] | None = None,
    index: PhaseIndex | None = None,
) -> pd.DataFrame:
    """Per NVTX range name (``by="name"``) or path (``by="path"``): CPU and GPU cost, see
    :data:`PHASE_COLUMNS`. Sorted by ``cpu_total_ns`` descending.

    ``exclude``: patterns (glob, or ``re:``/``regex:`` prefixed) whose ranges *and every range nested
    in them* are dropped; default ``("warmup*",)``. ``include``: keep only rows whose range name (path
    when the pattern has a ``/``) matches. ``window``: keep only instances intersecting
    ``[start, end)``. Marks (zero-length NVTX events) are never rows.
    """
    if by not in ("name", "path"):
        raise ParameterError(f"phase_table: by must be 'name' or 'path', not {by!r}")
    idx = _index(trace, index)
    ranges = idx.select(idx.measured_ranges(exclude), include)
    if window is not None:
        lo, hi = window
        ranges = ranges[(ranges["end"] >= lo) & (ranges["start"] < hi)]
    columns = list(PHASE_COLUMNS)
    if ranges.empty:
        return _typed_empty(columns)
    key = "text" if by == "name" else "path"
    inst = ranges[["range_id", "text", "path", "start", "end", "duration"]].sort_values("start", kind="stable")
    gcode = pd.factorize(inst[key].astype(object).to_numpy(object))[0]
    pcode = pd.factorize(inst["path"].astype(object).to_numpy(object))[0]
    gpu = idx.instance_gpu(inst["range_id"].to_numpy())
    timing = idx.timing(inst, gpu)
    work = pd.DataFrame({
        "g": gcode, "pcode": pcode, "pos": np.arange(len(inst)),
        "duration": inst["duration"].to_numpy(np.int64),
        **{c: gpu[c].to_numpy(np.int64) for c in ("gpu_ns", "kernel_ns", "kernel_count", "op_count",
                                                  "busy_ns", "sync_count")},
        "span": timing["gpu_span_ns"],
    })
    timed = aggregate_timing(work.assign(**timing), "g").set_index("g")
    g = work.groupby("g", sort=True)
    out = g.agg(
        first=("pos", "min"), paths=("pcode", "nunique"),
        count=("duration", "size"), cpu_total_ns=("duration", "sum"), cpu_mean_ns=("duration", "mean"),
        cpu_std_ns=("duration", "std"), cpu_min_ns=("duration", "min"), cpu_max_ns=("duration", "max"),
        gpu_ns=("gpu_ns", "sum"), kernel_ns=("kernel_ns", "sum"), kernel_count=("kernel_count", "sum"),
        op_count=("op_count", "sum"), busy_ns=("busy_ns", "sum"), gpu_span_ns=("span", "sum"),
    )
    first = out["first"].to_numpy()
    out["name"] = inst["text"].astype(object).to_numpy(object)[first]
    out["path"] = inst["path"].astype(object).to_numpy(object)[first]
    out["cpu_std_ns"] = out["cpu_std_ns"].fillna(0.0)
    out["cpu_p50_ns"] = g["duration"].quantile(0.5)
    out["cpu_p95_ns"] = g["duration"].quantile(0.95)
    out["gpu_mean_ns"] = out["gpu_ns"] / out["count"]
    out["busy_share"] = np.where(out["cpu_total_ns"] > 0, out["busy_ns"] / out["cpu_total_ns"].clip(lower=1),
                                 np.nan)
    # Top kernels per group, from the kernels launched inside each instance.
    krows = idx.kernel_rows(inst["range_id"].to_numpy(), ("instance", "row", "duration"))
    codes, names = idx.kernel_name_codes
    top = _top_by_group(_group_of(inst["range_id"].to_numpy(np.int64), gcode, krows["instance"].to_numpy()),
                        codes[krows["row"].to_numpy()], krows["duration"].to_numpy(np.int64), 3)
    best = top.groupby("group", sort=False).head(1).set_index("group")
    best = best.reindex(out.index)
    top_name = np.full(len(out), "", dtype=object)
    has = best["count"].notna().to_numpy()
    top_name[has] = names[best["name"].to_numpy()[has].astype(np.int64)]
    out["top_kernel"] = top_name
    out["top_kernel_ns"] = best["total"].fillna(0).astype("int64")
    out["top_kernel_count"] = best["count"].fillna(0).astype("int64")
    out["top_kernel_mean_ns"] = best["total"] / best["count"]
    out["top_kernels"] = _fmt_top(top, names).reindex(out.index).fillna("").astype(object)
    timed = timed.drop(columns="gpu_span_ns").reindex(out.index)
    for c in timed.columns:
        out[c] = timed[c].to_numpy()
    out["gpu_span_mean_ns"] = out["gpu_span_ns"] / out["count"]
    out["tail_mean_ns"] = out["tail_ns"] / out["count"]
    out["phase_mean_ns"] = out["phase_ns"] / out["count"]
    out = out.reset_index(drop=True)[columns]
    return out.sort_values(["cpu_total_ns", "name"], ascending=[False, True], kind="stable",
                           ignore_index=True)


def _typed_empty(columns: list[str]) -> pd.DataFrame:
    text = {"name", "path", "top_kernel", "top_kernels", "waited", "measure"}
    floats = {"cpu_mean_ns", "cpu_std_ns", "cpu_p50_ns", "cpu_p95_ns", "gpu_mean_ns", "busy_share",
              "top_kernel_mean_ns", "gpu_span_mean_ns", "tail_mean_ns", "phase_mean_ns"}
    return empty_typed((c, object if c in text else "float64" if c in floats else "int64")
                       for c in columns)


def top_kernels(
    trace: Trace,
    *,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    n: int | None = None,
    index: PhaseIndex | None = None,
    categories: pd.Series | None = None,
) -> pd.DataFrame:
    """Kernels by total time, the ``top_kernels`` fact's table
    (:func:`analyzer.facts.categories.kernel_summary`: ``name, display_name, short_name, category,
    count, total_ns, mean_ns, median_ns, min_ns, max_ns, share``) over the kernels of the whole trace
    instead of the window's: with ``exclude=()`` every kernel (what ``nsys stats -r cuda_gpu_kern_sum``
    reports); by default kernels launched inside excluded ranges (warmup) are left out, kernels outside
    any range kept. ``share`` is of the kernel time counted here; ``n``: the first ``n`` rows only.
    ``categories``: :func:`kernel_categories` of ``trace`` when already computed."""
    from analyzer.facts.categories import kernel_summary

    idx = _index(trace, index)
    kernels = trace.kernels
    keep = np.ones(len(kernels), bool)
    dropped = idx.excluded_ids(exclude)
    if len(dropped):
        keep &= ~kernels["nvtx_id"].isin(dropped).to_numpy()
    cats = kernel_categories(trace) if categories is None else categories.reset_index(drop=True)
    rows = kernels.loc[keep, ["name", "short_name", "duration"]].reset_index(drop=True)
    rows["category"] = cats.to_numpy(dtype=object)[keep]
    out = kernel_summary(rows)
    return out if n is None else out.head(n)


# -- training steps -------------------------------------------------------------------------------
STEP_PATTERN = r"^step_(\d+)$"
STEP_PHASES: tuple[str, ...] = ("forward", "backward", "optimizer_step")


def _phase_instances(idx: PhaseIndex, parents: pd.DataFrame, name: str) -> pd.DataFrame:
    """Outermost ranges called ``name`` nested in each of ``parents`` (``parent_id``, ``range_id``).

    A ``forward`` nested inside another ``forward`` of the same parent is not counted twice."""
    ranges = idx.ranges
    named = ranges.loc[ranges["text"].astype(object) == name, "range_id"]
    pairs = idx.pairs
    under = pairs[pairs["range_id"].isin(named) & pairs["ancestor_id"].isin(parents["range_id"])
                  & (pairs["distance"] > 0)]
    under = under.rename(columns={"ancestor_id": "parent_id"})[["parent_id", "range_id", "distance"]]
    # Drop those with a same-named ancestor closer than the parent.
    inner = pairs[pairs["range_id"].isin(under["range_id"]) & pairs["ancestor_id"].isin(named)
                  & (pairs["distance"] > 0)]
    nested = under.merge(inner[["range_id", "distance"]].rename(columns={"distance": "d2"}), on="range_id")
    nested = nested[nested["d2"] < nested["distance"]]
    return under[~under["range_id"].isin(nested["range_id"])][["parent_id", "range_id"]]


def step_split(
    trace: Trace,
    *,
    phases: Iterable[str] = STEP_PHASES,
    step_pattern: str = STEP_PATTERN,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    index: PhaseIndex | None = None,
) -> pd.DataFrame:
    """One row per measured step (ranges matching ``step_pattern``, outside excluded ranges):

    ``step`` (text), ``step_index`` (first regex group as int, else -1), ``start``, ``cpu_ns``,
    ``gpu_ns``, ``kernel_ns``, ``kernel_count``; for each phase P in ``phases``: ``P_count`` (its
    instances in the step), ``P_cpu_ns``, ``P_gpu_ns``, ``P_kernel_ns``, ``P_kernel_count``; then
    ``residual_cpu_ns`` / ``residual_gpu_ns`` (step minus the phases: time in the step outside them,
    e.g. ``zero_grad`` or the loss) and ``residual_kernel_ns``.

    Timing (:func:`range_timing`): the step's ``span_ns``, ``waited`` (0/1), ``sync_count`` and
    ``sync_ns`` (blocking synchronizing calls inside it and the host's time in them); per phase
    ``P_span_ns`` (GPU span, summed over its instances in the step), ``P_phase_ns`` (per instance
    what a synchronized timer would measure, summed), ``P_waited`` (instances that waited for their
    GPU work, or launched none), ``P_tail_ns`` and ``P_sync_ns``; ``residual_sync_ns``: the step's sync time
    outside the phases, i.e. the host waiting at the step's end for GPU work the phases queued (their
    GPU catch-up when the phases ended before their work).

    GPU columns count work launched inside the (sub-)range from any thread of the process, per the
    loader's attribution (backward kernels launched by the autograd thread count for ``backward``).
    """
    idx = _index(trace, index)
    phases = tuple(phases)
    try:
        rx = re.compile(step_pattern)
    except re.error as err:
        raise ParameterError(f"invalid step pattern {step_pattern!r}: {err}") from None
    ranges = idx.measured_ranges(exclude)
    texts = ranges["text"].astype(object).astype(str)
    is_step = texts.map(lambda s: rx.search(s) is not None).to_numpy(bool)
    steps = ranges[is_step][["range_id", "text", "start", "end", "duration"]].sort_values(
        "start", kind="stable")
    cols = ["step", "step_index", "start", "cpu_ns", "gpu_ns", "kernel_ns", "kernel_count"]
    for p in phases:
        cols += [f"{p}_count", f"{p}_cpu_ns", f"{p}_gpu_ns", f"{p}_kernel_ns", f"{p}_kernel_count"]
    cols += ["residual_cpu_ns", "residual_gpu_ns", "residual_kernel_ns"]
    cols += ["span_ns", "waited", "sync_count", "sync_ns"]
    for p in phases:
        cols += [f"{p}_span_ns", f"{p}_phase_ns", f"{p}_waited", f"{p}_tail_ns", f"{p}_sync_ns"]
    cols += ["residual_sync_ns"]
    if steps.empty:
        return empty_typed((c, object if c == "step" else "int64") for c in cols)
    gpu = idx.instance_gpu(steps["range_id"].to_numpy())
    out = pd.DataFrame({
        "range_id": steps["range_id"].to_numpy(),
        "step": steps["text"].astype(object).to_numpy(),
        "step_index": steps["text"].astype(str).map(_first_int(rx)).to_numpy(np.int64),
        "start": steps["start"].to_numpy(np.int64),
        "cpu_ns": steps["duration"].to_numpy(np.int64),
    })
    out = out.join(gpu[["gpu_ns", "kernel_ns", "kernel_count", "sync_count", "sync_ns"]], on="range_id")
    step_timing = idx.timing(steps, gpu)
    out["span_ns"] = step_timing["gpu_span_ns"]
    out["waited"] = step_timing["waited"].astype(np.int64)
    res_cpu = out["cpu_ns"].copy()
    res_gpu = out["gpu_ns"].copy()
    res_k = out["kernel_ns"].copy()
    res_sync = out["sync_ns"].copy()
    bounds = idx.ranges.set_index("range_id")[["start", "end", "duration"]]
    for p in phases:
        inst = _phase_instances(idx, steps, p)
        pg = idx.instance_gpu(inst["range_id"].to_numpy())
        inst = inst.join(pg, on="range_id")
        b = bounds.reindex(inst["range_id"])
        inst["cpu"] = b["duration"].to_numpy()
        timing = idx.timing(b.reset_index(), pg)
        inst = inst.assign(span=timing["gpu_span_ns"], phase=timing["phase_ns"], tail=timing["tail_ns"],
                           waited=timing["waited"].astype(np.int64))
        agg = inst.groupby("parent_id").agg(count=("range_id", "size"), cpu=("cpu", "sum"),
                                            gpu=("gpu_ns", "sum"), k=("kernel_ns", "sum"),
                                            kc=("kernel_count", "sum"), span=("span", "sum"),
                                            phase=("phase", "sum"), waited=("waited", "sum"),
                                            tail=("tail", "sum"), sync=("sync_ns", "sum"))
        agg = agg.reindex(out["range_id"].to_numpy()).fillna(0).astype("int64")
        out[f"{p}_count"] = agg["count"].to_numpy()
        out[f"{p}_cpu_ns"] = agg["cpu"].to_numpy()
        out[f"{p}_gpu_ns"] = agg["gpu"].to_numpy()
        out[f"{p}_kernel_ns"] = agg["k"].to_numpy()
        out[f"{p}_kernel_count"] = agg["kc"].to_numpy()
        for col, key in (("span_ns", "span"), ("phase_ns", "phase"), ("waited", "waited"), ("tail_ns", "tail"),
                         ("sync_ns", "sync")):
            out[f"{p}_{col}"] = agg[key].to_numpy()
        res_cpu -= agg["cpu"].to_numpy()
        res_gpu -= agg["gpu"].to_numpy()
        res_k -= agg["k"].to_numpy()
        res_sync -= agg["sync"].to_numpy()
    out["residual_cpu_ns"] = res_cpu
    out["residual_gpu_ns"] = res_gpu
    out["residual_kernel_ns"] = res_k
    out["residual_sync_ns"] = res_sync
    return out[cols].reset_index(drop=True)


def _first_int(rx: re.Pattern[str]):
    def parse(text: str) -> int:
        m = rx.search(text)
        if m and m.groups() and m.group(1) is not None and m.group(1).isdigit():
            return int(m.group(1))
        return -1
    return parse


# -- kernel mix -----------------------------------------------------------------------------------
def category_mix(
    trace: Trace,
    phase: str | Iterable[str] | None = "forward",
    *,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    categories: pd.Series | None = None,
    index: PhaseIndex | None = None,
) -> pd.DataFrame:
    """Kernel category mix inside the ranges named ``phase`` (each name separately; ``None``: all
    kernels not launched inside excluded ranges, labelled ``"*"``).

    Columns ``phase, category, count, total_ns, mean_ns, share`` (share of the phase's kernel time),
    sorted by phase then time. Nested ranges of the same name are counted once (outermost)."""
    idx = _index(trace, index)
    cats = kernel_categories(trace) if categories is None else categories.reset_index(drop=True)
    kern = trace.kernels
    parts = []
    if phase is None:
        keep = ~kern["nvtx_id"].isin(idx.excluded_ids(exclude)).to_numpy()
        parts.append(pd.DataFrame({"phase": "*", "row": np.flatnonzero(keep)}))
    else:
        names = (phase,) if isinstance(phase, str) else tuple(phase)
        measured = idx.measured_ranges(exclude)
        for name in names:
            named = measured[measured["text"].astype(object) == name]["range_id"]
            # outermost only: drop instances nested in another instance of the same name
            p = idx.pairs
            inner = p[p["range_id"].isin(named) & p["ancestor_id"].isin(named) & (p["distance"] > 0)]
            outer = named[~named.isin(inner["range_id"])]
            rows = idx.kernel_rows(outer.to_numpy())["row"].to_numpy()
            parts.append(pd.DataFrame({"phase": name, "row": rows}))
    cols = ["phase", "category", "count", "total_ns", "mean_ns", "share"]
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["phase", "row"])
    if frame.empty:
        return empty_typed((c, object if c in ("phase", "category") else "float64")
                       for c in cols)
    rows = frame["row"].to_numpy(np.int64)
    frame["category"] = cats.to_numpy()[rows]
    frame["duration"] = kern["duration"].to_numpy(np.int64)[rows]
    out = frame.groupby(["phase", "category"], sort=False)["duration"].agg(
        count="size", total_ns="sum", mean_ns="mean").reset_index()
    out["share"] = out["total_ns"] / out.groupby("phase")["total_ns"].transform("sum")
    out = out.sort_values(["phase", "total_ns", "category"], ascending=[True, False, True],
                          ignore_index=True)
    return out[cols]


# -- attention ------------------------------------------------------------------------------------
ATTENTION_RANGES: dict[str, str] = {
    "scores": "computing_attention_scores",
    "softmax": "computing_softmax",
    "final_matmul": "final_matmul",
}
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide: a convention, not a measurement


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of an attention call, to derive FLOPs the NVTX texts do not carry.

    ``source`` says where the numbers came from (file-name keys, a preset, the user), and goes into
    ``flops_note`` so a reader knows how far to trust the FLOP columns."""

    d_model: int | None = None
    heads: int | None = None
    context: int | None = None
    batch: int | None = None
    source: str = "user"

    @property
    def d_head(self) -> int | None:
        if self.d_model and self.heads:
            return self.d_model // self.heads
        return None

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], source: str) -> ModelConfig:
        def num(*names: str) -> int | None:
            for n in names:
                v = values.get(n)
                if v not in (None, ""):
                    try:
                        return int(str(v))
                    except (TypeError, ValueError):
                        raise ParameterError(f"model config {n}={v!r} is not an integer") from None
            return None
        return cls(d_model=num("d_model"), heads=num("heads", "num_heads", "n_heads"),
                   context=num("context", "context_length", "ctx", "seq"),
                   batch=num("batch", "batch_size"), source=source)


ATTENTION_COLUMNS: dict[str, str] = {
    "calls": "instances of computing_softmax (attention calls) in measured steps",
    "scores_gpu_ns": "kernel time inside computing_attention_scores (ns)",
    "softmax_range_gpu_ns": "kernel time inside computing_softmax (ns)",
    "final_matmul_gpu_ns": "kernel time inside final_matmul (ns)",
    "softmax_ns": "softmax-category kernel time inside the three ranges (ns)",
    "matmul_ns": "gemm-category kernel time inside the three ranges (ns)",
    "other_ns": "other kernel time inside the three ranges (scale, mask, copies) (ns)",
    "softmax_cpu_ns": "wall time of computing_softmax ranges (ns)",
    "matmul_cpu_ns": "wall time of computing_attention_scores + final_matmul ranges (ns)",
    "time_ratio": "softmax_ns / matmul_ns",
    "d_head": "d_model / heads, when known",
    "softmax_flops": "5 * B*H*T*T per call * calls, when B, H, T known",
    "matmul_flops": "2 matmuls * 2*B*H*T*T*d_head per call * calls, when known",
    "flop_ratio": "softmax FLOPs / matmul FLOPs = 5 / (4 * d_head), when d_head known",
    "time_per_flop_ratio": "time_ratio / flop_ratio: how much slower per FLOP softmax runs",
    "flops_note": "how the FLOP columns were derived and why they are estimates",
}


def attention_split(
    trace: Trace,
    config: ModelConfig | None = None,
    *,
    exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE,
    categories: pd.Series | None = None,
    ranges: Mapping[str, str] = ATTENTION_RANGES,
    index: PhaseIndex | None = None,
) -> pd.DataFrame:
    """Softmax against matmul inside the attention ranges: one row, see :data:`ATTENTION_COLUMNS`.

    Times are exact (kernels launched inside ``computing_attention_scores``, ``computing_softmax``,
    ``final_matmul``, split by kernel category). FLOPs are not in the trace: they are derived from
    ``config`` with the conventions softmax = 5 FLOPs per element of the B*H*T*T score matrix and
    matmul = 2*B*H*T*T*d_head for each of ``Q @ K^T`` and ``P @ V``; ``flops_note`` says so and
    where the shapes came from. The FLOP *ratio* needs only d_head (B, H, T and the number of calls
    cancel)."""
    idx = _index(trace, index)
    cats = kernel_categories(trace) if categories is None else categories.reset_index(drop=True)
    measured = idx.measured_ranges(exclude)
    texts = measured["text"].astype(object)
    per: dict[str, tuple[np.ndarray, int, int]] = {}
    all_rows = []
    for role, name in ranges.items():
        ids = measured.loc[texts == name, "range_id"].to_numpy()
        rows = idx.kernel_rows(ids)
        per[role] = (rows["row"].to_numpy(), int(rows["duration"].sum()),
                     int(measured.loc[texts == name, "duration"].sum()))
        all_rows.append(rows["row"].to_numpy())
    rows = sorted_distinct(np.concatenate(all_rows)) if all_rows else np.empty(0, np.int64)
    dur = trace.kernels["duration"].to_numpy(np.int64)[rows]
    cat = pd.Series(cats.to_numpy()[rows], dtype=object).astype(str).str.lower()
    is_soft = cat.str.contains("softmax").to_numpy(bool)
    is_mm = cat.str.contains("gemm|matmul").to_numpy(bool) & ~is_soft
    softmax_ns, matmul_ns = int(dur[is_soft].sum()), int(dur[is_mm].sum())
    calls = int((texts == ranges.get("softmax", "computing_softmax")).sum())
    row: dict[str, object] = {
        "calls": calls,
        "scores_gpu_ns": per.get("scores", (None, 0, 0))[1],
        "softmax_range_gpu_ns": per.get("softmax", (None, 0, 0))[1],
        "final_matmul_gpu_ns": per.get("final_matmul", (None, 0, 0))[1],
        "softmax_ns": softmax_ns,
        "matmul_ns": matmul_ns,
        "other_ns": int(dur.sum()) - softmax_ns - matmul_ns,
        "softmax_cpu_ns": per.get("softmax", (None, 0, 0))[2],
        "matmul_cpu_ns": per.get("scores", (None, 0, 0))[2] + per.get("final_matmul", (None, 0, 0))[2],
        "time_ratio": softmax_ns / matmul_ns if matmul_ns else np.nan,
    }
    row.update(_flops(config, calls))
    tr, fr = float(row["time_ratio"]), float(row["flop_ratio"])  # type: ignore[arg-type]
    known = not math.isnan(fr) and fr > 0 and not math.isnan(tr)
    row["time_per_flop_ratio"] = tr / fr if known else np.nan
    return pd.DataFrame([row])[list(ATTENTION_COLUMNS)]


#: Separates a ``flops_note``'s provenance (first part) from the FLOP convention (second part).
FLOPS_CONVENTION_SEP = "; convention: "


def _flops(config: ModelConfig | None, calls: int) -> dict[str, object]:
    convention = ("softmax = 5 FLOPs per element of the B*H*T*T score matrix (max, subtract, exp, sum, "
                  "divide); matmul = 2*B*H*T*T*d_head for each of Q@K^T and P@V; mask/scale elementwise "
                  "work not counted")
    out: dict[str, object] = {"d_head": np.nan, "softmax_flops": np.nan, "matmul_flops": np.nan,
                              "flop_ratio": np.nan}
    if config is None or config.d_head is None:
        out["flops_note"] = ("no FLOPs: the NVTX texts carry no shapes and no model config (d_model, "
                             "heads) was given or found")
        return out
    d_head = config.d_head
    out["d_head"] = d_head
    out["flop_ratio"] = SOFTMAX_FLOPS_PER_ELEMENT / (4 * d_head)
    if config.batch and config.heads and config.context and calls:
        elements = config.batch * config.heads * config.context * config.context
        out["softmax_flops"] = float(SOFTMAX_FLOPS_PER_ELEMENT * elements * calls)
        out["matmul_flops"] = float(2 * 2 * elements * d_head * calls)
        shapes = f"B={config.batch}, H={config.heads}, T={config.context}, d_head={d_head}"
    else:
        missing = [n for n, v in (("batch", config.batch), ("context", config.context)) if not v]
        shapes = f"d_head={d_head}; absolute FLOPs need {', '.join(missing) or 'calls'}"
    out["flops_note"] = f"estimate: {shapes}, from {config.source}{FLOPS_CONVENTION_SEP}{convention}"
    return out
