"""Nsight Compute sections: per-kernel metrics with the roofline, ncu's own rule verdicts, and the header
numbers of an ncu report analyzed on its own.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis
from analyzer.reports.format import truncate
from analyzer.reports.sections.common import Unavailable, table_view
from analyzer.reports.viewmodel import Column, Limits, RooflineChart, RooflinePoint, Table


NCU_COLUMNS: tuple[str, ...] = (
    "name",
    "duration_ns",
    "arithmetic_intensity",  # FLOP/byte
    "achieved_flops",  # FLOP/s
    "peak_flops",  # FLOP/s
    "peak_bandwidth",  # bytes/s
    "sm_throughput_pct",
    "memory_throughput_pct",
)


def ncu_table(ncu: Any, limits: Limits, timeline: bool = True) -> tuple[Table, RooflineChart | None]:
    frame = getattr(ncu, "kernels", None)
    if not isinstance(frame, pd.DataFrame):
        raise Unavailable("Nsight Compute data has no 'kernels' table")
    missing = [c for c in NCU_COLUMNS if c not in frame.columns]
    if missing:
        raise Unavailable(f"Nsight Compute kernels lack columns {', '.join(missing)}")
    frame = frame.copy()
    order_key = "matched_ns" if "matched_ns" in frame.columns else "duration_ns"
    frame = frame.sort_values([order_key, "name"], ascending=[False, True], kind="stable")
    roof = np.minimum(frame["peak_flops"].astype("float64"),
                      frame["arithmetic_intensity"].astype("float64") * frame["peak_bandwidth"].astype("float64"))
    frame["roof_share"] = frame["achieved_flops"].astype("float64") / roof.where(roof > 0)
    cols = [
        Column("name", "Kernel", "code"), Column("duration_ns", "Duration", "ns"),
        Column("arithmetic_intensity", "Intensity", "intensity"), Column("achieved_flops", "Achieved", "flops"),
        Column("roof_share", "Of roofline", "share"), Column("sm_throughput_pct", "SM throughput", "pct"),
        Column("memory_throughput_pct", "Memory throughput", "pct"),
    ]
    if "matched_ns" in frame.columns and timeline:
        cols.insert(2, Column("matched_ns", "Timeline time", "ns"))
    table = table_view(frame, cols, limits.ncu_rows, limits.cell_chars, "Nsight Compute per-kernel metrics")
    ai = frame["arithmetic_intensity"].astype("float64")
    fl = frame["achieved_flops"].astype("float64")
    ok = frame[(ai > 0) & (fl > 0) & np.isfinite(ai) & np.isfinite(fl)]
    pf = frame["peak_flops"].astype("float64")
    pb = frame["peak_bandwidth"].astype("float64")
    pf, pb = pf[(pf > 0) & np.isfinite(pf)], pb[(pb > 0) & np.isfinite(pb)]
    if not len(ok) or not len(pf) or not len(pb):
        return table, None
    points = tuple(
        RooflinePoint(truncate(str(n), limits.cell_chars), float(a), float(f), float(d) if pd.notna(d) else 0.0)
        for n, a, f, d in zip(ok["name"].tolist()[: limits.roofline_points],
                              ok["arithmetic_intensity"].tolist(), ok["achieved_flops"].tolist(),
                              ok["duration_ns"].tolist())
    )
    return table, RooflineChart(float(pf.max()), float(pb.max()), points, len(ok))


#: ncu rule types that advise (shown first); INF/OK verdicts are counted, not listed
_NCU_ADVICE = ("ERR", "WRN", "OPT")


def ncu_rules_table(ncu: Any, limits: Limits) -> Table | None:
    """Nsight Compute's own rule verdicts per kernel, advice first (largest estimated speed-up first)."""
    rules = getattr(ncu, "rules", None)
    kernels = getattr(ncu, "kernels", None)
    if not isinstance(rules, pd.DataFrame) or rules.empty or not {"id", "rule", "type", "description"} <= set(rules.columns):
        return None
    frame = rules.copy()
    if isinstance(kernels, pd.DataFrame) and {"id", "short_name"} <= set(kernels.columns):
        frame["kernel"] = frame["id"].map(kernels.drop_duplicates("id").set_index("id")["short_name"])
    else:
        frame["kernel"] = frame.get("name", "")
    frame["type"] = frame["type"].astype(str)
    frame = frame[frame["type"].isin(_NCU_ADVICE)]
    if frame.empty:
        return None
    frame["_order"] = frame["type"].map({t: i for i, t in enumerate(_NCU_ADVICE)})
    speed = pd.to_numeric(frame.get("speedup_pct"), errors="coerce") if "speedup_pct" in frame else None
    frame["speedup_pct"] = speed if speed is not None else np.nan
    frame = frame.sort_values(["speedup_pct", "_order", "kernel", "rule"], ascending=[False, True, True, True],
                              na_position="last", kind="stable")
    cols = [
        Column("kernel", "Kernel", "code"), Column("rule", "ncu rule", "text"), Column("type", "Type", "text"),
        Column("speedup_pct", "Est. speed-up", "pct"), Column("description", "What ncu said", "text"),
    ]
    return table_view(frame, cols, limits.ncu_rows, max(limits.cell_chars, 400),
                  "What Nsight Compute's own rules said")


def ncu_header(analysis: Analysis) -> tuple[int, int]:
    """Profiled kernel time and launches of an Nsight Compute report analyzed on its own."""
    kernels = getattr(analysis.ncu, "kernels", None)
    if not isinstance(kernels, pd.DataFrame) or kernels.empty:
        return 0, 0
    return int(pd.to_numeric(kernels["duration_ns"], errors="coerce").fillna(0).sum()), len(kernels)
