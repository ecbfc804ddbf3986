"""Footprint intervals: merged, clipped to the window and bounded in size (the real-trace footprints are
tested in tests/test_verdict.py)."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.analysis import Window
from analyzer.rules.footprint import _build, _coarsen, merge_intervals


def _covers(s, e, s2, e2) -> bool:
    """Every interval (s, e) lies inside one of (s2, e2)."""
    idx = np.searchsorted(s2, s, side="right") - 1
    return bool((idx >= 0).all() and (e <= e2[idx]).all())


@pytest.mark.parametrize("seed", range(5))
def test_coarsen_keeps_at_most_the_limit_and_covers_the_input(seed):
    rng = np.random.default_rng(seed)
    n = 5000
    start = np.cumsum(rng.integers(1, 50, n) * rng.choice([1, 10], n)).astype(float)
    end = start + rng.integers(1, 5, n)
    s, e = merge_intervals(start, end)
    s2, e2 = _coarsen(s, e, 100)
    assert len(s2) <= 100 and (s2[1:] > e2[:-1]).all()
    assert _covers(s, e, s2, e2) and s2[0] == s[0] and e2[-1] == e[-1]


def test_coarsen_with_equal_spaces():
    start = np.arange(0, 10_000, 10, dtype=float)
    s2, e2 = _coarsen(start, start + 5, 100)
    assert len(s2) == 100 and _covers(start, start + 5, s2, e2)


def test_build_clips_to_the_window_and_merges_per_device():
    window = Window(100, 200, "user", "test")
    fp = _build(np.array([1, 0, 0, 1]), np.array([50.0, 120, 150, 190]), np.array([110.0, 160, 170, 260]), window,
                "rows")
    assert fp.device.tolist() == [0, 1, 1] and fp.start.tolist() == [120, 100, 190]
    assert fp.end.tolist() == [170, 110, 200] and fp.length_ns == 50 + 10 + 10


def _merge_by_reduction(start, end):
    """The blocks as the running maximum reduced over each block (the definition merge_intervals
    answers with one gather per block)."""
    ok = np.isfinite(start) & np.isfinite(end) & (end > start)
    start, end = start[ok], end[ok]
    if len(start) == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.r_[True, start[1:] > reach[:-1]]
    return start[new], np.maximum.reduceat(reach, np.flatnonzero(new))


def test_merge_intervals_on_real_kernels():
    """A real trace's kernel intervals (ordered, unordered, with empty and NaN rows): the same blocks as
    the reduction over each block, and the inputs left as they were."""
    from analyzer.loading import load_trace
    from analyzer.testing import real_trace

    k = load_trace(real_trace("tiny_kernels")).kernels
    start, end = k["start"].to_numpy(float), k["end"].to_numpy(float)
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(len(start))
    holed_end = end.copy()
    holed_end[::17] = np.nan
    holed_end[5::23] = start[5::23]  # empty intervals
    for s, e in ((start, end), (start[shuffled], end[shuffled]), (start, holed_end), (start[:1], end[:1]),
                 (start[:0], end[:0]), (start, start + 1e9)):
        before = (s.copy(), e.copy())
        got, want = merge_intervals(s, e), _merge_by_reduction(s, e)
        assert got[0].dtype == want[0].dtype and np.array_equal(got[0], want[0])
        assert np.array_equal(got[1], want[1])
        assert np.array_equal(s, before[0]) and np.array_equal(e, before[1], equal_nan=True)


def test_coarsen_groups_end_with_their_last_block():
    """The coarsened intervals of real kernels' blocks: each group of blocks ends where the largest end
    among them does (the reduction the gather of the last block's end stands for)."""
    from analyzer.loading import load_trace
    from analyzer.testing import real_trace

    k = load_trace(real_trace("tiny_kernels")).kernels
    s, e = merge_intervals(k["start"].to_numpy(float), k["end"].to_numpy(float))
    for limit in (2, 100, len(s) // 2, len(s) - 1):  # (called with fewer than the blocks)
        s2, e2 = _coarsen(s, e, limit)
        firsts = np.searchsorted(s, s2)
        assert np.array_equal(s[firsts], s2) and np.array_equal(np.maximum.reduceat(e, firsts), e2)
        assert len(s2) <= limit
