"""Gradients no optimizer clears (``unused_gradients``, rule unused-gradients) on the held-out unfrozen_backbone
pair (tests/data/heldout/h200_run6: a linear probe whose optimizer holds only the head while the encoder still
requires grad, and its twin with the encoder frozen), recorded with torch.profiler and nsys."""
from __future__ import annotations

from analyzer.facts import FactStore, load_all
from analyzer.facts.unused_grads import UNUSED_GRAD_COLUMNS
from analyzer.loading import load_trace
from analyzer.testing import trace_file
from analyzer.window import choose_window

load_all()


def _store(name: str) -> FactStore:
    t = load_trace(trace_file(name))
    return FactStore(t, choose_window(t), {})


def test_pathology_passes_mix_cleared_and_never_cleared_gradients():
    st = _store("heldout/h200_run6/unfrozen_backbone.pt.trace.json.gz")
    f = st.get("unused_gradients")
    assert list(f.columns) == list(UNUSED_GRAD_COLUMNS)
    # one backward pass a step, each: the head's 2 gradients stored fresh, the encoder's 99 added into old ones
    assert len(f) == 7 and list(f["step"]) == list(range(7)) and (f["passes"] == 7).all()
    assert (f["accumulations"] == 101).all() and (f["fresh"] == 2).all() and (f["adding"] == 99).all()
    assert (f["wasted_kernels"] == 419).all() and (f["backward_kernels"] == 429).all()
    assert set(f["top_node"]) == {"AddmmBackward0"} and set(f["nvtx_path"]) == {"ProfilerStep#N/step_N/backward"}
    # 156.5 ms of the backward's GPU time after the head's gradients: 0.83 of the twin's 189.4 ms saving
    assert 156.0e6 < int(f["wasted_ns"].sum()) < 157.0e6
    assert 149.0e6 < int(f["wasted_kernel_ns"].sum()) < 149.6e6
    assert (f["wasted_ns"] <= f["backward_ns"]).all()


def test_twin_stores_only_cleared_gradients():
    f = _store("heldout/h200_run6/unfrozen_backbone_fixed.pt.trace.json.gz").get("unused_gradients")
    assert len(f) == 7 and (f["fresh"] == 2).all() and (f["adding"] == 0).all()
    assert int(f["wasted_ns"].sum()) == 0 and int(f["wasted_kernels"].sum()) == 0


def test_nsys_has_no_autograd_nodes():
    assert _store("heldout/h200_run6/unfrozen_backbone.sqlite.xz").get("unused_gradients").empty


def test_rule_fires_on_the_pathology_only():
    from analyzer.pipeline import analyze_trace

    sick = analyze_trace(trace_file("heldout/h200_run6/unfrozen_backbone.pt.trace.json.gz"))
    mine = [f for f in sick.findings if f.rule == "unused-gradients"]
    assert len(mine) == 1 and 156.0e6 < float(mine[0].impact_ns) < 157.0e6
    # the biggest finding of the analysis, stated before launch-bound (23.4 ms)
    assert max(sick.findings, key=lambda f: float(f.impact_ns or 0)).rule == "unused-gradients"
    twin = analyze_trace(trace_file("heldout/h200_run6/unfrozen_backbone_fixed.pt.trace.json.gz"))
    assert not [f for f in twin.findings if f.rule == "unused-gradients"]
