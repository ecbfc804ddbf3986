"""The attribution index the phase tables share: NVTX range ancestry and GPU ops per range instance.

The loader attributes every kernel, memcpy and memset to the innermost NVTX range open when it was
launched (``nvtx_id``, across threads of the process, see :mod:`analyzer.loading.model`). A range's
*inclusive* GPU work is then everything attributed to the range or to any range nested in it. The
index expands each op once per ancestor of its innermost range (``ancestor_pairs``, built level by
level from ``parent_id``, never row by row), so that every per-range sum is a plain ``groupby``.

Built once per trace (:class:`PhaseIndex`) and shared by ``phase_table``, ``step_split``,
``category_mix`` and ``attention_split``; pass ``index=`` to reuse it.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts._util import union_length_sorted
from analyzer.facts.nvtx_ranges import innermost_open, ranges_only
from analyzer.loading.columns import narrow_int
from analyzer.loading.model import Trace
from analyzer.facts.range_patterns import DEFAULT_EXCLUDE, RangePattern, parse_patterns

OP_KERNEL, OP_MEMCPY, OP_MEMSET = 0, 1, 2


def match_ranges(patterns: Sequence[RangePattern], names: pd.Series, paths: pd.Series) -> np.ndarray:
    """Per row: its name (or, for a pattern with ``/``, its path) matches any of ``patterns``."""
    out = np.zeros(len(names), dtype=bool)
    for pattern in patterns:
        # Map over the distinct values only: range names repeat (forward x steps x layers).
        uniq_n = pd.Series(pd.unique(names.astype(object)))
        uniq_p = pd.Series(pd.unique(paths.astype(object)))
        if pattern.on_path:
            hit = set(uniq_p[pattern.mask(uniq_p, uniq_p)])
            out |= paths.astype(object).isin(hit).to_numpy()
        else:
            hit = set(uniq_n[pattern.mask(uniq_n, uniq_n)])
            out |= names.astype(object).isin(hit).to_numpy()
    return out


def ancestor_pairs(nvtx: pd.DataFrame) -> pd.DataFrame:
    """``range_id, ancestor_id, distance``: every range paired with itself (distance 0) and each
    enclosing range (parent 1, grandparent 2, ...), from the ``parent_id`` links.

    One vectorized step per nesting level (a parent looked up by position, not a pandas reindex).
    Raises ``ValueError`` on a parent cycle (a loader bug).
    """
    if nvtx.empty:
        return empty_typed((c, "int64") for c in ("range_id", "ancestor_id", "distance"))
    ids = nvtx["range_id"].to_numpy(np.int64)
    parent = nvtx["parent_id"].fillna(-1).to_numpy(np.int64)  # NaN: a root
    n = len(ids)
    # parents of the ranges ``anc`` (ids >= 0), -1 for an id that is no range (a dangling link): by
    # position where the ids are the row numbers (the model's contract), else by a sorted lookup
    if n and ids[0] == 0 and ids[-1] == n - 1 and (ids == np.arange(n)).all():
        def parent_of(anc: np.ndarray) -> np.ndarray:
            return np.where(anc < n, parent[np.minimum(anc, n - 1)], -1)
    else:
        order = np.argsort(ids, kind="stable")
        sorted_ids, sorted_parent = ids[order], parent[order]

        def parent_of(anc: np.ndarray) -> np.ndarray:
            pos = np.minimum(np.searchsorted(sorted_ids, anc), n - 1)
            return np.where(sorted_ids[pos] == anc, sorted_parent[pos], -1)
    # one part per nesting level, each column concatenated and its parts freed in turn (three lists
    # of parts plus one whole column at a time, not every part and the whole table)
    desc_parts, anc_parts, dist_parts = [ids], [ids], [np.zeros(n, np.int64)]
    desc, anc = ids, parent  # each range's parent, in row order
    distance = 1
    while True:
        keep = anc >= 0
        if not keep.any():
            break
        desc, anc = desc[keep], anc[keep]
        desc_parts.append(desc)
        anc_parts.append(anc)
        dist_parts.append(np.full(len(desc), distance, np.int64))
        anc = parent_of(anc)
        distance += 1
        if distance > n + 1:
            raise ValueError("NVTX parent_id links form a cycle")
    del desc, anc
    out: dict[str, np.ndarray] = {}
    for name, parts in (("range_id", desc_parts), ("ancestor_id", anc_parts), ("distance", dist_parts)):
        out[name] = np.concatenate(parts)
        parts.clear()
    return pd.DataFrame(out, copy=False)


def union_length(frame: pd.DataFrame, key: str) -> pd.Series:
    """Per ``key``: total length of the union of ``[start, end)`` intervals (overlaps counted once).

    Vectorized: sort by (key, start), then :func:`~analyzer.facts._util.union_length_sorted` (the merge
    rule of every interval union: an interval opens a new merged segment when it is the first of
    its key or starts after the running maximum end of the earlier intervals of its key; a segment's
    length is its maximum end minus its first start)."""
    if frame.empty:
        return pd.Series(dtype="int64", name="union_ns")
    k = frame[key].to_numpy()
    s = frame["start"].to_numpy(np.int64)
    e = frame["end"].to_numpy(np.int64)
    order = np.lexsort((s, k))
    k, s, e = k[order], s[order], e[order]
    del order
    return union_length_sorted(k, s, e)


def _expand_to_ancestors(flat: dict[str, np.ndarray], pairs: pd.DataFrame,
                         columns: Sequence[str] = ("op", "row", "start", "end", "duration"),
                         by_instance: bool = False) -> pd.DataFrame:
    """``flat`` (op columns; ops with ``nvtx_id`` -1 have no ancestors and yield no rows) repeated
    once per enclosing range instance: the rows of ``flat.merge(pairs, left_on="nvtx_id",
    right_on="range_id", how="inner", sort=False)`` (ops in their order, each op's ancestors in
    ``pairs`` order) as ``instance, own`` (True for the op's innermost range itself) and ``columns``.
    Built with a searchsorted + repeat on numpy arrays: the merge's intermediate frames cost 1.7 GB
    of peak memory on 5 M kernels. ``by_instance``: those rows stably sorted by (instance, start)
    instead (the order the per-instance aggregates read; sorted once here, not per query).

    The expanded rows are the largest table an analysis keeps (one per op and enclosing range):
    ``instance`` and ``row`` are stored in 32 bits when they fit, and ``flat`` is consumed (each of
    its columns is dropped once expanded)."""
    pr = pairs["range_id"].to_numpy(np.int64)
    porder = np.argsort(pr, kind="stable")
    pr_sorted = pr[porder]
    anc_sorted = pairs["ancestor_id"].to_numpy(np.int64)[porder]
    nid = flat.pop("nvtx_id")
    # each op's run of pairs: one binary search among the distinct range ids (a few thousand), then
    # the run's first position and length gathered (two searches of the pairs per op cost twice that)
    run = np.flatnonzero(np.r_[True, pr_sorted[1:] != pr_sorted[:-1]]) if len(pr_sorted) else np.empty(0, np.int64)
    run_id = pr_sorted[run]
    run_len = np.diff(np.r_[run, len(pr_sorted)])
    span = int(run_id[-1]) + 1 if len(run_id) else 0
    if (len(run_id) and run_id[0] >= 0 and span <= 4 * len(run_id) + (1 << 20) and len(nid)
            and int(nid.min()) >= -1 and int(nid.max()) < span):
        # range ids are (nearly) the rows of the range table: each id's run found in a table indexed by
        # id (a gather in a few cached kilobytes per op, not a binary search), -1 reading the last slot,
        # which has no run
        run_at = np.zeros(span + 1, dtype=np.int64)
        run_at[run_id] = run
        lo = run_at[nid]
        run_at[:] = 0
        run_at[run_id] = run_len
        cnt = run_at[nid]
        del run_at
    elif len(run_id):
        at = np.minimum(np.searchsorted(run_id, nid), len(run_id) - 1)
        lo = run[at]
        cnt = np.where(run_id[at] == nid, run_len[at], 0)
        del at
    else:
        lo = np.zeros(len(nid), dtype=np.int64)
        cnt = np.zeros(len(nid), dtype=np.int64)
    del nid
    src = np.repeat(np.arange(len(cnt)), cnt)  # the op row of each output row
    first_out = np.cumsum(cnt) - cnt  # output position of each op's first ancestor
    lo -= first_out
    del first_out
    pos = np.repeat(lo, cnt)  # pairs position (sorted order)
    del lo, cnt
    pos += np.arange(len(src))
    # narrowed and compared at the pairs' size, then gathered per output row (the same values and types:
    # a subset of values that fit 32 bits fits too; when the pairs' do not, the rows' own are tested)
    anc_narrow = narrow_int(anc_sorted)
    instance = anc_narrow[pos] if anc_narrow.dtype == np.int32 else narrow_int(anc_sorted[pos])
    own_pairs = pairs["distance"].to_numpy(np.int64)[porder] == 0
    own = own_pairs[pos]
    del pos, anc_narrow
    if by_instance and len(src):
        src, instance, own = _by_instance_and_start(src, instance, own, flat["start"], pr_sorted[own_pairs])
    out: dict[str, np.ndarray] = {"instance": instance, "own": own}
    del instance, own
    for c in columns:
        whole = flat.pop(c)
        if c == "row":  # narrowed before the gather where every row number fits (see instance above)
            narrow = narrow_int(whole)
            out[c] = narrow[src] if narrow.dtype == np.int32 else narrow_int(whole[src])
            del narrow
        else:
            out[c] = whole[src]
        del whole
    return pd.DataFrame(out, copy=False)


def _positions(distinct: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each of ``values`` among the sorted ``distinct`` ids, -1 where absent: by a table indexed
    by id where the ids are small non-negative numbers (range ids are the range rows), else by a binary
    search."""
    if not len(distinct):
        return np.full(len(values), -1, np.int64)
    lo, hi = int(distinct[0]), int(distinct[-1])
    if lo >= 0 and hi < 4 * len(distinct) + (1 << 20):
        table = np.full(hi + 2, -1, np.int64)
        table[distinct] = np.arange(len(distinct))
        return table[np.clip(values, -1, hi + 1)]  # -1 and ids past the last read an empty slot
    at = np.minimum(np.searchsorted(distinct, values), len(distinct) - 1)
    return np.where(distinct[at] == values, at, -1)


def _by_instance_and_start(src: np.ndarray, instance: np.ndarray, own: np.ndarray, start: np.ndarray,
                           own_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The expanded rows (``src``: op position, ``instance``, ``own``) stably sorted by (instance, the op's
    ``start``), as ``np.lexsort((start[src], instance))`` orders them. Where the range ids are distinct
    (``own_ids``: the range of each distance-0 pair, sorted) no two rows share (instance, op), so the
    order is that of one int64 key per row, (instance, the op's rank in a stable sort by start, own),
    sorted by value: a sort of the ops' starts and one of the keys cost a third of the lexsort of the
    expanded rows (two keys, a gather of every row's start)."""
    n = len(start)
    bits = max(int(n - 1).bit_length(), 1)
    distinct = len(own_ids) < 2 or bool((own_ids[1:] != own_ids[:-1]).all())
    lo, hi = int(instance.min()), int(instance.max())
    if not distinct or lo < 0 or hi >= 1 << (62 - bits):
        order = np.lexsort((start[src], instance))
        return src[order], instance[order], own[order]
    by_start = np.argsort(start, kind="stable")
    rank = np.empty(n, np.int64)
    rank[by_start] = np.arange(n)
    key = instance.astype(np.int64)
    key <<= bits
    key |= rank[src]
    del rank
    key <<= 1
    key |= own
    key.sort()
    own = (key & 1).astype(bool)
    key >>= 1
    src = by_start[key & ((1 << bits) - 1)]
    key >>= bits
    return src, key.astype(instance.dtype), own


#: Columns of :meth:`PhaseIndex.instance_gpu`, with units.
INSTANCE_GPU_COLUMNS: dict[str, str] = {
    "gpu_ns": "kernel+memcpy+memset time launched inside the range, nested ranges included (ns)",
    "gpu_ns_exclusive": "the same for ops whose innermost range is this one (ns)",
    "kernel_ns": "kernel time launched inside, nested ranges included (ns)",
    "kernel_count": "kernels launched inside, nested ranges included",
    "op_count": "kernels+memcpy+memset launched inside, nested ranges included",
    "busy_ns": "union of those ops' intervals, all devices together (ns)",
    "first_op_start": "start of the first op launched inside (ns, -1 if none)",
    "last_op_end": "end of the last op launched inside (ns, -1 if none)",
    "first_launch": "start of the first launch call of those ops (ns; the op's start when the export has "
                    "no launch call; -1 if none)",
    "sync_count": "blocking synchronizing CUDA calls made inside, nested ranges included",
    "last_sync_end": "end of the last of them (ns, -1 if none)",
    "sync_ns": "time the host spent in them (ns)",
}

#: Columns of :func:`range_timing`: which number measures a range instance.
TIMING_COLUMNS: dict[str, str] = {
    "gpu_span_ns": "last op end - first op start of the GPU work launched inside (ns, 0 if none)",
    "tail_ns": "how long that work kept running after the range closed (ns, 0 if none)",
    "queued_ns": "how long after the range began the GPU was still busy with work launched before it "
                 "(ns, 0 if none or no GPU work of its own)",
    "waited": "the range ended at or after the end of its GPU work (True when it launched none)",
    "phase_ns": "what the range costs, as a timer synchronizing before and after it would measure: from "
                "its start, or the end of earlier queued GPU work, to its end or its GPU work's end (ns)",
    "measure": "'cpu_wall' when the range's own duration is phase_ns (within MEASURE_TOLERANCE), 'gpu' "
               "when phase_ns comes from the GPU timeline (the range ended before its work, or began "
               "behind earlier work)",
}
#: The CPU wall time still measures a range when it is within this share of the phase time.
MEASURE_TOLERANCE = 0.05


def range_timing(start: np.ndarray, end: np.ndarray, gpu: pd.DataFrame,
                 prev_end: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per range instance, whether its CPU wall time measures its work (see :data:`TIMING_COLUMNS`).

    CUDA launches are asynchronous: a range that returns before its kernels finish measures how long
    the host took to *queue* the work, and a range that begins while the GPU still runs earlier work
    may spend its time blocked behind that work (a full launch queue blocks ``cudaLaunchKernel``; a
    synchronization waits for everything queued). The phase's own time is what a timer with
    ``torch.cuda.synchronize()`` before and after it measures: it ends when both the host left the
    range and the GPU finished the range's work, and it begins at the range's start, or, when earlier
    work was still running then (``prev_end``, capped at the range's first op start: work on other
    streams does not hold it back), at the end of that work minus the host's lead from the range's
    start to its first launch (the host work a synchronized timer would see before the GPU work). A range *waited* when it ended at or after its last op
    ended (typically a synchronizing call inside it, counted in ``sync_count``: a sync in the middle
    of a range does not make it wait for what it launches afterwards, so the end is the test).

    ``start``/``end``: the instances' CPU bounds; ``gpu``: :meth:`PhaseIndex.instance_gpu` rows of
    the same instances in the same order; ``prev_end``: per instance the latest end of GPU ops its
    process launched before it began (:meth:`PhaseIndex.prev_op_end`; ``None``: nothing queued)."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    has = gpu["op_count"].to_numpy() > 0
    first = gpu["first_op_start"].to_numpy(np.int64)
    last = gpu["last_op_end"].to_numpy(np.int64)
    prev = np.full(len(start), -1, np.int64) if prev_end is None else np.asarray(prev_end, dtype=np.int64)
    span = np.where(has, last - first, 0)
    cpu = end - start
    # queued: the range's own work could start only when the earlier work ended (prev, capped at its
    # first op's start); a synchronized timer would have seen the host's lead before its first launch
    # and then the work, so the phase begins that lead before the earlier work ended
    lead = np.maximum(0, gpu["first_launch"].to_numpy(np.int64) - start) if "first_launch" in gpu else 0
    begin = np.where(has & (prev > start), np.maximum(start, np.minimum(prev, first) - lead), start)
    phase = np.where(has, np.maximum(end, last) - begin, cpu)
    return {
        "gpu_span_ns": span,
        "tail_ns": np.where(has, np.maximum(0, last - end), 0),
        "queued_ns": begin - start,
        "waited": ~has | (end >= last),
        "phase_ns": phase,
        # two shared str objects gathered by row (np.where on texts makes a fixed-width unicode array,
        # then one Python str per row: ~180 MB on the 1.9 M ranges of a 1 GB torch.profiler trace)
        "measure": _MEASURES[(np.abs(phase - cpu) <= MEASURE_TOLERANCE * np.maximum(phase, cpu)).astype(np.intp)],
    }


_MEASURES = np.array(["gpu", "cpu_wall"], dtype=object)


#: Per name/path aggregates of :data:`TIMING_COLUMNS` (:func:`aggregate_timing`).
AGGREGATE_TIMING_COLUMNS: dict[str, str] = {
    "gpu_span_ns": "per instance, last op end - first op start of the GPU work launched inside, summed (ns)",
    "tail_ns": "per instance, how long that work kept running after the range closed, summed (ns)",
    "queued_ns": "per instance, how long the GPU was still busy with earlier work after the range began, "
                 "summed (ns)",
    "sync_count": "blocking synchronizing CUDA calls made inside (nested ranges included)",
    "gpu_instances": "instances that launched GPU work",
    "waited_count": "of those, instances that ended at or after the end of their GPU work",
    "async_count": "instances whose GPU span exceeded their CPU wall time (they timed the launches)",
    "waited": "'yes' (every instance with GPU work waited for it), 'no' (none did), 'K of N', '' (no GPU work)",
    "phase_ns": "per instance the phase's own time (see TIMING_COLUMNS), summed: what the range costs (ns)",
    "untimed_ns": "phase_ns minus the summed CPU wall time: positive when the ranges end before their GPU "
                  "work, negative when they wait behind earlier work (ns)",
    "measure": "which number measures the range: 'cpu_wall' (every instance's own duration), 'gpu' (every "
               "instance's from the GPU timeline) or 'mixed'",
}


def aggregate_timing(inst: pd.DataFrame, keys: str | Sequence[str], *, cpu: str = "duration") -> pd.DataFrame:
    """Per group of range instances: :data:`AGGREGATE_TIMING_COLUMNS`, with the group keys as columns.

    ``inst`` holds one row per instance with ``keys``, ``cpu`` (its wall time), ``op_count`` and the
    :data:`TIMING_COLUMNS` of :func:`range_timing`, plus ``sync_count``."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    has = inst["op_count"].to_numpy() > 0
    work = pd.DataFrame({
        **{k: inst[k].to_numpy() for k in keys},
        "gpu_span_ns": inst["gpu_span_ns"].to_numpy(np.int64),
        "tail_ns": inst["tail_ns"].to_numpy(np.int64),
        "queued_ns": inst["queued_ns"].to_numpy(np.int64),
        "sync_count": inst["sync_count"].to_numpy(np.int64),
        "gpu_instances": has.astype(np.int64),
        "waited_count": (has & inst["waited"].to_numpy(bool)).astype(np.int64),
        "async_count": (inst["gpu_span_ns"].to_numpy(np.int64) > inst[cpu].to_numpy(np.int64)).astype(np.int64),
        "phase_ns": inst["phase_ns"].to_numpy(np.int64),
        "untimed_ns": inst["phase_ns"].to_numpy(np.int64) - inst[cpu].to_numpy(np.int64),
        "gpu_measured": (inst["measure"].to_numpy(object) != "cpu_wall").astype(np.int64),
        "count": np.ones(len(inst), np.int64),
    })
    out = work.groupby(keys, sort=False).sum().reset_index()
    n, w = out["gpu_instances"].to_numpy(), out["waited_count"].to_numpy()
    out["waited"] = _waited_text(w, n)
    c = out.pop("count").to_numpy()
    g = out.pop("gpu_measured").to_numpy()
    out["measure"] = np.where(g == 0, "cpu_wall", np.where(g == c, "gpu", "mixed")).astype(object)
    return out[keys + list(AGGREGATE_TIMING_COLUMNS)]


def _waited_text(waited: np.ndarray, with_work: np.ndarray) -> np.ndarray:
    text = np.array([f"{w} of {n}" for w, n in zip(waited.tolist(), with_work.tolist())], dtype=object)
    text[waited == with_work] = "yes"
    text[(waited == 0) & (with_work > 0)] = "no"
    text[with_work == 0] = ""
    return text


def _run_mask(runs: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """Per row of a frame ordered by instance (``runs``: each run's instance and length): its instance
    is in ``ids``."""
    run_instance, run_length = runs
    return np.repeat(pd.Series(run_instance).isin(ids).to_numpy(), run_length)


def _selection(inst: np.ndarray, ids: np.ndarray | None, starts: np.ndarray,
               window: tuple[int, int] | None,
               runs: tuple[np.ndarray, np.ndarray] | None = None) -> slice | np.ndarray:
    """Rows of an expanded frame whose ``instance`` is in ``ids`` (all when None) and whose start lies
    in ``window`` (all when None): a slice when that is every row. ``runs``: the frame's runs of equal
    instances when its rows are ordered by instance (see :meth:`PhaseIndex._op_runs`)."""
    mask: np.ndarray | None = None
    if ids is not None:
        mask = _run_mask(runs, ids) if runs is not None else pd.Series(inst).isin(ids).to_numpy()
    if window is not None:
        inside = (starts >= window[0]) & (starts < window[1])
        mask = inside if mask is None else mask & inside
    if mask is None:
        return slice(None)
    sel = np.flatnonzero(mask)
    return slice(None) if len(sel) == len(inst) else sel


def blocking_syncs(trace: Trace, ranges: pd.DataFrame | None = None,
                   api_codes: tuple[np.ndarray, np.ndarray] | None = None,
                   sync_rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Calls that made a host thread wait for the device: ``start, end, pid, tid, nvtx_id, kind``.

    The blocking rows of the ``sync_calls`` fact over the whole trace (explicit synchronization,
    synchronous copies and memsets, async copies that pageable memory makes synchronous), plus the
    trace's ``sync`` activity records that no API call of the same process and correlation id
    explains (a loader may fill only those), attributed to the innermost range open on their thread.
    ``ranges``: the trace's ranges without marks (for that attribution); ``sync_rows``: the
    ``sync_call_rows`` of the whole trace when the caller has them (the fact store does)."""
    from analyzer.facts.api import sync_call_rows

    codes, base = api_codes if api_codes is not None else (None, None)
    calls = sync_call_rows(trace.api, trace.memcpy, codes, base) if sync_rows is None else sync_rows
    calls = calls.loc[calls["blocking"].to_numpy(bool)]
    cols = ("start", "end", "pid", "tid", "nvtx_id")
    parts = [pd.DataFrame({**{c: calls[c].to_numpy(np.int64) for c in cols},
                           "kind": calls["sync_kind"].to_numpy(object)})]
    sy = trace.sync
    if len(sy):
        from analyzer.loading.attribution import correlation_key

        api = trace.api
        # (pid, correlation id) packed in one int64 (a MultiIndex factorized two million API rows)
        mine = correlation_key(sy["pid"].fillna(-1).to_numpy(np.int64),
                               sy["correlation_id"].fillna(-1).to_numpy(np.int64))
        # hash the few sync records' correlation ids (the key's low 32 bits) and probe the millions of
        # calls' ids as stored (not the other way round, and no int64 key per call), then key only the
        # calls that matched and test the records against those
        low = mine & 0xFFFFFFFF
        api_corr = api["correlation_id"].to_numpy()
        if api_corr.dtype == np.int32:  # the same low bits, as the column stores them
            probe = pd.Series(api_corr).isin(low.astype(np.uint32).view(np.int32))
        else:
            probe = pd.Series(np.asarray(api_corr, dtype=np.int64) & 0xFFFFFFFF).isin(low)
        hit = np.flatnonzero(probe.to_numpy())
        del probe
        api_keys = correlation_key(api["pid"].to_numpy()[hit].astype(np.int64), api_corr[hit].astype(np.int64))
        known = pd.Series(mine).isin(api_keys).to_numpy()
        kinds = sy["sync_type"].astype(object).fillna("").to_numpy(object)
        keep = (kinds != "stream_wait_event") & ~known
        if keep.any():
            rest = sy.loc[keep]
            rg = ranges_only(trace.nvtx if ranges is None else ranges).reset_index(drop=True)
            pos = innermost_open(rg, rest["tid"].fillna(-1).to_numpy(np.int64), rest["start"].to_numpy(np.int64))
            range_ids = rg["range_id"].to_numpy(np.int64)
            # a trace without NVTX ranges: no range to look up (indexing an empty array raised)
            ids = (np.where(pos >= 0, range_ids[np.maximum(pos, 0)], -1) if len(range_ids)
                   else np.full(len(rest), -1, np.int64))
            parts.append(pd.DataFrame({
                "start": rest["start"].to_numpy(np.int64), "end": rest["end"].to_numpy(np.int64),
                "pid": rest["pid"].fillna(-1).to_numpy(np.int64), "tid": rest["tid"].fillna(-1).to_numpy(np.int64),
                "nvtx_id": ids, "kind": kinds[keep]}))
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return out.sort_values("start", kind="stable", ignore_index=True)


def phase_index(store: Any) -> PhaseIndex:
    """The :class:`PhaseIndex` of a fact store's trace, built once per store and shared by the facts
    that project GPU time onto NVTX ranges (``nvtx_instances``, and through it ``nvtx_projection``;
    ``phases``)."""
    from analyzer.facts.api import all_sync_call_rows, api_base_codes

    return store.memo("phase_index", lambda: PhaseIndex.build(store.trace, api_codes=api_base_codes(store),
                                                              sync_rows=all_sync_call_rows(store)),
                      users=PHASE_INDEX_USERS)


#: the facts that read :func:`phase_index` (a fact store frees the index once they are computed)
PHASE_INDEX_USERS: tuple[str, ...] = ("phases", "nvtx_instances")


@dataclass
class PhaseIndex:
    """Ranges, their ancestry and the GPU ops expanded onto every enclosing range instance.

    ``ranges``: the trace's NVTX ranges without marks (``range_id`` index kept as a column).
    ``pairs``: :func:`ancestor_pairs` of all ranges.
    ``ops``: one row per (op, enclosing range instance): ``instance`` (the enclosing ``range_id``),
    ``own`` (True when that instance is the op's innermost range), ``op`` (0 kernel, 1 memcpy,
    2 memset), ``row`` (position in its source frame), ``start``, ``end``, ``duration``. Ops launched
    outside any range are absent here (see ``unattributed``).
    ``syncs``: one row per (blocking synchronizing call, enclosing range instance): ``instance``,
    ``own``, ``start``, ``end`` (see :func:`blocking_syncs`).
    """

    trace: Trace
    ranges: pd.DataFrame
    pairs: pd.DataFrame
    ops: pd.DataFrame
    unattributed: pd.DataFrame  # op, row, start, end, duration of ops with nvtx_id == -1
    syncs: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {c: pd.Series(dtype="int64") for c in ("instance", "start", "end")}))
    #: ``ops`` rows are in (instance, start) order (as :meth:`build` makes them)
    ops_by_instance: bool = False
    _excluded: dict[tuple[str, ...], np.ndarray] = field(default_factory=dict, repr=False)
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, trace: Trace, *, api_codes: tuple[np.ndarray, np.ndarray] | None = None,
              sync_rows: pd.DataFrame | None = None) -> PhaseIndex:
        """Index ``trace``. ``api_codes``: :func:`analyzer.facts.api.api_base_codes` of the trace's API
        frame when the caller already has them (the fact store does), to classify sync calls;
        ``sync_rows``: :func:`analyzer.facts.api.all_sync_call_rows` likewise."""
        nvtx = trace.nvtx
        not_mark = (nvtx["kind"].astype(object) != "mark").to_numpy() if len(nvtx) else None
        # no copy of the range table when it has no marks (torch.profiler's never has): 1.9 M ranges
        # of a 1 GB trace are ~180 MB of columns, kept as long as the index
        ranges = nvtx if not_mark is None or not_mark.all() else nvtx[not_mark]
        ranges = ranges.reset_index(drop=True)
        pairs = ancestor_pairs(nvtx)
        # the ops' columns concatenated as arrays (no intermediate frames: at 10 M ops each frame copy of
        # these six columns is 0.4 GB); ops without a range expand to no rows (cnt 0), so the
        # expansion reads all ops and needs no filtered copy
        sources = [(code, frame) for code, frame in ((OP_KERNEL, trace.kernels), (OP_MEMCPY, trace.memcpy),
                                                     (OP_MEMSET, trace.memset)) if len(frame)]
        if sources:
            flat = {
                "op": np.concatenate([np.full(len(f), code, np.int8) for code, f in sources]),
                "row": np.concatenate([np.arange(len(f), dtype=np.int64) for _, f in sources]),
                **{c: np.concatenate([f[c].to_numpy(np.int64) for _, f in sources])
                   for c in ("nvtx_id", "start", "end", "duration")},
            }
        else:
            flat = {c: np.empty(0, np.int64)
                    for c in ("op", "row", "nvtx_id", "start", "end", "duration")}
        rest = np.flatnonzero(flat["nvtx_id"] < 0)
        unattributed = pd.DataFrame({c: flat[c][rest] for c in ("op", "row", "start", "end", "duration")})
        ops = _expand_to_ancestors(flat, pairs, by_instance=True)  # consumes flat
        del flat
        sync = blocking_syncs(trace, ranges, api_codes, sync_rows)
        syncs = _expand_to_ancestors({c: sync[c].to_numpy(np.int64) for c in ("nvtx_id", "start", "end")},
                                     pairs, ("start", "end"))
        return cls(trace=trace, ranges=ranges, pairs=pairs, ops=ops, unattributed=unattributed,
                   syncs=syncs, ops_by_instance=True)

    @property
    def kernel_name_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, names)``: an integer code per kernel row and the distinct names (demangled,
        else short): :func:`analyzer.facts.categories.kernel_label_codes`, once per index."""
        if "names" not in self._cache:
            from analyzer.facts.categories import kernel_label_codes

            self._cache["names"] = kernel_label_codes(self.trace.kernels)
        return self._cache["names"]

    # -- selection -------------------------------------------------------------------------------
    def excluded_ids(self, exclude: str | Iterable[str] | None) -> np.ndarray:
        """``range_id``s of ranges matching ``exclude`` and of every range nested inside them."""
        patterns = parse_patterns(exclude)
        key = tuple(p.raw for p in patterns)
        if key not in self._excluded:
            nvtx = self.trace.nvtx
            if not patterns or nvtx.empty:
                ids = np.empty(0, np.int64)
            else:
                hit = nvtx["range_id"].to_numpy(np.int64)[
                    match_ranges(patterns, nvtx["text"], nvtx["path"])]
                ids = np.unique(self.pairs.loc[self.pairs["ancestor_id"].isin(hit), "range_id"]
                                .to_numpy(np.int64))
            self._excluded[key] = ids
        return self._excluded[key]

    def measured_ranges(self, exclude: str | Iterable[str] | None = DEFAULT_EXCLUDE) -> pd.DataFrame:
        """Ranges (no marks) outside the excluded subtrees."""
        drop = self.excluded_ids(exclude)
        return self.ranges[~self.ranges["range_id"].isin(drop)]

    def select(self, frame: pd.DataFrame, patterns: str | Iterable[str] | None) -> pd.DataFrame:
        """Rows of a ranges frame whose name (or path) matches any of ``patterns``."""
        parsed = parse_patterns(patterns)
        if not parsed:
            return frame
        return frame[match_ranges(parsed, frame["text"], frame["path"])]

    # -- per instance ----------------------------------------------------------------------------
    def instance_gpu(
        self,
        instance_ids: Iterable[int] | None = None,
        *,
        op_window: tuple[int, int] | None = None,
        busy: bool = True,
    ) -> pd.DataFrame:
        """Per range instance (index ``range_id``): ``gpu_ns`` (sum of kernel+memcpy+memset durations
        launched inside, nested ranges included), ``gpu_ns_exclusive`` (ops whose innermost range is
        the instance itself), ``kernel_ns``, ``kernel_count``, ``op_count``, ``busy_ns`` (union of
        those ops' intervals, all devices; 0 when ``busy`` is False), ``first_op_start``,
        ``last_op_end``, ``sync_count`` (blocking synchronizing calls made inside, nested ranges
        included), ``last_sync_end`` and ``sync_ns`` (the host's time in them). Instances without ops
        get zeros (and -1 for the bounds).

        ``op_window``: count only ops (and sync calls) whose start lies in ``[start, end)``."""
        ops = self.ops
        if instance_ids is not None:
            ids = np.asarray(list(instance_ids) if not isinstance(instance_ids, (np.ndarray, pd.Series))
                             else instance_ids, dtype=np.int64)
        else:
            ids = self.ranges["range_id"].to_numpy(np.int64)
        # the expanded op rows are read for the busy time only (the other aggregates come from the ops)
        sel = (_selection(ops["instance"].to_numpy(), ids if instance_ids is not None else None,
                          ops["start"].to_numpy(), op_window, self._op_runs()) if busy else slice(0))
        agg = self._per_instance(sel, busy, op_window)
        syncs = self.syncs
        sinst = syncs["instance"].to_numpy()
        ssel = _selection(sinst, ids if instance_ids is not None else None, syncs["start"].to_numpy(), op_window)
        send = syncs["end"].to_numpy()[ssel]
        fill = {"gpu_ns": 0, "gpu_ns_exclusive": 0, "kernel_ns": 0, "kernel_count": 0, "op_count": 0,
                "busy_ns": 0, "first_op_start": -1, "last_op_end": -1, "first_launch": -1, "sync_count": 0,
                "last_sync_end": -1,
                "sync_ns": 0}
        quick = _instance_table(agg, sinst[ssel], send, syncs["start"].to_numpy()[ssel], ids, fill)
        if quick is not None:
            return quick
        sagg = pd.DataFrame({"instance": sinst[ssel], "end": send,
                             "dur": send - syncs["start"].to_numpy()[ssel]}).groupby("instance").agg(
            sync_count=("end", "size"), last_sync_end=("end", "max"), sync_ns=("dur", "sum"))
        out = agg.join(sagg, how="outer").reindex(pd.Index(ids, name="range_id"))
        return out.fillna(fill).astype("int64")[list(INSTANCE_GPU_COLUMNS)]

    def _per_instance(self, sel: slice | np.ndarray, busy: bool,
                      op_window: tuple[int, int] | None) -> pd.DataFrame:
        """The op aggregates of :meth:`instance_gpu`, indexed by instance (sorted): every instance that
        launched an op starting in ``op_window`` (:meth:`_op_totals`), and, with ``busy``, the union of
        its expanded op rows ``sel`` (the instances asked for; 0 for the others)."""
        totals = self._op_totals(op_window)
        keys = totals["instance"]
        out = {c: v for c, v in totals.items() if c != "instance"}
        out["busy_ns"] = np.zeros(len(keys), np.int64)
        if busy and len(keys):
            ops = self.ops
            inst = ops["instance"].to_numpy()[sel]
            start = ops["start"].to_numpy()[sel]
            end = ops["end"].to_numpy()[sel]
            if not self.ops_by_instance:
                order = np.lexsort((start, inst))
                inst, start, end = inst[order], start[order], end[order]
            if len(inst):
                at = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
                out["busy_ns"][np.searchsorted(keys, inst[at])] = (
                    union_length_sorted(inst, start, end).reindex(inst[at]).to_numpy(np.int64))
        names = ("gpu_ns", "gpu_ns_exclusive", "kernel_ns", "kernel_count", "op_count", "first_op_start",
                 "last_op_end", "first_launch", "busy_ns")
        return pd.DataFrame({c: out[c] for c in names}, index=pd.Index(keys, name="instance"))

    def _op_totals(self, op_window: tuple[int, int] | None) -> dict[str, np.ndarray]:
        """Per range instance that launched ops starting in ``op_window`` (every op: None), in id order:
        ``instance`` and its ``gpu_ns``, ``gpu_ns_exclusive``, ``kernel_ns``, ``kernel_count``,
        ``op_count``, ``first_op_start``, ``last_op_end`` and ``first_launch`` (the launch call's start;
        the op's start when the export has none), nested ranges included. Each op is counted once, for
        its innermost range (sums, counts, smallest start and launch, largest end per range: a reduceat
        over each run of ops of one range, in the kernels, copies and memsets as stored), then each range's totals go to every enclosing range through
        the ancestor pairs (a few per range): the totals of the ops expanded once per enclosing range,
        without a pass over that expansion. Kept per window (``phases`` and ``nvtx_instances`` ask)."""
        key = f"op_totals:{op_window}"
        if key in self._cache:
            return self._cache[key]
        pairs = self.pairs
        rid, r_pos = np.unique(pairs["range_id"].to_numpy(np.int64), return_inverse=True)
        n = len(rid)
        big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        count, gpu, kernel_ns, kernel_count = (np.zeros(n, np.int64) for _ in range(4))
        first, launch, last = np.full(n, big), np.full(n, big), np.full(n, small)
        t = self.trace
        for code, frame in ((OP_KERNEL, t.kernels), (OP_MEMCPY, t.memcpy), (OP_MEMSET, t.memset)):
            if not len(frame) or not n:
                continue
            # ops come in runs of one innermost range (a range's launches follow each other): each run's
            # totals by one reduceat over the ops as stored, then added to its range
            nid = frame["nvtx_id"].to_numpy(np.int64)
            start = frame["start"].to_numpy(np.int64)
            change = nid[1:] != nid[:-1]
            if op_window is None:
                at = np.flatnonzero(np.r_[True, change])
                pos = _positions(rid, nid[at])
            else:  # runs cut where an op enters or leaves the window too; those outside it dropped
                inside = (start >= op_window[0]) & (start < op_window[1])
                at = np.flatnonzero(np.r_[True, change | (inside[1:] != inside[:-1])])
                pos = np.where(inside[at], _positions(rid, nid[at]), -1)
            del change
            keep = pos >= 0
            p = pos[keep]
            k = np.diff(np.r_[at, len(nid)])[keep]
            np.add.at(count, p, k)
            d = np.add.reduceat(frame["duration"].to_numpy(np.int64), at)[keep]
            np.add.at(gpu, p, d)
            if code == OP_KERNEL:
                np.add.at(kernel_count, p, k)
                np.add.at(kernel_ns, p, d)
            api = frame["api_start"].to_numpy(np.int64)
            np.minimum.at(first, p, np.minimum.reduceat(start, at)[keep])
            np.maximum.at(last, p, np.maximum.reduceat(frame["end"].to_numpy(np.int64), at)[keep])
            np.minimum.at(launch, p, np.minimum.reduceat(np.where(api >= 0, api, start), at)[keep])
        # each range's totals to itself and every enclosing range (only ranges that launched ops)
        j = np.flatnonzero(count[r_pos] > 0)
        aid, a_pos = np.unique(pairs["ancestor_id"].to_numpy(np.int64)[j], return_inverse=True)
        r_pos = r_pos[j]
        own = pairs["distance"].to_numpy(np.int64)[j] == 0
        m = len(aid)
        out: dict[str, np.ndarray] = {"instance": narrow_int(aid)}
        for name, values in (("gpu_ns", gpu), ("kernel_ns", kernel_ns), ("kernel_count", kernel_count),
                             ("op_count", count)):
            out[name] = np.zeros(m, np.int64)
            np.add.at(out[name], a_pos, values[r_pos])
        out["gpu_ns_exclusive"] = np.zeros(m, np.int64)
        np.add.at(out["gpu_ns_exclusive"], a_pos[own], gpu[r_pos[own]])
        for name, values, init, ufunc in (("first_op_start", first, big, np.minimum),
                                          ("last_op_end", last, small, np.maximum),
                                          ("first_launch", launch, big, np.minimum)):
            out[name] = np.full(m, init)
            ufunc.at(out[name], a_pos, values[r_pos])
        self._cache[key] = out
        return out

    def prev_op_end(self, range_ids: Iterable[int]) -> np.ndarray:
        """Per range instance: the latest end of the GPU ops its process launched before the range
        began (launch = the API call's start; the op's start when the export has no launch call), or
        -1. Computed once for every range of the trace (the per-op arrays are freed at once)."""
        if "prev_end" not in self._cache:
            self._cache["prev_end"] = self._prev_end_all()
        ids = np.asarray(list(range_ids) if not isinstance(range_ids, (np.ndarray, pd.Series)) else range_ids,
                         dtype=np.int64)
        return self._cache["prev_end"].reindex(ids).fillna(-1).to_numpy(np.int64)

    def _prev_end_all(self) -> pd.Series:
        t, ranges = self.trace, self.ranges
        frames = [f for f in (t.kernels, t.memcpy, t.memset) if len(f)]
        out = pd.Series(-1, index=ranges["range_id"].to_numpy(np.int64), dtype=np.int64)
        if not frames or ranges.empty:
            return out
        launch = np.concatenate([np.where(f["api_start"].to_numpy(np.int64) >= 0, f["api_start"].to_numpy(np.int64),
                                          f["start"].to_numpy(np.int64)) for f in frames])
        op_end = np.concatenate([f["end"].to_numpy(np.int64) for f in frames])
        op_pid = np.concatenate([f["pid"].to_numpy(np.int64) for f in frames])
        r_pid = ranges["pid"].to_numpy(np.int64)
        r_start = ranges["start"].to_numpy(np.int64)
        values = np.full(len(ranges), -1, np.int64)
        for pid in np.unique(r_pid):
            mine = op_pid == pid if (op_pid != pid).any() else slice(None)
            order = np.argsort(launch[mine], kind="stable")
            when = launch[mine][order]
            latest = np.maximum.accumulate(op_end[mine][order]) if len(order) else when
            sel = np.flatnonzero(r_pid == pid)
            pos = np.searchsorted(when, r_start[sel], side="left") - 1
            values[sel] = np.where(pos >= 0, latest[np.maximum(pos, 0)] if len(latest) else -1, -1)
        out[:] = values
        return out

    def timing(self, ranges: pd.DataFrame, gpu: pd.DataFrame) -> dict[str, np.ndarray]:
        """:func:`range_timing` of ``ranges`` (``range_id``, ``start``, ``end``) with their
        :meth:`instance_gpu` rows ``gpu`` (same order) and the work queued before each."""
        return range_timing(ranges["start"].to_numpy(np.int64), ranges["end"].to_numpy(np.int64), gpu,
                            self.prev_op_end(ranges["range_id"].to_numpy(np.int64)))

    def kernel_rows(self, instance_ids: Iterable[int],
                    columns: Sequence[str] = ("instance", "row", "start", "end", "duration")) -> pd.DataFrame:
        """``instance`` + kernel ``row`` (and their ``start``, ``end``, ``duration``: ``columns``) for
        kernels launched inside the given instances."""
        ids = np.asarray(list(instance_ids), dtype=np.int64) if not isinstance(
            instance_ids, (np.ndarray, pd.Series)) else instance_ids
        ops = self.ops
        runs = self._op_runs()
        inside = (_run_mask(runs, ids) if runs is not None
                  else ops["instance"].isin(ids).to_numpy())
        # the selected rows of each column gathered by position (``loc`` with a mask over the millions of
        # expanded rows took the whole frame's columns through pandas' take), the index their labels
        rows = np.flatnonzero((ops["op"].to_numpy() == OP_KERNEL) & inside)
        return pd.DataFrame({c: ops[c].to_numpy()[rows] for c in columns}, index=ops.index[rows], copy=False)

    def _op_runs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(instance, length)`` of each run of equal instances in ``ops`` when its rows are ordered
        by instance (a selection by instance is then one test per instance, not per row), else None."""
        if not self.ops_by_instance:
            return None
        if "runs" not in self._cache:
            inst = self.ops["instance"].to_numpy()
            bounds = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]]) if len(inst) else np.empty(0, np.int64)
            self._cache["runs"] = (inst[bounds], np.diff(np.r_[bounds, len(inst)]))
        return self._cache["runs"]


def _instance_table(agg: pd.DataFrame, sync_inst: np.ndarray, sync_end: np.ndarray, sync_start: np.ndarray,
                    ids: np.ndarray, fill: dict[str, int]) -> pd.DataFrame | None:
    """:meth:`PhaseIndex.instance_gpu`'s table from the op aggregates ``agg`` (index: instance) and the
    selected sync calls, with numpy: per id, each op column from its instance's row of ``agg`` and the sync
    count, last end and summed time from its calls, else ``fill``. The outer join, reindex and fillna of
    pandas give the same integers where every value is below 2^53 in magnitude (their NaN turns a column
    to float64 and back); None otherwise (or for an unsorted ``agg``), for that path to compute."""
    limit = 2 ** 53
    keys = agg.index.to_numpy()
    if keys.dtype.kind not in "iu" or (len(keys) > 1 and not bool((keys[1:] > keys[:-1]).all())):
        return None
    ids = np.asarray(ids, dtype=np.int64)
    sync_inst = np.asarray(sync_inst, dtype=np.int64)
    values = {c: agg[c].to_numpy() for c in agg.columns}
    if any(v.dtype.kind not in "iu" for v in values.values()):
        return None
    dur = np.asarray(sync_end, dtype=np.int64) - np.asarray(sync_start, dtype=np.int64)
    order = np.argsort(sync_inst, kind="stable")
    s_inst, s_end, s_dur = sync_inst[order], np.asarray(sync_end, dtype=np.int64)[order], dur[order]
    bounds = np.flatnonzero(np.r_[True, s_inst[1:] != s_inst[:-1]]) if len(s_inst) else np.empty(0, np.intp)
    s_keys = s_inst[bounds]
    sync = {"sync_count": np.diff(np.r_[bounds, len(s_inst)]).astype(np.int64),
            "last_sync_end": np.maximum.reduceat(s_end, bounds) if len(bounds) else np.empty(0, np.int64),
            "sync_ns": np.add.reduceat(s_dur, bounds) if len(bounds) else np.empty(0, np.int64)}
    for v in (*values.values(), *sync.values(), keys, s_keys, ids):
        if len(v) and int(np.abs(v.astype(np.float64)).max()) >= limit:
            return None
    out: dict[str, np.ndarray] = {}
    for table_keys, columns in ((keys, values), (s_keys, sync)):
        pos = np.searchsorted(table_keys, ids)
        at = np.minimum(pos, max(len(table_keys) - 1, 0))
        hit = (pos < len(table_keys)) & (table_keys[at] == ids) if len(table_keys) else np.zeros(len(ids), bool)
        for c, v in columns.items():
            col = np.full(len(ids), fill[c], dtype=np.int64)
            col[hit] = v[at[hit]]
            out[c] = col
    return pd.DataFrame({c: out[c] for c in INSTANCE_GPU_COLUMNS}, index=pd.Index(ids, name="range_id"))
