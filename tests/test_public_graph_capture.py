"""Traces recorded while a program captures CUDA (HIP) graphs: the launches between BeginCapture and
EndCapture are recorded into a graph, not run, so the host time they take is one-time graph capture,
never launch overhead (issue 27/34: TraceLens' SGLang and vLLM capture traces, MI300X)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.facts.breakdown import GRAPH_CAPTURE
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules

PUBLIC = Path(__file__).resolve().parent / "data" / "public"
CAPTURES = ("tracelens_sglang_graph_capture_mi300x.pt.trace.json.xz",
            "tracelens_vllm_graph_capture_mi300x.pt.trace.json.xz")


@pytest.fixture(scope="module")
def pack():
    return load_rules(AnalysisOptions())


@pytest.mark.parametrize("name", CAPTURES)
def test_graph_capture_is_setup_not_launch_bound(name, pack):
    """Both captures launch about a thousand kernels into a graph in one hipStreamBeginCapture ..
    hipStreamEndCapture span (33.7 ms and 55.7 ms): the breakdown called 91.6% and 96.3% of the window
    launch-bound ("dispatch"), and on vLLM's launch-bound (LNC003) led the verdict, advising CUDA graphs
    on a trace of a CUDA graph being made. The capture span is setup now, detail "CUDA graph capture"."""
    a = analyze_paths([PUBLIC / name], AnalysisOptions(), pack=pack)[0]
    seg = a.facts.get("timeline_segments")
    window = a.window.end_ns - a.window.start_ns
    by = seg.groupby(seg["cause"].astype(str))["duration"].sum()
    setup = seg[seg["cause"].astype(str) == "setup"]
    capture = setup.loc[setup["detail"].astype(str) == GRAPH_CAPTURE, "duration"].sum()
    assert capture > 0.9 * window, (capture, window)
    assert by.get("launch_bound", 0) < 0.05 * window, by
    assert "launch-bound" not in {f.rule for f in a.findings}


def test_capture_reads_in_the_traces_platform_words(pack):
    """The detail is the analyzer's own words: a HIP trace's report says "HIP graph capture"."""
    from analyzer.reports.build import build_report
    from analyzer.reports.markdown import render_markdown

    a = analyze_paths([PUBLIC / CAPTURES[0]], AnalysisOptions(), pack=pack)[0]
    text = render_markdown(build_report([a]))
    assert "HIP graph capture" in text
    assert "CUDA graph capture" not in text


def test_rocm_allocator_index_is_the_gpu_its_kernels_run_on():
    """vLLM's capture on an MI300X: ``deviceProperties`` lists ids 0..7, every kernel and copy carries
    device 2 (ROCm's tracer numbers GPUs after the host's two CPU agents) and the allocator's 1,184
    ``[memory]`` events Device Id 0 (the process's index). The memory was GPU 0's, a GPU that ran
    nothing, beside GPU 2's timeline; it is now GPU 2's."""
    import json
    import lzma

    from analyzer.loading import load_trace

    name = CAPTURES[1]
    with lzma.open(PUBLIC / name, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert {e["args"]["Device Id"] for e in events if e.get("name") == "[memory]"} == {0}
    assert {e["args"]["device"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy")} == {2}
    t = load_trace(PUBLIC / name)
    gpu = t.memory[t.memory["mem_kind"].astype(str) == "device"]
    assert len(gpu) and set(gpu["device"]) == {2}
