"""What ``analyze`` runs over its inputs: which files are traces and which Nsight Compute reports, which
traces make one multi-GPU job (:mod:`analyzer.job`) and which are analyzed on their own
(:mod:`analyzer.trace_analysis`, one trace = one rank).

The CLI, ``analyze rules test`` and the benchmarks all go through here, so what a test checks is what a
user gets. The per-trace names (:class:`AnalysisOptions`, :func:`analyze_trace`, :func:`load_rules` ...)
are importable from here too.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING

from analyzer.analysis import Analysis
from analyzer.errors import InputError
from analyzer.trace_analysis import (
    AnalysisOptions,
    NCU_FACTS,
    NO_TIMELINE,
    Progress,
    analyze_loaded,
    analyze_ncu,
    analyze_trace,
    default_rules_path,
    fact_threads,
    finish,
    load_accepted_findings,
    load_rules,
    noting,
    prepare,
    rules_label,
    split_by_capability,
    trace_cache,
)
from analyzer.watchdog import Watchdog, stage

if TYPE_CHECKING:
    from analyzer.accepted import AcceptedFindings
    from analyzer.job.remote import Scheduler
    from analyzer.job.outcome import JobOutcome
    from analyzer.loading.model import NcuReport, Trace
    from analyzer.rules.model import RulePack

__all__ = [
    "AnalysisOptions", "NCU_FACTS", "NO_TIMELINE", "Progress", "analyze_inputs", "analyze_loaded",
    "analyze_ncu", "analyze_paths", "analyze_trace", "default_rules_path", "fact_threads", "finish", "input_files",
    "load_accepted_findings", "load_ncu_paths", "load_rules", "noting", "prepare", "rules_label",
    "split_by_capability", "split_inputs", "trace_cache", "trace_files_in",
]


def analyze_paths(
    paths: Sequence[Path], options: AnalysisOptions, *, progress: Progress = None, pack: RulePack | None = None,
    accepted: AcceptedFindings | None = None,
) -> list[Analysis]:
    """Every trace in ``paths`` analyzed on its own (never as one multi-GPU job): :func:`analyze_inputs`
    with ``job=False``, one :class:`Analysis` per trace (or per Nsight Compute file when no trace is
    given)."""
    return analyze_inputs(paths, options, job=False, progress=progress, pack=pack, accepted=accepted).analyses or []


def split_inputs(paths: Sequence[Path], options: AnalysisOptions,
                 skipped: list[tuple[Path, str]] | None = None) -> tuple[list[Path], list[Path]]:
    """(traces, Nsight Compute files) among ``paths`` (ncu files by content, directories by the files
    in them, the JSON in them that is no trace added to ``skipped``) and ``options.ncu_files``; no
    traces means ncu files on their own. Bad inputs raise :class:`InputError`."""
    from analyzer.loading.ncu import detect_ncu

    traces: list[Path] = []
    ncu_paths: list[Path] = list(options.ncu_files)
    for path in paths:
        if not path.exists():
            raise InputError(path, "no such file", hint="check the path")
        if path.is_dir():
            found, ncu_found = trace_files_in(path, skipped)
            ncu_paths += ncu_found
            traces += found
        elif detect_ncu(path) is not None:
            ncu_paths.append(path)
        else:
            traces.append(path)
    if not traces and not ncu_paths:
        raise InputError(
            paths[0], "no trace among the inputs (nsys .sqlite/.nsys-rep or torch.profiler .json)",
            hint="give a .sqlite, .nsys-rep or .pt.trace.json next to the ncu files",
        )
    return traces, ncu_paths


def load_ncu_paths(ncu_paths: Sequence[Path]) -> NcuReport | None:
    """The Nsight Compute data of ``ncu_paths`` loaded once (None without any)."""
    with stage("loading ncu metrics"):
        if not ncu_paths:  # the readers are imported only when there is something to read
            return None
        from analyzer.loading.ncu import load_ncu

        return load_ncu(list(ncu_paths))


def natural_key(name: str) -> list[int | str]:
    """Sort key comparing numbers as numbers (``rank2`` before ``rank10``)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def passed_over(path: Path) -> str | None:
    """Why a folder scan passes over ``path``, a JSON file (:func:`~analyzer.loading.detect_format`
    ``"json"``), or None when it is a trace to read: this analyzer's own JSON report, or JSON that is
    no torch.profiler trace by its first bytes (:func:`~analyzer.loading.looks_like_profiler_trace`)."""
    from analyzer.loading import looks_like_profiler_trace
    from analyzer.reports.baseline import is_report

    if is_report(path):
        return "a JSON report of this analyzer"
    if not looks_like_profiler_trace(path):
        return "no torch.profiler trace: no traceEvents or deviceProperties at its start"
    return None


def trace_files_in(folder: Path, skipped: list[tuple[Path, str]] | None = None) -> tuple[list[Path], list[Path]]:
    """The trace files (by content) and the Nsight Compute exports directly inside ``folder``, in natural
    name order (numbers compared as numbers: ``rank2`` before ``rank10``). Other files (logs, images,
    hidden files) are ignored; JSON that is no trace (:func:`passed_over`) is added to ``skipped`` with
    why; a folder with neither a trace nor an Nsight Compute export is an error."""
    from analyzer.loading import TRACE_FORMATS, detect_format
    from analyzer.loading.ncu import detect_ncu

    traces: list[Path] = []
    ncu: list[Path] = []
    other_json: list[tuple[Path, str]] = []
    for p in sorted(folder.iterdir(), key=lambda q: natural_key(q.name)):
        if not p.is_file() or p.name.startswith("."):
            continue
        if detect_ncu(p) is not None:
            ncu.append(p)
            continue
        fmt = detect_format(p)
        why = passed_over(p) if fmt == "json" else None
        if why is not None:
            other_json.append((p, why))
        elif fmt in TRACE_FORMATS:
            traces.append(p)
    if not traces and not ncu:  # a folder of Nsight Compute exports works like the files in it
        if other_json:
            names = ", ".join(p.name for p, _ in other_json[:5]) + (", ..." if len(other_json) > 5 else "")
            raise InputError(folder, f"the directory holds no trace file: its JSON files ({names}) are no "
                             "torch.profiler trace (no traceEvents or deviceProperties at their start)",
                             hint="pass a trace file by name to read it anyway, or the directory that holds "
                                  "the traces")
        raise InputError(folder, "the directory holds no trace file (nsys .sqlite/.nsys-rep, torch.profiler "
                         ".json/.json.gz, Nsight Compute .ncu-rep/.csv)",
                         hint="pass the trace files, or the directory that holds them")
    if skipped is not None:
        skipped += other_json
    return traces, ncu


def input_files(paths: Sequence[Path | str]) -> list[Path]:
    """The files a run reads of ``paths``: a file itself, a folder's traces and Nsight Compute exports
    (:func:`trace_files_in`; a folder without any gives none here, its error comes when it is read). For
    the check that a report is not written over one of them (:func:`analyzer.fileio.refuse_input`)."""
    files: list[Path] = []
    for one in paths:
        path = Path(one)
        if path.is_dir():
            try:
                traces, ncu = trace_files_in(path)
            except InputError:
                continue
            files += traces + ncu
        else:
            files.append(path)
    return files


def passed_over_note(skipped: Sequence[tuple[Path, str]]) -> str:
    """One line naming the files a folder scan passed over and why (``""`` for none)."""
    if not skipped:
        return ""
    by_reason: dict[str, list[str]] = {}
    for path, why in skipped:
        by_reason.setdefault(why, []).append(path.name)
    parts = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        parts.append(f"{shown} ({why})")
    return f"passed over {len(skipped)} JSON file{'s' if len(skipped) != 1 else ''}: {'; '.join(parts)}"


def analyze_inputs(paths: Sequence[Path], options: AnalysisOptions, *, job: bool | None = None,
                   scheduler: Scheduler | None = None, workers: int | None = None, progress: Progress = None,
                   pack: RulePack | None = None, accepted: AcceptedFindings | None = None,
                   write_accepted: Path | None = None) -> JobOutcome:
    """What ``analyze`` runs, the one orchestration: inputs -> jobs -> per-rank analysis -> cross-rank
    facts -> accepted findings (the report is built from the outcome).

    The rules, the accepted-findings file and the inputs are each read once, before any trace: ncu files
    told from traces by content, a directory standing for the files in it (:func:`split_inputs`), the
    Nsight Compute data loaded once and joined to each trace. The traces are one multi-GPU job when they
    are one (several rank files, or one report holding several ranks; ``job`` True/False forces it,
    ``scheduler`` runs the ranks on Dask), else each trace is a rank on its own: an :class:`Analysis` per
    trace. Nsight Compute files without a trace are each analyzed on their own. Each trace's analysis runs
    under a :class:`~analyzer.watchdog.Watchdog` of ``options.timeout`` seconds.

    Accepted findings are marked once, after every analysis: those of ``accepted`` (else
    ``options.accepted_file``); with ``write_accepted``, every finding is recorded in that file first
    (keeping the reasons of the entries it held) and marked as accepted by it.
    ``pack``: an already loaded rule pack (else from ``options``)."""
    from analyzer.job.outcome import JobOutcome

    if pack is None:
        with stage("loading the rules"):
            pack = load_rules(options)  # rules fail before any trace is read
    if accepted is None:
        accepted = load_accepted_findings(options)  # and so do the accepted-findings files
    previous = _previous_accepted(write_accepted)
    skipped: list[tuple[Path, str]] = []
    traces, ncu_paths = split_inputs(paths, options, skipped)
    if not traces:  # Nsight Compute reports on their own: a kernel report per file
        outcome = JobOutcome(None, [analyze_ncu(p, pack, options=options, progress=progress) for p in ncu_paths],
                             "--no-job" if job is False else "")
    else:
        outcome = _analyze_traces(traces, options, pack, load_ncu_paths(ncu_paths), job=job, scheduler=scheduler,
                                  workers=workers, progress=progress)
    outcome.passed_over = passed_over_note(skipped)
    if write_accepted is not None:
        from analyzer.accepted import load_accepted, write_accepted as record

        outcome.recorded = record(write_accepted, outcome.finding_sources(), previous)
        accepted = load_accepted(write_accepted)  # every finding of this run is accepted by it now
    if accepted is not None:
        outcome.mark_accepted(accepted)
    return outcome


def _previous_accepted(path: Path | None) -> AcceptedFindings | None:
    """The accepted-findings file ``--write-accepted`` is about to rewrite (its reasons are kept), checked
    before any trace is read; None when there is none yet."""
    if path is None or not path.exists():
        return None
    from analyzer.accepted import load_accepted

    return load_accepted(path)


def _analyze_traces(traces: Sequence[Path], options: AnalysisOptions, pack: RulePack, ncu: NcuReport | None, *,
                    job: bool | None, scheduler: Scheduler | None, workers: int | None,
                    progress: Progress) -> JobOutcome:
    """The traces of :func:`analyze_inputs` as one job or each on its own (no accepted findings yet)."""
    from analyzer.job.outcome import JobOutcome

    if job is False:
        return JobOutcome(None, _each_alone(traces, options, pack, ncu, progress), "--no-job")
    loaded: dict[str, Trace] = {}
    if len(traces) == 1 and scheduler is None:
        # one file: a job only if it holds several ranks; otherwise the plain single-trace path
        from analyzer.job.ranks import gpu_processes

        trace, alone = _load(traces[0], options, pack, ncu, progress,
                             alone=lambda t: len(gpu_processes(t)) < 2)
        if alone is not None:
            return JobOutcome(None, [alone], "a single process")
        loaded[str(traces[0])] = trace
    from analyzer.job.run import analyze_job  # the job machinery only for inputs that may be one job

    outcome = analyze_job(traces, options, pack=pack, scheduler=scheduler, workers=workers, force=job,
                          ncu=ncu, progress=progress, loaded=loaded)
    if outcome.job is None and outcome.analyses is None and outcome.alone is None:
        # Dask found the inputs are not one job and one input is a report of several processes (its
        # workers split it into ranks): each trace is analyzed here, from the trace cache where it is on
        outcome.analyses = _each_alone(traces, options, pack, ncu, progress)
    return outcome


def _each_alone(traces: Sequence[Path], options: AnalysisOptions, pack: RulePack, ncu: NcuReport | None,
                progress: Progress) -> list[Analysis]:
    """Each trace analyzed on its own (one rank), in order."""
    analyses = []
    for path in traces:
        _, analysis = _load(path, options, pack, ncu, progress, alone=lambda _trace: True)
        assert analysis is not None
        analyses.append(analysis)
    return analyses


def _load(path: Path, options: AnalysisOptions, pack: RulePack, ncu: NcuReport | None, progress: Progress, *,
          alone: Callable[[Trace], bool]) -> tuple[Trace, Analysis | None]:
    """Load the trace at ``path`` (a new cache entry is written in the background while the rules run,
    finished before returning) and, when ``alone(trace)``, analyze it as one rank on its own, all under
    the per-trace watchdog: (trace, its analysis or None)."""
    from analyzer.loading import load_trace

    cache = trace_cache(options, background=True)
    try:
        with Watchdog(options.timeout, str(path)):
            with stage("loading"):
                trace = load_trace(path, progress=noting(progress), cache=cache)
            if not alone(trace):
                return trace, None
            return trace, analyze_loaded(trace, pack, options=options, ncu=ncu, progress=progress)
    finally:
        if cache is not None:
            cache.wait()
