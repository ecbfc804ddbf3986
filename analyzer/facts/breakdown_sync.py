"""The refill after a synchronization: what removing it buys beyond the wait inside it.

A synchronizing call (the calls the timeline breakdown classifies as ``host_sync``: stream, device and
event synchronizations, blocking copies and memsets, implicitly synchronizing allocations) costs more
than the GPU's idle time while the host is blocked in it: when it returns, the GPU's queue is empty,
and the GPU idles until the host has issued the next kernels. Without the synchronization the host
would have issued them while the GPU still ran earlier work.

Per feeding thread and device, the host's time is cut at the returns of its synchronizing calls. In
each interval ``(previous sync's return, this sync's return]``: ``T`` its length, ``S`` the time the
host was blocked in the sync, ``I`` the GPU's idle time fed by that thread, ``B = T - I``. Without the
sync, host and GPU overlap and the interval takes about ``max(H, B)`` with ``H = T - S`` the host's own
time, so removing the sync buys ``T - max(H, B) = min(S, I)``. The breakdown already charges part of
that to ``host_sync`` (the idle while the host was blocked, and its short return); :func:`charge_refills`
charges the rest of ``min(S, I)`` to ``host_sync`` as well, taken from the interval's other host-held
idle time (``launch_bound``, ``host_work``) from its start, the refill after the previous sync, with
the detail ``refill (<call>)`` (:func:`refill_detail`) and the sync's NVTX path.

Except at step boundaries: a loop synchronizes once a step anyway (reading the loss, timing the step;
host-sync-in-loop calls one a step fine), so the interval that holds a step's start or completion (the
``steps`` fact) and the one ending at the last synchronization before it are not charged. Their idle
time is the step's own start and end, held by what the host does there (loading the next batch or
weights, a blocking copy of the batch, the loop's bookkeeping): it stays host work or launch-bound,
where the rules that name it (host-work-in-loop) find it. Steps that are only periods of a repeating GPU
op sequence (a program recorded without NVTX ranges or annotations) may be a part of its loop (a
micro-step, a layer): a thread that synchronizes at least twice per period does more than the loop's one
synchronization a step, and its intervals are charged at the periods' boundaries too (host_sync's
balanced loop recorded by nsys without NVTX: three synchronizations a micro-step, one period each;
exempting two intervals a period charged 28 ms where its NVTX recording charges 59). Iterations marked
by an annotation (``Optimizer.step#...``) keep the exemption: one such iteration of a ResNet loop holds
the data loader's ``next()`` and the two blocking copies of its batch, whose refill would take the
loader's time.

Before the refills, :func:`charge_drains` gives synchronizations the GPU's whole gap around them when
the host synchronizes again before the GPU's next kernel, runs its own code between the two and uploads
only small values in the gap (pageable copies under :data:`SMALL_UPLOAD_BYTES`, two in a row:
``torch.tensor(list, device="cuda")`` twice a layer, the host converting the next list between them),
the same ones in :data:`MIN_REPEATS` such gaps or more (values rebuilt per use in a loop): its
launch-bound and host-work pieces shorter than the dispatch bound (1 ms), from the last kernel's end to
the next kernel, are the syncs'. A gap that uploads a batch (64 KiB or more, or pinned: a data loader's
``next()`` before its input copies, PARAM's ResNet, the DDP jobs) keeps its host work, which stays when
the copies' syncs go; host code of a millisecond or more stays host work; readbacks (a value used
between two reads) keep the refill charge.

Self-limiting: a launch-bound loop (``S`` small: the GPU drained long before the host synchronized)
keeps its launch-bound time; a GPU-bound one (``I`` small) gets only its short refills charged; a
loop where host and GPU take turns gets the overlap that the sync prevents. Every nanosecond keeps
exactly one cause: the charged time changes cause, nothing is added.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Callable

import numpy as np
import pandas as pd

from analyzer.facts._util import column, text_codes
from analyzer.facts.nvtx_ranges import innermost_open, ranges_only
from analyzer.facts.registry import FactContext

#: detail of the refill time charged to a synchronizing call: ``refill (cudaStreamSynchronize)``
REFILL_PREFIX = "refill ("


def refill_detail(call: str) -> str:
    return f"{REFILL_PREFIX}{call})"


#: the detail of a synchronizing operator's own time (:mod:`analyzer.facts.breakdown_syncop`):
#: ``aten::nonzero (up to cudaStreamSynchronize)``
_OP_DETAIL = re.compile(r"^(?P<op>.+) \(up to (?P<call>[^ ()]+)\)$")


def op_detail(op: str, call: str) -> str:
    """The detail of an operator's time up to the return of the synchronizing call inside it (its
    launches, its copy): ``aten::nonzero (up to cudaStreamSynchronize)``."""
    return f"{op} (up to {call})"


def op_charged(detail: str) -> tuple[str, str] | None:
    """``(operator, call)`` of a detail :func:`op_detail` made, else None."""
    m = _OP_DETAIL.match(detail)
    return None if m is None else (m.group("op"), m.group("call"))


def refilled_call(detail: str) -> str:
    """The synchronizing call a ``host_sync`` detail names: the call itself, its refill, or its
    operator's time (:func:`op_detail`)."""
    if detail.startswith(REFILL_PREFIX) and detail.endswith(")"):
        return detail[len(REFILL_PREFIX):-1]
    op = op_charged(detail)
    return op[1] if op is not None else detail


def owned_by_next(detail: str) -> bool:
    """Whether a ``host_sync`` detail's time comes before its call's return (a refill, an operator's
    time up to the call), so the call owning it is the first of its name ending after it; else the call
    owning it is the last of its name starting at or before it (the wait, the return)."""
    return detail.startswith(REFILL_PREFIX) or op_charged(detail) is not None


def owning_calls(seg_tid: np.ndarray, seg_start: np.ndarray, seg_call: np.ndarray, seg_refill: np.ndarray,
                 call_tid: np.ndarray, call_start: np.ndarray, call_end: np.ndarray,
                 call_name: np.ndarray) -> np.ndarray:
    """The call each ``host_sync`` segment is charged to, as a position among the calls given (-1: none
    of them). A segment is given by its feeding thread, start, the call its detail names
    (:func:`refilled_call`) and whether it is a refill (or an operator's time before the call's
    return: :func:`owned_by_next`). The wait inside a call and the return after it belong to the last call of that name on that thread starting at or before the
    segment (no other call of that thread starts in between); a refill belongs to the first one ending
    after the segment's start (the sync whose interval, previous return to its own, holds it:
    :func:`charge_refills`). Exact when the calls are every synchronizing call of those names on those
    threads in the window (a call that started before it owns no segment a later call could be taken
    for): a rule's rows stand for their own calls' time, not for every call of their name."""
    owner = np.full(len(seg_start), -1, dtype=np.int64)
    if not len(seg_start) or not len(call_start):
        return owner
    tids, tid_codes = np.unique(np.r_[np.asarray(call_tid, np.int64), np.asarray(seg_tid, np.int64)],
                                return_inverse=True)
    name_codes, names = pd.factorize(np.r_[np.asarray(call_name, object), np.asarray(seg_call, object)])
    key = tid_codes.reshape(-1).astype(np.int64) * (len(names) + 1) + name_codes
    n = len(call_start)
    c_key, s_key = key[:n], key[n:]
    c_start, c_end = np.asarray(call_start, np.int64), np.asarray(call_end, np.int64)
    s_start = np.asarray(seg_start, np.int64)
    refill = np.asarray(seg_refill, bool)
    order = np.lexsort((c_start, c_key))
    sorted_key = c_key[order]
    for k in np.unique(s_key).tolist():
        lo, hi = np.searchsorted(sorted_key, [k, k + 1])
        if lo == hi:
            continue
        calls = order[lo:hi]  # this thread's calls of this name, by start
        starts = c_start[calls]
        ends = np.maximum.accumulate(c_end[calls])
        segs = np.flatnonzero(s_key == k)
        at = np.where(refill[segs], np.searchsorted(ends, s_start[segs], side="right"),
                      np.searchsorted(starts, s_start[segs], side="right") - 1)
        ok = (at >= 0) & (at < len(calls))
        owner[segs[ok]] = calls[at[ok]]
    return owner


def charged_segments(seg: pd.DataFrame, call_tid: np.ndarray, call_start: np.ndarray, call_end: np.ndarray,
                     call_name: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``host_sync`` rows of ``seg`` (``timeline_segments``) charged to the calls given, as positions
    in ``seg`` and the owning call's position (:func:`owning_calls`: the calls must be every
    synchronizing call of their names on their threads in the window)."""
    empty = np.empty(0, dtype=np.int64)
    if seg.empty or not len(call_start) or "host_tid" not in seg.columns:
        return empty, empty
    codes, labels = text_codes(seg["cause"])
    hs = np.flatnonzero((labels == "host_sync")[codes])
    if not len(hs):
        return empty, empty
    d_codes, d_labels = text_codes(seg["detail"].iloc[hs])
    call_of = np.array([refilled_call(str(x)) for x in d_labels], dtype=object)[d_codes]
    refill = np.array([owned_by_next(str(x)) for x in d_labels], dtype=bool)[d_codes]
    # the host_sync rows taken before widening (millions of segments, ids in 32 bits)
    owner = owning_calls(seg["host_tid"].to_numpy()[hs].astype(np.int64), seg["start"].to_numpy()[hs].astype(np.int64),
                         call_of, refill,
                         call_tid, call_start, call_end, call_name)
    ok = owner >= 0
    return hs[ok], owner[ok]


def charged_ns(seg: pd.DataFrame, calls: pd.DataFrame, owns: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``calls`` (an API-call fact's rows: tid, start, end, name), the GPU idle time (ns) the
    timeline breakdown charged to it as ``host_sync``: the wait inside it, the return from it, the
    refill before its return. ``owns``: the rows that can hold such time (blocking calls; the others
    get 0 and are not taken for the owner of another call's time)."""
    out = np.zeros(len(calls), dtype=np.int64)
    if not len(calls):
        return out
    rows = np.arange(len(calls)) if owns is None else np.flatnonzero(owns)

    def num(c: str) -> np.ndarray:
        return pd.to_numeric(calls[c], errors="coerce").fillna(-1).to_numpy("int64")[rows]

    pos, owner = charged_segments(seg, num("tid"), num("start"), num("end"),
                                  calls["name"].astype(str).to_numpy(object)[rows])
    if len(pos):
        dur = seg["end"].to_numpy()[pos].astype(np.int64) - seg["start"].to_numpy()[pos].astype(np.int64)
        out[rows] = np.rint(np.bincount(owner, weights=dur, minlength=len(rows))).astype(np.int64)
    return out


#: one thread's synchronizing calls: (tid, start, end, detail code), disjoint and sorted by start
SyncBlocks = tuple[int, np.ndarray, np.ndarray, np.ndarray]


def _interval_sums(k: np.ndarray, dur: np.ndarray, n: int) -> np.ndarray:
    """Sums of ``dur`` (ns) per interval index ``k`` (any order, within 0..n-1): exact, since float64
    holds every integer sum below 2^53 ns (104 days)."""
    return np.rint(np.bincount(k, weights=dur, minlength=n)).astype(np.int64)


#: the columns of the idle segments that :func:`charge_refills` charges and cuts
IDLE_COLUMNS = ("device", "start", "end", "cause", "detail", "path_codes", "tid", "pid")


#: :func:`charge_refills` reads a synchronizing thread's idle rows this many at a time
REFILL_CHUNK = 1 << 22


def _thread_rows(tid: np.ndarray, t: int, start: np.ndarray, dev: np.ndarray, r_e: np.ndarray, open_k: np.ndarray,
                 n: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per chunk of :data:`REFILL_CHUNK` idle rows, in row order: ``(rows, k, devices)`` of thread ``t``'s
    rows that lie in an open interval ``k`` (``(r_e[k-1], r_e[k]]``, ``open_k[k]``)."""
    open_at = np.r_[open_k, False]  # interval n (after the last return) is never open
    for a in range(0, len(tid), REFILL_CHUNK):
        part = tid[a:a + REFILL_CHUNK] == t
        if part.all():  # a chunk of this thread's rows only (one feeding thread): read as it is, no gathers
            k_all = np.searchsorted(r_e, start[a:a + REFILL_CHUNK], side="right")
            inside = open_at[k_all]
            if inside.any():
                rows = np.flatnonzero(inside)
                rows += a
                yield rows, k_all[inside], dev[rows]
            continue
        mine = np.flatnonzero(part)
        mine += a
        k_all = np.searchsorted(r_e, start[mine], side="right")
        inside = open_at[k_all]
        if inside.any():
            yield mine[inside], k_all[inside], dev[mine[inside]]


def _by_device(rows: np.ndarray, k: np.ndarray, devs: np.ndarray) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(device, rows, k)`` per device of ``devs`` in increasing order (one device: the arrays as they are)."""
    if len(devs) and devs.min() == devs.max():
        yield int(devs[0]), rows, k
        return
    for d in np.unique(devs).tolist():
        on = devs == d
        yield d, rows[on], k[on]


#: a host-to-device copy from pageable memory up to this size is staged and returns at once (CUDA's
#: "API synchronization behavior"): values made on the host, not a batch of input
SMALL_UPLOAD_BYTES = 64 * 1024
#: gaps with the same small uploads (count and bytes) on a thread and device: a loop's rebuilt values
MIN_REPEATS = 3


class _Intervals:
    """A thread's intervals between the returns of its synchronizing calls, and which are charged: interval
    k = (r_e[k-1], r_e[k]], k >= 1, with the sync's blocked time inside the window; not the first (before
    the thread's first sync: no queue drained by an earlier one) nor those either side of a step boundary
    (the step's own synchronization), unless the steps are periods holding two of the thread's syncs or
    more (see the module docstring)."""

    def __init__(self, ctx: FactContext) -> None:
        self.w = ctx.window
        self.steps = ctx.get("steps")
        # steps that are only periods of the GPU op sequence: the program declared none
        self.guessed = self.w.steps is not None and self.w.steps.source == "periodic"
        self.done = np.empty(0, np.int64)
        if not self.steps.empty:  # every step's start and completion
            end_ns = self.steps["done"].to_numpy(dtype=np.int64)
            self.done = np.unique(np.r_[end_ns - self.steps["duration"].to_numpy(dtype=np.int64), end_ns])

    def __call__(self, r_s: np.ndarray, r_e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(blocked ns, charged)`` per interval."""
        w, done, n = self.w, self.done, len(r_e)
        blocked = np.maximum(np.minimum(r_e, w.end_ns) - np.maximum(r_s, w.start_ns), 0)
        open_k = blocked > 0
        open_k[0] = False
        # periods that hold two synchronizations of this thread or more are not the loop's steps with
        # their one synchronization
        sub_step = self.guessed and int(np.count_nonzero(blocked)) >= 2 * len(self.steps)
        if len(done) and not sub_step:  # the step's own synchronization: the intervals either side of a boundary
            before = np.searchsorted(done, r_e, side="right")  # boundaries up to each return
            crosses = np.zeros(n + 1, dtype=bool)  # interval k holds a boundary (k = n: after the last)
            crosses[1:n] = before[1:] > before[:-1]
            crosses[n] = before[-1] < len(done)
            open_k &= ~(crosses[:n] | crosses[1:])
        return blocked, open_k


def charge_drains(ctx: FactContext, idle: dict[str, np.ndarray], syncs: list[SyncBlocks], labels: list[str],
                  code: Callable[[str], int], causes: dict[str, int],
                  kernels: tuple[np.ndarray, np.ndarray, np.ndarray], dispatch_ns: int) -> None:
    """Charges to ``host_sync`` the GPU's gap around synchronizations that leave it empty, **in place** in
    ``idle``: where the feeding thread synchronizes again before the device's next kernel, ran its own
    code between (a ``host_work`` row: longer than a return) and host-to-device copies ran in the gap,
    every one a small pageable upload (under :data:`SMALL_UPLOAD_BYTES`: the host made values and
    uploaded them synchronously instead of queueing work, a tensor built from a Python list,
    ``torch.tensor(list, device="cuda")``; a batch of input, 64 KiB or more or pinned, is the loader's
    work, which stays when the copies' syncs go) and the same uploads (count and bytes) in
    :data:`MIN_REPEATS` such gaps of the thread or more (a loop rebuilding its values; not one library
    call's own host code), the thread's
    launch-bound and host-work idle rows on that device from the last kernel's end to the next kernel,
    each shorter than ``dispatch_ns``, are the syncs' (detail :func:`refill_detail` of the gap's last
    synchronizing call, whose return lets the host queue work again). Making the data once on the device
    removes the conversion with the copy and its synchronization. Host code of ``dispatch_ns`` or more
    (loading data, a loop's own work) stays host work, and a readback's value used between two reads
    keeps the refill charge (:func:`charge_refills`, min(S, I)). Charged only in the intervals
    :func:`charge_refills` charges (not at a step boundary: the step's own synchronization stays the
    host's). Idle rows end at a busy op and start at or after the last one, so whole rows are charged,
    none cut. ``kernels``: (device, start, end) of the compute time."""
    if not syncs or not len(idle["start"]) or not len(kernels[0]):
        return
    hs, lb, hw = causes["host_sync"], causes["launch_bound"], causes["host_work"]
    dev, start, cause, tid = idle["device"], idle["start"], idle["cause"], idle["tid"]
    k_dev, k_start, k_end = (np.asarray(x, np.int64) for x in kernels)
    opened = _Intervals(ctx)
    mc = ctx.trace.memcpy
    # device -> (sorted starts of its host-to-device copies, how many of them up to each are not a small
    # pageable upload, their bytes up to each)
    uploads: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if len(mc) and "direction" in mc.columns:
        up = mc.loc[mc["direction"].astype(str).to_numpy() == "H2D"]
        if len(up):
            u_dev = up["device"].to_numpy(np.int64)
            u_start = up["start"].to_numpy(np.int64)
            u_other = np.ones(len(up), dtype=bool)  # a batch, pinned or of unknown memory
            u_bytes = np.zeros(len(up), np.int64)
            if "bytes" in up.columns and "src_kind" in up.columns:
                u_bytes = up["bytes"].to_numpy(np.int64)
                u_other = (u_bytes >= SMALL_UPLOAD_BYTES) | (up["src_kind"].astype(str).to_numpy() != "pageable")
            for x in np.unique(u_dev).tolist():
                on = np.flatnonzero(u_dev == x)
                o = on[np.argsort(u_start[on], kind="stable")]
                uploads[int(x)] = (u_start[o], np.r_[0, np.cumsum(u_other[o])], np.r_[0, np.cumsum(u_bytes[o])])
    per_dev: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for t, r_s, r_e, r_d in syncs:
        _blocked, open_k = opened(r_s, r_e)
        if not open_k.any():
            continue
        mine = np.flatnonzero((tid == t) & ((cause == lb) | (cause == hw)) & (idle["end"] - start < dispatch_ns))
        if not len(mine):
            continue
        m_dev = dev[mine]
        one = m_dev.min() == m_dev.max()  # one device (the common case): no unique, no per-device rows
        for d in ([int(m_dev[0])] if one else np.unique(m_dev).tolist()):
            if d not in per_dev:  # the device's kernels by start, the running maximum of their ends (once)
                on_d = k_dev == d
                o = np.argsort(k_start[on_d], kind="stable")
                per_dev[d] = (k_start[on_d][o], np.maximum.accumulate(k_end[on_d][o]))
            ks, ke = per_dev[d]
            # the last kernel end at each return, and the next kernel start after it
            at = np.searchsorted(ks, r_e, side="left")  # kernels starting before the return
            last_end = np.where(at > 0, ke[np.maximum(at - 1, 0)], -1)
            nxt = np.where(at < len(ks), ks[np.minimum(at, len(ks) - 1)], np.iinfo(np.int64).max)
            again = np.r_[r_s[1:], np.iinfo(np.int64).max] < nxt  # the next sync comes before the next kernel
            drained = open_k & again
            if not drained.any():
                continue
            rows = mine if one else mine[m_dev == d]
            rs = start[rows]
            # the GPU's gap around each such call: from the last kernel's end to the next kernel; each row
            # in one
            q = np.flatnonzero(drained)
            q = q[np.lexsort((q, last_end[q]))]
            j = np.searchsorted(last_end[q], rs, side="right") - 1
            ok = j >= 0
            ok[ok] = rs[ok] < nxt[q[j[ok]]]
            if not ok.any():
                continue
            # only gaps where the host ran its own code between the synchronizations (host work: longer
            # than a return), not only returned and dispatched
            gap = q[j[ok]]
            worked = np.unique(gap[cause[rows[ok]] == hw])
            # ...and uploaded what it made: a host-to-device copy ran in the gap (a value read back and
            # used between two reads is the loop's own work, which the refill charge weighs)
            ups, other, nbytes = uploads.get(d, (np.empty(0, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)))
            c_at = np.searchsorted(ups, last_end[worked], side="left")
            c_to = np.searchsorted(ups, nxt[worked], side="left")
            # ...only small pageable uploads (made from host values, not a batch of input)...
            c_ok = (c_to > c_at) & (other[c_to] == other[c_at])
            # ...the same ones (count and bytes) in MIN_REPEATS such gaps or more: values rebuilt per use
            # in a loop, not one library call's own host code
            sig = np.stack([c_to - c_at, nbytes[c_to] - nbytes[c_at]], axis=1)[c_ok]
            if len(sig):
                _u, s_inv, s_n = np.unique(sig, axis=0, return_inverse=True, return_counts=True)
                c_ok[c_ok] = s_n[s_inv.reshape(-1)] >= MIN_REPEATS
            ok[ok] = np.isin(gap, worked[c_ok])
            if not ok.any():
                continue
            # named by the gap's last synchronizing call, whose return lets the host queue work again
            hit = rows[ok]
            sync = np.searchsorted(r_s, nxt[q[j[ok]]], side="left") - 1
            used, inv = np.unique(r_d[sync], return_inverse=True)
            cause[hit] = hs
            idle["detail"][hit] = np.array([code(refill_detail(labels[u])) for u in used.tolist()],
                                           dtype=np.int64)[inv.reshape(-1)]


def charge_refills(ctx: FactContext, idle: dict[str, np.ndarray], syncs: list[SyncBlocks], labels: list[str],
                   code: Callable[[str], int], causes: dict[str, int]) -> dict[str, np.ndarray] | None:
    """Charges each sync's refill to ``host_sync`` in ``idle`` (the breakdown's idle segments as
    columns: :data:`IDLE_COLUMNS`, path_codes into path_labels), **in place**: the charged segments'
    end, cause, detail and path_codes are overwritten (and path_labels replaced where the syncs' NVTX
    paths are new). A segment the charge ends inside is cut: its charged head stays in place, and the
    remainder (keeping its cause) is returned among the new rows to append, as columns like ``idle``'s
    (None: no segment cut, nothing charged or nothing to charge). Appending them is left to the caller,
    which gathers every segment column once anyway (no copy of millions of idle rows here).
    ``syncs``: each feeding thread's synchronizing calls; ``labels``/``code``: the detail texts and their
    coder."""
    if not syncs or not len(idle["start"]):
        return None
    hs, lb, hw = causes["host_sync"], causes["launch_bound"], causes["host_work"]
    dev, start, end = idle["device"], idle["start"], idle["end"]
    cause, tid = idle["cause"], idle["tid"]
    opened = _Intervals(ctx)
    by_tid = {t: (s, e, d) for t, s, e, d in syncs}
    take_row: list[np.ndarray] = []  # idle row charged
    take_ns: list[np.ndarray] = []  # how much of it, from its start
    take_sync: list[np.ndarray] = []  # the sync (position in its thread's blocks)
    take_tid: list[int] = []
    for t, (r_s, r_e, _) in by_tid.items():
        n = len(r_e)
        blocked, open_k = opened(r_s, r_e)
        if not open_k.any():
            continue
        # the thread's idle rows and their intervals: passes over the rows per synchronizing thread (a
        # few), REFILL_CHUNK rows at a time (a 10 M-kernel trace has about 37 M idle rows, most of one
        # thread: no per-row temporary of them all); sums per interval need no order, only the pieces a
        # refill is taken from are sorted. First the sums per (device, interval), then the eligible pieces
        per_dev: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # device -> (idle ns, host_sync ns) per interval
        # idle rows of one chunk (up to a few million kernels): the first pass's rows kept for the second
        # (one search of the rows' intervals, not two); more: searched again chunk by chunk (nothing held)
        kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = [] if len(tid) <= REFILL_CHUNK else None
        for rows, k, devs in _thread_rows(tid, t, start, dev, r_e, open_k, n):
            if kept is not None:
                kept.append((rows, k, devs))
            for d, r, kd in _by_device(rows, k, devs):
                dur = end[r] - start[r]
                c = cause[r]
                sums = per_dev.setdefault(d, (np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)))
                sums[0][:] += _interval_sums(kd, dur, n)
                sums[1][:] += _interval_sums(kd[c == hs], dur[c == hs], n)
        extra_of = {d: np.maximum(np.minimum(blocked, idle_ns) - already, 0)
                    for d, (idle_ns, already) in per_dev.items()}
        del per_dev
        picked: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        again = kept if kept is not None else _thread_rows(tid, t, start, dev, r_e, open_k, n)
        del kept
        for rows, k, devs in again:
            for d, r, kd in _by_device(rows, k, devs):
                c = cause[r]
                elig = ((c == lb) | (c == hw)) & (extra_of[d][kd] > 0)
                if elig.any():
                    got = picked.setdefault(d, ([], []))
                    got[0].append(r[elig])
                    got[1].append(kd[elig])
        del again  # the kept rows freed before the next thread's are searched
        for d in sorted(picked):
            er, ek = np.concatenate(picked[d][0]), np.concatenate(picked[d][1])
            o = np.argsort(start[er], kind="stable")  # in time order, so each interval's pieces are a run
            er, ek = er[o], ek[o]
            ed, ek_extra = end[er] - start[er], extra_of[d][ek]
            # time before each eligible piece in its interval (pieces in start order)
            cum = np.cumsum(ed) - ed
            ra = np.flatnonzero(np.r_[True, ek[1:] != ek[:-1]])  # each interval's first piece
            first = np.repeat(cum[ra], np.diff(np.r_[ra, len(ek)]))
            take = np.clip(ek_extra - (cum - first), 0, ed)
            pick = take > 0
            take_row.append(er[pick])
            take_ns.append(take[pick])
            take_sync.append(ek[pick])
            take_tid.extend([t] * int(pick.sum()))
    if not take_row:
        return None
    rows = np.concatenate(take_row)
    take = np.concatenate(take_ns)
    sync_pos = np.concatenate(take_sync)
    sync_tid = np.asarray(take_tid, dtype=np.int64)
    # the charged sync's call and NVTX path (its thread's innermost range at its middle; else the
    # segment keeps its own)
    call = np.empty(len(rows), dtype=np.int64)
    mid = np.empty(len(rows), dtype=np.int64)
    for t in np.unique(sync_tid).tolist():
        m = sync_tid == t
        r_s, r_e, r_d = by_tid[t]
        call[m] = r_d[sync_pos[m]]
        mid[m] = r_s[sync_pos[m]] + (r_e[sync_pos[m]] - r_s[sync_pos[m]]) // 2
    used, inv = np.unique(call, return_inverse=True)
    refill = np.array([code(refill_detail(labels[u])) for u in used.tolist()], dtype=np.int64)[inv.reshape(-1)]
    path_codes, path_labels = idle["path_codes"], idle["path_labels"]
    new_path = path_codes[rows].copy()
    nv = ranges_only(ctx.trace.nvtx)
    if not nv.empty:
        rpos = innermost_open(nv, sync_tid, mid)
        has = rpos >= 0
        if has.any():
            nv_path, labels_here = text_codes(column(nv, "path", ""))
            new_path[has] = nv_path[rpos[has]] + len(path_labels)
            path_labels = np.r_[np.asarray(path_labels, dtype=object), labels_here]
    # the remainders of the pieces charged in part, as new rows with the old labels (gathered before
    # the charged heads are overwritten)
    part = take < end[rows] - start[rows]
    rest = rows[part]
    extra = {name: idle[name][rest] for name in IDLE_COLUMNS}
    extra["start"] = start[rest] + take[part]
    end[rows] = start[rows] + take
    cause[rows] = hs
    idle["detail"][rows] = refill
    idle["path_codes"][rows] = new_path
    idle["path_labels"] = path_labels
    return extra if len(rest) else None
