"""launch-bound (LNC003) is stated per NVTX range at the level under the step, on the real round-3 pairs:
each range's finding holds that range's launch-bound time of the timeline breakdown, the verdict adds
them once, and a twin that fixes one range is silent on that range's finding only."""
from __future__ import annotations

import functools

import pytest

from analyzer.impacts import report_order, union_adds
from analyzer.pipeline import analyze_trace
from analyzer.testing import DATA_DIR, real_trace


@functools.cache
def analysis(name: str):  # type: ignore[no-untyped-def]
    path = DATA_DIR / name
    return analyze_trace(path if path.suffix != ".xz" else real_trace(name.removesuffix(".sqlite.xz")))


def launch_bound(name: str) -> dict[str, object]:
    return {f.scope.nvtx_path or "": f for f in analysis(name).findings if f.rule == "launch-bound"}


def range_launch_bound_ns(name: str) -> dict[str, int]:
    bd = analysis(name).facts.get("timeline_breakdown")
    rows = bd[(bd["scope"] == "range") & (bd["cause"] == "launch_bound")]
    return {str(k): int(v) for k, v in rows.groupby("phase")["duration_ns"].sum().items()}


def test_one_finding_per_range_under_the_step_each_with_its_own_time():
    name = "round3/optimizer_loop.sqlite.xz"
    found = launch_bound(name)
    assert set(found) == {"step_N/optimizer", "step_N/backward", "step_N/forward"}
    per_range = range_launch_bound_ns(name)
    for path, f in found.items():
        assert f.impact_ns == per_range[path]
        assert f.scope.kind == "device_range" and f.scope.device == 0
    # the biggest is the optimizer's per-parameter loop, and it leads the verdict
    top = max(found.values(), key=lambda f: f.impact_ns)
    assert top.scope.nvtx_path == "step_N/optimizer"
    assert "`step_N/optimizer`" in top.headline
    assert "fused" in top.message and "foreach" in top.message
    assert "fused" not in found["step_N/forward"].message  # not an optimizer range


def test_the_fused_twin_is_silent_on_the_optimizer_range_only():
    twin = launch_bound("round3/optimizer_loop_fixed.sqlite.xz")
    assert "step_N/optimizer" not in twin  # what the fix bought
    assert {"step_N/forward", "step_N/backward"} <= set(twin)  # still eager: other findings
    # the fused optimizer's few launches keep some Python between them: under 10% of the per-tensor loop's
    fused = range_launch_bound_ns("round3/optimizer_loop_fixed.sqlite.xz")["step_N/optimizer"]
    assert fused < 0.1 * range_launch_bound_ns("round3/optimizer_loop.sqlite.xz")["step_N/optimizer"]


def test_range_findings_never_overlap_in_the_verdict():
    """Disjoint ranges: each finding adds all of its impact to the union, whatever order."""
    a = analysis("round3/optimizer_loop.sqlite.xz")
    mine = [f for f in report_order(a.findings) if f.rule == "launch-bound"]
    assert union_adds(mine) == [f.impact_ns for f in mine]
    assert union_adds(mine[::-1]) == [f.impact_ns for f in mine[::-1]]


def test_a_profiler_step_wrapper_is_read_through():
    """torch.profiler's ProfilerStep#N holds only the program's step_N: the level under step_N counts."""
    found = launch_bound("round3/optimizer_loop.pt.trace.json.gz")
    assert "ProfilerStep#N/step_N/optimizer" in found
    assert max(found.values(), key=lambda f: f.impact_ns).scope.nvtx_path == "ProfilerStep#N/step_N/optimizer"


@pytest.mark.parametrize("name,eager", [("round3/compile_train_fixed.sqlite.xz", {"step_N/optimizer"}),
                                        ("round3/compile_train_fixed_node.sqlite.xz", {"step_N/optimizer"}),
                                        ("round3/compile_train_fixed.pt.trace.json.gz",
                                         {"ProfilerStep#N/step_N/optimizer"}),
                                        ("round3/decode_eager_fixed.sqlite.xz", set()),
                                        ("round3/decode_eager_fixed_node.sqlite.xz", set())])
def test_cuda_graph_twins_are_silent_in_every_range_the_graphs_cover(name, eager):
    """The graphs replace every launch in the ranges they cover; compile_train's twin graphs the compiled
    model only: its fused AdamW step stays eager, launched from Python after the replay (0.3 ms of its
    1.84 ms step launch-bound: a true finding, the same range as the pathology's own optimizer finding).
    Its graphed ``backward`` keeps 1.7-3.1 ms of launch-bound time, most of it the replays' launches (the
    graph launch calls, longer under torch.profiler and node-level tracing, and the Python around them:
    ``graph_launch``), which launch-bound does not count; the eager launches left in the graphed ranges
    (the gradient seed, a few copies) stay under the rule's 2 ms."""
    assert set(launch_bound(name)) == eager
    per_range = range_launch_bound_ns(name)
    graphed = graphed_phases(name)
    assert graphed and not graphed & eager
    bd = analysis(name).facts.get("timeline_breakdown")
    rows = bd[(bd["scope"] == "range") & (bd["cause"] == "launch_bound") & bd["phase"].isin(graphed)]
    assert rows.loc[rows["graph_launch"] == 0, "duration_ns"].sum() < 2_000_000
    if name.startswith("round3/compile_train_fixed"):  # over min_impact (2 ms) in two of the three recordings
        assert max(per_range[p] for p in graphed) >= 1_500_000
        # the eager optimizer's finding says how much launch-bound time the replays' launches hold
        graph_ns = int(bd.loc[(bd["scope"] == "window") & (bd["graph_launch"] == 1), "duration_ns"].sum())
        assert graph_ns > 0
        (f,) = launch_bound(name).values()
        assert f"; {graph_ns / 1e6:.1f} ms launching graphs, not counted)" in f.message, f.message


@pytest.mark.parametrize("name", ["round3/compile_decode_fixed_node.sqlite.xz",
                                  "round3/compile_decode_bare_fixed.pt.trace.json.gz"])
def test_graph_launch_cost_under_a_tracer_is_no_launch_bound_finding(name):
    """compile_decode's reduce-overhead twin (one graph replay per token) recorded with nsys' node-level
    graph tracing and, bare (no NVTX), under torch.profiler: tracing each replay's kernels makes every graph
    launch slow, so the host holds the GPU back in launch calls for 61% (node-level, 68 ms) and 55% (51 ms)
    of the graphed range: the fix is in place, no launch-bound finding (host-bound-graph-loop states the
    time between replays); its pathology, compiled code launched one kernel at a time, keeps its finding."""
    bd = analysis(name).facts.get("timeline_breakdown")
    rng = bd[bd["scope"] == "range"]
    (phase,) = graphed_phases(name)  # the token range, or the whole window without NVTX
    held = int(rng.loc[(rng["phase"] == phase) & (rng["cause"] == "launch_bound"), "duration_ns"].sum())
    window = analysis(name).window.duration_ns
    assert held >= 0.4 * window  # what the rule would state were the range not graphed
    assert not launch_bound(name)
    assert "host-bound-graph-loop" in {f.rule for f in analysis(name).findings}
    pathology = name.replace("_fixed_node.", ".").replace("_fixed.", ".")
    assert launch_bound(pathology) and not graphed_phases(pathology)


def graphed_phases(name: str) -> set[str]:
    bd = analysis(name).facts.get("timeline_breakdown")
    return set(bd.loc[(bd["scope"] == "range") & (bd["graphed"] == 1), "phase"])


@pytest.mark.parametrize("name,prefix", [("round3/compile_train_fixed.sqlite.xz", ""),
                                         ("round3/compile_train_fixed_node.sqlite.xz", ""),
                                         ("round3/compile_train_fixed.pt.trace.json.gz", "ProfilerStep#N/")])
def test_graphed_share_is_the_kernel_time_graph_replays_ran(name, prefix):
    """One measure whether nsys traced whole graph executions (graph-level, the default), their nodes
    (``--cuda-graph-trace=node``) or torch.profiler recorded the replays' kernels: forward and backward are
    replayed, the fused AdamW step is eager. Checked against gpu_ops' own kernel time per range."""
    from analyzer.facts.breakdown_ranges import generic_keys

    a = analysis(name)
    bd = a.facts.get("timeline_breakdown")
    rng = bd[bd["scope"] == "range"]
    share = rng.groupby("phase")["graphed_share"].first()
    fwd, bwd, opt = (f"{prefix}step_N/{r}" for r in ("forward", "backward", "optimizer"))
    assert share[fwd] > 0.95 and share[bwd] > 0.95 and share[opt] == 0.0
    assert graphed_phases(name) == {fwd, bwd}
    assert (rng.loc[rng["graphed"] == 1, "compiled"] == 0).all()
    # the same ratio from the kernels themselves
    ops = a.facts.get("gpu_ops")
    w = a.window
    k = ops[(ops["op"] == "kernel") & (ops["start"] >= w.start_ns) & (ops["start"] < w.end_ns)]
    keys = generic_keys(k["nvtx_path"].astype(str).to_numpy(dtype=object))
    in_bwd = [key.startswith(bwd) for key in keys]
    kb = k[in_bwd]
    assert share[bwd] == pytest.approx(kb.loc[kb["in_graph"] != 0, "duration"].sum() / kb["duration"].sum())


@pytest.mark.parametrize("name", ["round3/compile_train.sqlite.xz", "round3/compile_train.pt.trace.json.gz",
                                  "round3/decode_eager.sqlite.xz", "round3/optimizer_loop.sqlite.xz"])
def test_eager_programs_have_no_graphed_range(name):
    bd = analysis(name).facts.get("timeline_breakdown")
    assert (bd["graphed_share"] == 0).all() and (bd["graphed"] == 0).all()


def test_the_phases_partition_the_window():
    a = analysis("round3/compile_train.sqlite.xz")
    bd = a.facts.get("timeline_breakdown")
    rng = bd[bd["scope"] == "range"]
    per_phase = rng.groupby(["device", "phase"])["duration_ns"].sum()
    assert (rng.groupby(["device", "phase"])["phase_ns"].first() == per_phase).all()
    assert int(per_phase.sum()) == a.window.duration_ns
    assert set(per_phase.index.get_level_values("phase")) <= {"", "step_N", "step_N/forward", "step_N/backward",
                                                              "step_N/optimizer"}


def compiled_phases(name: str) -> set[str]:
    bd = analysis(name).facts.get("timeline_breakdown")
    return set(bd.loc[(bd["scope"] == "range") & (bd["compiled"] == 1), "phase"])


@pytest.mark.parametrize("name,prefix", [("round3/compile_train.sqlite.xz", ""),
                                         ("round3/compile_train.pt.trace.json.gz", "ProfilerStep#N/")])
def test_torch_compiled_ranges_are_one_finding_whose_impact_is_their_sum(name, prefix):
    """reduce-overhead graphs every compiled region at once: forward and backward are one fix."""
    fwd, bwd, opt = (f"{prefix}step_N/{r}" for r in ("forward", "backward", "optimizer"))
    assert compiled_phases(name) == {fwd, bwd}  # the eager optimizer launches no Inductor kernel
    found = launch_bound(name)
    group = f"{bwd} + {fwd}"
    assert set(found) - {opt} == {group}  # no per-range finding of a compiled range beside it
    per_range = range_launch_bound_ns(name)
    f = found[group]
    assert f.impact_ns == per_range[fwd] + per_range[bwd]
    assert "reduce-overhead" in f.message and "torch.compile'd code" in f.message
    assert "torch.compile'd code" in f.headline and f"`{group}`" in f.headline
    share = per_range[bwd] / f.impact_ns
    assert f"{bwd} {per_range[bwd] / 1e6:.1f} ms ({share:.0%})" in f.message  # each range's share
    bd = analysis(name).facts.get("timeline_breakdown")
    rows = bd[(bd["scope"] == "range") & bd["phase"].isin([fwd, bwd])]
    assert set(rows["fix_group"]) == {group} and (rows["compiled_share"] > 0.5).all()
    assert set(bd.loc[(bd["scope"] == "range") & (bd["phase"] == opt), "fix_group"]) == {opt}
    # one finding in the verdict union: its footprint holds all of its impact
    a = analysis(name)
    mine = [x for x in report_order(a.findings) if x.rule == "launch-bound"]
    assert union_adds(mine) == [x.impact_ns for x in mine]  # the eager optimizer's is disjoint from it


@pytest.mark.parametrize("name", ["round3/optimizer_loop.sqlite.xz", "round3/optimizer_loop.pt.trace.json.gz",
                                  "round3/decode_eager.sqlite.xz", "round3/decode_eager.pt.trace.json.gz",
                                  "tiny_kernels.sqlite.xz", "host_sync.sqlite.xz",
                                  "round3/compile_train_fixed.sqlite.xz", "round3/compile_train_fixed_node.sqlite.xz"])
def test_eager_programs_and_cuda_graph_twins_are_not_compiled_code(name):
    assert not compiled_phases(name)
    bd = analysis(name).facts.get("timeline_breakdown")
    rng = bd[bd["scope"] == "range"]
    assert (rng["fix_group"] == rng["phase"]).all() and (rng["group_parts"] == "").all()


def test_a_group_of_many_compiled_ranges_keeps_a_short_name():
    from analyzer.facts.breakdown_groups import group_name

    assert group_name({"step_N/forward", "step_N/backward"}) == "step_N/backward + step_N/forward"
    many = {f"step_N/block_{i}" for i in range(12)}
    assert group_name(many) == "step_N/block_0 + step_N/block_1 + step_N/block_10 + 9 more"


def test_the_handoff_between_launching_threads_is_dispatch():
    """host_sync_graph_run2 (nsys): the main thread launches the forward, the autograd engine's thread the
    backward, the main thread the optimizer. Each thread alone had been free for a whole phase, so the
    time between one thread's last launch and the other's first (0.1-0.8 ms, about 300 pieces) was the
    waking thread's own code, host work: 77 ms of step_N/micro_N that the CUDA graph twin bought and
    launch-bound did not state (221.0 ms for 303.2 ms, 0.73). As dispatch between two launches of the
    process (analyzer.facts.breakdown_handoff), launch-bound states 301.3 ms (0.99)."""
    name = "round3/host_sync_graph_run2.sqlite.xz"
    bd = analysis(name).facts.get("timeline_breakdown")
    rng = bd[(bd["scope"] == "range") & (bd["phase"] == "step_N/micro_N")]
    assert rng.loc[rng["cause"] == "host_work", "duration_ns"].sum() < 1_000_000
    impact = launch_bound(name)["step_N/micro_N"].impact_ns
    assert 0.9 < impact / 303.2e6 < 1.1, impact  # the graph twin's saving, docs/breakdown-calibration.md


def test_a_handoff_out_of_or_into_a_graph_replay_stays_host_work():
    """compile_train's cudagraph-tree twin (nsys, node-level) replays its forward graph from the main
    thread and its backward graph from the autograd engine's thread. After each replay the other thread
    wakes within 0.5 ms: the engine to prepare and launch the backward replay (a gap a replay ends: the
    replay's preparation), the main thread to launch the eager optimizer after the backward replay (the
    other thread's latest launch a replay, not eager dispatch). Both stay host work; as dispatch, the
    main thread's 10 pieces (2.3 ms) made launch-bound fire on the graphed ``step_N/backward``. The eager
    pathology's handoffs, between eager launches, are all dispatch: no host work is left in its
    ``step_N/backward`` (10.3 ms before analyzer.facts.breakdown_handoff)."""
    from analyzer.loading.api_names import GRAPH_LAUNCH_APIS

    twin = "round3/compile_train_fixed_node.sqlite.xz"
    api = analysis(twin).trace.api
    graph = api[api["name"].astype(str).isin(GRAPH_LAUNCH_APIS)]
    seg = analysis(twin).facts.get("timeline_segments")
    seg = seg[seg["nvtx_path"].astype(str).str.fullmatch(r"step_\d+/backward") & (seg["cause"] != "compute")]
    woke: dict[int, list[tuple[str, int]]] = {}  # launching thread -> the other thread's first idle piece after
    for g in graph.itertuples():
        later = seg[(seg["host_tid"] != g.tid) & (seg["end"] > g.end) & (seg["end"] < g.end + 1_000_000)]
        if len(later):
            first = later.sort_values("start").iloc[0]
            woke.setdefault(int(g.tid), []).append((str(first["cause"]), int(first["end"] - first["start"])))
    assert sorted(len(v) for v in woke.values()) == [9, 10]  # the window's first forward replay is before it
    pieces = [p for v in woke.values() for p in v]
    assert {c for c, _ in pieces} == {"host_work"}
    assert all(150_000 < ns < 1_000_000 for _, ns in pieces), pieces
    assert "step_N/backward" not in launch_bound(twin)
    bd = analysis("round3/compile_train.sqlite.xz").facts.get("timeline_breakdown")
    rng = bd[(bd["scope"] == "range") & (bd["phase"] == "step_N/backward")]
    assert rng.loc[rng["cause"] == "host_work", "duration_ns"].sum() == 0
    assert rng.loc[rng["cause"] == "launch_bound", "duration_ns"].sum() > 30_000_000
