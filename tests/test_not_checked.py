"""Rules that need data a trace lacks are reported "not available in this trace", never silently passed.

The traces here are real nsys exports with one kind of data removed in memory (the host memory kind of
copies, the CUDA API calls, the kernels' registers, the GPU properties), which is what a torch.profiler
trace from ROCm, a trace without CUDA API tracing, or an export without device properties looks like.
The rules' behaviour on the intact traces is tested elsewhere; these tests check the mechanism: the
trace says what it lacks, rules declare (or inherit from the facts they read) what they need, and the
pipeline, the reports and ``analyze rules test`` say which rules were not run and why.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from analyzer.errors import RuleError
from analyzer.loading import load_trace
from analyzer.loading.capabilities import CAPABILITIES, missing_capabilities
from analyzer.pipeline import AnalysisOptions, analyze_trace, load_rules
from analyzer.reports import build_report, render
from analyzer.testing import real_trace


def _missing(trace) -> dict[str, str]:
    return missing_capabilities(kernels=trace.kernels, memcpy=trace.memcpy, memset=trace.memset, api=trace.api,
                                gpus=trace.gpus, memory=trace.memory)


def _without_memory_kinds(trace):
    mc = trace.memcpy.copy()
    for col in ("src_kind", "dst_kind"):  # categorical in the compact model: edit as text
        kinds = mc[col].astype(object)
        mc[col] = kinds.where(kinds == "device", "unknown")
    trace.memcpy = mc
    return trace


def _reloaded(trace):
    """The trace with TraceInfo.unavailable recomputed, as a loader would for such a file."""
    info = dataclasses.replace(trace.info, unavailable=_missing(trace))
    trace.info = info
    return trace


def test_intact_traces_lack_nothing():
    for name in ("pageable_h2d", "small_training_ctx128", "occupancy"):
        assert load_trace(real_trace(name)).info.unavailable == {}


def test_missing_capabilities_from_the_frames():
    trace = load_trace(real_trace("pageable_h2d"))
    assert _missing(_without_memory_kinds(trace)) == {
        "memcpy_memory_kind": "no copy says whether its host memory is pageable or pinned"}
    trace = load_trace(real_trace("host_sync"))
    trace.api = trace.api.iloc[:0]
    assert set(_missing(trace)) == {"api_calls"}
    trace = load_trace(real_trace("occupancy"))
    trace.kernels = trace.kernels.assign(registers_per_thread=0)
    trace.gpus = trace.gpus.iloc[:0]
    missing = _missing(trace)
    assert set(missing) == {"kernel_resources", "gpu_properties"}
    assert "GPU 0" in missing["gpu_properties"]
    trace = load_trace(real_trace("tiny_kernels"))
    trace.kernels = trace.kernels.assign(api_name="")
    trace.memcpy = trace.memcpy.assign(api_name="")
    trace.memset = trace.memset.assign(api_name="")
    assert set(_missing(trace)) == {"launch_correlation"}


def test_a_trace_without_copies_lacks_no_memory_kind():
    trace = load_trace(real_trace("healthy"))
    trace.memcpy = trace.memcpy.iloc[:0]
    assert "memcpy_memory_kind" not in _missing(trace)


def test_rules_needs_come_from_the_columns_they_read():
    pack = load_rules(AnalysisOptions())
    needs = {r.name: set(r.needs) for r in pack.rules}
    assert needs["pageable-memcpy"] == {"memcpy_memory_kind"}  # reads copy_throughput.pageable
    assert needs["h2d-dominance"] == set()  # direction and durations only
    # gpu_workload: the window's `needs:` of the rules judging the time between GPU ops
    assert needs["sync-memcpy"] == {"gpu_workload", "api_calls", "memcpy_memory_kind"}  # `needs:` + sync_calls
    assert needs["small-grid"] == {"kernel_launch_config", "gpu_properties"}
    assert {"kernel_resources", "kernel_launch_config", "gpu_properties"} <= needs["low-occupancy"]
    assert needs["tiny-kernels"] == {"gpu_workload", "api_calls", "launch_correlation"}  # fact_mean(launch_stats, ...)
    assert needs["gpu-idle-gaps"] == {"gpu_workload"}
    for rule in pack.rules:
        assert set(rule.needs) <= set(CAPABILITIES)


def _rule_file(tmp_path: Path, extra: str) -> Path:
    p = tmp_path / "rules.yaml"
    p.write_text(f"""version: 1
rules:
  - id: USR001
    name: pinned-check
    title: Copies from pageable memory
    severity: warning
    source: copy_throughput
    where: pageable
{extra}
    condition: count() > 0
    message: pageable copies
    what: w
    why: y
    fix: f
""")
    return p


def test_user_rules_inherit_and_declare_needs(tmp_path):
    from analyzer.rules import load_pack

    assert load_pack(_rule_file(tmp_path, "")).rules[0].needs == ("memcpy_memory_kind",)
    assert load_pack(_rule_file(tmp_path, "    needs: [api_calls]")).rules[0].needs == (
        "api_calls", "memcpy_memory_kind")
    with pytest.raises(RuleError) as info:
        load_pack(_rule_file(tmp_path, "    needs: [memcpy_memory_kinds]"))
    assert 'unknown capability "memcpy_memory_kinds"' in str(info.value)
    assert "memcpy_memory_kind" in str(info.value)  # did you mean


@pytest.fixture(scope="module")
def pageable_without_kinds(tmp_path_factory):
    """pageable_h2d (pageable-memcpy fires on it) with the copies' memory kinds removed."""
    import analyzer.loading as loading

    original = loading.load_trace
    path = real_trace("pageable_h2d")

    def patched(p, **kw):
        trace = original(p, **kw)
        return _reloaded(_without_memory_kinds(trace)) if Path(p) == path else trace

    intact = analyze_trace(path)
    loading.load_trace = patched
    try:
        analysis = analyze_trace(path)
    finally:
        loading.load_trace = original
    return intact, analysis


def test_pipeline_reports_rules_not_run(pageable_without_kinds):
    intact, analysis = pageable_without_kinds
    assert "pageable-memcpy" in {f.rule for f in intact.findings}
    assert not intact.not_checked
    skipped = {n.rule: n for n in analysis.not_checked}
    assert set(skipped) == {"pageable-memcpy", "sync-memcpy"}
    assert "pageable-memcpy" not in {f.rule for f in analysis.findings}
    assert skipped["pageable-memcpy"].missing[0][0] == "memcpy_memory_kind"
    # rules that do not need the kinds still run and fire as before
    assert "h2d-dominance" in {f.rule for f in analysis.findings}


def test_reports_say_not_available(pageable_without_kinds):
    _, analysis = pageable_without_kinds
    report = build_report([analysis])
    md = render(report, "md")
    assert "**Not available in this trace** (2 rules not run" in md
    assert "- XFR002 pageable-memcpy: no copy says whether its host memory is pageable or pinned" in md
    doc = json.loads(render(report, "json"))
    rules = {n["rule"]: n for n in doc["traces"][0]["not_checked"]}
    assert rules["pageable-memcpy"]["reason"].startswith("no copy says")
    html = render(report, "html")
    assert 'class="notes not-checked"' in html and "XFR002" in html
    from analyzer.reports.summary import summary_text

    assert "not available in this trace (not run): XFR002 pageable-memcpy, SYN002 sync-memcpy" in summary_text(report)


def test_intact_report_has_no_not_checked_section(pageable_without_kinds):
    intact, _ = pageable_without_kinds
    report = build_report([intact])
    assert "Not available in this trace" not in render(report, "md")
    assert "not_checked" not in json.loads(render(report, "json"))["traces"][0]


def test_rules_test_fails_a_case_whose_rule_was_not_run(pageable_without_kinds):
    from analyzer.rules.testing import run_rule_tests

    _, analysis = pageable_without_kinds
    pack = load_rules(AnalysisOptions()).select(["pageable-memcpy"])
    results = run_rule_tests(pack, analyze=lambda *_a: analysis)
    assert results and all(r.outcome == "fail" for r in results)
    assert all(r.detail.startswith("not available in this trace: no copy says") for r in results)
