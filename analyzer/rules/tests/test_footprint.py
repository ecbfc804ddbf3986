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
