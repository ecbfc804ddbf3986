"""Two :class:`~analyzer.reports.baseline.RunSummary` in, one :class:`DiffResult` out: the step-time verdict
with its significance, where the time moved (phases, kernels, categories, copies), and which findings
appeared, disappeared or changed.

Per-step normalization: phase, kernel, category and copy totals are divided by each run's number of
steps, so a run of 10 steps compares with one of 12. Without steps in both runs they are compared per
analysis window, and the report says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from analyzer.diff import stats
from analyzer.reports.baseline import GRAPH_HIDDEN_SHARE, RunSummary, Steps, Table
from analyzer.reports.format import fmt_bytes, fmt_ms, fmt_pct, plural

DEFAULT_MIN_EFFECT_PCT = 3.0
SHALLOW_OVERLAP = 0.2  # below this share of common kernel time, the two runs look like different programs
WORSE_PCT = 25.0  # a persisting finding whose impact per step grew this much is named in the verdict
CHANGED_PCT = 10.0  # a finding in both runs is "changed" when its impact per step moved this much
#: a finding of one run only is "uncovered" (HEAD only) or "masked" (BASE only) when the other run holds,
#: below the rule's thresholds, at least this share of its impact per step (the rule's latent impact):
#: the time was there in both runs, and only the threshold (mostly a share of a step that got shorter
#: or longer) moved. alloc_churn -> its fixed twin: the host copy into the staging buffer (host-work-
#: in-loop, 3.7 ms per step in BASE, 2.5 in HEAD) and the H2D copy on the compute stream (exposed-copies,
#: 2.5 and 2.0 ms) are in both programs; only HEAD's 14x shorter step lifts them over 10% and 8%
UNCOVERED_SHARE = 0.5
NEGLIGIBLE_STEP_SHARE = 0.005  # a row moved less than this share of the median step ...
NEGLIGIBLE_PCT = 5.0  # ... and less than this much of itself counts as "same"
_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class DiffSettings:
    min_effect_pct: float = DEFAULT_MIN_EFFECT_PCT  # the smallest step-time change worth calling one
    confidence: float = 0.95
    fail_on_regression_pct: float | None = None  # exit 1 at a significant slowdown of at least this
    rows: int = 15  # rows per "where the time moved" table
    accepted: frozenset[str] = frozenset()  # rules accepted by the user: not new/resolved problems
    #: an accepted-findings file (analyzer.accepted.AcceptedFindings, ``--accepted FILE``): a rule whose
    #: findings all match entries that did not grow past their limit is accepted, like the rules above
    accepted_file: Any = None


@dataclass(frozen=True)
class RunInfo:
    name: str
    path: str
    input_kind: str  # "trace" | "report"
    gpus: str
    window_description: str
    steps_source: str
    steps_description: str
    step_count: int
    analyzed_ns: int
    rules_file: str


@dataclass(frozen=True)
class StepComparison:
    """The step-time verdict. ``status``: ``faster`` | ``slower`` (significant), ``unchanged`` (no
    significant change), ``inconclusive`` (too few steps), ``not-comparable`` (no common notion of a
    step)."""

    status: str
    significant: bool
    n_base: int
    n_head: int
    base_median_ns: float | None
    head_median_ns: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    noise_floor_pct: float
    drift_base_pct: float | None
    drift_head_pct: float | None
    spread_base_pct: float | None  # interquartile range over median, percent
    spread_head_pct: float | None
    reason: str  # one sentence: why this status
    method: str
    base_durations_ns: tuple[int, ...] = ()
    head_durations_ns: tuple[int, ...] = ()
    host_base_pct: float | None = None  # share of the window the GPU was idle, percent
    host_head_pct: float | None = None
    separated: int = 0  # -1 every HEAD step shorter than every BASE step, 1 longer, 0 overlapping
    floor_source: str = ""  # what set the noise floor: min-effect | drift | run-to-run


@dataclass(frozen=True)
class ChangeRow:
    """One phase, kernel family, category or copy kind: BASE and HEAD per step (or per window)."""

    key: str
    label: str
    detail: str  # kernels: category; phases: "" ; copies: bytes text
    base_ns: float | None  # None: unknown (below BASE's cap)
    head_ns: float | None
    base_count: float | None
    head_count: float | None
    status: str  # "new" | "gone" | "changed" | "same"
    base_cpu_ns: float | None = None  # phases: CPU time per step
    head_cpu_ns: float | None = None

    @property
    def delta_ns(self) -> float:
        return (self.head_ns or 0.0) - (self.base_ns or 0.0)

    @property
    def delta_cpu_ns(self) -> float:
        return (self.head_cpu_ns or 0.0) - (self.base_cpu_ns or 0.0)

    @property
    def change_pct(self) -> float | None:
        if not self.base_ns or self.head_ns is None:
            return None
        return 100.0 * (self.head_ns / self.base_ns - 1.0)

    @property
    def weight(self) -> float:
        return max(abs(self.delta_ns), abs(self.delta_cpu_ns))


@dataclass(frozen=True)
class ChangeTable:
    rows: tuple[ChangeRow, ...]  # the biggest changes, largest first
    total_rows: int  # keys compared
    new: tuple[str, ...] = ()  # labels only in HEAD (largest first)
    gone: tuple[str, ...] = ()  # labels only in BASE


@dataclass(frozen=True)
class FindingChange:
    rule: str
    id: str
    title: str
    severity: str  # the higher of both runs
    status: str  # "new" | "resolved" | "uncovered" | "masked" | "hidden" | "changed" | "unchanged"
    base_count: int
    head_count: int
    base_impact_ns: int | None
    head_impact_ns: int | None
    base_impact_per_step_ns: float | None
    head_impact_per_step_ns: float | None
    message: str  # HEAD's when it has the rule, else BASE's
    accepted: bool = False
    #: with an accepted-findings file: findings of this rule (HEAD's, BASE's when resolved) it accepts,
    #: and those of them that grew past their limit (these count again; the rule is then not accepted)
    accepted_count: int = 0
    grown_count: int = 0
    #: for a rule that fired in one run only: the other run's latent impact per step (the rule's time
    #: there below its thresholds; None: none, or not known)
    base_latent_per_step_ns: float | None = None
    head_latent_per_step_ns: float | None = None
    #: what "worse" and "smaller" measure a persisting finding's impact per step against: 1, or HEAD's
    #: median step over BASE's when the step change was within the runs' noise (two runs of a
    #: host-bound program differ by up to 46%, and their launch and idle times with them)
    step_scale: float = 1.0
    #: when the step change was within the runs' noise: that noise per step, in ns (the noise floor times
    #: BASE's median step). A host running 13% slower in one recording lengthens the launch and idle
    #: waits by all of that time, a far larger share of them than of the step: a persisting finding's
    #: growth below it is not called worse, nor a shrinking smaller (host_sync_balanced_run2 -> its twin's
    #: rerun: launch-bound 6.8 -> 10.9 ms a step, inside the 8.6 ms two recordings of that loop differ by).
    #: 0 when the step change was beyond the noise but too few steps were recorded to call it
    noise_per_step_ns: float = 0.0

    @property
    def problem(self) -> bool:
        return _SEVERITY_RANK.get(self.severity, 0) >= 1 and not self.accepted


@dataclass(frozen=True)
class Metric:
    """A whole-run number, BASE and HEAD (per step when ``per_step``)."""

    key: str
    label: str
    kind: str  # "ns" | "share" | "count" | "bytes"
    base: float | None
    head: float | None


@dataclass(frozen=True)
class DiffResult:
    base: RunInfo
    head: RunInfo
    step: StepComparison
    per_step: bool
    metrics: tuple[Metric, ...]
    phases: ChangeTable
    kernels: ChangeTable
    categories: ChangeTable
    copies: ChangeTable
    findings: tuple[FindingChange, ...]
    verdict: str
    regression: bool
    notes: tuple[str, ...]
    settings: DiffSettings
    created: datetime
    tool_version: str
    kernel_overlap: float | None = None  # share of kernel time in families both runs have (0..1)
    job: Any = None  # analyzer.diff.jobs.JobDiff when both sides are multi-GPU jobs
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


# ---------------------------------------------------------------------------------------------------


def diff_runs(
    base: RunSummary, head: RunSummary, settings: DiffSettings = DiffSettings(), *,
    created: datetime | None = None,
) -> DiffResult:
    """Compare two runs (see the module docstring)."""
    from analyzer._version import __version__

    notes: list[str] = []
    step = _compare_steps(base, head, settings, notes)
    per_step = base.steps.total > 0 and head.steps.total > 0
    nb = base.steps.total if per_step else 1
    nh = head.steps.total if per_step else 1
    if not per_step:
        notes.append("phases, kernels and copies are compared as totals over each analysis window "
                      f"({fmt_ms(base.analyzed_ns)} vs {fmt_ms(head.analyzed_ns)}), not per step: "
                      "a longer window has more of everything")
    step_ns = max(step.base_median_ns or 0.0, step.head_median_ns or 0.0) if per_step else \
        float(max(base.analyzed_ns, head.analyzed_ns))
    tiny = NEGLIGIBLE_STEP_SHARE * step_ns
    phases = _phase_changes(base.phases, head.phases, nb, nh, settings.rows, tiny)
    kernels = _changes(base.kernels, head.kernels, nb, nh, settings.rows,
                       key=lambda r: r.key, label=lambda r: r.name, ns=lambda r: r.total_ns,
                       count=lambda r: r.count, detail=lambda r: r.category, tiny=tiny)
    categories = _changes(base.categories, head.categories, nb, nh, settings.rows,
                          key=lambda r: r.category, label=lambda r: r.category, ns=lambda r: r.total_ns,
                          count=lambda r: r.count, detail=lambda r: "", tiny=tiny)
    copies = _changes(base.copies, head.copies, nb, nh, settings.rows,
                      key=lambda r: r.kind, label=lambda r: r.kind, ns=lambda r: r.total_ns,
                      count=lambda r: r.count, detail=lambda r: "", tiny=tiny)
    # a step change within the runs' noise (a host-bound program run again at another host speed) moves
    # the time-based impacts with it: a finding is then worse or smaller only against the step's change
    scale = 1.0  # the step change the verdict states
    noise = 0.0  # ... and the time per step the runs' noise allows it
    if not step.significant and step.change_pct is not None and math.isfinite(step.change_pct):
        scale = max(1.0 + step.change_pct / 100.0, 1e-9)
        within = abs(math.log(scale)) <= stats.log_floor(step.noise_floor_pct)  # not just too few steps
        if per_step and step.base_median_ns and within:
            noise = step.noise_floor_pct / 100.0 * step.base_median_ns
    findings = _finding_changes(base, head, nb, nh, settings.accepted, settings.accepted_file, step_scale=scale,
                                noise_per_step_ns=noise)
    if settings.accepted_file is not None:
        notes.append(_accepted_note(findings, settings.accepted_file))
    overlap = _kernel_overlap(base, head)
    _context_notes(base, head, overlap, phases, notes)
    regression = (
        settings.fail_on_regression_pct is not None and step.status == "slower" and step.significant
        and step.change_pct is not None and step.change_pct >= settings.fail_on_regression_pct
    )
    job = _job_diff(base, head, notes)
    verdict = _verdict(step, findings, settings)
    if job is not None and job.moved:
        verdict += "; job: " + "; ".join(job.moved[:3])
    when = (created or datetime.now(timezone.utc)).replace(microsecond=0)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return DiffResult(
        base=_info(base), head=_info(head), step=step, per_step=per_step,
        metrics=_metrics(base, head, nb, nh), phases=phases, kernels=kernels, categories=categories,
        copies=copies, findings=findings, verdict=verdict, regression=regression, notes=tuple(notes),
        settings=settings, created=when, tool_version=__version__, kernel_overlap=overlap, job=job,
    )


def _job_diff(base: RunSummary, head: RunSummary, notes: list[str]) -> Any:
    """The per-rank comparison of two jobs (None unless both sides are jobs)."""
    from analyzer.diff.jobs import compare_jobs

    if base.job is None and head.job is None:
        return None
    if base.job is None or head.job is None:
        which, other = ("BASE", "HEAD") if base.job is not None else ("HEAD", "BASE")
        job = base.job if base.job is not None else head.job
        notes.append(f"{which} is a {job.world_size}-rank job and {other} a single run: the step times compare the "
                     f"job's slowest rank per step with the single run; no per-rank comparison")
        return None
    return compare_jobs(base.job, head.job)


def _info(run: RunSummary) -> RunInfo:
    return RunInfo(run.name, run.path, run.input_kind, run.gpus, run.window_description, run.steps.source,
                   run.steps.description, run.steps.total, run.analyzed_ns, run.rules_file)


# -- steps -------------------------------------------------------------------------------------------


def _method(settings: DiffSettings, exact: bool | None) -> str:
    dist = "exact null distribution" if exact else "normal approximation" if exact is False else "exact or normal"
    return stats.METHOD.format(conf=settings.confidence, dist=dist, min_steps=stats.MIN_STEPS,
                               alpha=1 - settings.confidence,
                               floor=f"the largest of {fmt_pct(settings.min_effect_pct)}, the drift either run "
                                     "shows within itself and the run-to-run variation of host-bound time "
                                     f"({stats.HOST_RUN_TO_RUN:g} x the larger share of the step the GPU was idle, "
                                     "calibrated on repeated runs)")


def _host(run: RunSummary) -> float | None:
    return stats.host_share(run.gpu_busy_ns, run.analyzed_ns, run.device_count)


def _compare_steps(base: RunSummary, head: RunSummary, settings: DiffSettings, notes: list[str]) -> StepComparison:
    return compare_step_times(base.steps, head.steps, _host(base), _host(head), settings, notes)


def compare_step_times(sb: Steps, sh: Steps, host_b: float | None, host_h: float | None, settings: DiffSettings,
                       notes: list[str]) -> StepComparison:
    """The step-time verdict from each run's steps and host share (see :mod:`analyzer.diff.stats`)."""
    b = np.asarray(sb.durations_ns, dtype=np.float64)
    h = np.asarray(sh.durations_ns, dtype=np.float64)
    dropped = int((b <= 0).sum() + (h <= 0).sum())
    b, h = b[b > 0], h[h > 0]
    if dropped:
        notes.append(f"{plural(dropped, 'step')} of zero duration left out of the step comparison")
    drift_b, drift_h = stats.drift(b), stats.drift(h)
    spread_b, spread_h = stats.spread(b), stats.spread(h)
    drift_base = None if drift_b is None else 100.0 * drift_b
    drift_head = None if drift_h is None else 100.0 * drift_h
    # what sets the noise floor (log scale), largest first: (log floor, why, kind)
    sources = [(stats.log_floor(settings.min_effect_pct), "the minimum effect (--min-effect)", "min-effect")]
    for label, d, n in (("BASE", drift_b, len(b)), ("HEAD", drift_h, len(h))):
        if d is not None and d > -1:
            half = n // 2
            sources.append((abs(math.log1p(d)), f"{label}'s own steps drifted {_signed(100.0 * d)} during its run "
                            f"(median of its last {half} steps against its first {half})", "drift"))
    unknown = [label for x, label in ((host_b, "BASE"), (host_h, "HEAD")) if x is None]
    if unknown:  # without the GPU's busy time, assume the worst: a host-bound loop
        sources.append((stats.HOST_RUN_TO_RUN, f"two runs of a host-bound program differ by up to "
                        f"{fmt_pct(stats.floor_pct(stats.HOST_RUN_TO_RUN))}, and {' and '.join(unknown)} do"
                        f"{'es' if len(unknown) == 1 else ''} not say how busy the GPU was (calibrated on repeated "
                        "runs, docs/diff-calibration.md)", "run-to-run"))
    else:
        x, label = max((x, label) for x, label in ((host_b, "BASE"), (host_h, "HEAD")) if x is not None)
        sources.append((stats.HOST_RUN_TO_RUN * x, f"two runs of one program differ by up to "
                        f"{fmt_pct(stats.floor_pct(stats.HOST_RUN_TO_RUN * x))} when the GPU is idle "
                        f"{fmt_pct(100.0 * x)} of the step ({label}): the host's speed varies from run to run "
                        "(calibrated on repeated runs, docs/diff-calibration.md)", "run-to-run"))
    floor_log, floor_source, floor_kind = max(sources, key=lambda s: s[0])
    floor = stats.floor_pct(floor_log)
    apart = stats.separated(b, h)

    def make(status: str, reason: str, est: stats.ShiftEstimate | None = None) -> StepComparison:
        high = None if est is None or not math.isfinite(est.ci_high_pct) else est.ci_high_pct
        has_interval = est is not None and est.ci_low > 0
        return StepComparison(
            status=status, significant=status in ("faster", "slower"), n_base=len(b), n_head=len(h),
            base_median_ns=stats.median(b) if len(b) else None, head_median_ns=stats.median(h) if len(h) else None,
            change_pct=None if est is None else est.change_pct,
            ci_low_pct=est.ci_low_pct if est is not None and has_interval else None,
            ci_high_pct=high if has_interval else None,
            p_value=None if est is None else est.p_value, noise_floor_pct=floor,
            drift_base_pct=drift_base, drift_head_pct=drift_head,
            spread_base_pct=None if spread_b is None else 100.0 * spread_b,
            spread_head_pct=None if spread_h is None else 100.0 * spread_h, reason=reason,
            method=_method(settings, None if est is None else est.exact),
            base_durations_ns=tuple(int(v) for v in b), head_durations_ns=tuple(int(v) for v in h),
            host_base_pct=None if host_b is None else 100.0 * host_b,
            host_head_pct=None if host_h is None else 100.0 * host_h,
            separated=apart, floor_source=floor_kind,
        )

    missing = [label for label, arr in (("BASE", b), ("HEAD", h)) if not len(arr)]
    if missing:
        why = " and ".join(missing) + (" has" if len(missing) == 1 else " have") + \
            " no loop iterations (no repeated NVTX step ranges, no repeating GPU op sequence)"
        return make("not-comparable", why + "; annotate each training step with an NVTX range (e.g. step_N) to get "
                    "a step-time comparison")
    if sb.source != sh.source and {sb.source, sh.source} <= USER_MARKED:
        notes.append(f"BASE's steps are {_step_kind(sb.source)} and HEAD's {_step_kind(sh.source)}: both mark the "
                     "program's own iterations, so they are compared as the same unit of work")
    elif sb.source != sh.source:
        named = sb if sb.source == "nvtx" else sh if sh.source == "nvtx" else None
        hint = (f"if both runs have the {named.stem!r} ranges, pass --window '{named.stem.removesuffix('N')}*' so they "
                "are the steps of both" if named is not None and named.stem.endswith("N") and "," not in named.stem
                else "annotate the steps with NVTX ranges in both")
        return make("not-comparable", f"BASE's steps are {_step_kind(sb.source)} and HEAD's {_step_kind(sh.source)}: "
                    f"not the same unit of work; {hint}")
    if sb.source == "periodic" and sb.ops_per_step != sh.ops_per_step:
        return make("not-comparable", f"without NVTX steps, iterations were found as repeating GPU op sequences of "
                    f"{sb.ops_per_step} ops in BASE and {sh.ops_per_step} in HEAD: not the same unit of work; "
                    "annotate the steps with NVTX ranges")
    if sb.source == sh.source == "nvtx" and sb.stem != sh.stem:
        notes.append(f"the steps are named differently ({sb.stem!r} in BASE, {sh.stem!r} in HEAD); "
                     "they are compared as the same unit of work")
    est = stats.compare_steps(b, h, settings.confidence)
    if len(b) < stats.MIN_STEPS or len(h) < stats.MIN_STEPS:
        return make("inconclusive", f"too few steps to tell a change from noise ({len(b)} vs {len(h)}; at least "
                    f"{stats.MIN_STEPS} per run are needed, and with these counts the smallest possible p-value is "
                    f"{est.min_p_value:.2g}); profile at least {stats.MIN_STEPS} steps per run", est)
    if not est.rejects:
        return make("unchanged", f"the {est.confidence:.0%} interval of the change ({_signed(est.ci_low_pct)} .. "
                    f"{_pct_or_open(est.ci_high_pct)}) includes no change (p = {est.p_value:.2g})", est)
    if abs(math.log(est.ratio)) < floor_log:
        order = ("every HEAD step is shorter than every BASE step" if apart < 0 else
                 "every HEAD step is longer than every BASE step" if apart > 0 else "")
        seen = f"{order}, " if order else ""
        take = (f"to call it, the change must exceed {fmt_pct(floor)}"
                + (", or profile more steps of the steady state so the drift settles" if floor_kind == "drift" else
                   ", or lower --min-effect" if floor_kind == "min-effect" else
                   ", or a second run of each side must show the same change"))
        return make("unchanged", f"{seen}a change of {_signed(est.change_pct)} (p = {est.p_value:.2g}), but smaller "
                    f"than the noise floor of {fmt_pct(floor)}: {floor_source}; {take}", est)
    return make("faster" if est.change_pct < 0 else "slower",
                f"the {est.confidence:.0%} interval of the change is {_signed(est.ci_low_pct)} .. "
                f"{_signed(est.ci_high_pct)} (p = {est.p_value:.2g}) and the change exceeds the noise floor of "
                f"{fmt_pct(floor)} ({floor_source})", est)


#: step sources that mark the program's own iterations (NVTX or torch.profiler step ranges, or the
#: stretch from one program annotation to the next): comparable with each other
USER_MARKED = frozenset({"nvtx", "annotation"})


def _step_kind(source: str) -> str:
    return {"nvtx": "NVTX ranges", "periodic": "repeating GPU op sequences (no NVTX steps)",
            "annotation": "spans between a repeated annotation (no step ranges)"}.get(source, source)


def _signed(pct: float | None) -> str:
    if pct is None or not math.isfinite(pct):
        return "open"
    text = fmt_pct(pct)
    return text if text.startswith("-") else f"+{text}"


def _pct_or_open(pct: float) -> str:
    return _signed(pct) if math.isfinite(pct) else "unbounded"


# -- where the time moved ---------------------------------------------------------------------------


def _negligible(row: ChangeRow, tiny: float) -> bool:
    """Moved less than a small share of a step and less than a few percent of itself: noise."""
    if row.status != "changed" or row.base_ns is None or row.head_ns is None:
        return False
    for b, h in ((row.base_ns, row.head_ns), (row.base_cpu_ns or 0.0, row.head_cpu_ns or 0.0)):
        if abs(h - b) >= tiny and abs(h - b) >= NEGLIGIBLE_PCT / 100.0 * max(abs(b), 1.0):
            return False
    return True


def _changes(base: Table, head: Table, nb: int, nh: int, limit: int, *, key: Any, label: Any, ns: Any,
             count: Any, detail: Any, tiny: float) -> ChangeTable:
    brows = {key(r): r for r in base.rows}
    hrows = {key(r): r for r in head.rows}
    b_floor = min((ns(r) for r in base.rows), default=0) if base.total_rows > len(base.rows) else None
    h_floor = min((ns(r) for r in head.rows), default=0) if head.total_rows > len(head.rows) else None
    rows = []
    for k in list(brows) + [k for k in hrows if k not in brows]:
        br, hr = brows.get(k), hrows.get(k)
        if br is not None and hr is not None:
            status = "changed"
        elif br is None:
            # not listed in BASE: absent, unless BASE's list was capped above this kernel's time
            status = "new" if b_floor is None or ns(hr) * nb / max(nh, 1) > b_floor else "unlisted"
        else:
            status = "gone" if h_floor is None or ns(br) * nh / max(nb, 1) > h_floor else "unlisted"
        unknown_b = br is None and status == "unlisted"
        unknown_h = hr is None and status == "unlisted"
        row = ChangeRow(
            key=str(k), label=str(label(hr if hr is not None else br)), detail=str(detail(hr if hr is not None else br)),
            base_ns=None if unknown_b else (ns(br) / nb if br is not None else 0.0),
            head_ns=None if unknown_h else (ns(hr) / nh if hr is not None else 0.0),
            base_count=None if unknown_b else (count(br) / nb if br is not None else 0.0),
            head_count=None if unknown_h else (count(hr) / nh if hr is not None else 0.0),
            status=status,
        )
        if _negligible(row, tiny):
            row = _replace_status(row, "same")
        rows.append(row)
    ordered = sorted(rows, key=lambda r: (-r.weight, r.key))
    new = tuple(r.label for r in sorted(rows, key=lambda r: (-(r.head_ns or 0), r.key)) if r.status == "new")
    gone = tuple(r.label for r in sorted(rows, key=lambda r: (-(r.base_ns or 0), r.key)) if r.status == "gone")
    return ChangeTable(tuple(ordered[:limit]), len(rows), new, gone)


def _replace_status(row: ChangeRow, status: str) -> ChangeRow:
    from dataclasses import replace

    return replace(row, status=status)


def _phase_changes(base: Table, head: Table, nb: int, nh: int, limit: int, tiny: float) -> ChangeTable:
    brows = {r.path: r for r in base.rows}
    hrows = {r.path: r for r in head.rows}
    rows = []
    for k in list(brows) + [k for k in hrows if k not in brows]:
        br, hr = brows.get(k), hrows.get(k)
        status = "changed" if br is not None and hr is not None else "new" if br is None else "gone"
        row = ChangeRow(
            key=k, label=k, detail="",
            base_ns=br.gpu_ns / nb if br is not None else 0.0, head_ns=hr.gpu_ns / nh if hr is not None else 0.0,
            base_count=br.count / nb if br is not None else 0.0, head_count=hr.count / nh if hr is not None else 0.0,
            status=status,
            base_cpu_ns=br.cpu_ns / nb if br is not None else 0.0, head_cpu_ns=hr.cpu_ns / nh if hr is not None else 0.0,
        )
        rows.append(_replace_status(row, "same") if _negligible(row, tiny) else row)
    ordered = sorted(rows, key=lambda r: (-r.weight, r.key))
    new = tuple(r.label for r in rows if r.status == "new")
    gone = tuple(r.label for r in rows if r.status == "gone")
    return ChangeTable(tuple(ordered[:limit]), len(rows), new, gone)


def _kernel_overlap(base: RunSummary, head: RunSummary) -> float | None:
    """Share of kernel time (each run's distribution over families) that both runs have in common:
    ``sum(min(share_base, share_head))``; 1 for identical mixes, 0 for disjoint kernel sets."""
    tb = sum(r.total_ns for r in base.kernels.rows) + base.kernels.other_ns
    th = sum(r.total_ns for r in head.kernels.rows) + head.kernels.other_ns
    if tb <= 0 or th <= 0:
        return None
    sb = {r.key: r.total_ns / tb for r in base.kernels.rows}
    sh = {r.key: r.total_ns / th for r in head.kernels.rows}
    return float(sum(min(v, sh[k]) for k, v in sb.items() if k in sh))


def _context_notes(base: RunSummary, head: RunSummary, overlap: float | None, phases: ChangeTable,
                   notes: list[str]) -> None:
    common_phases = sum(1 for r in phases.rows if r.status in ("changed", "same"))
    opaque = [(side, run.opaque_graph_share) for side, run in (("BASE", base), ("HEAD", head))
              if run.opaque_graph_share >= GRAPH_HIDDEN_SHARE]
    if opaque and overlap is not None and overlap < SHALLOW_OVERLAP:
        side, share = max(opaque, key=lambda x: x[1])
        notes.append(f"{side} ran {fmt_pct(100 * share)} of its kernel time in CUDA graphs traced without their "
                     "kernels (nsys' default graph-level tracing), so its kernel tables hold the graphs, not the "
                     "kernels they ran: the kernel tables compare only what ran outside them (record with nsys "
                     "--cuda-graph-trace=node to compare kernels)")
    elif overlap is not None and overlap < SHALLOW_OVERLAP:
        extra = " and no NVTX range in common" if phases.total_rows and not common_phases else ""
        notes.append(f"BASE and HEAD have little in common: only {fmt_pct(100 * overlap)} of their kernel time is "
                     f"in kernel families both ran{extra}; they may be different programs, so the tables "
                     "below are a shallow comparison (the step-time comparison still holds)")
    elif overlap is None and not common_phases:
        notes.append("BASE and HEAD share no kernels and no NVTX ranges: the comparison is shallow")
    if base.gpus != head.gpus:
        notes.append(f"different GPUs: BASE ran on {base.gpus}, HEAD on {head.gpus}; the step time compares the "
                     "hardware too")
    if base.rules_file != head.rules_file or base.parameters != head.parameters:
        changed = sorted({k for k, _ in set(base.parameters) ^ set(head.parameters)})
        what = f" (parameters differ: {', '.join(changed[:5])})" if changed else ""
        notes.append(f"the two analyses used different rules{what}: new or resolved findings may come from the "
                     "rules, not the code")
    if base.window_source != head.window_source:
        notes.append(f"the analysis windows were chosen differently (BASE: {base.window_description}; "
                     f"HEAD: {head.window_description})")
    memory = _memory_note(base, head)
    if memory:
        notes.append(memory)
    for label, run in (("BASE", base), ("HEAD", head)):
        for note in run.notes:
            notes.append(f"{label}: {note}")


def _metrics(base: RunSummary, head: RunSummary, nb: int, nh: int) -> tuple[Metric, ...]:
    def per(v: float | None, n: int) -> float | None:
        return None if v is None else v / n

    def share(run: RunSummary) -> float | None:
        if run.gpu_busy_ns is None or run.analyzed_ns <= 0:
            return None
        return run.gpu_busy_ns / (run.analyzed_ns * max(1, run.device_count))

    copy_b = sum(r.total_ns for r in base.copies.rows if r.kind.startswith("memcpy"))
    copy_h = sum(r.total_ns for r in head.copies.rows if r.kind.startswith("memcpy"))
    bytes_b = sum(r.bytes for r in base.copies.rows)
    bytes_h = sum(r.bytes for r in head.copies.rows)
    unit = "per step" if nb > 1 or nh > 1 or (base.steps.total and head.steps.total) else "per window"
    if base.job is not None or head.job is not None:
        unit += " (a job: all ranks summed)"
    memory: tuple[Metric, ...] = ()
    if base.memory_peak_bytes is not None or head.memory_peak_bytes is not None:
        memory = (
            Metric("memory_peak_bytes", "Peak GPU memory", "bytes", _num(base.memory_peak_bytes),
                   _num(head.memory_peak_bytes)),
            Metric("memory_growth_bytes", "GPU memory growth per step", "bytes", _num(base.memory_growth_bytes),
                   _num(head.memory_growth_bytes)),
        )
    return (
        Metric("gpu_busy_ns", f"GPU busy {unit}", "ns", per(base.gpu_busy_ns, nb), per(head.gpu_busy_ns, nh)),
        Metric("gpu_busy_share", "GPU busy share of the window", "share", share(base), share(head)),
        Metric("kernel_ns", f"Kernel time {unit}", "ns", base.kernel_ns / nb, head.kernel_ns / nh),
        Metric("kernel_count", f"Kernels {unit}", "count", base.kernel_count / nb, head.kernel_count / nh),
        Metric("copy_ns", f"Memcpy time {unit}", "ns", copy_b / nb, copy_h / nh),
        Metric("copy_bytes", f"Bytes copied {unit}", "bytes", bytes_b / nb, bytes_h / nh),
        *memory,
    )


def _num(value: int | None) -> float | None:
    return None if value is None else float(value)


def _memory_note(base: RunSummary, head: RunSummary) -> str | None:
    """What happened to peak device memory and its growth per step, when both runs recorded it."""
    b, h = base.memory_peak_bytes, head.memory_peak_bytes
    if b is None or h is None or b <= 0:
        return None
    change = 100.0 * (h / b - 1.0)
    way = "went down" if change <= -1 else "went up" if change >= 1 else "stayed"
    text = f"peak GPU memory {way}: {fmt_bytes(b)} in BASE, {fmt_bytes(h)} in HEAD ({change:+.0f}%)"
    gb, gh = base.memory_growth_bytes, head.memory_growth_bytes
    if gb is not None and gh is not None and (gb > 0 or gh > 0):
        text += f"; growth per step {fmt_bytes(gb)} in BASE, {fmt_bytes(gh)} in HEAD"
    return text


# -- findings ----------------------------------------------------------------------------------------


def _by_file(run: RunSummary, accepted_file: Any) -> dict[str, tuple[int, int, int]]:
    """Per rule of ``run``: (findings, accepted by the file, accepted but grown past the limit)."""
    from analyzer.accepted import judge

    window_ns = max(0, run.window_end_ns - run.window_start_ns)
    steps_now = run.steps.total or None
    out: dict[str, tuple[int, int, int]] = {}
    for row in run.findings.rows:
        total, held, grown = out.get(row.rule, (0, 0, 0))
        entry = accepted_file.entries.get(row.fingerprint)
        if entry is not None:
            held += 1
            grown += int(judge(entry, accepted_file, row.impact_ns, steps_now, window_ns)[2])
        out[row.rule] = (total + 1, held, grown)
    return out


def _finding_changes(base: RunSummary, head: RunSummary, nb: int, nh: int, accepted: frozenset[str],
                     accepted_file: Any = None, step_scale: float = 1.0,
                     noise_per_step_ns: float = 0.0) -> tuple[FindingChange, ...]:
    brules = {r.rule: r for r in base.rules.rows}
    hrules = {r.rule: r for r in head.rules.rows}
    by_file_b = _by_file(base, accepted_file) if accepted_file is not None else {}
    by_file_h = _by_file(head, accepted_file) if accepted_file is not None else {}
    out = []
    for rule in list(hrules) + [r for r in brules if r not in hrules]:
        br, hr = brules.get(rule), hrules.get(rule)
        top = hr if hr is not None else br
        assert top is not None
        sev = max((r.severity for r in (br, hr) if r is not None), key=lambda s: _SEVERITY_RANK.get(s, 0))
        if br is None:
            status = ("hidden" if rule in base.graph_hidden_rules
                      else "uncovered" if _latent_holds(base, rule, nb, top.impact_ns, nh) else "new")
        elif hr is None:
            status = ("hidden" if rule in head.graph_hidden_rules
                      else "masked" if _latent_holds(head, rule, nh, br.impact_ns, nb) else "resolved")
        else:
            status = "changed" if _impact_moved(br.impact_ns, hr.impact_ns, nb, nh) else "unchanged"
        # the file judges HEAD's findings of the rule (BASE's when it is gone); every one must be held
        total, held, grown = (by_file_h if hr is not None else by_file_b).get(rule, (0, 0, 0))
        by_file = total > 0 and held == total and grown == 0
        out.append(FindingChange(
            rule=rule, id=top.id, title=top.title, severity=sev, status=status,
            base_count=br.count if br else 0, head_count=hr.count if hr else 0,
            base_impact_ns=br.impact_ns if br else None, head_impact_ns=hr.impact_ns if hr else None,
            base_impact_per_step_ns=(br.impact_ns / nb) if br and br.impact_ns is not None else None,
            head_impact_per_step_ns=(hr.impact_ns / nh) if hr and hr.impact_ns is not None else None,
            message=top.message, accepted=rule in accepted or top.id in accepted or by_file,
            accepted_count=held, grown_count=grown,
            base_latent_per_step_ns=_latent(base, rule, nb) if br is None else None,
            head_latent_per_step_ns=_latent(head, rule, nh) if hr is None else None,
            step_scale=step_scale, noise_per_step_ns=noise_per_step_ns,
        ))
    order = {"new": 0, "resolved": 1, "uncovered": 2, "masked": 3, "hidden": 4, "changed": 5, "unchanged": 6}
    return tuple(sorted(out, key=lambda f: (order[f.status], -_SEVERITY_RANK.get(f.severity, 0),
                                            -(f.head_impact_ns or f.base_impact_ns or 0), f.rule)))


def _latent(run: RunSummary, rule: str, steps: int) -> float | None:
    """``rule``'s latent impact per step in ``run`` (time below its thresholds; None: none, or a run
    read from a JSON report, which does not carry it)."""
    ns = dict(run.latent_impacts).get(rule)
    return None if not ns else ns / max(steps, 1)


def _latent_holds(run: RunSummary, rule: str, steps: int, other_ns: int | None, other_steps: int) -> bool:
    """Whether ``run`` holds, below ``rule``'s thresholds, at least :data:`UNCOVERED_SHARE` of the impact
    per step the other run's finding states."""
    latent = _latent(run, rule, steps)
    if latent is None or other_ns is None or other_ns <= 0:
        return False
    return latent >= UNCOVERED_SHARE * other_ns / max(other_steps, 1)


def _accepted_note(findings: tuple[FindingChange, ...], accepted_file: Any) -> str:
    held = [f.rule for f in findings if f.accepted and f.accepted_count]
    grown = [f.rule for f in findings if f.grown_count]
    partly = [f.rule for f in findings if f.accepted_count and not f.accepted and not f.grown_count]
    parts = [f"{plural(len(held), 'rule')} accepted ({', '.join(held)})" if held else "no rule accepted"]
    if grown:
        parts.append(f"grown past the accepted impact, so counted again: {', '.join(grown)}")
    if partly:
        parts.append(f"accepted in part (other findings of the rule are not in the file): {', '.join(partly)}")
    return f"accepted findings from {accepted_file.path}: " + "; ".join(parts)


def _impact_moved(base: int | None, head: int | None, nb: int, nh: int) -> bool:
    if base is None or head is None:
        return (base is None) != (head is None)
    b, h = base / nb, head / nh
    return abs(h - b) >= CHANGED_PCT / 100.0 * max(abs(b), 1.0)


def _moved(f: FindingChange) -> str:
    """``rule (-46%)``: the change of its impact per step (and the step's, when it was measured against it)."""
    pct = 100.0 * ((f.head_impact_per_step_ns or 0) / (f.base_impact_per_step_ns or 1) - 1)
    step = f", the step {_signed(100.0 * (f.step_scale - 1))}" if abs(f.step_scale - 1) >= 0.005 else ""
    return f"{f.rule} ({_signed(pct)}{step})"


def better(f: FindingChange) -> bool:
    """A persisting problem whose impact per step shrank by the factor :func:`worse` asks it to grow by
    (``1 + WORSE_PCT / 100``), and by that much beyond the step's own shrinking when that was within the
    noise; then also by more time per step than that noise, as :func:`worse`."""
    b, h = f.base_impact_per_step_ns, f.head_impact_per_step_ns
    return (f.status == "changed" and b is not None and h is not None and b > 0
            and h * (1 + WORSE_PCT / 100) <= b * min(1.0, f.step_scale) and b - h > f.noise_per_step_ns)


def worse(f: FindingChange) -> bool:
    """A persisting problem whose impact per step grew by at least :data:`WORSE_PCT`, and by that much
    beyond the step's own growth when that was within the noise (``f.step_scale``); then also by more
    time per step than that noise (``f.noise_per_step_ns``)."""
    b, h = f.base_impact_per_step_ns, f.head_impact_per_step_ns
    return (f.status == "changed" and b is not None and h is not None and b > 0
            and h >= b * max(1.0, f.step_scale) * (1 + WORSE_PCT / 100) and h - b > f.noise_per_step_ns)


# -- verdict -----------------------------------------------------------------------------------------


def _ms_pair(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "n/a"
    small = min(abs(a), abs(b)) / 1e6
    digits = 1 if small >= 10 else 2 if small >= 1 else 3
    return f"{a / 1e6:,.{digits}f} -> {b / 1e6:,.{digits}f} ms"


def _floor_why(step: StepComparison) -> str:
    if step.floor_source == "run-to-run":
        known = [x for x in (step.host_base_pct, step.host_head_pct) if x is not None]
        if len(known) < 2:
            return " (GPU busy time unknown: assumed host-bound, whose speed varies between runs)"
        return f" (GPU idle {fmt_pct(max(known))} of the step: host speed varies between runs)"
    if step.floor_source == "drift":
        drifts = [(abs(d), label, d) for label, d in (("BASE", step.drift_base_pct), ("HEAD", step.drift_head_pct))
                  if d is not None]
        _, label, d = max(drifts)
        return f" ({label}'s steps drifted {_signed(d)} within its run)"
    return ""


def _verdict(step: StepComparison, findings: tuple[FindingChange, ...], settings: DiffSettings) -> str:
    counts = f"{step.n_base} vs {step.n_head} steps"
    pair = _ms_pair(step.base_median_ns, step.head_median_ns)
    if step.status in ("faster", "slower") and step.change_pct is not None:
        pct = abs(step.change_pct)
        ratio = 1.0 + step.change_pct / 100.0
        if ratio >= 2:  # "1306% slower" reads badly: say how many times
            text = f"HEAD is {ratio:.1f}x slower per step ({pair}, {_signed(step.change_pct)}, {counts}, significant)"
        else:
            factor = f", {1 / ratio:.1f}x" if ratio <= 0.5 else ""
            text = f"HEAD is {fmt_pct(pct)} {step.status} per step ({pair}{factor}, {counts}, significant)"
    elif step.status == "unchanged":
        change = f", {_signed(step.change_pct)}" if step.change_pct is not None else ""
        if step.change_pct is not None and step.p_value is not None and step.ci_low_pct is not None and (
                step.ci_low_pct > 0 or (step.ci_high_pct is not None and step.ci_high_pct < 0)):
            every = {-1: "every step faster, yet ", 1: "every step slower, yet "}.get(step.separated, "")
            change += f", {every}within the {fmt_pct(step.noise_floor_pct)} noise of these runs{_floor_why(step)}"
        text = f"No significant change in step time ({pair}{change}, {counts})"
    elif step.status == "inconclusive":
        change = f", {_signed(step.change_pct)}" if step.change_pct is not None else ""
        text = (f"Too few steps to call a change ({counts}, at least {stats.MIN_STEPS} per run needed; "
                f"median {pair}{change}, not significant)")
    else:
        text = f"Step times not comparable: {step.reason}"
    new = [f.rule for f in findings if f.status == "new" and f.problem]
    resolved = [f.rule for f in findings if f.status == "resolved" and f.problem]
    grown = [f.rule for f in findings if worse(f) and f.problem]
    parts = []
    if new:
        parts.append("new: " + ", ".join(new))
    if resolved:
        parts.append("resolved: " + ", ".join(resolved))
    uncovered = [f.rule for f in findings if f.status == "uncovered" and f.problem]
    masked = [f.rule for f in findings if f.status == "masked" and f.problem]
    if uncovered:
        parts.append("uncovered (in BASE too, under the rules' thresholds): " + ", ".join(uncovered))
    if masked:
        parts.append("masked (still in HEAD, under the rules' thresholds): " + ", ".join(masked))
    hidden = [f for f in findings if f.status == "hidden" and f.problem]
    for side, gone in (("HEAD", [f.rule for f in hidden if f.head_count == 0]),
                       ("BASE", [f.rule for f in hidden if f.base_count == 0])):
        if gone:
            parts.append(f"not judged in {side}, whose CUDA graphs were traced without their kernels (record "
                         "with nsys --cuda-graph-trace=node): " + ", ".join(gone))
    shrunk = sorted((f for f in findings if better(f) and f.problem),
                    key=lambda f: -((f.base_impact_per_step_ns or 0) - (f.head_impact_per_step_ns or 0)))
    if shrunk:
        parts.append("smaller: " + ", ".join(_moved(f) for f in shrunk[:3])
                     + (f" and {len(shrunk) - 3} more" if len(shrunk) > 3 else ""))
    if grown:
        parts.append("worse: " + ", ".join(grown))
    return "; ".join([text, *parts])
