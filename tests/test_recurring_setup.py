"""Setup-like work that recurs in the steady state is a per-step cause, not one-time setup (issue 27).

graph_recapture (tests/data/heldout/h100_run5, H100) captures, instantiates and destroys a new CUDA graph
for every request, 8 a step, and replays it once; its twin captures once before the loop. The rule
``recurring-setup`` was designed after that held-out batch had been judged (docs/breakdown-heldout.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analyzer.facts.recurring_setup import GRAPH
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules

DATA = Path(__file__).resolve().parent / "data"
RUN5 = DATA / "heldout" / "h100_run5"
#: (recording, the twin's measured saving over the pathology's window in ns: docs/breakdown-heldout.md)
PATHOLOGIES = (("graph_recapture.sqlite.xz", 580.8e6), ("graph_recapture.pt.trace.json.gz", 143.4e6),
               ("graph_recapture_bare.sqlite.xz", 578.7e6))
TWINS = ("graph_recapture_fixed.sqlite.xz", "graph_recapture_fixed.pt.trace.json.gz",
         "graph_recapture_bare_fixed.sqlite.xz")


@pytest.fixture(scope="module")
def pack():
    return load_rules(AnalysisOptions())


def _analyze(path: Path, pack):  # type: ignore[no-untyped-def]
    return analyze_paths([path], AnalysisOptions(), pack=pack)[0]


@pytest.mark.parametrize("name,saving", PATHOLOGIES)
def test_per_request_capture_is_the_leading_cause(name, saving, pack):
    """Every recording (nsys, torch.profiler, bare nsys without NVTX: recurrence over the periods the
    window found) leads with recurring-setup, its impact the breakdown's capture time (0.76-0.79 of the
    twin's saving: the capture's allocations and synchronization stay alloc-in-loop's and
    host-sync-in-loop's), and setup-window is silent: nothing in the window happens once."""
    a = _analyze(RUN5 / name, pack)
    rules = [f.rule for f in a.findings if f.impact_ns is not None and not f.symptom]
    assert rules[0] == "recurring-setup", rules
    assert "setup-window" not in rules
    f = next(f for f in a.findings if f.rule == "recurring-setup")
    ratio = float(f.impact_ns) / saving
    assert 0.75 <= ratio <= 0.85, ratio
    seg = a.facts.get("setup_segments")
    # every setup segment of the window is graph capture work, and all of it recurs
    assert set(seg["kind"]) == {GRAPH} and (seg["recurring"] == 1).all()
    steps = len(a.window.steps)
    assert (seg["kind_steps"] == steps).all()
    # the impact is the breakdown's setup time, counted once
    tl = a.facts.get("timeline_segments")
    assert f.impact_ns == pytest.approx(float(tl.loc[tl["cause"] == "setup", "duration"].sum()))
    captures = int((seg["detail"] == "CUDA graph capture").sum())
    assert captures == 8 * steps or name.endswith("_bare.sqlite.xz")  # 8 requests a step (NVTX steps)


@pytest.mark.parametrize("name", TWINS)
def test_capture_once_twin_is_silent(name, pack):
    a = _analyze(RUN5 / name, pack)
    assert a.facts.get("setup_segments").empty
    assert not {"recurring-setup", "setup-window"} & {f.rule for f in a.findings}


def test_warm_up_compilation_is_not_recurring(pack):
    """torch.compile compiling once (compile_train on an H200, torch.profiler): the compilation is before
    the window; what the window holds of setup-like calls (Triton's per-launch attribute queries, 0.06 ms
    in 11 steps) recurs but is far below the rule's threshold."""
    a = _analyze(DATA / "kineto" / "compile_train_default_h200.pt.trace.json.xz", pack)
    assert "recurring-setup" not in {f.rule for f in a.findings}
    seg = a.facts.get("setup_segments")
    assert float(seg["duration"].sum()) < 1e6


def test_one_time_capture_stays_setup_window(pack):
    """vLLM capturing its decode graphs once (MI300X): one capture span in one step, not recurring;
    setup-window reports it as before."""
    a = _analyze(DATA / "public" / "tracelens_vllm_graph_capture_mi300x.pt.trace.json.xz", pack)
    rules = {f.rule for f in a.findings}
    assert "setup-window" in rules and "recurring-setup" not in rules
    seg = a.facts.get("setup_segments")
    assert len(seg) and (seg["recurring"] == 0).all()


RUN6 = DATA / "heldout" / "h200_run6"
#: compile_varlen's twin saving over the pathology's window (docs/breakdown-heldout.md, torch.profiler, H200)
VARLEN_SAVING = 25438.5e6


def test_recompilation_in_the_loop_is_recurring_setup(pack):
    """compile_varlen (``torch.compile(dynamic=False)`` on 7 padded lengths: recompilations inside the
    measured steps, H200, torch.profiler). The host-held idle time inside torch.compile's compilation
    ranges is the breakdown's ``compile``, no other host cause's: recurring-setup leads with it (0.96 of
    the twin's saving), and host-work-in-loop, which stated 24,284.5 ms of it before, is silent. Designed
    after this held-out batch was judged."""
    from analyzer.facts.graphs import compile_spans

    a = _analyze(RUN6 / "compile_varlen.pt.trace.json.gz", pack)
    rules = [f.rule for f in a.findings if f.impact_ns is not None and not f.symptom]
    assert rules[0] == "recurring-setup", rules
    assert not {"host-work-in-loop", "launch-bound", "host-sync-in-loop", "setup-window"} & set(rules), rules
    f = next(f for f in a.findings if f.rule == "recurring-setup")
    assert 0.75 <= f.impact_ns / VARLEN_SAVING <= 1.25
    assert f.impact_ns / VARLEN_SAVING == pytest.approx(0.964, abs=0.005)
    tl = a.facts.get("timeline_segments")
    compiling = float(tl.loc[(tl["cause"] == "compile").to_numpy(), "duration"].sum())
    assert compiling == pytest.approx(24516.6e6, rel=1e-4)
    seg = a.facts.get("setup_segments")
    comp = seg.loc[(seg["kind"] == "torch.compile compilation").to_numpy()]
    assert float(comp["duration"].sum()) == compiling and (comp["recurring"] == 1).all()
    assert set(comp["cause"]) == {"compile"} and comp["kind_steps"].iloc[0] == 4 and len(a.window.steps) == 7
    # no host-held idle segment starts inside a compilation range: those are all compile's
    tid, start, end = compile_spans(a.trace)
    held = tl.loc[tl["cause"].isin(["launch_bound", "host_sync", "host_work"]).to_numpy()]
    s = held["start"].to_numpy()
    i = np.searchsorted(start, s, side="right") - 1
    assert not ((i >= 0) & (s < end[np.maximum(i, 0)])).any()
    assert f.impact_ns == pytest.approx(float(seg.loc[(seg["recurring"] == 1).to_numpy(), "duration"].sum()))


def test_dynamic_twin_has_no_compilation(pack):
    """compile_varlen's twin (the length marked dynamic: one graph compiled before the window) runs its
    ``Torch-Compiled Region`` / ``TorchDynamo Cache Lookup`` every step: not compilation. Its own
    host-work-in-loop finding (127.5 ms) is cuDNN attention building plans for each new length inside
    ``aten::_cudnn_attention_forward`` (about 40 ms in three steps), not torch.compile."""
    a = _analyze(RUN6 / "compile_varlen_fixed.pt.trace.json.gz", pack)
    rules = {f.rule for f in a.findings}
    assert not {"recurring-setup", "setup-window"} & rules
    tl = a.facts.get("timeline_segments")
    assert not (tl["cause"] == "compile").any()
    hw = next(f for f in a.findings if f.rule == "host-work-in-loop")
    assert hw.impact_ns == pytest.approx(127.5e6, rel=1e-3)


def test_one_time_compilation_in_the_window_is_setup_window():
    """compile_train (H200, torch.profiler) analyzed over the whole trace (``--window full``): its one
    warm-up compilation, 5,697.4 ms of the breakdown's ``compile``, is one-time work (its kind starts in
    one step): setup-window states it, recurring-setup and host-work-in-loop do not."""
    opts = AnalysisOptions(window_spec="full")
    a = analyze_paths([DATA / "kineto" / "compile_train_default_h200.pt.trace.json.xz"], opts,
                      pack=load_rules(opts))[0]
    rules = {f.rule for f in a.findings}
    assert "recurring-setup" not in rules and "host-work-in-loop" not in rules
    seg = a.facts.get("setup_segments")
    comp = seg.loc[(seg["kind"] == "torch.compile compilation").to_numpy()]
    assert (comp["recurring"] == 0).all()
    assert float(comp["duration"].sum()) == pytest.approx(5697.4e6, rel=1e-4)
    f = next(f for f in a.findings if f.rule == "setup-window")
    assert "torch.compile compiling" in f.message
    assert f.impact_ns == pytest.approx(float(seg.loc[(seg["recurring"] == 0).to_numpy(), "duration"].sum()))
