"""Build the report view model (:mod:`analyzer.reports.viewmodel`) from ``list[Analysis]``: one section per
trace (each part built by :mod:`analyzer.reports.sections`), a comparison table over several.

A fact that is not registered yet (``facts.get`` raises
:class:`~analyzer.facts.registry.UnknownFactError`) or that lacks a column a section needs does not fail
the report: its section is omitted and :attr:`TraceSection.notes` says why. The optional ``phases`` fact
and Nsight Compute data (``Analysis.ncu``) add sections only when present.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import numpy as np

from analyzer.analysis import Analysis
from analyzer.facts.registry import UnknownFactError
from analyzer.findings import Finding
from analyzer.impacts import add_up
from analyzer.loading.vocabulary import vocabulary_of
from analyzer.reports.format import cap_text, plural, truncate
from analyzer.reports.sections.breakdown import breakdown_views, unclassified_notes
from analyzer.reports.sections.common import Unavailable, optional_fact, required_fact
from analyzer.reports.sections.findings import finding_views, impact_tally, verdict_text
from analyzer.reports.sections.kernels import category_chart, nvtx_ranges, top_kernels_table
from analyzer.reports.sections.memory import memory_view
from analyzer.reports.sections.ncu import ncu_header, ncu_rules_table, ncu_table
from analyzer.reports.sections.phases import phases_table
from analyzer.reports.sections.signals import signals_view
from analyzer.reports.sections.timeline import gap_summary, utilization_chart
from analyzer.reports.values import Link
from analyzer.reports.wording import in_words
from analyzer.reports.values import flat_parameters as _flat_parameters
from analyzer.reports.values import gpu_label as _gpu_label
from analyzer.reports.values import py_value as _py
from analyzer.reports.viewmodel import (
    Column,
    ComparisonTable,
    Header,
    Limits,
    NotCheckedView,
    ReportView,
    TraceSection,
)


_SEVERITY_ORDER = ("error", "warning", "info")


def _busy(analysis: Analysis, notes: list[str]) -> tuple[int | None, int]:
    """Busy ns summed over devices inside the window, and the number of devices."""
    w = analysis.window
    try:
        busy = required_fact(analysis, "gpu_busy", ("device", "start", "end"))
        start = busy["start"].clip(lower=w.start_ns).to_numpy(dtype="int64")
        end = busy["end"].clip(upper=w.end_ns).to_numpy(dtype="int64")
        total = int(np.clip(end - start, 0, None).sum())
        return total, int(busy["device"].nunique())
    except Unavailable as err:
        try:
            util = required_fact(analysis, "utilization", ("device", "busy_ns"))
            return int(util["busy_ns"].sum()), int(util["device"].nunique())
        except Unavailable:
            notes.append(f"GPU busy share not shown: {err}")
            return None, 0


def _kernel_time(analysis: Analysis) -> tuple[int | None, int | None]:
    """Kernel time and count inside the window: from ``category_summary`` when available, else from the
    kernels overlapping the window (clipped)."""
    try:
        cats = required_fact(analysis, "category_summary", ("count", "total_ns"))
        return int(cats["total_ns"].sum()), int(cats["count"].sum())
    except Unavailable:
        pass
    k = analysis.trace.kernels
    if not len(k):
        return 0, 0
    w = analysis.window
    start = k["start"].clip(lower=w.start_ns).to_numpy(dtype="int64")
    end = k["end"].clip(upper=w.end_ns).to_numpy(dtype="int64")
    inside = end > start
    return int((end - start)[inside].sum()), int(inside.sum())


def with_findings(section: TraceSection, findings: list[Finding], limits: Limits | None = None) -> TraceSection:
    """``section`` with its findings replaced (list, verdict, counts, accepted), the rest unchanged: a
    multi-GPU job's rank sections are built where the rank's trace is, and findings marked afterwards
    (``--write-accepted``) are shown through this."""
    h = section.header
    sums = add_up(findings)  # the unions, once for the table and the verdict
    views, _ = finding_views(findings, h.analyzed_ns, f"t{section.index}-", limits or Limits(), sums)
    verdict, problems, impact = verdict_text(findings, h.analyzed_ns, h.gpu_busy_share, h.device_count,
                                         not_checked=len(section.not_checked), sums=sums)
    summed, tally = impact_tally(findings, impact)
    counts = {s: 0 for s in _SEVERITY_ORDER}
    for f in findings:
        counts[str(f.severity)] = counts.get(str(f.severity), 0) + 1
    header = replace(h, verdict=verdict, problems=problems, problem_impact_ns=impact,
                     problem_impact_sum_ns=summed, tally=tally,
                     counts=tuple((s, counts[s]) for s in _SEVERITY_ORDER),
                     accepted=sum(1 for f in findings if not f.counts),
                     accepted_file=next((f.acceptance.file for f in findings if f.acceptance is not None), ""))
    return replace(section, header=header, findings=views, findings_total=len(findings))


def trace_section(analysis: Analysis, index: int, multi: bool, limits: Limits) -> TraceSection:
    trace, window = analysis.trace, analysis.window
    notes: list[str] = []
    gpus, names, used = _gpu_label(trace)
    ncu_only = bool(getattr(analysis, "ncu_only", False))
    busy_share = None
    busy_ns: int | None
    kernel_ns: int | None
    kernel_count: int | None
    if ncu_only:  # no timeline: no busy time; kernel time is what ncu profiled
        busy_ns, devices = None, max(len(names), 1)
        kernel_ns, kernel_count = ncu_header(analysis)
    else:
        busy_ns, busy_devices = _busy(analysis, notes)
        devices = max(busy_devices, used)
        if busy_ns is not None and window.duration_ns > 0 and devices > 0:
            busy_share = busy_ns / (window.duration_ns * devices)
        kernel_ns, kernel_count = _kernel_time(analysis)
    prefix = f"t{index}-" if multi else ""
    sums = add_up(analysis.findings)  # the unions, once for the table and the verdict
    findings, _ = finding_views(analysis.findings, window.duration_ns, prefix, limits, sums)
    verdict, problems, impact = verdict_text(analysis.findings, window.duration_ns, busy_share, devices,
                                         not_checked=len(getattr(analysis, "not_checked", ()) or ()),
                                         sums=sums)
    summed, tally = impact_tally(analysis.findings, impact)
    counts = {s: 0 for s in _SEVERITY_ORDER}
    for f in analysis.findings:
        counts[str(f.severity)] = counts.get(str(f.severity), 0) + 1
    info = trace.info
    header = Header(
        trace_name=trace.name,
        trace_path=str(info.path),
        source_format=info.source_format,
        nsys_version=info.nsys_version or "unknown",
        hostname=info.hostname or "",
        gpus=gpus,
        window_start_ns=int(window.start_ns),
        window_end_ns=int(window.end_ns),
        window_source=window.source,
        window_description=window.description,
        setup_ns=int(window.setup_ns),
        trace_duration_ns=int(info.duration_ns),
        analyzed_ns=int(window.duration_ns),
        gpu_busy_ns=busy_ns,
        gpu_busy_share=busy_share,
        kernel_ns=kernel_ns,
        kernel_count=kernel_count,
        device_count=devices,
        verdict=verdict,
        problems=problems,
        problem_impact_ns=impact,
        counts=tuple((s, counts[s]) for s in _SEVERITY_ORDER),
        rules_file=analysis.rules_file,
        parameters=_flat_parameters(analysis.parameters),
        accepted=sum(1 for f in analysis.findings if not f.counts),
        accepted_file=next((f.acceptance.file for f in analysis.findings if f.acceptance is not None), ""),
        rank=getattr(info, "rank", None),
        world_size=getattr(info, "world_size", None),
        problem_impact_sum_ns=summed,
        tally=tally,
    )
    parts: dict[str, Any] = {}

    def attempt(label: str, build: Any) -> None:
        try:
            build()
        except Unavailable as err:
            notes.append(f"{label} not shown: {err}")

    def util() -> None:
        parts["utilization"] = utilization_chart(analysis, names, limits)

    def cats() -> None:
        parts["categories"], parts["category_table"] = category_chart(analysis, limits)

    def kernels() -> None:
        parts["top_kernels"] = top_kernels_table(analysis, limits)

    def nvtx() -> None:
        parts["nvtx_chart"], parts["nvtx"] = nvtx_ranges(analysis, limits)

    def gaps() -> None:
        parts["gaps"] = gap_summary(analysis, devices, limits)

    def breakdown() -> None:
        parts["breakdown"] = breakdown_views(analysis, limits)
        parts["breakdown_notes"] = unclassified_notes(analysis)

    if ncu_only:
        notes.append("An Nsight Compute report on its own: the timeline sections (GPU utilization, kernel "
                     "categories, NVTX ranges, idle gaps) need an Nsight Systems trace of the same program "
                     "(analyze trace.nsys-rep --ncu FILE); times below are ncu's profiled durations.")
    else:
        attempt("GPU utilization chart", util)
        attempt("Kernel categories", cats)
        attempt("Top kernels", kernels)
        attempt("NVTX ranges", nvtx)
        attempt("Idle gaps", gaps)
        attempt("Timeline breakdown", breakdown)
        phases = optional_fact(analysis, "phases")
        if phases is not None:
            parts["phases"] = phases_table(phases, limits)
    if analysis.ncu is not None:
        def ncu() -> None:
            parts["ncu"], parts["roofline"] = ncu_table(analysis.ncu, limits, timeline=not ncu_only)
            parts["ncu_rules"] = ncu_rules_table(analysis.ncu, limits)

        attempt("Nsight Compute metrics", ncu)
    parts["baseline"] = _baseline(analysis, notes)
    skipped = tuple(getattr(analysis, "not_applicable", ()) or ())
    if skipped:
        parts["not_applicable"] = tuple(name for name, _ in skipped)
        parts["not_applicable_reason"] = skipped[0][1]

    def signals() -> None:
        parts["signals"] = signals_view(analysis, limits)

    attempt("Call stacks, GPU metrics and power", signals)

    def memory() -> None:
        parts["memory"] = memory_view(analysis, limits)

    if not ncu_only:
        attempt("Device memory", memory)
    return in_words(TraceSection(  # a ROCm trace's section names its HIP calls and compute units
        kind="ncu" if ncu_only else "nsys",
        index=index,
        anchor=f"trace-{index}",
        header=header,
        findings=findings,
        findings_total=len(analysis.findings),
        notes=tuple(notes),
        not_checked=tuple(NotCheckedView(n.id, n.rule, n.title, str(n.severity), n.reason)
                          for n in getattr(analysis, "not_checked", ())),
        **parts,
    ), vocabulary_of(trace))


def _baseline(analysis: Analysis, notes: list[str]) -> dict[str, Any] | None:
    """The per-step and per-phase/kernel summary ``analyze diff`` reads back from a JSON report."""
    from analyzer.reports.baseline import summarize

    try:
        return summarize(analysis).baseline_dict()
    except (UnknownFactError, ValueError) as err:  # a fact a synthetic or partial analysis lacks
        notes.append(f"diff baseline not written: {truncate(str(err), 160)}")
        return None


def _comparison(sections: Sequence[TraceSection]) -> ComparisonTable:
    cols = (
        Column("trace", "Trace", "text"), Column("analyzed_ns", "Window", "ns"),
        Column("gpu_busy_share", "GPU busy", "share"), Column("kernel_ns", "Kernel time", "ns"),
        Column("top_category", "Top category", "text"), Column("error", "Errors", "int"),
        Column("warning", "Warnings", "int"), Column("info", "Info", "int"),
        Column("top_finding", "Top finding", "text"),
    )
    rows = []
    for s in sections:
        h = s.header
        counts = dict(h.counts)
        top_cat = s.categories.bars[0].label if s.categories and s.categories.bars else None
        top = Link(s.findings[0].title, s.findings[0].anchor) if s.findings else None
        rows.append((
            Link(h.trace_name, s.anchor), h.analyzed_ns, _py(h.gpu_busy_share), h.kernel_ns, top_cat,
            counts.get("error", 0), counts.get("warning", 0), counts.get("info", 0), top,
        ))
    return ComparisonTable(cols, tuple(rows), len(rows))


def build_report(
    analyses: list[Analysis],
    *,
    title: str | None = None,
    created: datetime | None = None,
    limits: Limits = Limits(),
) -> ReportView:
    """Build the view model of one report over one or more analyses (one section per trace, plus a
    comparison table when there are several)."""
    if not analyses:
        raise ValueError("build_report needs at least one analysis")
    multi = len(analyses) > 1
    sections = tuple(trace_section(a, i, multi, limits) for i, a in enumerate(analyses, start=1))
    return sections_report(sections, title=title, created=created, limits=limits)


def sections_report(
    sections: Sequence[TraceSection],
    *,
    title: str | None = None,
    created: datetime | None = None,
    limits: Limits = Limits(),
) -> ReportView:
    """The report of traces whose sections are built (:func:`trace_section`: here by
    :func:`build_report`, or where each trace was analyzed, :func:`analyzer.job.rank.finish_alone`),
    in order: one section per trace, plus a comparison table when there are several."""
    from analyzer._version import __version__

    sections = tuple(sections)
    if not sections:
        raise ValueError("a report needs at least one trace section")
    multi = len(sections) > 1
    if title is None:
        title = (
            f"GPU {'kernel' if sections[0].kind == 'ncu' else 'trace'} diagnosis: {sections[0].header.trace_name}"
            if not multi
            else f"GPU trace diagnosis: {len(sections)} traces"
        )
    if multi:
        problems = sum(s.header.problems for s in sections)
        worst = max(sections, key=lambda s: (s.header.problem_impact_ns or 0, s.header.problems, -s.index))
        verdict = f"{len(sections)} traces, {plural(problems, 'problem')} in total"
        if worst.header.problems:
            verdict += f"; most to gain in {worst.header.trace_name}: {worst.header.verdict}"
    else:
        verdict = sections[0].header.verdict
    when = created or datetime.now(timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return cap_text(ReportView(  # names from a trace are bounded in every format
        title=title,
        created=when.replace(microsecond=0),
        tool_version=__version__,
        verdict=verdict,
        traces=sections,
        comparison=_comparison(sections) if multi else None,
        limits=limits,
    ))
