"""Per-op host overhead: the part of a range's launch-bound time that per-op Python work adds on top of
what launching costs (:func:`split_per_op`), and the timeline breakdown's columns that state it
(:func:`per_op_columns`). Split from :mod:`analyzer.facts.breakdown`.

Launch-bound time (the GPU drained each op before the host issued the next) is what the host's time per
launch costs the GPU. Eager PyTorch spends tens of microseconds of host time per op; a range whose
launch-bound idle time per GPU op is many times that is slowed by Python work done for every op
(``torch.autograd.set_detect_anomaly(True)`` formatting a stack per autograd node, module hooks,
``record_function`` or profiling in a hot loop, debug modes), a cause of its own whose fix is to remove
that work, not CUDA graphs. Per (device, phase) of the breakdown (the range level under the step; the
time outside every range, phase ``''``, is the window of a trace without NVTX):

* ``L``: the phase's eager launch-bound time (launch_bound, not a CUDA graph replay's launch);
* ``ops``: its GPU ops (the busy segments it launched: compute, exposed copies and communication);
* ``busy``: their time.

The phase is *slowed by per-op work* when ``L / ops`` is at least :data:`PER_OP_FACTOR` times
:data:`PER_OP_REF_NS`, it launches at least :data:`PER_OP_MIN_OPS` ops a step and ``L`` is at least
:data:`PER_OP_MIN_SHARE` of the device's window. With the reference's
host time per op, the host would take ``ops * PER_OP_REF_NS`` while the GPU runs ``busy``: the GPU would
idle at least ``max(ops * PER_OP_REF_NS - busy, 0)`` (equal when every op takes the same time) and the
rest of ``L``, the *excess*, is the per-op work's. Each of the phase's eager launch-bound segments is
split in the same proportion: its last ``excess / L`` becomes detail :data:`PER_OP_DETAIL` (cause
``launch_bound`` still: the partition of the window by cause does not change), which per-op-host-overhead
states and launch-bound leaves out, so no nanosecond is in both findings.

The same debugging work often checks each op's result as well (anomaly mode's NaN check after every
backward node: a copy of a flag and a ``cudaStreamSynchronize``). On a device with a phase slowed by
per-op work, another phase whose explicit synchronizing calls (stream, device or event synchronizations
that idled the GPU, each call counted once) are at least :data:`PER_OP_SYNC_RATIO` of its GPU ops, with
the same floors of ops and window share, *synchronizes per op* and joins the cause: its host_sync
segments become details :data:`PER_OP_SYNC_DETAIL` (each call's first wait) and
:data:`PER_OP_REFILL_DETAIL` (its other waits, the refills), cause ``host_sync`` still, which
host-sync-in-loop (its calls' charged time) no longer counts, and its whole eager launch-bound time
becomes :data:`PER_OP_DETAIL` (each launch after a check finds the GPU drained). Without a slowed phase on
the device nothing joins: the syncs-per-op ratio alone does not tell per-op checks from a loop's own
synchronizations (see :data:`PER_OP_SYNC_RATIO`).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analyzer.facts.registry import FactContext

#: the launch-bound detail of the excess (:mod:`analyzer.facts.breakdown_overhead`)
PER_OP_DETAIL = "per-op host work"
#: the usual launch-bound idle time per GPU op of eager PyTorch (ns): the eager launch_bound time of a range
#: over its GPU ops on the committed H100 eager loops that are launch-bound with nothing else per op
#: (tests/data/h100, heldout/h100; nsys, torch.profiler, bare): batch-1 decoding (decode_eager) 17.5-54.3
#: us, the per-parameter Adam loop (optimizer_loop's optimizer) 15.2-22.2 us, its forward and backward
#: layer loops 20.8-48.6 us (73.3 in one bare torch.profiler backward), per_sample_loop 13.1-17.1 us,
#: mask_index_sync's expert loop 10.4-12.1 us: about 25-30 us in the middle
PER_OP_REF_NS = 30_000
#: a phase is slowed by per-op work when its launch-bound time per op is at least this many times the
#: reference: detect_anomaly's forward 152 us (nsys) and 190 us (torch.profiler) per op against 1.8 and
#: 2.5 us in its twin; the eager loops above stay under 2.5x (73.3 us)
PER_OP_FACTOR = 4.0
#: ...and it launches at least this many GPU ops a step: a range of a few ops with Python around them
#: (a fused optimizer's step: 4 ops, 115-155 us each) is bookkeeping per range, not per op
PER_OP_MIN_OPS = 16

#: ...and its launch-bound time is at least this share of the device's window: the leftover launches of a
#: bare trace outside the loops found in it (optimizer_loop_bare: 229 ops at 132 us, 4.4% of the window;
#: its twin under torch.profiler 57 at 148 us, 7.3%) are the Python between loops, not a slowed range
PER_OP_MIN_SHARE = 0.10

#: the host_sync detail of a phase that synchronizes per op: the first wait of each synchronizing call
PER_OP_SYNC_DETAIL = "per-op sync"
#: on a GPU with a phase slowed by per-op work, another phase of it *synchronizes per op* (and joins the
#: cause) when its explicit synchronizing calls (stream, device or event synchronizations that idled the
#: GPU, each call counted once) are at least this share of its GPU ops, with 16 ops a step and its
#: launch-bound and host_sync time 10% of the window: anomaly mode's NaN check after every backward node
#: (detect_anomaly's backward: 151 calls a step for 712 ops, 0.21 with nsys and torch.profiler). The ratio
#: alone does not tell per-op checking from a loop's own synchronizations: tensor_from_list's layers 0.22,
#: layer_timing_sync's forward (a device synchronize around each of its 73 modules) 0.73, host_sync's
#: host_check 0.75, mask_index_sync 0.06; none of them has a range slowed by per-op Python work, and they
#: stay host-sync-in-loop's. Without NVTX (detect_anomaly_bare: one window phase, 0.19, 28.9 us of launch-bound
#: time per op) no phase is slow, and nothing joins.
PER_OP_SYNC_RATIO = 0.1
#: the host_sync detail of the rest of such a phase's synchronization time (the refills after the waits,
#: a wait's further pieces): ``per-op sync`` is one segment per call, the call's first wait
PER_OP_REFILL_DETAIL = "per-op sync (refill)"
#: the details per-op-host-overhead states
PER_OP_DETAILS = (PER_OP_DETAIL, PER_OP_SYNC_DETAIL, PER_OP_REFILL_DETAIL)

_BUSY = ("compute", "exposed_copy", "exposed_comm")


#: the segments are read this many rows at a time (no full-length temporaries: 48 M segments at 10 M kernels)
_CHUNK = 1 << 20


def _per_op_cut(ctx: FactContext, seg: pd.DataFrame, lb_code: int, busy_of: np.ndarray,
                graph: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(rows, keep)``: the eager launch-bound segments of phases slowed by per-op work (in row order) and
    the share of each that launch-bound keeps (< 1); ``None`` where no segment is eager or no phase slowed.
    ``busy_of``: per cause code, whether it is a GPU op's (busy) time; ``graph``: per detail code, whether it
    is a CUDA graph's launch time (each one more entry, ``False``, read by code -1). Per (device, phase) group: the phase of each segment's range key (:func:`phase_keys` over the
    keys' total time), then the group's eager launch-bound time, GPU ops, their time and the device's window,
    each summed a chunk of rows at a time (integer nanoseconds summed in float64, exact below 2**53)."""
    from analyzer.facts.breakdown_ranges import phase_keys

    n = len(seg)
    cause_codes = np.asarray(seg["cause"].cat.codes)
    dcodes = np.asarray(seg["detail"].cat.codes)
    key_codes = np.asarray(seg["range_key"].cat.codes)
    keys = np.asarray(seg["range_key"].cat.categories, dtype=object)
    dur = seg["duration"].to_numpy(dtype=np.int64)
    labels = np.r_[keys, np.array([""], dtype=object)]

    def chunk(a: int) -> tuple[slice, np.ndarray, np.ndarray]:
        sl = slice(a, min(a + _CHUNK, n))
        k = key_codes[sl].astype(np.int64)
        k[k < 0] = len(keys)
        eager = (cause_codes[sl] == lb_code) & ~graph[dcodes[sl]]
        return sl, k, eager

    per_key = np.zeros(len(labels))
    seen = np.zeros(len(labels), dtype=np.int64)
    any_eager = False
    for a in range(0, n, _CHUNK):
        sl, k, eager = chunk(a)
        any_eager = any_eager or bool(eager.any())
        per_key += np.bincount(k, weights=dur[sl], minlength=len(labels))
        seen += np.bincount(k, minlength=len(labels))
    if not any_eager:
        return None
    used = np.flatnonzero(seen)
    phases = np.full(len(labels), "", dtype=object)
    phases[used] = phase_keys(ctx, labels[used], per_key[used])
    phase_codes, phase_labels = pd.factorize(phases)
    phase_codes = phase_codes.astype(np.int64)
    dev = seg["device"].to_numpy()
    one_device = dev[0] == dev[-1]  # ordered by device: one device (no pass over millions of ids)
    devs = dev[:1] if one_device else np.unique(np.concatenate(
        [np.unique(dev[a:a + _CHUNK]) for a in range(0, n, _CHUNK)]))
    n_phase = max(len(phase_labels), 1)
    space = len(devs) * n_phase

    def groups(sl: slice, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dev_codes = (np.zeros(sl.stop - sl.start, dtype=np.int64) if one_device
                     else np.searchsorted(devs, dev[sl]).astype(np.int64))
        return dev_codes * n_phase + phase_codes[k], dev_codes

    launch = np.zeros(space)
    ops = np.zeros(space)
    busy_ns = np.zeros(space)
    window = np.zeros(len(devs))
    for a in range(0, n, _CHUNK):
        sl, k, eager = chunk(a)
        group, dev_codes = groups(sl, k)
        d = dur[sl]
        busy = busy_of[cause_codes[sl]]
        launch += np.bincount(group, weights=np.where(eager, d, 0), minlength=space)
        ops += np.bincount(group, weights=busy, minlength=space)
        busy_ns += np.bincount(group, weights=np.where(busy, d, 0), minlength=space)
        window += np.bincount(dev_codes, weights=d, minlength=len(devs))
    steps = max(len(ctx.get("steps")), 1)
    slow = ((ops >= PER_OP_MIN_OPS * steps) & (launch >= PER_OP_FACTOR * PER_OP_REF_NS * np.maximum(ops, 1))
            & (launch >= PER_OP_MIN_SHARE * np.repeat(window, n_phase)))
    left = np.maximum(ops * PER_OP_REF_NS - busy_ns, 0.0)
    keep = np.where(slow, np.minimum(left / np.maximum(launch, 1.0), 1.0), 1.0)
    if not (keep < 1.0).any():
        return None
    rows, shares = [], []
    for a in range(0, n, _CHUNK):
        sl, k, eager = chunk(a)
        group, _ = groups(sl, k)
        at = np.flatnonzero(eager & (keep[group] < 1.0))
        rows.append(at + a)
        shares.append(keep[group[at]])
    return np.concatenate(rows), np.concatenate(shares)


def _plain_syncs(seg: pd.DataFrame, cause_codes: np.ndarray, cats: list[str]) -> np.ndarray:
    """Per segment, whether it is an explicit synchronization's own wait (host_sync, a stream, device or
    event synchronization, not a refill or an operator's time before it)."""
    from analyzer.facts.breakdown import host_wait_kind
    from analyzer.facts.breakdown_sync import owned_by_next

    if "host_sync" not in cats:
        return np.zeros(len(seg), dtype=bool)
    details = np.asarray(seg["detail"].cat.categories, dtype=object)
    plain = np.array([host_wait_kind(str(x)) == "sync" and not owned_by_next(str(x)) and str(x) != PER_OP_SYNC_DETAIL
                      for x in details] + [False], dtype=bool)
    dcodes = np.asarray(seg["detail"].cat.codes, dtype=np.int64)
    return (cause_codes == cats.index("host_sync")) & plain[np.where(dcodes < 0, len(details), dcodes)]


def _sync_owners(ctx: FactContext, seg: pd.DataFrame, plain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(positions, call)``: the segments of ``plain`` (:func:`_plain_syncs`) charged to an explicit
    synchronizing call (stream, device or event) of the window, and that call: one call's wait may be
    several segments, the calls are counted, not the segments."""
    from analyzer.facts.api import _api_rows, sync_kind
    from analyzer.facts.breakdown_sync import charged_segments

    calls, _ = _api_rows(ctx, lambda b: True if sync_kind(b) in ("device", "stream", "event") else None)
    if calls.empty or not plain.any():
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    sub = seg.iloc[np.flatnonzero(plain)]
    pos, owner = charged_segments(sub, calls["tid"].to_numpy(dtype=np.int64), calls["start"].to_numpy(dtype=np.int64),
                                  calls["end"].to_numpy(dtype=np.int64), calls["name"].astype(str).to_numpy(object))
    return np.flatnonzero(plain)[pos], owner


def _per_op_phases(ctx: FactContext, seg: pd.DataFrame, eager: np.ndarray, busy: np.ndarray,
                   waits: np.ndarray, plain_of: Callable[[], np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keep, synced, first)``: per segment, the share of it launch-bound keeps (1 where its phase is not
    slowed by per-op work, 0 where its phase synchronizes per op), whether its phase synchronizes per op,
    and whether it is the first wait of a synchronizing call in its phase (one per call).
    ``waits``: every host_sync segment; ``plain_of()``: the synchronizations' own waits (:func:`_plain_syncs`),
    made only where a phase is slowed."""
    from analyzer.facts.breakdown_ranges import phase_keys

    key_codes = np.asarray(seg["range_key"].cat.codes, dtype=np.int64)
    keys = np.asarray(seg["range_key"].cat.categories, dtype=object)
    dur = seg["duration"].to_numpy(dtype=np.int64)
    k = np.where(key_codes < 0, len(keys), key_codes)
    labels = np.r_[keys, np.array([""], dtype=object)]
    per_key = np.bincount(k, weights=dur, minlength=len(labels))
    used = np.flatnonzero(np.bincount(k, minlength=len(labels)))
    phases = np.full(len(labels), "", dtype=object)
    phases[used] = phase_keys(ctx, labels[used], per_key[used])
    phase_codes, phase_labels = pd.factorize(phases)
    dev = seg["device"].to_numpy()
    if dev[0] == dev[-1]:  # ordered by device: one device (no hashing of millions of ids)
        dev_codes, devs = np.zeros(len(dev), dtype=np.int64), dev[:1]
    else:
        dev_codes, devs = pd.factorize(dev.astype(np.int64))
    n_phase = max(len(phase_labels), 1)
    group = dev_codes.astype(np.int64) * n_phase + phase_codes[k]
    space = len(devs) * n_phase
    launch = np.bincount(group, weights=np.where(eager, dur, 0), minlength=space)
    ops = np.bincount(group, weights=busy, minlength=space)
    busy_ns = np.bincount(group, weights=np.where(busy, dur, 0), minlength=space)
    steps = max(len(ctx.get("steps")), 1)
    window = np.repeat(np.bincount(dev_codes, weights=dur, minlength=len(devs)), n_phase)
    many = ops >= PER_OP_MIN_OPS * steps
    slow = many & (launch >= PER_OP_FACTOR * PER_OP_REF_NS * np.maximum(ops, 1)) & (launch >= PER_OP_MIN_SHARE * window)
    first = np.zeros(len(seg), dtype=bool)
    synced = np.zeros(space, dtype=bool)
    # on a GPU where per-op host work is found, the step's other ranges that synchronize after a large
    # share of their ops: the same cause (the per-op checks of anomaly mode's backward)
    joins = np.repeat(slow.reshape(len(devs), n_phase).any(axis=1), n_phase)
    plain = plain_of() if joins.any() and waits.any() else None
    if plain is not None and plain.any():
        pos, call = _sync_owners(ctx, seg, plain)
        if len(pos):  # calls, each counted once in its phase (positions in segment order: the first kept)
            _, at = np.unique(np.c_[group[pos], call], axis=0, return_index=True)
            first[pos[at]] = True
        n_sync = np.bincount(group, weights=first, minlength=space)
        wait_ns = np.bincount(group, weights=np.where(waits, dur, 0), minlength=space)
        synced = (joins & ~slow & many & (n_sync >= PER_OP_SYNC_RATIO * ops)
                  & (launch + wait_ns >= PER_OP_MIN_SHARE * window))
    left = np.maximum(ops * PER_OP_REF_NS - busy_ns, 0.0)
    keep = np.where(slow, np.minimum(left / np.maximum(launch, 1.0), 1.0), 1.0)
    # a phase that synchronizes per op drains the GPU at every check: each launch after one finds it idle,
    # and its whole launch-bound time goes with the checks
    keep = np.where(synced, 0.0, keep)
    return keep[group], synced[group], first


def split_per_op(ctx: FactContext, seg: pd.DataFrame) -> pd.DataFrame:
    """``seg`` (the ``timeline_segments`` frame, ordered by (device, start)) with the per-op excess of
    each phase slowed by per-op work split off its eager launch-bound segments, detail
    :data:`PER_OP_DETAIL`, and the phases that synchronize per op relabelled (see the module docstring);
    ``seg`` itself where no phase is."""
    from analyzer.facts.breakdown import graph_launch_time

    if seg.empty:
        return seg
    cause = seg["cause"]
    cats = list(cause.cat.categories)
    if "launch_bound" not in cats:
        return seg
    details = np.asarray(seg["detail"].cat.categories, dtype=object)
    graph = np.array([graph_launch_time(str(x)) for x in details] + [False], dtype=bool)
    busy_of = np.array([c in _BUSY for c in cats] + [False], dtype=bool)
    if _per_op_cut(ctx, seg, cats.index("launch_bound"), busy_of, graph) is None:
        return seg  # no phase slowed (read in chunks: no full-length temporaries on large traces), none joins
    cause_codes = np.asarray(cause.cat.codes)
    lb = cause_codes == cats.index("launch_bound")
    busy = np.isin(cause_codes, [cats.index(c) for c in _BUSY if c in cats])
    dcodes = np.asarray(seg["detail"].cat.codes, dtype=np.int64)
    eager = lb & ~graph[np.where(dcodes < 0, len(details), dcodes)]
    waits = cause_codes == cats.index("host_sync") if "host_sync" in cats else np.zeros(len(seg), dtype=bool)
    keep, synced, first = _per_op_phases(ctx, seg, eager, busy, waits, lambda: _plain_syncs(seg, cause_codes, cats))
    if (waits & synced).any():  # the per-op checks' waits and refills: this cause's, not host-sync-in-loop's
        new = [d for d in (PER_OP_SYNC_DETAIL, PER_OP_REFILL_DETAIL) if d not in details]
        col = seg["detail"].cat.add_categories(new) if new else seg["detail"].copy()
        col.iloc[np.flatnonzero(waits & synced & first)] = PER_OP_SYNC_DETAIL
        col.iloc[np.flatnonzero(waits & synced & ~first)] = PER_OP_REFILL_DETAIL
        seg["detail"] = col
        details = np.asarray(seg["detail"].cat.categories, dtype=object)
    cut = np.flatnonzero(eager & (keep < 1.0))
    if not len(cut):
        return seg
    start = seg["start"].to_numpy(dtype=np.int64)[cut]
    end = seg["end"].to_numpy(dtype=np.int64)[cut]
    mid = start + np.round((end - start) * keep[cut]).astype(np.int64)
    if PER_OP_DETAIL not in details:
        seg["detail"] = seg["detail"].cat.add_categories([PER_OP_DETAIL])
    tail = seg.iloc[cut[mid < end]].copy()
    tail["start"] = mid[mid < end]
    tail["detail"] = PER_OP_DETAIL
    tail["duration"] = tail["end"] - tail["start"]
    head_end = seg["end"].to_numpy(dtype=np.int64).copy()
    head_end[cut] = mid
    seg["end"] = head_end
    seg["duration"] = seg["end"] - seg["start"]
    out = pd.concat([seg, tail], ignore_index=True)
    out = out[(out["end"] > out["start"]).to_numpy()]
    order = np.lexsort((out["start"].to_numpy(dtype=np.int64), out["device"].to_numpy(dtype=np.int64)))
    return out.iloc[order].reset_index(drop=True)


def per_op_columns(out: pd.DataFrame) -> None:
    """The ``phase_ops``, ``phase_launch_ns`` and ``device_per_op_ns`` columns of the timeline breakdown
    (in place; after ``phase`` and ``graph_launch``)."""
    is_range = (out["scope"] == "range").to_numpy()
    by_phase = [out["device"], out["phase"]]
    busy = is_range & out["cause"].isin(_BUSY).to_numpy()
    out["phase_ops"] = np.where(is_range, out["segments"].where(busy, 0).groupby(by_phase).transform("sum"), 0)
    eager = is_range & (out["cause"] == "launch_bound").to_numpy() & (out["graph_launch"].to_numpy() == 0)
    out["phase_launch_ns"] = np.where(
        is_range, out["duration_ns"].where(eager, 0).groupby(by_phase).transform("sum"), 0)
    out["phase_syncs"] = np.where(is_range, out["segments"].where(
        is_range & (out["detail"] == PER_OP_SYNC_DETAIL).to_numpy(), 0).groupby(by_phase).transform("sum"), 0)
    mine = (out["scope"] == "window").to_numpy() & (out["detail"] == PER_OP_DETAIL).to_numpy()
    per_device = out.loc[mine].groupby("device")["duration_ns"].sum()
    out["device_per_op_ns"] = out["device"].map(per_device).fillna(0).to_numpy(dtype=np.int64)
    _per_op_groups(out, is_range)


def _per_op_groups(out: pd.DataFrame, is_range: np.ndarray) -> None:
    """The ``per_op_group`` and ``per_op_parts`` columns: per device, the phases holding per-op time (one
    cause across a step's ranges: the forward's per-op Python, the backward's per-op checks), largest
    first, and each one's part of it."""
    from analyzer.facts.breakdown_groups import _parts_text

    group = np.full(len(out), "", dtype=object)
    parts = np.full(len(out), "", dtype=object)
    mine = is_range & out["detail"].isin(PER_OP_DETAILS).to_numpy()
    if mine.any():
        rows = out.loc[mine]
        per = rows.groupby(["device", "phase"], sort=False)["duration_ns"].sum()
        for dev, block in per.groupby(level=0, sort=False):
            items = sorted(((str(k[1]), int(v)) for k, v in block.items()), key=lambda kv: (-kv[1], kv[0]))
            on = mine & (out["device"] == dev).to_numpy()
            group[on] = " + ".join(p for p, _ in items)
            parts[on] = _parts_text(items, float(block.sum())) if len(items) > 1 else ""
    out["per_op_group"] = group
    out["per_op_parts"] = parts


#: the timeline breakdown's columns this module makes (in ``BREAKDOWN_COLUMNS``)
PER_OP_COLUMNS = {
    "phase_ops": "range rows: the GPU ops the phase launched in the window (its busy segments; 0 for other rows)",
    "phase_launch_ns": "range rows: the phase's eager launch_bound time, per-op host work included (ns)",
    "phase_syncs": "range rows: the phase's explicit synchronizations, where it synchronizes per op (segments "
                   "of detail 'per-op sync'; 0 elsewhere)",
    "per_op_group": "rows of per-op time (details 'per-op host work', 'per-op sync', 'per-op sync (refill)'): the "
                    "device's phases holding it, largest first, joined by ' + ' (one finding across them); '' elsewhere",
    "per_op_parts": "the same rows, where several phases hold per-op time: each one's ms and share of it",
    "device_per_op_ns": "every row: on the row's device, the launch_bound time of detail 'per-op host work' (ns: "
                        "analyzer.facts.breakdown_overhead; part of device_cause_ns for launch_bound rows)",
}
