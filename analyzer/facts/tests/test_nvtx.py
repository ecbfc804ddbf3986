"""NVTX lookups and GPU-time projection against brute-force computations."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts.nvtx_ranges import _innermost_walk, innermost_open
from analyzer.facts.tests._build import store, trace


def _nested_ranges(seed: int, n_roots: int = 30):
    """Random properly nested push/pop ranges on two threads (built recursively)."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []

    def build(lo, hi, depth, parent, tid, prefix):
        t = lo
        while t < hi - 4 and len(rows) < 400:
            s = t + int(rng.integers(0, 5))
            e = min(hi, s + int(rng.integers(2, 60 if depth else 400)))
            if e <= s:
                break
            rid = len(rows)
            name = f"r{rid}"
            path = f"{prefix}/{name}" if prefix else name
            rows.append({"start": s, "end": e, "text": name, "path": path, "tid": tid, "pid": 1,
                         "depth": depth, "parent_id": parent})
            if depth < 3 and rng.random() < 0.6:
                build(s + 1, e - 1, depth + 1, rid, tid, path)
            t = e + int(rng.integers(0, 5))

    for tid in (1, 2):
        build(0, 6_000, 0, -1, tid, "")
    return rows


def _brute_innermost(rows, tid, t):
    best, depth = -1, -1
    for i, r in enumerate(rows):
        if r["tid"] == tid and r["start"] <= t < r["end"] and r["depth"] > depth:
            best, depth = i, r["depth"]
    return best


@pytest.mark.parametrize("queries", [300, 2_000])  # fewer than the ranges' starts and ends, and many more
@pytest.mark.parametrize("seed", range(3))
def test_innermost_open_matches_brute_force(seed, queries):
    rows = _nested_ranges(seed)
    nv = trace(nvtx=rows).nvtx
    rng = np.random.default_rng(seed + 100)
    tids = rng.integers(1, 4, queries)  # thread 3 has no ranges
    ts = rng.integers(-5, 6_100, queries)
    # every range's start and end, and the instant before each, on its own thread: the answer changes there
    edges = np.r_[nv["start"].to_numpy(), nv["end"].to_numpy()]
    edge_tids = np.r_[nv["tid"].to_numpy(), nv["tid"].to_numpy()]
    tids = np.r_[tids, edge_tids, edge_tids]
    ts = np.r_[ts, edges, edges - 1]
    want = [_brute_innermost(rows, int(a), int(b)) for a, b in zip(tids, ts)]
    # by a walk per query, and (more queries than four per range) by the answers at the ranges' edges
    assert _innermost_walk(nv, tids, ts).tolist() == want
    assert innermost_open(nv, tids, ts).tolist() == want


def test_projection_inclusive_and_exclusive():
    nvtx = [
        {"start": 0, "end": 1000, "text": "step_0", "path": "step_0"},
        {"start": 10, "end": 400, "text": "forward", "path": "step_0/forward", "depth": 1, "parent_id": 0},
        {"start": 20, "end": 100, "text": "attn", "path": "step_0/forward/attn", "depth": 2, "parent_id": 1},
        {"start": 1000, "end": 2000, "text": "step_1", "path": "step_1"},
        {"start": 1010, "end": 1400, "text": "forward", "path": "step_1/forward", "depth": 1, "parent_id": 3},
    ]
    ks = [
        {"start": 30, "end": 80, "nvtx_id": 2},  # attn
        {"start": 100, "end": 150, "nvtx_id": 1},  # forward
        {"start": 500, "end": 510, "nvtx_id": 0},  # step_0 itself
        {"start": 1020, "end": 1100, "nvtx_id": 4},
        {"start": 3000, "end": 3010, "nvtx_id": -1},  # outside every range
    ]
    mc = [{"start": 160, "end": 170, "nvtx_id": 1, "bytes": 10}]
    st = store(trace(kernels=ks, memcpy=mc, nvtx=nvtx))
    proj = st.get("nvtx_projection").set_index("path")
    assert proj.loc["step_0", "gpu_ns"] == 50 + 50 + 10 + 10
    assert proj.loc["step_0", "gpu_ns_exclusive"] == 10
    assert proj.loc["step_0", "kernel_count"] == 3
    assert proj.loc["step_0/forward", "gpu_ns"] == 110 and proj.loc["step_0/forward", "op_count"] == 3
    assert proj.loc["step_0/forward", "gpu_ns_exclusive"] == 60
    assert proj.loc["step_0/forward/attn", "gpu_ns"] == 50
    assert proj.loc["step_1/forward", "gpu_ns"] == 80
    assert proj.loc["step_0", "cpu_ns"] == 1000 and proj.loc["step_0", "count"] == 1
    inst = st.get("nvtx_instances").set_index("path")
    assert (inst.loc["step_0", "gpu_start"], inst.loc["step_0", "gpu_end"]) == (30, 510)
    assert inst.loc["step_1", "gpu_ns"] == 80


def test_projection_respects_window():
    nvtx = [{"start": 0, "end": 1000, "text": "a", "path": "a"},
            {"start": 2000, "end": 3000, "text": "a", "path": "a"}]
    ks = [{"start": 10, "end": 20, "nvtx_id": 0}, {"start": 2010, "end": 2050, "nvtx_id": 1}]
    proj = store(trace(kernels=ks, nvtx=nvtx), 1500, 2500).get("nvtx_projection")
    assert proj[["count", "cpu_ns", "gpu_ns"]].values.tolist() == [[1, 500, 40]]
