"""An Nsight Compute report on its own (``analyze kernels.ncu-rep`` / an ncu CSV): a kernel report in the
three renderings, the ncu rules estimated from the profiled durations (and saying so), the timeline
rules listed as not applicable, and ncu's own rule verdicts shown. On the public exports made by other
people (A10G .ncu-rep from ncu 2023.1, RTX 5090 details CSV from ncu 2025) and on our H100 exports."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.pipeline import NCU_FACTS, AnalysisOptions, analyze_ncu, analyze_paths, default_rules_path
from analyzer.reports import build_report, render
from analyzer.rules import load_pack
from analyzer.testing import PUBLIC_DIR, real_file

A10G_REP = PUBLIC_DIR / "AveryClapp__ESMM-Research__profile.ncu-rep"
RTX5090_CSV = PUBLIC_DIR / "CodeGandee__llm-perf-opt__ncu.details.csv"
needs_public = pytest.mark.skipif(not RTX5090_CSV.is_file(), reason=f"public exports not in {PUBLIC_DIR}")


def _timeline_rules() -> set[str]:
    return {r.name for r in load_pack(default_rules_path()) if not set(r.requires) <= NCU_FACTS}


def _by_rule(analysis) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in analysis.findings:
        out.setdefault(f.rule, []).append(f)
    return out


@needs_public
def test_rtx5090_details_csv_alone() -> None:
    """One cuBLAS GEMV of 6.75 us: latency-bound with 16.7% theoretical occupancy (registers), as ncu's
    own SOLBottleneck / TheoreticalOccupancy rules say; the estimates are of the profiled time."""
    analysis = analyze_ncu(RTX5090_CSV)
    assert analysis.ncu_only and analysis.window.source == "ncu"
    assert analysis.window.duration_ns == 6750
    assert {name for name, _ in analysis.not_applicable} == _timeline_rules()
    found = _by_rule(analysis)
    assert set(found) == {"latency-bound", "low-occupancy-measured"}
    occ = found["low-occupancy-measured"][0]
    assert "16.67%" in occ.message and "registers" in occ.message
    assert "in the profiled launches" in occ.message and "on the timeline" not in occ.message
    assert 0 < occ.impact_ns < 6750
    report = build_report([analysis])
    section = report.traces[0]
    assert section.kind == "ncu" and section.header.gpus == "unknown GPU (compute capability 12.0)"
    assert section.ncu_rules is not None
    said = {row[1] for row in section.ncu_rules.rows}
    assert {"TheoreticalOccupancy", "SOLBottleneck"} <= said
    assert report.title.startswith("GPU kernel diagnosis")


@needs_public
def test_a10g_ncu_rep_alone_without_sol_metrics() -> None:
    """ncu 2023.1 report with launch statistics but no Speed Of Light metrics: the occupancy rule has no
    estimate for its 33% kernels, so it raises nothing (never a finding with an unknown impact)."""
    pytest.importorskip("ncu_report")
    analysis = analyze_ncu(A10G_REP)
    kernels = analysis.ncu.kernels
    assert len(kernels) == 12 and (kernels["theoretical_occupancy"] < 50).sum() == 7
    assert kernels["sm_throughput_pct"].isna().all()
    found = _by_rule(analysis)
    assert "low-occupancy-measured" not in found and "latency-bound" not in found
    assert all(f.impact_ns is not None and f.impact_ns > 0 for f in analysis.findings)
    section = build_report([analysis]).traces[0]
    assert section.header.gpus == "NVIDIA A10G"
    assert section.ncu is not None and section.ncu.total_rows == 12


def test_h100_occupancy_export_alone_fires_and_its_fix_is_silent() -> None:
    bad = _by_rule(analyze_ncu(real_file("ncu/occupancy.raw.csv")))
    occ = bad["low-occupancy-measured"][0]
    assert "3.12%" in occ.message and "shared_mem" in occ.message
    # 2 profiled launches of 8.2 ms at SM 3%: almost all of it is latency
    assert occ.impact_pct is not None and occ.impact_pct > 90
    fixed = _by_rule(analyze_ncu(real_file("ncu/occupancy_fixed.raw.csv")))
    assert "low-occupancy-measured" not in fixed and "latency-bound" not in fixed


def test_same_rule_with_a_timeline_speaks_of_the_timeline() -> None:
    from analyzer.loading.ncu import load_ncu
    from analyzer.pipeline import analyze_trace
    from analyzer.testing import real_trace

    analysis = analyze_trace(real_trace("occupancy"), ncu=load_ncu(real_file("ncu/occupancy.raw.csv")))
    occ = _by_rule(analysis)["low-occupancy-measured"][0]
    assert "on the timeline" in occ.message and not analysis.ncu_only and not analysis.not_applicable


@pytest.mark.parametrize("fmt", ["html", "md", "json"])
def test_every_rendering(fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"r.{fmt}"
    code = main([str(real_file("ncu/naive_attention.raw.csv")), "-o", str(out), "-q"])
    assert code == 0
    text = out.read_text()
    assert "memory-bound-softmax-measured" in text and "gpu-idle-gaps" in text  # fired; not applicable
    if fmt == "json":
        [trace] = json.loads(text)["traces"]
        assert trace["kind"] == "ncu"
        assert "gpu-idle-gaps" in trace["not_applicable"]["rules"]
        assert trace["overview"]["ncu"]["total_rows"] == 1
    if fmt == "html":
        assert "not applicable" in text and "Nsight Compute: per-kernel metrics" in text


def test_fail_on_and_default_output_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = main([str(real_file("ncu/occupancy.raw.csv")), "--fail-on", "warning"])
    out, _ = capsys.readouterr()
    assert code == 1 and "low-occupancy-measured" in out
    assert (tmp_path / "reports" / "occupancy.raw.html").is_file()


@needs_public
def test_every_public_export_gives_a_report() -> None:
    """The Done-when of issue 15: every file in the public traces folder gives a report (the .qdrep
    needs nsys to export it; without nsys it is a one-line error, tested in the loader's tests)."""
    import shutil

    done = []
    for path in sorted(PUBLIC_DIR.iterdir()):
        if path.suffix not in (".sqlite", ".ncu-rep", ".csv", ".qdrep"):
            continue
        if path.suffix == ".qdrep" and not shutil.which("nsys"):
            continue
        if path.suffix == ".ncu-rep":
            pytest.importorskip("ncu_report")
        analyses = analyze_paths([path], AnalysisOptions())
        report = build_report(analyses)
        for fmt in ("html", "md", "json"):
            assert render(report, fmt)
        done.append(path.name)
    assert {A10G_REP.name, RTX5090_CSV.name} <= set(done)
    assert len(done) >= 4
