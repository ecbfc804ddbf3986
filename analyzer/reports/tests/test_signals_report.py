"""The reports' section on code locations, measured GPU activity and energy, on real traces."""
from __future__ import annotations

import json
from pathlib import Path

from analyzer.pipeline import AnalysisOptions, analyze_trace
from analyzer.reports import build_report, render

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"


def _report(path: Path, **options):
    return build_report([analyze_trace(path, options=AnalysisOptions(**options))])


def test_code_locations_in_all_three_formats() -> None:
    report = _report(DATA / "callstacks" / "host_sync_bt.sqlite.xz")
    html = render(report, "html")
    assert "Where the CUDA calls come from" in html and "Tensor.item()" in html
    md = render(report, "md")
    assert "<summary>Where the CUDA calls come from</summary>" in md and len(md) < 65_000
    doc = json.loads(render(report, "json"))
    rows = doc["traces"][0]["overview"]["signals"]["code_locations"]["rows"]
    assert any(r["code_location"] == "Tensor.item()" and r["kind"] == "sync" for r in rows)


def test_without_stacks_the_report_says_how_to_record_them() -> None:
    md = render(_report(DATA / "host_sync.sqlite.xz"), "md").replace("\\", "")  # Markdown escapes
    assert "--cudabacktrace=all --python-backtrace=cuda" in md and "with_stack=True" in md
    healthy = render(_report(DATA / "healthy.sqlite.xz"), "md")
    assert "cudabacktrace" not in healthy  # nothing there points at API calls


def test_sm_and_tensor_activity_drawn_under_the_utilization_chart() -> None:
    html = render(_report(DATA / "gpu_metrics" / "fp32_gemm_gm.sqlite.xz"), "html")
    assert html.count('<g class="metric">') == 2  # SMs active, tensor pipes active
    assert "Measured GPU activity" in html and "Tensor pipes active while GEMMs ran" in html
    plain = render(_report(DATA / "fp32_gemm.sqlite.xz"), "html")
    assert '<g class="metric">' not in plain


def test_energy_per_step() -> None:
    d = DATA / "sweep"
    report = _report(d / "2.7B_forward_ctx1024.sqlite.xz", power_files=(d / "2.7B_forward_ctx1024.power.csv",))
    doc = json.loads(render(report, "json"))
    energy = doc["traces"][0]["overview"]["signals"]["energy"]["rows"][0]
    assert energy["steps"] == 3 and 600 < energy["avg_power_w"] < 720
    steps = doc["traces"][0]["overview"]["signals"]["energy_steps"]["rows"]
    assert [s["step"] for s in steps] == ["step_0", "step_1", "step_2"]
    # three identical forward passes: the same energy within 1%
    values = [s["energy_j"] for s in steps]
    assert max(values) / min(values) < 1.01
    assert "Energy per step (J)" in render(report, "html")
