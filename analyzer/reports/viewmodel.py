"""The report view model: typed, frozen, small. Built once from ``list[Analysis]``
(:mod:`analyzer.reports.build`, one module a section in :mod:`analyzer.reports.sections`); rendered three
ways.

Everything a rendering shows is decided when the model is built (what to show, in which order, capped
how); the HTML, Markdown and JSON renderers only format. The view model holds aggregates and capped
tables only, so a report of a 10M-kernel trace is as small as one of a 10-kernel trace.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from analyzer.reports.format import fmt_impact_pct, fmt_ms, plural
from analyzer.reports.values import Link

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
    code_locations_title: str = "Where the CUDA calls come from"  # "HIP calls" on ROCm
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
    ("autotune", "autotuning"),
    ("compile", "torch.compile compilation"),
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
    largest: tuple[tuple[str, str, int], ...] = ()  # per cause of the window: (cause, its largest detail, ns)


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
    breakdown_notes: tuple[str, ...] = ()  # the breakdown's unclassified part: time per GPU, why, what to record


@dataclass(frozen=True)
class ReportView:
    title: str
    created: datetime
    tool_version: str
    verdict: str
    traces: Sequence[TraceSection]  # a tuple; a job's lazy sequence (analyzer.reports.jobview.RankSections)
    comparison: ComparisonTable | None
    limits: Limits
    job: Any = None  # analyzer.reports.jobview.JobSection for a multi-GPU job, else None


#: The columns a narrow rendering (Markdown) keeps: the numbers that say which one measures a phase.
PHASE_CORE_COLUMNS = ("name", "count", "cpu_ns", "cpu_total_ns", "gpu_ns", "gpu_span_ns", "waited", "measure",
                      "phase_ns")
