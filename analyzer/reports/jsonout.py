"""JSON rendering: the machine-readable report (schema documented in ``docs/report-schema.md``).

Key order is fixed by construction (free-form maps such as ``metrics`` and ``parameters`` are sorted),
floats are rounded to 6 significant digits, NaN becomes ``null``: same inputs, same bytes.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from analyzer.reports.values import py_value
from analyzer.reports.viewmodel import (
    BREAKDOWN_CAUSES,
    BarChart,
    BreakdownBar,
    BreakdownView,
    GapSummary,
    Header,
    ReportView,
    Table,
    TraceSection,
    cause_label,
)

SCHEMA_VERSION = "1.2"


def _records(table: Table | None) -> dict[str, Any] | None:
    if table is None:
        return None
    return {
        "columns": [c.key for c in table.columns],
        "rows": [{k: py_value(v) for k, v in r.items()} for r in table.records()],
        "total_rows": table.total_rows,
    }


def _header(h: Header) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    info = {
        "name": h.trace_name,
        "path": h.trace_path,
        "format": h.source_format,
        "nsys_version": h.nsys_version,
        "hostname": h.hostname,
        "gpus": h.gpus,
        "device_count": h.device_count,
        "duration_ns": h.trace_duration_ns,
        "rules_file": h.rules_file,
        "parameters": dict(h.parameters),
    }
    if h.rank is not None:
        info["rank"] = h.rank
    if h.world_size is not None:
        info["world_size"] = h.world_size
    window = {
        "start_ns": h.window_start_ns,
        "end_ns": h.window_end_ns,
        "duration_ns": h.analyzed_ns,
        "source": h.window_source,
        "description": h.window_description,
        "setup_ns": h.setup_ns,
    }
    summary = {
        "verdict": h.verdict,
        "analyzed_ns": h.analyzed_ns,
        "gpu_busy_ns": h.gpu_busy_ns,
        "gpu_busy_share": py_value(h.gpu_busy_share),
        "kernel_ns": h.kernel_ns,
        "kernel_count": h.kernel_count,
        "problems": h.problems,
        "problem_impact_ns": h.problem_impact_ns,
        "problem_impact_sum_ns": h.problem_impact_sum_ns,
        "tally": h.tally,
        "findings_by_severity": dict(h.counts),
        "accepted": h.accepted,
        "accepted_file": h.accepted_file or None,
    }
    return info, window, summary


def _categories(chart: BarChart | None, table: Table | None) -> dict[str, Any] | None:
    if chart is None:
        return None
    return _records(table)


def _gaps(g: GapSummary | None) -> dict[str, Any] | None:
    if g is None:
        return None
    return {
        "count": g.count,
        "total_ns": g.total_ns,
        "largest_ns": g.largest_ns,
        "median_ns": py_value(g.median_ns),
        "share": py_value(g.share),
        "longest": _records(g.table),
    }


def _bar(b: BreakdownBar) -> dict[str, Any]:
    return {"key": b.label, "total_ns": b.total_ns, "causes": {c: ns for c, ns in b.parts}}


def _cause_keys(records: dict[str, Any] | None) -> dict[str, Any] | None:
    """The detail table with each cause as the fact names it (``launch_bound``), not as shown."""
    if records is None:
        return None
    keys = {cause_label(c): c for c, _ in BREAKDOWN_CAUSES}
    for row in records["rows"]:
        row["cause"] = keys.get(row["cause"], row["cause"])
    return records


def _breakdown(b: BreakdownView) -> dict[str, Any]:
    return {
        "device": b.device,
        "summary": b.summary,
        "window_ns": b.window.total_ns,
        "causes": {c: ns for c, ns in b.window.parts},
        "details": _cause_keys(_records(b.details)),
        # each cause's largest detail over the whole window, as the Markdown table's "Largest part"
        "largest": [{"cause": c, "detail": d, "duration_ns": ns} for c, d, ns in b.largest],
        "steps": [_bar(x) for x in b.steps],
        "steps_total": b.steps_total,
        "ranges": [_bar(x) for x in b.ranges],
        "ranges_total": b.ranges_total,
    }


def _section(s: TraceSection) -> dict[str, Any]:
    info, window, summary = _header(s.header)
    overview: dict[str, Any] = {
        "categories": _categories(s.categories, s.category_table),
        "top_kernels": _records(s.top_kernels),
        "nvtx": _records(s.nvtx),
        "gaps": _gaps(s.gaps),
    }
    if s.breakdown:
        overview["breakdown"] = [_breakdown(b) for b in s.breakdown]
    if s.breakdown_notes:
        overview["breakdown_notes"] = list(s.breakdown_notes)
    if s.phases is not None:
        overview["phases"] = {**(_records(s.phases) or {}), "caption": s.phases.caption}
    if s.signals is not None:
        overview["signals"] = {
            "code_locations": _records(s.signals.code_locations),
            "gpu_metrics": _records(s.signals.gpu_metrics),
            "energy": _records(s.signals.energy),
            "energy_steps": _records(s.signals.energy_steps),
            "notes": list(s.signals.notes),
        }
    if s.memory is not None:
        overview["memory"] = {
            "devices": _records(s.memory.devices),
            "steps": _records(s.memory.steps),
            "ranges": _records(s.memory.ranges),
            "notes": list(s.memory.notes),
        }
        summary["memory"] = list(s.memory.lines)
    if s.ncu is not None:
        overview["ncu"] = _records(s.ncu)
        if s.ncu_rules is not None:
            overview["ncu_rules"] = _records(s.ncu_rules)
        if s.roofline is not None:
            overview["roofline"] = {
                "peak_flops": py_value(s.roofline.peak_flops),
                "peak_bandwidth": py_value(s.roofline.peak_bandwidth),
                "ridge_intensity": py_value(s.roofline.ridge),
            }
    out = {
        "info": info,
        "window": window,
        "summary": summary,
        "findings": [f.record for f in s.findings],
        "findings_total": s.findings_total,
        "overview": overview,
        "notes": list(s.notes),
        "baseline": s.baseline,
        **({"kind": s.kind} if s.kind != "nsys" else {}),
        **({"not_applicable": {"reason": s.not_applicable_reason, "rules": list(s.not_applicable)}}
           if s.not_applicable else {}),
    }
    if s.not_checked:  # rules not run: the trace lacks data they need
        out["not_checked"] = [{"id": n.id, "rule": n.rule, "title": n.title, "severity": n.severity,
                               "reason": n.reason} for n in s.not_checked]
    return out


def report_dict(report: ReportView) -> dict[str, Any]:
    """The JSON document as a Python dict (key order is the output order)."""
    from analyzer.reports.viewmodel import Link

    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "gpu-trace-analyzer", "version": report.tool_version},
        "created": report.created.isoformat(),
        "title": report.title,
        "verdict": report.verdict,
        "traces": [_section(s) for s in report.traces],
    }
    if report.job is not None:  # a multi-GPU job: its summary, per-rank table and job findings
        doc["job"] = {**report.job.record, "verdict": report.job.verdict,
                      "findings": [f.record for f in report.job.findings],
                      "collectives": _records(report.job.collectives)}
    if report.comparison is not None:
        rows = []
        for row in report.comparison.rows:
            rec = {}
            for col, value in zip(report.comparison.columns, row):
                rec[col.key] = value.text if isinstance(value, Link) else py_value(value)
            rows.append(rec)
        doc["comparison"] = rows
    return doc


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False, default=str)


def render_json(report: ReportView) -> str:
    """The report as indented JSON text, ending with a newline: the bytes of ``json.dumps(report_dict(
    report), indent=2)``, built one trace section at a time (:func:`json_parts`)."""
    return "".join(json_parts(report))


def json_parts(report: ReportView) -> Iterator[str]:
    """:func:`render_json`'s text in parts, one trace section at a time: a job of many ranks is written
    without ever holding every rank's section as Python objects, or the whole document as one string."""
    from dataclasses import replace

    if not report.traces:
        yield _dumps(report_dict(report)) + "\n"
        return
    head = _dumps(report_dict(replace(report, traces=())))
    empty = '\n  "traces": []'  # the top-level key (a newline never occurs inside a JSON string)
    at = head.index(empty) + len(empty) - 2
    # each section at depth 2 of the document: indent=2 puts 4 spaces before its lines
    yield head[:at] + "[\n"
    for i, s in enumerate(report.traces):
        yield (",\n" if i else "") + "\n".join("    " + line for line in _dumps(_section(s)).split("\n"))
    yield "\n  ]" + head[at + 2:] + "\n"
