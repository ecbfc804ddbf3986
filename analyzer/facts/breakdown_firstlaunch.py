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
    k_name, names = pd.factorize(column(kernels, "name", ""))
    a_pid = _ids(api, "pid", rows)
    name = _single_kernel_names(_ids(kernels, "pid"), _ids(kernels, "correlation_id"), k_name, a_pid,
                                _ids(api, "correlation_id", rows))
    hit = np.flatnonzero(name >= 0)
    if not len(hit):
        return none
    rows, dur, name, a_pid = rows[hit], dur[hit], name[hit], a_pid[hit]
    del hit
    typical_all: float | None = None  # the median launch call: read only for a kernel launched once
    # per (process, kernel name) its launch calls by start (ties: by row): the first one against the
    # median of the others. The pair as one small code where processes and names are few (a stable sort
    # of 16-bit codes is a radix sort), else as one int64, as a (process, correlation id) key is made
    pid_code, pids = pd.factorize(a_pid)
    if len(pids) * (len(names) + 1) < 2**16:
        pair = (pid_code * (len(names) + 1) + name).astype(np.uint16)
    else:
        pair = correlation_key(a_pid, name)
    del a_pid, pid_code
    start = a_start[rows]
    if len(start) > 1 and bool((start[1:] >= start[:-1]).all()):  # calls recorded in start order
        order = np.argsort(pair, kind="stable")
    else:
        order = np.lexsort((start, pair))
    del start
    sorted_pair = pair[order]
    heads = np.flatnonzero(np.r_[True, sorted_pair[1:] != sorted_pair[:-1]])
    del sorted_pair, pair
    ends = np.r_[heads[1:], len(order)]
    long = dur[order[heads]] >= FIRST_LAUNCH_MIN_NS  # few: the loop below runs over long first launches
    out = []
    for h, e in zip(heads[long].tolist(), ends[long].tolist()):
        first = order[h]
        later = dur[order[h + 1:e]]
        if len(later):
            typical = float(np.median(later))
        else:
            if typical_all is None:
                typical_all = float(np.median(dur))
            typical = typical_all
        if dur[first] >= FIRST_LAUNCH_FACTOR * typical:
            out.append(int(rows[first]))
    return np.array(sorted(out), dtype=np.int64)


def _ids(frame: pd.DataFrame, name: str, rows: np.ndarray | None = None) -> np.ndarray:
    """Integer column ``name`` of ``frame`` (-1 where missing or absent) at ``rows`` (all: None), as int64:
    an integer column is gathered before it is widened (no whole-column copies of millions of calls)."""
    if name not in frame.columns:
        return np.full(len(frame) if rows is None else len(rows), -1, dtype=np.int64)
    values = frame[name]
    arr = values.to_numpy() if values.dtype.kind in "iu" else values.fillna(-1).to_numpy(dtype=np.int64)
    return (arr if rows is None else arr[rows]).astype(np.int64, copy=False)


def _single_kernel_names(k_pid: np.ndarray, k_corr: np.ndarray, k_name: np.ndarray, a_pid: np.ndarray,
                         a_corr: np.ndarray) -> np.ndarray:
    """Per call ``(a_pid, a_corr)``: the name code (``k_name``) of the one kernel with that process and
    correlation id, -1 where no kernel or several have it (or the call has no id)."""
    out = np.full(len(a_corr), -1, dtype=np.int64)
    ok = k_corr >= 0
    if not ok.any() or not len(a_corr):
        return out
    if not ok.all():
        k_pid, k_corr, k_name = k_pid[ok], k_corr[ok], k_name[ok]
    k_key = correlation_key(k_pid, k_corr)
    # the keys held by one kernel each: sorted (any sort: a key kept has one row), unequal to both neighbours;
    # kernels recorded in correlation order (nsys) are sorted already: no sort, no gather
    order = None
    if len(k_key) >= 2 and not bool((k_key[1:] >= k_key[:-1]).all()):
        order = np.argsort(k_key)
        k_key = k_key[order]
    one = np.ones(len(k_key), dtype=bool)
    one[1:] &= k_key[1:] != k_key[:-1]
    one[:-1] &= k_key[:-1] != k_key[1:]
    if one.all():  # every key held by one kernel (nsys: a correlation id per kernel): no copies
        uniq, name_of = k_key, (k_name if order is None else k_name[order])
    else:
        uniq, name_of = k_key[one], k_name[one if order is None else order[one]]
    del k_key, order, one
    if not len(uniq):
        return out
    a_key = correlation_key(a_pid, a_corr)
    at = np.minimum(np.searchsorted(uniq, a_key), len(uniq) - 1)
    hit = (a_corr >= 0) & (uniq[at] == a_key)
    out[hit] = name_of[at[hit]]  # -1 where the kernel has no name
    return out
