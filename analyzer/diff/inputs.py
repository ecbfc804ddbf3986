"""BASE and HEAD: a trace (anything :mod:`analyzer.pipeline` reads) or a JSON report of this analyzer.

A JSON report is recognized by its content (an object whose first key is ``schema_version`` together
with ``tool.name`` ``gpu-trace-analyzer``), not by its extension: a torch.profiler trace is JSON too and
goes through the pipeline like any other trace.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyzer.reports.baseline import ReportFormatError, RunSummary, from_report, summarize
from analyzer.errors import InputError
from analyzer.pipeline import AnalysisOptions, Progress

_SNIFF = 4096
MAX_REPORT_BYTES = 256 << 20  # a JSON report is small by design (capped tables); refuse a huge one


def is_report(path: Path) -> bool:
    """True when ``path`` looks like a JSON report written by ``analyze --format json``."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF)
    except OSError:
        return False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text.startswith(b"{"):
        return False
    return (b'"schema_version"' in text and b'"gpu-trace-analyzer"' in text) or b'"kind": "diff"' in text


def read_report(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise InputError(path, f"is {size >> 20} MiB, too large for a JSON report of this analyzer",
                             hint="give the trace itself or the JSON written by 'analyze TRACE --format json'")
        with open(path, "rb") as fh:
            return json.loads(fh.read().decode("utf-8-sig"))  # a byte-order mark (PowerShell, Notepad) is fine
    except UnicodeDecodeError:
        raise ReportFormatError(path, "is not UTF-8 text", hint="give the JSON written by 'analyze --format json'") \
            from None
    except json.JSONDecodeError as err:
        raise ReportFormatError(path, f"is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg})",
                                hint="write it again with 'analyze TRACE --format json'") from None
    except RecursionError:
        raise ReportFormatError(path, "is nested too deeply to be a JSON report of this analyzer") from None
    except OSError as err:
        raise InputError(path, f"cannot be read ({err.strerror or err})") from None


def load_run(path: Path, options: AnalysisOptions, *, pack: Any = None, progress: Progress = None) -> RunSummary:
    """The :class:`RunSummary` of one side of a diff: read from a JSON report, or analyzed from a trace
    through the pipeline with ``options`` (rules, window, ``--set``)."""
    from analyzer.pipeline import analyze_paths

    if not path.exists():
        raise InputError(path, "no such file", hint="check the path")
    if path.is_file() and is_report(path):
        return from_report(read_report(path), str(path))
    analyses = analyze_paths([path], options, pack=pack, progress=progress)
    if len(analyses) != 1:
        raise InputError(path, f"gave {len(analyses)} analyses; a diff compares one run with one run",
                         hint="give one trace (or one JSON report) per side")
    return summarize(analyses[0])
