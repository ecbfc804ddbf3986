"""Loops found from the launches (:mod:`analyzer.facts.launch_loops`): the breakdown's "where" on a trace
without NVTX ranges, on the committed recordings of a per-parameter optimizer and its fused twin."""
from __future__ import annotations

import re

import numpy as np

from analyzer.facts import FactStore, load_all
from analyzer.facts.launch_loops import LOOP_PREFIX, TENSOR_LOOP_PREFIX, loop_ranges, op_name, trace_loop_ranges
from analyzer.loading import load_trace
from analyzer.testing import real_trace, trace_file
from analyzer.window import choose_window

load_all()


def _loops(name: str):  # type: ignore[no-untyped-def]
    return trace_loop_ranges(load_trace(real_trace(name)))


def test_per_parameter_adam_is_a_per_tensor_loop_the_fused_twin_does_not_run():
    # optimizer_loop --bare (nsys, no NVTX): Adam(foreach=False) over 202 parameter tensors launches
    # Adam's 7 elementwise kernels per tensor; forward (4 kernels a layer) and backward (7, on the
    # autograd thread) loop over 50 layers; the fused twin runs the same forward and backward
    loops = _loops("round3/optimizer_loop_bare")
    twin = _loops("round3/optimizer_loop_bare_fixed")
    adam = loops.loc[loops["path"].str.startswith(TENSOR_LOOP_PREFIX)]
    assert set(adam["path"]) == {"(per-tensor loop: lerp_scalar, Mul, addcmul, sqrt, ...)"}
    assert (adam["period"] == 7).all() and adam["turns"].median() == 202
    assert adam["tid"].nunique() == 1 and len(adam) >= 10  # once a step, on the main thread
    assert not twin["path"].str.startswith(TENSOR_LOOP_PREFIX).any()
    layers = {p for p, n in zip(loops["path"], loops["period"]) if p.startswith(LOOP_PREFIX) and n > 1}
    assert layers == {p for p, n in zip(twin["path"], twin["period"]) if p.startswith(LOOP_PREFIX) and n > 1}
    # a loop of one kernel says what each turn launches, the same name in every step
    ones = set(loops.loc[loops["period"] == 1, "path"])
    assert ones and all(re.fullmatch(r"\((?:loop: one \w+ per turn|per-tensor loop: one \w+ per tensor)\)", p)
                        for p in ones), ones
    assert len(layers) == 2 and loops.loc[loops["path"].isin(layers), "tid"].nunique() == 2
    # named by the loop body's kernels, a library GEMM by its category
    assert "(loop: gemm, gemm, layer_norm, Gelu)" in layers
    # each stretch is a loop's launches, back to back: stretches of one thread never overlap
    for _, g in loops.groupby("tid"):
        s, e = g["start"].to_numpy(), g["end"].to_numpy()
        assert (s[1:] >= e[:-1]).all()


def test_the_loops_are_the_breakdowns_ranges_and_the_adam_loop_holds_most_launch_bound_time():
    t = load_trace(real_trace("round3/optimizer_loop_bare"))
    w = choose_window(t)
    from analyzer.facts.tests.test_breakdown import check_partition

    st = FactStore(t, w, {})
    check_partition(st)
    b = st.get("timeline_breakdown")
    lb = b.loc[(b["scope"] == "range") & (b["cause"] == "launch_bound")].groupby("key")["duration_ns"].sum()
    assert lb.idxmax().startswith(TENSOR_LOOP_PREFIX)
    # the loop's launch-bound time is what the fused optimizer saved: 53.8% of the window by the programs'
    # own step times (47.46 -> 21.91 ms a step); the whole window's launch-bound time is 88%
    assert 0.75 * 0.538 < lb.max() / w.duration_ns < 1.25 * 0.538
    total = b.loc[(b["scope"] == "window") & (b["cause"] == "launch_bound"), "duration_ns"].sum()
    assert total / w.duration_ns > 0.8


def test_traces_with_ranges_keep_them():
    # the NVTX recording of the same program names its ranges itself: no loop stands for one
    assert _loops("round3/optimizer_loop").empty
    b = FactStore(load_trace(real_trace("round3/optimizer_loop")),
                  choose_window(load_trace(real_trace("round3/optimizer_loop"))), {}).get("timeline_breakdown")
    assert not b["key"].astype(str).str.startswith("(").any()


def test_launches_far_apart_are_no_loop():
    # host_sync --shape balanced --bare: the micro-step's kernels repeat, but each micro-step waits on
    # a synchronization (more than 1 ms between two launches): no loop, one whole-window finding
    assert _loops("round3/host_sync_balanced_bare").empty


def test_op_names_of_the_recorded_kernels():
    t = load_trace(real_trace("round3/optimizer_loop_bare"))
    names = {op_name(str(n)) for n in t.kernels["name"].astype(str).unique()}
    assert {"lerp_scalar", "addcmul", "sqrt", "addcdiv", "Mul", "add", "Gelu", "GeluBackward"} <= names
    assert all(len(n) <= 24 and not any(ch.isdigit() for ch in n) for n in names)


def test_no_launch_table_no_loops():
    t = load_trace(real_trace("round3/optimizer_loop_bare"))
    k = t.kernels.drop(columns=["api_start"])
    assert loop_ranges(k).empty and loop_ranges(t.kernels.iloc[:5]).empty
    assert np.array_equal(loop_ranges(t.kernels)["range_id"].to_numpy(), np.arange(len(loop_ranges(t.kernels))))


def _launch_bound_by_range(t, w):  # type: ignore[no-untyped-def]
    b = FactStore(t, w, {}).get("timeline_breakdown")
    rows = b.loc[(b["scope"] == "range") & (b["cause"] == "launch_bound")]
    return rows.groupby("phase")["duration_ns"].sum().to_dict(), rows.groupby("key")["duration_ns"].sum().to_dict()


def _with_steps(t, w, keep, inner_step: bool = False):  # type: ignore[no-untyped-def]
    """``t`` keeping the nvtx rows ``keep`` marks, the window's step ranges and the ranges enclosing them
    (``inner_step``: also a step's one child range not already kept, the ``step_N`` a ``ProfilerStep#N`` wraps)."""
    import dataclasses

    from analyzer.facts.nvtx_ranges import parent_positions

    nv = t.nvtx
    parent = parent_positions(nv)
    for i in np.flatnonzero(nv["range_id"].isin(w.steps.range_ids)).tolist():
        if inner_step:
            kids = np.flatnonzero((parent == i) & ~keep)
            if len(kids) == 1:
                keep[kids[0]] = True
        while i >= 0 and not keep[i]:
            keep[i] = True
            i = parent[i]
    return dataclasses.replace(t, nvtx=nv.loc[keep])


def _steps_only(t, w):  # type: ignore[no-untyped-def]
    """``t`` with only the window's step ranges (and the ranges enclosing them) kept: a program that marks
    ``step_N`` and nothing inside it."""
    kept = _with_steps(t, w, np.zeros(len(t.nvtx), dtype=bool))
    assert 0 < len(kept.nvtx) < len(t.nvtx)
    return kept


def test_without_its_ranges_a_recording_is_split_where_its_ranges_were():
    # the NVTX recordings with their ranges dropped (the same window), or only their inner ranges (step_N
    # kept, as a profiler schedule marks): each loop's launch-bound time is within 10% of what the
    # program's own range held (measured, all dropped / steps kept: optimizer 182.4 / 182.4 of 195.4 ms,
    # backward (on autograd's thread, named under the main thread's step) 73.7 / 73.7 of 80.1, forward
    # 38.1 / 38.1 of 40.0; tiny_kernels' update loop 111.1 / 110.5 of 110.5)
    import dataclasses

    for name, expect in (("round3/optimizer_loop", {
            "step_N/optimizer": "(per-tensor loop: lerp_scalar, Mul, addcmul, sqrt, ...)",
            "step_N/forward": "(loop: gemm, gemm, layer_norm, Gelu)",
            "step_N/backward": "(loop: GeluBackward, layer_norm_grad_input, GammaBetaBackward, gemm, ...)"}),
            ("tiny_kernels", {"step_N/update": "(per-tensor loop: Mul, add)"})):
        t = load_trace(real_trace(name))
        w = choose_window(t)
        by_phase, _ = _launch_bound_by_range(t, w)
        assert not any("loop: " in k for k in by_phase), by_phase  # ranges that cover the launches: no loop
        _, by_loop = _launch_bound_by_range(dataclasses.replace(t, nvtx=t.nvtx.iloc[:0]), w)
        _, in_step = _launch_bound_by_range(_steps_only(t, w), w)
        for phase, loop in expect.items():
            # backward runs on autograd's thread: the handoffs between it and the main thread count as
            # dispatch inside the range (breakdown_handoff), but without the ranges they lie between two
            # threads' launches, outside any one thread's loop, so the loop holds 84% of that range
            # (73.7 of 87.5 ms on round3/optimizer_loop); the other loops stay within 10%
            bound = 0.20 if phase.endswith("backward") else 0.10
            assert abs(by_loop[loop] / by_phase[phase] - 1) < bound, (name, phase, by_loop, by_phase)
            assert abs(in_step["step_N/" + loop] / by_phase[phase] - 1) < bound, (name, phase, in_step, by_phase)
        # what no loop holds is small: the loops are where the launch-bound time is
        assert by_loop.get("", 0) < 0.1 * sum(by_loop.values())
        assert in_step.get("step_N", 0) < 0.1 * sum(in_step.values())


def test_a_program_marking_only_its_steps_gets_the_optimizer_loop_named_with_its_fix():
    # optimizer_loop's NVTX recording with only step_N kept: launch-bound is stated per loop inside the step,
    # the per-parameter Adam loop first, with the foreach / fused optimizer as its fix
    from analyzer.trace_analysis import AnalysisOptions, finish, load_rules, prepare

    t = load_trace(real_trace("round3/optimizer_loop"))
    options = AnalysisOptions()
    found = finish(prepare(_steps_only(t, choose_window(t)), options), load_rules(options)).findings
    lb = sorted((f for f in found if f.rule == "launch-bound"), key=lambda f: -(f.impact_ns or 0))
    assert lb[0].scope.nvtx_path == "step_N/(per-tensor loop: lerp_scalar, Mul, addcmul, sqrt, ...)", \
        [(f.scope.nvtx_path, f.impact_ns) for f in lb]
    assert "a fused or foreach optimizer" in lb[0].message, lb[0].message  # the rule read it as an optimizer


def _steps_and_operators(t, w):  # type: ignore[no-untyped-def]
    """``t`` with only the window's steps (``ProfilerStep#N`` and the ``step_N`` it wraps) and the
    framework's operator ranges kept: a torch.profiler recording without ``record_function`` ranges."""
    from analyzer.facts.nvtx import operator_ranges

    return _with_steps(t, w, operator_ranges(t.nvtx).copy(), inner_step=True)


def test_torch_profiler_operators_are_the_loops_elements_not_places():
    # torch.profiler's aten:: ranges cover every launch: the loop is searched under the program's own
    # ranges and named by the operators the loop body calls (each call once), an autograd node by its node
    t = load_trace(trace_file("h100/optimizer_loop_bare.pt.trace.json.gz"))
    loops = trace_loop_ranges(t, None, choose_window(t))
    paths = set(loops["path"])
    assert "(loop: aten::linear, aten::layer_norm, aten::gelu)" in paths, paths
    assert "(loop: GeluBackward0, NativeLayerNormBackward0, AddmmBackward0)" in paths, paths
    # the optimizer's per-tensor loop runs under PyTorch's Optimizer.step#Adam.step annotation: a place
    assert not any(p.startswith(TENSOR_LOOP_PREFIX) for p in paths), paths


def test_torch_profiler_without_its_ranges_is_split_where_its_ranges_were():
    # the torch.profiler recordings with their record_function ranges dropped (ProfilerStep#N, step_N and
    # the aten:: ranges kept): each loop holds 91-99% of the launch-bound time the program's range held
    # (measured: h100 optimizer_loop optimizer 88.6 of 94.0 ms, backward 46.0 of 50.0, forward 19.9 of
    # 21.7; tiny_kernels' update 165.2 of 167.7)
    for name, expect in (("h100/optimizer_loop.pt.trace.json.gz", {
            "optimizer": "(per-tensor loop: aten::lerp_, aten::mul_, aten::addcmul_, aten::sqrt, ...)",
            "forward": "(loop: aten::linear, aten::layer_norm, aten::gelu)",
            "backward": "(loop: GeluBackward0, NativeLayerNormBackward0, AddmmBackward0)"}),
            ("kineto/tiny_kernels.pt.trace.json.xz", {"update": "(per-tensor loop: aten::mul_, aten::add_)"})):
        t = load_trace(trace_file(name))
        w = choose_window(t)
        by_phase, _ = _launch_bound_by_range(t, w)
        assert not any("loop: " in k for k in by_phase), by_phase
        _, in_step = _launch_bound_by_range(_steps_and_operators(t, w), w)
        for phase, loop in expect.items():
            got = in_step["ProfilerStep#N/step_N/" + loop]
            # backward: the handoffs to autograd's thread are dispatch in the range but in no one thread's
            # loop (46.0 of 53.1 ms, 0.87, since breakdown_handoff); the others hold over 90%
            low = 0.8 if phase == "backward" else 0.9
            assert low < got / by_phase["ProfilerStep#N/step_N/" + phase] <= 1.0, (name, phase, in_step, by_phase)


def test_a_step_wrapping_the_programs_step_is_read_through():
    # decode at batch 1, eager: ProfilerStep#N wraps the program's step_N, which marks nothing inside:
    # the layer loop is found under step_N (88.1% of the window launch-bound in it, of 88.3% in step_N)
    t = load_trace(trace_file("kineto/decode_b1_eager_h200.pt.trace.json.xz"))
    w = choose_window(t)
    by_phase, _ = _launch_bound_by_range(t, w)
    top = max(by_phase, key=lambda k: by_phase[k])
    assert top == "ProfilerStep#N/step_N/(loop: aten::layer_norm, aten::linear, aten::gelu, aten::linear, ...)", by_phase
    assert by_phase[top] > 0.8 * w.duration_ns


def test_torch_compile_regions_stay_places():
    # compile_graph_break --bare under torch.profiler: the eager kernels between the replays run inside
    # 'Torch-Compiled Region: 1/0' ranges, the compiled code's: no loop is searched there (the finding stays
    # the window's, eager work between CUDA graph replays, fixed by removing the graph breaks)
    t = load_trace(trace_file("round3/compile_graph_break_bare.pt.trace.json.gz"))
    assert trace_loop_ranges(t, None, choose_window(t)).empty


def test_operator_ranges_are_worked_out_once_per_range_table():
    # compile_graph_break --bare under torch.profiler: its 13,920 ranges are all framework events, 480 of
    # them torch.compile's regions, which stay places. The window chooser, the loop search and the
    # breakdown read one range table and one read-only mask of it; a copy of the table has its own
    from analyzer.facts.nvtx import compiled_regions, operator_ranges
    from analyzer.facts.nvtx_ranges import ranges_only
    from analyzer.facts.launch_loops import places_and_operators

    t = load_trace(trace_file("round3/compile_graph_break_bare.pt.trace.json.gz"))
    choose_window(t)
    nv = ranges_only(t.nvtx)
    assert ranges_only(t.nvtx) is nv and len(nv) == 13920
    op = operator_ranges(nv)
    assert operator_ranges(nv) is op and not op.flags.writeable and int(op.sum()) == 13920
    assert int(compiled_regions(nv).sum()) == 480
    places, ops = places_and_operators(nv)
    assert (len(places), len(ops)) == (480, 13440) and places_and_operators(nv)[1] is ops
    copy = nv.copy()
    assert operator_ranges(copy) is not op and np.array_equal(operator_ranges(copy), op)
