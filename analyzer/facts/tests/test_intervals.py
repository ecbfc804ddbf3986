"""Interval arithmetic (union, coverage, busy, gaps, utilization) against brute-force computations."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts._util import covered_until, union_intervals
from analyzer.facts.tests._build import store, trace


def brute_busy(starts, ends, lo=None, hi=None) -> int:
    """Busy ns by marking every nanosecond (small spans only)."""
    lo = min(starts) if lo is None else lo
    hi = max(ends) if hi is None else hi
    mask = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(starts, ends):
        s, e = max(s, lo), min(e, hi)
        if e > s:
            mask[s - lo:e - lo] = True
    return int(mask.sum())


def brute_union(starts, ends):
    """O(n^2) merge: repeatedly fuse overlapping/touching intervals."""
    ivs = sorted(zip(starts, ends))
    changed = True
    while changed:
        changed = False
        out = []
        for s, e in ivs:
            for i, (a, b) in enumerate(out):
                if s <= b and a <= e:
                    out[i] = (min(a, s), max(b, e))
                    changed = True
                    break
            else:
                out.append((s, e))
        ivs = sorted(out)
    return ivs


@pytest.mark.parametrize("seed", range(5))
def test_union_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 300
    s = rng.integers(0, 20_000, n)
    e = s + rng.integers(0, 200, n)
    g = rng.integers(0, 3, n)
    u = union_intervals(s, e, g)
    for grp in range(3):
        sel = g == grp
        expected = brute_union(s[sel].tolist(), e[sel].tolist())
        got = list(zip(u.start[u.group == grp].tolist(), u.end[u.group == grp].tolist()))
        assert got == expected


@pytest.mark.parametrize("seed", range(3))
def test_covered_until_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 5_000, 200)
    e = s + rng.integers(1, 100, 200)
    u = union_intervals(s, e)
    t = rng.integers(-10, 5_200, 50)
    got = covered_until(u.start, u.end, t)
    want = [brute_busy(s.tolist(), e.tolist(), 0, max(int(x), 0)) if x > 0 else 0 for x in t]
    assert got.tolist() == want


def _random_kernels(seed, n=300):
    rng = np.random.default_rng(seed)
    s = np.sort(rng.integers(0, 60_000, n))
    d = rng.integers(1, 400, n)
    return [{"start": int(a), "end": int(a + b), "stream": int(rng.integers(0, 3)),
             "device": int(rng.integers(0, 2))} for a, b in zip(s, d)]


@pytest.mark.parametrize("window", [(0, 10**10), (5_000, 41_234)])
def test_gpu_busy_counts_concurrency_once(window):
    ks = _random_kernels(1)
    st = store(trace(kernels=ks), *window)
    busy = st.get("gpu_busy")
    for dev in (0, 1):
        mine = [k for k in ks if k["device"] == dev]
        lo, hi = window[0], min(window[1], 70_000)
        want = brute_busy([k["start"] for k in mine], [k["end"] for k in mine], lo, hi)
        assert busy.loc[busy.device == dev, "duration"].sum() == want


def test_gaps_plus_busy_fill_the_window_between_first_and_last_op():
    ks = _random_kernels(2)
    st = store(trace(kernels=ks), 5_000, 41_234, source="nvtx")
    busy, gaps = st.get("gpu_busy"), st.get("gpu_gaps")
    for dev in (0, 1):
        b = busy.loc[busy.device == dev, "duration"].sum()
        g = gaps.loc[gaps.device == dev, "duration"].sum()
        assert b + g == 41_234 - 5_000  # ops exist before and after the window on both devices
        assert (gaps.duration > 0).all()


def test_gaps_ignore_time_before_first_op_unless_user_window():
    ks = [{"start": 1_000, "end": 2_000}, {"start": 5_000, "end": 6_000}]
    auto = store(trace(kernels=ks), 0, 10_000, source="auto").get("gpu_gaps")
    assert auto[["start", "end"]].values.tolist() == [[2_000, 5_000]]
    assert not auto.edge.any()
    user = store(trace(kernels=ks), 0, 10_000, source="user").get("gpu_gaps")
    assert user[["start", "end"]].values.tolist() == [[0, 1_000], [2_000, 5_000], [6_000, 10_000]]
    assert user.edge.tolist() == [True, False, True]
    # a gap straddling the window start counts for its part inside
    clipped = store(trace(kernels=ks), 3_000, 10_000, source="nvtx").get("gpu_gaps")
    assert clipped[["start", "end"]].values.tolist() == [[3_000, 5_000]]


def test_gap_host_attribution():
    ks = [
        {"start": 1_000, "end": 2_000, "short_name": "a", "tid": 11, "pid": 10, "correlation_id": 1},
        {"start": 9_000, "end": 9_500, "short_name": "b", "tid": 11, "pid": 10, "correlation_id": 2},
        {"start": 20_000, "end": 21_000, "short_name": "c", "tid": 12, "pid": 10, "correlation_id": 3},
    ]
    nvtx = [
        {"start": 0, "end": 30_000, "text": "step_0", "path": "step_0", "pid": 10, "tid": 11},
        {"start": 2_500, "end": 8_000, "text": "load_batch", "path": "step_0/load_batch", "pid": 10,
         "tid": 11, "depth": 1, "parent_id": 0},
    ]
    api = [
        {"start": 10_000, "end": 19_000, "name": "cudaStreamSynchronize", "pid": 10, "tid": 12},
        {"start": 19_500, "end": 19_600, "name": "cudaLaunchKernel", "pid": 10, "tid": 12},
    ]
    gaps = store(trace(kernels=ks, nvtx=nvtx, api=api), 0, 30_000, source="nvtx").get("gpu_gaps")
    first, second = gaps.iloc[0], gaps.iloc[1]
    assert (first.prev_op, first.next_op) == ("a", "b")
    assert first.host_nvtx_range == "load_batch" and first.host_nvtx_path == "step_0/load_batch"
    assert first.host_api == "" and first.host_nvtx_source == "thread"
    assert (second.prev_op, second.next_op, second.host_tid) == ("b", "c", 12)
    # thread 12 has no ranges: the process's main thread (tid 11 has them) answers
    assert second.host_nvtx_range == "step_0" and second.host_nvtx_source == "main"
    assert second.host_api == "cudaStreamSynchronize"
    assert second.host_api_overlap_ns == 9_000 + 100


def test_utilization_bins_split_exactly():
    ks = _random_kernels(3)
    w0, w1 = 1_234, 55_555
    st = store(trace(kernels=ks), w0, w1, utilization_bins=37)
    util = st.get("utilization")
    busy = st.get("gpu_busy")
    assert len(util) == 2 * 37
    for dev in (0, 1):
        u = util.loc[util.device == dev]
        assert u.busy_ns.sum() == busy.loc[busy.device == dev, "duration"].sum()
        mine = [k for k in ks if k["device"] == dev]
        for row in u.iloc[[0, 5, 36]].itertuples():
            want = brute_busy([k["start"] for k in mine], [k["end"] for k in mine], row.bin_start, row.bin_end)
            assert row.busy_ns == want
        assert ((u.util >= 0) & (u.util <= 1)).all()
