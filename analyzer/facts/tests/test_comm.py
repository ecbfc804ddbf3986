"""Communication kernels: name parsing, the overlap arithmetic, and that compute facts never count
them (synthetic frames test the arithmetic; the real DDP traces test the behaviour, tests/test_jobs.py)."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts.comm import JobRankContext, bus_factor, parse_nccl_kernel
from analyzer.facts.nccl_nvtx import internal_ranges, payload_fields
from analyzer.facts.scalars import trace_scalars
from analyzer.facts.tests._build import store, trace
from analyzer.window import choose_window


@pytest.mark.parametrize(("name", "want"), [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ("AllReduce", "Sum", "f32", "RING", "LL")),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_SIMPLE", ("ReduceScatter", "Sum", "bf16", "RING", "SIMPLE")),
    ("ncclDevKernel_AllGather_RING_LL128", ("AllGather", "", "", "RING", "LL128")),
    ("ncclDevKernel_AllReduce_Sum_f32_COLLNET_DIRECT_SIMPLE", ("AllReduce", "Sum", "f32", "COLLNET_DIRECT", "SIMPLE")),
    ("ncclDevKernel_AllReduce_Sum_f16_NVLS_TREE_SIMPLE", ("AllReduce", "Sum", "f16", "NVLS_TREE", "SIMPLE")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float", ("AllReduce", "Sum", "f32", "RING", "LL")),
    ("ncclAllReduceRingLLKernel_sum_f32", ("AllReduce", "Sum", "f32", "RING", "LL")),
    ("ncclDevKernel_SendRecv", ("SendRecv", "", "", "", "")),
    ("ampere_sgemm_128x64_nn", ("", "", "", "", "")),
])
def test_nccl_kernel_names(name, want):
    k = parse_nccl_kernel(name)
    assert (k.collective, k.reduce_op, k.dtype, k.algorithm, k.protocol) == want


def test_bus_factors_are_nccl_tests():
    assert bus_factor("AllReduce", 2) == 1.0 and bus_factor("AllReduce", 8) == 1.75
    assert bus_factor("AllGather", 4) == 0.75 and bus_factor("ReduceScatter", 2) == 0.5
    assert bus_factor("Broadcast", 8) == 1.0 and bus_factor("AllReduce", 1) == 1.0


def test_payload_fields_by_nccl_names():
    f = payload_fields('{"NCCL communicator ID": 77, "Message size [bytes]": 4096, "Reduction operation": "Sum"}')
    assert f == {"bytes": 4096, "comm": 77}
    g = payload_fields({"NCCL communicator ID": 5, "No. of ranks": 8, "Rank": 3, "CUDA device": 3})
    assert g == {"comm": 5, "nranks": 8, "rank": 3, "device": 3}
    assert payload_fields("not json") == {} and payload_fields(None) == {}
    # a damaged export's payload text: unknown, not an error that ends the analysis
    assert payload_fields('{"Message size [bytes]": ' + "9" * 5000 + "}") == {}
    assert payload_fields('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}") == {}


def _nccl(start, end, **kw):
    return {"start": start, "end": end, "short_name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "grid_x": 2, "block_x": 512, "stream": 20, **kw}


def _gemm(start, end, **kw):
    return {"start": start, "end": end, "short_name": "sm90_xmma_gemm_bf16", "grid_x": 132, **kw}


def test_overlap_exposed_and_waits():
    # compute 0-1000 and 1500-2000; comm 800-1200 (200 hidden), 1300-1700 (200 hidden), 2100-2300
    t = trace(kernels=[_gemm(0, 1000), _nccl(800, 1200), _nccl(1300, 1700), _gemm(1500, 2000), _nccl(2100, 2300)])
    row = store(t).get("comm_overlap").iloc[0]
    assert (row.comm_ns, row.overlap_ns, row.exposed_ns, row.compute_ns) == (1000, 400, 600, 1500)
    assert row.exposed_wait_ns == 0 and row.wait_known == 0
    # inside a job: the 2100-2300 kernel waited 150 ns for the last rank, fully exposed
    ctx = JobRankContext(rank=0, world_size=2, kernel_start=np.array([800, 1300, 2100]),
                         arrival_last=np.array([800, 1300, 2250]), wait_ns=np.array([0, 0, 150]),
                         last_rank=np.array([0, 0, 1]))
    s = store(t, job_rank=ctx)
    comm = s.get("comm_kernels")
    assert comm["wait_ns"].tolist() == [0, 0, 150] and comm["transfer_ns"].tolist() == [400, 400, 50]
    assert comm["collective"].tolist() == ["AllReduce"] * 3 and comm["algorithm"].tolist() == ["RING"] * 3
    row = s.get("comm_overlap").iloc[0]
    assert (row.exposed_wait_ns, row.exposed_transfer_ns, row.wait_known) == (150, 450, 1)


def test_compute_facts_and_scalars_leave_communication_out():
    t = trace(kernels=[_gemm(0, 1000), _nccl(1000, 9000), _nccl(9000, 9500)])
    s = store(t)
    occ = s.get("occupancy")
    assert occ["short_name"].tolist() == ["sm90_xmma_gemm_bf16"]
    sc = trace_scalars(s)
    assert sc["kernel_time_ns"] == 9500 and sc["compute_kernel_time_ns"] == 1000
    assert sc["comm_kernel_count"] == 2 and sc["compute_kernel_count"] == 1
    assert set(s.get("kernel_categories")["category"]) == {"gemm", "communication"}


def test_nccl_ranges_are_internal_and_never_steps():
    nvtx = []
    kernels = []
    for i in range(6):  # user steps on the main thread, ncclAllReduce ranges (domain NCCL) between
        s0 = i * 10_000
        nvtx.append({"start": s0, "end": s0 + 9_000, "text": f"iter{i}", "path": f"iter{i}", "tid": 1})
        nvtx.append({"start": s0 + 100, "end": s0 + 200, "text": "ncclAllReduce", "path": "ncclAllReduce",
                     "domain": "NCCL", "tid": 2})
        kernels += [_gemm(s0 + 300, s0 + 900), _nccl(s0 + 1000, s0 + 8_000)]
    t = trace(kernels=kernels, nvtx=nvtx)
    assert internal_ranges(t.nvtx).tolist() == [False, True] * 6
    w = choose_window(t)
    assert w.source == "nvtx" and "iter" in w.description and "nccl" not in w.description
    assert len(w.steps) == 5  # first instance skipped as warmup
