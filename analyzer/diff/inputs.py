"""BASE and HEAD: a trace (anything :mod:`analyzer.pipeline` reads) or a JSON report of this analyzer.

A JSON report is recognized by its content (an object whose first key is ``schema_version`` together
with ``tool.name`` ``gpu-trace-analyzer``), not by its extension: a torch.profiler trace is JSON too and
goes through the pipeline like any other trace.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analyzer.boundedio import BoundedReadError, read_regular
from analyzer.reports.baseline import ReportFormatError, RunSummary, from_report, is_report, summarize
from analyzer.errors import InputError
from analyzer.pipeline import AnalysisOptions, Progress

MAX_REPORT_BYTES = 256 << 20  # a JSON report is small by design (capped tables); refuse a huge one


def read_report(path: Path) -> Any:
    try:
        raw = read_regular(path, MAX_REPORT_BYTES, "JSON report")
        return json.loads(raw.decode("utf-8-sig"))  # a byte-order mark (PowerShell, Notepad) is fine
    except BoundedReadError as err:
        raise InputError(path, err.reason, hint="give the trace itself or the JSON written by 'analyze TRACE --format json'") from None
    except UnicodeDecodeError:
        raise ReportFormatError(path, "is not UTF-8 text", hint="give the JSON written by 'analyze --format json'") \
            from None
    except json.JSONDecodeError as err:
        raise ReportFormatError(path, f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})",
                                hint="write it again with 'analyze TRACE --format json'") from None
    except RecursionError:
        raise ReportFormatError(path, "is nested too deeply to be a JSON report of this analyzer") from None
    except ValueError as err:  # valid JSON Python's int() refuses: an integer of 4,300+ digits
        raise ReportFormatError(path, f"holds a value no report of this analyzer has ({str(err).split(';')[0]})",
                                hint="write it again with 'analyze TRACE --format json'") from None
    except OSError as err:
        raise InputError(path, f"cannot be read ({err.strerror or err})") from None


_GLOB = set("*?[")


def expand(path: Path) -> list[Path]:
    """One side of a diff as input files: the path itself, or the files a quoted glob matches
    (``'base/rank*.sqlite'``: a job's rank files), in natural name order."""
    if path.exists() or not _GLOB & set(path.name):
        return [path]
    from analyzer.pipeline import natural_key

    found = sorted((p for p in path.parent.glob(path.name) if p.is_file()), key=lambda p: natural_key(p.name))
    if not found:
        raise InputError(path, "matches no file", hint="check the pattern (quote it so the shell does not expand it)")
    return found


def load_run(path: Path | Sequence[Path], options: AnalysisOptions, *, pack: Any = None,
             progress: Progress = None) -> RunSummary:
    """The :class:`RunSummary` of one side of a diff: read from a JSON report, or analyzed from a trace
    through the pipeline with ``options`` (rules, window, ``--set``). Several rank files (a list, a
    directory or a glob), or one report holding several ranks, are a multi-GPU job: the summary is the
    job as one run, with the job's own numbers in ``job`` (:mod:`analyzer.diff.jobs`)."""
    from analyzer.diff.jobs import as_run, is_job_report, job_from_report
    from analyzer.pipeline import analyze_inputs

    paths = [q for p in ([path] if isinstance(path, Path) else path) for q in expand(Path(p))]
    for p in paths:
        if not p.exists():
            raise InputError(p, "no such file", hint="check the path")
    label = str(paths[0]) if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"
    if len(paths) == 1 and paths[0].is_file() and is_report(paths[0]):
        doc = read_report(paths[0])
        if is_job_report(doc):
            job = job_from_report(doc, str(paths[0]))
            return as_run(job, _job_name(paths, job.world_size), str(paths[0]), "report")
        return from_report(doc, str(paths[0]))
    if any(p.is_file() and is_report(p) for p in paths):
        raise InputError(paths[0], "mixes JSON reports with other inputs on one side",
                         hint="give one JSON report, or the traces, per side")
    # a job is compared rank by rank (its steps, kernels and phases sum the ranks): every rank in full
    outcome = analyze_inputs(paths, dataclasses.replace(options, rank_sections=None), pack=pack, progress=progress)
    if outcome.job is not None:
        from analyzer.reports.jobview import build_job_report
        from analyzer.reports.jsonout import report_dict

        doc = report_dict(build_job_report(outcome.job))
        job = job_from_report(doc, label)
        return as_run(job, _job_name(paths, job.world_size), label, "trace")
    analyses = outcome.analyses or []
    if len(analyses) != 1:
        why = f" ({outcome.reason})" if outcome.reason else ""
        raise InputError(paths[0], f"gave {len(analyses)} analyses, not one run or one multi-GPU job{why}",
                         hint="give one trace, one JSON report, or the rank files of one job per side")
    return summarize(analyses[0])


def _job_name(paths: Sequence[Path], world: int) -> str:
    from analyzer._paths import trace_stem

    stem = trace_stem(paths[0])
    return f"{stem} ({world}-rank job)" if len(paths) == 1 else f"{stem} + {len(paths) - 1} ({world}-rank job)"
