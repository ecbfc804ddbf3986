"""The plain-text summary the CLI prints: for a multi-GPU job first the job's block (verdict, per-rank
table, job findings), then one block per trace, findings ranked by impact."""
from __future__ import annotations

import shutil
from typing import Any

from analyzer.reports.format import fmt_cell, fmt_duration, fmt_ms, fmt_pct, fmt_share, truncate
from analyzer.reports.viewmodel import FindingView, Link, ReportView, Table

_SEVERITY_MARK = {"error": "E", "warning": "W", "info": "i"}
_MAX_RULE_WIDTH = 40


def summary_text(report: ReportView, *, max_findings: int = 20, width: int | None = None) -> str:
    """What a user reads in the terminal: per trace, the window, GPU busy share, verdict and the top
    findings (severity, id, rule, impact, message)."""
    if width is None:  # the terminal's width, never narrower than 110 columns
        width = max(110, shutil.get_terminal_size((110, 24)).columns)
    lines: list[str] = _job_lines(report.job, report.verdict, max_findings, width) if report.job is not None else []
    for section in report.traces:
        h = section.header
        busy = fmt_share(h.gpu_busy_share) if h.gpu_busy_share is not None else "n/a"
        rank = ""
        if h.rank is not None:
            rank = f"  rank {h.rank}" + (f" of {h.world_size}" if h.world_size else "")
        lines.append(f"{h.trace_name}  [{h.gpus}]{rank}")
        if section.kind == "ncu":
            lines.append(f"  input: {h.window_description}; {fmt_ms(h.kernel_ns or 0)} of profiled kernel time")
        else:
            lines.append(
                f"  window: {fmt_ms(h.analyzed_ns)} analyzed, {h.window_description}; GPU busy {busy}"
                + (f"; setup before the window {fmt_ms(h.setup_ns)}" if h.setup_ns else "")
            )
        lines.append(f"  verdict: {h.verdict}")
        if section.memory is not None:
            lines += [truncate(f"  {line}", width) for line in section.memory.lines]
            lines += [truncate(f"  {line}", width) for line in _step_peaks(section)]
            lines += [truncate(f"  note: {note}", width) for note in section.memory.notes]
        for b in section.breakdown[:2]:  # the timeline breakdown, one line per GPU
            lines.append(truncate(f"  time on GPU {b.device}: {b.summary}", width))
        if len(section.breakdown) > 2:
            lines.append(f"  ... the breakdown of {len(section.breakdown) - 2} more GPU(s) in the report")
        lines += [truncate(f"  note: {note}", width) for note in section.breakdown_notes]
        lines += _finding_lines(section.findings[:max_findings], width)
        if section.not_applicable:
            lines.append(f"  {len(section.not_applicable)} rules not applicable: {section.not_applicable_reason}")
        hidden = section.findings_total - min(len(section.findings), max_findings)
        if hidden > 0:
            lines.append(f"  ... {hidden} more finding(s) in the report")
        if not section.findings:
            lines.append("  no findings")
        if section.not_checked:
            names = ", ".join(f"{n.id} {n.rule}" for n in section.not_checked)
            lines.append(truncate(f"  not available in this trace (not run): {names}", width))
        lines.append("")
    return "\n".join(lines)


def _finding_lines(shown: Any, width: int) -> list[str]:
    """One line per finding: severity mark, id, rule, impact, message."""
    lines = []
    # the rule column as wide as its longest name (ids are at most 8 characters), capped
    name_w = min(max((len(fv.rule) for fv in shown), default=0), _MAX_RULE_WIDTH)
    for fv in shown:
        lines.append(truncate(_finding_line(fv, name_w), width))
    return lines


def _finding_line(fv: FindingView, name_w: int) -> str:
    impact = f"{fv.impact_text:>10} {fv.impact_pct_text:>6}" if fv.impact_ns is not None else f"{'':>17}"
    mark = _SEVERITY_MARK.get(fv.severity, "?")
    tag = {"accepted": "[accepted] ", "grown": "[grew past acceptance] "}.get(fv.accepted, "")
    if fv.accepted == "accepted":
        mark = "a"
    if fv.symptom:  # not added to the total: what the causes above explain of it
        mark, tag = "s", f"symptom: {fv.explained}. "
    rule = truncate(fv.rule, name_w)
    return f"  {mark} {fv.id:<8} {rule:<{name_w}} {impact}  {tag}{fv.message}"


def _job_lines(job: Any, verdict: str, max_findings: int, width: int) -> list[str]:
    """The job's block (a :class:`analyzer.reports.jobview.JobSection`), like a trace's: what it covers,
    the job verdict, the per-rank table and the job findings (straggler, imbalance, collectives)."""
    lines = [f"job: {job.ranks_given} of {job.world_size} ranks, numbered {job.numbering}",
             f"  window: {fmt_duration(job.window_end_ns - job.window_start_ns)} ({job.steps_text}, "
             f"{job.window_description})",
             f"  verdict: {verdict}"]
    lines += [truncate(f"  note: {n}", width) for n in job.notes]
    lines += ["  " + row for row in text_table(job.ranks, width=width - 2)]
    if job.findings:
        lines += _finding_lines(job.findings[:max_findings], width)
        if len(job.findings) > max_findings:
            lines.append(f"  ... {len(job.findings) - max_findings} more job finding(s) in the report")
    else:
        lines.append("  no job findings (straggler, rank imbalance, collective bandwidth)")
    lines.append("")
    return lines


def text_table(table: Table, cell_chars: int = 36, width: int | None = None) -> list[str]:
    """A report table as aligned plain-text lines (header first; numbers right-aligned), cells formatted
    as in the other formats (:func:`~analyzer.reports.format.fmt_cell`) and cut at ``cell_chars``. Wider
    than ``width``: the columns in blocks that fit, one under the other, each led by the first column
    (the row's name), as pandas prints a wide frame; no column is cut or left out."""
    if not table.columns:
        return []
    cells = [[truncate(c.label, cell_chars) for c in table.columns]]
    for row in table.rows:
        cells.append([truncate(v.text if isinstance(v, Link) else fmt_cell(v, c.kind), cell_chars)
                      for v, c in zip(row, table.columns)])
    widths = [max(len(r[i]) for r in cells) for i in range(len(table.columns))]
    out: list[str] = []
    for block in _column_blocks(widths, width):
        out += ["  ".join(r[i].rjust(widths[i]) if table.columns[i].numeric and k else r[i].ljust(widths[i])
                          for i in block).rstrip() for k, r in enumerate(cells)]
    if table.omitted:
        out.append(f"... {table.omitted_note}")
    return out


def _column_blocks(widths: list[int], width: int | None) -> list[list[int]]:
    """Column indexes in blocks no wider than ``width`` (two spaces between columns), each after the
    first starting with column 0; a column wider than ``width`` on its own still gets a block."""
    if width is None or sum(widths) + 2 * (len(widths) - 1) <= width:
        return [list(range(len(widths)))]
    blocks: list[list[int]] = [[0]]
    used = widths[0]
    for i in range(1, len(widths)):
        if used + 2 + widths[i] > width and len(blocks[-1]) > 1:
            blocks.append([0])
            used = widths[0]
        blocks[-1].append(i)
        used += 2 + widths[i]
    return blocks


def _step_peaks(section: object) -> list[str]:
    """Per GPU: the lowest and highest per-step peak (the full table is in every report format)."""
    steps = section.memory.steps  # type: ignore[attr-defined]
    if steps is None or not steps.rows:
        return []
    from analyzer.rules.templates import FILTERS

    size = FILTERS["bytes"]
    by_device: dict[object, list[dict[str, object]]] = {}
    for rec in steps.records():
        by_device.setdefault(rec["device"], []).append(rec)
    out = []
    for device, recs in by_device.items():
        low = min(recs, key=lambda r: r["peak_bytes"])  # type: ignore[arg-type,return-value]
        high = max(recs, key=lambda r: r["peak_bytes"])  # type: ignore[arg-type,return-value]
        if size(low["peak_bytes"]) == size(high["peak_bytes"]):  # not "4.4 GiB (step_0) to 4.4 GiB (step_0)"
            each = f"in each of {len(recs)} steps" if len(recs) > 1 else f"in its one step ({high['step']})"
            out.append(f"GPU {device} peak per step: {size(high['peak_bytes'])} {each}")
        else:
            out.append(f"GPU {device} peak per step: {size(low['peak_bytes'])} ({low['step']}) to "
                       f"{size(high['peak_bytes'])} ({high['step']}) over {len(recs)} steps")
    return out


__all__ = ["summary_text", "fmt_pct"]
