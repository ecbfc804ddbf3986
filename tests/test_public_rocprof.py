"""rocprofv3's JSON output (issue 27, "ROCm traces"): the public sample AMD-AGI/TraceLens
``tests/rocprof/908_results.json.gz`` (one rank of a training run on an 8-GPU MI350X node, kernel
dispatches only: ``rocprofv3 --kernel-trace --output-format json``), committed as
``tests/data/public/tracelens_rocprofv3_mi350x.json.xz`` (origin in ``tests/data/MANIFEST.md``).

Before, the file was refused with one line ("rocprofv3's JSON output ..., which this analyzer does not
read"); now it loads into the one trace model and gets a verdict.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.errors import InputError
from analyzer.loading import load_trace, looks_like_profiler_trace
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules

TRACE = Path(__file__).resolve().parent / "data" / "public" / "tracelens_rocprofv3_mi350x.json.xz"


@pytest.fixture(scope="module")
def trace():
    return load_trace(TRACE)


def test_dispatches_agents_and_kernel_names(trace):
    """Every dispatch is a kernel on its agent's HIP device (agent 37946 -> GPU 0); the eight GPU agents
    are the GPUs (the two CPU agents are not), named by product; names come from the kernel symbols;
    HSA's work-item grid becomes blocks (512 work-items in groups of 512: one block)."""
    assert trace.info.source_format == "rocprofv3-json" and trace.info.platform == "rocm"
    assert trace.info.hostname == "smci350-zts-gtu-c6-25"
    assert trace.info.duration_ns == 15_122_023_494
    k = trace.kernels
    assert len(k) == 43_915 and set(k["device"]) == {0} and k["stream"].nunique() == 567
    g = trace.gpus
    assert g["device"].tolist() == list(range(8)) and set(g["name"]) == {"AMD Instinct MI350X"}
    first = g.iloc[0]
    assert (first["sm_count"], first["compute_major"], first["compute_minor"], first["threads_per_warp"]) == (256, 9, 5, 64)
    assert first["memory_bytes"] == 309_220_868_096 and first["max_shared_per_block"] == 160 * 1024
    row = k.iloc[0]
    assert (row["short_name"], row["grid_x"], row["block_x"], row["correlation_id"]) == ("__amd_rocclr_copyBuffer", 1, 512, 1)
    rccl = k[k["short_name"] == "ncclDevKernel_Generic_1"]
    assert len(rccl) == 1_310 and int(rccl["duration"].sum()) == 4_158_756_678
    assert k["name"].astype(str).str.startswith("void at::native::").any()  # demangled, not the .kd symbol
    assert trace.api.empty and "HIP API calls" in trace.info.unavailable["api_calls"]
    assert trace.processes["pid"].tolist() == [908]


def test_verdict_and_breakdown():
    """The breakdown partitions the window exactly (compute, exposed RCCL communication, and what a trace
    without HIP calls cannot classify) and the verdict leads with the exposed communication; the rules
    that need the host's calls say they did not run."""
    pack = load_rules(AnalysisOptions())
    a = analyze_paths([TRACE], AnalysisOptions(), pack=pack)[0]
    b = a.facts.get("timeline_breakdown")
    w = b[(b["scope"] == "window") & (b["device"] == 0)]
    assert int(w["duration_ns"].sum()) == a.window.duration_ns == 2_439_758_108
    by_cause = w.groupby("cause")["duration_ns"].sum().to_dict()
    assert by_cause == {"compute": 260_468_610, "exposed_comm": 1_721_558_491, "unknown": 457_731_007}
    assert a.findings[0].rule == "exposed-communication" and a.findings[0].impact_ns == 1_721_558_491
    assert not {"tiny-kernels", "host-sync-in-loop"} & {f.rule for f in a.findings}


def test_found_in_a_folder_scan():
    assert looks_like_profiler_trace(TRACE)


def test_rocprofv3_json_without_dispatches_is_one_line(tmp_path):
    """Bad input: a rocprofv3 document whose one record has no dispatch_info, and one with an empty
    process list: a one-line error naming rocprofv3 and what to record, no traceback."""
    p = tmp_path / "908_results.json"
    p.write_text(json.dumps({"rocprofiler-sdk-tool": [{
        "metadata": {"pid": 908, "init_time": 1, "fini_time": 2},
        "buffer_records": {"kernel_dispatch": [{"kind": 11, "start_timestamp": 10, "end_timestamp": 20}],
                           "hip_api": []}}]}))
    with pytest.raises(InputError) as info:
        load_trace(p)
    assert "rocprofv3 JSON with no kernel dispatch" in str(info.value) and "--kernel-trace" in str(info.value)
    p.write_text(json.dumps({"rocprofiler-sdk-tool": []}))
    with pytest.raises(InputError) as info:
        load_trace(p)
    assert "rocprofiler-sdk-tool is empty" in str(info.value)
