"""What :func:`analyzer.pipeline.analyze_inputs` returns (:class:`JobOutcome`): the one multi-GPU job,
or each input analyzed on its own. Kept apart from :mod:`analyzer.job.run`, so that a single trace's
analysis never imports the job machinery (cross-rank matching, the rank phases, Dask)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from analyzer.analysis import Analysis, Window
from analyzer.findings import Finding

if TYPE_CHECKING:
    from analyzer.accepted import AcceptedFindings
    from analyzer.job.rank import AloneResult
    from analyzer.job.run import JobAnalysis


class FindingSource(Protocol):
    """What :func:`analyzer.accepted.write_accepted` reads of one analysis: its findings, the name of
    its trace and its window."""

    @property
    def findings(self) -> list[Finding]: ...

    @property
    def trace(self) -> _Named: ...

    @property
    def window(self) -> Window: ...


class _Named(Protocol):
    @property
    def name(self) -> str: ...


@dataclass
class JobOutcome:
    """What :func:`analyzer.pipeline.analyze_inputs` found: ``job`` when the inputs are one multi-GPU
    job; otherwise ``analyses`` (one per input, each trace one rank on its own) and ``reason``.
    ``accepted``: the accepted findings marked (once, after every analysis, before any report);
    ``recorded``: the entries written by ``--write-accepted`` (None without it)."""

    job: JobAnalysis | None
    analyses: list[Analysis] | None = None
    reason: str = ""
    accepted: AcceptedFindings | None = None
    recorded: int | None = None
    #: not one job, on Dask: each input analyzed where it was prepared (in ``analyses``' place)
    alone: list[AloneResult] | None = None
    #: the JSON files a folder scan passed over, one line (``passed over 2 JSON files: ...``), or ""
    passed_over: str = ""

    @property
    def findings(self) -> list[Finding]:
        """Every finding: the job's and each rank's, or each analysis's."""
        if self.job is not None:
            return [*self.job.findings, *(f for r in self.job.ranks for f in r.findings)]
        return [f for a in self.analyses or self.alone or [] for f in a.findings]

    def finding_sources(self) -> list[FindingSource]:
        """What :func:`analyzer.accepted.write_accepted` reads (findings, trace name, window): the
        analyses, or the job's findings and each rank's."""
        if self.job is None:
            if self.alone is not None:
                return [_FindingSource(a.findings, _Name(a.name), a.window) for a in self.alone]
            return list(self.analyses or [])
        job = self.job
        sources: list[FindingSource] = [_FindingSource(job.findings, _Name(f"job of {job.world_size} ranks"),
                                                       job.window)]
        return sources + [_FindingSource(r.findings, _Name(r.summary.label), r.window) for r in job.ranks]

    def mark_accepted(self, accepted: AcceptedFindings) -> None:
        """Mark the findings matching ``accepted``: each analysis's, or the job's and each rank's (the
        rank sections, built where the ranks were analyzed, show them through
        :func:`analyzer.reports.build.with_findings`). The orchestration's one application of the
        accepted-findings file."""
        from analyzer.accepted import apply_accepted
        from analyzer.reports.build import with_findings

        self.accepted = accepted
        if self.job is None:
            for a in self.analyses or []:
                a.findings = apply_accepted(a.findings, accepted, a.window)
            for alone in self.alone or []:
                alone.findings = apply_accepted(alone.findings, accepted, alone.window)
                alone.section = with_findings(alone.section, alone.findings)
            return
        self.job.findings = apply_accepted(self.job.findings, accepted, self.job.window)
        for r in self.job.ranks:
            r.findings = apply_accepted(r.findings, accepted, r.window)
            if r.full:
                r.section = with_findings(r.section, r.findings)


@dataclass(frozen=True)
class _Name:
    name: str


@dataclass
class _FindingSource:
    findings: list[Finding]
    trace: _Name
    window: Window
