"""The job part of a report: a multi-GPU job's verdict, per-rank table, collectives and swimlanes.

:func:`build_job_report` turns a :class:`analyzer.job.run.JobAnalysis` into the same
:class:`~analyzer.reports.viewmodel.ReportView` every renderer takes: one section per rank (built on
the ranks' side from their analyses, in rank order) plus :class:`JobSection` in ``ReportView.job``.
Everything here comes from the job's tables and the ranks' small results, never from a trace, so a
Dask run and a serial run give the same bytes.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, overload

import numpy as np
import pandas as pd

from analyzer.analysis import step_spans
from analyzer.findings import Severity
from analyzer.reports.format import cap_text, fmt_ms, plural
from analyzer.reports.values import py_value
from analyzer.reports.sections.common import table_view
from analyzer.reports.sections.findings import finding_views
from analyzer.reports.wording import in_words
from analyzer.reports.viewmodel import (
    Column,
    FindingView,
    Limits,
    Link,
    ReportView,
    Table,
    TraceSection,
)


@dataclass(frozen=True, slots=True)  # one per swimlane item: up to 1,600 per rank
class LaneItem:
    start: int  # ns, job clock
    end: int
    kind: str  # compute | comm | wait | host
    label: str


@dataclass(frozen=True)
class RankLane:
    rank: int
    label: str
    anchor: str
    items: tuple[LaneItem, ...]


@dataclass(frozen=True)
class JobSection:
    anchor: str
    world_size: int
    ranks_given: int
    numbering: str  # how ranks were numbered, for the reader
    verdict: str
    culprit_rank: int | None  # the rank holding the job back (None: none stands out)
    window_start_ns: int
    window_end_ns: int
    window_description: str
    steps: int
    findings: tuple[FindingView, ...]
    ranks: Table
    collectives: Table | None
    link: str
    lanes: tuple[RankLane, ...]
    lane_span: tuple[int, int] | None
    notes: tuple[str, ...]
    record: dict[str, Any]  # JSON: job summary (ranks table as records, numbering, skews)

    @property
    def steps_text(self) -> str:
        """The job's steps in words for every format: ``16 steps`` (the reference rank's iterations as its
        own analysis found them: NVTX steps, a repeated annotation, the GPU op period), or ``no steps
        found`` when its window has none ("0 steps" read as a contradiction above ranks' own numbers)."""
        return plural(self.steps, "step") if self.steps else "no steps found"


_HOW = {
    "nccl": "as NCCL numbers them (its ncclCommInitRank NVTX payloads)",
    "torch.distributed": "as torch.distributed numbers them (the traces' distributedInfo)",
    "file name": "from the file names (rank<N>)",
    "device": "by CUDA device (the traces do not record NCCL ranks)",
    "process order": "by input/process order (the traces record neither NCCL ranks nor distinct devices)",
}


def _rank_table(job: Any, sections: dict[int, str], limits: Limits) -> Table:
    frame = job.tables.tables.get("job_ranks", pd.DataFrame()).copy()
    cols = (
        Column("rank", "Rank", "text"), Column("label", "Input", "code"), Column("device", "GPU", "int"),
        Column("step_ns", "Step (mean)", "ns"), Column("compute_per_step_ns", "Compute / step", "ns"),
        Column("comm_ns", "Communication", "ns"), Column("exposed_transfer_ns", "Exposed comm. (waits left out)", "ns"),
        Column("wait_ns", "Waited for others", "ns"), Column("lead_ns", "Others waited for it", "ns"),
        Column("last", "Last to arrive", "text"), Column("skew_ns", "Clock skew", "ns"),
    )
    if frame.empty:
        return Table(cols, (), 0, "")
    frame["rank"] = [Link(f"rank {int(r)}", sections.get(int(r), "")) for r in frame["rank"]]
    frame["last"] = [f"{int(a)} of {int(b)}" for a, b in zip(frame["last_count"], frame["instances"])]
    return table_view(frame, cols, limits.devices * 64, limits.cell_chars,
                  caption="Per rank, inside its analysis window (communication: union of NCCL kernel time; "
                          "exposed communication: communication kernels with no compute beside them, less the "
                          "time they waited for other ranks, which is in the waiting columns)")


def _collective_table(job: Any, limits: Limits) -> tuple[Table | None, str]:
    coll = job.tables.tables.get("job_collectives")
    if coll is None or coll.empty:
        return None, ""
    link = str(coll["link"].iloc[0]) if "link" in coll else ""
    key = coll["collective"].astype(str) + " " + coll["algorithm"].astype(str) + "/" + coll["protocol"].astype(str)
    # with message sizes (NCCL's NVTX payloads), one row per power-of-two size band: a DDP job's
    # small and large buckets reach very different bandwidths
    nbytes = coll["bytes"].to_numpy(dtype=np.float64)
    band = np.where(nbytes > 0, np.floor(np.log2(np.where(nbytes > 0, nbytes, 1))), -1)
    g = coll.assign(key=key.str.strip(" /"), band=band).groupby(["key", "band"], sort=False)
    agg = g.agg(count=("inst", "size"), bytes=("bytes", "median"), transfer_ns=("transfer_ns", "median"),
                busbw=("busbw", "median"), bus_share=("bus_share", "median"),
                spread_ns=("spread_ns", "median")).reset_index()
    agg["bytes"] = agg["bytes"].where(agg["bytes"] >= 0)
    agg = agg.sort_values(["count", "key", "band"], ascending=[False, True, False], kind="stable")
    cols = (
        Column("key", "Collective (algorithm/protocol)", "code"), Column("count", "Count", "int"),
        Column("bytes", "Message (median)", "bytes"), Column("transfer_ns", "Transfer (median)", "ns"),
        Column("spread_ns", "Arrival spread (median)", "ns"), Column("busbw", "Bus bandwidth", "bandwidth"),
        Column("bus_share", "of link peak", "share"),
    )
    return table_view(agg, cols, limits.top_kernels, limits.cell_chars,
                  caption="Collectives matched on every rank inside the job window"), link


def _lanes(job: Any, sections: dict[int, str]) -> tuple[tuple[RankLane, ...], tuple[int, int] | None]:
    span = None
    lanes = []
    for res in job.ranks:
        off = job.offsets.get(res.rank)
        if off is None or not res.full:  # a rank not shown in full has no lane
            continue
        items = []
        for kind in ("host", "compute", "comm", "wait"):
            for s, e, label in res.lanes.get(kind, []):
                items.append(LaneItem(int(s) + off, int(e) + off, kind, str(label)))
        if items:
            lo, hi = min(i.start for i in items), max(i.end for i in items)
            span = (lo, hi) if span is None else (min(span[0], lo), max(span[1], hi))
        lanes.append(RankLane(res.rank, res.summary.label, sections.get(res.rank, ""),
                              tuple(sorted(items, key=lambda i: (i.kind, i.start, i.end)))))
    return tuple(lanes), span


def _culprit(job: Any) -> tuple[int | None, str]:
    """The rank holding the job back: the one the job's straggler finding names (else its rank-imbalance
    finding), with the job table's numbers for it (job_ranks, the fact the table and the finding read);
    no finding, no culprit (the verdict never names a rank the rules did not)."""
    ranks = job.tables.tables.get("job_ranks")
    if ranks is None or ranks.empty or len(ranks) < 2:
        return None, ""
    named = {f.rule: f.scope.rank for f in sorted(job.findings, key=lambda f: -(f.impact_ns or 0))
             if f.rule in ("straggler", "rank-imbalance") and f.scope.rank is not None}
    rank = named.get("straggler")
    if rank is not None:
        row = ranks.loc[ranks["rank"] == rank]
        if len(row):
            lead = row.iloc[0]
            return int(rank), (f"the others waited {fmt_ms(int(lead['lead_ns']))} for rank {int(rank)} "
                               f"({int(lead['last_count'])} of {int(lead['instances'])} collectives reached last)")
    rank = named.get("rank-imbalance")
    if rank is not None:
        return int(rank), f"rank {int(rank)} has the most compute per step"
    return None, ""


def _verdict(job: Any, findings: tuple[FindingView, ...], rank_problems: list[tuple[str, FindingView]]) -> str:
    """The job's verdict; ``rank_problems``: (section name, finding) of every rank's warnings and errors."""
    n = len(job.ranks)
    head = f"{n}-rank job" if n == job.world_size else f"job of {job.world_size} ranks ({n} given)"
    culprit, why = _culprit(job)
    parts = [head]
    if culprit is not None:
        parts.append(f"rank {culprit} holds it back: {why}")
    # a cause leads, as in a trace's verdict; a symptom (low utilization) is what causes explain, never
    # the biggest cause itself; accepted findings do not count
    def counted(f: FindingView) -> bool:
        return f.severity in ("warning", "error") and f.accepted != "accepted"

    problems = [f for f in findings if counted(f) and not f.symptom]
    causes = [(name, f) for name, f in rank_problems if counted(f) and not f.symptom]
    symptoms = [(name, f) for name, f in rank_problems if counted(f) and f.symptom]
    if problems:
        top = problems[0]
        parts.append(f"biggest cause: {top.title} ({top.impact_text})")
    elif causes:
        name, f = max(causes, key=lambda sf: sf[1].impact_ns or 0)
        parts.append(f"biggest cause: {f.title} on {name} ({f.impact_text})")
    elif symptoms:
        name, f = max(symptoms, key=lambda sf: sf[1].impact_ns or 0)
        parts.append(f"no cause found for the biggest symptom: {f.title} on {name} ({f.impact_text})")
    else:
        parts.append("no problems found")
    return "; ".join(parts)


class RankSections(Sequence[TraceSection]):
    """A job report's rank sections in rank order, each unpacked from its rank's result when read
    (:attr:`analyzer.job.rank.RankResult.section`), named ``rank R: input`` and with its text capped
    as the rest of the report is: a report of many ranks never holds every section as objects at once.
    Each read unpacks again, so read them in a loop (the renderers do)."""

    def __init__(self, ranks: Sequence[Any]) -> None:
        self._ranks = tuple(ranks)

    def __len__(self) -> int:
        return len(self._ranks)

    @overload
    def __getitem__(self, i: int) -> TraceSection: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[TraceSection, ...]: ...

    def __getitem__(self, i: int | slice) -> TraceSection | tuple[TraceSection, ...]:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        res = self._ranks[i]
        s = res.section
        return cap_text(replace(s, header=replace(s.header, trace_name=f"rank {res.rank}: {res.summary.label}")))


def build_job_report(job: Any, *, title: str | None = None, created: datetime | None = None,
                     limits: Limits = Limits()) -> ReportView:
    """The report of a multi-GPU job: the job section first, then one section per rank."""
    from analyzer._version import __version__

    full = [res for res in job.ranks if res.full]
    sections = RankSections(full)
    anchors: dict[int, str] = {}
    rank_problems: list[tuple[str, FindingView]] = []
    for res, s in zip(full, sections):  # one rank's section at a time
        anchors[res.rank] = s.anchor
        rank_problems += [(s.header.trace_name, f) for f in s.findings if f.severity in ("warning", "error")]
    for res in job.ranks:  # a rank shown as its table row only: its findings still count for the verdict
        if not res.full:
            views, _ = finding_views(list(res.findings), int(res.window.duration_ns), "", limits)
            rank_problems += [(f"rank {res.rank}: {res.summary.label}", f) for f in views
                              if f.severity in ("warning", "error")]
    findings, _ = finding_views(list(job.findings), int(job.window.duration_ns), "job-", limits)
    ranks_table = _rank_table(job, anchors, limits)
    coll, link = _collective_table(job, limits)
    lanes, span = _lanes(job, anchors)
    verdict = _verdict(job, findings, rank_problems)
    culprit, _ = _culprit(job)
    # a job of ROCm ranks in its ranks' words (its findings come worded from the job rules): the analyzer's
    # own notes, numbering, headers and captions
    words = job.words
    notes = [words.text(n) for n in job.notes]
    ranks_table, coll = in_words(ranks_table, words), in_words(coll, words)
    ranks_frame = job.tables.tables.get("job_ranks", pd.DataFrame())
    record = {
        "world_size": job.world_size,
        "ranks_given": len(job.ranks),
        "numbering": job.how,
        "culprit_rank": culprit,
        "window": {"start_ns": int(job.window.start_ns), "end_ns": int(job.window.end_ns),
                   "description": job.window.description, "steps": len(step_spans(job.window))},
        "ranks": [{k: py_value(v) for k, v in row.items()} for row in ranks_frame.to_dict("records")],
        "link": link,
        "notes": notes,
    }
    if len(full) < len(job.ranks):  # only then: ``traces`` holds these ranks' sections, in this order
        record["ranks_in_full"] = [res.rank for res in full]
    section = JobSection(
        anchor="job", world_size=job.world_size, ranks_given=len(job.ranks),
        numbering=words.text(_HOW.get(job.how, job.how)), verdict=verdict, culprit_rank=culprit,
        window_start_ns=int(job.window.start_ns), window_end_ns=int(job.window.end_ns),
        window_description=job.window.description, steps=len(step_spans(job.window)), findings=findings,
        ranks=ranks_table, collectives=coll, link=link, lanes=lanes, lane_span=span,
        notes=tuple(notes), record=record,
    )
    when = created or datetime.now(timezone.utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return cap_text(ReportView(  # names from a trace are bounded in every format
        title=title or f"GPU trace diagnosis: {job.world_size}-rank job",
        created=when.replace(microsecond=0),
        tool_version=__version__,
        verdict=verdict,
        traces=sections,
        comparison=None,
        limits=limits,
        job=section,
    ))


def job_problem_count(section: JobSection) -> int:
    return sum(1 for f in section.findings if Severity.parse(f.severity) >= Severity.WARNING)


def lane_kinds() -> tuple[tuple[str, str], ...]:
    """(kind, legend text) of the swimlane items, drawing order."""
    return (("host", "host: NVTX ranges of the main thread"), ("compute", "GPU: compute kernels"),
            ("comm", "GPU: communication kernels"), ("wait", "of which waiting for another rank"))


__all__ = ["JobSection", "LaneItem", "RankLane", "RankSections", "build_job_report", "job_problem_count", "lane_kinds",
           "plural", "math"]
