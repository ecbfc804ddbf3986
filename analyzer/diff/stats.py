"""Is HEAD's step time different from BASE's, by how much, and how sure are we?

Method (stated in every diff report):

* Step times are compared on a log scale, so a change is a *ratio* (HEAD/BASE) and a step twice as slow
  weighs as much as one twice as fast.
* **Estimate:** the Hodges-Lehmann estimator of the shift between the two samples of log step times,
  i.e. the median of the ``n x m`` pairwise ratios ``head_j / base_i``. It is robust to outlying steps
  (one step that paid a garbage collection or a page fault moves it little) and needs no assumption
  about the shape of the distribution.
* **Confidence interval:** the distribution-free interval that goes with it (Moses; Lehmann 1975,
  ch. 2): the ``C+1``-th smallest and ``C+1``-th largest pairwise log ratios, ``C`` the largest value
  with ``P(U <= C) <= alpha/2`` under the Mann-Whitney null distribution of ``U``. The null
  distribution is exact (counted) for up to 50 steps per run without ties, else the normal
  approximation with the tie correction.
* **Test:** the two-sided Mann-Whitney (Wilcoxon rank-sum) test. The interval excludes 1 exactly when
  the test rejects at ``alpha``.

What the statistics cannot see: steps of one run are not independent draws (clocks ramp, caches warm,
the allocator grows), and two separate runs differ by more than the steps of one run (another machine,
another GPU clock state, another CPU speed, another memory layout). So a change is only called
**significant** when, besides ``p < alpha``, (1) each run has at least :data:`MIN_STEPS` steps, and (2) the
estimated change is at least the *noise floor*, the largest of (on the log scale, so that a floor of
1.46x covers -32% and +46% alike)

* the user's minimum effect (``--min-effect``, 3% by default): GPU-bound loops run again on another
  machine move their median step by up to 1.8%;
* the drift each run shows within itself (median of its second half of steps against its first half):
  a run whose own steps moved 19% cannot show a 5% change;
* the **run-to-run variation of host-bound time**: :data:`HOST_RUN_TO_RUN` times the larger host share
  of the two runs (the share of the step the GPU sat idle, :func:`host_share`). Host-bound loops (Python
  launching kernels one by one, data loading, synchronizing every step) run at the host's speed, which
  varies between two runs far more than within one: ``optimizer_loop`` ran 35.0 ms per step and, run again
  on the same machine, 48.0 ms, every step of the second run slower than every step of the first. No
  within-run statistic foresees that (its steps spread 3.7-9.1%), the GPU-busy share does: GPU-bound
  loops repeat within 2%.

:data:`HOST_RUN_TO_RUN` is calibrated on every committed repeat pair (the same program run twice) and
checked against every committed pathology/twin pair by ``tests/diff_calibration.py``, which writes the
table in ``docs/diff-calibration.md`` (a test checks it is current): the largest run-to-run change per
unit of host share seen on the repeats, with :data:`HEADROOM`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MIN_STEPS = 5  # per run, to call any change significant
#: headroom over the largest run-to-run change per unit of host share seen on the committed repeats
HEADROOM = 1.2
#: run-to-run variation of a step's host-bound part, log-ratio per unit of host share: the largest
#: ``|log(HL ratio)| / host share`` over the committed repeat pairs that --min-effect and drift do not
#: cover (0.335: optimizer_loop_run2 against optimizer_loop, 48.0 -> 35.0 ms with the GPU idle 93% of
#: the step) times :data:`HEADROOM`; ``tests/diff_calibration.py --check`` recomputes it
HOST_RUN_TO_RUN = 0.402
EXACT_MAX = 50  # steps per run up to which the Mann-Whitney null distribution is counted exactly
DIRECT_PAIRS = 1_000_000  # up to this many pairs the pairwise ratios are materialized


@dataclass(frozen=True)
class ShiftEstimate:
    """HEAD/BASE step-time comparison. Ratios are HEAD/BASE (0.45 = HEAD takes 45% of BASE's time)."""

    n_base: int
    n_head: int
    base_median: float
    head_median: float
    ratio: float  # Hodges-Lehmann estimate of HEAD/BASE
    ci_low: float  # ratio interval; 0 / inf when the samples are too small for any interval
    ci_high: float
    p_value: float  # two-sided Mann-Whitney
    confidence: float  # e.g. 0.95
    exact: bool  # exact null distribution (else normal approximation)
    min_p_value: float  # the smallest p-value these sample sizes can give

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.ratio - 1.0)

    @property
    def ci_low_pct(self) -> float:
        return 100.0 * (self.ci_low - 1.0)

    @property
    def ci_high_pct(self) -> float:
        return 100.0 * (self.ci_high - 1.0) if math.isfinite(self.ci_high) else math.inf

    @property
    def rejects(self) -> bool:
        """The test rejects "no shift" at the confidence level (the interval excludes 1)."""
        return self.ci_low > 1.0 or self.ci_high < 1.0


def median(values: np.ndarray) -> float:
    return float(np.median(values)) if len(values) else math.nan


def drift(values: np.ndarray) -> float | None:
    """How much a run's steps moved within the run: median of the second half of its steps over the
    median of the first half, minus 1 (``0.19`` = the later steps are 19% slower). None below 6
    steps."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 6:
        return None
    half = len(v) // 2
    first, second = float(np.median(v[:half])), float(np.median(v[len(v) - half:]))
    if first <= 0:
        return None
    return second / first - 1.0


def spread(values: np.ndarray) -> float | None:
    """A run's step-time spread: interquartile range over median (``0.1`` = the middle half of the steps
    spans 10% of the median). None below :data:`MIN_STEPS` steps."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < MIN_STEPS:
        return None
    q1, med, q3 = (float(x) for x in np.percentile(v, [25, 50, 75]))
    return (q3 - q1) / med if med > 0 else None


def host_share(gpu_busy_ns: int | None, analyzed_ns: int, devices: int) -> float | None:
    """The share of the analysis window the GPUs sat idle (0 GPU-bound .. 1 host-bound); None unknown."""
    if gpu_busy_ns is None or analyzed_ns <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - gpu_busy_ns / (analyzed_ns * max(1, devices))))


def separated(base: np.ndarray, head: np.ndarray) -> int:
    """-1 when every HEAD step is shorter than every BASE step, 1 when every one is longer, else 0."""
    if not len(base) or not len(head):
        return 0
    if float(np.max(head)) < float(np.min(base)):
        return -1
    if float(np.min(head)) > float(np.max(base)):
        return 1
    return 0


def log_floor(pct: float) -> float:
    """A floor in percent (``46`` = 1.46x) on the log scale."""
    return math.log1p(max(pct, 0.0) / 100.0)


def floor_pct(log_value: float) -> float:
    """A log-scale floor as the percent change it allows upwards (``0.38`` -> ``46``)."""
    return 100.0 * math.expm1(log_value)


@lru_cache(maxsize=64)
def _u_counts(n: int, m: int) -> tuple[float, ...]:
    """Number of orderings of ``n`` + ``m`` distinct values with Mann-Whitney ``U = u``, u = 0..n*m
    (the coefficients of the Gaussian binomial [n+m choose n]_q), by the recurrence
    ``f(u; i, j) = f(u - j; i - 1, j) + f(u; i, j - 1)``. Floats: only ratios are used, and a sum of
    positive terms loses no precision that matters here."""
    # row[j] = distribution for (i, j); start with i = 0: U is always 0
    row = [np.ones(1) for _ in range(m + 1)]
    for i in range(1, n + 1):
        new = [np.ones(1)]  # (i, 0): U = 0
        for j in range(1, m + 1):
            size = i * j + 1
            f = np.zeros(size)
            up = row[j]  # (i - 1, j), shifted by j
            f[j: j + len(up)] += up
            left = new[j - 1]  # (i, j - 1)
            f[: len(left)] += left
            new.append(f)
        row = new
    return tuple(row[m].tolist())


def _u_cdf(n: int, m: int) -> np.ndarray:
    counts = np.asarray(_u_counts(n, m))
    return np.cumsum(counts) / counts.sum()


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9 after
    one Newton step)."""
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    lo = 0.02425
    if p < lo:
        q = math.sqrt(-2 * math.log(p))
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    elif p <= 1 - lo:
        q = p - 0.5
        r = q * q
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / \
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    else:
        q = math.sqrt(-2 * math.log(1 - p))
        x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / \
            ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1)
    e = 0.5 * math.erfc(-x / math.sqrt(2)) - p  # one Newton step
    return x - e * math.sqrt(2 * math.pi) * math.exp(x * x / 2)


def _ranks(values: np.ndarray) -> tuple[np.ndarray, float]:
    """Mid-ranks (1-based) and the tie term ``sum(t^3 - t)``."""
    order = np.argsort(values, kind="stable")
    sorted_v = values[order]
    ranks = np.empty(len(values))
    starts = np.flatnonzero(np.concatenate(([True], sorted_v[1:] != sorted_v[:-1])))
    ends = np.append(starts[1:], len(values))
    ties = 0.0
    for a, b in zip(starts, ends):
        ranks[order[a:b]] = (a + b + 1) / 2.0
        t = b - a
        ties += t ** 3 - t
    return ranks, ties


def mann_whitney(base: np.ndarray, head: np.ndarray) -> tuple[float, float, bool]:
    """``(U, two-sided p, exact)``: ``U`` counts the pairs where HEAD's value exceeds BASE's (ties
    count one half)."""
    x = np.asarray(base, dtype=np.float64)
    y = np.asarray(head, dtype=np.float64)
    n, m = len(x), len(y)
    ranks, ties = _ranks(np.concatenate((x, y)))
    u = float(ranks[n:].sum() - m * (m + 1) / 2.0)
    if n <= EXACT_MAX and m <= EXACT_MAX and ties == 0:
        cdf = _u_cdf(n, m)
        k = round(u)
        lower = float(cdf[k])
        upper = 1.0 - (float(cdf[k - 1]) if k > 0 else 0.0)
        return u, min(1.0, 2.0 * min(lower, upper)), True
    total = n + m
    var = n * m / 12.0 * ((total + 1) - ties / (total * (total - 1)))
    if var <= 0:
        return u, 1.0, False
    z = (abs(u - n * m / 2.0) - 0.5) / math.sqrt(var)
    return u, min(1.0, 2.0 * _normal_sf(max(z, 0.0))), False


def _critical(n: int, m: int, alpha: float, exact: bool) -> int:
    """The largest ``C`` with ``P(U <= C) <= alpha / 2``; -1 when even ``U = 0`` is more likely."""
    if exact:
        cdf = _u_cdf(n, m)
        ok = np.flatnonzero(cdf <= alpha / 2.0 + 1e-12)
        return int(ok[-1]) if len(ok) else -1
    z = _normal_quantile(1.0 - alpha / 2.0)
    c = n * m / 2.0 - z * math.sqrt(n * m * (n + m + 1) / 12.0) - 0.5
    return math.floor(c)


def _kth_difference(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """The ``k``-th smallest (1-based) of the ``len(x) * len(y)`` differences ``y_j - x_i``; ``x`` and
    ``y`` sorted. Materialized for small samples, else by bisection on the value with counting by
    binary search (memory O(n + m))."""
    n, m = len(x), len(y)
    if n * m <= DIRECT_PAIRS:
        d = np.subtract.outer(y, x).ravel()
        return float(np.partition(d, k - 1)[k - 1])
    lo, hi = float(y[0] - x[-1]), float(y[-1] - x[0])
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if mid <= lo or mid >= hi:
            break
        count = int((n - np.searchsorted(x, y - mid, side="left")).sum())  # pairs with y - x <= mid
        if count >= k:
            hi = mid
        else:
            lo = mid
    return hi


def compare_steps(base: np.ndarray, head: np.ndarray, confidence: float = 0.95) -> ShiftEstimate:
    """Hodges-Lehmann ratio HEAD/BASE of step times, its distribution-free confidence interval, and the
    Mann-Whitney p-value (see the module docstring). Durations must be positive."""
    b = np.sort(np.asarray(base, dtype=np.float64))
    h = np.sort(np.asarray(head, dtype=np.float64))
    if len(b) == 0 or len(h) == 0 or (b <= 0).any() or (h <= 0).any():
        raise ValueError("compare_steps needs positive step durations on both sides")
    x, y = np.log(b), np.log(h)
    n, m = len(x), len(y)
    alpha = 1.0 - confidence
    _u, p, exact = mann_whitney(x, y)
    total = n * m
    if total % 2:
        shift = _kth_difference(x, y, total // 2 + 1)
    else:
        shift = 0.5 * (_kth_difference(x, y, total // 2) + _kth_difference(x, y, total // 2 + 1))
    c = _critical(n, m, alpha, exact)
    if c < 0:
        low, high = 0.0, math.inf
    else:
        low = math.exp(_kth_difference(x, y, c + 1))
        high = math.exp(_kth_difference(x, y, total - c))
    if n <= EXACT_MAX and m <= EXACT_MAX:
        min_p = min(1.0, 2.0 * float(_u_cdf(n, m)[0]))
    else:
        min_p = 2.0 * _normal_sf((n * m / 2.0 - 0.5) / math.sqrt(n * m * (n + m + 1) / 12.0))
    return ShiftEstimate(
        n_base=n, n_head=m, base_median=median(b), head_median=median(h), ratio=math.exp(shift),
        ci_low=low, ci_high=high, p_value=p, confidence=confidence, exact=exact, min_p_value=min_p,
    )


METHOD = (
    "Hodges-Lehmann estimate of the HEAD/BASE step-time ratio (median of all pairwise ratios) with its "
    "distribution-free {conf:.0%} confidence interval and a two-sided Mann-Whitney test ({dist}); "
    "significant only with at least {min_steps} steps per run, p < {alpha:g} and a change of at least "
    "the noise floor ({floor}; changes compared as ratios, a 1.46x floor covers -32% and +46%)"
)
