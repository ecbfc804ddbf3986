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
from typing import TYPE_CHECKING, Any

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
    from analyzer.job.run import JobOutcome
    from analyzer.loading.ncu import NcuReport
    from analyzer.rules.model import RulePack

__all__ = [
    "AnalysisOptions", "NCU_FACTS", "NO_TIMELINE", "Progress", "analyze_inputs", "analyze_loaded",
    "analyze_ncu", "analyze_paths", "analyze_trace", "default_rules_path", "fact_threads", "finish",
    "load_accepted_findings", "load_ncu_paths", "load_rules", "noting", "prepare", "rules_label",
    "split_by_capability", "split_inputs", "trace_cache", "trace_files_in",
]


def analyze_paths(
    paths: Sequence[Path], options: AnalysisOptions, *, progress: Progress = None, pack: RulePack | None = None,
    accepted: AcceptedFindings | None = None,
) -> list[Analysis]:
    """Analyze every trace in ``paths``; ncu files among them (by content) and ``options.ncu_files``
    are loaded once and joined to each trace. A directory stands for the trace files in it (HTA's
    layout of a multi-process job: one torch.profiler trace per rank), in natural name order
    (``rank2`` before ``rank10``).
    ``pack``: an already loaded rule pack (else from ``options``); ``accepted``: the accepted findings
    already read (else from ``options``: the file is read once per run). Each trace's analysis runs
    under a :class:`~analyzer.watchdog.Watchdog` of ``options.timeout`` seconds."""
    if pack is None:
        with stage("loading the rules"):
            pack = load_rules(options)  # rules fail before any trace is read
    if accepted is None:
        accepted = load_accepted_findings(options)  # and so does the accepted-findings file
    traces, ncu_paths = split_inputs(paths, options)
    if not traces:  # Nsight Compute reports on their own: a kernel report per file
        return [analyze_ncu(p, pack, options=options, progress=progress) for p in ncu_paths]
    ncu = load_ncu_paths(ncu_paths)
    analyses = []
    for p in traces:
        with Watchdog(options.timeout, str(p)):
            analyses.append(analyze_trace(p, pack, options=options, ncu=ncu, progress=progress,
                                          accepted=accepted))
    return analyses


def split_inputs(paths: Sequence[Path], options: AnalysisOptions) -> tuple[list[Path], list[Path]]:
    """(traces, Nsight Compute files) among ``paths`` (ncu files by content, directories by the files
    in them) and ``options.ncu_files``; no traces means ncu files on their own. Bad inputs raise
    :class:`InputError`."""
    from analyzer.loading.ncu import detect_ncu

    traces: list[Path] = []
    ncu_paths: list[Path] = list(options.ncu_files)
    for path in paths:
        if not path.exists():
            raise InputError(path, "no such file", hint="check the path")
        if path.is_dir():
            found, ncu_found = trace_files_in(path)
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
    from analyzer.loading.ncu import load_ncu

    with stage("loading ncu metrics"):
        return load_ncu(list(ncu_paths)) if ncu_paths else None


def natural_key(name: str) -> list[Any]:
    """Sort key comparing numbers as numbers (``rank2`` before ``rank10``)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def trace_files_in(folder: Path) -> tuple[list[Path], list[Path]]:
    """The trace files (by content) and the Nsight Compute exports directly inside ``folder``, in natural
    name order (numbers compared as numbers: ``rank2`` before ``rank10``). Other files (logs, images,
    hidden files) are ignored; a folder with neither a trace nor an Nsight Compute export is an error."""
    from analyzer.loading import TRACE_FORMATS, detect_format
    from analyzer.loading.ncu import detect_ncu

    traces: list[Path] = []
    ncu: list[Path] = []
    for p in sorted(folder.iterdir(), key=lambda q: natural_key(q.name)):
        if not p.is_file() or p.name.startswith("."):
            continue
        if detect_ncu(p) is not None:
            ncu.append(p)
        elif detect_format(p) in TRACE_FORMATS:
            traces.append(p)
    if not traces and not ncu:  # a folder of Nsight Compute exports works like the files in it
        raise InputError(folder, "the directory holds no trace file (nsys .sqlite/.nsys-rep, torch.profiler "
                         ".json/.json.gz, Nsight Compute .ncu-rep/.csv)",
                         hint="pass the trace files, or the directory that holds them")
    return traces, ncu


def analyze_inputs(paths: Sequence[Path], options: AnalysisOptions, *, job: bool | None = None,
                   scheduler: Any = None, workers: int | None = None, progress: Progress = None,
                   pack: RulePack | None = None, accepted: AcceptedFindings | None = None) -> JobOutcome:
    """What ``analyze`` runs: the inputs as one multi-GPU job when they are one (several rank files,
    or one report holding several ranks; ``job`` True/False forces it), else each on its own (as
    :func:`analyze_paths`). Returns an :class:`analyzer.job.run.JobOutcome`. ``pack`` and ``accepted``:
    the rule pack and accepted findings already loaded (else from ``options``); either way the
    accepted-findings file is read once and applied once, inside each analysis, before any report."""
    from analyzer.job.run import JobOutcome, analyze_job  # the job machinery only when inputs are given

    if pack is None:
        with stage("loading the rules"):
            pack = load_rules(options)
    if accepted is None:
        accepted = load_accepted_findings(options)  # checked before any trace is read
    if job is False:
        return JobOutcome(None, analyze_paths(paths, options, progress=progress, pack=pack,
                                                        accepted=accepted), "--no-job")
    traces, ncu_paths = split_inputs(paths, options)
    if not traces:  # Nsight Compute reports on their own
        return JobOutcome(None, analyze_paths(paths, options, progress=progress, pack=pack,
                                                        accepted=accepted), "")
    ncu = load_ncu_paths(ncu_paths)
    loaded = {}
    if len(traces) == 1 and scheduler is None:
        # one file: a job only if it holds several ranks; otherwise the plain single-trace path
        from analyzer.job.ranks import gpu_processes
        from analyzer.loading import load_trace

        # a new cache entry is written in the background while the rules run, finished before returning
        cache = trace_cache(options, background=True)
        try:
            with Watchdog(options.timeout, str(traces[0])):
                with stage("loading"):
                    trace = load_trace(traces[0], progress=noting(progress), cache=cache)
                if len(gpu_processes(trace)) < 2:
                    return JobOutcome(None, [analyze_loaded(trace, pack, options=options, ncu=ncu,
                                                            progress=progress, accepted=accepted)], "a single process")
        finally:
            if cache is not None:
                cache.wait()
        loaded[str(traces[0])] = trace
    outcome = analyze_job(traces, options, pack=pack, scheduler=scheduler, workers=workers, force=job,
                          ncu=ncu, progress=progress, loaded=loaded, accepted=accepted)
    if outcome.job is None and outcome.analyses is None:
        outcome.analyses = analyze_paths(traces, options, progress=progress, pack=pack, accepted=accepted)
    return outcome
