"""One-time work inside a kernel's first launch call (issue 27): a helper of
:class:`analyzer.facts.breakdown._HostCalls`, split from :mod:`analyzer.facts.breakdown`.

The first launch of a kernel function in a process may load its code object (a lazily loaded module, a
ROCm code object, a JIT-compiled kernel): milliseconds inside one ``cudaLaunchKernel`` or
``hipLaunchKernel`` that a CUDA graph or a fused kernel would not remove, since it never recurs. The
absolute threshold of :data:`analyzer.facts.breakdown.ONE_TIME_CALL_NS` catches the seconds-long ones; a
kernel's first launch is one-time work whatever its length when it takes far longer than that kernel's
later launches (:data:`FIRST_LAUNCH_FACTOR` times their median, and :data:`FIRST_LAUNCH_MIN_NS` or more).
A launch that is not the first of its kernel never is.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import column
from analyzer.loading.attribution import correlation_key

#: a kernel's first launch call is one-time work when it lasts this long or more (ns) ...
FIRST_LAUNCH_MIN_NS = 1_000_000
#: ... and this many times the median of the kernel's later launch calls (the median launch call of the
#: trace when the kernel is launched once)
FIRST_LAUNCH_FACTOR = 20


def first_launch_detail(call: str) -> str:
    """Detail of the ``setup`` time inside a kernel's first, far longer launch call."""
    return f"{call} (one-time: a kernel's first launch)"


def first_launch_rows(api: pd.DataFrame, kernels: pd.DataFrame, launch: np.ndarray) -> np.ndarray:
    """Rows of ``api`` that are the first launch call of their kernel function (same kernel name, same
    process) and last at least :data:`FIRST_LAUNCH_MIN_NS` and :data:`FIRST_LAUNCH_FACTOR` times the
    kernel's typical launch call. ``launch``: per ``api`` row, whether it is a call that issues work
    (only those launching exactly one kernel of ``kernels`` are launches of a kernel function)."""
    none = np.empty(0, dtype=np.int64)
    rows = np.flatnonzero(launch)
    if api.empty or kernels.empty or not len(rows):
        return none
    a_start = api["start"].to_numpy(dtype=np.int64)
    dur = api["end"].to_numpy(dtype=np.int64)[rows] - a_start[rows]
    if not (dur >= FIRST_LAUNCH_MIN_NS).any():  # no launch call long enough: nothing to join
        return none
    k_corr = column(kernels, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64)
    ok = k_corr >= 0
    if not ok.any():
        return none
    k_key = correlation_key(column(kernels, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)[ok], k_corr[ok])
    k_name = pd.factorize(column(kernels, "name", ""))[0][ok]
    # a call launching one kernel: its (pid, correlation id) is held by exactly one kernel
    uniq, first_at, counts = np.unique(k_key, return_index=True, return_counts=True)
    one = counts == 1
    uniq, name_of = uniq[one], k_name[first_at[one]]
    if not len(uniq):
        return none
    a_corr = column(api, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64)[rows]
    a_pid = column(api, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)[rows]
    a_key = correlation_key(a_pid, a_corr)
    at = np.minimum(np.searchsorted(uniq, a_key), len(uniq) - 1)
    hit = (a_corr >= 0) & (uniq[at] == a_key) & (name_of[at] >= 0)
    if not hit.any():
        return none
    rows, a_pid, dur, name = rows[hit], a_pid[hit], dur[hit], name_of[at[hit]]
    typical_all = float(np.median(dur))
    # per (process, kernel name) its launch calls by start: the first one against the median of the others
    order = np.lexsort((a_start[rows], name, a_pid))
    same = (a_pid[order][1:] == a_pid[order][:-1]) & (name[order][1:] == name[order][:-1])
    heads = np.flatnonzero(np.r_[True, ~same])
    ends = np.r_[heads[1:], len(order)]
    long = dur[order[heads]] >= FIRST_LAUNCH_MIN_NS  # few: the loop below runs over long first launches
    out = []
    for h, e in zip(heads[long].tolist(), ends[long].tolist()):
        first = order[h]
        later = dur[order[h + 1:e]]
        typical = float(np.median(later)) if len(later) else typical_all
        if dur[first] >= FIRST_LAUNCH_FACTOR * typical:
            out.append(int(rows[first]))
    return np.array(sorted(out), dtype=np.int64)
