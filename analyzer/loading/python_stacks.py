"""Python call stacks of CUDA API calls from the Python function intervals a profiler recorded.

torch.profiler with ``with_stack=True`` writes one ``python_function`` event per Python call
(``workloads/host_sync.py(51): step_sync``, ``<built-in method item of Tensor object at 0x...>``),
nested in time on the thread that ran them. The stack of a CUDA API call is the chain of Python calls
open on its thread when it started: the innermost open interval and its ancestors.

:func:`python_call_stacks` turns those intervals into the trace model's ``stacks`` (source ``python``,
one chain per distinct stack, depth 0 = innermost frame) and ``api_stacks`` (one row per API call that
had Python frames open). Loaders call it; facts read the frames (analyzer/facts/stacks.py).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.loading import attribution as attr
from analyzer.loading.common import text_as_object
from analyzer.loading.model import API_STACK_COLUMNS, STACK_COLUMNS, empty_frame

#: ``file.py(42): function`` (torch.profiler's spelling of a Python frame)
_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.*)$")


def parse_frame(name: str) -> tuple[str, str, int]:
    """``(file, function, line)`` of one Python frame name; built-ins keep their text as the function,
    with no file and line -1."""
    m = _FRAME.match(name)
    if m is None:
        return "", name, -1
    return m.group("file"), m.group("func"), int(m.group("line"))


def python_call_stacks(
    pid: np.ndarray, tid: np.ndarray, start: np.ndarray, end: np.ndarray, name: np.ndarray,
    api: pd.DataFrame,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(stacks, api_stacks)`` for the API calls in ``api`` (columns start, pid, tid,
    correlation_id, name) from Python call intervals (equal-length arrays; times in the same clock as
    ``api``'s starts)."""
    n = len(start)
    if n == 0 or api.empty:
        return empty_frame(STACK_COLUMNS), empty_frame(API_STACK_COLUMNS)
    pid = np.asarray(pid, dtype=np.int64)
    tid = np.asarray(tid, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    a_pid = api["pid"].to_numpy(dtype=np.int64)
    a_tid = api["tid"].to_numpy(dtype=np.int64)
    a_start = api["start"].to_numpy(dtype=np.int64)

    # one key per (pid, tid) over both tables
    pairs = np.concatenate([np.stack([pid, tid], 1), np.stack([a_pid, a_tid], 1)])
    _, inverse = np.unique(pairs, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.int64)
    key, a_key = inverse[:n], inverse[n:]

    order = np.lexsort((-end, start, key))  # by thread, start, outer first
    pid, key, start, end, name = pid[order], key[order], start[order], end[order], np.asarray(name)[order]
    depth, parent, crossed = attr.nest_ranges(key, start, end)
    timeline = attr.NvtxTimeline(key, pid, start, end, depth, parent, crossed)
    # Python frames open on the calling thread when the call started (intervals that end exactly at
    # the call's start are closed: NvtxTimeline's convention)
    innermost = timeline.thread_at(a_key, a_start)
    has = innermost >= 0
    if not has.any():
        return empty_frame(STACK_COLUMNS), empty_frame(API_STACK_COLUMNS)

    # a path id per interval: equal ids <=> equal chains of frame names up to the root
    name_code, names = pd.factorize(pd.Series(name, dtype=object), sort=False)
    name_code = name_code.astype(np.int64)
    path = np.full(n, -1, dtype=np.int64)
    path_name: list[np.ndarray] = []
    path_parent: list[np.ndarray] = []
    next_id = 0
    for d in range(int(depth.max()) + 1 if n else 0):
        rows = np.flatnonzero(depth == d)
        if not len(rows):
            continue
        par = parent[rows]
        ppath = np.where(par >= 0, path[np.maximum(par, 0)], -1)
        pair = ppath * (len(names) + 1) + name_code[rows]
        codes, uniq = pd.factorize(pair, sort=False)
        path[rows] = codes + next_id
        path_name.append(uniq % (len(names) + 1))
        path_parent.append(uniq // (len(names) + 1))
        next_id += len(uniq)
    p_name = np.concatenate(path_name)
    p_parent = np.concatenate(path_parent)

    # chain ids: the distinct paths the API calls stopped in, numbered by first use
    call_path = path[innermost[has]]
    used, chain_of_call = np.unique(call_path, return_inverse=True)
    chain_ids = np.arange(len(used), dtype=np.int64)
    parsed = [parse_frame(str(s)) for s in names]
    rows_out: dict[str, list[object]] = {c: [] for c in STACK_COLUMNS}
    for cid, p in zip(chain_ids.tolist(), used.tolist()):
        d = 0
        while p >= 0:
            file, func, line = parsed[int(p_name[p])]
            rows_out["source"].append("python")
            rows_out["chain_id"].append(cid)
            rows_out["depth"].append(d)
            rows_out["symbol"].append(func)
            rows_out["module"].append(file)
            rows_out["line"].append(line)
            rows_out["unresolved"].append(0)
            p = int(p_parent[p])
            d += 1
    stacks = pd.DataFrame(rows_out)[list(STACK_COLUMNS)]
    for c in ("chain_id", "depth", "line", "unresolved"):
        stacks[c] = stacks[c].astype(np.int64)
    picked = api.loc[has]
    api_stacks = pd.DataFrame({
        "start": picked["start"].to_numpy(dtype=np.int64),
        "pid": picked["pid"].to_numpy(dtype=np.int64),
        "tid": picked["tid"].to_numpy(dtype=np.int64),
        "correlation_id": picked["correlation_id"].to_numpy(dtype=np.int64),
        "name": picked["name"].astype(object).to_numpy(),
        "chain_id": chain_ids[chain_of_call.reshape(-1)],
        "source": "python",
    })[list(API_STACK_COLUMNS)]
    return text_as_object(stacks), text_as_object(api_stacks)
