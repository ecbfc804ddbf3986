"""GPU time by kernel category (chart and table), the top kernels and the NVTX ranges' CPU and GPU time.
"""
from __future__ import annotations

import pandas as pd

from analyzer.analysis import Analysis
from analyzer.reports.format import truncate
from analyzer.reports.sections.common import required_fact, table_view
from analyzer.reports.viewmodel import Bar, BarChart, Column, Limits, PairedBar, Table


def category_chart(analysis: Analysis, limits: Limits) -> tuple[BarChart, Table]:
    cats = required_fact(analysis, "category_summary", ("category", "count", "total_ns", "share"))
    cats = cats.sort_values(["total_ns", "category"], ascending=[False, True], kind="stable")
    head = cats.head(limits.categories)
    bars = tuple(
        Bar(truncate(str(c), 60), float(t), float(s) if pd.notna(s) else 0.0, int(n))
        for c, t, s, n in zip(head["category"].tolist(), head["total_ns"].tolist(),
                              head["share"].tolist(), head["count"].tolist())
    )
    table = table_view(
        cats,
        (Column("category", "Category", "text"), Column("count", "Kernels", "int"),
         Column("total_ns", "GPU time", "ns"), Column("share", "Share", "share")),
        limits.categories, limits.cell_chars,
    )
    return BarChart("GPU time by kernel category", bars, len(cats)), table


def top_kernels_table(analysis: Analysis, limits: Limits) -> Table:
    cols = (
        Column("name", "Kernel", "code"), Column("category", "Category", "text"), Column("count", "Calls", "int"),
        Column("total_ns", "Total", "ns"), Column("mean_ns", "Mean", "ns"), Column("median_ns", "Median", "ns"),
        Column("share", "Share", "share"),
    )
    frame = required_fact(analysis, "top_kernels", [c.key for c in cols])
    frame = frame.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    return table_view(frame, cols, limits.top_kernels, limits.cell_chars, "sorted by total GPU time")


def nvtx_ranges(analysis: Analysis, limits: Limits) -> tuple[tuple[PairedBar, ...], Table]:
    cols = (
        Column("path", "NVTX range", "code"), Column("count", "Count", "int"), Column("cpu_ns", "CPU time", "ns"),
        Column("gpu_ns", "GPU time", "ns"), Column("kernel_count", "Kernels", "int"),
    )
    frame = required_fact(analysis, "nvtx_projection", ("name", "path", "count", "cpu_ns", "gpu_ns", "kernel_count"))
    frame = frame.sort_values(["cpu_ns", "path"], ascending=[False, True], kind="stable")
    head = frame.head(limits.nvtx_chart_rows)
    bars = tuple(
        PairedBar(truncate(str(p), 80), int(c), int(g))
        for p, c, g in zip(head["path"].tolist(), head["cpu_ns"].fillna(0).tolist(), head["gpu_ns"].fillna(0).tolist())
    )
    table = table_view(frame, cols, limits.nvtx_rows, limits.cell_chars, "sorted by CPU time")
    return bars, table
