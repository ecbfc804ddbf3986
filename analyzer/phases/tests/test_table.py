"""Phase tables on hand-built trace models: the arithmetic and the selection rules.

Expected numbers are worked out by hand from :func:`synth.training_trace`'s docstring.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analyzer.errors import ParameterError
from analyzer.phases import (
    ModelConfig,
    PhaseIndex,
    RangePattern,
    attention_split,
    category_mix,
    phase_table,
    step_split,
    top_kernels,
)
from analyzer.facts.phase_index import ancestor_pairs, union_length
from analyzer.facts.phase_table import PHASE_COLUMNS
from analyzer.phases.tests.synth import make_trace, training_trace


@pytest.fixture
def trace():
    return training_trace()


def row(frame: pd.DataFrame, name: str) -> pd.Series:
    hit = frame[frame["name"] == name]
    assert len(hit) == 1, f"{name}: {len(hit)} rows"
    return hit.iloc[0]


def test_columns_are_the_documented_ones(trace):
    assert list(phase_table(trace).columns) == list(PHASE_COLUMNS)


def test_forward_gpu_time_includes_nested_ranges(trace):
    fwd = row(phase_table(trace), "forward")
    # per step: gemm 30 in forward + softmax 10 in computing_softmax + gemm 15 in final_matmul
    assert fwd["count"] == 2  # warmup/forward is excluded
    assert fwd["cpu_total_ns"] == 200
    assert fwd["gpu_ns"] == 2 * 55
    assert fwd["kernel_count"] == 6
    assert fwd["busy_ns"] == 2 * 55  # [15,45) [45,55) [60,75): touching, not overlapping
    assert fwd["busy_share"] == pytest.approx(110 / 200)
    assert fwd["paths"] == 2


def test_backward_counts_kernels_from_the_autograd_thread(trace):
    bwd = row(phase_table(trace), "backward")
    assert bwd["gpu_ns"] == 200 and bwd["kernel_count"] == 2
    assert bwd["top_kernel"] == "ampere_sgemm_bwd"
    assert bwd["top_kernel_count"] == 2 and bwd["top_kernel_mean_ns"] == 100


def test_busy_merges_overlapping_ops(trace):
    opt = row(phase_table(trace), "optimizer_step")
    assert opt["gpu_ns"] == 80  # 2 x (20 + 20)
    assert opt["busy_ns"] == 70  # per step [335,355) U [350,370) = 35
    assert opt["busy_share"] == pytest.approx(70 / 100)
    assert opt["gpu_span_ns"] == 2 * (370 - 335)


def test_step_is_inclusive_of_memset_and_phases(trace):
    step = row(phase_table(trace), "step_0")
    assert step["gpu_ns"] == 30 + 10 + 15 + 100 + 40 + 5
    assert step["kernel_ns"] == 195 and step["op_count"] == 7


def test_warmup_and_nested_ranges_excluded_by_default(trace):
    names = set(phase_table(trace)["name"])
    assert "warmup" not in names
    everything = phase_table(trace, exclude=())
    assert row(everything, "warmup")["gpu_ns"] == 30
    fwd = row(everything, "forward")
    assert fwd["count"] == 3 and fwd["gpu_ns"] == 110 + 30
    assert fwd["cpu_std_ns"] == pytest.approx(np.std([90, 100, 100], ddof=1))


def test_percentiles_interpolate():
    ranges = [(i, "r", 100 * i, 100 * i + d, -1, 1) for i, d in enumerate([10, 20, 30, 40])]
    out = row(phase_table(make_trace(ranges, [])), "r")
    assert out["cpu_p50_ns"] == 25.0
    assert out["cpu_p95_ns"] == pytest.approx(np.percentile([10, 20, 30, 40], 95))
    assert out["gpu_ns"] == 0 and out["busy_share"] == 0 and out["top_kernel"] == ""


def test_include_glob_regex_and_path(trace):
    assert set(phase_table(trace, include="step_*")["name"]) == {"step_0", "step_1"}
    assert set(phase_table(trace, include="re:^comp")["name"]) == {"computing_softmax"}
    by_path = phase_table(trace, include="step_1/*", by="path")
    assert set(by_path["path"]) == {"step_1/forward", "step_1/backward", "step_1/optimizer_step",
                                    "step_1/forward/computing_softmax", "step_1/forward/final_matmul"}
    assert (by_path["count"] == 1).all()


def test_exclude_custom_pattern(trace):
    names = set(phase_table(trace, exclude=("forward",))["name"])
    assert "forward" not in names and "computing_softmax" not in names and "warmup" in names


def test_bad_patterns_raise_parameter_error(trace):
    with pytest.raises(ParameterError, match="invalid NVTX range regex"):
        phase_table(trace, include="re:(")
    with pytest.raises(ParameterError):
        RangePattern.parse("  ")
    with pytest.raises(ParameterError, match="by must be"):
        phase_table(trace, by="thread")  # type: ignore[arg-type]


def test_window_keeps_intersecting_instances(trace):
    out = phase_table(trace, window=(1000, 1500))
    assert row(out, "forward")["count"] == 1
    assert "step_1" not in set(out["name"])


def test_empty_trace_gives_typed_empty_frame():
    out = phase_table(make_trace([], []))
    assert out.empty and list(out.columns) == list(PHASE_COLUMNS)
    assert out["cpu_total_ns"].dtype == "int64"
    assert step_split(make_trace([], [])).empty


def test_marks_are_not_rows():
    t = make_trace([(0, "step_0", 0, 100, -1, 1), (1, "oom?", 50, 50, 0, 1, "mark")], [])
    assert list(phase_table(t)["name"]) == ["step_0"]


def test_union_length():
    frame = pd.DataFrame({"k": [1, 1, 1, 2, 2], "start": [0, 5, 20, 0, 0], "end": [10, 8, 30, 5, 5]})
    assert union_length(frame, "k").to_dict() == {1: 20, 2: 5}


def test_ancestor_pairs_and_cycle():
    t = training_trace(steps=1)
    pairs = ancestor_pairs(t.nvtx)
    soft = int(t.nvtx.loc[t.nvtx["text"] == "computing_softmax", "range_id"].iloc[0])
    chain = pairs[pairs["range_id"] == soft].sort_values("distance")["ancestor_id"].tolist()
    assert [t.nvtx.loc[i, "text"] for i in chain] == ["computing_softmax", "forward", "step_0"]
    bad = t.nvtx.copy()
    bad.loc[bad.index[0], "parent_id"] = int(bad.index[1])
    bad.loc[bad.index[1], "parent_id"] = int(bad.index[0])
    with pytest.raises(ValueError, match="cycle"):
        ancestor_pairs(bad)


def test_step_split(trace):
    s = step_split(trace)
    assert list(s["step"]) == ["step_0", "step_1"] and list(s["step_index"]) == [0, 1]
    first = s.iloc[0]
    assert first["cpu_ns"] == 400 and first["gpu_ns"] == 200
    assert (first["forward_cpu_ns"], first["forward_gpu_ns"]) == (100, 55)
    assert (first["backward_cpu_ns"], first["backward_gpu_ns"]) == (200, 100)
    assert (first["optimizer_step_cpu_ns"], first["optimizer_step_gpu_ns"]) == (50, 40)
    assert first["residual_cpu_ns"] == 400 - 350
    assert first["residual_gpu_ns"] == 5 and first["residual_kernel_ns"] == 0


def test_step_split_counts_nested_same_name_once():
    ranges = [(0, "step_0", 0, 100, -1, 1), (1, "forward", 0, 50, 0, 1), (2, "forward", 10, 40, 1, 1)]
    ops = [("kernel", "k", 11, 21, 2, 1)]
    s = step_split(make_trace(ranges, ops)).iloc[0]
    assert s["forward_count"] == 1 and s["forward_cpu_ns"] == 50 and s["forward_gpu_ns"] == 10


def test_category_mix(trace):
    # kernel order in synth: warmup gemm, then per step 6 kernels, then the stray one
    cats = pd.Series(["gemm"] + ["gemm", "softmax", "gemm", "gemm", "optim", "optim"] * 2 + ["gemm"])
    mix = category_mix(trace, ["forward", "optimizer_step"], categories=cats)
    fwd = mix[mix["phase"] == "forward"].set_index("category")
    assert fwd.loc["gemm", "total_ns"] == 2 * 45 and fwd.loc["softmax", "count"] == 2
    assert fwd["share"].sum() == pytest.approx(1.0)
    assert fwd.loc["softmax", "share"] == pytest.approx(20 / 110)
    opt = mix[mix["phase"] == "optimizer_step"]
    assert opt["category"].tolist() == ["optim"] and opt["total_ns"].iloc[0] == 80
    everything = category_mix(trace, None, categories=cats)
    assert everything["total_ns"].sum() == trace.kernels["duration"].sum() - 30  # warmup's kernel


def test_attention_split_times_and_flops(trace):
    cfg = ModelConfig(d_model=768, heads=12, context=128, batch=4, source="test")
    a = attention_split(trace, cfg).iloc[0]
    assert a["calls"] == 2
    assert a["softmax_ns"] == 20 and a["matmul_ns"] == 30 and a["other_ns"] == 0
    assert a["time_ratio"] == pytest.approx(20 / 30)
    assert a["d_head"] == 64 and a["flop_ratio"] == pytest.approx(5 / (4 * 64))
    assert a["softmax_flops"] == 5 * 4 * 12 * 128 * 128 * 2
    assert a["matmul_flops"] == 2 * 2 * 4 * 12 * 128 * 128 * 64 * 2
    assert a["flops_note"].startswith("estimate: B=4, H=12, T=128, d_head=64, from test")
    assert "convention: softmax = 5 FLOPs per element" in a["flops_note"]


def test_attention_split_without_config_says_why(trace):
    a = attention_split(trace).iloc[0]
    assert math.isnan(a["flop_ratio"]) and "no model config" in a["flops_note"]
    half = attention_split(trace, ModelConfig(d_model=1024, heads=16, source="x")).iloc[0]
    assert half["flop_ratio"] == pytest.approx(5 / 256) and math.isnan(half["softmax_flops"])
    assert "absolute FLOPs need batch, context" in half["flops_note"]


def test_top_kernels_scope(trace):
    whole = top_kernels(trace, exclude=())
    assert whole["count"].sum() == len(trace.kernels)
    measured = top_kernels(trace)
    assert measured["total_ns"].sum() == trace.kernels["duration"].sum() - 30
    assert measured.iloc[0]["name"] == "ampere_sgemm_bwd"


def test_index_reuse_must_match_trace(trace):
    idx = PhaseIndex.build(trace)
    assert phase_table(trace, index=idx).equals(phase_table(trace))
    with pytest.raises(ValueError):
        phase_table(training_trace(), index=idx)


def test_phases_fact_reads_pipeline_options(trace):
    from analyzer.analysis import Window
    from analyzer.facts import FactStore

    window = Window(0, 10_000, "full", "everything")
    plain = FactStore(trace, window).get("phases")
    assert "warmup" not in set(plain["name"])
    kept = FactStore(trace, window, {"exclude_ranges": (), "only_ranges": "warm*"}).get("phases")
    assert list(kept["name"]) == ["warmup"]
    mine = FactStore(trace, window, {"phase_exclude": (), "exclude_ranges": ("x",)}).get("phases")
    assert "warmup" in set(mine["name"])
    narrow = FactStore(trace, Window(1900, 2500, "user", "step_1")).get("phases")
    assert "step_0" not in set(narrow["name"]) and "step_1" in set(narrow["name"])


# -- GPU span, waiting, which number measures a range ---------------------------------------------
def async_trace():
    """One stream, one step_0 [0, 1000) that synchronizes at its end (cudaDeviceSynchronize [900, 960)).
    forward [10, 110) launches gemm A at 20 (inside attention [20, 40)), which runs [30, 330), and
    gemm B at 60, which runs [330, 630): the range timed the launches. loss [120, 700) launches ce at
    125, queued behind forward's work to [630, 680), waits for it in cudaStreamSynchronize [130, 680),
    then launches ce2 at 690, run [695, 705), which it does not wait for. optimizer_step [710, 800)
    is launch-bound (adam launched at 720 runs [725, 735)). `log` [850, 870) launches nothing and
    records a (non-blocking) cudaStreamWaitEvent."""
    ranges = [(0, "step_0", 0, 1000, -1, 1), (1, "forward", 10, 110, 0, 1), (2, "attention", 20, 40, 1, 1),
              (3, "loss", 120, 700, 0, 1), (4, "optimizer_step", 710, 800, 0, 1), (5, "log", 850, 870, 0, 1)]
    ops = [("kernel", "gemm", 30, 330, 2, 1, 20), ("kernel", "gemm", 330, 630, 1, 1, 60),
           ("kernel", "ce", 630, 680, 3, 1, 125), ("kernel", "ce", 695, 705, 3, 1, 690),
           ("kernel", "adam", 725, 735, 4, 1, 720)]
    api = [("cudaStreamSynchronize_v3020", 130, 680, 3, 1), ("cudaDeviceSynchronize", 900, 960, 0, 1),
           ("cudaStreamWaitEvent", 860, 861, 5, 1)]
    return make_trace(ranges, ops, api=api)


def test_gpu_span_waited_and_measure():
    t = phase_table(async_trace(), exclude=())
    fwd, att, loss = row(t, "forward"), row(t, "attention"), row(t, "loss")
    opt, step, log = row(t, "optimizer_step"), row(t, "step_0"), row(t, "log")
    # forward timed its launches: its work ends at 630, 520 after the range
    assert fwd["gpu_span_ns"] == 600 and fwd["gpu_ns"] == 600 and fwd["tail_ns"] == 630 - 110
    assert fwd["waited"] == "no" and fwd["measure"] == "gpu" and fwd["phase_ns"] == 630 - 10
    assert fwd["async_count"] == 1 and fwd["waited_count"] == 0 and fwd["gpu_instances"] == 1
    assert fwd["queued_ns"] == 0 and fwd["untimed_ns"] == 620 - 100
    assert att["gpu_span_ns"] == 300 and att["measure"] == "gpu" and att["phase_mean_ns"] == 330 - 20
    # loss waited behind forward's work and ended before its own last kernel: a sync in the middle of
    # a range does not make it wait for what it launches afterwards. A synchronized timer would see its
    # 5 ns lead to the first launch, then its work: it begins 5 before forward's work ended at 630
    assert loss["sync_count"] == 1 and loss["waited"] == "no" and loss["tail_ns"] == 5
    assert loss["queued_ns"] == 625 - 120 and loss["phase_ns"] == 705 - 625 and loss["measure"] == "gpu"
    assert loss["untimed_ns"] == 80 - 580
    # launch-bound: the GPU finished before the range did; its wall time measures it
    assert opt["waited"] == "yes" and opt["measure"] == "cpu_wall" and opt["phase_ns"] == 90
    assert opt["tail_ns"] == 0 and opt["gpu_span_ns"] == 10 and opt["queued_ns"] == 0
    # the step synchronized at its end: the syncs count, stream-wait-event does not (non-blocking)
    assert step["sync_count"] == 2 and step["waited"] == "yes" and step["measure"] == "cpu_wall"
    assert step["gpu_span_ns"] == 735 - 30 and step["phase_ns"] == 1000
    assert log["gpu_instances"] == 0 and log["waited"] == "" and log["measure"] == "cpu_wall"
    assert log["sync_count"] == 0 and log["phase_ns"] == 20


def test_waited_and_measure_aggregate_over_instances():
    ranges = [(0, "fwd", 0, 100, -1, 1), (1, "fwd", 1000, 1100, -1, 1), (2, "fwd", 2000, 2100, -1, 1)]
    ops = [("kernel", "k", 50, 300, 0, 1), ("kernel", "k", 1010, 1050, 1, 1)]  # third launches nothing
    out = row(phase_table(make_trace(ranges, ops)), "fwd")
    assert out["gpu_instances"] == 2 and out["waited_count"] == 1 and out["waited"] == "1 of 2"
    assert out["async_count"] == 1 and out["measure"] == "mixed"
    assert out["phase_ns"] == 300 + 100 + 100 and out["gpu_span_mean_ns"] == pytest.approx((250 + 40) / 3)


def test_nvtx_facts_and_phases_share_one_index(monkeypatch):
    from analyzer.analysis import Window
    from analyzer.facts import FactStore

    calls = []
    real_build = PhaseIndex.build.__func__

    def counting(cls, trace, **kw):
        calls.append(1)
        return real_build(cls, trace, **kw)

    monkeypatch.setattr(PhaseIndex, "build", classmethod(counting))
    store = FactStore(async_trace(), Window(0, 1000, "user", "all"), {"phase_exclude": ()})
    inst = store.get("nvtx_instances").set_index("name")
    proj = store.get("nvtx_projection").set_index("name")
    phases = store.get("phases").set_index("name")
    assert len(calls) == 1
    for col in ("gpu_ns", "gpu_span_ns", "tail_ns", "queued_ns", "sync_count", "waited_count", "async_count",
                "phase_ns", "measure", "waited"):
        assert (proj[col] == phases.loc[proj.index, col]).all(), col
    assert inst.loc["forward", "gpu_start"] == 30 and inst.loc["forward", "gpu_end"] == 630
    assert not inst.loc["forward", "waited"] and inst.loc["log", "waited"]
    assert inst.loc["loss", "gpu_ns_exclusive"] == 60 and inst.loc["forward", "gpu_ns_exclusive"] == 300
    assert inst.loc["loss", "queued_ns"] == 505 and inst.loc["loss", "phase_ns"] == 80
