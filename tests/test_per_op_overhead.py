"""per-op-host-overhead on real traces: a range whose launch-bound time per GPU op is many times what an
eager launch leaves is slowed by per-op Python work (``torch.autograd.set_detect_anomaly(True)`` left on:
tests/data/heldout/h100_run5/detect_anomaly), a finding of its own split off launch-bound's time (no
nanosecond in both); the step's other range that synchronizes after a large share of its ops (anomaly
mode's NaN checks in the backward) joins it, split off host-sync-in-loop and launch-bound; its twin, the
healthy eager loops and the loops that synchronize per layer or module stay silent."""
from __future__ import annotations

import functools

import pytest

from analyzer.facts.breakdown_overhead import (PER_OP_DETAIL, PER_OP_DETAILS, PER_OP_FACTOR, PER_OP_REF_NS,
                                               PER_OP_SYNC_DETAIL, PER_OP_SYNC_RATIO)
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
    return int(seg.loc[seg["detail"].isin(PER_OP_DETAILS), "duration"].sum())


@pytest.mark.parametrize("name, prefix, low, high, saving", [
    # nsys: forward 313.8 ms (152 us per op against 1.8) + backward 215.8 (120.5 syncing, 95.3 launching)
    (f"{RUN5}/detect_anomaly", "step_N", 525e6, 535e6, 655.1e6),
    # torch.profiler: forward 137.3 ms + backward 82.5
    ("heldout/h100_run5/detect_anomaly.pt.trace.json.gz", "ProfilerStep#N/step_N", 215e6, 225e6, 242.3e6),
])
def test_anomaly_mode_is_one_per_op_finding_across_forward_and_backward(name, prefix, low, high, saving):
    a = analysis(name)
    fwd, bwd = f"{prefix}/forward", f"{prefix}/backward"
    found = findings(name, "per-op-host-overhead")
    assert set(found) == {f"{fwd} + {bwd}"}
    f = found[f"{fwd} + {bwd}"]
    assert low < f.impact_ns < high
    assert 0.75 <= f.impact_ns / saving <= 1.25  # the twin's step saving (docs/breakdown-heldout.md)
    # it leads the verdict, the fix is anomaly mode off, not CUDA graphs
    assert report_order(a.findings)[0] is f
    assert "set_detect_anomaly(False)" in f.fix
    assert f"{fwd} " in f.message and f"{bwd} " in f.message  # each range's share
    # the breakdown's per-op time is the finding's impact; launch-bound and host-sync-in-loop leave it out
    assert per_op_time(name) == f.impact_ns
    assert not {fwd, bwd} & set(findings(name, "launch-bound"))
    for other in a.findings:
        if other.rule == "host-sync-in-loop":
            assert other.impact_ns is None or other.impact_ns < 5e6
    bd = a.facts.get("timeline_breakdown")
    steps = a.facts.get("steps").shape[0]
    rows = bd[(bd["scope"] == "range") & bd["detail"].isin(PER_OP_DETAILS)]
    f_row = rows[rows["phase"] == fwd].iloc[0]
    assert f_row["phase_launch_ns"] / f_row["phase_ops"] >= PER_OP_FACTOR * PER_OP_REF_NS
    assert f_row["phase_ops"] == 103 * steps  # 103 GPU ops a forward
    assert f_row["phase_syncs"] == 0
    b_row = rows[rows["phase"] == bwd].iloc[0]
    assert b_row["phase_ops"] == 712 * steps  # the backward's GPU ops, its checks included
    assert b_row["phase_syncs"] == 151 * steps  # a cudaStreamSynchronize per check, counted once a call
    assert b_row["phase_syncs"] / b_row["phase_ops"] >= 2 * PER_OP_SYNC_RATIO
    assert (rows["per_op_group"] == f"{fwd} + {bwd}").all()
    # the window is still partitioned exactly; per-op time keeps its cause
    seg = a.facts.get("timeline_segments")
    assert int(seg["duration"].sum()) == a.window.duration_ns
    assert (seg["end"] > seg["start"]).all()
    assert set(seg.loc[seg["detail"] == PER_OP_DETAIL, "cause"].astype(str)) == {"launch_bound"}
    assert set(seg.loc[seg["detail"] == PER_OP_SYNC_DETAIL, "cause"].astype(str)) == {"host_sync"}


def test_bare_anomaly_mode_has_no_slowed_range_and_stays_launch_bound():
    # no NVTX: forward and backward in one window phase at 28.9 us per op, nothing slowed, nothing joins
    name = f"{RUN5}/detect_anomaly_bare"
    assert not findings(name, "per-op-host-overhead")
    assert per_op_time(name) == 0
    assert 490e6 < findings(name, "launch-bound")[""].impact_ns < 505e6


@pytest.mark.parametrize("name", [
    f"{RUN5}/detect_anomaly_fixed", "heldout/h100_run5/detect_anomaly_fixed.pt.trace.json.gz",
    "round3/decode_eager", "tiny_kernels", "round3/optimizer_loop", "heldout/h100/per_sample_loop",
    f"{RUN5}/detect_anomaly_bare_fixed",
    # synchronizing per layer or module, no range slowed by per-op Python: host-sync-in-loop keeps them
    "heldout/h100_run4/layer_timing_sync", "heldout/h100_run3/tensor_from_list", "heldout/h100_run2/mask_index_sync_loop",
    "host_sync",
])
def test_twin_and_healthy_eager_loops_are_silent(name):
    assert not findings(name, "per-op-host-overhead")
    assert per_op_time(name) == 0


@pytest.mark.parametrize("name", ["heldout/h100_run4/layer_timing_sync", "heldout/h100_run3/tensor_from_list"])
def test_per_layer_synchronizations_stay_host_sync_in_loop(name):
    # a device synchronize around each module (0.73 per op), two readbacks a layer (0.22): over the ratio,
    # but no range of the step is slowed by per-op Python work, so nothing joins
    found = [f for f in analysis(name).findings if f.rule == "host-sync-in-loop"]
    assert found and found[0].impact_ns > 100e6


def test_launch_bound_loops_keep_their_launch_bound_finding():
    # the batch-1 eager decode loop: launch-bound at the usual cost per op, its finding unchanged
    lb = findings("round3/decode_eager", "launch-bound")
    assert "step_N/token_N" in lb
