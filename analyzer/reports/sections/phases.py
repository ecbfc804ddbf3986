"""The optional ``phases`` fact as a table, and the caption saying which number measures each phase.
"""
from __future__ import annotations

import pandas as pd

from analyzer.reports.format import fmt_ms, plural, truncate
from analyzer.reports.sections.common import evidence_kind, labelize, table_view
from analyzer.reports.viewmodel import Column, Limits, Table


_PHASE_KNOWN: tuple[Column, ...] = (
    Column("name", "Phase", "text"), Column("path", "Path", "code"), Column("count", "Count", "int"),
    Column("cpu_ns", "CPU wall", "ns"), Column("cpu_total_ns", "CPU wall", "ns"),
    Column("cpu_mean_ns", "CPU mean", "ns"), Column("cpu_p95_ns", "CPU p95", "ns"),
    Column("gpu_ns", "GPU time", "ns"), Column("gpu_span_ns", "GPU span", "ns"),
    Column("waited", "Waited", "text"), Column("measure", "Measured by", "text"),
    Column("phase_ns", "Phase time", "ns"), Column("busy_share", "GPU busy", "share"),
    Column("kernel_count", "Kernels", "int"), Column("top_kernel", "Top kernel", "code"),
)


_PHASE_MAX_COLUMNS = 14


#: ``measure`` codes of the phases fact as the reports print them.
MEASURE_LABELS = {"cpu_wall": "CPU wall", "gpu": "GPU timeline", "mixed": "mixed"}


def phases_table(frame: pd.DataFrame, limits: Limits) -> Table:
    """The optional ``phases`` fact: the known columns that are present (in a fixed order), then other
    columns formatted by their names, up to a readable width (the JSON report has the same columns).
    The caption says which number measures the phases (see :func:`phase_caption`)."""
    cols = [c for c in _PHASE_KNOWN if c.key in frame.columns]
    known = {c.key for c in _PHASE_KNOWN}
    if len(cols) < 4:  # an unfamiliar phases table: show what it has
        cols += [
            Column(str(c), labelize(str(c), kind), kind)
            for c in frame.columns if c not in known
            for kind in (evidence_kind(str(c), frame[c].head(limits.phase_rows).tolist()),)
        ]
    shown = frame
    if "measure" in frame.columns:
        shown = frame.assign(measure=frame["measure"].map(lambda m: MEASURE_LABELS.get(m, m)))
    return table_view(shown, cols[:_PHASE_MAX_COLUMNS], limits.phase_rows, limits.cell_chars, phase_caption(frame))


def phase_caption(frame: pd.DataFrame, names: int = 3) -> str:
    """Which number measures the phases of ``frame`` (a ``phases`` fact), naming the phases whose CPU
    wall time does not (their ranges ended before their GPU work, or began behind earlier work)."""
    if "measure" not in frame.columns or "phase_ns" not in frame.columns or frame.empty:
        return ""
    cpu_col = "cpu_total_ns" if "cpu_total_ns" in frame.columns else "cpu_ns"
    if cpu_col not in frame.columns:
        return ""
    rule = ("Phase time is what a timer synchronizing before and after a phase measures: the range's CPU "
            "wall time when the range waited for its GPU work and nothing was queued ahead of it, else read "
            "from the GPU timeline, to the end of its GPU work (a range that ends before its work times only "
            "the kernel launches) and from the end of earlier work it waited behind.")
    off = frame[frame["measure"].isin(("gpu", "mixed"))]
    if off.empty:
        return rule + " Here every phase's CPU wall time measures it."
    count = off["count"].clip(lower=1).astype("float64")
    gap = (off["phase_ns"] - off[cpu_col]).abs().astype("float64")
    top = off.assign(_g=gap.to_numpy(), _cpu=(off[cpu_col] / count).to_numpy(),
                     _phase=(off["phase_ns"] / count).to_numpy())
    top = top.sort_values(["_g", "name"], ascending=[False, True], kind="stable").head(names)
    listed = "; ".join(
        f"{truncate(str(n), 60)}: CPU wall {fmt_ms(c)}, phase time {fmt_ms(g)} per instance"
        for n, c, g in zip(top["name"].tolist(), top["_cpu"].tolist(), top["_phase"].tolist()))
    more = len(off) - len(top)
    tail = f"; {more:,} more" if more > 0 else ""
    verb = "is" if len(off) == 1 else "are"
    return (f"{rule} {plural(len(off), 'phase')} {verb} measured on the GPU timeline ({listed}{tail}); to time "
            "them in code, call torch.cuda.synchronize() before and after, or use CUDA events.")
