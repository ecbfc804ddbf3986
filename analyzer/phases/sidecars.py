"""The files ``analyze sweep`` reads beside the traces: which files of a folder are traces, the Python
timings a workload wrote next to its trace (``<trace>.pytime.json``) and a campaign's ``manifest.jsonl``.
Each is read through :func:`analyzer.boundedio.read_regular` (regular files only, the size counted while
reading) and a bad value is reported or skipped, never fatal."""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from analyzer._paths import trace_stem
from analyzer.boundedio import BoundedReadError, read_regular

PYTIME_SCHEMA = "workloads.pytime/1"
PYTIME_SUFFIX = ".pytime.json"
#: the most a sidecar the sweep reads beside a trace may hold (read while counting, never trusted from st_size)
PYTIME_MAX_BYTES = 10_000_000
LOG_MAX_BYTES = 50_000_000  # a run's log or manifest.jsonl


def pytime_path(trace_path: Path | str) -> Path:
    """Where the Python timings of the trace at ``trace_path`` would be: ``<stem>.pytime.json`` beside it."""
    path = Path(trace_path)
    return path.parent / f"{trace_stem(path)}{PYTIME_SUFFIX}"


def read_pytime(path: Path) -> tuple[dict[str, object] | None, str]:
    """A pytime sidecar's record, or ``None`` and why it cannot be used (absent files give ``""``)."""
    if not path.is_file():
        return None, ""
    try:
        record = json.loads(read_regular(path, PYTIME_MAX_BYTES, "Python timings").decode("utf-8", "replace"))
    except BoundedReadError as err:
        return None, f"{path.name}: {err.reason}"
    except (OSError, ValueError, RecursionError) as err:  # ValueError: bad JSON, or an int of 4,300+ digits
        return None, f"{path.name}: not readable JSON ({type(err).__name__}: {str(err)[:200]})"
    if not isinstance(record, dict) or record.get("schema") != PYTIME_SCHEMA:
        return None, f"{path.name}: not a {PYTIME_SCHEMA} record"
    return record, ""


def read_manifests(paths: Sequence[Path]) -> dict[str, dict[str, object]]:
    """``manifest.jsonl`` records (by ``name``) from the folders holding the traces."""
    out: dict[str, dict[str, object]] = {}
    for folder in sorted({p.parent for p in paths}):
        manifest = folder / "manifest.jsonl"
        if not manifest.is_file():
            continue
        try:
            text = read_regular(manifest, LOG_MAX_BYTES, "manifest").decode("utf-8", "replace")
        except (OSError, BoundedReadError):
            continue
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # bad JSON, an int of 4,300+ digits, deep nesting
                continue
            if isinstance(record, dict) and "name" in record:
                out[str(record["name"])] = record
    return out


#: besides ``*.sqlite[.xz]``, the files of a folder the sweep reads when their content is a trace:
#: torch.profiler JSON (plain, gzip, xz) and nsys reports
_TRACE_NAMES = (".json", ".json.gz", ".json.xz", ".nsys-rep", ".qdrep")


def expand_paths(paths: Iterable[Path | str]) -> list[Path]:
    """Files as given; a directory contributes its ``*.sqlite``, ``*.sqlite.xz`` and ``*.pytime.json``
    files (the sidecars of configurations that did not fit in GPU memory have no trace), and its
    torch.profiler traces and nsys reports (:data:`_TRACE_NAMES`, recognised by content as ``analyze``
    recognises them)."""
    from analyzer.loading import TRACE_FORMATS, detect_format
    from analyzer.pipeline import passed_over

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            for q in sorted(p.iterdir()):
                if q.name.startswith(".") or not q.is_file():
                    continue
                if q.name.endswith((".sqlite", ".sqlite.xz", PYTIME_SUFFIX)):
                    out.append(q)
                elif q.name.lower().endswith(_TRACE_NAMES):
                    fmt = detect_format(q)
                    if fmt in TRACE_FORMATS and (fmt != "json" or passed_over(q) is None):
                        out.append(q)
        else:
            out.append(p)
    return out
