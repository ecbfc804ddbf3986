"""What every section builder shares: reading a fact a section needs (a missing one is :class:`Unavailable`,
shown as a note), capped tables of a frame, and column kinds and labels guessed from names.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from analyzer.analysis import Analysis
from analyzer.facts.registry import UnknownFactError
from analyzer.reports.format import truncate
from analyzer.reports.values import py_value as _py
from analyzer.reports.viewmodel import Column, Table


class Unavailable(Exception):
    """A section's input is missing; the message says why (shown as a note)."""


def required_fact(analysis: Analysis, name: str, columns: Iterable[str]) -> pd.DataFrame:
    try:
        frame = analysis.facts.get(name)
    except UnknownFactError as err:
        reason = str(err.args[0]) if err.args else name
        raise Unavailable(f"fact {name!r} is not available ({truncate(reason, 160)})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise Unavailable(f"fact {name!r} lacks columns {', '.join(missing)}")
    return frame


def optional_fact(analysis: Analysis, name: str) -> pd.DataFrame | None:
    try:
        return analysis.facts.get(name)
    except UnknownFactError:
        return None


def cell_value(value: Any, limit: int) -> Any:
    value = _py(value)
    if isinstance(value, str):
        return truncate(value, limit)
    if isinstance(value, list):
        return truncate(", ".join(str(v) for v in value), limit)
    return value


def table_view(
    frame: pd.DataFrame,
    columns: Sequence[Column],
    limit: int,
    cell_chars: int,
    caption: str = "",
    cls: type[Table] = Table,
    total: int | None = None,
) -> Table:
    """The first ``limit`` rows of ``frame`` (already ordered) as a :class:`Table`; ``total`` is the row
    count to report when ``frame`` holds only the leading rows of a bigger table."""
    head = frame.head(max(0, limit))
    cols = [head[c.key].tolist() if c.key in head.columns else [None] * len(head) for c in columns]
    rows = tuple(tuple(cell_value(v, cell_chars) for v in row) for row in zip(*cols)) if len(head) else ()
    shown = tuple(honest_column(c, values) for c, values in zip(columns, cols))
    return cls(shown, rows, len(frame) if total is None else total, caption)


def honest_column(column: Column, values: Iterable[Any]) -> Column:
    """``column`` as its values allow: a share column (0..1, shown as a percentage) holding a value above
    1 is a ratio, not a share (GPU time summed over streams over a phase's span: 1.73, not "173%"), so it
    is shown as one (``1.73x``) and its label says so."""
    if column.kind == "share" and any(isinstance(v, (int, float)) and v == v and v > 1.0005 for v in values):
        return Column(column.key, f"{column.label} (ratio, can pass 1)", "ratio")
    return column


_NS_NAMES = {"duration", "gap", "busy", "cpu", "gpu", "total", "mean", "median", "wait", "idle"}


_TIME_NAMES = {"start", "end", "at", "time", "start_ns", "end_ns", "bin_start", "bin_end"}


# Nsight Compute columns already in percent (0..100) whose names would otherwise read as 0..1 shares; the
# nsys occupancy fact uses the same names for fractions, so values above 1 decide.
_PERCENT_NAMES = frozenset({"achieved_occupancy", "theoretical_occupancy", "stall_share"})


def evidence_kind(name: str, values: Iterable[Any] = ()) -> str:
    """Guess how to format an evidence column from its name (evidence columns are free-form) and, for
    names that say nothing, from its values (text if any value is text)."""
    low = name.lower()
    if low in _TIME_NAMES:
        return "time"
    if low.endswith("_ns") or low in _NS_NAMES:
        return "ns"
    if low.endswith(("_pct", "%")) or low == "percent":
        return "pct"
    if low in _PERCENT_NAMES and any(isinstance(v, (int, float)) and v > 1.0 for v in values):
        return "pct"
    if low.endswith("_flops"):
        return "flops"
    if low.endswith("bandwidth"):
        return "bandwidth"
    if low in ("arithmetic_intensity", "ridge_point"):
        return "intensity"
    if low in ("share", "util", "utilization", "ratio", "occupancy") or low.endswith(("_share", "_occupancy")):
        return "share"
    if low == "bytes" or low.endswith("_bytes"):
        return "bytes"
    if low.endswith("throughput"):
        return "bandwidth"
    if any(isinstance(v, str) for v in values):
        return "text"
    return "auto"


#: a column name's unit word, dropped from its label when the cells carry their own unit (``busy_ns``
#: over "12.3 ms" reads "Busy", not "Busy ns")
_UNIT_WORDS = {"ns": ("ns",), "pct": ("pct",), "share": ("share",), "bytes": ("bytes",),
               "flops": ("flops",), "bandwidth": ()}


_ACRONYMS = {"cpu": "CPU", "gpu": "GPU", "nvtx": "NVTX", "api": "API", "sm": "SM", "id": "ID", "h2d": "H2D",
             "d2h": "D2H", "cuda": "CUDA", "nccl": "NCCL", "pid": "PID", "tid": "TID", "p95": "p95"}


def labelize(name: str, kind: str = "auto") -> str:
    """A column name as a header: words, known acronyms in capitals, and no unit word the formatted
    cells already show (``cpu_mean_ns`` -> "CPU mean" over values in ms)."""
    words = name.replace("_", " ").split()
    if len(words) > 1 and words[-1].lower() in _UNIT_WORDS.get(kind, ()):
        words = words[:-1]
    words = [_ACRONYMS.get(w.lower(), w) for w in words]
    text = " ".join(words)
    return text[:1].upper() + text[1:] if text else name
