"""Where a finding's time lies on the GPU timeline (:class:`analyzer.findings.Footprint`).

The verdict adds findings up as the union of their footprints (:mod:`analyzer.impacts`), so a finding
needs one that holds its impact on the *GPU* timeline, found from the rows it grouped:

- rows with a time and a ``device`` (kernels, copies, idle gaps): their own intervals (``"rows"``);
- rows with a time but no device (host calls: synchronizations, allocations): the timeline segments
  the breakdown charges to those very calls (cause ``host_sync``: the wait inside each, the return
  from it, the refill before its return, detail ``refill (cudaStreamSynchronize)``), told apart from
  the other calls of the rule's source on the same threads (those its ``where`` left out, another
  finding's range or stream); else (calls the breakdown charges nothing: launches...) the GPU idle
  gaps those calls overlap, on the finding's device or on every device (``"host"``): a
  synchronization costs the GPU the idle time around it, not the time the host spent inside the call;
- rows of the timeline breakdown (a ``cause`` per row, no time: ``timeline_breakdown``): the timeline
  segments (``timeline_segments``) of the same device, cause and detail (and step or NVTX range, for
  step and range rows): the exact time the breakdown counted (``"breakdown"``);
- rows without a time (one row per kernel name or per device: occupancy, GPU metrics): the GPU time
  of the finding's scope: the executions of its kernel, else its device's (or every device's) busy
  time (``"scope"``).

Intervals are clipped to the analysis window and merged per device. A footprint holds at most
:data:`MAX_INTERVALS` intervals: past that the shortest spaces between them are closed (a
10-million-kernel rule keeps a bounded footprint; its length then overstates the covered time by the
closed spaces, which lowers the finding's density, never its impact).
"""
from __future__ import annotations

from collections.abc import Callable, Collection
import numpy as np
import pandas as pd

from analyzer.arrays import sorted_distinct
from analyzer.analysis import Window
from analyzer.findings import Footprint, Scope

MAX_INTERVALS = 200_000


#: columns of a rule's rows the footprint reads (the engine keeps them past a rule's ``where``)
COLUMNS = ("start", "end", "duration", "device", "cause", "detail", "scope", "key")


def footprint_columns(columns: Collection[str]) -> tuple[str, ...]:
    """The columns of a source with ``columns`` that the footprint reads (the engine keeps them past a
    rule's ``where``): :data:`COLUMNS`, and for host calls (a time, no device) the thread, which tells
    a finding's calls apart (:func:`_host_waits`); a million kernels' threads are not copied."""
    timed = "start" in columns and ("end" in columns or "duration" in columns)
    return (*COLUMNS, "tid") if timed and "device" not in columns else COLUMNS


#: what a rule may say about where its impact lies (``footprint:`` in the pack): ``auto`` (from its
#: rows, as this module's docstring says) or ``idle_before`` (the GPU idle gap that ends where each of
#: its rows starts: the wait for that op, e.g. the launch overhead of tiny kernels)
FOOTPRINTS = ("auto", "idle_before")


def footprint_reads(columns: Collection[str], scope: str, how: str = "auto") -> tuple[str, ...]:
    """The facts :func:`footprint` reads beyond a rule's own, for a source with ``columns``: none for
    rows with a time and a device, ``gpu_gaps`` for host calls, ``timeline_segments`` for rows of the
    timeline breakdown, else the scope's GPU time (``kernel_categories`` or ``gpu_busy``). A rule
    declares them (``Rule.reads``) so the fact store keeps them until its footprints are made."""
    timed = "start" in columns and ("end" in columns or "duration" in columns)
    if how == "idle_before" and timed and "device" in columns:
        return ("gpu_gaps",)
    if timed:
        return () if "device" in columns else ("gpu_gaps", "timeline_segments")
    if "cause" in columns and "device" in columns:
        return ("timeline_segments",)
    return ("kernel_categories",) if scope == "kernel" else ("gpu_busy",)


def footprint(rows: pd.DataFrame, positions: np.ndarray, scope: Scope, window: Window,
              fact: Callable[[str], pd.DataFrame], how: str = "auto", source: str | None = None,
              times: tuple[np.ndarray, np.ndarray] | None = None) -> Footprint | None:
    """The footprint of the finding that grouped ``rows.iloc[positions]`` (None: not found: a fact it
    needs is missing on this input). ``source``: the fact the rows were taken from (the rule's
    ``source``, before its ``where``): host calls' waits are told apart among its calls. ``times``:
    :func:`row_times` of those rows when the caller has them (read, never modified)."""
    try:
        if times is None:
            times = row_times(rows, positions)
        if how == "idle_before" and times is not None and "device" in rows.columns:
            device = pd.to_numeric(rows["device"].iloc[positions], errors="coerce").fillna(-1).to_numpy("int64")
            return _idle_before(device, times[0], window, fact)
        if times is not None and "device" in rows.columns:
            device = pd.to_numeric(rows["device"].iloc[positions], errors="coerce").fillna(-1).to_numpy("int64")
            return _build(device, *times, window, "rows")
        if times is not None:
            waits = _host_waits(rows, positions, window, fact, source, scope.device)
            return waits if waits is not None else _host(times, scope, window, fact)
        if "cause" in rows.columns and "device" in rows.columns:
            return _breakdown(rows.iloc[positions], window, fact)
        return _scope(scope, window, fact)
    except Exception:  # noqa: BLE001 - a fact this input lacks (a job's cross-rank store, ncu alone): unknown
        return None


def row_times(rows: pd.DataFrame, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(start, end)`` of ``rows.iloc[positions]`` as floats (NaN where not numeric; ``end`` from
    ``start + duration`` without an ``end`` column), None for rows without a time."""
    if "start" not in rows.columns:
        return None
    start = pd.to_numeric(rows["start"].iloc[positions], errors="coerce").to_numpy(float)
    if "end" in rows.columns:
        end = pd.to_numeric(rows["end"].iloc[positions], errors="coerce").to_numpy(float)
    elif "duration" in rows.columns:
        end = start + pd.to_numeric(rows["duration"].iloc[positions], errors="coerce").to_numpy(float)
    else:
        return None
    return start, end


def _idle_before(device: np.ndarray, start: np.ndarray, window: Window,
                 fact: Callable[[str], pd.DataFrame]) -> Footprint:
    """The GPU idle gaps that end where one of the rows starts (same device)."""
    gaps = fact("gpu_gaps")
    g_dev = gaps["device"].to_numpy("int64")
    g_end = gaps["end"].to_numpy("int64")
    hit = _pairs_in(g_dev, g_end, device, np.rint(np.nan_to_num(start, nan=-1)).astype("int64"))
    return _build(g_dev[hit], gaps["start"].to_numpy(float)[hit], g_end[hit].astype(float), window, "idle_before")


#: :func:`_pairs_in` looks pairs up key by key for at most this many distinct keys (devices)
_FEW_KEYS = 64


def _pairs_in(key: np.ndarray, value: np.ndarray, table_key: np.ndarray, table_value: np.ndarray) -> np.ndarray:
    """Whether each ``(key, value)`` pair is among the ``(table_key, table_value)`` pairs (int64): per
    distinct table key (a device), one binary search of the values in that key's sorted table values
    (rows ordered by start need no sort), instead of hashing a million two-level index entries."""
    hit = np.zeros(len(key), dtype=bool)
    if not len(key) or not len(table_key):
        return hit
    keys = sorted_distinct(table_key)
    if len(keys) > _FEW_KEYS:
        return pd.MultiIndex.from_arrays([key, value]).isin(pd.MultiIndex.from_arrays([table_key, table_value]))
    for k in keys.tolist():
        rows = np.flatnonzero(key == k)
        if not len(rows):
            continue
        table = table_value[table_key == k] if len(keys) > 1 else table_value
        if len(table) > 1 and not bool((table[1:] >= table[:-1]).all()):
            table = np.sort(table)
        v = value[rows]
        at = np.minimum(np.searchsorted(table, v), len(table) - 1)
        hit[rows] = table[at] == v
    return hit


def _host_waits(rows: pd.DataFrame, positions: np.ndarray, window: Window,
                fact: Callable[[str], pd.DataFrame], source: str | None, device: int | None) -> Footprint | None:
    """The ``host_sync`` timeline segments charged to the calls the finding grouped (the wait in each,
    the return from it, the refill before its return: :func:`analyzer.facts.breakdown_sync.owning_calls`,
    told apart from the other calls of ``source``, the rule's fact: the same names on the same threads,
    left out by its ``where`` or another finding's scope); None when the rows are no calls (no ``name``
    and ``tid``) or own no such segment."""
    from analyzer.facts.breakdown_sync import charged_segments

    if source is None or "name" not in rows.columns or "tid" not in rows.columns:
        return None
    try:
        seg = fact("timeline_segments")
        calls = fact(source)  # every call of the rule's source: the finding's rows are some of them
    except Exception:  # noqa: BLE001 - a store without the breakdown (a job's cross-rank store): the gaps
        return None
    if seg.empty or not {"name", "tid", "start", "end"} <= set(calls.columns):
        return None
    if device is not None:
        on_device = seg["device"].to_numpy() == device
        if not on_device.all():  # one device's trace: the segments as they are, no copy
            seg = seg.loc[on_device]
    if "blocking" in calls.columns:  # a non-blocking call of a blocking one's name (cudaMemcpyAsync) owns nothing
        calls = calls.loc[calls["blocking"].fillna(False).to_numpy(dtype=bool)]
    c_tid = pd.to_numeric(calls["tid"], errors="coerce").fillna(-1).to_numpy("int64")
    c_start = pd.to_numeric(calls["start"], errors="coerce").fillna(-1).to_numpy("int64")
    pos, owner = charged_segments(seg, c_tid, c_start,
                                  pd.to_numeric(calls["end"], errors="coerce").fillna(-1).to_numpy("int64"),
                                  calls["name"].astype(str).to_numpy(object))
    if not len(pos):
        return None
    mine_tid = pd.to_numeric(rows["tid"].iloc[positions], errors="coerce").fillna(-1).to_numpy("int64")
    mine_start = pd.to_numeric(rows["start"].iloc[positions], errors="coerce").fillna(-1).to_numpy("int64")
    ours = _pairs_in(c_tid[owner], c_start[owner], mine_tid, mine_start)
    if not ours.any():
        return None
    hs = seg.iloc[pos[ours]]
    return _build(hs["device"].to_numpy("int64"), hs["start"].to_numpy(float), hs["end"].to_numpy(float),
                  window, "host")


def _host(times: tuple[np.ndarray, np.ndarray], scope: Scope, window: Window,
          fact: Callable[[str], pd.DataFrame]) -> Footprint:
    """The GPU idle gaps that overlap the host intervals ``times``."""
    gaps = fact("gpu_gaps")
    if scope.device is not None:
        gaps = gaps[gaps["device"] == scope.device]
    h_start, h_end = merge_intervals(*times)
    g_start = gaps["start"].to_numpy(float)
    g_end = gaps["end"].to_numpy(float)
    if len(h_start) and len(g_start):
        # a gap overlaps a host interval when the first host interval ending after the gap's start
        # starts before the gap's end
        idx = np.searchsorted(h_end, g_start, side="right")
        ok = idx < len(h_end)
        hit = np.zeros(len(g_start), dtype=bool)
        hit[ok] = h_start[idx[ok]] < g_end[ok]
    else:
        hit = np.zeros(len(g_start), dtype=bool)
    device = gaps["device"].to_numpy("int64")[hit]
    return _build(device, g_start[hit], g_end[hit], window, "host")


def _breakdown(rows: pd.DataFrame, window: Window, fact: Callable[[str], pd.DataFrame]) -> Footprint:
    """The timeline segments behind rows of the timeline breakdown: same device, cause and detail, and
    the same step (step rows) or NVTX range (range rows): exactly the time the rows sum
    (:func:`analyzer.facts.breakdown.breakdown_row_segments`)."""
    from analyzer.facts.breakdown_ranges import breakdown_row_segments

    hit = breakdown_row_segments(rows, fact("timeline_segments"))
    return _build(hit["device"].to_numpy("int64"), hit["start"].to_numpy(float), hit["end"].to_numpy(float),
                  window, "breakdown")


def _scope(scope: Scope, window: Window, fact: Callable[[str], pd.DataFrame]) -> Footprint:
    """The GPU time of a finding whose rows carry no time: its kernel's executions, else busy time."""
    if scope.kernel is not None:
        kernels = fact("kernel_categories")
        mask = (kernels["name"].astype(str) == scope.kernel).to_numpy()
        if "short_name" in kernels.columns and not mask.any():
            mask = (kernels["short_name"].astype(str) == scope.kernel).to_numpy()
        if scope.device is not None:
            mask &= (kernels["device"] == scope.device).to_numpy()
        k = kernels[mask]
        return _build(k["device"].to_numpy("int64"), k["start"].to_numpy(float), k["end"].to_numpy(float),
                      window, "scope")
    busy = fact("gpu_busy")
    if scope.device is not None:
        busy = busy[busy["device"] == scope.device]
    return _build(busy["device"].to_numpy("int64"), busy["start"].to_numpy(float), busy["end"].to_numpy(float),
                  window, "scope")


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint ``[start, end)`` intervals covering the input (touching ones merged; empty and
    non-finite ones left out): the footprints' blocks and the spans the engine tests findings'
    overlap on."""
    ok = np.isfinite(start) & np.isfinite(end) & (end > start)
    if not ok.all():  # (the inputs are only read: no copy where every interval is kept)
        start, end = start[ok], end[ok]
    if len(start) == 0:
        return start[:0].copy(), end[:0].copy()
    if len(start) > 1 and not (start[1:] >= start[:-1]).all():  # facts come ordered by start: often no sort
        order = np.argsort(start, kind="stable")
        start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    new = np.empty(len(start), dtype=bool)
    new[0] = True
    np.greater(start[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    # a block's end is the running maximum at its last interval (the maximum never decreases): one
    # gather per block instead of a reduction over every interval
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = len(start) - 1
    return start[first], reach[last]


def _build(device: np.ndarray, start: np.ndarray, end: np.ndarray, window: Window, source: str) -> Footprint:
    start = np.clip(np.asarray(start, float), window.start_ns, window.end_ns)
    end = np.clip(np.asarray(end, float), window.start_ns, window.end_ns)
    devices: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    device = np.asarray(device, dtype="int64")
    distinct = sorted_distinct(device)
    for dev in distinct:
        if len(distinct) == 1:
            s, e = merge_intervals(start, end)
        else:
            mine = device == dev
            s, e = merge_intervals(start[mine], end[mine])
        if len(s) > MAX_INTERVALS:
            s, e = _coarsen(s, e, MAX_INTERVALS)
        devices.append(np.full(len(s), dev, dtype="int64"))
        starts.append(s)
        ends.append(e)
    if not starts:
        empty = np.zeros(0, dtype="int64")
        return Footprint(empty, empty, empty, source)
    return Footprint(np.concatenate(devices), np.rint(np.concatenate(starts)).astype("int64"),
                     np.rint(np.concatenate(ends)).astype("int64"), source)


def _coarsen(start: np.ndarray, end: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``limit`` of the sorted, disjoint intervals (:func:`merge_intervals`' blocks): the shortest
    spaces between consecutive intervals are closed."""
    space = start[1:] - end[:-1]
    kth = len(space) - (limit - 1)
    threshold = np.partition(space, kth)[kth]  # the longest limit - 1 spaces stay open (ties: a few more)
    new = np.r_[True, space > threshold]
    new[1:][space == threshold] = True
    if new.sum() > limit:  # ties at the threshold: keep the first ones
        extra = np.flatnonzero(new[1:] & (space == threshold))
        new[1 + extra[: int(new.sum()) - limit]] = False
    firsts = np.flatnonzero(new)
    # the blocks are disjoint and in order, so their ends increase: a group's end is its last block's
    lasts = np.empty_like(firsts)
    lasts[:-1] = firsts[1:] - 1
    lasts[-1] = len(end) - 1
    return start[firsts], end[lasts]

