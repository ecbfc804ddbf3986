"""The step-time statistics against brute force and published tables (no scipy in the core install)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from analyzer.diff import stats


@pytest.mark.parametrize("n,m", [(1, 1), (2, 3), (4, 4), (5, 3), (6, 5)])
def test_exact_u_distribution_matches_enumeration(n: int, m: int) -> None:
    counts = np.zeros(n * m + 1)
    for chosen in itertools.combinations(range(n + m), m):  # positions of HEAD's values in the order
        heads = set(chosen)
        u = sum(1 for j in heads for i in range(n + m) if i not in heads and i < j)
        counts[u] += 1
    assert np.allclose(stats._u_counts(n, m), counts)


@pytest.mark.parametrize("n,critical", [(5, 2), (8, 13), (10, 23), (12, 37), (20, 127)])
def test_critical_values_match_the_published_table(n: int, critical: int) -> None:
    """Two-sided alpha = 0.05 critical values of U for equal sample sizes (standard Mann-Whitney
    tables, e.g. Siegel & Castellan, Table J)."""
    assert stats._critical(n, n, 0.05, exact=True) == critical


def test_p_value_of_complete_separation() -> None:
    base = np.array([10.0, 11, 12, 13, 14])
    head = np.array([1.0, 2, 3, 4, 5])
    _u, p, exact = stats.mann_whitney(base, head)
    assert exact and p == pytest.approx(2 / math.comb(10, 5))


def test_hodges_lehmann_ratio_and_interval() -> None:
    rng = np.random.default_rng(7)
    base = 30.0 * np.exp(rng.normal(0, 0.03, 12))
    head = 0.45 * 30.0 * np.exp(rng.normal(0, 0.03, 12))
    est = stats.compare_steps(base, head)
    assert est.ratio == pytest.approx(np.exp(np.median(np.log(np.divide.outer(head, base)))), rel=1e-12)
    assert est.ci_low < est.ratio < est.ci_high < 1.0
    assert 0.40 < est.ratio < 0.50
    assert est.rejects and est.p_value < 1e-5 and est.exact


def test_interval_and_test_agree() -> None:
    """The interval excludes 1 exactly when the exact test rejects at alpha (it is the test inverted)."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, m = rng.integers(5, 15, 2)
        base = np.exp(rng.normal(0, 0.1, n))
        head = np.exp(rng.normal(rng.normal(0, 0.08), 0.1, m))
        est = stats.compare_steps(base, head)
        assert est.rejects == (est.p_value <= 0.05 + 1e-12), (est.p_value, est.ci_low, est.ci_high)


def test_too_small_samples_give_no_interval() -> None:
    est = stats.compare_steps(np.array([10.0, 11, 12]), np.array([1.0, 2, 3]))
    assert est.min_p_value > 0.05 and not est.rejects
    assert est.ci_low == 0.0 and math.isinf(est.ci_high)


def test_large_samples_use_bisection_with_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    base = np.exp(rng.normal(0, 0.05, 300))
    head = np.exp(rng.normal(0.02, 0.05, 400))
    direct = stats.compare_steps(base, head)
    monkeypatch.setattr(stats, "DIRECT_PAIRS", 10)
    bisected = stats.compare_steps(base, head)
    assert bisected.ratio == pytest.approx(direct.ratio, rel=1e-9)
    assert bisected.ci_low == pytest.approx(direct.ci_low, rel=1e-9)
    assert bisected.ci_high == pytest.approx(direct.ci_high, rel=1e-9)
    assert not direct.exact  # 300 steps: normal approximation


def test_ties_use_the_corrected_normal_approximation() -> None:
    base = np.array([5.0, 5, 5, 6, 6, 6, 7])
    head = np.array([5.0, 6, 6, 7, 7, 7, 8])
    _u, p, exact = stats.mann_whitney(base, head)
    assert not exact and 0.05 < p < 0.5


def test_normal_quantile() -> None:
    assert stats._normal_quantile(0.975) == pytest.approx(1.959963984540054, abs=1e-9)
    assert stats._normal_quantile(0.001) == pytest.approx(-3.090232306167813, abs=1e-9)


def test_drift() -> None:
    assert stats.drift(np.array([1.0, 1, 1, 2, 2, 2])) == pytest.approx(1.0)
    assert stats.drift(np.array([1.0, 2, 3])) is None
