"""The timeline breakdown per GPU (fact ``timeline_breakdown``): the window, its steps and its NVTX ranges
as bars split by cause, and the window's detail table.
"""
from __future__ import annotations

import pandas as pd

from analyzer.analysis import Analysis
from analyzer.facts.breakdown import OWN_DETAILS, UNKNOWN_WHY
from analyzer.loading.vocabulary import vocabulary_of
from analyzer.reports.format import fmt_duration, fmt_impact_pct
from analyzer.reports.sections.common import Unavailable, optional_fact, table_view
from analyzer.reports.viewmodel import (
    BREAKDOWN_CAUSES,
    BreakdownBar,
    BreakdownView,
    Column,
    Limits,
    cause_label,
)


def _bars(frame: pd.DataFrame, order: dict[str, int]) -> list[BreakdownBar]:
    """One bar per ``key`` of ``frame`` (rows of one device and scope), keys in first-seen order."""
    sums = frame.groupby(["key", "cause"], sort=False)["duration_ns"].sum()
    out: dict[str, list[tuple[str, int]]] = {}
    for (key, cause), ns in sums.items():
        if ns > 0:
            out.setdefault(str(key), []).append((str(cause), int(ns)))
    bars = []
    for key, parts in out.items():
        parts.sort(key=lambda p: (order.get(p[0], len(order)), p[0]))
        bars.append(BreakdownBar(key, sum(v for _, v in parts), tuple(parts)))
    return bars


def breakdown_views(analysis: Analysis, limits: Limits) -> tuple[BreakdownView, ...]:
    """The timeline breakdown per GPU (empty when the fact is not there: a trace or a build without it)."""
    frame = optional_fact(analysis, "timeline_breakdown")
    if frame is None or frame.empty:
        return ()
    need = ("device", "scope", "key", "cause", "detail", "duration_ns")
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise Unavailable(f"fact 'timeline_breakdown' lacks columns {', '.join(missing)}")
    order = {c: i for i, (c, _) in enumerate(BREAKDOWN_CAUSES)}
    frame = frame[list(need)]
    words = vocabulary_of(analysis.trace)
    if words.rocm:  # the analyzer's own details in the platform's words (the rest: see reports.wording)
        frame = frame.assign(detail=[words.text(d) if d in OWN_DETAILS else d for d in frame["detail"].astype(str)])
    views = []
    cols = (Column("cause", "Cause", "text"), Column("detail", "Detail", "code"),
            Column("duration_ns", "Time", "ns"), Column("share", "Of the window", "share"))
    for dev in sorted(int(d) for d in pd.unique(frame["device"]))[: limits.devices]:
        mine = frame[frame["device"] == dev]
        win = mine[mine["scope"] == "window"]
        (window,) = _bars(win.assign(key="window"), order) or [BreakdownBar("window", 0, ())]
        total = max(window.total_ns, 1)
        details = win.assign(share=win["duration_ns"] / total, cause=win["cause"].map(cause_label))
        details = details.sort_values(["duration_ns", "cause", "detail"], ascending=[False, True, True],
                                      kind="stable")
        steps = _bars(mine[mine["scope"] == "step"], order)
        ranges = sorted(_bars(mine[mine["scope"] == "range"], order), key=lambda b: (-b.total_ns, b.label))
        summary = " \u00b7 ".join(f"{cause_label(c)} {fmt_impact_pct(100.0 * v / total)}"
                                  for c, v in sorted(window.parts, key=lambda p: -p[1]))
        top = details.drop_duplicates("cause")  # sorted largest first: each cause's largest detail
        largest = tuple((str(c), str(d), int(ns)) for c, d, ns in
                        zip(win.loc[top.index, "cause"], top["detail"], top["duration_ns"]))
        views.append(BreakdownView(
            device=dev, window=window,
            details=table_view(details, cols, limits.breakdown_details, limits.cell_chars,
                           "the window by cause and detail, largest first"),
            steps=tuple(steps[: limits.breakdown_steps]), steps_total=len(steps),
            ranges=tuple(ranges[: limits.breakdown_ranges]), ranges_total=len(ranges),
            summary=summary, largest=largest,
        ))
    return tuple(views)


def unclassified_notes(analysis: Analysis) -> tuple[str, ...]:
    """The breakdown's unclassified part (cause ``unknown``), said once per reason for the whole trace:
    its time on each GPU, its share of that GPU's window, why the trace cannot tell and what to record."""
    frame = optional_fact(analysis, "timeline_breakdown")
    if frame is None or frame.empty or not {"scope", "cause", "detail", "device", "duration_ns"} <= set(frame.columns):
        return ()
    win = frame[frame["scope"] == "window"]
    totals = win.groupby("device")["duration_ns"].sum()
    unknown = win[(win["cause"] == "unknown") & (win["duration_ns"] > 0)]
    notes = []
    for detail, rows in unknown.groupby("detail", sort=True):
        per = rows.groupby("device")["duration_ns"].sum().sort_index()
        parts = ", ".join(f"{fmt_duration(int(ns))} on GPU {int(dev)} "
                          f"({fmt_impact_pct(100.0 * ns / max(int(totals.get(dev, 0)), 1))} of its window)"
                          for dev, ns in per.items())
        why = UNKNOWN_WHY.get(str(detail), "the trace cannot tell what held the GPU back")
        notes.append(f"Not classified in the timeline breakdown ({detail}): {parts}; {why}.")
    words = vocabulary_of(analysis.trace)  # the analyzer's words (the details are its own: UNKNOWN_WHY)
    return tuple(words.text(n) for n in notes)
