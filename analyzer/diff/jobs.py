"""Multi-GPU jobs on either side of a diff.

A job side is the JSON document of a job report (``analyze r0.sqlite r1.sqlite --format json``, or one
report holding several ranks): its ``job`` block (per-rank compute, communication, waits; the job's own
findings) and one ``baseline`` per rank. A trace side that turns out to be a job is rendered to that same
document first (:func:`analyzer.diff.inputs.load_run`), so a diff of traces and a diff of their JSON
reports are the same diff.

What a diff compares for a job:

* **Step time of the job:** per step, the slowest rank's step time (ranks' steps matched by name, else
  by position from the end). A collective makes every rank wait for the last one, so this is what the
  job pays per iteration; it goes through the same significance test as a single run's step time.
* **Per rank, per step:** compute (time compute kernels ran), waiting for other ranks at collectives,
  exposed communication (communication with no compute beside it, waits included), and how long the
  others waited for this rank.
* **What moved**, in words: a straggler resolved or appeared (the others' wait for one rank), exposed
  communication hidden or exposed, compute per step changed on a rank.

Everything else (kernels, copies, NVTX phases, findings) compares the job as one run: the ranks' tables
summed, every rank's findings plus the job's (straggler, rank-imbalance, ...).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from analyzer.reports.baseline import (
    CategoryRow,
    CopyRow,
    KernelRow,
    PhaseRow,
    ReportFormatError,
    RuleRow,
    RunSummary,
    Steps,
    Table,
    from_report,
)
from analyzer.reports.format import fmt_duration, plural

#: a per-step quantity moved when it changed by at least this much of the job's step ...
MOVED_STEP_SHARE = 0.03
#: ... and by at least this share of itself
MOVED_PCT = 20.0
#: the job rule whose finding names a rank that holds the job back
STRAGGLER_RULE = "straggler"


@dataclass(frozen=True)
class RankNumbers:
    """One rank of a job, per step of its own window (ns)."""

    rank: int
    label: str
    steps: int
    step_ns: float  # mean step time
    compute_ns: float  # compute kernels ran (union)
    comm_ns: float  # communication kernels ran (union)
    exposed_ns: float  # communication with no compute beside it (waits included)
    exposed_wait_ns: float  # the part of exposed_ns spent waiting for other ranks
    wait_ns: float  # this rank's collectives waited for the last rank
    lead_ns: float  # the others waited for this rank (collectives it reached last)

    @property
    def exposed_transfer_ns(self) -> float:
        """Exposed communication without the waits for other ranks: the transfers nothing hid."""
        return self.exposed_ns - self.exposed_wait_ns


@dataclass(frozen=True)
class JobSummary:
    """A job as a diff sees it."""

    world_size: int
    ranks: tuple[RankNumbers, ...]  # rank order
    culprit_rank: int | None
    verdict: str
    runs: tuple[RunSummary, ...]  # the ranks' baselines, rank order
    findings: Table  # the job's own findings as RuleRows (straggler, rank-imbalance, ...)

    def rank(self, r: int) -> RankNumbers | None:
        return next((x for x in self.ranks if x.rank == r), None)

    @property
    def straggler(self) -> RankNumbers | None:
        """The rank the job's ``straggler`` finding names (the culprit rank of the job report, else the
        rank the others waited for longest); None when the job has no such finding."""
        if len(self.ranks) < 2 or not any(r.rule == STRAGGLER_RULE for r in self.findings.rows):
            return None
        named = self.rank(self.culprit_rank) if self.culprit_rank is not None else None
        return named or max(self.ranks, key=lambda x: (x.lead_ns, -x.rank))


def is_job_report(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("job"), dict)


def _number(row: Mapping[str, Any], key: str, where: str, err: Any) -> float:
    value = row.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise err(f"{where}.{key} is not a number")
    return float(value)


def job_from_report(doc: dict[str, Any], path: str) -> JobSummary:
    """The :class:`JobSummary` of a job report's JSON document; one-line :class:`ReportFormatError`
    for a malformed one."""

    def err(message: str) -> ReportFormatError:
        return ReportFormatError(path, message, hint="write it again with 'analyze RANK_FILES --format json'")

    job = doc["job"]
    rows = job.get("ranks")
    traces = doc.get("traces")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise err("job.ranks is not a list of ranks")
    shown = job.get("ranks_in_full")
    if isinstance(shown, list) and isinstance(traces, list) and len(shown) < len(rows):
        raise ReportFormatError(path, f"shows {len(shown)} of its {len(rows)} ranks in full; comparing a job "
                                "needs every rank's steps and kernels",
                                hint="write it again with 'analyze RANK_FILES --format json --rank-sections all', "
                                     "or compare the rank files themselves")
    if not isinstance(traces, list) or len(traces) != len(rows):
        raise err(f"holds {len(traces) if isinstance(traces, list) else 'no'} traces for {len(rows)} ranks")
    ranks = []
    for i, row in enumerate(rows):
        where = f"job.ranks[{i}]"
        rank = row.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise err(f"{where}.rank is not a whole number")
        steps = _number(row, "steps", where, err)
        steps = steps if math.isfinite(steps) and steps > 0 else math.nan
        window_steps = job.get("window", {}).get("steps") if isinstance(job.get("window"), dict) else None
        jsteps = float(window_steps) if isinstance(window_steps, int) and window_steps > 0 else steps

        def per(key: str, n: float = steps, where: str = where) -> float:
            v = _number(row, key, where, err)
            return v / n if math.isfinite(v) and math.isfinite(n) else math.nan

        ranks.append(RankNumbers(
            rank=rank, label=str(row.get("label", "")), steps=int(steps) if math.isfinite(steps) else 0,
            step_ns=_number(row, "step_ns", where, err), compute_ns=per("compute_ns"), comm_ns=per("comm_ns"),
            exposed_ns=per("exposed_ns"), exposed_wait_ns=per("exposed_wait_ns"),
            # waits are summed over the collectives inside the job window: per step of that window
            wait_ns=per("wait_ns", jsteps), lead_ns=per("lead_ns", jsteps),
        ))
    order = sorted(range(len(ranks)), key=lambda i: ranks[i].rank)
    runs = tuple(from_report(doc, path, trace_index=i) for i in order)
    culprit = job.get("culprit_rank")
    findings = []
    for i, f in enumerate(job.get("findings") or []):
        if not isinstance(f, dict) or not isinstance(f.get("rule"), str):
            raise err(f"job.findings[{i}] is not a finding")
        impact = f.get("impact_ns")
        findings.append(RuleRow(f["rule"], str(f.get("id", "")), str(f.get("title", "")),
                                str(f.get("severity", "warning")), 1,
                                int(impact) if isinstance(impact, (int, float)) and not isinstance(impact, bool)
                                and math.isfinite(impact) else None, str(f.get("message", ""))))
    world = job.get("world_size")
    return JobSummary(
        world_size=world if isinstance(world, int) and not isinstance(world, bool) else len(ranks),
        ranks=tuple(ranks[i] for i in order),
        culprit_rank=culprit if isinstance(culprit, int) and not isinstance(culprit, bool) else None,
        verdict=str(doc.get("verdict", "")), runs=runs, findings=_merge_rules([Table(tuple(findings), len(findings))]),
    )


# -- the job as one run ------------------------------------------------------------------------------


def job_steps(runs: Sequence[RunSummary]) -> tuple[tuple[str, ...], tuple[int, ...], str]:
    """Per step, the slowest rank's step time: ``(names, durations, how)``. Steps are matched by name
    when every rank has the same names, else by position from the end (the steadiest steps)."""
    named = [dict(zip(r.steps.names, r.steps.durations_ns)) for r in runs]
    first = runs[0].steps.names
    if all(r.steps.names == first for r in runs) or all(set(first) <= set(n) for n in named):
        names = tuple(first)
        return names, tuple(max(n[s] for n in named) for s in names), "matched by name"
    k = min(len(r.steps.durations_ns) for r in runs)
    if k == 0:
        return (), (), "a rank has no steps"
    durations = tuple(max(r.steps.durations_ns[len(r.steps.durations_ns) - k + i] for r in runs) for i in range(k))
    return tuple(first[len(first) - k:]), durations, "matched by position (the ranks name their steps differently)"


def _merge(tables: Sequence[Table], key: Any, make: Any) -> Table:
    rows: dict[Any, list[Any]] = {}
    for t in tables:
        for r in t.rows:
            rows.setdefault(key(r), []).append(r)
    merged = [make(group) for group in rows.values()]
    return Table(tuple(merged), max(len(merged), max((t.total_rows for t in tables), default=0)),
                 sum(t.other_ns for t in tables))


_SEV = {"info": 0, "warning": 1, "error": 2}


def _merge_rules(tables: Sequence[Table]) -> Table:
    def make(group: list[RuleRow]) -> RuleRow:
        top = max(group, key=lambda r: r.impact_ns or 0)
        impacts = [r.impact_ns for r in group if r.impact_ns is not None]
        sev = max((r.severity for r in group), key=lambda s: _SEV.get(s, 0))
        return RuleRow(top.rule, top.id, top.title, sev, sum(r.count for r in group),
                       sum(impacts) if impacts else None, top.message)

    return _merge(tables, lambda r: r.rule, make)


def as_run(job: JobSummary, name: str, path: str, input_kind: str) -> RunSummary:
    """The job as one run: per-step times of the slowest rank, every rank's tables summed, every
    rank's findings plus the job's."""
    runs = job.runs
    names, durations, how = job_steps(runs)
    sources = {r.steps.source for r in runs}
    first = runs[0]
    steps = Steps(
        source=first.steps.source if len(sources) == 1 else "none",
        description=f"{plural(len(durations), 'job step')} ({first.steps.description.split(' ', 1)[-1]}; "
                    f"the slowest of {len(runs)} ranks per step, {how})",
        durations_ns=durations, names=names, ops_per_step=max(r.steps.ops_per_step for r in runs),
        total=len(durations),
    )
    gpus = {r.gpus for r in runs}
    phases = _merge([r.phases for r in runs], lambda r: r.path,
                    lambda g: PhaseRow(g[0].path, sum(x.count for x in g), sum(x.cpu_ns for x in g),
                                       sum(x.gpu_ns for x in g)))
    kernels = _merge([r.kernels for r in runs], lambda r: r.key,
                     lambda g: KernelRow(g[0].key, max(g, key=lambda x: x.total_ns).name, g[0].category,
                                         sum(x.count for x in g), sum(x.total_ns for x in g),
                                         max(x.variants for x in g)))
    categories = _merge([r.categories for r in runs], lambda r: r.category,
                        lambda g: CategoryRow(g[0].category, sum(x.count for x in g), sum(x.total_ns for x in g)))
    copies = _merge([r.copies for r in runs], lambda r: r.kind,
                    lambda g: CopyRow(g[0].kind, sum(x.count for x in g), sum(x.bytes for x in g),
                                      sum(x.total_ns for x in g)))
    busy = [r.gpu_busy_ns for r in runs]
    findings = [row for r in runs for row in r.findings.rows]
    return replace(
        first, name=name, path=path, input_kind=input_kind,
        gpus=f"{len(runs)} ranks: " + (gpus.pop() if len(gpus) == 1 else ", ".join(sorted(gpus))),
        device_count=sum(max(1, r.device_count) for r in runs),
        window_description=f"{len(runs)} ranks, each in its own window ({first.window_description})",
        analyzed_ns=max(r.analyzed_ns for r in runs),
        gpu_busy_ns=None if any(b is None for b in busy) else sum(b for b in busy if b is not None),
        kernel_ns=sum(r.kernel_ns for r in runs), kernel_count=sum(r.kernel_count for r in runs),
        steps=steps, phases=phases, kernels=kernels, categories=categories, copies=copies,
        rules=_merge_rules([*(r.rules for r in runs), job.findings]),
        findings=Table(tuple(findings), len(findings)),
        notes=tuple(n for r in runs for n in r.notes), job=job,
    )


# -- job against job ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankChange:
    rank: int
    base: RankNumbers | None
    head: RankNumbers | None


@dataclass(frozen=True)
class JobDiff:
    base_world: int
    head_world: int
    ranks: tuple[RankChange, ...]
    moved: tuple[str, ...]  # what moved, in words, largest first
    base_straggler: int | None
    head_straggler: int | None


def _moved(b: float, h: float, step: float) -> bool:
    if not (math.isfinite(b) and math.isfinite(h)):
        return False
    d = abs(h - b)
    return d >= MOVED_STEP_SHARE * step and d >= MOVED_PCT / 100.0 * max(abs(b), abs(h), 1.0)


def compare_jobs(base: JobSummary, head: JobSummary) -> JobDiff:
    """Per rank BASE against HEAD, and the sentences naming what moved."""
    numbers = sorted({x.rank for x in base.ranks} | {x.rank for x in head.ranks})
    rows = tuple(RankChange(r, base.rank(r), head.rank(r)) for r in numbers)
    step = max((x.step_ns for x in (*base.ranks, *head.ranks) if math.isfinite(x.step_ns)), default=0.0)
    moved: list[tuple[float, str]] = []
    sb, sh = base.straggler, head.straggler
    if sb is not None and (sh is None or sh.rank != sb.rank):
        now = head.rank(sb.rank)
        rest = (f", {fmt_duration(now.lead_ns)} in HEAD" if now is not None and math.isfinite(now.lead_ns)
                and now.lead_ns > 0 else ", not at all in HEAD")
        moved.append((sb.lead_ns, f"straggler resolved: the others waited {fmt_duration(sb.lead_ns)} per step for "
                                  f"rank {sb.rank} in BASE{rest}"))
    if sh is not None and (sb is None or sb.rank != sh.rank):
        moved.append((sh.lead_ns, f"new straggler: the others wait {fmt_duration(sh.lead_ns)} per step for rank "
                                  f"{sh.rank} in HEAD"))
    if sb is not None and sh is not None and sb.rank == sh.rank and _moved(sb.lead_ns, sh.lead_ns, step):
        word = "less" if sh.lead_ns < sb.lead_ns else "more"
        moved.append((abs(sh.lead_ns - sb.lead_ns),
                      f"straggler rank {sb.rank} holds the job back {word}: the others wait "
                      f"{fmt_duration(sb.lead_ns)} -> {fmt_duration(sh.lead_ns)} per step"))
    straggler_named = bool(moved)
    # the same movement on several ranks is one sentence: (kind) -> [(rank, base, head)]
    by_kind: dict[str, list[tuple[int, float, float]]] = {}
    for rc in rows:
        b, h = rc.base, rc.head
        if b is None or h is None:
            continue
        transfer_b, transfer_h = b.exposed_transfer_ns, h.exposed_transfer_ns
        if _moved(transfer_b, transfer_h, step):
            kind = "communication exposed" if transfer_h > transfer_b else "communication hidden"
            by_kind.setdefault(kind, []).append((rc.rank, transfer_b, transfer_h))
        if _moved(b.compute_ns, h.compute_ns, step):
            by_kind.setdefault("compute", []).append((rc.rank, b.compute_ns, h.compute_ns))
        if not straggler_named and _moved(b.wait_ns, h.wait_ns, step):  # waits mirror a straggler's lead
            by_kind.setdefault("waiting for the other ranks", []).append((rc.rank, b.wait_ns, h.wait_ns))
    what = {"communication exposed": "exposed communication (waits left out)",
            "communication hidden": "exposed communication (waits left out)"}
    for kind, items in by_kind.items():
        items.sort(key=lambda x: -abs(x[2] - x[1]))
        values = ", ".join(f"rank {r} {fmt_duration(b)} -> {fmt_duration(h)}" for r, b, h in items[:4])
        more = f" and {len(items) - 4} more ranks" if len(items) > 4 else ""
        label = f"{kind}: {what[kind]}" if kind in what else kind
        moved.append((max(abs(h - b) for _, b, h in items), f"{label} per step: {values}{more}"))
    if base.world_size != head.world_size:
        moved.append((math.inf, f"the job size changed: {base.world_size} ranks in BASE, {head.world_size} in HEAD"))
    moved.sort(key=lambda m: -m[0])
    return JobDiff(base.world_size, head.world_size, rows, tuple(m[1] for m in moved),
                   None if sb is None else sb.rank, None if sh is None else sh.rank)


__all__ = ["JobDiff", "JobSummary", "RankChange", "RankNumbers", "as_run", "compare_jobs", "is_job_report",
           "job_from_report", "job_steps"]
