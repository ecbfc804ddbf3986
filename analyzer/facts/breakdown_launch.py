"""What the GPU waited for with work already queued, and when each op's launch call ended: helpers of
:func:`analyzer.facts.breakdown.timeline_segments`, split from :mod:`analyzer.facts.breakdown`."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import FAR_NS, column
from analyzer.facts.registry import FactContext

#: the facts that look launch calls up (:func:`submission`): the calls' key table is kept until both are made
LAUNCH_KEY_USERS = ("timeline_segments", "copy_stalls")

_STREAM_WAIT = re.compile(r"StreamWaitEvent|StreamWaitValue|cuStreamWait")


def wait_details(ctx: FactContext, ops: pd.DataFrame, pos: np.ndarray, code,  # type: ignore[no-untyped-def]
                 cache: dict | None = None) -> np.ndarray:
    """Detail codes of idle time the GPU spent with ``ops`` rows ``pos`` already queued: ``stream S waited
    on an event (cudaStreamWaitEvent)`` when the thread that launched the op made a stream-wait call
    since its previous launch (the op's stream was told to wait for work elsewhere: another stream, a
    graph, another process's event), else ``queued (another stream or an event)``. ``cache``: a dict kept
    between calls for the same ``ops`` (the idle gaps are classified in chunks), where the stream-wait
    calls and each thread's sorted launches are kept instead of found again per call."""
    plain = code("queued (another stream or an event)")
    out = np.full(len(pos), plain, dtype=np.int64)
    api = ctx.trace.api
    if not len(pos) or api.empty:
        return out
    cache = {} if cache is None else cache
    if "calls" not in cache:
        from analyzer.facts.api import api_base_codes

        codes, base = api_base_codes(ctx.store)
        is_wait_name = np.array([bool(b) and bool(_STREAM_WAIT.search(str(b))) for b in base], dtype=bool)
        wait_rows = np.flatnonzero(is_wait_name[codes]) if len(codes) else np.empty(0, dtype=np.int64)
        cache["calls"] = None
        if len(wait_rows):
            cache["calls"] = (api["tid"].to_numpy(dtype=np.int64)[wait_rows],
                              api["start"].to_numpy(dtype=np.int64)[wait_rows], base[codes[wait_rows]],
                              ops["tid"].to_numpy(dtype=np.int64), ops["api_start"].to_numpy(dtype=np.int64),
                              column(ops, "stream", -1).fillna(-1).to_numpy(dtype=np.int64))
    if cache["calls"] is None:
        return out
    w_tid, w_start, w_name, o_tid, o_launch, stream = cache["calls"]
    for tid in np.unique(o_tid[pos]).tolist():
        mine = np.flatnonzero(o_tid[pos] == tid)
        if ("thread", tid) not in cache:
            wsel = np.flatnonzero(w_tid == tid)
            order = wsel[np.argsort(w_start[wsel], kind="stable")]
            cache[("thread", tid)] = (np.sort(o_launch[(o_tid == tid) & (o_launch >= 0)]), order)
        launches, order = cache[("thread", tid)]
        if not len(order) or not len(launches):
            continue
        ws = w_start[order]
        launch = o_launch[pos[mine]]
        k = np.searchsorted(launches, launch, side="left")
        prev = np.where(k > 0, launches[np.maximum(k - 1, 0)], -FAR_NS)
        j = np.searchsorted(ws, launch, side="left") - 1
        hit = (launch >= 0) & (j >= 0) & (ws[np.maximum(j, 0)] > prev)
        for i, jj in zip(mine[hit].tolist(), j[hit].tolist()):  # distinct texts are few: codes are cached
            st = int(stream[pos[i]])
            where = f"stream {st}" if st >= 0 else "its stream"
            out[i] = code(f"{where} waited on an event ({w_name[order[jj]]})")
    return out


def submission(ctx: FactContext, ops: pd.DataFrame, pos: np.ndarray) -> np.ndarray:
    """End of the launch call of ``ops`` rows ``pos`` (the call start when its end is unknown, -1
    without a launch call)."""
    out = ops["api_start"].to_numpy(dtype=np.int64)[pos].copy()
    api = ctx.trace.api
    if api.empty or not len(pos):
        return out
    want_pid = ops["pid"].to_numpy(dtype=np.int64)[pos]
    want_corr = ops["correlation_id"].to_numpy(dtype=np.int64)[pos]
    table = ctx.store.memo("launch_call_keys", lambda: _call_keys(api), users=LAUNCH_KEY_USERS)
    if table is not None and (not len(want_pid) or (-(2**31) <= want_pid.min() and want_pid.max() < 2**31)):
        # the calls' (pid, correlation id) keys distinct and in row order (nsys API tables): each op
        # finds its call by one binary search, nothing hashed or sorted; the keys made once per trace
        # (the breakdown, its thread handoffs and copy_stalls all ask), freed after the last of them
        key, api_end = table
        want_key = (want_pid << 32) | np.where(want_corr >= 0, want_corr, 0)
        at = np.minimum(np.searchsorted(key, want_key), len(key) - 1)
        has = (key[at] == want_key) & (want_corr >= 0) & (out >= 0)
        out[has] = api_end[at[has]]
        return out
    corr = api["correlation_id"].to_numpy(dtype=np.int64)
    hit = np.flatnonzero(np.isin(corr, want_corr) & (corr >= 0))
    if not len(hit):
        return out
    pid = column(api, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)[hit]
    corr = corr[hit]
    api_end = api["end"].to_numpy(dtype=np.int64)[hit]
    # one int64 key per (pid, correlation id): pid in the high half, the id (>= 0, 32 bits) in the low
    if not (len(pid) and -(2**31) <= min(pid.min(), want_pid.min()) and max(pid.max(), want_pid.max()) < 2**31
            and corr.max() < 2**32):
        return _submission_merge(out, want_pid, want_corr, pid, corr, api_end)
    key = (pid << 32) | corr
    order = np.argsort(key, kind="stable")
    key, api_end = key[order], api_end[order]
    last = np.r_[key[1:] != key[:-1], True]  # the last call of each key, as drop_duplicates(keep="last")
    key, api_end = key[last], api_end[last]
    want_key = (want_pid << 32) | np.where(want_corr >= 0, want_corr, 0)
    at = np.minimum(np.searchsorted(key, want_key), len(key) - 1)
    has = (key[at] == want_key) & (want_corr >= 0) & (out >= 0)
    out[has] = api_end[at[has]]
    return out


def _call_keys(api: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """``(key, end)`` of the API calls, key ``pid << 32 | correlation id``, when those keys are distinct
    and increase in row order (nsys API tables: one binary search per op finds its launch call); None
    otherwise (ids or pids beyond the key's halves, or calls out of key order)."""
    corr = api["correlation_id"].to_numpy(dtype=np.int64)
    if not (len(corr) and corr.min() >= 0 and corr.max() < 2**32):
        return None
    pid = column(api, "pid", -1).fillna(-1).to_numpy(dtype=np.int64)
    if not (-(2**31) <= pid.min() and pid.max() < 2**31):
        return None
    key = (pid << 32) | corr
    if len(key) >= 2 and not bool((key[1:] > key[:-1]).all()):
        return None
    return key, api["end"].to_numpy(dtype=np.int64)


def _submission_merge(out: np.ndarray, want_pid: np.ndarray, want_corr: np.ndarray, pid: np.ndarray,
                      corr: np.ndarray, api_end: np.ndarray) -> np.ndarray:
    """:func:`submission` by a frame merge, for ids beyond what its integer key holds."""
    want = pd.DataFrame({"pid": want_pid, "correlation_id": want_corr})
    table = pd.DataFrame({"pid": pid, "correlation_id": corr, "_end": api_end})
    table = table.drop_duplicates(["pid", "correlation_id"], keep="last")
    joined = want.merge(table, on=["pid", "correlation_id"], how="left")
    end = joined["_end"].to_numpy(dtype=np.float64)
    has = ~np.isnan(end) & (out >= 0)
    out[has] = end[has].astype(np.int64)
    return out
