"""Diff renderings: size caps, escaping of hostile names, offline HTML, JSON contract keys, and the
report reader's round trip. Built from hand-made summaries: these test the rendering, not the analysis
(the analysis is tested on real traces in test_diff_real.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone

import numpy as np
import pytest

from analyzer.diff.compare import DiffSettings, diff_runs
from analyzer.reports.baseline import (
    CategoryRow,
    CopyRow,
    KernelRow,
    PhaseRow,
    RuleRow,
    RunSummary,
    Steps,
    Table,
    from_report,
)
from analyzer.diff.report import render_diff
from analyzer.reports.markdown import MAX_CHARS
from analyzer.reports.tests.helpers import HOSTILE, assert_no_injection, external_loads

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def run_summary(scale: float, *, kernels: int = 5, phases: int = 4, rules: int = 3, steps: int = 12,
                name_chars: int = 40, seed: int = 0, hostile: bool = False) -> RunSummary:
    rng = np.random.default_rng(seed)
    durations = tuple(int(v) for v in 10e6 * scale * np.exp(rng.normal(0, 0.01, steps)))

    def name(kind: str, i: int) -> str:
        text = f"{HOSTILE[i % 3]}" if hostile else f"{kind}_{i}"
        return (text + "x" * name_chars)[: max(name_chars, len(text))]

    return RunSummary(
        name=HOSTILE[0] if hostile else "run.sqlite", path="/tmp/run.sqlite", input_kind="trace",
        format="nsys-sqlite", gpus="NVIDIA H100", device_count=1, window_start_ns=0,
        window_end_ns=sum(durations), window_source="nvtx", window_description="steps",
        rules_file="built-in", parameters=(("a.b", "1"),), analyzed_ns=sum(durations),
        gpu_busy_ns=int(sum(durations) * 0.8), kernel_ns=int(sum(durations) * 0.7), kernel_count=100 * steps,
        steps=Steps("nvtx", "steps", durations, tuple(f"step_{i}" for i in range(steps)), 0, steps),
        phases=Table(tuple(PhaseRow(f"step_N/{name('phase', i)}", steps, int(1e6 * scale * (i + 1)),
                                    int(2e6 * scale * (i + 1))) for i in range(phases)), phases),
        kernels=Table(tuple(KernelRow(name("k", i), name("k", i), "gemm", 10 * steps, int(3e6 * scale * (i + 1)), 1)
                            for i in range(kernels)), kernels),
        categories=Table((CategoryRow("gemm", 10, int(5e6 * scale)),), 1),
        copies=Table((CopyRow("memcpy H2D", steps, 1 << 20, int(1e6 * scale)),), 1),
        rules=Table(tuple(RuleRow(f"rule-{i}", f"R{i:03d}", name("title", i), "warning", 1, int(1e6 * scale),
                                  name("message", i) * 3) for i in range(rules)), rules),
    )


def test_markdown_stays_under_the_comment_limit() -> None:
    base = run_summary(1.0, kernels=600, phases=400, rules=300, steps=20_000, name_chars=2_000)
    head = run_summary(1.3, kernels=600, phases=400, rules=300, steps=20_000, name_chars=2_000, seed=1)
    head = replace(head, rules=Table(head.rules.rows[::2], 150))  # half the findings resolved
    result = diff_runs(base, head, DiffSettings(), created=CREATED)
    md = render_diff(result, "md")
    assert len(md) < MAX_CHARS
    assert md.startswith("# GPU trace diff") and "**Verdict:** HEAD is 30% slower per step" in md
    html = render_diff(result, "html")
    assert len(html) < 5_000_000 and not external_loads(html)


def test_hostile_names_are_escaped_everywhere() -> None:
    base = run_summary(1.0, hostile=True)
    head = run_summary(0.5, hostile=True, seed=2)
    head = replace(head, kernels=Table(head.kernels.rows + (KernelRow(HOSTILE[1], HOSTILE[1], HOSTILE[0], 1, 5, 1),),
                                       6))
    result = diff_runs(base, head, DiffSettings(), created=CREATED)
    html = render_diff(result, "html")
    assert_no_injection(html)
    md = render_diff(result, "md")
    rendered = pytest.importorskip("markdown_it").MarkdownIt("gfm-like").render(md)  # as GitHub shows it
    assert "<script" not in rendered and "<img" not in rendered and "&lt;script&gt;" in rendered
    doc = json.loads(render_diff(result, "json"))
    assert doc["kernels"]["new"] == [HOSTILE[1]]  # verbatim in JSON


def test_json_contract_keys() -> None:
    result = diff_runs(run_summary(1.0), run_summary(0.5, seed=3), DiffSettings(), created=CREATED)
    doc = json.loads(render_diff(result, "json"))
    assert doc["kind"] == "diff"
    for key in ("base", "head", "step", "findings", "phases", "kernels", "verdict"):
        assert key in doc
    for key in ("base_median_ns", "head_median_ns", "change_pct", "ci_low_pct", "ci_high_pct", "significant"):
        assert key in doc["step"]
    assert set(doc["findings"]) >= {"new", "resolved", "changed"}
    assert doc["step"]["status"] == "faster" and doc["step"]["change_pct"] < -45


def test_baseline_round_trip() -> None:
    s = run_summary(1.0, hostile=True)
    doc = {"schema_version": "1.1", "tool": {"name": "gpu-trace-analyzer"}, "traces": [{
        "info": {"name": s.name, "path": s.path, "format": s.format, "gpus": s.gpus, "rules_file": s.rules_file,
                 "parameters": dict(s.parameters)},
        "window": {"start_ns": s.window_start_ns, "end_ns": s.window_end_ns, "source": s.window_source,
                   "description": s.window_description},
        "baseline": s.baseline_dict(),
    }]}
    back = from_report(json.loads(json.dumps(doc)), "r.json")
    assert back == replace(s, input_kind="report")


def test_noise_floor_from_drift_and_min_effect() -> None:
    """A run whose own steps moved 20% cannot show a 15% change; with a steady base a 10% one shows."""
    steady = run_summary(1.0, steps=20)
    drifting = replace(steady, steps=replace(steady.steps, durations_ns=tuple(
        int(10e6 * (1.0 if i < 10 else 1.2)) + i for i in range(20))))
    above_all = run_summary(1.26, steps=20, seed=5)  # slower than every BASE step, +15% by the estimate
    r = diff_runs(drifting, above_all, DiffSettings(), created=CREATED)
    assert r.step.p_value is not None and r.step.change_pct is not None
    assert r.step.p_value < 0.001 and 10 < r.step.change_pct < 20
    assert r.step.status == "unchanged" and r.step.noise_floor_pct >= 19 and r.step.floor_source == "drift"
    # it says why, with the numbers, and what it would take
    assert "BASE's own steps drifted +20%" in r.step.reason and "to call it, the change must exceed 20%" in r.step.reason
    assert r.step.separated == 1 and r.step.reason.startswith("every HEAD step is longer than every BASE step")
    assert "every step slower, yet within the 20% noise of these runs (BASE's steps drifted +20% within its run)" \
        in r.verdict
    assert r.step.drift_base_pct is not None and r.step.drift_base_pct > 19
    ten_pct = run_summary(1.1, steps=20, seed=5)
    r = diff_runs(steady, ten_pct, DiffSettings(), created=CREATED)
    assert r.step.status == "slower" and r.step.significant
    r = diff_runs(steady, ten_pct, DiffSettings(min_effect_pct=15), created=CREATED)
    assert r.step.status == "unchanged" and "--min-effect" in r.step.reason


def test_user_marked_iterations_compare_across_kinds() -> None:
    """NVTX/ProfilerStep ranges in one run and iterations between a program annotation in the other both
    mark the program's own loop: compared, with a note; against GPU op periods they are not."""
    from analyzer.diff.compare import compare_step_times

    nvtx = run_summary(1.0, steps=12).steps
    marks = replace(run_summary(0.5, steps=12, seed=4).steps, source="annotation",
                    names=tuple(f"iteration {i}" for i in range(12)))
    notes: list[str] = []
    r = compare_step_times(nvtx, marks, 0.1, 0.1, DiffSettings(), notes)
    assert r.status == "faster" and any("same unit of work" in n and "annotation" in n for n in notes)
    assert not any("named differently" in n for n in notes)
    periods = replace(marks, source="periodic", ops_per_step=40)
    r = compare_step_times(nvtx, periods, 0.1, 0.1, DiffSettings(), [])
    assert r.status == "not-comparable" and "--window 'step_*'" in r.reason


def test_unknown_gpu_busy_time_assumes_a_host_bound_loop() -> None:
    """A report that does not say how busy the GPU was gets the host-bound floor, and the verdict says so."""
    from analyzer.diff import stats

    base = replace(run_summary(1.0, steps=12), gpu_busy_ns=None)
    r = diff_runs(base, run_summary(1.3, steps=12, seed=6), DiffSettings(), created=CREATED)
    assert r.step.status == "unchanged" and r.step.floor_source == "run-to-run"
    assert r.step.noise_floor_pct == pytest.approx(stats.floor_pct(stats.HOST_RUN_TO_RUN))
    assert "GPU busy time unknown: assumed host-bound" in r.verdict and "BASE does not say" in r.step.reason
