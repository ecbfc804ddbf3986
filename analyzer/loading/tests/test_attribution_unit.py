"""Unit tests of the vectorized nesting / innermost-range / correlation algorithms against brute force.

These use small synthetic interval arrays (not trace data): they pin the algorithm's definitions
(half-open ranges, innermost = most recently started open range, process fallback = deepest open range,
ties to the latest start)."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.loading.attribution import NvtxTimeline, build_paths, join_correlation, nest_ranges


def brute_innermost(thread, start, end, q_thread, q_t):
    out = []
    for th, t in zip(q_thread, q_t):
        open_ = [i for i in range(len(start)) if thread[i] == th and start[i] <= t < end[i]]
        out.append(max(open_, key=lambda i: (start[i], -end[i], i)) if open_ else -1)
    return np.array(out)


def brute_parent(thread, start, end):
    order = sorted(range(len(start)), key=lambda i: (start[i], -end[i]))
    pos = {i: k for k, i in enumerate(order)}
    parents = []
    for i in range(len(start)):
        cands = [j for j in range(len(start)) if j != i and thread[j] == thread[i] and pos[j] < pos[i]
                 and start[j] <= start[i] and end[i] <= end[j] and start[i] < end[j]]
        parents.append(max(cands, key=lambda j: pos[j]) if cands else -1)
    return np.array(parents)


def random_laminar(rng, n):
    """Properly nested ranges built by recursive splitting."""
    ranges = []

    def split(lo, hi, depth):
        if len(ranges) >= n or hi - lo < 4 or depth > 6:
            return
        a = int(rng.integers(lo, hi - 2))
        b = int(rng.integers(a + 1, hi))
        ranges.append((a, b))
        split(a, b, depth + 1)
        split(b, hi, depth)

    split(0, 10_000, 0)
    s = np.array([r[0] for r in ranges], dtype=np.int64)
    e = np.array([r[1] for r in ranges], dtype=np.int64)
    return s, e


def test_nested_example():
    #            A[0,100)   B[10,50)  C[20,30)  D[60,90)  mark M at 25
    start = np.array([0, 10, 20, 60, 25])
    end = np.array([100, 50, 30, 90, 25])
    thread = np.zeros(5, dtype=np.int64)
    depth, parent, crossed = nest_ranges(thread, start, end)
    assert list(depth) == [0, 1, 2, 1, 3]
    assert list(parent) == [-1, 0, 1, 0, 2]
    assert not crossed
    text = np.array(["A", "B", "C", "D", "M"], dtype=object)
    assert list(build_paths(text, depth, parent)) == ["A", "A/B", "A/B/C", "A/D", "A/B/C/M"]
    tl = NvtxTimeline(thread, thread, start, end, depth, parent, crossed)
    t = np.array([-1, 0, 10, 25, 30, 49, 50, 59, 60, 99, 100])
    assert list(tl.thread_at(np.zeros(len(t), np.int64), t)) == [-1, 0, 1, 2, 1, 1, 0, 0, 3, 0, -1]


def test_equal_boundaries():
    # parent and child end together; a sibling starts exactly when the previous one ends
    start = np.array([0, 0, 10, 10])
    end = np.array([20, 10, 20, 15])
    thread = np.zeros(4, dtype=np.int64)
    depth, parent, crossed = nest_ranges(thread, start, end)
    assert list(depth) == [0, 1, 1, 2] and list(parent) == [-1, 0, 0, 2]
    tl = NvtxTimeline(thread, thread, start, end, depth, parent, crossed)
    t = np.array([0, 9, 10, 14, 15, 19, 20])
    assert list(tl.thread_at(np.zeros(7, np.int64), t)) == [1, 1, 3, 3, 2, 2, -1]


@pytest.mark.parametrize("seed", range(20))
def test_random_laminar_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    s1, e1 = random_laminar(rng, 60)
    s2, e2 = random_laminar(rng, 60)
    start = np.concatenate([s1, s2])
    end = np.concatenate([e1, e2])
    thread = np.concatenate([np.full(len(s1), 7), np.full(len(s2), 9)]).astype(np.int64)
    depth, parent, crossed = nest_ranges(thread, start, end)
    assert not crossed
    assert list(parent) == list(brute_parent(thread, start, end))
    tl = NvtxTimeline(thread, np.zeros_like(thread), start, end, depth, parent, crossed)
    qt = rng.integers(-10, 10_010, 400)
    qth = rng.choice([7, 9, 11], 400)
    assert list(tl.thread_at(qth, qt)) == list(brute_innermost(thread, start, end, qth, qt))


@pytest.mark.parametrize("seed", range(10))
def test_random_overlapping_matches_brute_force(seed):
    """start/end ranges may overlap without nesting: innermost = most recently started open range."""
    rng = np.random.default_rng(100 + seed)
    n = 50
    start = rng.integers(0, 1000, n)
    end = start + rng.integers(0, 300, n)
    thread = np.zeros(n, dtype=np.int64)
    depth, parent, crossed = nest_ranges(thread, start, end)
    assert list(parent) == list(brute_parent(thread, start, end))
    tl = NvtxTimeline(thread, thread, start, end, depth, parent, crossed)
    qt = rng.integers(-5, 1400, 300)
    assert list(tl.thread_at(np.zeros(300, np.int64), qt)) == list(
        brute_innermost(thread, start, end, np.zeros(300), qt))


def test_process_fallback_picks_deepest_then_latest():
    # thread 1: A[0,100) > B[10,60);  thread 2: X[20,80) ; thread 3: Y[30,40) > Z[31,39)
    start = np.array([0, 10, 20, 30, 31])
    end = np.array([100, 60, 80, 40, 39])
    thread = np.array([1, 1, 2, 3, 3])
    pid = np.array([5, 5, 5, 5, 5])
    depth, parent, crossed = nest_ranges(thread, start, end)
    tl = NvtxTimeline(thread, pid, start, end, depth, parent, crossed)
    t = np.array([5, 15, 25, 35, 45, 70, 90, 100])
    # 35: depth-1 candidates B (start 10), Z (depth 1, start 31) -> Z is as deep and later
    assert list(tl.process_at(np.full(len(t), 5), t)) == [0, 1, 1, 4, 1, 2, 0, -1]
    # 25: B (depth 1) beats X (depth 0, later start); other processes see nothing
    assert list(tl.process_at(np.array([6]), np.array([25]))) == [-1]


def test_join_correlation_per_process_and_runtime_first():
    api_pid = np.array([1, 1, 2, 1])
    api_corr = np.array([10, 11, 10, 10])  # rows 0 and 3 share (1, 10): row 0 (runtime, first) wins
    op_pid = np.array([1, 2, 1, 3])
    op_corr = np.array([10, 10, 11, 10])
    assert list(join_correlation(op_pid, op_corr, api_pid, api_corr)) == [0, 2, 1, -1]
    # unknown op pids: join on the correlation id alone
    assert list(join_correlation(None, np.array([11]), api_pid, api_corr)) == [1]
    assert list(join_correlation(op_pid, op_corr, api_pid[:0], api_corr[:0])) == [-1, -1, -1, -1]
