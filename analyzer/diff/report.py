"""Renderings of ``analyze diff``: JSON (the contract in docs/report-schema.md), Markdown (a pull-request
comment, under 65,000 characters, readable without the HTML) and HTML (self-contained, a step-time
chart). All three from one :class:`~analyzer.diff.compare.DiffResult`; the verdict comes first.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Literal

from analyzer.diff.compare import (
    NEGLIGIBLE_PCT,
    NEGLIGIBLE_STEP_SHARE,
    ChangeRow,
    ChangeTable,
    DiffResult,
    FindingChange,
    Metric,
    StepComparison,
)
from analyzer.reports.format import (
    DASH,
    fmt_bytes,
    fmt_duration,
    fmt_int,
    fmt_pct,
    fmt_share,
    plural,
    truncate,
)
from analyzer.reports.jsonout import SCHEMA_VERSION
from analyzer.reports.markdown import MAX_CHARS, md_code, md_text
from analyzer.reports.values import py_value

DiffFormat = Literal["html", "md", "json"]
MARKER = "<!-- gpu-trace-analyzer:diff -->"


def render_diff(result: DiffResult, fmt: DiffFormat) -> str:
    if fmt == "json":
        return json.dumps(diff_dict(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "md":
        return render_diff_markdown(result)
    if fmt == "html":
        return render_diff_html(result)
    raise ValueError(f"unknown diff format {fmt!r}; use html, md or json")


# -- JSON ----------------------------------------------------------------------------------------------


def _run(info: Any) -> dict[str, Any]:
    return {
        "name": info.name,
        "path": info.path,
        "input": info.input_kind,
        "gpus": info.gpus,
        "window": info.window_description,
        "analyzed_ns": info.analyzed_ns,
        "steps": {"source": info.steps_source, "description": info.steps_description, "count": info.step_count},
        "rules_file": info.rules_file,
    }


def _step(s: StepComparison, confidence: float) -> dict[str, Any]:
    return {
        "status": s.status,
        "significant": s.significant,
        "base_median_ns": py_value(s.base_median_ns),
        "head_median_ns": py_value(s.head_median_ns),
        "change_pct": py_value(s.change_pct),
        "ci_low_pct": py_value(s.ci_low_pct),
        "ci_high_pct": py_value(s.ci_high_pct),
        "confidence": confidence,
        "p_value": py_value(s.p_value),
        "n_base": s.n_base,
        "n_head": s.n_head,
        "noise_floor_pct": py_value(s.noise_floor_pct),
        "drift_base_pct": py_value(s.drift_base_pct),
        "drift_head_pct": py_value(s.drift_head_pct),
        "spread_base_pct": py_value(s.spread_base_pct),
        "spread_head_pct": py_value(s.spread_head_pct),
        "host_base_pct": py_value(s.host_base_pct),
        "host_head_pct": py_value(s.host_head_pct),
        "separated": s.separated,
        "floor_source": s.floor_source,
        "reason": s.reason,
        "method": s.method,
        "base_durations_ns": list(s.base_durations_ns),
        "head_durations_ns": list(s.head_durations_ns),
    }


def _change_rows(t: ChangeTable, label_key: str, detail_key: str | None, cpu: bool = False) -> dict[str, Any]:
    rows = []
    for r in t.rows:
        rec: dict[str, Any] = {"key": r.key, label_key: r.label}
        if detail_key:
            rec[detail_key] = r.detail
        rec.update({"status": r.status, "base_ns": py_value(r.base_ns), "head_ns": py_value(r.head_ns),
                    "change_pct": py_value(r.change_pct), "base_count": py_value(r.base_count),
                    "head_count": py_value(r.head_count)})
        if cpu:
            rec.update({"base_cpu_ns": py_value(r.base_cpu_ns), "head_cpu_ns": py_value(r.head_cpu_ns)})
        rows.append(rec)
    return {"rows": rows, "total_rows": t.total_rows, "new": list(t.new), "gone": list(t.gone)}


def _finding(f: FindingChange) -> dict[str, Any]:
    return {
        "rule": f.rule, "id": f.id, "title": f.title, "severity": f.severity, "status": f.status,
        "accepted": f.accepted, "accepted_count": f.accepted_count, "grown_count": f.grown_count,
        "base_count": f.base_count, "head_count": f.head_count,
        "base_impact_ns": f.base_impact_ns, "head_impact_ns": f.head_impact_ns,
        "base_impact_per_step_ns": py_value(f.base_impact_per_step_ns),
        "head_impact_per_step_ns": py_value(f.head_impact_per_step_ns),
        "base_latent_per_step_ns": py_value(f.base_latent_per_step_ns),
        "head_latent_per_step_ns": py_value(f.head_latent_per_step_ns), "message": f.message,
    }


#: per-rank columns of a job diff: (key, label), ns per step
JOB_COLUMNS = (("step_ns", "Step"), ("compute_ns", "Compute"), ("wait_ns", "Waiting for others"),
               ("exposed_transfer_ns", "Exposed comm. (waits left out)"), ("lead_ns", "Others waited for it"))


def _rank_numbers(x: Any) -> dict[str, Any] | None:
    if x is None:
        return None
    return {"label": x.label, "steps": x.steps, **{k: py_value(getattr(x, k)) for k, _ in JOB_COLUMNS},
            "exposed_ns": py_value(x.exposed_ns), "exposed_wait_ns": py_value(x.exposed_wait_ns),
            "comm_ns": py_value(x.comm_ns)}


def _job(j: Any) -> dict[str, Any] | None:
    if j is None:
        return None
    return {
        "base_world_size": j.base_world, "head_world_size": j.head_world,
        "base_straggler": j.base_straggler, "head_straggler": j.head_straggler,
        "moved": list(j.moved),
        "ranks": [{"rank": rc.rank, "base": _rank_numbers(rc.base), "head": _rank_numbers(rc.head)} for rc in j.ranks],
    }


def job_cells(j: Any) -> list[tuple[int, list[tuple[str, str]]]]:
    """Per rank: (BASE, HEAD) text per :data:`JOB_COLUMNS` column, ns per step."""
    out = []
    for rc in j.ranks:
        cells = []
        for key, _ in JOB_COLUMNS:
            b = getattr(rc.base, key) if rc.base is not None else None
            h = getattr(rc.head, key) if rc.head is not None else None
            cells.append((_dur(b), _dur(h)))
        out.append((rc.rank, cells))
    return out


def diff_dict(r: DiffResult) -> dict[str, Any]:
    """The diff as JSON-ready data (key order is the output order)."""
    f = r.findings
    return {
        "kind": "diff",
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "gpu-trace-analyzer", "version": r.tool_version},
        "created": r.created.isoformat(),
        "verdict": r.verdict,
        "regression": r.regression,
        "base": _run(r.base),
        "head": _run(r.head),
        "step": _step(r.step, r.settings.confidence),
        "per_step": r.per_step,
        "metrics": [{"key": m.key, "label": m.label, "kind": m.kind, "base": py_value(m.base), "head": py_value(m.head)}
                    for m in r.metrics],
        "findings": {
            "new": [x.rule for x in f if x.status == "new"],
            "resolved": [x.rule for x in f if x.status == "resolved"],
            "uncovered": [x.rule for x in f if x.status == "uncovered"],
            "masked": [x.rule for x in f if x.status == "masked"],
            "hidden": [x.rule for x in f if x.status == "hidden"],
            "changed": [{"rule": x.rule, "base_impact_ns": x.base_impact_ns, "head_impact_ns": x.head_impact_ns}
                        for x in f if x.status == "changed"],
            "unchanged": [x.rule for x in f if x.status == "unchanged"],
            "details": [_finding(x) for x in f],
        },
        "phases": _change_rows(r.phases, "path", None, cpu=True),
        "kernels": _change_rows(r.kernels, "name", "category"),
        "categories": _change_rows(r.categories, "category", None),
        "copies": _change_rows(r.copies, "kind", None),
        "kernel_overlap": py_value(r.kernel_overlap),
        "job": _job(r.job),
        "notes": list(r.notes),
        "settings": {
            "min_effect_pct": r.settings.min_effect_pct,
            "confidence": r.settings.confidence,
            "fail_on_regression_pct": r.settings.fail_on_regression_pct,
            "accepted": sorted(r.settings.accepted),
            "accepted_file": r.settings.accepted_file.path if r.settings.accepted_file is not None else None,
        },
    }


# -- shared text ---------------------------------------------------------------------------------------


def signed_pct(pct: float | None) -> str:
    if pct is None or not math.isfinite(pct):
        return DASH
    text = fmt_pct(pct)
    return text if text.startswith("-") or text == "0%" else f"+{text}"


def delta_text(row: ChangeRow) -> str:
    if row.status == "new":
        return "new"
    if row.status == "gone":
        return "gone"
    if row.base_ns is None or row.head_ns is None:
        return DASH
    d = row.delta_ns
    sign = "+" if d > 0 else "-" if d < 0 else ""
    return f"{sign}{fmt_duration(abs(d))}" + (f" ({signed_pct(row.change_pct)})" if row.change_pct is not None else "")


def cpu_delta_text(row: ChangeRow) -> str:
    d = row.delta_cpu_ns
    sign = "+" if d > 0 else "-" if d < 0 else ""
    return f"{sign}{fmt_duration(abs(d))}"


def metric_value(m: Metric, v: float | None) -> str:
    if v is None:
        return DASH
    if m.kind == "ns":
        return fmt_duration(v)
    if m.kind == "share":
        return fmt_share(v)
    if m.kind == "bytes":
        return fmt_bytes(v)
    return f"{v:,.1f}" if abs(v - round(v)) > 1e-9 else fmt_int(v)


def metric_change(m: Metric) -> str:
    if m.base is None or m.head is None:
        return DASH
    if m.kind == "share":
        d = 100.0 * (m.head - m.base)
        return f"{'+' if d > 0 else ''}{d:.1f} pts" if abs(d) >= 0.05 else "0 pts"
    if m.base == 0:
        return "new" if m.head else DASH
    return signed_pct(100.0 * (m.head / m.base - 1.0))


def impact_text(ns: float | None) -> str:
    return DASH if ns is None else fmt_duration(ns)


def _impact_or_latent(ns: float | None, latent: float | None) -> str:
    """A finding's impact per step, else the rule's time there below its thresholds."""
    if ns is None and latent is not None:
        return f"{fmt_duration(latent)} below threshold"
    return impact_text(ns)


def quantiles(durations: tuple[int, ...]) -> tuple[float, ...] | None:
    if not durations:
        return None
    v = sorted(durations)

    def q(p: float) -> float:
        pos = p * (len(v) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (pos - lo)

    return (v[0], q(0.25), q(0.5), q(0.75), v[-1])


def ci_text(s: StepComparison) -> str:
    if s.change_pct is None:
        return DASH
    if s.ci_low_pct is None:
        return f"{signed_pct(s.change_pct)} (no interval: too few steps)"
    high = signed_pct(s.ci_high_pct) if s.ci_high_pct is not None else "unbounded"
    return f"{signed_pct(s.change_pct)} ({signed_pct(s.ci_low_pct)} .. {high})"


STATUS_WORD = {"faster": "faster (significant)", "slower": "slower (significant)",
               "unchanged": "no significant change", "inconclusive": "inconclusive: too few steps",
               "not-comparable": "not comparable"}


# -- Markdown ------------------------------------------------------------------------------------------


def _md_table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render_diff_markdown(r: DiffResult) -> str:
    """GitHub Markdown; shrinks its tables until it fits :data:`MAX_CHARS`."""
    for rows, name_chars in ((r.settings.rows, 90), (10, 70), (5, 50), (3, 40), (0, 40)):
        text = _markdown(r, rows, name_chars)
        if len(text) <= MAX_CHARS:
            return text
    return truncate(text, MAX_CHARS - 200) + "\n\n(cut to fit a comment)\n"


def _markdown(r: DiffResult, rows: int, chars: int) -> str:
    s = r.step
    unit = "per step" if r.per_step else "per window"
    out = [f"# GPU trace diff: {md_text(r.base.name, 100)} \u2192 {md_text(r.head.name, 100)}", ""]
    icon = {"faster": "\u2705", "slower": "\u274c", "unchanged": "\u2796"}.get(s.status, "\u2753")
    out += [f"{icon} **Verdict:** {md_text(r.verdict, 600)}", ""]
    qb, qh = quantiles(s.base_durations_ns), quantiles(s.head_durations_ns)
    table = [
        ["Step time (median)", _dur(s.base_median_ns), _dur(s.head_median_ns), ci_text(s)],
        ["Steps compared", fmt_int(s.n_base), fmt_int(s.n_head), md_text(STATUS_WORD.get(s.status, s.status))],
    ]
    if qb and qh:
        table.append(["Step time min / p25 / p75 / max", " / ".join(_dur(v) for v in qb[:2] + qb[3:]),
                      " / ".join(_dur(v) for v in qh[:2] + qh[3:]), ""])
    for m in r.metrics:
        table.append([md_text(m.label), metric_value(m, m.base), metric_value(m, m.head), metric_change(m)])
    out += _md_table(["", "BASE", "HEAD", "Change"], table, ["l", "r", "r", "r"])
    out += ["", f"**Why:** {md_text(s.reason, 600)}.", ""]
    out += [f"BASE: {md_code(r.base.path, 160)}{_origin(r.base.input_kind)} \u00b7 {md_text(r.base.steps_description, 160)}  ",
            f"HEAD: {md_code(r.head.path, 160)}{_origin(r.head.input_kind)} \u00b7 {md_text(r.head.steps_description, 160)}", ""]
    if r.notes:
        out += ["**Notes:**", ""] + [f"- {md_text(n, 400)}" for n in r.notes] + [""]
    if r.job is not None:
        out += _md_job(r.job)
    # findings
    out += ["## Findings", ""]
    shown = [f for f in r.findings if f.status != "unchanged"] + [f for f in r.findings if f.status == "unchanged"]
    if shown:
        frows = []
        for f in shown[: max(rows, 5) * 2]:
            status = f.status + (" (accepted)" if f.accepted else "") + (" \u2191" if _grew(f) else "")
            frows.append([md_text(status), f"{md_text(f.id)} {md_text(f.rule)}", md_text(f.severity),
                          _impact_or_latent(f.base_impact_per_step_ns, f.base_latent_per_step_ns),
                          _impact_or_latent(f.head_impact_per_step_ns, f.head_latent_per_step_ns),
                          md_text(f.message, chars * 2)])
        out += _md_table(["Status", "Rule", "Severity", f"BASE impact {unit}", f"HEAD impact {unit}",
                          "Finding (HEAD, else BASE)"], frows, ["l", "l", "l", "r", "r", "l"])
        if len(shown) > max(rows, 5) * 2:
            out.append(f"\n{plural(len(shown) - max(rows, 5) * 2, 'more rule')} not shown.")
    else:
        out.append("No findings in either run.")
    out.append("")
    if rows:
        out += [f"## Where the time moved ({unit})", ""]
        out += _md_changes("NVTX phases", r.phases, rows, chars, phases=True)
        out += _md_changes("Kernels (families: template arguments and numeric suffixes dropped)", r.kernels, rows,
                           chars, detail="Category")
        out += _md_changes("Kernel categories", r.categories, rows, chars)
        out += _md_changes("Copies and memsets", r.copies, rows, chars)
        if s.base_durations_ns and s.head_durations_ns:
            out += ["<details><summary>Step times (ms)</summary>", ""]
            out.append("BASE: " + ", ".join(f"{v / 1e6:.3g}" for v in s.base_durations_ns[:200]))
            out.append("")
            out.append("HEAD: " + ", ".join(f"{v / 1e6:.3g}" for v in s.head_durations_ns[:200]))
            out += ["", "</details>", ""]
    out += [f"<sub>Method: {md_text(s.method, 600)}. gpu-trace-analyzer {md_text(r.tool_version)}.</sub>", ""]
    return "\n".join(out)


def _md_job(j: Any) -> list[str]:
    out = [f"## Job: per rank, per step ({j.base_world} ranks \u2192 {j.head_world})", ""]
    if j.moved:
        out += ["**What moved:**", ""] + [f"- {md_text(m, 300)}" for m in j.moved] + [""]
    else:
        out += ["Nothing moved between the ranks: no straggler appeared or went, no rank's compute, waiting or "
                "exposed communication changed by a sizeable share of the step.", ""]
    header = ["Rank"] + [f"{label} {side}" for _, label in JOB_COLUMNS for side in ("BASE", "HEAD")]
    body = [[str(rank)] + [v for pair in cells for v in pair] for rank, cells in job_cells(j)[:64]]
    out += _md_table(header, body, ["l"] + ["r"] * (len(header) - 1))
    out += ["", "<sub>Step: the rank's mean step time; the job's step time is the slowest rank's per step. "
            "Exposed communication: communication kernels with no compute beside them, less the time they waited "
            "for other ranks (that is in the waiting columns).</sub>", ""]
    return out


def _origin(kind: str) -> str:
    return " (JSON report)" if kind == "report" else ""


def _dur(ns: float | None) -> str:
    return DASH if ns is None else fmt_duration(ns)


def _grew(f: FindingChange) -> bool:
    from analyzer.diff.compare import worse

    return worse(f)


def _md_changes(title: str, t: ChangeTable, rows: int, chars: int, *, phases: bool = False,
                detail: str | None = None) -> list[str]:
    if not t.total_rows:
        return []
    out = [f"### {title}", ""]
    moved = [r for r in t.rows if r.status != "same"][:rows]
    if not moved:
        nothing = (f"Nothing moved by more than {fmt_pct(100 * NEGLIGIBLE_STEP_SHARE)} of a step "
                   f"(or {fmt_pct(NEGLIGIBLE_PCT)} of itself) among {plural(t.total_rows, 'row')}.")
        return [*out, nothing, ""]
    if phases:
        header = ["NVTX range", "GPU BASE", "GPU HEAD", "GPU change", "CPU BASE", "CPU HEAD", "CPU change"]
        body = [[md_code(x.label, chars, cell=True), _dur(x.base_ns), _dur(x.head_ns), delta_text(x),
                 _dur(x.base_cpu_ns), _dur(x.head_cpu_ns), cpu_delta_text(x)] for x in moved]
        out += _md_table(header, body, ["l", "r", "r", "r", "r", "r", "r"])
    else:
        header = ["Name"] + ([detail] if detail else []) + ["BASE", "HEAD", "Change", "Calls BASE", "Calls HEAD"]
        body = [[md_code(x.label, chars, cell=True)] + ([md_text(x.detail, 30)] if detail else [])
                + [_dur(x.base_ns), _dur(x.head_ns), delta_text(x), _count(x.base_count), _count(x.head_count)]
                for x in moved]
        out += _md_table(header, body, ["l"] + (["l"] if detail else []) + ["r"] * 5)
    if t.total_rows > len(moved):
        out.append(f"\n{len(moved)} of {t.total_rows} compared, by absolute change.")
    extra = []
    if t.new:
        extra.append("only in HEAD: " + ", ".join(md_code(n, 60) for n in t.new[:8])
                     + (f" and {len(t.new) - 8} more" if len(t.new) > 8 else ""))
    if t.gone:
        extra.append("only in BASE: " + ", ".join(md_code(n, 60) for n in t.gone[:8])
                     + (f" and {len(t.gone) - 8} more" if len(t.gone) > 8 else ""))
    if extra:
        out += ["", "; ".join(extra)]
    return out + [""]


def _count(v: float | None) -> str:
    if v is None:
        return DASH
    return f"{v:,.1f}" if abs(v - round(v)) > 1e-9 else fmt_int(v)


# -- HTML ----------------------------------------------------------------------------------------------


def render_diff_html(r: DiffResult) -> str:
    from analyzer.reports.html import environment, stylesheet
    from analyzer.reports.svg import steps_svg

    template = environment().get_template("diff.html.j2")
    helpers: dict[str, Callable[..., Any]] = {
        "delta": delta_text, "cpu_delta": cpu_delta_text, "metric_value": metric_value,
        "metric_change": metric_change, "impact": impact_text, "latent": _impact_or_latent, "dur": _dur, "count": _count,
        "ci": ci_text, "signed": signed_pct, "grew": _grew, "job_cells": job_cells,
    }
    return template.render(r=r, css=stylesheet(), status_word=STATUS_WORD, steps_chart=steps_svg(r.step),
                           negligible_step=NEGLIGIBLE_STEP_SHARE, job_columns=JOB_COLUMNS, **helpers)
