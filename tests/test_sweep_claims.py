"""The grid's agreement with the workload's own Python timings, as the README and docs/sweep-h100/README.md
state it (written by hand from the H100 run, whose traces are not committed), recomputed from the table
that run wrote (docs/sweep-h100/csv/timing.csv, `make sweep-tables`): every count and median of the docs'
table, its counts by phase and for the larger configurations, and the README's "99 of 115 phases (the
ranges' CPU wall time: 26 of 115)"."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "docs" / "sweep-h100"
#: the docs' rows: how the trace is read, and the timing.csv column (or columns, their maximum)
READINGS = {
    "CPU wall (the NVTX range's duration)": ("cpu_ms",),
    "GPU span (first op start to last op end)": ("span_ms",),
    "max(CPU wall, GPU span)": ("cpu_ms", "span_ms"),
    "**phase time** (the sweep's answer)": ("time_ms",),
}


@pytest.fixture(scope="module")
def phases() -> pd.DataFrame:
    timing = pd.read_csv(SWEEP / "csv" / "timing.csv")
    return timing[timing["phase"].isin(["forward", "backward", "optimizer_step"]) & timing["python_ms"].notna()]


def _agreement(phases: pd.DataFrame, columns: tuple[str, ...]) -> tuple[int, int, float]:
    trace = phases[list(columns)].max(axis=1)
    ratio = phases["python_ms"] / trace
    off = (ratio - 1).abs()
    return int((off <= 0.10).sum()), int((off <= 0.25).sum()), float(np.median(np.abs(np.log(ratio))))


def test_docs_table_is_the_committed_timings(phases):
    doc = (SWEEP / "README.md").read_text(encoding="utf-8")
    n = len(phases)
    counts = phases["phase"].value_counts()
    assert f"{n} phase x\nconfiguration pairs: {counts['forward']} forward, {counts['backward']} backward, " \
           f"{counts['optimizer_step']} optimizer_step" in doc
    for label, columns in READINGS.items():
        within10, within25, median = _agreement(phases, columns)
        bold = "**" if label.startswith("**") else ""
        row = (f"| {label} | {bold}{within10} / {n}{bold} | {bold}{within25} / {n}{bold} | "
               f"{bold}{median:.3f}{bold} |")
        assert row in doc, row
    by_phase = []
    for phase in ("forward", "backward", "optimizer_step"):
        rows = phases[phases["phase"] == phase]
        by_phase.append((_agreement(rows, ("time_ms",))[0], _agreement(rows, ("cpu_ms",))[0], len(rows)))
    (f10, fc, fn), (b10, bc, bn), (o10, oc, on) = by_phase
    assert (f"By phase: forward {f10}/{fn} (CPU wall {fc}/{fn}), backward {b10}/{bn} ({bc}/{bn}), "
            f"optimizer_step {o10}/{on} ({oc}/{on}:") in doc
    big = phases[(phases["context"] >= 512) | phases["model"].isin(["large", "xl", "2.7B"])]
    assert f"and 2.7B, {_agreement(big, ('time_ms',))[0]} of {len(big)}." in doc


def test_readme_quotes_the_docs_numbers(phases):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"within 10% of those timings for (\d+) of (\d+) phases\s+\(the ranges' CPU wall time: (\d+) of (\d+)\)",
                  readme)
    assert m is not None
    n = len(phases)
    assert [int(g) for g in m.groups()] == [_agreement(phases, ("time_ms",))[0], n,
                                            _agreement(phases, ("cpu_ms",))[0], n]
