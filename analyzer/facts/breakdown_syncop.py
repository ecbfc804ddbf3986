"""A synchronizing operation's own host time: the launches, the copy and the dispatch that belong to it.

A data-dependent operator (``torch.nonzero`` behind ``torch.where(mask)`` and ``x[mask]``, ``.item()``,
``.tolist()``, ``torch.unique``) launches its kernels, copies a result to the host and waits for it
(``cudaMemcpyAsync`` + ``cudaStreamSynchronize``), then launches the kernels that need the value. In a
launch-bound loop the GPU has drained long before the wait, so the wait itself is short, and the
breakdown's other charges to the synchronization (the wait, the return, the refill:
:mod:`analyzer.facts.breakdown_sync`) are small; the operator's own launches and dispatch would stay
``launch_bound``. Removing the synchronization means removing the operator (static shapes, a
capacity-based dispatch, a value kept on the GPU), and with it the host time the operator spends
getting the value to the host: the GPU idle while the host was inside that operator, up to the
synchronizing call's return, is the synchronization's cost. Every call the breakdown counts as
``host_sync`` is treated so (stream, device and event synchronizations, blocking copies:
``aten::copy_`` of a ``.cpu()`` into pageable memory, synchronizing allocations), and the time goes to
the rule of that call's kind (host-sync-in-loop, sync-memcpy, alloc-in-loop: ``host_wait_kind``). A
step's own synchronization is treated the same: ``.item()``'s ``aten::_local_scalar_dense`` holds only
its copy call before the wait (about 9 us under torch.profiler).

Where the trace says which launches belong to the operator, :func:`charge_sync_ops` charges the GPU's
``launch_bound`` and ``host_work`` idle time while the feeding thread was inside it, up to the
call's return, to ``host_sync``:

* **torch.profiler**: the ``cpu_op`` events (``aten::nonzero``, ``aten::_local_scalar_dense``...) that
  enclose each synchronizing call;
* **nsys** with PyTorch's ``emit_nvtx`` operator ranges (``aten::nonzero, seq = ...``), the same.

The operator is the *innermost* operator range on the thread that encloses the synchronizing call: the
operator that needed the value on the host (``aten::nonzero`` inside ``aten::where`` inside
``aten::nonzero_numpy``; ``aten::_local_scalar_dense`` inside ``aten::item``). Its callers' own time
(``torch.where`` splitting the result into tensors, the gather by the indices) is not charged: a fix
may keep some of it. Only the operator's time up to the call's return is charged (from the operator's
start, or the return of an earlier synchronizing call inside it): the launches that compute the value
read back, the copy, the wait. Its time after the return (a ``nonzero`` allocating its output by the
count and launching the kernels that fill it) stays ``launch_bound``: a static-shape rewrite does that
work too, into fixed-size buffers (mask_index_sync's capacity-based twin computes every token's slot
with its own launches, once a layer), so removing the synchronization does not remove it. On
``mask_index_sync_loop`` (torch.profiler, H100) that part is 25.5 ms of the window against 52.9 ms
before the returns; charged too, host-sync-in-loop stated 1.44 of what the twin saved (0.23 with the
wait and refill alone). The detail names the operator and the call (``aten::nonzero (up to
cudaStreamSynchronize)``), the NVTX path the operator's (its range and the program's ranges above
it). Only idle time moves: an operator whose GPU work keeps the GPU busy is charged nothing, and every
nanosecond keeps one cause. The refill after the call (:func:`analyzer.facts.breakdown_sync.charge_refills`)
runs after this charge and counts it among what the synchronization already has, so the interval's
charge is at most ``min(S + op, I)`` (the refill model's saving with the operator's host time removed
too).

**nsys without operator ranges**: not separable. The trace holds the launch calls and the
synchronizing call on one thread, but not which launches belong to the operator that synchronizes:
the kernels right before a ``cudaMemcpyAsync`` device-to-host may compute the value read back (a
``nonzero``'s count) or be the step's own work whose result is read (a loss before ``.item()``), and
the kernels after the wait may use the value or be the next unrelated op. Kernel names could tell a
``nonzero``'s ``cub`` select kernels from a GEMM, but not in general, and no name list covers every
data-dependent operator; so nothing is charged there and the operator's launches stay ``launch_bound``
(the synchronization is stated its wait, return and refill only). Recording with
``torch.autograd.profiler.emit_nvtx()`` or with torch.profiler makes it separable.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from analyzer.facts._util import column, text
from analyzer.facts.breakdown_sync import IDLE_COLUMNS, SyncBlocks, op_detail
from analyzer.facts.nvtx import operator_ranges
from analyzer.facts.nvtx_ranges import innermost_open, parent_positions, ranges_only
from analyzer.facts.registry import FactContext

def op_name(text_: str) -> str:
    """An operator range's name without emit_nvtx's arguments: ``aten::mm, seq = 5, sizes = ...`` ->
    ``aten::mm``."""
    return text_.split(",", 1)[0].strip()


#: per thread, disjoint spans sorted by start: (start, end, operator row, sync position)
Spans = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _sync_ops(nv: pd.DataFrame, syncs: list[SyncBlocks], w0: int, w1: int
              ) -> tuple[pd.DataFrame, dict[int, Spans]]:
    """The operator ranges, and per thread the spans charged to its synchronizing calls that overlap the
    window ``[w0, w1)``: for each call, the innermost operator range enclosing it, from the operator's
    start (or the thread's previous synchronizing call's return, when later) to the call's return. A
    span nested in another cuts it (the inner one's time is the inner one's); the operator rows index
    the operator ranges' rows."""
    out: dict[int, Spans] = {}
    if nv.empty or not syncs:
        return nv, out
    ops = nv.loc[operator_ranges(nv)]
    if ops.empty:
        return ops, out
    o_s, o_e = ops["start"].to_numpy(dtype=np.int64), ops["end"].to_numpy(dtype=np.int64)
    parent = parent_positions(ops)  # -1 where the parent is no operator
    q_tid, q_s, q_e, q_prev, q_k = [], [], [], [], []
    for t, r_s, r_e, _ in syncs:
        live = np.flatnonzero((r_e > w0) & (r_s < w1))
        q_tid.append(np.full(len(live), t, dtype=np.int64))
        q_s.append(r_s[live])
        q_e.append(r_e[live])
        q_prev.append(np.where(live > 0, r_e[np.maximum(live - 1, 0)], np.iinfo(np.int64).min))
        q_k.append(live)
    tids, a, b, prev, ks = (np.concatenate(x) for x in (q_tid, q_s, q_e, q_prev, q_k))
    pos = innermost_open(ops, tids, a)
    while True:  # up the operator parents until one encloses the whole call
        short = np.flatnonzero(pos >= 0)
        short = short[o_e[pos[short]] < b[short]]
        if not len(short):
            break
        pos[short] = parent[pos[short]]
    has = pos >= 0
    for t in np.unique(tids[has]).tolist():
        m = np.flatnonzero((tids == t) & has)
        p = pos[m]
        spans = sorted(zip(np.maximum(o_s[p], prev[m]).tolist(), b[m].tolist(), p.tolist(), ks[m].tolist()),
                       key=lambda x: (x[0], -x[1]))
        flat = _flatten(spans)
        out[t] = tuple(np.array([x[i] for x in flat], dtype=np.int64) for i in range(4))  # type: ignore[assignment]
    return ops, out


def _flatten(spans: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Properly nested spans ``(start, end, op, sync)`` sorted by (start, -end) as disjoint pieces, each
    piece the innermost span's (a span overlapping the one open without nesting in it is left out)."""
    out: list[tuple[int, int, int, int]] = []
    stack: list[tuple[int, int, int, int]] = []
    at = 0  # where the uncovered part of the stack's top begins

    def emit_until(t: int) -> None:
        nonlocal at
        while stack:
            top = stack[-1]
            stop = min(top[1], t)
            if stop > at:
                out.append((at, stop, top[2], top[3]))
                at = stop
            if top[1] > t:
                return
            stack.pop()

    for sp in spans:
        emit_until(sp[0])
        if stack and sp[1] > stack[-1][1]:
            continue
        stack.append(sp)
        at = sp[0]
    emit_until(np.iinfo(np.int64).max)
    return out


def charge_sync_ops(ctx: FactContext, idle: dict[str, np.ndarray], syncs: list[SyncBlocks], labels: list[str],
                    code: Callable[[str], int], causes: dict[str, int]) -> dict[str, np.ndarray] | None:
    """Charges to ``host_sync`` the GPU idle time (``launch_bound``, ``host_work``) while each feeding
    thread was inside the operator that holds one of its synchronizing calls, up to the call's return
    (:func:`_sync_ops`), **in place** in ``idle`` (columns :data:`IDLE_COLUMNS`): a segment a span's
    bounds cut keeps its first piece in place, and its other pieces are returned as new rows (None:
    nothing cut). The charged pieces' detail is :func:`op_detail`, their NVTX path their operator's (``path_labels``
    extended). Nothing
    is charged where the trace has no operator ranges (nsys without emit_nvtx: see the module docstring)."""
    if not syncs or not len(idle["start"]):
        return None
    w = ctx.window
    ops, per_tid = _sync_ops(ranges_only(ctx.trace.nvtx), syncs, w.start_ns, w.end_ns)
    if not per_tid:
        return None
    names = text(column(ops, "text", "")).to_numpy(dtype=object)
    # the charged pieces' NVTX path: their operator's (its range and the ranges above it), coded after
    # the idle segments' own paths
    used = np.unique(np.concatenate([v[2] for v in per_tid.values()]))
    op_path = np.full(len(ops), -1, dtype=np.int64)
    path_labels = np.asarray(idle["path_labels"], dtype=object)
    p_codes, p_labels = pd.factorize(text(column(ops, "path", "")).to_numpy(dtype=object)[used])
    op_path[used] = p_codes + len(path_labels)
    idle["path_labels"] = np.r_[path_labels, np.asarray(p_labels, dtype=object)]
    call_of = {t: d for t, _s, _e, d in syncs}
    lb, hw, hs = causes["launch_bound"], causes["host_work"], causes["host_sync"]
    start, end, cause, tid = idle["start"], idle["end"], idle["cause"], idle["tid"]
    elig_all = (cause == lb) | (cause == hw)
    new_parts: list[dict[str, np.ndarray]] = []
    heads: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    details: dict[tuple[int, int], int] = {}
    for t, (bs, be, b_op, b_k) in per_tid.items():
        rows = np.flatnonzero(elig_all & (tid == t))
        # the rows overlapping some span
        first = np.searchsorted(be, start[rows], side="right")  # first span ending after the row's start
        hit = first < len(bs)
        hit[hit] = bs[first[hit]] < end[rows[hit]]
        rows = rows[hit]
        if not len(rows):
            continue
        s, e = start[rows], end[rows]
        # each row cut at every span bound inside it: sub-piece j of row i is [cut j-1, cut j)
        bounds = np.unique(np.r_[bs, be])
        lo = np.searchsorted(bounds, s, side="right")
        ncut = np.maximum(np.searchsorted(bounds, e, side="left") - lo, 0)
        rep = np.repeat(np.arange(len(rows)), ncut + 1)
        offs = np.arange(len(rep)) - np.repeat(np.cumsum(ncut + 1) - (ncut + 1), ncut + 1)
        top = len(bounds) - 1
        sub_s = np.where(offs == 0, s[rep], bounds[np.clip(lo[rep] + offs - 1, 0, top)])
        sub_e = np.where(offs == ncut[rep], e[rep], bounds[np.clip(lo[rep] + offs, 0, top)])
        span = np.searchsorted(bs, sub_s, side="right") - 1
        ok = span >= 0
        ok[ok] = be[span[ok]] > sub_s[ok]
        dcodes = np.full(len(sub_s), -1, dtype=np.int64)
        pcodes = np.full(len(sub_s), -1, dtype=np.int64)
        if ok.any():
            pcodes[ok] = op_path[b_op[span[ok]]]
            keys = list(zip(b_op[span[ok]].tolist(), call_of[t][b_k[span[ok]]].tolist()))
            for key in set(keys):
                if key not in details:
                    details[key] = code(op_detail(op_name(str(names[key[0]])), labels[key[1]]))
            dcodes[ok] = [details[k] for k in keys]
        src = rows[rep]
        head = offs == 0
        if (~head).any():  # every sub-piece but a row's first: new rows
            tail = ~head
            part = {name: idle[name][src[tail]] for name in IDLE_COLUMNS}
            part["start"], part["end"] = sub_s[tail], sub_e[tail]
            charge = dcodes[tail] >= 0
            part["cause"][charge] = hs
            part["detail"][charge] = dcodes[tail][charge]
            part["path_codes"][charge] = pcodes[tail][charge]
            new_parts.append(part)
        end[src[head]] = sub_e[head]
        hc = dcodes[head] >= 0
        heads.append((src[head][hc], dcodes[head][hc], pcodes[head][hc]))
    for r, c, pc in heads:
        cause[r] = hs
        idle["detail"][r] = c
        idle["path_codes"][r] = pc
    if not new_parts:
        return None
    return {name: np.concatenate([p[name] for p in new_parts]) for name in IDLE_COLUMNS}
