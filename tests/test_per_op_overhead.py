"""per-op-host-overhead on real traces: a range whose launch-bound time per GPU op is many times what an
eager launch leaves is slowed by per-op Python work (``torch.autograd.set_detect_anomaly(True)`` left on:
tests/data/heldout/h100_run5/detect_anomaly), a finding of its own split off launch-bound's time (no
nanosecond in both); its twin and the healthy eager loops stay silent."""
from __future__ import annotations

import functools

import pytest

from analyzer.facts.breakdown_overhead import PER_OP_DETAIL, PER_OP_FACTOR, PER_OP_REF_NS
from analyzer.impacts import report_order
from analyzer.pipeline import analyze_trace
from analyzer.testing import DATA_DIR, real_trace

RUN5 = "heldout/h100_run5"
KINETO = DATA_DIR / "heldout" / "h100_run5" / "detect_anomaly.pt.trace.json.gz"
KINETO_TWIN = DATA_DIR / "heldout" / "h100_run5" / "detect_anomaly_fixed.pt.trace.json.gz"


@functools.cache
def analysis(name: str):  # type: ignore[no-untyped-def]
    if name.endswith(".gz"):
        if not DATA_DIR.joinpath(name).is_file():
            pytest.skip(f"{name} not in {DATA_DIR}")
        return analyze_trace(DATA_DIR / name)
    return analyze_trace(real_trace(name))


def findings(name: str, rule: str) -> dict[str, object]:
    return {f.scope.nvtx_path or "": f for f in analysis(name).findings if f.rule == rule}


def per_op_time(name: str) -> int:
    seg = analysis(name).facts.get("timeline_segments")
    return int(seg.loc[seg["detail"] == PER_OP_DETAIL, "duration"].sum())


@pytest.mark.parametrize("name, rng, low, high", [
    (f"{RUN5}/detect_anomaly", "step_N/forward", 300e6, 330e6),  # 313.8 ms, 152 us per op against 1.8
    ("heldout/h100_run5/detect_anomaly.pt.trace.json.gz", "ProfilerStep#N/step_N/forward", 130e6, 145e6),
])
def test_anomaly_mode_is_per_op_host_work_in_the_forward(name, rng, low, high):
    a = analysis(name)
    found = findings(name, "per-op-host-overhead")
    assert set(found) == {rng}
    f = found[rng]
    assert low < f.impact_ns < high
    # it leads the verdict, the fix is anomaly mode off, not CUDA graphs
    assert report_order(a.findings)[0] is f
    assert "set_detect_anomaly(False)" in f.fix
    # the breakdown's per-op time is the finding's impact, and launch-bound no longer states it
    assert per_op_time(name) == f.impact_ns
    assert rng not in findings(name, "launch-bound")
    bd = a.facts.get("timeline_breakdown")
    row = bd[(bd["scope"] == "range") & (bd["phase"] == rng) & (bd["detail"] == PER_OP_DETAIL)].iloc[0]
    assert row["phase_launch_ns"] / row["phase_ops"] >= PER_OP_FACTOR * PER_OP_REF_NS
    assert row["phase_ops"] == 103 * a.facts.get("steps").shape[0]  # 103 GPU ops a forward
    # the window is still partitioned exactly, per-op time inside launch_bound
    seg = a.facts.get("timeline_segments")
    assert int(seg["duration"].sum()) == a.window.duration_ns
    assert (seg["end"] > seg["start"]).all()
    assert set(seg.loc[seg["detail"] == PER_OP_DETAIL, "cause"].astype(str)) == {"launch_bound"}


@pytest.mark.parametrize("name", [
    f"{RUN5}/detect_anomaly_fixed", "heldout/h100_run5/detect_anomaly_fixed.pt.trace.json.gz",
    "round3/decode_eager", "tiny_kernels", "round3/optimizer_loop", "heldout/h100/per_sample_loop",
])
def test_twin_and_healthy_eager_loops_are_silent(name):
    assert not findings(name, "per-op-host-overhead")
    assert per_op_time(name) == 0


def test_launch_bound_loops_keep_their_launch_bound_finding():
    # the batch-1 eager decode loop: launch-bound at the usual cost per op, its finding unchanged
    lb = findings("round3/decode_eager", "launch-bound")
    assert "step_N/token_N" in lb
