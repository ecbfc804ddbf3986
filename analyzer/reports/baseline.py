"""The diff baseline of one analysis, carried by every JSON report: :class:`RunSummary`.

Built from an :class:`~analyzer.analysis.Analysis` (:func:`summarize`), written into every JSON report
under ``traces[i].baseline`` (:meth:`RunSummary.baseline_dict`), and read back from such a report
(:func:`from_report`). A diff computed from a JSON report is the diff computed from the trace it came
from: everything here is integer nanoseconds, counts and text, so the round trip is exact.

Grouping keys, chosen so that two runs of one program match up even when code changed a little:

* **phases**: NVTX paths with enumerated components made generic (``step_3/forward`` ->
  ``step_N/forward``; a component's trailing number is replaced when that stem occurs with at least
  three different numbers, so ``layer_0..layer_23`` merge but ``fc1``/``fc2`` stay apart);
* **kernels**: the kernel *family*: the demangled name reduced by the same normalization the Nsight
  Compute join uses (:func:`analyzer.loading.ncu.kernel_base_name`: return type, namespaces, template
  arguments and parameter list dropped) and without a launch-specific numeric suffix (Triton's
  ``triton_poi_fused_add_mul_0``). ``elementwise_kernel<128, 4, add>`` and ``<128, 4, mul>`` are one
  family: a diff cares about where time moved, not which template instance ran.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis
from analyzer.errors import InputError
from analyzer.facts.categories import opaque_graph_share
from analyzer.facts.registry import UnknownFactError
from analyzer.reports.values import flat_parameters, gpu_label

#: Caps on what one JSON report carries for a diff (rows beyond are summed into ``other_ns``).
MAX_STEPS = 20_000
MAX_PHASES = 400
MAX_KERNELS = 600
NUMBERED = re.compile(r"^(?P<stem>.*?[^\d\s_\-#:.]?)(?P<sep>[\s_\-#:.]*)(?P<num>\d+)$")
_LAUNCH_SUFFIX = re.compile(r"(?:_\d+|\s*\[\d+\]|\s*#\d+)$")


# ---------------------------------------------------------------------------------------------------
# Typed rows


@dataclass(frozen=True)
class Steps:
    """Per-step durations of one run (see the ``steps`` fact for what a duration is)."""

    source: str  # "nvtx" | "periodic" | "annotation" | "none"
    description: str
    durations_ns: tuple[int, ...]
    names: tuple[str, ...]
    ops_per_step: int = 0  # "periodic": GPU ops per iteration
    total: int = 0  # steps before capping

    @property
    def count(self) -> int:
        return len(self.durations_ns)

    @property
    def stem(self) -> str:
        """``step_N`` for ``step_0 .. step_11``: what the steps are called, numbers made generic."""
        stems = {_generic(n) for n in self.names[:50]}
        return min(stems) if len(stems) == 1 else ", ".join(sorted(stems)[:3])


@dataclass(frozen=True)
class PhaseRow:
    path: str  # generic NVTX path
    count: int  # instances in the window
    cpu_ns: int  # wall time, clipped to the window
    gpu_ns: int  # GPU op time launched inside (nested ranges included)


@dataclass(frozen=True)
class KernelRow:
    key: str  # family
    name: str  # the family's most expensive short name (for display)
    category: str
    count: int
    total_ns: int
    variants: int  # distinct demangled names in the family


@dataclass(frozen=True)
class CategoryRow:
    category: str
    count: int
    total_ns: int


@dataclass(frozen=True)
class CopyRow:
    kind: str  # "memcpy H2D", "memcpy D2H", "memset", ...
    count: int
    bytes: int
    total_ns: int


@dataclass(frozen=True)
class RuleRow:
    """All findings of one rule in one run."""

    rule: str
    id: str
    title: str  # of its highest-impact finding
    severity: str  # the highest severity among them
    count: int
    impact_ns: int | None  # summed impact (None: none estimable)
    message: str = ""  # of its highest-impact finding


@dataclass(frozen=True)
class FindingRow:
    """One finding, as an accepted-findings file matches it (:mod:`analyzer.accepted`)."""

    rule: str
    fingerprint: str  # analyzer.findings.fingerprint: rule + stable scope
    impact_ns: int | None


@dataclass(frozen=True)
class Table:
    """Rows of one kind plus how many there were and the time of those cut by the cap."""

    rows: tuple[Any, ...]
    total_rows: int
    other_ns: int = 0


@dataclass(frozen=True)
class RunSummary:
    """One run as a diff sees it. ``input_kind`` says whether it came from a trace or a JSON report."""

    name: str
    path: str
    input_kind: str  # "trace" | "report"
    format: str
    gpus: str
    device_count: int
    window_start_ns: int
    window_end_ns: int
    window_source: str
    window_description: str
    rules_file: str
    parameters: tuple[tuple[str, str], ...]
    analyzed_ns: int
    gpu_busy_ns: int | None
    kernel_ns: int
    kernel_count: int
    steps: Steps
    phases: Table
    kernels: Table
    categories: Table
    copies: Table
    rules: Table
    findings: Table = field(default_factory=lambda: Table((), 0))  # FindingRow per finding
    notes: tuple[str, ...] = field(default=())
    # device memory (None: the trace recorded none): the highest level in the window over its GPUs, and
    # the fastest growth per step (Theil-Sen slope, whole bytes) of a GPU with two steps or more
    memory_peak_bytes: int | None = None
    memory_growth_bytes: int | None = None
    #: a multi-GPU job: its :class:`analyzer.diff.jobs.JobSummary` (the run is then the job as one run)
    job: Any = None
    #: (rule, ns): each rule's latent impact, its time below its thresholds (``Analysis.latent_impacts``;
    #: empty for a run read from a JSON report)
    latent_impacts: tuple[tuple[str, int], ...] = ()
    #: rules this run's trace cannot judge on a material part of its GPU time: rules judging individual
    #: kernels, graph kernels included (:attr:`analyzer.analysis.Analysis.graph_kernel_rules`), where CUDA
    #: graphs ran without their kernels traced (nsys' default graph-level tracing) for at least
    #: :data:`GRAPH_HIDDEN_SHARE` of the window's kernel time (:attr:`opaque_graph_share`). A diff does not
    #: call such a rule's finding resolved (or new) for it.
    graph_hidden_rules: tuple[str, ...] = ()

    @property
    def opaque_graph_share(self) -> float:
        """The share of the run's kernel time in CUDA graphs traced without their kernels (its category
        table's ``cuda_graph`` row: :func:`analyzer.facts.categories.opaque_graph_share`)."""
        return _opaque_graph_share(self.categories)

    # -- JSON --------------------------------------------------------------------------------------
    def baseline_dict(self) -> dict[str, Any]:
        """The ``baseline`` block of a trace in the JSON report (docs/report-schema.md)."""
        s = self.steps
        return {
            "steps": {
                "source": s.source,
                "description": s.description,
                "count": s.count,
                "total": s.total,
                "ops_per_step": s.ops_per_step,
                "names": list(s.names),
                "durations_ns": list(s.durations_ns),
            },
            "totals": {
                "analyzed_ns": self.analyzed_ns,
                "gpu_busy_ns": self.gpu_busy_ns,
                "kernel_ns": self.kernel_ns,
                "kernel_count": self.kernel_count,
                "device_count": self.device_count,
                "memory_peak_bytes": self.memory_peak_bytes,
                "memory_growth_bytes_per_step": self.memory_growth_bytes,
            },
            "phases": _table_dict(self.phases, PHASE_FIELDS),
            "kernels": _table_dict(self.kernels, KERNEL_FIELDS),
            "categories": _table_dict(self.categories, CATEGORY_FIELDS),
            "copies": _table_dict(self.copies, COPY_FIELDS),
            "rules": _table_dict(self.rules, RULE_FIELDS),
            "findings": _table_dict(self.findings, FINDING_FIELDS),
            "latent_impacts": {rule: ns for rule, ns in self.latent_impacts},
            "graph_hidden_rules": list(self.graph_hidden_rules),
        }


PHASE_FIELDS = ("path", "count", "cpu_ns", "gpu_ns")
KERNEL_FIELDS = ("key", "name", "category", "count", "total_ns", "variants")
CATEGORY_FIELDS = ("category", "count", "total_ns")
COPY_FIELDS = ("kind", "count", "bytes", "total_ns")
RULE_FIELDS = ("rule", "id", "title", "severity", "count", "impact_ns", "message")
FINDING_FIELDS = ("rule", "fingerprint", "impact_ns")


def _table_dict(table: Table, fields: Sequence[str]) -> dict[str, Any]:
    return {
        "columns": list(fields),
        "rows": [[getattr(r, f) for f in fields] for r in table.rows],
        "total_rows": table.total_rows,
        "other_ns": table.other_ns,
    }


# ---------------------------------------------------------------------------------------------------
# Names


def _generic(component: str) -> str:
    m = NUMBERED.match(component)
    return f"{m.group('stem')}{m.group('sep')}N" if m and m.group("stem") else component


def generic_paths(paths: Iterable[str]) -> dict[str, str]:
    """Path -> generic path: a component's trailing number becomes ``N`` when its stem occurs with at
    least three different numbers among ``paths`` (``step_0``..``step_11`` -> ``step_N``)."""
    paths = list(dict.fromkeys(paths))
    numbers: dict[tuple[str, str], set[str]] = {}
    for path in paths:
        for comp in path.split("/"):
            m = NUMBERED.match(comp)
            if m and m.group("stem"):
                numbers.setdefault((m.group("stem"), m.group("sep")), set()).add(m.group("num"))
    enumerated = {k for k, v in numbers.items() if len(v) >= 3}
    out = {}
    for path in paths:
        comps = []
        for comp in path.split("/"):
            m = NUMBERED.match(comp)
            if m and (m.group("stem"), m.group("sep")) in enumerated:
                comp = f"{m.group('stem')}{m.group('sep')}N"
            comps.append(comp)
        out[path] = "/".join(comps)
    return out


def kernel_family(name: str) -> str:
    """The family a kernel belongs to in a diff (module docstring): the Nsight Compute join's base name
    without a launch-specific numeric suffix."""
    from analyzer.loading.ncu import kernel_base_name

    base = kernel_base_name(str(name))
    stripped = _LAUNCH_SUFFIX.sub("", base)
    return stripped or base


# ---------------------------------------------------------------------------------------------------
# From an analysis


def summarize(analysis: Analysis) -> RunSummary:
    """The diff's view of ``analysis`` (facts it needs that are missing leave their table empty, with
    a note)."""
    trace, window = analysis.trace, analysis.window
    notes: list[str] = []
    gpus, _names, used = gpu_label(trace)

    def get(name: str) -> pd.DataFrame | None:
        try:
            return analysis.facts.get(name)
        except UnknownFactError as err:
            notes.append(f"fact {name!r} not available: {err}")
            return None

    steps = _steps(get("steps"), window)
    busy = get("gpu_busy")
    busy_ns = int((busy["end"] - busy["start"]).clip(lower=0).sum()) if busy is not None else None
    devices = max(used, int(busy["device"].nunique()) if busy is not None and len(busy) else 0)
    kernels_frame = get("top_kernels")
    kernels = _kernels(kernels_frame)
    kernel_ns = int(kernels_frame["total_ns"].sum()) if kernels_frame is not None and len(kernels_frame) else 0
    kernel_count = int(kernels_frame["count"].sum()) if kernels_frame is not None and len(kernels_frame) else 0
    peak, growth = _memory(analysis)
    categories = _categories(get("category_summary"))
    return RunSummary(
        name=trace.name,
        path=str(trace.info.path),
        input_kind="trace",
        format=trace.info.source_format,
        gpus=gpus,
        device_count=devices,
        window_start_ns=int(window.start_ns),
        window_end_ns=int(window.end_ns),
        window_source=window.source,
        window_description=window.description,
        rules_file=analysis.rules_file,
        parameters=flat_parameters(analysis.parameters),
        analyzed_ns=int(window.duration_ns),
        gpu_busy_ns=busy_ns,
        kernel_ns=kernel_ns,
        kernel_count=kernel_count,
        steps=steps,
        phases=_phases(get("nvtx_instances"), window.start_ns, window.end_ns),
        kernels=kernels,
        categories=categories,
        copies=_copies(get("gpu_ops"), get("copy_throughput"), window.start_ns, window.end_ns),
        rules=_rules(analysis.findings),
        findings=_findings(analysis.findings),
        notes=tuple(notes),
        memory_peak_bytes=peak,
        memory_growth_bytes=growth,
        latent_impacts=tuple(sorted((str(k), int(v)) for k, v in getattr(analysis, "latent_impacts", {}).items())),
        graph_hidden_rules=_graph_hidden_rules(analysis, categories),
    )


#: the share of kernel time in CUDA graphs traced without their kernels
#: (:func:`analyzer.facts.categories.opaque_graph_share`) from which a run cannot judge per-kernel rules, and
#: a diff's kernel tables compare mostly graphs (a graph-level trace of a program that replays one graph per
#: step: 98-100%; compile_train's reduce-overhead twin, eager optimizer: 86%)
GRAPH_HIDDEN_SHARE = 0.10


def _opaque_graph_share(categories: Table) -> float:
    return opaque_graph_share(((r.category, r.total_ns) for r in categories.rows), categories.other_ns)


def _graph_hidden_rules(analysis: Analysis, categories: Table) -> tuple[str, ...]:
    """:attr:`RunSummary.graph_hidden_rules` of ``analysis``, whose kernel categories are ``categories``."""
    kernel_rules = getattr(analysis, "graph_kernel_rules", ())
    return tuple(kernel_rules) if kernel_rules and _opaque_graph_share(categories) >= GRAPH_HIDDEN_SHARE else ()


def _memory(analysis: Analysis) -> tuple[int | None, int | None]:
    """Peak device memory over the GPUs and the fastest growth per step (None, None without memory
    events)."""
    if "memory_events" in analysis.trace.info.unavailable:
        return None, None
    try:
        growth = analysis.facts.get("memory_growth")
    except UnknownFactError:
        return None, None
    if not len(growth):
        return None, None
    stepped = growth.loc[growth["steps"].to_numpy() >= 2]
    rate = int(round(float(stepped["bytes_per_step"].max()))) if len(stepped) else None
    return int(growth["peak_bytes"].max()), rate


def _steps(frame: pd.DataFrame | None, window: Any) -> Steps:
    spans = window.steps
    if frame is None or spans is None or frame.empty:
        why = "no loop iterations found (no repeated NVTX step ranges, no repeating GPU op sequence)"
        return Steps("none", why, (), (), 0, 0)
    durations = frame["duration"].to_numpy(dtype=np.int64)
    names = [str(n) for n in frame["step"].tolist()]
    total = len(durations)
    if total > MAX_STEPS:  # keep the last ones: the steadiest
        durations, names = durations[-MAX_STEPS:], names[-MAX_STEPS:]
    return Steps(spans.source, spans.description, tuple(int(d) for d in durations), tuple(names),
                 int(spans.period) if spans.source == "periodic" else 0, total)


def _int_sums(keys: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """The groups of ``keys`` (text, never missing) in order of first appearance, as ``groupby(sort=False)``
    orders them: each group's key, first row, row count, and the exact int64 sum of each of ``values``
    (a named ``groupby.agg`` costs milliseconds on any frame; these tables have tens of rows)."""
    codes, uniques = pd.factorize(keys)
    n = len(uniques)
    first = np.full(n, len(keys), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(keys), dtype=np.int64))
    sums = []
    for value in values:
        total = np.zeros(n, dtype=np.int64)
        np.add.at(total, codes, value)
        sums.append(total)
    return np.asarray(uniques, dtype=object), first, np.bincount(codes, minlength=n).astype(np.int64), sums


def _capped(rows: list[Any], limit: int, ns: Any) -> Table:
    other = sum(int(ns(r)) for r in rows[limit:])
    return Table(tuple(rows[:limit]), len(rows), other)


def _phases(inst: pd.DataFrame | None, start: int, end: int) -> Table:
    if inst is None or inst.empty:
        return Table((), 0)
    keep = ((inst["end"] > start) & (inst["start"] < end)) | (inst["op_count"] > 0)
    inst = inst.loc[keep]
    if inst.empty:
        return Table((), 0)
    # per distinct path (ranges repeat their paths step after step), spread back by codes
    codes, distinct = pd.factorize(inst["path"].astype(object).to_numpy(object), use_na_sentinel=False)
    texts = [str(p) for p in distinct]
    mapping = generic_paths(texts)
    paths, _, count, (cpu_ns, gpu_ns) = _int_sums(np.array([mapping[t] for t in texts], dtype=object)[codes],
                                                  inst["cpu_ns"].to_numpy(np.int64), inst["gpu_ns"].to_numpy(np.int64))
    agg = pd.DataFrame({"path": paths, "count": count, "cpu_ns": cpu_ns, "gpu_ns": gpu_ns,
                        "weight": np.maximum(cpu_ns, gpu_ns)})
    agg = agg.sort_values(["weight", "path"], ascending=[False, True], kind="stable")
    rows = [PhaseRow(str(p), int(c), int(cpu), int(g))
            for p, c, cpu, g in zip(agg["path"], agg["count"], agg["cpu_ns"], agg["gpu_ns"])]
    return _capped(rows, MAX_PHASES, lambda r: max(r.cpu_ns, r.gpu_ns))


def _kernels(frame: pd.DataFrame | None) -> Table:
    if frame is None or frame.empty:
        return Table((), 0)
    names = frame["name"].astype(object).astype(str)
    fam = {n: kernel_family(n) for n in names.unique()}
    short = frame["short_name"] if "short_name" in frame.columns else names
    work = pd.DataFrame({
        "key": names.map(fam).to_numpy(object),
        "short": [str(s) if isinstance(s, str) and s else fam[n] for s, n in zip(short.tolist(), names.tolist())],
        "category": frame["category"].astype(object).fillna("other").astype(str).to_numpy(object),
        "count": frame["count"].to_numpy(np.int64),
        "total_ns": frame["total_ns"].to_numpy(np.int64),
    }).sort_values(["total_ns", "short"], ascending=[False, True], kind="stable")
    keys, first, variants, (count, total_ns) = _int_sums(work["key"].to_numpy(object), work["count"].to_numpy(np.int64),
                                                        work["total_ns"].to_numpy(np.int64))
    agg = pd.DataFrame({"key": keys, "name": work["short"].to_numpy(object)[first],
                        "category": work["category"].to_numpy(object)[first], "count": count,
                        "total_ns": total_ns, "variants": variants})
    agg = agg.sort_values(["total_ns", "key"], ascending=[False, True], kind="stable")
    rows = [KernelRow(str(k), str(n), str(c), int(cnt), int(t), int(v))
            for k, n, c, cnt, t, v in zip(agg["key"], agg["name"], agg["category"], agg["count"],
                                          agg["total_ns"], agg["variants"])]
    return _capped(rows, MAX_KERNELS, lambda r: r.total_ns)


def _categories(frame: pd.DataFrame | None) -> Table:
    if frame is None or frame.empty:
        return Table((), 0)
    frame = frame.sort_values(["total_ns", "category"], ascending=[False, True], kind="stable")
    rows = [CategoryRow(str(c), int(n), int(t))
            for c, n, t in zip(frame["category"], frame["count"], frame["total_ns"])]
    return Table(tuple(rows), len(rows))


def _not_kernel(op: pd.Series) -> np.ndarray:
    """``op != "kernel"`` per row; a categorical column compared by its codes (no million strings)."""
    if isinstance(op.dtype, pd.CategoricalDtype):
        cats = op.cat.categories
        kernel = [i for i, c in enumerate(cats) if c == "kernel"]
        codes = op.cat.codes.to_numpy()
        return codes != kernel[0] if kernel else np.ones(len(codes), dtype=bool)
    return op.to_numpy() != "kernel"


def _copies(ops: pd.DataFrame | None, copies: pd.DataFrame | None, start: int, end: int) -> Table:
    if ops is None or ops.empty:
        return Table((), 0)
    st = ops["start"].to_numpy(np.int64)
    inside = (st >= start) & (st < end) & _not_kernel(ops["op"])
    part = ops.loc[inside, ["label", "duration"]]
    if part.empty:
        return Table((), 0)
    agg = part.groupby("label", sort=True).agg(count=("duration", "size"), total_ns=("duration", "sum"))
    moved: dict[str, int] = {}
    if copies is not None and len(copies) and {"direction", "bytes"} <= set(copies.columns):
        by_dir = copies.groupby("direction", sort=True)["bytes"].sum()
        moved = {f"memcpy {d}": int(b) for d, b in by_dir.items()}
    agg = agg.reset_index().sort_values(["total_ns", "label"], ascending=[False, True], kind="stable")
    rows = [CopyRow(str(k), int(c), moved.get(str(k), 0), int(t))
            for k, c, t in zip(agg["label"], agg["count"], agg["total_ns"])]
    return Table(tuple(rows), len(rows))


def _rules(findings: Sequence[Any]) -> Table:
    from analyzer.findings import rank

    by_rule: dict[str, list[Any]] = {}
    for f in rank(list(findings)):
        by_rule.setdefault(f.rule, []).append(f)
    rows = []
    for rule, group in by_rule.items():
        top = group[0]
        impacts = [int(f.impact_ns) for f in group if f.impact_ns is not None]
        worst = max(group, key=lambda f: int(f.severity))
        rows.append(RuleRow(rule, top.id, top.title, str(worst.severity), len(group),
                            sum(impacts) if impacts else None, top.message))
    return Table(tuple(rows), len(rows))


def _findings(findings: Sequence[Any]) -> Table:
    rows = [FindingRow(f.rule, f.fingerprint, None if f.impact_ns is None else int(f.impact_ns))
            for f in findings]
    return Table(tuple(rows), len(rows))


# ---------------------------------------------------------------------------------------------------
# From a JSON report

#: The report schema versions that carry a baseline block (``1.1`` on).
BASELINE_SINCE = (1, 1)


class ReportFormatError(InputError):
    """A JSON report that cannot serve as a diff input."""


_SNIFF = 4096


def is_report(path: Path) -> bool:
    """True when ``path`` looks like a JSON report written by ``analyze --format json`` (or a diff's):
    ``analyze diff`` reads one as a side; ``analyze FOLDER`` and ``analyze sweep FOLDER`` pass over one
    written beside the traces, which is JSON too but no trace."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF)
    except OSError:
        return False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return False
    return (b'"schema_version"' in text and b'"gpu-trace-analyzer"' in text) or b'"kind": "diff"' in text


def from_report(doc: Any, path: str, *, trace_index: int | None = None) -> RunSummary:
    """The :class:`RunSummary` stored in a JSON report (``analyze --format json``). One-line
    :class:`ReportFormatError` for anything else: another schema version, several traces without
    ``trace_index``, missing or mistyped keys."""
    r = _Reader(path)
    if not isinstance(doc, dict):
        raise r.error("is not a JSON report of this analyzer (the top level is not an object)")
    if doc.get("kind") == "diff":
        raise r.error("is a diff report, not an analysis report",
                      hint="give the JSON written by 'analyze TRACE --format json'")
    version = doc.get("schema_version")
    parsed = _version(version)
    if parsed is None:
        raise r.error(f"is not a JSON report of this analyzer (schema_version {version!r})",
                      hint="give a trace or the JSON written by 'analyze TRACE --format json'")
    if parsed[0] != BASELINE_SINCE[0]:
        raise r.error(f"was written with report schema {version}, which this analyzer cannot read "
                      f"(it reads {BASELINE_SINCE[0]}.x)", hint="re-run analyze on the trace with this version")
    if parsed < BASELINE_SINCE:
        raise r.error(f"was written with report schema {version}, which has no per-step data for a diff "
                      f"(needs {BASELINE_SINCE[0]}.{BASELINE_SINCE[1]} or later)",
                      hint="re-run 'analyze TRACE --format json' with this version")
    traces = r.array(doc, "traces")
    if not traces:
        raise r.error("holds no trace")
    if trace_index is None:
        if len(traces) > 1:
            raise r.error(f"holds {len(traces)} traces; a diff compares one run with one run",
                          hint="write one JSON report per trace")
        trace_index = 0
    t = r.obj(traces, trace_index, "traces")
    info = r.obj(t, "info", "trace")
    win = r.obj(t, "window", "trace")
    base = t.get("baseline")
    if base is None:
        raise r.error("has no 'baseline' block (it is needed for a diff)",
                      hint="re-run 'analyze TRACE --format json' with this version")
    base = r.obj(t, "baseline", "trace")
    st = r.obj(base, "steps", "baseline")
    totals = r.obj(base, "totals", "baseline")
    params = r.obj(info, "parameters", "info")
    names = tuple(r.text_list(st, "names", "steps"))
    durations = tuple(r.int_list(st, "durations_ns", "steps"))
    if len(names) != len(durations):
        raise r.error("baseline.steps: names and durations_ns differ in length")
    steps = Steps(
        source=r.choice(st, "source", ("nvtx", "periodic", "annotation", "none"), "steps"),
        description=r.text(st, "description", "steps"),
        durations_ns=durations,
        names=names,
        ops_per_step=r.integer(st, "ops_per_step", "steps"),
        total=r.integer(st, "total", "steps"),
    )
    return RunSummary(
        name=r.text(info, "name", "info"),
        path=r.text(info, "path", "info"),
        input_kind="report",
        format=r.text(info, "format", "info"),
        gpus=r.text(info, "gpus", "info"),
        device_count=r.integer(totals, "device_count", "totals"),
        window_start_ns=r.integer(win, "start_ns", "window"),
        window_end_ns=r.integer(win, "end_ns", "window"),
        window_source=r.text(win, "source", "window"),
        window_description=r.text(win, "description", "window"),
        rules_file=r.text(info, "rules_file", "info"),
        parameters=tuple(sorted((str(k), r.text(params, k, "info.parameters")) for k in params)),
        analyzed_ns=r.integer(totals, "analyzed_ns", "totals"),
        gpu_busy_ns=r.integer(totals, "gpu_busy_ns", "totals", optional=True),
        kernel_ns=r.integer(totals, "kernel_ns", "totals"),
        kernel_count=r.integer(totals, "kernel_count", "totals"),
        steps=steps,
        phases=r.table(base, "phases", PHASE_FIELDS, PhaseRow, (str, int, int, int)),
        kernels=r.table(base, "kernels", KERNEL_FIELDS, KernelRow, (str, str, str, int, int, int)),
        categories=r.table(base, "categories", CATEGORY_FIELDS, CategoryRow, (str, int, int)),
        copies=r.table(base, "copies", COPY_FIELDS, CopyRow, (str, int, int, int)),
        rules=r.table(base, "rules", RULE_FIELDS, RuleRow, (str, str, str, str, int, (int, None), str)),
        findings=r.table(base, "findings", FINDING_FIELDS, FindingRow, (str, str, (int, None))),
        # absent from reports written before memory was read
        memory_peak_bytes=r.integer(totals, "memory_peak_bytes", "totals", optional=True)
        if "memory_peak_bytes" in totals else None,
        memory_growth_bytes=r.integer(totals, "memory_growth_bytes_per_step", "totals", optional=True)
        if "memory_growth_bytes_per_step" in totals else None,
        latent_impacts=_latent_impacts(r, base),
        graph_hidden_rules=tuple(r.text_list(base, "graph_hidden_rules", "baseline"))
        if "graph_hidden_rules" in base else (),
    )


def _latent_impacts(r: _Reader, base: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """The ``latent_impacts`` block (absent from reports written before it was kept: none)."""
    if "latent_impacts" not in base:
        return ()
    latent = r.obj(base, "latent_impacts", "baseline")
    return tuple(sorted((str(k), r.integer(latent, k, "baseline.latent_impacts")) for k in latent))


def _version(value: Any) -> tuple[int, int] | None:
    if not isinstance(value, str):
        return None
    m = re.fullmatch(r"(\d{1,6})\.(\d{1,6})", value.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


class _Reader:
    """Typed access to a parsed JSON report with one-line errors naming the bad key."""

    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, message: str, hint: str | None = None) -> ReportFormatError:
        return ReportFormatError(self.path, message,
                                 hint=hint or "write it again with 'analyze TRACE --format json'")

    def _get(self, obj: Any, key: Any, where: str) -> Any:
        if isinstance(obj, list):
            if not isinstance(key, int) or not 0 <= key < len(obj):
                raise self.error(f"{where}[{key}] is missing")
            return obj[key]
        if not isinstance(obj, Mapping) or key not in obj:
            raise self.error(f"{where}.{key} is missing")
        return obj[key]

    def obj(self, obj: Any, key: Any, where: str) -> dict[str, Any]:
        value = self._get(obj, key, where)
        if not isinstance(value, dict):
            raise self.error(f"{where}.{key} is not an object")
        return value

    def array(self, obj: Any, key: str) -> list[Any]:
        value = self._get(obj, key, "report")
        if not isinstance(value, list):
            raise self.error(f"report.{key} is not a list")
        return value

    def text(self, obj: Any, key: str, where: str) -> str:
        value = self._get(obj, key, where)
        if not isinstance(value, str):
            raise self.error(f"{where}.{key} is not text")
        return value

    def choice(self, obj: Any, key: str, allowed: tuple[str, ...], where: str) -> str:
        value = self.text(obj, key, where)
        if value not in allowed:
            raise self.error(f"{where}.{key} is {value[:40]!r}, not one of {', '.join(allowed)}")
        return value

    def integer(self, obj: Any, key: str, where: str, *, optional: bool = False) -> Any:
        value = self._get(obj, key, where)
        if value is None and optional:
            return None
        if not _is_int(value):
            raise self.error(f"{where}.{key} is not a whole number")
        return int(value)

    def int_list(self, obj: Any, key: str, where: str) -> list[int]:
        value = self._get(obj, key, where)
        if not isinstance(value, list) or not all(_is_int(v) for v in value):
            raise self.error(f"{where}.{key} is not a list of whole numbers")
        return [int(v) for v in value]

    def text_list(self, obj: Any, key: str, where: str) -> list[str]:
        value = self._get(obj, key, where)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"{where}.{key} is not a list of text")
        return value

    def table(self, obj: Any, key: str, fields: Sequence[str], cls: Any, types: Sequence[Any]) -> Table:
        where = f"baseline.{key}"
        t = self.obj(obj, key, "baseline")
        columns = self._get(t, "columns", where)
        if columns != list(fields):
            raise self.error(f"{where}.columns are not {', '.join(fields)}")
        rows = self._get(t, "rows", where)
        if not isinstance(rows, list):
            raise self.error(f"{where}.rows is not a list")
        out = []
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != len(fields):
                raise self.error(f"{where}.rows[{i}] does not have {len(fields)} values")
            for value, kind, name in zip(row, types, fields):
                ok = (isinstance(value, str) if kind is str else _is_int(value) if kind is int
                      else (value is None or _is_int(value)))
                if not ok:
                    raise self.error(f"{where}.rows[{i}].{name} has the wrong type")
            out.append(cls(*row))
        total = self.integer(t, "total_rows", where)
        other = self.integer(t, "other_ns", where)
        if total < len(out):
            raise self.error(f"{where}.total_rows is smaller than its rows")
        return Table(tuple(out), total, other)


def _is_int(value: Any) -> bool:
    """JSON whole numbers (bool is not one; floats only when integral and finite)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(1 << 63) <= value < (1 << 63)
    return isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2 ** 63
