"""Nsight Compute facts: per-launch hardware metrics joined to the nsys timeline, warp stalls, and
ncu's own rule verdicts.

The ncu data rides on the trace as ``trace.ncu`` (an :class:`analyzer.loading.model.NcuReport`,
joined or not; the CLI attaches it for ``--ncu FILE``). Without it every fact here is an empty frame
with its declared columns, so rules over these facts simply find nothing.

Bound classification follows ncu's SOLBottleneck rule (SpeedOfLight section): with SM throughput
``sm`` and memory throughput ``mem`` in % of peak,

- both below 80 and both below 60        -> ``latency`` (``small_grid`` says when it is less than a wave)
- both below 80, ``|sm - mem| >= 10``      -> the higher one: ``compute`` or ``memory``
- both below 80, within 10 points         -> ``balanced``
- either at or above 80                   -> the higher one: ``compute`` or ``memory``

Roofline placement: ``ridge_point = peak_flops / peak_bandwidth`` (FLOP/byte); a kernel whose arithmetic
intensity is below the ridge can at best reach ``AI * peak_bandwidth``; ``roofline_pct`` is achieved
FLOP/s as % of that attainable ceiling.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts.registry import FactContext, fact
from analyzer.loading.ncu import (
    NCU_JOIN_COLUMN_DOCS,
    NCU_KERNEL_COLUMN_DOCS,
    NCU_RULE_COLUMN_DOCS,
    NCU_STALL_COLUMN_DOCS,
    NcuReport,
    empty_ncu_frame,
)

LATENCY_BOUND_PCT = 60.0  # ncu SOLBottleneck: both below -> latency bound
NO_BOUND_PCT = 80.0  # ncu SOLBottleneck: either at/above -> that unit is the bottleneck
BALANCED_PCT = 10.0  # ncu SOLBottleneck: closer than this -> well balanced

_DERIVED_COLUMN_DOCS: dict[str, str] = {
    "bound": "memory | compute | latency | balanced | unknown, by ncu's SOL logic on sm_throughput_pct "
    "and memory_throughput_pct (latency: both < 60; one >= 80 or 10+ points above the other: that one)",
    "ridge_point": "peak_flops / peak_bandwidth, FLOP/byte; NaN when a peak is unknown",
    "roofline_side": "'memory' when arithmetic_intensity < ridge_point, 'compute' when above, '' unknown",
    "attainable_flops": "min(peak_flops, arithmetic_intensity * peak_bandwidth), FLOP/s",
    "roofline_pct": "achieved_flops as % of attainable_flops (0..100)",
    "time_label": "where matched_ns comes from, as messages print it after a time: 'on the timeline' "
    "(nsys time of the configuration in the window) or 'in the profiled launches' (an ncu report analyzed "
    "on its own: the summed ncu durations of the configuration's profiled launches)",
}
TIMELINE_LABEL = "on the timeline"
PROFILED_LABEL = "in the profiled launches"

NCU_KERNELS_COLUMNS: dict[str, str] = {
    **NCU_KERNEL_COLUMN_DOCS,
    **NCU_JOIN_COLUMN_DOCS,
    **_DERIVED_COLUMN_DOCS,
}
NCU_STALLS_COLUMNS: dict[str, str] = {
    "id": NCU_STALL_COLUMN_DOCS["id"],
    "name": "kernel name",
    "reason": NCU_STALL_COLUMN_DOCS["reason"],
    "value": NCU_STALL_COLUMN_DOCS["value"],
    "share": NCU_STALL_COLUMN_DOCS["share"],
    "rank": "1 for the largest reason of the launch, 2 for the next, ...",
    "metric": NCU_STALL_COLUMN_DOCS["metric"],
    "matched_ns": "nsys time of the launch's configuration (see ncu_kernels.matched_ns), NaN if unmatched",
    "nvtx_path": "NVTX path of the matched nsys launch, ''",
}
NCU_RULES_COLUMNS: dict[str, str] = {
    **NCU_RULE_COLUMN_DOCS,
    "matched_ns": "nsys time of the launch's configuration (see ncu_kernels.matched_ns), NaN if unmatched",
    "nvtx_path": "NVTX path of the matched nsys launch, ''",
}


#: columns of ``ncu_kernels`` computed from others: a rule judging one judges the metrics it comes from
#: (an Nsight Compute report without them leaves the derived column 'unknown' or NaN in every row)
NCU_DERIVED_FROM: dict[str, tuple[str, ...]] = {
    "bound": ("sm_throughput_pct", "memory_throughput_pct"),
    "ridge_point": ("peak_flops", "peak_bandwidth"),
    "roofline_side": ("arithmetic_intensity", "peak_flops", "peak_bandwidth"),
    "attainable_flops": ("arithmetic_intensity", "peak_flops", "peak_bandwidth"),
    "roofline_pct": ("achieved_flops", "arithmetic_intensity", "peak_flops", "peak_bandwidth"),
}


def classify_bound(sm_pct: pd.Series, mem_pct: pd.Series) -> pd.Series:
    """ncu's SOLBottleneck verdict per row: ``memory | compute | latency | balanced | unknown``."""
    sm = pd.to_numeric(sm_pct, errors="coerce").astype("float64")
    mem = pd.to_numeric(mem_pct, errors="coerce").astype("float64")
    higher = np.where(sm >= mem, "compute", "memory")
    below_no_bound = (sm < NO_BOUND_PCT) & (mem < NO_BOUND_PCT)
    latency = (sm < LATENCY_BOUND_PCT) & (mem < LATENCY_BOUND_PCT)
    apart = (sm - mem).abs() >= BALANCED_PCT
    verdict = np.select(
        [sm.isna() | mem.isna(), below_no_bound & latency, below_no_bound & apart, below_no_bound],
        ["unknown", "latency", higher, "balanced"],
        default=higher,
    )
    return pd.Series(verdict, index=sm.index, dtype=object)


def roofline(kernels: pd.DataFrame) -> pd.DataFrame:
    """``ridge_point, roofline_side, attainable_flops, roofline_pct`` for a kernels frame."""
    peak_f = kernels["peak_flops"].astype("float64")
    peak_b = kernels["peak_bandwidth"].astype("float64")
    ai = kernels["arithmetic_intensity"].astype("float64")
    ridge = (peak_f / peak_b).where(peak_b > 0)
    attainable = np.minimum(peak_f, ai * peak_b)
    side = np.where(ai.notna() & ridge.notna(), np.where(ai < ridge, "memory", "compute"), "")
    pct = (kernels["achieved_flops"].astype("float64") / attainable * 100).where(attainable > 0)
    return pd.DataFrame(
        {"ridge_point": ridge, "roofline_side": pd.Series(side, index=kernels.index, dtype=object),
         "attainable_flops": attainable, "roofline_pct": pct},
        index=kernels.index,
    )


def _report(ctx: FactContext) -> NcuReport | None:
    report = ctx.trace.ncu
    return report if report is not None and len(report.kernels) else None


def _without_communication(ctx: FactContext, kernels: pd.DataFrame) -> pd.DataFrame:
    """Profiled launches minus communication kernels (NCCL ...): their counters describe waiting
    for other ranks, so no compute rule may judge them (the report's ncu table still lists them)."""
    if kernels.empty:
        return kernels
    from analyzer.facts.categories import classify_names, load_categories
    from analyzer.facts.comm import COMMUNICATION

    names = kernels["name"].astype(str)
    cats = classify_names(names, names, load_categories(ctx.options.get("categories_file") or None))
    keep = np.asarray(cats != COMMUNICATION, dtype=bool)
    return kernels if keep.all() else kernels.loc[keep]


@fact("ncu_kernels", columns=NCU_KERNELS_COLUMNS, scope_keys=("device", "name", "nvtx_path"), per_kernel=True)
def ncu_kernels(ctx: FactContext) -> pd.DataFrame:
    """One row per launch profiled by Nsight Compute: normalized metrics (SI units, percents 0..100),
    the nsys launch it matched (time of that configuration inside the analysis window, NVTX path),
    ncu's bound verdict and the kernel's place on the roofline. Empty without ncu data."""
    report = _report(ctx)
    if report is None:
        return empty_ncu_frame(NCU_KERNELS_COLUMNS)
    # imported here: the join and the readers behind it cost start-up to every run without ncu data
    from analyzer.loading.ncu import join_ncu, profiled_totals

    if ctx.trace.ncu_only:  # no timeline: the report carries its profiled totals
        kernels = (report if report.joined else profiled_totals(report)).kernels
        label = PROFILED_LABEL
    else:
        window = (ctx.window.start_ns, ctx.window.end_ns) if ctx.window is not None else None
        kernels = join_ncu(report, ctx.trace, window=window).kernels
        label = TIMELINE_LABEL
    kernels = kernels.assign(time_label=label)
    kernels = _without_communication(ctx, kernels)
    kernels = kernels.assign(bound=classify_bound(kernels["sm_throughput_pct"], kernels["memory_throughput_pct"]))
    kernels = pd.concat([kernels, roofline(kernels)], axis=1)
    return kernels[list(NCU_KERNELS_COLUMNS)].reset_index(drop=True)


def _attach_timeline(frame: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    by_id = kernels.set_index("id")
    out = frame.copy()
    out["matched_ns"] = out["id"].map(by_id["matched_ns"]).astype("float64")
    nvtx = out["id"].map(by_id["nvtx_path"])
    out["nvtx_path"] = nvtx.astype(object).where(nvtx.notna(), "")
    return out


@fact("ncu_stalls", columns=NCU_STALLS_COLUMNS, requires=("ncu_kernels",), scope_keys=("name", "nvtx_path"))
def ncu_stalls(ctx: FactContext) -> pd.DataFrame:
    """Warp stall breakdown per profiled launch, largest first: which reason keeps warps from issuing and
    its share of all reasons (from ``smsp__average_warps_issue_stalled_*``,
    ``smsp__average_warp_latency_issue_stalled_*`` or ``smsp__pcsamp_warps_issue_stalled_*``)."""
    report = _report(ctx)
    if report is None or report.stalls.empty:
        return empty_ncu_frame(NCU_STALLS_COLUMNS)
    kernels = ctx.get("ncu_kernels")
    stalls = report.stalls.sort_values(["id", "value"], ascending=[True, False], kind="stable")
    stalls = stalls.assign(
        rank=stalls.groupby("id").cumcount().astype("int64") + 1,
        name=stalls["id"].map(kernels.set_index("id")["name"]),
    )
    stalls = _attach_timeline(stalls, kernels)
    return stalls[list(NCU_STALLS_COLUMNS)].reset_index(drop=True)


@fact("ncu_rules", columns=NCU_RULES_COLUMNS, requires=("ncu_kernels",), scope_keys=("name", "nvtx_path"))
def ncu_rules(ctx: FactContext) -> pd.DataFrame:
    """Nsight Compute's own rule verdicts (details page or report): rule, type, text and estimated
    speed-up per profiled launch, so reports can show where our diagnosis and ncu's agree."""
    report = _report(ctx)
    if report is None or report.rules.empty:
        return empty_ncu_frame(NCU_RULES_COLUMNS)
    rules = _attach_timeline(report.rules, ctx.get("ncu_kernels"))
    return rules[list(NCU_RULES_COLUMNS)].reset_index(drop=True)
