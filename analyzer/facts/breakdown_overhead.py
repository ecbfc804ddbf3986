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
"""
from __future__ import annotations

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


def split_per_op(ctx: FactContext, seg: pd.DataFrame) -> pd.DataFrame:
    """``seg`` (the ``timeline_segments`` frame, ordered by (device, start)) with the per-op excess of
    each phase slowed by per-op work split off its eager launch-bound segments, detail
    :data:`PER_OP_DETAIL` (see the module docstring); ``seg`` itself where no phase is."""
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
    found = _per_op_cut(ctx, seg, cats.index("launch_bound"), busy_of, graph)
    if found is None:
        return seg
    cut, share = found
    start = seg["start"].to_numpy(dtype=np.int64)[cut]
    end = seg["end"].to_numpy(dtype=np.int64)[cut]
    mid = start + np.round((end - start) * share).astype(np.int64)
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
    mine = (out["scope"] == "window").to_numpy() & (out["detail"] == PER_OP_DETAIL).to_numpy()
    per_device = out.loc[mine].groupby("device")["duration_ns"].sum()
    out["device_per_op_ns"] = out["device"].map(per_device).fillna(0).to_numpy(dtype=np.int64)


#: the timeline breakdown's columns this module makes (in ``BREAKDOWN_COLUMNS``)
PER_OP_COLUMNS = {
    "phase_ops": "range rows: the GPU ops the phase launched in the window (its busy segments; 0 for other rows)",
    "phase_launch_ns": "range rows: the phase's eager launch_bound time, per-op host work included (ns)",
    "device_per_op_ns": "every row: on the row's device, the launch_bound time of detail 'per-op host work' (ns: "
                        "analyzer.facts.breakdown_overhead; part of device_cause_ns for launch_bound rows)",
}
