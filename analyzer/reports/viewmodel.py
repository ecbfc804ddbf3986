"""The report view model: typed, frozen, small. Built once from ``list[Analysis]``; rendered three ways.

Everything a rendering shows is decided here (what to show, in which order, capped how); the HTML,
Markdown and JSON renderers only format. The view model holds aggregates and capped tables only, so a
report of a 10M-kernel trace is as small as one of a 10-kernel trace.

A fact that is not registered yet (``facts.get`` raises :class:`~analyzer.facts.registry.UnknownFactError`) or that lacks a column this module
needs does not fail the report: its section is omitted and :attr:`TraceSection.notes` says why. The
optional ``phases`` fact and Nsight Compute data (``Analysis.ncu``) add sections only when present.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis
from analyzer.facts.registry import UnknownFactError
from analyzer.findings import Finding, Severity
from analyzer.impacts import Explained, explain, is_problem, is_symptom, report_order, union_adds
from analyzer.reports.format import (
    cap_text,
    fmt_bytes,
    fmt_duration,
    fmt_impact_pct,
    fmt_ms,
    fmt_share,
    plural,
    truncate,
)
from analyzer.reports.values import Link
from analyzer.reports.values import flat_parameters as _flat_parameters
from analyzer.reports.values import gpu_label as _gpu_label
from analyzer.reports.values import py_value as _py

# ---------------------------------------------------------------------------------------------------
# Limits


@dataclass(frozen=True)
class Limits:
    """Caps that keep every report small whatever the trace size. Rows past a cap are counted and
    reported as "N more rows not shown"."""

    evidence_rows: int = 25  # per finding, HTML and JSON (Markdown cuts further when it must)
    findings: int = 300  # findings shown per trace (the rest are counted)
    top_kernels: int = 25
    categories: int = 20
    nvtx_rows: int = 30
    nvtx_chart_rows: int = 12
    gap_rows: int = 15
    phase_rows: int = 60
    ncu_rows: int = 40
    roofline_points: int = 300
    util_bins: int = 160  # bins per device in the utilization chart (facts' bins are merged to fit)
    devices: int = 16  # devices drawn in the utilization chart
    chart_gaps: int = 200  # idle gaps marked under the utilization chart (longest first)
    nvtx_lane_threads: int = 2  # lanes of top-level NVTX ranges under the utilization chart
    nvtx_lane_ranges: int = 150  # ranges drawn per lane (longest first)
    cell_chars: int = 240  # longest text shown in one table cell
    breakdown_steps: int = 60  # steps drawn per GPU in the breakdown chart (the first ones)
    breakdown_ranges: int = 12  # NVTX ranges drawn per GPU in the breakdown chart (most time first)
    breakdown_details: int = 20  # rows of the breakdown's detail table per GPU


# ---------------------------------------------------------------------------------------------------
# Tables

CellValue = Any  # str | int | float | None | Link


@dataclass(frozen=True)
class Column:
    """One table column. ``kind`` picks the formatting (see :func:`analyzer.reports.format.fmt_cell`):
    text | code | ns | ms | time | pct | share | int | float | bytes | flops | bandwidth | intensity | auto.
    """

    key: str
    label: str
    kind: str = "auto"

    @property
    def numeric(self) -> bool:
        return self.kind not in ("text", "code")


@dataclass(frozen=True)
class Table:
    """A capped table: ``rows`` are the first rows shown, ``total_rows`` how many there were."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[CellValue, ...], ...]
    total_rows: int
    caption: str = ""

    @property
    def omitted(self) -> int:
        return max(0, self.total_rows - len(self.rows))

    @property
    def omitted_note(self) -> str:
        return f"{plural(self.omitted, 'more row')} not shown" if self.omitted else ""

    def records(self) -> list[dict[str, CellValue]]:
        """Rows as ``{column key: value}`` dicts (links as their text), in column order."""
        keys = [c.key for c in self.columns]
        return [{k: (str(v) if isinstance(v, Link) else v) for k, v in zip(keys, row)} for row in self.rows]

    def head(self, n: int) -> Table:
        """The same table with at most ``n`` rows (``total_rows`` unchanged)."""
        return Table(self.columns, self.rows[: max(0, n)], self.total_rows, self.caption)


class EvidenceTable(Table):
    """A finding's evidence (capped)."""


class ComparisonTable(Table):
    """One row per trace, for reports over several analyses."""


# ---------------------------------------------------------------------------------------------------
# Chart data


@dataclass(frozen=True)
class Span:
    """A labelled time interval (ns, trace-relative) drawn on the utilization chart."""

    start: int
    end: int
    label: str


@dataclass(frozen=True)
class UtilSeries:
    """Busy fraction per time bin for one device."""

    device: int
    label: str
    bin_start: tuple[int, ...]
    bin_end: tuple[int, ...]
    util: tuple[float, ...]  # 0..1 (concurrent work can exceed 1; charts clamp)
    gaps: tuple[Span, ...] = ()  # idle gaps on this device (longest first, capped)
    # measured GPU metrics on the same bins (0..1 of SMs / of tensor peak; None: no sample), or empty
    sm_active: tuple[float | None, ...] = ()
    tensor_active: tuple[float | None, ...] = ()
    # device memory in use on the same bins: the highest level in each bin (B), or empty without memory
    # events; drawn as a line under the bars, 0 to ``memory_top`` (the highest level drawn)
    memory: tuple[int, ...] = ()
    memory_top: int = 0
    memory_label: str = ""


@dataclass(frozen=True)
class NvtxLane:
    label: str  # e.g. "pid 1234 / tid 1240"
    spans: tuple[Span, ...]
    total: int  # ranges in the window before capping


@dataclass(frozen=True)
class UtilizationChart:
    start_ns: int
    end_ns: int
    series: tuple[UtilSeries, ...]
    lanes: tuple[NvtxLane, ...] = ()
    devices_total: int = 0
    gaps_total: int = 0


@dataclass(frozen=True)
class Bar:
    label: str
    value: float  # ns
    share: float  # 0..1
    count: int = 0


@dataclass(frozen=True)
class BarChart:
    title: str
    bars: tuple[Bar, ...]
    total_rows: int


@dataclass(frozen=True)
class PairedBar:
    """One NVTX range: CPU time next to the GPU time of the work it launched."""

    label: str
    cpu_ns: int
    gpu_ns: int


@dataclass(frozen=True)
class RooflinePoint:
    name: str
    intensity: float  # FLOP/byte
    flops: float  # achieved FLOP/s
    duration_ns: float


@dataclass(frozen=True)
class RooflineChart:
    peak_flops: float
    peak_bandwidth: float
    points: tuple[RooflinePoint, ...]
    total_points: int

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
        return self.peak_flops / self.peak_bandwidth if self.peak_bandwidth > 0 else float("nan")


# ---------------------------------------------------------------------------------------------------
# Findings, headers, sections


@dataclass(frozen=True)
class FindingView:
    """A finding as shown. ``anchor`` is ``Finding.key`` (prefixed ``tN-`` in multi-trace reports);
    ``record`` is ``Finding.to_dict()`` made JSON-safe with the evidence capped."""

    anchor: str
    key: str
    rank: int  # 1-based, by impact
    rule: str
    id: str
    severity: str  # "error" | "warning" | "info"
    title: str
    message: str
    category: str
    scope: str
    impact_ns: int | None
    impact_pct: float | None
    evidence: EvidenceTable
    what: str
    why: str
    fix: str
    references: tuple[str, ...]
    explains: tuple[Link, ...]
    explained_by: tuple[Link, ...]
    record: dict[str, Any] = field(compare=False, hash=False, repr=False)
    fingerprint: str = ""
    #: "" (not in the accepted-findings file), "accepted" (not counted by --fail-on) or "grown" (accepted,
    #: but its impact grew past the allowed factor: counts again)
    accepted: str = ""
    accepted_note: str = ""
    #: "cause" or "symptom" (shown as what the causes explain, never added to the verdict's total)
    kind: str = "cause"
    #: what this finding adds to the verdict's total (the union of the counted causes' time, walked in
    #: report order: overlaps with the findings above it are not added again); None when it does not count
    adds_ns: int | None = None
    #: a symptom: how much of it the causes explain, e.g. "54.1% of the window explained by
    #: gpu-idle-gaps (54.1%); 3.0% not explained" ("" for causes)
    explained: str = ""

    @property
    def symptom(self) -> bool:
        return self.kind == "symptom"

    @property
    def impact_text(self) -> str:
        return fmt_ms(self.impact_ns) if self.impact_ns is not None else "n/a"

    @property
    def impact_pct_text(self) -> str:
        return fmt_impact_pct(self.impact_pct) if self.impact_pct is not None else "n/a"


@dataclass(frozen=True)
class Header:
    trace_name: str
    trace_path: str
    source_format: str
    nsys_version: str
    hostname: str
    gpus: str  # "2 x Quadro RTX 8000"
    window_start_ns: int
    window_end_ns: int
    window_source: str
    window_description: str
    setup_ns: int
    trace_duration_ns: int
    analyzed_ns: int
    gpu_busy_ns: int | None  # summed over devices
    gpu_busy_share: float | None  # busy / (window x devices), 0..1
    kernel_ns: int | None
    kernel_count: int | None
    device_count: int
    verdict: str
    problems: int
    problem_impact_ns: int | None  # the union of the counted causes' time (what the verdict says)
    counts: tuple[tuple[str, int], ...]  # (severity, count), error first
    rules_file: str
    parameters: tuple[tuple[str, str], ...]
    accepted: int = 0  # findings accepted (not counted); they are not in ``problems``
    accepted_file: str = ""
    rank: int | None = None  # torch.distributed rank of the traced process, when the trace says
    world_size: int | None = None
    #: the plain sum of the counted causes' impacts (``problem_impact_ns`` is their union: less by the time
    #: they share) and one sentence saying how the verdict's total was summed ("" without a total)
    problem_impact_sum_ns: int | None = None
    tally: str = ""


@dataclass(frozen=True)
class NotCheckedView:
    """A rule not run on this trace: the trace lacks data it needs."""

    id: str
    rule: str
    title: str
    severity: str
    reason: str  # why the trace lacks the data, e.g. "no copy says whether its host memory is ..."


@dataclass(frozen=True)
class GapSummary:
    count: int
    total_ns: int
    largest_ns: int
    median_ns: float
    share: float | None  # of window x devices
    table: Table


@dataclass(frozen=True)
class SignalsView:
    """What the trace recorded beyond the kernel timeline: call stacks, GPU metrics, power."""

    code_locations: Table | None = None  # per call site: kind, location, calls, API time
    gpu_metrics: Table | None = None  # per device: SM / tensor activity, DRAM, PCIe
    energy: Table | None = None  # per device: energy, power, per step
    energy_steps: Table | None = None
    notes: tuple[str, ...] = ()  # what was not recorded (and how to record it), what could not be used


#: The timeline breakdown's causes (fact ``timeline_breakdown``) in the order reports stack them, with
#: the words they are shown with; a cause not listed here is shown after them under its own name.
BREAKDOWN_CAUSES: tuple[tuple[str, str], ...] = (
    ("compute", "compute"),
    ("exposed_comm", "exposed communication"),
    ("exposed_copy", "exposed copies"),
    ("launch_bound", "launch-bound"),
    ("host_sync", "host sync"),
    ("host_work", "host work"),
    ("wait_other", "waiting on other work"),
    ("setup", "setup"),
    ("unknown", "unknown"),
)
_CAUSE_LABEL = dict(BREAKDOWN_CAUSES)


def cause_label(cause: str) -> str:
    """How reports name a breakdown cause: ``launch_bound`` -> ``launch-bound``."""
    return _CAUSE_LABEL.get(cause, cause.replace("_", " "))


@dataclass(frozen=True)
class BreakdownBar:
    """One stacked bar of the timeline breakdown: a step, an NVTX range or the whole window, its time
    split by cause (``parts``: (cause, ns), in :data:`BREAKDOWN_CAUSES` order, no zero parts)."""

    label: str
    total_ns: int
    parts: tuple[tuple[str, int], ...]

    def ns(self, cause: str) -> int:
        return sum(v for c, v in self.parts if c == cause)


@dataclass(frozen=True)
class BreakdownView:
    """Where one GPU's window went (fact ``timeline_breakdown``): every nanosecond has one cause.

    ``window`` holds the whole window; ``details`` the window's rows by cause and detail (kernel category,
    copy direction, CUDA call, NVTX range), largest first; ``steps`` the window's steps in order and
    ``ranges`` the NVTX ranges holding the most time, each capped (``*_total``: how many there were).
    ``summary`` is the window in one line of shares ("host work 53.7% · compute 40.0% · ...")."""

    device: int
    window: BreakdownBar
    details: Table
    steps: tuple[BreakdownBar, ...]
    steps_total: int
    ranges: tuple[BreakdownBar, ...]
    ranges_total: int
    summary: str


@dataclass(frozen=True)
class MemoryView:
    """Device memory over the window (``memory_growth``, ``memory_steps``, ``memory_ranges`` facts): one
    summary line per GPU (the same text in every format), the per-GPU table, the peak per step and per
    NVTX range."""

    lines: tuple[str, ...]
    devices: Table
    steps: Table | None = None
    ranges: Table | None = None
    notes: tuple[str, ...] = ()  # events left out or combined (no device, several processes on a GPU)


@dataclass(frozen=True)
class TraceSection:
    index: int
    anchor: str  # section id, "trace-1"
    header: Header
    findings: tuple[FindingView, ...]
    findings_total: int
    utilization: UtilizationChart | None = None
    categories: BarChart | None = None
    category_table: Table | None = None
    top_kernels: Table | None = None
    nvtx_chart: tuple[PairedBar, ...] = ()
    nvtx: Table | None = None
    gaps: GapSummary | None = None
    phases: Table | None = None
    ncu: Table | None = None
    roofline: RooflineChart | None = None
    signals: SignalsView | None = None
    notes: tuple[str, ...] = ()  # sections omitted and why
    baseline: dict[str, Any] | None = field(default=None, compare=False, repr=False)  # what a diff reads (JSON)
    not_checked: tuple[NotCheckedView, ...] = ()  # rules not run: the trace lacks data they need
    ncu_rules: Table | None = None  # what Nsight Compute's own rules said (optimization advice first)
    not_applicable: tuple[str, ...] = ()  # rules of the pack this input cannot feed, e.g. "gpu-idle-gaps"
    not_applicable_reason: str = ""  # why, e.g. "needs a timeline (an Nsight Systems trace)"
    kind: str = "nsys"  # "nsys": a timeline; "ncu": an Nsight Compute report on its own
    memory: MemoryView | None = None  # device memory over time (None: the trace has no memory events)
    breakdown: tuple[BreakdownView, ...] = ()  # per GPU: where its window went (timeline breakdown)


@dataclass(frozen=True)
class ReportView:
    title: str
    created: datetime
    tool_version: str
    verdict: str
    traces: tuple[TraceSection, ...]
    comparison: ComparisonTable | None
    limits: Limits
    job: Any = None  # analyzer.reports.jobview.JobSection for a multi-GPU job, else None


# ---------------------------------------------------------------------------------------------------
# Nsight Compute protocol


@runtime_checkable
class NcuKernels(Protocol):
    """What reports need from Nsight Compute data: a ``kernels`` frame with the columns in
    :data:`NCU_COLUMNS` (``matched_ns`` optional: time of the matching kernels on the nsys timeline)."""

    kernels: pd.DataFrame


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


# ---------------------------------------------------------------------------------------------------
# Building

_SEVERITY_ORDER = ("error", "warning", "info")


class _Unavailable(Exception):
    """A section's input is missing; the message says why (shown as a note)."""


def _fact(analysis: Analysis, name: str, columns: Iterable[str]) -> pd.DataFrame:
    try:
        frame = analysis.facts.get(name)
    except UnknownFactError as err:
        reason = str(err.args[0]) if err.args else name
        raise _Unavailable(f"fact {name!r} is not available ({truncate(reason, 160)})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise _Unavailable(f"fact {name!r} lacks columns {', '.join(missing)}")
    return frame


def _optional_fact(analysis: Analysis, name: str) -> pd.DataFrame | None:
    try:
        return analysis.facts.get(name)
    except UnknownFactError:
        return None


def _cell(value: Any, limit: int) -> Any:
    value = _py(value)
    if isinstance(value, str):
        return truncate(value, limit)
    if isinstance(value, list):
        return truncate(", ".join(str(v) for v in value), limit)
    return value


def table_view(
    frame: pd.DataFrame,
    columns: Sequence[Column],
    limit: int,
    cell_chars: int,
    caption: str = "",
    cls: type[Table] = Table,
    total: int | None = None,
) -> Table:
    """The first ``limit`` rows of ``frame`` (already ordered) as a :class:`Table`; ``total`` is the row
    count to report when ``frame`` holds only the leading rows of a bigger table."""
    head = frame.head(max(0, limit))
    cols = [head[c.key].tolist() if c.key in head.columns else [None] * len(head) for c in columns]
    rows = tuple(tuple(_cell(v, cell_chars) for v in row) for row in zip(*cols)) if len(head) else ()
    shown = tuple(honest_column(c, values) for c, values in zip(columns, cols))
    return cls(shown, rows, len(frame) if total is None else total, caption)


def honest_column(column: Column, values: Iterable[Any]) -> Column:
    """``column`` as its values allow: a share column (0..1, shown as a percentage) holding a value above
    1 is a ratio, not a share (GPU time summed over streams over a phase's span: 1.73, not "173%"), so it
    is shown as one (``1.73x``) and its label says so."""
    if column.kind == "share" and any(isinstance(v, (int, float)) and v == v and v > 1.0005 for v in values):
        return Column(column.key, f"{column.label} (ratio, can pass 1)", "ratio")
    return column


_NS_NAMES = {"duration", "gap", "busy", "cpu", "gpu", "total", "mean", "median", "wait", "idle"}
_TIME_NAMES = {"start", "end", "at", "time", "start_ns", "end_ns", "bin_start", "bin_end"}


# Nsight Compute columns already in percent (0..100) whose names would otherwise read as 0..1 shares; the
# nsys occupancy fact uses the same names for fractions, so values above 1 decide.
_PERCENT_NAMES = frozenset({"achieved_occupancy", "theoretical_occupancy", "stall_share"})


def _evidence_kind(name: str, values: Iterable[Any] = ()) -> str:
    """Guess how to format an evidence column from its name (evidence columns are free-form) and, for
    names that say nothing, from its values (text if any value is text)."""
    low = name.lower()
    if low in _TIME_NAMES:
        return "time"
    if low.endswith("_ns") or low in _NS_NAMES:
        return "ns"
    if low.endswith(("_pct", "%")) or low == "percent":
        return "pct"
    if low in _PERCENT_NAMES and any(isinstance(v, (int, float)) and v > 1.0 for v in values):
        return "pct"
    if low.endswith("_flops"):
        return "flops"
    if low.endswith("bandwidth"):
        return "bandwidth"
    if low in ("arithmetic_intensity", "ridge_point"):
        return "intensity"
    if low in ("share", "util", "utilization", "ratio", "occupancy") or low.endswith(("_share", "_occupancy")):
        return "share"
    if low == "bytes" or low.endswith("_bytes"):
        return "bytes"
    if low.endswith("throughput"):
        return "bandwidth"
    if any(isinstance(v, str) for v in values):
        return "text"
    return "auto"


#: a column name's unit word, dropped from its label when the cells carry their own unit (``busy_ns``
#: over "12.3 ms" reads "Busy", not "Busy ns")
_UNIT_WORDS = {"ns": ("ns",), "pct": ("pct",), "share": ("share",), "bytes": ("bytes",),
               "flops": ("flops",), "bandwidth": ()}
_ACRONYMS = {"cpu": "CPU", "gpu": "GPU", "nvtx": "NVTX", "api": "API", "sm": "SM", "id": "ID", "h2d": "H2D",
             "d2h": "D2H", "cuda": "CUDA", "nccl": "NCCL", "pid": "PID", "tid": "TID", "p95": "p95"}


def _labelize(name: str, kind: str = "auto") -> str:
    """A column name as a header: words, known acronyms in capitals, and no unit word the formatted
    cells already show (``cpu_mean_ns`` -> "CPU mean" over values in ms)."""
    words = name.replace("_", " ").split()
    if len(words) > 1 and words[-1].lower() in _UNIT_WORDS.get(kind, ()):
        words = words[:-1]
    words = [_ACRONYMS.get(w.lower(), w) for w in words]
    text = " ".join(words)
    return text[:1].upper() + text[1:] if text else name


def finding_views(
    findings: list[Finding], window_ns: int, prefix: str, limits: Limits
) -> tuple[tuple[FindingView, ...], dict[str, str]]:
    ranked = report_order(findings)
    causes = [f for f in ranked if is_problem(f)]
    adds = {id(f): a for f, a in zip(causes, union_adds(causes))}
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
            tuple(_cell(v, limits.cell_chars) for v in row[: len(f.evidence_columns)])
            for row in f.evidence[: limits.evidence_rows]
        )
        kinds = [_evidence_kind(c, (r[i] for r in rows if i < len(r))) for i, c in enumerate(f.evidence_columns)]
        columns = tuple(
            honest_column(Column(c, _labelize(c, k), k), (r[i] for r in rows if i < len(r)))
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
        record["adds_ns"] = adds.get(id(f))
        explained = ""
        if is_symptom(f):
            ex = explain(f, findings)
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
                adds_ns=adds.get(id(f)),
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


def _verdict(findings: list[Finding], window_ns: int, busy_share: float | None,
             devices: int = 1, not_checked: int = 0) -> tuple[str, int, int | None]:
    """One line: what is wrong, in plain words, and what it is worth.

    It leads with the biggest cause (the first row of the findings table: :func:`report_order`) in
    its rule's plain words (``verdict:``), then the total: the union of the counted causes' time
    (:mod:`analyzer.impacts`: time two findings share counts once), and what the causes explain of each
    symptom (low utilization...), which is never added. Percentages are of the analysis window (of
    the window times the GPUs when several did work). ``not_checked``: rules not run for want of data;
    without problems the line says so instead of a plain "No problems found"."""
    accepted = sum(1 for f in findings if f.severity >= Severity.WARNING and not f.counts)
    ordered = report_order(findings)
    problems = [f for f in ordered if is_problem(f)]
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
    total = sum(union_adds(problems))
    span = window_ns * max(devices, 1)
    if span > 0:
        total = min(total, span)
    of = "the analyzed GPU time" if devices > 1 else "the analyzed time"
    pct = f" ({fmt_impact_pct(100.0 * total / span)} of {of}, overlaps counted once)" if span > 0 else ""
    named = "" if biggest.headline else f"; biggest: {biggest.title}"
    text = f"{lead}{plural(len(problems), kind)} worth {fmt_ms(total)}{pct}{named}{also}"
    for s in symptoms[:1]:  # the biggest symptom; the others are listed with what explains them
        ex = explain(s, findings)
        what = s.headline or s.title
        text += f"; {what}: {_explained_text(ex, window_ns)}"
    return text, len(problems), total


def _tally(findings: list[Finding], total: int | None) -> tuple[int | None, str]:
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



def _busy(analysis: Analysis, notes: list[str]) -> tuple[int | None, int]:
    """Busy ns summed over devices inside the window, and the number of devices."""
    w = analysis.window
    try:
        busy = _fact(analysis, "gpu_busy", ("device", "start", "end"))
        start = busy["start"].clip(lower=w.start_ns).to_numpy(dtype="int64")
        end = busy["end"].clip(upper=w.end_ns).to_numpy(dtype="int64")
        total = int(np.clip(end - start, 0, None).sum())
        return total, int(busy["device"].nunique())
    except _Unavailable as err:
        try:
            util = _fact(analysis, "utilization", ("device", "busy_ns"))
            return int(util["busy_ns"].sum()), int(util["device"].nunique())
        except _Unavailable:
            notes.append(f"GPU busy share not shown: {err}")
            return None, 0


def _kernel_time(analysis: Analysis) -> tuple[int | None, int | None]:
    """Kernel time and count inside the window: from ``category_summary`` when available, else from the
    kernels overlapping the window (clipped)."""
    try:
        cats = _fact(analysis, "category_summary", ("count", "total_ns"))
        return int(cats["total_ns"].sum()), int(cats["count"].sum())
    except _Unavailable:
        pass
    k = analysis.trace.kernels
    if not len(k):
        return 0, 0
    w = analysis.window
    start = k["start"].clip(lower=w.start_ns).to_numpy(dtype="int64")
    end = k["end"].clip(upper=w.end_ns).to_numpy(dtype="int64")
    inside = end > start
    return int((end - start)[inside].sum()), int(inside.sum())


def _rebin(starts: np.ndarray, ends: np.ndarray, busy: np.ndarray, width: np.ndarray, n: int):
    """Merge consecutive bins so that at most ``n`` remain (busy time adds up, util is busy/width)."""
    if len(starts) <= n:
        util = np.divide(busy, width, out=np.zeros(len(busy)), where=width > 0)
        return starts, ends, util
    group = (np.arange(len(starts)) * n) // len(starts)
    bounds = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    s = starts[bounds]
    e = np.maximum.reduceat(ends, bounds)
    b = np.add.reduceat(busy, bounds)
    w = np.add.reduceat(width, bounds)
    util = np.divide(b, w, out=np.zeros(len(b)), where=w > 0)
    return s, e, util


def _utilization(analysis: Analysis, names: dict[int, str], limits: Limits) -> UtilizationChart:
    w = analysis.window
    util = _fact(analysis, "utilization", ("device", "bin_start", "bin_end", "busy_ns"))
    try:
        gaps = _fact(analysis, "gpu_gaps", ("device", "start", "end", "duration"))
    except _Unavailable:
        gaps = None
    devices = sorted(int(d) for d in pd.unique(util["device"]))
    series = []
    for dev in devices[: limits.devices]:
        part = util[util["device"] == dev].sort_values("bin_start", kind="stable")
        starts = part["bin_start"].to_numpy(dtype="int64")
        ends = part["bin_end"].to_numpy(dtype="int64")
        busy = part["busy_ns"].to_numpy(dtype="float64")
        s, e, u = _rebin(starts, ends, busy, (ends - starts).astype("float64"), limits.util_bins)
        dev_gaps: tuple[Span, ...] = ()
        if gaps is not None and len(gaps):
            # order the two key columns only, then take the few rows shown (a million-row gaps
            # frame was filtered and sorted whole: ~0.5 s)
            keys = gaps.loc[gaps["device"].to_numpy() == dev, ["duration", "start"]]
            top = _longest(keys, ["duration", "start"], [False, True], limits.chart_gaps)
            g = gaps.loc[top].sort_values("start", kind="stable")
            dev_gaps = tuple(
                Span(int(a), int(b), f"idle {fmt_duration(int(d))}")
                for a, b, d in zip(g["start"].tolist(), g["end"].tolist(), g["duration"].tolist())
            )
        sm, tensor = _metric_lines(analysis, dev, s, e)
        mem, mem_top, mem_label = _memory_line(analysis, dev, s, e)
        series.append(
            UtilSeries(
                device=dev,
                label=f"GPU {dev}" + (f" \u00b7 {names[dev]}" if dev in names else ""),
                bin_start=tuple(int(x) for x in s),
                bin_end=tuple(int(x) for x in e),
                util=tuple(float(f"{x:.4f}") for x in u),
                gaps=dev_gaps,
                sm_active=sm,
                tensor_active=tensor,
                memory=mem,
                memory_top=mem_top,
                memory_label=mem_label,
            )
        )
    return UtilizationChart(
        start_ns=int(w.start_ns),
        end_ns=int(w.end_ns),
        series=tuple(series),
        lanes=_nvtx_lanes(analysis, limits),
        devices_total=len(devices),
        gaps_total=0 if gaps is None else len(gaps),
    )


def _longest(keys: pd.DataFrame, by: list[str], ascending: list[bool], k: int) -> pd.Index:
    """Index of the first ``k`` rows of ``keys.sort_values(by, ascending, kind="stable")``, where
    ``by[0]`` is ``duration`` sorted descending: only rows at least as long as the k-th longest can be
    among them, so only those are sorted (a million gaps, a few dozen shown)."""
    d = keys["duration"].to_numpy()
    if 0 < k < len(d) // 4:
        threshold = np.partition(d, len(d) - k)[len(d) - k]  # the k-th longest
        keys = keys.iloc[np.flatnonzero(d >= threshold)]  # ties included, original order kept
    return keys.sort_values(by, ascending=ascending, kind="stable").index[:k]
def _metric_lines(analysis: Analysis, device: int, starts: np.ndarray,
                  ends: np.ndarray) -> tuple[tuple[float | None, ...], tuple[float | None, ...]]:
    """Mean SM-active and tensor-active share (0..1) of the samples in each chart bin; ``()`` when the
    trace has no GPU metrics for ``device``."""
    gm = analysis.trace.gpu_metrics
    if gm.empty or not len(starts):
        return (), ()
    mine = gm.loc[gm["device"].to_numpy() == device]
    if mine.empty:
        return (), ()
    metric = mine["metric"].astype(str).to_numpy()
    edges = np.r_[starts, ends[-1:]]
    out = []
    for name in ("sm_active", "tensor_active"):
        sel = metric == name
        t = mine["start"].to_numpy()[sel]
        v = mine["value"].to_numpy(dtype="float64")[sel]
        idx = np.searchsorted(edges, t, side="right") - 1
        ok = (idx >= 0) & (idx < len(starts))
        sums = np.bincount(idx[ok], weights=v[ok], minlength=len(starts))
        counts = np.bincount(idx[ok], minlength=len(starts))
        out.append(tuple(float(f"{sums[i] / counts[i] / 100:.4f}") if counts[i] else None
                         for i in range(len(starts))))
    return out[0], out[1]


def _memory_line(analysis: Analysis, device: int, starts: np.ndarray,
                 ends: np.ndarray) -> tuple[tuple[int, ...], int, str]:
    """The highest device memory level in each chart bin (B), the top of the line's scale (the highest
    of them) and its label (with the share of the GPU's memory); ``()`` without memory events for
    ``device``."""
    if not len(starts) or "memory_events" in analysis.trace.info.unavailable:
        return (), 0, ""
    tl = _optional_fact(analysis, "memory_timeline")
    growth = _optional_fact(analysis, "memory_growth")
    if tl is None or growth is None or not len(tl):
        return (), 0, ""
    mine = tl.loc[tl["device"].to_numpy() == device]
    row = growth.loc[growth["device"].to_numpy() == device]
    if mine.empty or row.empty:
        return (), 0, ""
    t = mine["start"].to_numpy(dtype=np.int64)
    level = mine["bytes"].to_numpy(dtype=np.int64)
    before = int(level[0] - mine["delta"].iloc[0])
    pos = np.searchsorted(t, starts, side="right") - 1
    out = np.where(pos >= 0, level[np.clip(pos, 0, None)], before)  # the level as each bin opens
    idx = np.searchsorted(np.r_[starts, ends[-1:]], t, side="right") - 1
    ok = (idx >= 0) & (idx < len(starts))
    np.maximum.at(out, idx[ok], level[ok])
    cap = int(row["capacity_bytes"].iloc[0])
    top = max(int(out.max()), 1)  # the highest level drawn: growth stays visible on a large GPU
    what = "allocated" if str(row["measure"].iloc[0]) == "allocated" else "held from CUDA"
    label = f"memory {what}, 0 to {fmt_bytes(top)}" + (
        f" ({100.0 * top / cap:.1f}% of the GPU's {fmt_bytes(cap)})" if cap > 0 else "")
    return tuple(int(x) for x in out), top, label


def memory_line_text(row: Any) -> str:
    """One GPU's memory summary (a ``memory_growth`` row) as every format prints it."""
    from analyzer.rules.templates import FILTERS

    size, pct = FILTERS["bytes"], FILTERS["pct"]
    what = "allocated" if str(row["measure"]) == "allocated" else "held from CUDA"
    text = f"GPU {int(row['device'])} memory ({what}): peak {size(row['peak_bytes'])}"
    if row["peak_step"]:
        text += f" in {row['peak_step']}"
    if row["peak_held_in"]:
        text += f" ({pct(row['peak_held_share'])} of it allocated in {row['peak_held_in']})"
    elif row["peak_range"]:
        text += f" (set in {row['peak_range']})"
    if int(row["capacity_bytes"]) > 0:
        text += f", {pct(row['peak_share'])} of {size(row['capacity_bytes'])}"
    if int(row["steps"]) >= 2:
        span = f"{int(row['steps'])} steps ({row['first_step']} to {row['last_step']}"
        if float(row["bytes_per_step"]) == 0 and float(row["slope_low"]) == 0 and float(row["slope_high"]) == 0:
            text += f"; no growth over {span})"
        else:
            text += (f"; {size(row['bytes_per_step'])} per step over {span}, middle half of the step-to-step "
                     f"slopes {size(row['slope_low'])} to {size(row['slope_high'])})")
    return text


def _memory_notes(memory: pd.DataFrame, growth: pd.DataFrame) -> tuple[str, ...]:
    """What the memory levels leave out or combine, said once: events that name no GPU, GPUs whose
    memory several processes hold."""
    notes = []
    kind = memory["mem_kind"].astype(str).to_numpy() if len(memory) else np.empty(0, dtype=object)
    lost = int(((memory["device"].to_numpy() < 0) & (kind != "host")).sum()) if len(memory) else 0
    if lost:
        notes.append(f"{plural(lost, 'memory event')} name no GPU and are left out of the memory levels")
    for _, row in growth.iterrows():
        if int(row["unmatched_frees"]) > 0 and str(row["measure"]) == "reserved":
            notes.append(f"GPU {int(row['device'])}: {plural(int(row['unmatched_frees']), 'free')} of memory allocated "
                         "before the capture; its levels count from the lowest point of the capture (what the "
                         "process held before is unknown)")
        if int(row["processes"]) > 1:
            notes.append(f"GPU {int(row['device'])}: memory events of {int(row['processes'])} processes; their "
                         "allocations are added up (each holds its own memory)")
    return tuple(notes)


def _memory(analysis: Analysis, limits: Limits) -> MemoryView | None:
    """The memory section: None when the trace has no memory events (the not-checked rules say what
    to record)."""
    if "memory_events" in analysis.trace.info.unavailable:
        return None
    growth = _optional_fact(analysis, "memory_growth")
    if growth is None or not len(growth):
        return None
    dcols = (Column("device", "GPU", "int"), Column("measure", "Measure", "text"),
             Column("peak_bytes", "Peak", "bytes"), Column("peak_step", "Peak step", "text"),
             Column("peak_range", "Peak set in", "text"), Column("peak_held_in", "Peak held in", "text"),
             Column("capacity_bytes", "GPU memory", "bytes"),
             Column("peak_share", "Peak share", "share"), Column("bytes_per_step", "Growth per step", "bytes"),
             Column("slope_low", "Slope p25", "bytes"), Column("slope_high", "Slope p75", "bytes"),
             Column("steps", "Steps", "int"), Column("growth_range", "Kept memory allocated in", "text"),
             Column("unmatched_frees", "Frees before capture", "int"))
    view: dict[str, Any] = {
        "lines": tuple(memory_line_text(r) for _, r in growth.iterrows()),
        "notes": _memory_notes(analysis.trace.memory, growth),
        "devices": table_view(growth, dcols, limits.devices, limits.cell_chars),
    }
    steps = _optional_fact(analysis, "memory_steps")
    if steps is not None and len(steps):
        scols = (Column("device", "GPU", "int"), Column("step", "Step", "text"),
                 Column("start_bytes", "At start", "bytes"), Column("peak_bytes", "Peak", "bytes"),
                 Column("end_bytes", "At end", "bytes"), Column("growth", "Change", "bytes"),
                 Column("peak_range", "Peak set in", "text"))
        view["steps"] = table_view(steps, scols, limits.phase_rows, limits.cell_chars, "peak memory per step")
    ranges = _optional_fact(analysis, "memory_ranges")
    if ranges is not None and len(ranges):
        rcols = (Column("device", "GPU", "int"), Column("nvtx_path", "NVTX range", "text"),
                 Column("peak_bytes", "Peak", "bytes"), Column("peak_steps", "Steps it set the peak", "int"),
                 Column("alloc_bytes", "Allocated", "bytes"), Column("free_bytes", "Freed", "bytes"),
                 Column("kept_bytes", "Kept at window end", "bytes"), Column("events", "Events", "int"))
        ordered = ranges.sort_values(["peak_bytes", "nvtx_path"], ascending=[False, True], kind="stable")
        view["ranges"] = table_view(ordered, rcols, limits.phase_rows, limits.cell_chars)
    return MemoryView(**view)


def _signals(analysis: Analysis, limits: Limits) -> SignalsView | None:
    """Code locations, GPU metrics and energy, with notes on what the trace lacks; None when there is
    nothing to show or say."""
    from analyzer.facts.stacks import RECORD_HINT

    trace = analysis.trace
    notes: list[str] = [str(n) for n in cast("Iterable[object]", trace.extras.get("notes", ()))]
    parts: dict[str, Any] = {}
    locs = _optional_fact(analysis, "code_locations")
    if locs is not None and len(locs):
        cols: tuple[Column, ...] = (Column("kind", "Kind", "text"),
                Column("code_location", "Code location", "code"),
                Column("name", "CUDA API", "code"), Column("calls", "Calls", "int"),
                Column("api_ns", "API time", "ns"), Column("nvtx_path", "NVTX range", "code"))
        parts["code_locations"] = table_view(locs, cols, limits.top_kernels, limits.cell_chars,
                                         "CUDA API calls in the window by the code that made them, most "
                                         "time first")
    elif trace.api_stacks.empty and any(f.rule in _CALL_SITE_RULES for f in analysis.findings):
        notes.append(f"Code locations: this trace has no call stacks; {RECORD_HINT}.")
    act = _optional_fact(analysis, "sm_activity")
    if act is not None and len(act):
        cols = (Column("device", "GPU", "int"), Column("samples", "Samples", "int"),
                Column("kernel_share", "Kernels running", "share"),
                Column("sm_active_busy", "SMs active while kernels ran", "pct"),
                Column("tensor_active_gemm", "Tensor pipes active while GEMMs ran", "pct"),
                Column("dram_read", "DRAM read", "pct"), Column("dram_write", "DRAM write", "pct"),
                Column("pcie_rx", "PCIe RX", "pct"), Column("pcie_tx", "PCIe TX", "pct"))
        parts["gpu_metrics"] = table_view(act, cols, limits.devices, limits.cell_chars,
                                      "sampled GPU metrics over the window (% of peak)")
    unmapped = cast("list[str] | None", trace.extras.get("gpu_metrics_unmapped"))
    if unmapped and (act is None or not len(act) or act["sm_active"].isna().all()):
        notes.append("GPU metrics: none of this trace's metric names means SM activity to the analyzer "
                     f"({len(unmapped)} names, e.g. " + ", ".join(str(u) for u in list(unmapped)[:4])
                     + "); the SM-activity rules did not run")
    energy = _optional_fact(analysis, "energy")
    if energy is not None and len(energy):
        cols = (Column("device", "GPU", "int"), Column("source", "Measured by", "text"),
                Column("energy_j", "Energy (J)", "float"), Column("avg_power_w", "Mean power (W)", "float"),
                Column("steps", "Steps", "int"), Column("energy_per_step_j", "Energy per step (J)", "float"),
                Column("resolution_ns", "Resolution", "ns"))
        parts["energy"] = table_view(energy, cols, limits.devices, limits.cell_chars, "over the analysis window")
        steps = _optional_fact(analysis, "energy_steps")
        if steps is not None and len(steps):
            scol = (Column("device", "GPU", "int"), Column("step", "Step", "code"),
                    Column("energy_j", "Energy (J)", "float"), Column("avg_power_w", "Mean power (W)", "float"))
            parts["energy_steps"] = table_view(steps, scol, limits.phase_rows, limits.cell_chars)
        for _, row in energy.iterrows():
            if row["source"] == "power readings" and row["window_ns"] < 5e9:
                notes.append(f"GPU {int(row['device'])}: the power log has power readings only (nvidia-smi "
                             "power.draw averages about the last second), which lag a window of "
                             f"{row['window_ns'] / 1e9:.2f} s; log the energy counter (NVML "
                             "nvmlDeviceGetTotalEnergyConsumption) for short windows.")
            if not row["per_step_measured"] and row["steps"]:
                notes.append(f"GPU {int(row['device'])}: steps of {row['step_ns'] / 1e6:.1f} ms are shorter "
                             f"than twice the power log's resolution ({row['resolution_ns'] / 1e6:.0f} ms): "
                             "energy per step is the window's energy divided by the steps.")
    elif not trace.power.empty:
        notes.append("Energy: the power log does not cover the analysis window.")
    if not parts and not notes:
        return None
    return SignalsView(notes=tuple(notes), **parts)


#: rules whose findings point at CUDA API calls (their call sites need stacks)
_CALL_SITE_RULES = frozenset({"host-sync-in-loop", "sync-memcpy", "pageable-memcpy", "alloc-in-loop",
                              "tiny-kernels", "gpu-idle-gaps"})


def _nvtx_lanes(analysis: Analysis, limits: Limits) -> tuple[NvtxLane, ...]:
    """Top-level NVTX ranges in the window, on the threads that spend the most time inside them."""
    nvtx = analysis.trace.nvtx
    need = {"start", "end", "text", "kind", "pid", "tid", "depth"}
    if not len(nvtx) or not need <= set(nvtx.columns):
        return ()
    w = analysis.window
    top = nvtx[(nvtx["depth"] == 0) & (nvtx["kind"] != "mark") & (nvtx["end"] > w.start_ns) & (nvtx["start"] < w.end_ns)]
    if not len(top):
        return ()
    top = top.assign(
        _s=top["start"].clip(lower=w.start_ns), _e=top["end"].clip(upper=w.end_ns)
    )
    top = top.assign(_d=top["_e"] - top["_s"])
    per_thread = (
        top.groupby(["pid", "tid"], sort=True)["_d"].sum().reset_index()
        .sort_values(["_d", "pid", "tid"], ascending=[False, True, True], kind="stable")
    )
    lanes = []
    for pid, tid in zip(per_thread["pid"].tolist()[: limits.nvtx_lane_threads],
                        per_thread["tid"].tolist()[: limits.nvtx_lane_threads]):
        part = top[(top["pid"] == pid) & (top["tid"] == tid)]
        keep = part.sort_values(["_d", "_s"], ascending=[False, True], kind="stable").head(limits.nvtx_lane_ranges)
        keep = keep.sort_values("_s", kind="stable")
        spans = tuple(
            Span(int(a), int(b), truncate(str(t), limits.cell_chars))
            for a, b, t in zip(keep["_s"].tolist(), keep["_e"].tolist(), keep["text"].tolist())
        )
        lanes.append(NvtxLane(f"NVTX \u00b7 pid {int(pid)} / tid {int(tid)}", spans, len(part)))
    return tuple(lanes)


def _categories(analysis: Analysis, limits: Limits) -> tuple[BarChart, Table]:
    cats = _fact(analysis, "category_summary", ("category", "count", "total_ns", "share"))
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


def _top_kernels(analysis: Analysis, limits: Limits) -> Table:
    cols = (
        Column("name", "Kernel", "code"), Column("category", "Category", "text"), Column("count", "Calls", "int"),
        Column("total_ns", "Total", "ns"), Column("mean_ns", "Mean", "ns"), Column("median_ns", "Median", "ns"),
        Column("share", "Share", "share"),
    )
    frame = _fact(analysis, "top_kernels", [c.key for c in cols])
    frame = frame.sort_values(["total_ns", "name"], ascending=[False, True], kind="stable")
    return table_view(frame, cols, limits.top_kernels, limits.cell_chars, "sorted by total GPU time")


def _nvtx(analysis: Analysis, limits: Limits) -> tuple[tuple[PairedBar, ...], Table]:
    cols = (
        Column("path", "NVTX range", "code"), Column("count", "Count", "int"), Column("cpu_ns", "CPU time", "ns"),
        Column("gpu_ns", "GPU time", "ns"), Column("kernel_count", "Kernels", "int"),
    )
    frame = _fact(analysis, "nvtx_projection", ("name", "path", "count", "cpu_ns", "gpu_ns", "kernel_count"))
    frame = frame.sort_values(["cpu_ns", "path"], ascending=[False, True], kind="stable")
    head = frame.head(limits.nvtx_chart_rows)
    bars = tuple(
        PairedBar(truncate(str(p), 80), int(c), int(g))
        for p, c, g in zip(head["path"].tolist(), head["cpu_ns"].fillna(0).tolist(), head["gpu_ns"].fillna(0).tolist())
    )
    table = table_view(frame, cols, limits.nvtx_rows, limits.cell_chars, "sorted by CPU time")
    return bars, table


def _gaps(analysis: Analysis, devices: int, limits: Limits) -> GapSummary:
    cols = (
        Column("device", "GPU", "int"), Column("start", "At", "time"), Column("duration", "Idle", "ns"),
        Column("prev_op", "After", "code"), Column("next_op", "Before", "code"),
        Column("host_nvtx_path", "Host NVTX range", "code"), Column("host_api", "Host API", "code"),
    )
    gaps = _fact(analysis, "gpu_gaps", ("device", "start", "end", "duration"))
    keys = ["duration", "start", "device"]  # sort the keys only, take the rows shown (see _utilization)
    ordered = gaps.loc[_longest(gaps[keys], keys, [False, True, True], max(0, limits.gap_rows))]
    dur = gaps["duration"].to_numpy(dtype="float64")
    window = analysis.window.duration_ns * max(1, devices)
    return GapSummary(
        count=len(gaps),
        total_ns=int(dur.sum()) if len(dur) else 0,
        largest_ns=int(dur.max()) if len(dur) else 0,
        median_ns=float(np.median(dur)) if len(dur) else 0.0,
        share=(float(dur.sum()) / window) if window > 0 else None,
        table=table_view(ordered, cols, limits.gap_rows, limits.cell_chars, "longest first", total=len(gaps)),
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


def _breakdown(analysis: Analysis, limits: Limits) -> tuple[BreakdownView, ...]:
    """The timeline breakdown per GPU (empty when the fact is not there: a trace or a build without it)."""
    frame = _optional_fact(analysis, "timeline_breakdown")
    if frame is None or frame.empty:
        return ()
    need = ("device", "scope", "key", "cause", "detail", "duration_ns")
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise _Unavailable(f"fact 'timeline_breakdown' lacks columns {', '.join(missing)}")
    order = {c: i for i, (c, _) in enumerate(BREAKDOWN_CAUSES)}
    frame = frame[list(need)]
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
        views.append(BreakdownView(
            device=dev, window=window,
            details=table_view(details, cols, limits.breakdown_details, limits.cell_chars,
                           "the window by cause and detail, largest first"),
            steps=tuple(steps[: limits.breakdown_steps]), steps_total=len(steps),
            ranges=tuple(ranges[: limits.breakdown_ranges]), ranges_total=len(ranges),
            summary=summary,
        ))
    return tuple(views)


_PHASE_KNOWN: tuple[Column, ...] = (
    Column("name", "Phase", "text"), Column("path", "Path", "code"), Column("count", "Count", "int"),
    Column("cpu_ns", "CPU wall", "ns"), Column("cpu_total_ns", "CPU wall", "ns"),
    Column("cpu_mean_ns", "CPU mean", "ns"), Column("cpu_p95_ns", "CPU p95", "ns"),
    Column("gpu_ns", "GPU time", "ns"), Column("gpu_span_ns", "GPU span", "ns"),
    Column("waited", "Waited", "text"), Column("measure", "Measured by", "text"),
    Column("phase_ns", "Phase time", "ns"), Column("busy_share", "GPU busy", "share"),
    Column("kernel_count", "Kernels", "int"), Column("top_kernel", "Top kernel", "code"),
)
_PHASE_MAX_COLUMNS = 14
#: ``measure`` codes of the phases fact as the reports print them.
MEASURE_LABELS = {"cpu_wall": "CPU wall", "gpu": "GPU timeline", "mixed": "mixed"}
#: The columns a narrow rendering (Markdown) keeps: the numbers that say which one measures a phase.
PHASE_CORE_COLUMNS = ("name", "count", "cpu_ns", "cpu_total_ns", "gpu_ns", "gpu_span_ns", "waited", "measure",
                      "phase_ns")


def _phases(frame: pd.DataFrame, limits: Limits) -> Table:
    """The optional ``phases`` fact: the known columns that are present (in a fixed order), then other
    columns formatted by their names, up to a readable width (the JSON report has the same columns).
    The caption says which number measures the phases (see :func:`phase_caption`)."""
    cols = [c for c in _PHASE_KNOWN if c.key in frame.columns]
    known = {c.key for c in _PHASE_KNOWN}
    if len(cols) < 4:  # an unfamiliar phases table: show what it has
        cols += [
            Column(str(c), _labelize(str(c), kind), kind)
            for c in frame.columns if c not in known
            for kind in (_evidence_kind(str(c), frame[c].head(limits.phase_rows).tolist()),)
        ]
    shown = frame
    if "measure" in frame.columns:
        shown = frame.assign(measure=frame["measure"].map(lambda m: MEASURE_LABELS.get(m, m)))
    return table_view(shown, cols[:_PHASE_MAX_COLUMNS], limits.phase_rows, limits.cell_chars, phase_caption(frame))


def phase_caption(frame: pd.DataFrame, names: int = 3) -> str:
    """Which number measures the phases of ``frame`` (a ``phases`` fact), naming the phases whose CPU
    wall time does not (their ranges ended before their GPU work, or began behind earlier work)."""
    if "measure" not in frame.columns or "phase_ns" not in frame.columns or frame.empty:
        return ""
    cpu_col = "cpu_total_ns" if "cpu_total_ns" in frame.columns else "cpu_ns"
    if cpu_col not in frame.columns:
        return ""
    rule = ("Phase time is what a timer synchronizing before and after a phase measures: the range's CPU "
            "wall time when the range waited for its GPU work and nothing was queued ahead of it, else read "
            "from the GPU timeline, to the end of its GPU work (a range that ends before its work times only "
            "the kernel launches) and from the end of earlier work it waited behind.")
    off = frame[frame["measure"].isin(("gpu", "mixed"))]
    if off.empty:
        return rule + " Here every phase's CPU wall time measures it."
    count = off["count"].clip(lower=1).astype("float64")
    gap = (off["phase_ns"] - off[cpu_col]).abs().astype("float64")
    top = off.assign(_g=gap.to_numpy(), _cpu=(off[cpu_col] / count).to_numpy(),
                     _phase=(off["phase_ns"] / count).to_numpy())
    top = top.sort_values(["_g", "name"], ascending=[False, True], kind="stable").head(names)
    listed = "; ".join(
        f"{truncate(str(n), 60)}: CPU wall {fmt_ms(c)}, phase time {fmt_ms(g)} per instance"
        for n, c, g in zip(top["name"].tolist(), top["_cpu"].tolist(), top["_phase"].tolist()))
    more = len(off) - len(top)
    tail = f"; {more:,} more" if more > 0 else ""
    verb = "is" if len(off) == 1 else "are"
    return (f"{rule} {plural(len(off), 'phase')} {verb} measured on the GPU timeline ({listed}{tail}); to time "
            "them in code, call torch.cuda.synchronize() before and after, or use CUDA events.")


def _ncu(ncu: Any, limits: Limits, timeline: bool = True) -> tuple[Table, RooflineChart | None]:
    frame = getattr(ncu, "kernels", None)
    if not isinstance(frame, pd.DataFrame):
        raise _Unavailable("Nsight Compute data has no 'kernels' table")
    missing = [c for c in NCU_COLUMNS if c not in frame.columns]
    if missing:
        raise _Unavailable(f"Nsight Compute kernels lack columns {', '.join(missing)}")
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


def _ncu_rules(ncu: Any, limits: Limits) -> Table | None:
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


def _ncu_header(analysis: Analysis) -> tuple[int, int]:
    """Profiled kernel time and launches of an Nsight Compute report analyzed on its own."""
    kernels = getattr(analysis.ncu, "kernels", None)
    if not isinstance(kernels, pd.DataFrame) or kernels.empty:
        return 0, 0
    return int(pd.to_numeric(kernels["duration_ns"], errors="coerce").fillna(0).sum()), len(kernels)


def with_findings(section: TraceSection, findings: list[Finding], limits: Limits | None = None) -> TraceSection:
    """``section`` with its findings replaced (list, verdict, counts, accepted), the rest unchanged: a
    multi-GPU job's rank sections are built where the rank's trace is, and findings marked afterwards
    (``--write-accepted``) are shown through this."""
    h = section.header
    views, _ = finding_views(findings, h.analyzed_ns, f"t{section.index}-", limits or Limits())
    verdict, problems, impact = _verdict(findings, h.analyzed_ns, h.gpu_busy_share, h.device_count,
                                         not_checked=len(section.not_checked))
    summed, tally = _tally(findings, impact)
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
        kernel_ns, kernel_count = _ncu_header(analysis)
    else:
        busy_ns, busy_devices = _busy(analysis, notes)
        devices = max(busy_devices, used)
        if busy_ns is not None and window.duration_ns > 0 and devices > 0:
            busy_share = busy_ns / (window.duration_ns * devices)
        kernel_ns, kernel_count = _kernel_time(analysis)
    prefix = f"t{index}-" if multi else ""
    findings, _ = finding_views(analysis.findings, window.duration_ns, prefix, limits)
    verdict, problems, impact = _verdict(analysis.findings, window.duration_ns, busy_share, devices,
                                         not_checked=len(getattr(analysis, "not_checked", ()) or ()))
    summed, tally = _tally(analysis.findings, impact)
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
        except _Unavailable as err:
            notes.append(f"{label} not shown: {err}")

    def util() -> None:
        parts["utilization"] = _utilization(analysis, names, limits)

    def cats() -> None:
        parts["categories"], parts["category_table"] = _categories(analysis, limits)

    def kernels() -> None:
        parts["top_kernels"] = _top_kernels(analysis, limits)

    def nvtx() -> None:
        parts["nvtx_chart"], parts["nvtx"] = _nvtx(analysis, limits)

    def gaps() -> None:
        parts["gaps"] = _gaps(analysis, devices, limits)

    def breakdown() -> None:
        parts["breakdown"] = _breakdown(analysis, limits)

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
        phases = _optional_fact(analysis, "phases")
        if phases is not None:
            parts["phases"] = _phases(phases, limits)
    if analysis.ncu is not None:
        def ncu() -> None:
            parts["ncu"], parts["roofline"] = _ncu(analysis.ncu, limits, timeline=not ncu_only)
            parts["ncu_rules"] = _ncu_rules(analysis.ncu, limits)

        attempt("Nsight Compute metrics", ncu)
    parts["baseline"] = _baseline(analysis, notes)
    skipped = tuple(getattr(analysis, "not_applicable", ()) or ())
    if skipped:
        parts["not_applicable"] = tuple(name for name, _ in skipped)
        parts["not_applicable_reason"] = skipped[0][1]

    def signals() -> None:
        parts["signals"] = _signals(analysis, limits)

    attempt("Call stacks, GPU metrics and power", signals)

    def memory() -> None:
        parts["memory"] = _memory(analysis, limits)

    if not ncu_only:
        attempt("Device memory", memory)
    return TraceSection(
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
    )


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
    from analyzer._version import __version__

    if not analyses:
        raise ValueError("build_report needs at least one analysis")
    multi = len(analyses) > 1
    sections = tuple(trace_section(a, i, multi, limits) for i, a in enumerate(analyses, start=1))
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
