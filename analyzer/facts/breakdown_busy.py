"""Busy time of the timeline breakdown: each GPU op's class (compute, communication, copy/memset) and
detail, the busy pieces per device and level, and the idle gaps between them (split from
:mod:`analyzer.facts.breakdown`, whose docstring defines the causes)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analyzer.facts._util import column, key_groups, text, text_codes
from analyzer.facts.breakdown_pieces import _complement, _frontier, _merge_pieces, intersect
from analyzer.facts.intervals import graph_spans
from analyzer.facts.registry import FactContext

#: busy pieces' columns (device, start, end, cause, detail, op) and gaps' (device, start, end, prev op, next op)
Columns = tuple[list[np.ndarray], ...]


def label_coder(labels: list[str]) -> Callable[[str], int]:
    """Numbers detail labels in order of first use: the returned function gives a label's code (its index
    in ``labels``), appending it to ``labels`` (in place) when it is new."""
    index = {x: i for i, x in enumerate(labels)}

    def code(label: str) -> int:
        if label not in index:
            index[label] = len(labels)
            labels.append(label)
        return index[label]
    return code


def _c10d_details(ctx: FactContext, ops: pd.DataFrame, rows: np.ndarray, detail: np.ndarray,
                  code: Callable[[str], int]) -> None:
    """Communication ops ``rows`` of ``ops`` whose kernel name says no collective (RCCL/NCCL's
    ``ncclDevKernel_Generic``) take the one c10d recorded on the kernel
    (:func:`analyzer.facts.comm.kernel_collectives`), matched on (device, start, correlation id)."""
    from analyzer.facts.comm import kernel_collectives

    k = ctx.trace.kernels
    named = text(k["comm_collective"]) != ""
    if not named.any():
        return
    k = k.loc[named.to_numpy()]
    coll = kernel_collectives(k)
    keys = pd.MultiIndex.from_arrays([column(k, "device", 0).to_numpy(np.int64), k["start"].to_numpy(np.int64),
                                      column(k, "correlation_id", -1).to_numpy(np.int64)])
    lookup = pd.Series(coll, index=keys)
    lookup = lookup[~lookup.index.duplicated()]
    mine = pd.MultiIndex.from_arrays([ops["device"].to_numpy(np.int64)[rows], ops["start"].to_numpy(np.int64)[rows],
                                      ops["correlation_id"].to_numpy(np.int64)[rows]])
    found = lookup.reindex(mine).to_numpy(dtype=object)
    hit = np.array([isinstance(v, str) and v not in ("", "Generic") for v in found], dtype=bool)
    if hit.any():
        detail[rows[hit]] = [code(str(v)) for v in found[hit]]


def _op_classes(ctx: FactContext, ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per op: level (0 compute, 1 communication, 2 copy/memset) and a detail code into the returned
    labels (kernel category, collective, copy direction and memory kind)."""
    from analyzer.facts.categories import classify_codes, load_categories, with_graph_executions
    from analyzer.facts.comm import COMMUNICATION, parse_nccl_kernel

    n = len(ops)
    op_codes, op_labels = text_codes(ops["op"])
    kind_labels = np.asarray(op_labels, dtype=object)

    def of_kind(name: str) -> np.ndarray:  # rows whose op is ``name``, from the few labels' test
        return (kind_labels == name)[op_codes] if n else np.zeros(0, dtype=bool)

    labels: list[str] = []
    code = label_coder(labels)

    level = np.zeros(n, dtype=np.int8)
    detail = np.zeros(n, dtype=np.int64)
    is_kernel = of_kind("kernel")
    if is_kernel.any():
        table = load_categories(ctx.options.get("categories_file") or None)
        kl = ops["label"][is_kernel]
        ccodes, cats = with_graph_executions(*classify_codes(kl, kl, table),
                                             ops["in_graph"][is_kernel] if "in_graph" in ops else None)
        # the collective of each distinct communication kernel label, the category of the others
        name_codes, names = text_codes(kl)
        per_cat = np.array([code(str(c)) for c in cats], dtype=np.int64) if len(cats) else np.empty(0, np.int64)
        det = per_cat[ccodes] if len(ccodes) else np.empty(0, np.int64)
        comm = np.asarray(cats == COMMUNICATION)[ccodes] if len(ccodes) else np.zeros(0, dtype=bool)
        if comm.any():
            coll = np.array([code(parse_nccl_kernel(str(x)).collective or COMMUNICATION) for x in names],
                            dtype=np.int64)
            det = np.where(comm, coll[name_codes], det)
        kpos = np.flatnonzero(is_kernel)
        level[kpos[comm]] = 1
        detail[kpos] = det
        if comm.any() and "comm_collective" in ctx.trace.kernels.columns:
            _c10d_details(ctx, ops, kpos[comm], detail, code)
    is_set = of_kind("memset")
    is_copy = of_kind("memcpy")
    other = ~(is_kernel | is_copy | is_set)
    for kind in np.unique(kind_labels[np.unique(op_codes[other])]) if other.any() else ():
        detail[other & of_kind(kind)] = code(str(kind))  # e.g. a CUDA-graph execution
    level[is_set] = 2
    if is_set.any():
        detail[is_set] = code("memset")
    if is_copy.any():
        level[is_copy] = 2
        detail[is_copy] = _copy_details(ctx, ops, np.flatnonzero(is_copy), code)
    return level, detail, labels


def _copy_details(ctx: FactContext, ops: pd.DataFrame, pos: np.ndarray, code) -> np.ndarray:  # type: ignore[no-untyped-def]
    """``H2D pageable``, ``D2H pinned``, ``D2D``... per copy op (joined to the memcpy table on device,
    start and correlation id)."""
    mc = ctx.trace.memcpy
    label_codes, label_texts = text_codes(ops["label"].iloc[pos])
    kind = np.full(len(pos), "", dtype=object)
    if len(mc):
        key = pd.DataFrame({
            "device": ops["device"].to_numpy(dtype=np.int64)[pos],
            "start": ops["start"].to_numpy(dtype=np.int64)[pos],
            "correlation_id": ops["correlation_id"].to_numpy(dtype=np.int64)[pos],
        })
        direction = text(column(mc, "direction", "")).to_numpy(dtype=object)
        src = text(column(mc, "src_kind", "")).to_numpy(dtype=object)
        dst = text(column(mc, "dst_kind", "")).to_numpy(dtype=object)
        host = np.where(direction == "H2D", src, np.where(direction == "D2H", dst, ""))
        table = pd.DataFrame({
            "device": column(mc, "device", 0).fillna(0).to_numpy(dtype=np.int64),
            "start": mc["start"].to_numpy(dtype=np.int64),
            "correlation_id": column(mc, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64),
            "_host": host,
        }).drop_duplicates(["device", "start", "correlation_id"])
        joined = key.merge(table, on=["device", "start", "correlation_id"], how="left")
        kind = joined["_host"].fillna("").to_numpy(dtype=object)
    # the detail text of each distinct (label, host memory kind) pair, spread back to the copies
    kind_codes, kind_texts = text_codes(pd.Series(kind, dtype=object))
    pair, pairs = pd.factorize(label_codes.astype(np.int64) * len(kind_texts) + kind_codes)
    per_pair = []
    for value in pairs.tolist():
        d = str(label_texts[value // len(kind_texts)]).removeprefix("memcpy ")
        k = str(kind_texts[value % len(kind_texts)])
        per_pair.append(code(f"{d} {k}".strip() if k in ("pageable", "pinned", "managed") else d))
    return np.array(per_pair, dtype=np.int64)[pair] if len(pair) else np.empty(0, dtype=np.int64)


def busy_and_gaps(ops: pd.DataFrame, level: np.ndarray, op_detail: np.ndarray, w_start: int, w_end: int,
                  graph_code: int, causes: dict[str, int]) -> tuple[Columns, Columns]:
    """Per device of ``ops`` (``gpu_ops``), its busy pieces (each level's ops where no higher level
    covers them, the frontier of each level, then the time between dependent nodes of a CUDA graph
    execution) and the idle gaps between them that reach into the window ``[w_start, w_end)``, each as
    lists of per-device column pieces: ``(device, start, end, cause, detail, op)`` and ``(device, start,
    end, previous op, next op)`` (op positions in ``ops``, -1 none). Each device's temporaries are freed
    with it (a 10 M-kernel trace's are hundreds of MB)."""
    starts = ops["start"].to_numpy(dtype=np.int64)
    ends = ops["end"].to_numpy(dtype=np.int64)
    devices = ops["device"].to_numpy(dtype=np.int64)
    # device ids as the segments hold them (32 bits where every id fits, as narrow_int makes them)
    i32 = np.iinfo(np.int32)
    dev_type = np.int32 if not len(devices) or i32.min <= devices.min() <= devices.max() <= i32.max else np.int64
    # op positions (the pieces' owners, the gaps' neighbours) in 32 bits where they fit
    pos_type = np.int32 if len(ops) < i32.max else np.int64
    graphs = graph_spans(ops)
    # per column, its pieces per device and level (each column joined and its pieces freed in turn)
    busy: Columns = tuple([] for _ in range(6))
    gaps: Columns = tuple([] for _ in range(5))
    d_order, d_from, d_to = key_groups(devices)
    for a, b in zip(d_from.tolist(), d_to.tolist()):
        rows = np.sort(d_order[a:b])  # gpu_ops is ordered by start: keep that order
        _device(rows, int(devices[rows[0]]), starts, ends, level, op_detail, graphs, w_start, w_end, graph_code,
                causes, dev_type, pos_type, busy, gaps)
    return busy, gaps


def _device(rows: np.ndarray, dev: int, starts: np.ndarray, ends: np.ndarray, level: np.ndarray,
            op_detail: np.ndarray, graphs: tuple[np.ndarray, ...], w_start: int, w_end: int, graph_code: int,
            causes: dict[str, int], dev_type: type, pos_type: type, busy: Columns, gaps: Columns) -> None:
    """:func:`busy_and_gaps` of one device's ops ``rows`` (sorted), appended to ``busy`` and ``gaps``."""
    g_dev, g_start, g_end, _g_first, g_last = graphs
    lo = min(w_start, int(starts[rows].min()))
    hi = max(w_end, int(ends[rows].max()))
    cov_s = np.empty(0, dtype=np.int64)
    cov_e = np.empty(0, dtype=np.int64)
    owner: np.ndarray = np.empty(0, dtype=pos_type)
    for lvl, cause in ((0, causes["compute"]), (1, causes["exposed_comm"]), (2, causes["exposed_copy"])):
        r = rows[level[rows] == lvl]
        if not len(r):
            continue
        pos, s, e = _frontier(starts[r], ends[r])
        r = r[pos]
        if len(cov_s):  # only what no higher level covers
            fs, fe = _complement(cov_s, cov_e, lo, hi)
            ai, _ci, s, e = intersect(s, e, fs, fe)
            r = r[ai]
        r = r.astype(pos_type, copy=False)
        _add(busy, np.full(len(s), dev, dtype=dev_type), s, e, np.full(len(s), cause, dtype=np.int8),
             op_detail[r], r)
        # the covered time so far, and which op owns each piece (pieces are disjoint: starts unique)
        cov_s, cov_e, owner = _merge_pieces((cov_s, cov_e, owner), (s, e, r))
    # inside a CUDA graph execution, between dependent nodes: the graph's own GPU time
    m = (g_dev == dev) & (g_end > lo) & (g_start < hi)
    if m.any() and len(cov_s):
        fs, fe = _complement(cov_s, cov_e, lo, hi)
        ai, _ci, s, e = intersect(g_start[m], g_end[m], fs, fe)
        r = g_last[m][ai].astype(pos_type, copy=False)
        _add(busy, np.full(len(s), dev, dtype=dev_type), s, e, np.full(len(s), causes["compute"], dtype=np.int8),
             np.full(len(s), graph_code, dtype=np.int32), r)
        cov_s, cov_e, owner = _merge_pieces((cov_s, cov_e, owner), (s, e, r))
    # the gaps: the time before each covered piece and after the last, where not empty (lo and hi hold
    # every piece: no clipping). Gap k lies between pieces k - 1 and k (disjoint, in order): the piece
    # ending where it starts and the one starting where it ends
    gs = np.r_[lo, cov_e]
    ge = np.r_[cov_s, hi]
    k_next = np.flatnonzero(ge > gs)
    gs, ge = gs[k_next], ge[k_next]
    k_prev = k_next - 1
    del cov_s, cov_e
    if len(owner):
        nxt: np.ndarray = np.where(k_next < len(owner), owner[np.minimum(k_next, len(owner) - 1)], -1).astype(pos_type)
        prv: np.ndarray = np.where(k_prev >= 0, owner[np.maximum(k_prev, 0)], -1).astype(pos_type)
    else:  # every operation on the device lasts 0 ns (a trace without durations): one gap, no neighbours
        nxt = prv = np.full(len(gs), -1, dtype=pos_type)
    keep = (ge > w_start) & (gs < w_end)
    if not keep.all():
        gs, ge, prv, nxt = gs[keep], ge[keep], prv[keep], nxt[keep]
    _add(gaps, np.full(len(gs), dev, dtype=dev_type), gs, ge, prv, nxt)


def _add(columns: Columns, *pieces: np.ndarray) -> None:
    for col, piece in zip(columns, pieces):
        col.append(piece)
