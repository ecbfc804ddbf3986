"""API facts: synchronization, allocation, copies, launch statistics."""
from __future__ import annotations

import pytest

from analyzer.facts.scalars import SCALAR_DOCS, trace_scalars
from analyzer.facts.tests._build import store, trace


def _api_trace():
    api = [
        {"start": 0, "end": 100, "name": "cudaMalloc", "correlation_id": 1},
        {"start": 200, "end": 300, "name": "cudaLaunchKernel", "correlation_id": 2},
        {"start": 400, "end": 5_000, "name": "cudaStreamSynchronize", "correlation_id": 3},
        {"start": 5_100, "end": 5_200, "name": "cudaMemcpyAsync", "correlation_id": 4},
        {"start": 5_300, "end": 6_000, "name": "cudaMemcpy", "correlation_id": 5},
        {"start": 6_100, "end": 6_200, "name": "cudaStreamWaitEvent", "correlation_id": 6},
        {"start": 6_300, "end": 6_400, "name": "cudaFreeHost", "correlation_id": 7},
        {"start": 6_500, "end": 6_600, "name": "cuMemCreate", "correlation_id": 8},
        {"start": 6_700, "end": 6_800, "name": "cudaMemcpyAsync", "correlation_id": 9},
    ]
    ks = [{"start": 350, "end": 4_000, "correlation_id": 2, "api_start": 200}]
    mc = [
        {"start": 5_150, "end": 5_250, "correlation_id": 4, "bytes": 1_000_000, "direction": "D2H",
         "src_kind": "device", "dst_kind": "pageable", "api_name": "cudaMemcpyAsync"},
        {"start": 5_400, "end": 5_900, "correlation_id": 5, "bytes": 1_000, "direction": "H2D",
         "src_kind": "pinned", "dst_kind": "device", "api_name": "cudaMemcpy"},
        {"start": 6_750, "end": 6_800, "correlation_id": 9, "bytes": 1_000, "direction": "H2D",
         "src_kind": "pinned", "dst_kind": "device", "api_name": "cudaMemcpyAsync"},
    ]
    return trace(kernels=ks, memcpy=mc, api=api)


def test_sync_calls():
    sync = store(_api_trace()).get("sync_calls").set_index("correlation_id")
    assert sync["sync_kind"].to_dict() == {3: "stream", 4: "pageable_async_memcpy", 5: "memcpy",
                                           6: "stream_wait_event"}
    assert sync["blocking"].to_dict() == {3: True, 4: True, 5: True, 6: False}
    assert sync.loc[4, "direction"] == "D2H" and sync.loc[4, "bytes"] == 1_000_000


def test_alloc_calls():
    alloc = store(_api_trace()).get("alloc_calls")
    assert alloc[["name", "op", "memory"]].values.tolist() == [
        ["cudaMalloc", "alloc", "device"], ["cudaFreeHost", "free", "pinned"],
        ["cuMemCreate", "alloc", "virtual"]]


def test_copies():
    st = store(_api_trace())
    copies = st.get("copy_throughput")
    assert copies["throughput"].tolist() == pytest.approx([1e13, 2e9, 2e10])
    assert copies["pageable"].tolist() == [True, False, False]
    assert copies["is_async"].tolist() == [True, False, True]
    summary = st.get("memcpy_summary").set_index(["direction", "src_kind", "dst_kind"])
    assert summary.loc[("H2D", "pinned", "device"), "count"] == 2
    assert summary.loc[("H2D", "pinned", "device"), "sync_count"] == 1


def test_launch_stats_and_scalars():
    st = store(_api_trace(), 0, 10_000)
    ls = st.get("launch_stats").iloc[0]
    assert ls.kernel_count == 1 and ls.tiny_count == 1 and ls.launch_count == 1
    assert ls.launch_api_median_ns == 100 and ls.launch_delay_median_ns == 150
    assert ls.launch_rate == pytest.approx(1 / 10_000e-9)
    sc = trace_scalars(st)
    assert set(sc) == set(SCALAR_DOCS)
    assert sc["kernel_time_ns"] == 3_650 and sc["sync_call_count"] == 3  # stream wait is not blocking
    assert sc["gpu_busy_ns"] + sc["gpu_idle_ns"] == 6_800 - 350  # first op start .. last op end
