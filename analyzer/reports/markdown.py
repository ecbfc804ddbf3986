"""GitHub-flavoured Markdown rendering, for pull-request comments.

Always under :data:`MAX_CHARS` (GitHub rejects longer comments): when the full rendering is too long it
degrades step by step (fewer evidence rows, no evidence, fewer ``<details>`` blocks, fewer table rows,
no overview) and says what it left out. Every string from the trace is escaped for the context it lands
in: Markdown text (backslash escapes, never HTML entities), code spans (a fence longer than any backtick run
inside) or raw HTML inside ``<summary>``; mentions and autolinks are broken by an invisible joiner.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from analyzer.reports.format import (
    DASH, fmt_cell, fmt_duration, fmt_impact_pct, fmt_share, fmt_time, inert_text, plural, truncate,
)
from analyzer.reports.viewmodel import (
    PHASE_CORE_COLUMNS,
    FindingView,
    Link,
    ReportView,
    Table,
    TraceSection,
    cause_label,
)

MAX_CHARS = 65_000

_MD_PUNCT = re.compile(r"([\\`*_\[\]|~<&])")
_LEADING = re.compile(r"^(\s*)([#+\-=>]|\d+[.)](?=\s|$))")
_URL = re.compile(r"^https?://[^\s<>()\[\]|`\"'\\]+$")
#: U+200D ZERO WIDTH JOINER: invisible, and it breaks what GitHub would turn into a mention (``@user``,
#: ``@org/team``), an e-mail link (``a@b.org``) or an autolink (``www.x``, ``https://x``, ``ftp://x``)
ZWJ = "\u200d"
_ACTIVE = re.compile(r"@|(?i:www(?=\.)|(?:https?|ftp|mailto|xmpp)(?=:))")


def neutralise(text: str) -> str:
    """``text`` with every ``@`` mention, e-mail address and bare-URL autolink broken by an invisible
    :data:`ZWJ` (on both sides of ``@``: an e-mail's local part must not touch it), so a posted comment
    pings nobody and links nothing; the reader sees the same text."""
    return _ACTIVE.sub(lambda m: (ZWJ + "@" if m.group(0) == "@" else m.group(0)) + ZWJ, text)


def md_text(value: object, limit: int = 0, *, block: bool = False) -> str:
    """Escape text for a Markdown table cell or inline text: one line, no active Markdown or HTML, no
    mention or link. Backslash escapes only (no HTML entities, so the raw Markdown reads as the text).
    ``block``: the text starts a paragraph, so a leading ``#``, ``-``, ``+``, ``=``, ``>`` or ``1.``
    is escaped too (it would start a heading, a list or a quote; ``>`` is inert elsewhere, ``<`` never is)."""
    text = " ".join(inert_text(str(value)).split())
    if limit:
        text = truncate(text, limit)
    return _escape(text, block)


def _escape(text: str, block: bool = False, *, inert: bool = True) -> str:
    text = _MD_PUNCT.sub(r"\\\1", text)
    if inert:
        text = neutralise(text)
    if block:
        text = _LEADING.sub(
            lambda m: m.group(1) + (m.group(2)[:-1] + "\\" + m.group(2)[-1] if m.group(2)[0].isdigit()
                                    else "\\" + m.group(2)),
            text,
        )
    return text


def md_code(value: object, limit: int = 0, *, cell: bool = False) -> str:
    """``value`` as an inline code span, verbatim: nothing inside a code span is active (no escapes,
    no HTML, no mention, no link), so the text goes in unescaped, fenced by a run of backticks longer
    than any inside it (and padded with a space where it starts or ends with a backtick). ``cell``: the
    span sits in a table cell, where GFM splits on ``|`` before it sees code spans, so ``|`` is ``\\|``."""
    text = " ".join(inert_text(str(value)).split())
    if limit:
        text = truncate(text, limit)
    if not text:
        return ""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    if cell:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def md_prose(value: object, limit: int = 0) -> str:
    """Escape a rule's prose (what / why / fix) like :func:`md_text`, but keep its code spans
    (```torch.compile```) as code spans (:func:`md_code`), so GitHub shows them as code."""
    text = " ".join(inert_text(str(value)).split())
    if limit:
        text = truncate(text, limit)
    out: list[str] = []
    pos = 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_escape(text[pos:m.start()], block=not out))
        out.append(md_code(m.group(1)))
        pos = m.end()
    out.append(_escape(text[pos:], block=not out))
    return "".join(out)


def html_text(value: object, limit: int = 0) -> str:
    """Escape text for raw HTML inside Markdown (``<summary>``): entities only, one line; mentions and
    e-mail addresses neutralised (GitHub looks for them in HTML text too)."""
    text = " ".join(inert_text(str(value)).split())
    if limit:
        text = truncate(text, limit)
    return neutralise(html.escape(text, quote=True))


def _ref(ref: str) -> str:
    if _URL.match(ref):
        return f"[{_escape(ref, inert=False)}]({ref})"  # the pack's own link: its text needs no joiner
    return md_text(ref, 300)


@dataclass(frozen=True)
class _Level:
    """How much to show; levels get smaller until the document fits."""

    evidence_rows: int
    details: int  # findings with a <details> block
    table_rows: int  # rows of the findings table
    text_chars: int  # longest message / what / why / fix
    overview_rows: int  # rows of the overview tables (0: no overview)


_LEVELS = (
    _Level(25, 10_000, 10_000, 2_000, 10),
    _Level(10, 10_000, 10_000, 1_000, 10),
    _Level(5, 10_000, 10_000, 600, 10),
    _Level(0, 10_000, 10_000, 600, 10),
    _Level(0, 40, 10_000, 400, 5),
    _Level(0, 15, 300, 300, 5),
    _Level(0, 5, 100, 200, 0),
    _Level(0, 0, 40, 160, 0),
    _Level(0, 0, 10, 120, 0),
)


def _cell(value: object, kind: str) -> str:
    if isinstance(value, Link):
        return md_text(value.text, 120)
    return md_text(fmt_cell(value, kind), 120)


def _table(t: Table, rows: int) -> list[str]:
    if not t.columns:
        return []
    head = "| " + " | ".join(md_text(c.label) for c in t.columns) + " |"
    rule = "|" + "|".join("---:" if c.numeric else "---" for c in t.columns) + "|"
    lines = [head, rule]
    for row in t.rows[:rows]:
        lines.append("| " + " | ".join(_cell(v, c.kind) for v, c in zip(row, t.columns)) + " |")
    left = t.total_rows - min(rows, len(t.rows))
    if left > 0:
        lines += ["", f"_{plural(left, 'more row')} not shown._"]
    return lines


def _narrow(t: Table, keys: tuple[str, ...]) -> Table:
    """``t`` with only the columns in ``keys`` (all of them when none is)."""
    keep = [i for i, c in enumerate(t.columns) if c.key in keys]
    if not keep:
        return t
    return Table(tuple(t.columns[i] for i in keep), tuple(tuple(r[i] for i in keep) for r in t.rows),
                 t.total_rows, t.caption)


def _finding_details(f: FindingView, level: _Level) -> list[str]:
    summary = (
        f"<b>{f.rank}. {html_text(f.severity.upper())} {html_text(f.id)}: {html_text(f.title, 200)}</b>"
        f" &mdash; {html_text(f.impact_text)} ({html_text(f.impact_pct_text)})"
    )
    if f.accepted:
        summary += " &mdash; " + ("accepted" if f.accepted == "accepted" else "<b>grew past its acceptance</b>")
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    lines += [md_text(f.message, level.text_chars, block=True), ""]
    if f.symptom:
        lines += [f"**A symptom, not added to the total:** {md_text(f.explained, level.text_chars)}", ""]
    if f.accepted:
        note = f.accepted_note[:1].upper() + f.accepted_note[1:]
        lines += [f"**{md_text(note, 400)}**" if f.accepted == "grown" else f"_{md_text(note, 400)}_", ""]
    lines += [f"Scope: {md_text(f.scope, 300)} · category: {md_text(f.category)} · rule: {md_text(f.rule)}", ""]
    if f.evidence.columns:
        if level.evidence_rows > 0:
            lines += _table(f.evidence, level.evidence_rows) + [""]
        elif f.evidence.total_rows:
            lines += [(f"_Evidence ({plural(f.evidence.total_rows, 'row')}) left out to fit the comment; "
                      "see the HTML or JSON report._"), ""]
    for label, text in (("What", f.what), ("Why", f.why), ("Fix", f.fix)):
        if text:
            lines += [f"**{label}:** {md_prose(text, level.text_chars)}", ""]
    if f.explained_by:
        lines += ["Explained by: " + ", ".join(md_text(link.text, 120) for link in f.explained_by), ""]
    if f.references:
        lines += ["References: " + " · ".join(_ref(r) for r in f.references[:8]), ""]
    lines += ["</details>", ""]
    return lines


def _breakdown(s: TraceSection) -> list[str]:
    """Where each GPU's window went (the timeline breakdown): one compact table, a row per cause."""
    lines: list[str] = []
    for b in s.breakdown:
        total = b.window.total_ns or 1
        lines += [f"**Where GPU {b.device}'s time went** ({fmt_duration(b.window.total_ns)}, every nanosecond "
                  "has one cause):", "",
                  "| Cause | Time | % of window | Largest part |", "|---|---:|---:|---|"]
        # each cause's largest detail over the whole window (the details table shown is capped)
        largest: dict[str, tuple[str, int]] = {c: (d, ns) for c, d, ns in b.largest}
        for cause, ns in sorted(b.window.parts, key=lambda p: -p[1]):
            part = largest.get(cause)
            part_text = f"{md_text(part[0], 60)} ({fmt_duration(part[1])})" if part else DASH
            lines.append(f"| {md_text(cause_label(cause))} | {fmt_duration(ns)} | {fmt_impact_pct(100.0 * ns / total)} | "
                         f"{part_text} |")
        lines.append("")
    lines += ["> " + md_text(n, 600) for n in s.breakdown_notes] + ([""] if s.breakdown_notes else [])
    return lines


def _section(s: TraceSection, level: _Level, multi: bool) -> list[str]:
    h = s.header
    label = "Nsight Compute report" if s.kind == "ncu" else "Trace"
    lines = [f"## {md_text(h.trace_name, 200)}" if multi else f"**{label}:** {md_text(h.trace_name, 200)}", ""]
    if s.kind == "ncu":
        facts = [
            f"GPU: {md_text(h.gpus, 200)}",
            md_text(h.window_description, 300),
            f"profiled kernel time: {fmt_duration(h.kernel_ns)}",
        ]
    else:
        facts = [
            f"GPU: {md_text(h.gpus, 200)}",
            *([f"rank {h.rank}" + (f" of {h.world_size}" if h.world_size else "")] if h.rank is not None else []),
            (f"window: {fmt_time(h.window_start_ns)} – {fmt_time(h.window_end_ns)} ({md_text(h.window_source)}: "
             f"{md_text(h.window_description, 300)})"),
            f"analyzed: {fmt_duration(h.analyzed_ns)}",
            f"GPU busy: {fmt_share(h.gpu_busy_share)}",
            f"kernel time: {fmt_duration(h.kernel_ns)}",
        ]
    lines += [" · ".join(facts), ""]
    if s.memory is not None:
        lines += [f"**Memory:** {md_text(line, 600)}" + ("  " if i + 1 < len(s.memory.lines) else "")
                  for i, line in enumerate(s.memory.lines)] + [""]
        lines += ["> " + md_text(n, 300) for n in s.memory.notes] + ([""] if s.memory.notes else [])
    if multi:
        lines += [f"**Verdict:** {md_text(h.verdict, 400)}", ""]
    if s.notes:
        lines += ["> " + md_text(n, 300) for n in s.notes] + [""]
    if not s.findings:
        if not h.rules_file:
            lines += ["No findings (no rule pack was run).", ""]
        elif s.kind == "ncu":
            lines += ["No findings: every rule that applies to an Nsight Compute report passed.", ""]
        else:
            every = "every rule that could be checked" if s.not_checked else "every rule"
            lines += [f"No findings: {every} passed on this window.", ""]
    else:
        lines += [
            "| # | Severity | Rule | Impact (ms) | % of window | Finding |",
            "|---:|---|---|---:|---:|---|",
        ]
        for f in s.findings[: level.table_rows]:
            ms = DASH if f.impact_ns is None else f"{f.impact_ns / 1e6:,.1f}"
            pct = DASH if f.impact_pct is None else f"{f.impact_pct:.1f}%"
            severity = f"**{md_text(f.severity)}**"
            if f.accepted == "accepted":
                severity = f"{md_text(f.severity)} (accepted)"
            elif f.accepted == "grown":
                severity += " (grew past acceptance)"
            message = md_text(f.message, min(level.text_chars, 300))
            if f.symptom:
                severity += " (symptom)"
                message = f"Symptom: {md_text(f.explained, 300)}. {message}"
            lines.append(
                f"| {f.rank} | {severity} | {md_text(f.id)} {md_text(f.rule, 60)} | {ms} | {pct} | {message} |"
            )
        left = s.findings_total - min(level.table_rows, len(s.findings))
        if left > 0:
            lines += ["", f"_{plural(left, 'more finding')} not listed._"]
        if h.tally:
            lines += ["", f"_{md_text(h.tally, 400)}_"]
        lines.append("")
    lines += _breakdown(s)
    if s.findings:
        for f in s.findings[: level.details]:
            lines += _finding_details(f, level)
        if level.details < len(s.findings):
            lines += [(f"_Details of {plural(len(s.findings) - level.details, 'finding')} left out to fit the "
                      "comment; see the HTML or JSON report._"), ""]
    if s.not_checked:
        lines += [f"**Not available in this trace** ({plural(len(s.not_checked), 'rule')} not run: the trace "
                  "lacks data they need):", ""]
        lines += [f"- {md_text(n.id)} {md_text(n.rule, 60)}: {md_text(n.reason, 300)}" for n in s.not_checked]
        lines.append("")
    if s.not_applicable:
        lines += [f"<details>\n<summary>{plural(len(s.not_applicable), 'rule')} not applicable: "
                  f"{html_text(s.not_applicable_reason)}</summary>", "",
                  ", ".join(md_text(r) for r in s.not_applicable), "", "</details>", ""]
    if s.signals is not None:
        sig = s.signals
        lines += ["> " + md_text(n, 400) for n in sig.notes] + ([""] if sig.notes else [])
        for title, table in ((sig.code_locations_title, sig.code_locations),
                             ("Measured GPU activity", sig.gpu_metrics), ("Energy", sig.energy)):
            if table is not None and table.rows:
                lines += ["<details>", f"<summary>{title}</summary>", ""]
                lines += _table(table, max(level.overview_rows, 5)) + ["", "</details>", ""]
    if s.memory is not None and s.memory.steps is not None and s.memory.steps.rows:
        lines += ["<details>", "<summary>Peak memory per step</summary>", ""]
        lines += _table(s.memory.steps, max(level.overview_rows, 5)) + ["", "</details>", ""]
    if level.overview_rows:
        if s.ncu is not None and s.kind == "ncu":
            lines += ["<details>", "<summary>Nsight Compute: per-kernel metrics</summary>", ""]
            lines += _table(s.ncu, level.overview_rows) + ["", "</details>", ""]
        if s.ncu_rules is not None:
            lines += ["<details>", "<summary>What Nsight Compute's own rules said</summary>", ""]
            lines += _table(s.ncu_rules, level.overview_rows) + ["", "</details>", ""]
        if s.categories and s.category_table:
            lines += ["<details>", "<summary>GPU time by kernel category</summary>", ""]
            lines += _table(s.category_table, level.overview_rows) + ["", "</details>", ""]
        if s.top_kernels:
            lines += ["<details>", "<summary>Top kernels</summary>", ""]
            lines += _table(s.top_kernels, level.overview_rows) + ["", "</details>", ""]
        if s.phases and s.phases.rows:
            lines += ["<details>", "<summary>Phases (NVTX ranges): CPU wall, GPU time, GPU span</summary>", ""]
            if s.phases.caption:
                lines += [md_text(s.phases.caption, 1200), ""]
            lines += _table(_narrow(s.phases, PHASE_CORE_COLUMNS), level.overview_rows) + ["", "</details>", ""]
    return lines


def _job(job: Any, level: _Level) -> list[str]:
    """The job part: numbering, per-rank table, job findings, collectives."""
    lines = [f"## Job: {job.ranks_given} of {job.world_size} ranks", "",
             f"Ranks numbered {md_text(job.numbering, 200)}; job window {fmt_duration(job.window_end_ns - job.window_start_ns)}"
             f" ({job.steps_text}, {md_text(job.window_description, 200)}).", ""]
    if job.notes:
        lines += ["> " + md_text(n, 300) for n in job.notes] + [""]
    lines += _table(job.ranks, 64) + [""]
    if job.findings:
        lines += ["| # | Severity | Rule | Impact (ms) | % of window | Finding |", "|---:|---|---|---:|---:|---|"]
        for f in job.findings[: level.table_rows]:
            ms = DASH if f.impact_ns is None else f"{f.impact_ns / 1e6:,.1f}"
            pct = DASH if f.impact_pct is None else f"{f.impact_pct:.1f}%"
            lines.append(f"| {f.rank} | **{md_text(f.severity)}** | {md_text(f.id)} {md_text(f.rule, 60)} | {ms} | "
                         f"{pct} | {md_text(f.message, min(level.text_chars, 400))} |")
        lines.append("")
        for f in job.findings[: level.details]:
            lines += _finding_details(f, level)
    else:
        lines += ["No job-level findings (straggler, rank imbalance, collective bandwidth).", ""]
    if job.collectives is not None and level.overview_rows:
        lines += ["<details>", f"<summary>Collectives ({html_text(job.link, 200)})</summary>", ""]
        lines += _table(job.collectives, level.overview_rows) + ["", "</details>", ""]
    return lines


def _render(report: ReportView, level: _Level) -> str:
    multi = len(report.traces) > 1
    lines = [f"# {md_text(report.title, 200)}", "", f"**Verdict:** {md_text(report.verdict, 500)}", ""]
    if report.comparison is not None:
        lines += _table(report.comparison, 50) + [""]
    if report.job is not None:
        lines += _job(report.job, level)
    for s in report.traces:
        lines += _section(s, level, multi)
    if level != _LEVELS[0]:
        lines += [("_This comment was shortened to fit GitHub's size limit; the HTML and JSON reports have "
                  "everything._"), ""]
    lines.append(f"<sub>gpu-trace-analyzer {html_text(report.tool_version)} · "
                 f"{report.created.strftime('%Y-%m-%d %H:%M:%S UTC')}</sub>")
    return "\n".join(lines) + "\n"


def render_markdown(report: ReportView, max_chars: int = MAX_CHARS) -> str:
    """The report as GitHub-flavoured Markdown, at most ``max_chars`` characters."""
    text = ""
    for level in _LEVELS:
        text = _render(report, level)
        if len(text) <= max_chars:
            return text
    note = "\n\n_Report cut here to fit GitHub's size limit; see the HTML or JSON report._\n"
    return text[: max(0, max_chars - len(note))] + note
