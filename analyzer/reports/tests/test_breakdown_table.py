"""The Markdown breakdown table's "Largest part" column: each cause's largest detail over the whole
window, also for causes whose details fall outside the capped details table."""
from __future__ import annotations

from analyzer.api import analyze
from analyzer.reports.viewmodel import cause_label
from analyzer.reports.format import fmt_duration
from analyzer.testing import real_trace


def test_every_cause_names_its_largest_part():
    """medium_training_ctx128 has more than 20 (cause, detail) rows: host sync (35 us) and exposed copies
    (0.5 ms) fell outside the table and showed "—" before."""
    result = analyze(real_trace("medium_training_ctx128"))
    b = result.fact("timeline_breakdown")
    win = b.loc[(b["scope"] == "window") & (b["device"] == 0)]
    assert len(win) > 20
    md = result.to_markdown()
    for cause, rows in win.groupby("cause"):
        top = rows.sort_values("duration_ns", ascending=False).iloc[0]
        line = next(x for x in md.splitlines() if x.startswith(f"| {cause_label(str(cause))} |"))
        assert line.endswith(f"({fmt_duration(int(top['duration_ns']))}) |"), line
        assert "| — |" not in line
