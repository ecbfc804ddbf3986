"""The Python API: :func:`analyze` runs what the ``analyze`` command runs and hands back the findings,
the verdict, every fact as a pandas DataFrame and the report in each format.

    import analyzer

    result = analyzer.analyze("trace.sqlite", window="step_*")
    result.verdict                      # the report's one-line verdict
    result.findings                     # ranked Finding objects
    result.fact("gpu_idle_gaps")        # any fact as a DataFrame (result.facts lists them)
    result.to_markdown()                # or to_html(), to_json()

The CLI is a thin layer on :func:`run` and :meth:`AnalysisResult.report`: one orchestration for both
(inputs -> jobs -> per-rank analysis -> cross-rank facts -> accepted findings -> report).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analyzer.analysis import Analysis
from analyzer.facts.range_patterns import exclude_option
from analyzer.facts.registry import all_specs
from analyzer.findings import Finding
from analyzer.job.outcome import JobOutcome
from analyzer.pipeline import analyze_inputs
from analyzer.progress import Progress
from analyzer.reports import ReportView, build_report, render
from analyzer.trace_analysis import AnalysisOptions, load_accepted_findings

if TYPE_CHECKING:
    from analyzer.accepted import AcceptedFindings
    from analyzer.job.remote import Scheduler
    from analyzer.job.run import JobAnalysis

PathLike = str | Path


@dataclass
class AnalysisResult:
    """What one :func:`analyze` call found. ``outcome``: the inputs as one multi-GPU job (``job``) or
    each trace on its own (``analyses``). The report is built once, on first use."""

    outcome: JobOutcome
    created: datetime | None = None  # the report's creation time (None: now)
    #: the accepted findings the run applied (analyzer.accepted.AcceptedFindings; None without a file)
    accepted: AcceptedFindings | None = None
    _report: ReportView | None = field(default=None, init=False, repr=False)

    @property
    def job(self) -> JobAnalysis | None:
        """The multi-GPU job (:class:`analyzer.job.run.JobAnalysis`) when the inputs were one, else None."""
        return self.outcome.job

    @property
    def analyses(self) -> list[Analysis]:
        """One :class:`~analyzer.analysis.Analysis` per trace analyzed on its own (empty for a job)."""
        return list(self.outcome.analyses or [])

    @property
    def findings(self) -> list[Finding]:
        """Every finding, ranked per trace: the job's and each rank's, or each trace's."""
        return self.outcome.findings

    @property
    def verdict(self) -> str:
        """The report's verdict line (what ``analyze`` prints first)."""
        return self.report().verdict

    @property
    def facts(self) -> Mapping[str, pd.DataFrame]:
        """The facts of the first trace by name, each computed when read (``result.facts["gpu_busy"]``;
        ``list(result.facts)`` names them all)."""
        return _Facts(self, 0)

    def fact(self, name: str, trace: int = 0) -> pd.DataFrame:
        """Fact ``name`` of trace ``trace`` (0-based, in input order) as a DataFrame; for a multi-GPU job,
        the job's cross-rank tables (``job_ranks``, ...). An unknown name raises
        :class:`analyzer.facts.registry.UnknownFactError` listing the known ones."""
        if self.outcome.job is not None:
            return _job_fact(self.outcome.job, name)
        if self.outcome.alone is not None:
            from analyzer.facts.registry import UnknownFactError

            raise UnknownFactError(name, (), "the traces were analyzed on Dask workers, where their facts "
                                   "stay; analyze without a scheduler to read them")
        analyses = self.analyses
        if not 0 <= trace < len(analyses):
            raise IndexError(f"trace {trace}: {len(analyses)} trace(s) were analyzed")
        return analyses[trace].facts.get(name)

    def report(self) -> ReportView:
        """The report's view model, as ``analyze`` renders it (a job report for a multi-GPU job)."""
        if self._report is None:
            if self.outcome.job is not None:
                from analyzer.reports.jobview import build_job_report

                self._report = build_job_report(self.outcome.job, created=self.created)
            elif self.outcome.alone is not None:  # inputs analyzed on Dask, each on its own
                from analyzer.reports.build import sections_report

                self._report = sections_report([a.section for a in self.outcome.alone], created=self.created)
            else:
                self._report = build_report(self.analyses, created=self.created)
        return self._report

    def to_html(self) -> str:
        """The self-contained HTML report (opens offline)."""
        return render(self.report(), "html")

    def to_markdown(self) -> str:
        """The Markdown report (under 65,000 characters: fits a pull-request comment)."""
        return render(self.report(), "md")

    def to_json(self) -> str:
        """The JSON report (docs/report-schema.md)."""
        return render(self.report(), "json")


class _Facts(Mapping[str, pd.DataFrame]):
    def __init__(self, result: AnalysisResult, trace: int) -> None:
        self._result, self._trace = result, trace

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self._result.fact(name, self._trace)

    def __iter__(self) -> Iterator[str]:
        job = self._result.outcome.job
        names = job.tables.tables if job is not None else all_specs()
        return iter(sorted(names))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _job_fact(job: JobAnalysis, name: str) -> pd.DataFrame:
    from analyzer.facts.registry import UnknownFactError

    tables = job.tables.tables
    if name not in tables:
        raise UnknownFactError(name, sorted(tables), "a multi-GPU job keeps its cross-rank tables; a rank's "
                               "facts stay where the rank was analyzed (analyze one rank's file with job=False)")
    return tables[name]


def run(paths: Sequence[Path], options: AnalysisOptions, *, job: bool | None = None,
        scheduler: Scheduler | None = None, workers: int | None = None, progress: Progress = None,
        created: datetime | None = None, write_accepted: Path | None = None) -> AnalysisResult:
    """The whole analysis of ``paths`` with ``options``: what ``analyze`` and :func:`analyze` run
    (:func:`analyzer.pipeline.analyze_inputs`: the accepted-findings file read once, before any trace, and
    applied once, before any report). ``write_accepted``: record every finding there (``--write-accepted``)."""
    accepted = load_accepted_findings(options)
    outcome = analyze_inputs(list(paths), options, job=job, scheduler=scheduler, workers=workers,
                             progress=progress, accepted=accepted, write_accepted=write_accepted)
    return AnalysisResult(outcome, created=created, accepted=accepted)


def analyze(
    path_or_paths: PathLike | Sequence[PathLike],
    *,
    rules: PathLike | Sequence[PathLike] = "default",
    sets: Sequence[str] = (),
    window: str | None = None,
    ncu: Sequence[PathLike] = (),
    power: Sequence[PathLike] = (),
    exclude_ranges: Sequence[str] = ("warmup*",),
    only_ranges: str | None = None,
    accepted: PathLike | None = None,
    job: bool | None = None,
    timeout: float | None = None,
    cache: bool = False,
    progress: Progress = None,
    created: datetime | None = None,
) -> AnalysisResult:
    """Analyze one trace, several, or a folder of them, as ``analyze PATH...`` does.

    ``rules``: rule packs composed in order (``"default"`` is the built-in pack, or YAML files / folders);
    ``sets``: ``RULE.PARAM=VALUE`` overrides (``--set``); ``window``: ``"step_*"``, ``"2.5s:7s"`` or
    ``"full"`` (``--window``); ``ncu``: Nsight Compute exports joined to the trace; ``power``: GPU power
    logs; ``exclude_ranges`` / ``only_ranges``: NVTX ranges left out of / kept in the phase tables;
    ``accepted``: an accepted-findings file; ``job``: force (True) or refuse (False) one multi-GPU job;
    ``timeout``: seconds per trace; ``cache``: read and write the columnar trace cache (the CLI's
    default; off here); ``created``: the report's creation time (for reproducible renderings).
    Bad inputs raise :class:`analyzer.errors.AnalyzerError` subclasses with the CLI's messages."""
    paths = [path_or_paths] if isinstance(path_or_paths, (str, Path)) else list(path_or_paths)
    packs = [rules] if isinstance(rules, (str, Path)) else list(rules)
    options = AnalysisOptions(
        rules_files=tuple(packs),
        sets=tuple(sets),
        window_spec=window,
        ncu_files=tuple(Path(p) for p in ncu),
        power_files=tuple(Path(p) for p in power),
        exclude_ranges=exclude_option(exclude_ranges),
        only_ranges=only_ranges,
        timeout=timeout,
        accepted_file=Path(accepted) if accepted is not None else None,
        cache=cache,
    )
    return run([Path(p) for p in paths], options, job=job, progress=progress, created=created)


__all__ = ["AnalysisResult", "analyze", "run"]
