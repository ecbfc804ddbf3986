"""The findings table and the verdict line: findings as shown (ranked, anchored, evidence capped), the
verdict's one line and how its total was summed.
"""
from __future__ import annotations

from dataclasses import replace

from analyzer.findings import Finding, Severity
from analyzer.impacts import Explained, Tally, add_up, is_problem, is_symptom
from analyzer.reports.format import fmt_duration, fmt_impact_pct, fmt_ms, fmt_share, plural
from analyzer.reports.sections.common import cell_value, evidence_kind, honest_column, labelize
from analyzer.reports.values import Link
from analyzer.reports.values import py_value as _py
from analyzer.reports.viewmodel import Column, EvidenceTable, FindingView, Limits


def finding_views(
    findings: list[Finding], window_ns: int, prefix: str, limits: Limits, sums: Tally | None = None
) -> tuple[tuple[FindingView, ...], dict[str, str]]:
    """The findings as the table shows them; ``sums``: their :func:`analyzer.impacts.add_up`, when the
    caller also builds the verdict from it (computed here otherwise)."""
    sums = sums if sums is not None else add_up(findings)
    ranked = list(sums.ordered)
    anchors: dict[str, str] = {}
    seen: dict[str, int] = {}
    for f in ranked:
        base = f"{prefix}{f.key}"
        n = seen.get(base, 0) + 1
        seen[base] = n
        anchors.setdefault(f.key, base if n == 1 else f"{base}-{n}")
    titles = {f.key: f.title for f in ranked}
    for f in ranked:  # a relation may name a finding by its rule instead of its key
        anchors.setdefault(f.rule, anchors[f.key])
        titles.setdefault(f.rule, f.title)
    shown = ranked[: limits.findings]
    views = []
    seen.clear()
    for i, f in enumerate(shown, start=1):
        base = f"{prefix}{f.key}"
        n = seen.get(base, 0) + 1
        seen[base] = n
        anchor = base if n == 1 else f"{base}-{n}"
        rows = tuple(
            tuple(cell_value(v, limits.cell_chars) for v in row[: len(f.evidence_columns)])
            for row in f.evidence[: limits.evidence_rows]
        )
        kinds = [evidence_kind(c, (r[i] for r in rows if i < len(r))) for i, c in enumerate(f.evidence_columns)]
        columns = tuple(
            honest_column(Column(c, labelize(c, k), k), (r[i] for r in rows if i < len(r)))
            for i, (c, k) in enumerate(zip(f.evidence_columns, kinds))
        )
        # a column empty in every shown row says nothing (the JSON record keeps it)
        keep = [i for i in range(len(columns)) if any(i < len(r) and r[i] not in (None, "") for r in rows)]
        if rows and len(keep) < len(columns):
            columns = tuple(columns[i] for i in keep)
            rows = tuple(tuple(r[i] for i in keep) for r in rows)
        total = max(int(f.evidence_total or 0), len(f.evidence))
        evidence = EvidenceTable(columns, rows, total)
        impact_pct = f.impact_pct
        if impact_pct is None and f.impact_ns is not None and window_ns > 0:
            impact_pct = 100.0 * f.impact_ns / window_ns
        record = replace(f, evidence=tuple(f.evidence[: limits.evidence_rows])).to_dict()
        record["evidence"] = {
            "columns": list(f.evidence_columns),
            "rows": [[_py(v) for v in row] for row in f.evidence[: limits.evidence_rows]],
            "total_rows": total,
        }
        record = {k: _py(v) if k in ("metrics", "impact_pct", "impact_ns") else v for k, v in record.items()}
        record["scope"] = _py(record["scope"])
        record["adds_ns"] = sums.adds_ns(f)
        explained = ""
        if is_symptom(f):
            ex = sums.explanation(f)
            explained = _explained_text(ex, window_ns)
            record["explained"] = {
                "explained_ns": ex.explained_ns,
                "unexplained_ns": ex.unexplained_ns,
                "by": [{"key": c.key, "rule": c.rule, "range": c.scope.nvtx_path or "", "ns": ns}
                       for c, ns in ex.parts],
            }
        views.append(
            FindingView(
                anchor=anchor,
                key=f.key,
                rank=i,
                rule=f.rule,
                id=f.id,
                severity=str(f.severity),
                title=f.title,
                message=f.message,
                category=f.category,
                scope=f.scope.label(),
                impact_ns=None if f.impact_ns is None else int(f.impact_ns),
                impact_pct=None if impact_pct is None else float(impact_pct),
                evidence=evidence,
                what=f.what,
                why=f.why,
                fix=f.fix,
                references=tuple(f.references),
                explains=tuple(Link(titles.get(k, k), anchors.get(k, f"{prefix}{k}")) for k in f.explains),
                explained_by=tuple(
                    Link(titles.get(k, k), anchors.get(k, f"{prefix}{k}")) for k in f.explained_by
                ),
                record=record,
                fingerprint=f.fingerprint,
                accepted="" if f.acceptance is None else ("grown" if f.acceptance.counts else "accepted"),
                accepted_note="" if f.acceptance is None else f.acceptance.note(),
                kind=f.kind,
                adds_ns=sums.adds_ns(f),
                explained=explained,
            )
        )
    return tuple(views), anchors


def _share(ns: int, window_ns: int) -> str:
    return fmt_impact_pct(100.0 * ns / window_ns) if window_ns > 0 else fmt_ms(ns)


def cause_name(rule: str, nvtx_range: str | None) -> str:
    """How a cause is named in a symptom's explanation: its rule, and the NVTX range of a finding stated
    per range (``launch-bound in step_N/optimizer``)."""
    return f"{rule} in {nvtx_range}" if nvtx_range else rule


def _explained_text(ex: Explained, window_ns: int) -> str:
    """``"55.9% of the window explained by gpu-idle-gaps (54.1%), pageable-memcpy (1.8%); 1.2% not"``:
    shares of the window, as the findings table shows impacts."""
    if not ex.parts:
        return "no finding explains it"
    shown = [(f, ns) for f, ns in ex.parts if _share(ns, window_ns) != fmt_impact_pct(0)] or list(ex.parts[:1])
    parts = ", ".join(f"{cause_name(f.rule, f.scope.nvtx_path)} ({_share(ns, window_ns)})" for f, ns in shown)
    text = f"{_share(ex.explained_ns, window_ns)} explained by {parts}"
    rest = _share(ex.unexplained_ns, window_ns)
    if ex.unexplained_ns > 0 and rest != fmt_impact_pct(0):
        text += f"; {rest} not explained"
    return text


def verdict_text(findings: list[Finding], window_ns: int, busy_share: float | None,
             devices: int = 1, not_checked: int = 0, sums: Tally | None = None) -> tuple[str, int, int | None]:
    """One line: what is wrong, in plain words, and what it is worth.

    It leads with the biggest cause (the first row of the findings table: :func:`analyzer.impacts.report_order`) in
    its rule's plain words (``verdict:``), then the total: the union of the counted causes' time
    (:mod:`analyzer.impacts`: time two findings share counts once), and what the causes explain of each
    symptom (low utilization...), which is never added. Percentages are of the analysis window (of
    the window times the GPUs when several did work). ``not_checked``: rules not run for want of data;
    without problems the line says so instead of a plain "No problems found". ``sums``: the findings'
    :func:`analyzer.impacts.add_up` when the caller holds it (computed here otherwise)."""
    sums = sums if sums is not None else add_up(findings)
    accepted = sum(1 for f in findings if f.severity >= Severity.WARNING and not f.counts)
    ordered = list(sums.ordered)
    problems = list(sums.causes)
    symptoms = [f for f in ordered if is_symptom(f)]
    notes = sum(1 for f in findings if f.severity < Severity.WARNING)
    if not problems:
        if symptoms:
            s = symptoms[0]
            text = f"No cause found for the symptom: {s.headline or s.message}"
            grown_symptoms = sum(1 for f in symptoms if f.acceptance is not None)
            if grown_symptoms:
                text += f"; {grown_symptoms} grew past {'its' if grown_symptoms == 1 else 'their'} acceptance"
        else:
            text = f"No {'new ' if accepted else ''}problems found in {fmt_duration(window_ns)} analyzed"
        if not_checked and not symptoms:
            text = (f"{plural(not_checked, 'rule')} not run (see 'Not available'); the others found no "
                    f"{'new ' if accepted else ''}problem in {fmt_duration(window_ns)} analyzed")
        if busy_share is not None:
            text += f"; GPU busy {fmt_share(busy_share)}"
        if accepted:
            text += f"; {plural(accepted, 'accepted finding')}"
        if notes:
            text += f"; {plural(notes, 'note')}"
        return text, 0, None
    biggest = problems[0]
    grown = sum(1 for f in problems if f.acceptance is not None)
    kind = "new problem" if accepted and not grown else "problem"
    extra = [f"{grown} grew past {'its' if grown == 1 else 'their'} acceptance"] if grown else []
    if accepted:
        extra.append(f"{plural(accepted, 'accepted finding')} not counted")
    also = "; " + ", ".join(extra) if extra else ""
    lead = f"{biggest.headline}. " if biggest.headline else ""
    with_impact = [f for f in problems if f.impact_ns is not None]
    if not with_impact:
        return (f"{lead}{plural(len(problems), kind)} (impact not estimable); biggest: {biggest.title}{also}",
                len(problems), None)
    total = sums.total_ns
    span = window_ns * max(devices, 1)
    if span > 0:
        total = min(total, span)
    of = "the analyzed GPU time" if devices > 1 else "the analyzed time"
    pct = f" ({fmt_impact_pct(100.0 * total / span)} of {of}, overlaps counted once)" if span > 0 else ""
    named = "" if biggest.headline else f"; biggest: {biggest.title}"
    text = f"{lead}{plural(len(problems), kind)} worth {fmt_ms(total)}{pct}{named}{also}"
    for s in symptoms[:1]:  # the biggest symptom; the others are listed with what explains them
        ex = sums.explanation(s)
        what = s.headline or s.title
        text += f"; {what}: {_explained_text(ex, window_ns)}"
    return text, len(problems), total


def impact_tally(findings: list[Finding], total: int | None) -> tuple[int | None, str]:
    """The plain sum of the counted causes' impacts and one sentence saying how the verdict's total
    (their union, ``total``) was summed."""
    problems = [f for f in findings if is_problem(f) and f.impact_ns is not None]
    if total is None or not problems:
        return None, ""
    summed = sum(int(f.impact_ns or 0) for f in problems)
    n = plural(len(problems), "problem")
    if len(problems) == 1:
        return summed, f"The total is the impact of the 1 problem ({fmt_ms(total)})."
    if summed <= total:
        return summed, (f"The total is the union of the {n}' time on the GPU timeline: "
                        f"{fmt_ms(total)}, their impacts added (no two of them share time).")
    return summed, (f"The total is the union of the {n}' time on the GPU timeline: their impacts add up to "
                    f"{fmt_ms(summed)}, of which {fmt_ms(summed - total)} is time they share, counted once.")
