"""launch-bound on a partly graphed range (issue 27): ``torch.compile(mode="reduce-overhead")`` with a graph
break in every block (``workloads/compile_graph_break.py``, ``tests/data/round3/compile_graph_break*``, an
H200). Each block's forward is two CUDA graph replays with ~65 tiny eager kernels launched one by one
between them; the twin traces the same loop into one graph per step. The pathology's ``step_N/forward``
runs 73% of its kernel time in graph replays, so a rule that skipped ranges mostly graphed missed it; the
breakdown now tells, gap by gap, the time spent on a replay's launch (the gap ends at a replay's op or at
its input copy just before it, or the host is inside the graph launch call: ``graph_launch``) from the
eager launches, and launch-bound counts only the latter. The recordings: nsys (graph-level, the default), nsys ``--cuda-graph-trace=node``,
torch.profiler, and torch.profiler without any range (``_bare``)."""
from __future__ import annotations

import functools
import json

import pytest

from analyzer.impacts import report_order, union_adds
from analyzer.pipeline import analyze_trace
from analyzer.testing import DATA_DIR, trace_file

ROUND3 = DATA_DIR / "round3"
#: (pathology, twin, manifest tool, its flags): each recording pair
PAIRS = [("compile_graph_break.sqlite.xz", "compile_graph_break_fixed.sqlite.xz", "nsys", []),
         ("compile_graph_break_node.sqlite.xz", "compile_graph_break_fixed_node.sqlite.xz", "nsys",
          ["cuda-graph-trace=node"]),
         ("compile_graph_break.pt.trace.json.gz", "compile_graph_break_fixed.pt.trace.json.gz", "torch", ["gzip"]),
         ("compile_graph_break_bare.pt.trace.json.gz", "compile_graph_break_bare_fixed.pt.trace.json.gz", "torch",
          ["gzip", "bare"])]


@functools.cache
def analysis(name: str):  # type: ignore[no-untyped-def]
    return analyze_trace(trace_file("round3/" + name))


def saving_share(tool: str, flags: list[str]) -> float:
    """1 - twin mean step / pathology mean step, the programs' own synchronized step times
    (``round3/manifest.jsonl``)."""
    means = {}
    for line in (ROUND3 / "manifest.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["workload"] == "compile_graph_break" and rec["tool"] == tool and rec["flags"] == flags:
            means[rec["variant"]] = rec["mean_ms"]
    return 1 - means["fixed"] / means["pathology"]


def launch_bound(name: str) -> list:
    return [f for f in analysis(name).findings if f.rule == "launch-bound"]


@pytest.mark.parametrize("sick,twin,tool,flags", PAIRS, ids=["nsys", "node", "torch", "bare"])
def test_the_eager_remainder_between_replays_leads_the_verdict(sick, twin, tool, flags):
    """The pathology's verdict leads with launch-bound in the graph-broken range (the whole window without
    ranges), its impact within 25% of what the twin's single graph saved (a share of the window: the
    windows hold different numbers of steps), and the twin is silent on it."""
    a = analysis(sick)
    first = report_order(a.findings)[0]
    assert first.rule == "launch-bound", [f.rule for f in report_order(a.findings)]
    assert (first.scope.nvtx_path or "").endswith("step_N/forward") or "bare" in sick
    assert "eager work between CUDA graph replays" in first.headline
    assert "remove the graph breaks" in first.message
    # the range runs mostly in graph replays: a rule skipping graphed ranges said nothing here
    bd = a.facts.get("timeline_breakdown")
    rng = bd[(bd["scope"] == "range") & (bd["phase"] == (first.scope.nvtx_path or ""))]
    assert rng["graphed_share"].max() > 0.5
    ratio = first.impact_ns / a.window.duration_ns / saving_share(tool, flags)
    assert 0.75 <= ratio <= 1.25, ratio
    assert not launch_bound(twin)


@pytest.mark.parametrize("name", [p[0] for p in PAIRS] + [p[1] for p in PAIRS])
def test_graph_launch_time_is_apart_from_the_eager_launches(name):
    """Every launch-bound nanosecond is either a replay's launch (``graph_launch`` 1: the graph launch call,
    or a gap that ends at a replay's op or its input copy, its detail saying so) or an eager launch; the finding
    counts the second only, and host-bound-graph-loop (the host between replays) never the same time:
    the two findings add up in the verdict without overlap."""
    a = analysis(name)
    bd = a.facts.get("timeline_breakdown")
    lb = bd[(bd["scope"] == "window") & (bd["cause"] == "launch_bound")]
    graph = lb[lb["graph_launch"] == 1]
    assert len(graph) and graph["detail"].map(lambda d: d.endswith(" (before a graph replay)")
                                              or d == "cudaGraphLaunch").all()
    assert not lb.loc[lb["graph_launch"] == 0, "detail"].str.contains("graph replay").any()
    assert (lb["device_graph_launch_ns"] == graph["duration_ns"].sum()).all()
    mine = [f for f in report_order(a.findings) if f.rule in ("launch-bound", "host-bound-graph-loop")]
    eager = int(lb.loc[lb["graph_launch"] == 0, "duration_ns"].sum())
    for f in mine:
        if f.rule == "launch-bound":
            assert f.impact_ns <= eager
    assert union_adds(mine) == pytest.approx([f.impact_ns for f in mine], rel=0.01)
