"""The view model: sections, notes for missing facts, ranking, anchors, verdicts, caps."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pandas as pd
import pytest

from analyzer.findings import Finding, Scope, Severity
from analyzer.reports import Limits, build_report, render
from analyzer.reports.sections.phases import phase_caption
from analyzer.reports.tests.synthetic import MS, make_analysis
from analyzer.reports.viewmodel import EvidenceTable, Link

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_full_analysis_has_every_section():
    report = build_report([make_analysis()], created=CREATED)
    s = report.traces[0]
    assert s.notes == ()
    assert s.utilization and s.categories and s.top_kernels and s.nvtx and s.gaps and s.phases and s.ncu
    assert s.roofline is not None and s.roofline.ridge == pytest.approx(6.7e13 / 3.35e12)
    assert [len(series.util) for series in s.utilization.series] == [160, 160]  # 250 fact bins merged
    assert s.utilization.lanes and s.utilization.lanes[0].spans
    assert report.comparison is None


def test_findings_ranked_by_impact_with_anchors_and_links():
    s = build_report([make_analysis()], created=CREATED).traces[0]
    assert [f.id for f in s.findings] == ["GPU001", "API002", "KRN003", "KRN010"]
    assert [f.rank for f in s.findings] == [1, 2, 3, 4]
    gpu, sync = s.findings[0], s.findings[1]
    assert gpu.anchor == gpu.key == "gpu-idle-gaps-0"
    assert gpu.explains == (Link("Host synchronizes every step", "sync-in-loop"),)
    assert sync.explained_by == (Link("GPU idle between steps", "gpu-idle-gaps-0"),)
    assert isinstance(gpu.evidence, EvidenceTable)
    assert gpu.evidence.total_rows == 40 and len(gpu.evidence.rows) == 20
    assert [c.kind for c in gpu.evidence.columns] == ["auto", "time", "ns", "text", "text"]


def test_verdict_counts_shared_time_once():
    s = build_report([make_analysis()], created=CREATED).traces[0]
    h = s.header
    # 212 (gpu idle) + 31 (occupancy); the 96 ms of sync lie inside the idle gaps: not added again
    assert h.problems == 3
    assert h.problem_impact_ns == 243 * MS and h.problem_impact_sum_ns == 339 * MS
    assert [f.adds_ns for f in s.findings] == [212 * MS, 0, 31 * MS, None]
    assert h.verdict == ("3 problems worth 243 ms (13.5% of the analyzed GPU time, overlaps counted once); "
                         "biggest: GPU idle between steps")
    assert "96.0 ms is time they share" in h.tally


def test_verdict_without_problems():
    a = make_analysis()
    a.findings = [f for f in a.findings if f.severity == Severity.INFO]
    h = build_report([a], created=CREATED).traces[0].header
    assert h.verdict.startswith("No problems found in 900.0 ms analyzed; GPU busy ")
    assert h.verdict.endswith("; 1 note")


@pytest.mark.parametrize("fact", ["utilization", "gpu_busy", "category_summary", "top_kernels",
                                  "nvtx_projection", "gpu_gaps"])
def test_missing_fact_omits_section_with_note(fact):
    report = build_report([make_analysis(drop_facts=(fact,))], created=CREATED)
    s = report.traces[0]
    if fact != "gpu_busy":  # busy falls back to the utilization bins
        assert any(repr(fact) in n for n in s.notes), s.notes
    for fmt in ("html", "md", "json"):
        assert render(report, fmt)


def test_no_facts_at_all_still_renders():
    a = make_analysis(with_ncu=False, with_phases=False,
                      drop_facts=("utilization", "gpu_busy", "category_summary", "top_kernels",
                                  "nvtx_projection", "gpu_gaps"))
    report = build_report([a], created=CREATED)
    s = report.traces[0]
    assert s.header.gpu_busy_share is None
    assert s.header.kernel_ns == 400 * MS  # from the kernels frame, clipped to the window
    assert len(s.notes) == 6
    html = render(report, "html")
    assert "not available" in html and "GPU busy share not shown" in html


def test_fact_missing_columns_is_a_note():
    a = make_analysis()
    a.facts.frames["top_kernels"] = a.facts.frames["top_kernels"].drop(columns=["median_ns"])
    s = build_report([a], created=CREATED).traces[0]
    assert s.top_kernels is None
    assert any("lacks columns median_ns" in n for n in s.notes)


def test_optional_sections_absent_without_notes():
    s = build_report([make_analysis(with_ncu=False, with_phases=False)], created=CREATED).traces[0]
    assert s.phases is None and s.ncu is None and s.roofline is None and s.notes == ()


def test_ncu_without_required_columns_is_a_note():
    a = make_analysis()
    a.ncu.kernels = a.ncu.kernels.drop(columns=["peak_flops"])
    s = build_report([a], created=CREATED).traces[0]
    assert s.ncu is None and any("peak_flops" in n for n in s.notes)


def test_phases_known_columns_in_fixed_order():
    s = build_report([make_analysis()], created=CREATED).traces[0]
    assert [c.key for c in s.phases.columns] == ["name", "path", "count", "cpu_ns", "gpu_ns", "gpu_span_ns",
                                                 "waited", "measure", "phase_ns"]
    assert [c.label for c in s.phases.columns][3:] == ["CPU wall", "GPU time", "GPU span", "Waited", "Measured by",
                                                       "Phase time"]
    assert [r[7] for r in s.phases.rows] == ["GPU timeline", "CPU wall", "CPU wall"]


def test_phase_caption_names_the_phases_that_timed_launches():
    frame = pd.DataFrame({"name": ["fwd", "opt", "bwd"], "count": [2, 2, 2], "cpu_total_ns": [60e6, 500e6, 80e6],
                          "measure": ["gpu", "mixed", "cpu_wall"], "phase_ns": [1400e6, 120e6, 80e6]})
    text = phase_caption(frame)
    # ordered by how far the CPU wall is off: fwd ended before its work, opt waited behind earlier work
    assert "2 phases are measured on the GPU timeline (fwd: CPU wall 30.0 ms, phase time 700 ms per instance; " \
           "opt: CPU wall 250 ms, phase time 60.0 ms per instance)" in text
    assert "bwd" not in text
    calm = phase_caption(frame.assign(measure="cpu_wall"))
    assert calm.endswith("Here every phase's CPU wall time measures it.")
    assert phase_caption(frame.drop(columns="measure")) == ""


def test_phases_unfamiliar_table_shows_its_columns():
    a = make_analysis()
    a.facts.frames["phases"] = pd.DataFrame({"label": ["fwd"], "wall_ns": [5], "gpu_share": [0.5]})
    s = build_report([a], created=CREATED).traces[0]
    assert [(c.key, c.kind) for c in s.phases.columns] == [("label", "text"), ("wall_ns", "ns"),
                                                          ("gpu_share", "share")]


def test_multi_trace_comparison_and_prefixed_anchors():
    report = build_report([make_analysis("a.sqlite"), make_analysis("b.sqlite", with_ncu=False)], created=CREATED)
    assert [s.anchor for s in report.traces] == ["trace-1", "trace-2"]
    assert report.traces[1].findings[0].anchor == "t2-gpu-idle-gaps-0"
    assert report.traces[1].findings[1].explained_by[0].anchor == "t2-gpu-idle-gaps-0"
    comp = report.comparison
    assert comp is not None and comp.total_rows == 2
    assert [c.key for c in comp.columns] == ["trace", "analyzed_ns", "gpu_busy_share", "kernel_ns", "top_category",
                                             "error", "warning", "info", "top_finding"]
    assert comp.rows[0][0] == Link("a.sqlite", "trace-1")
    assert comp.rows[0][5:8] == (1, 2, 1)
    assert report.verdict.startswith("2 traces, 6 problems in total; most to gain in a.sqlite")


def test_duplicate_keys_get_unique_anchors():
    a = make_analysis()
    twin = replace(a.findings[0], impact_ns=1 * MS)
    a.findings.append(twin)
    anchors = [f.anchor for f in build_report([a], created=CREATED).traces[0].findings]
    assert len(anchors) == len(set(anchors))


def test_caps_keep_view_model_small():
    rows = tuple((i, i * 10, "x" * 1000) for i in range(100_000))
    many = [
        Finding(rule=f"r{i}", id=f"X{i:04d}", severity=Severity.WARNING, title=f"t{i}", message="m",
                category="c", scope=Scope("trace"), impact_ns=i, impact_pct=None,
                evidence_columns=("a", "start", "name"), evidence=rows, evidence_total=len(rows))
        for i in range(2_000)
    ]
    a = make_analysis(extra_findings=many)
    a.facts.frames["top_kernels"] = pd.concat([a.facts.frames["top_kernels"]] * 20_000, ignore_index=True)
    limits = Limits()
    s = build_report([a], created=CREATED, limits=limits).traces[0]
    assert len(s.findings) == limits.findings and s.findings_total == 2_004
    assert all(len(f.evidence.rows) <= limits.evidence_rows for f in s.findings)
    assert all(len(str(v)) <= limits.cell_chars for f in s.findings for r in f.evidence.rows for v in r)
    assert len(s.top_kernels.rows) == limits.top_kernels and s.top_kernels.total_rows == 100_000
    html = render(build_report([a], created=CREATED), "html")
    assert len(html.encode()) < 10_000_000


def test_large_fact_tables_give_a_small_report():
    """Aggregates of a very large trace (1M utilization bins, 1M gaps, 100k NVTX rows) stay capped."""
    import numpy as np

    a = make_analysis()
    n = 1_000_000
    edges = np.linspace(a.window.start_ns, a.window.end_ns, n + 1).astype("int64")
    a.facts.frames["utilization"] = pd.DataFrame({"device": 0, "bin_start": edges[:-1], "bin_end": edges[1:],
                                                  "busy_ns": np.diff(edges) // 2, "util": 0.5})
    gaps = a.facts.frames["gpu_gaps"]
    a.facts.frames["gpu_gaps"] = gaps.loc[gaps.index.repeat(n // len(gaps))].reset_index(drop=True)
    nv = a.facts.frames["nvtx_projection"]
    a.facts.frames["nvtx_projection"] = nv.loc[nv.index.repeat(20_000)].reset_index(drop=True)
    report = build_report([a], created=CREATED)
    for fmt in ("html", "md", "json"):
        assert len(render(report, fmt).encode()) < 10_000_000
    s = report.traces[0]
    assert len(s.utilization.series[0].util) == Limits().util_bins
    assert s.utilization.series[0].util[0] == pytest.approx(0.5, abs=1e-3)


def test_same_inputs_same_bytes():
    one = [render(build_report([make_analysis()], created=CREATED), fmt) for fmt in ("html", "md", "json")]
    two = [render(build_report([make_analysis()], created=CREATED), fmt) for fmt in ("html", "md", "json")]
    assert one == two


def test_empty_input_is_an_error():
    with pytest.raises(ValueError):
        build_report([])


def test_unknown_format():
    with pytest.raises(ValueError, match="unknown report format"):
        render(build_report([make_analysis()], created=CREATED), "pdf")  # type: ignore[arg-type]


def test_nested_parameters_are_flattened():
    a = make_analysis()
    a.parameters = {"gpu-idle-gaps": {"min_gap_ms": 1.0, "top": 5}, "x": "y"}
    h = build_report([a], created=CREATED).traces[0].header
    assert h.parameters == (("gpu-idle-gaps.min_gap_ms", "1.0"), ("gpu-idle-gaps.top", "5"), ("x", "y"))
