"""Forward kernels run a second time inside the backward: activation checkpointing (issue 27).

``torch.utils.checkpoint`` (``checkpoint``, ``checkpoint_sequential``, Hugging Face's
``gradient_checkpointing_enable()``) keeps only a segment's input in the forward and runs the segment's
forward again in the backward, right before that segment's gradients. The trace shows it without any
checkpoint-specific event: PyTorch runs the backward on the autograd engine's own thread (one per device),
not on the thread that called ``loss.backward()``, and the recomputed forward runs there too. So, per GPU,
in launch order:

* a *forward segment* is a maximal run of kernels launched by the process's main thread (``tid == pid``:
  the forward, and the optimizer before the next step's forward);
* the *backward segment* that follows it is a maximal run of kernels launched by another thread of the
  same process (the autograd thread);
* a kernel's *token* is its full name with its grid and block: the same op on the same shapes launches the
  same token, while a backward op launches other kernels (``*_backward`` / ``*grad*`` kernels, GEMMs of
  other layouts: ``..._NNT`` / ``..._NTN`` for a forward's ``..._TNT``, other elementwise functors);
* a backward kernel is *recomputed* when it lies in a run of :data:`NGRAM` consecutive backward kernels
  whose tokens appear, consecutively and in the same order, in the forward segment before it, the run
  holding at least one compute kernel of :data:`HEAVY` categories (a GEMM, a normalization's forward...):
  runs of casts or copies alone, which a backward may share with its forward, never count.

One row per *run* of consecutive recomputed kernels (one checkpointed segment's forward, up to where its
saved tensors are back), with its GPU time and the host time its launches took (from its first kernel's
launch to the next kernel's on that thread). A normal backward shares no such run with its forward (every
committed training trace without checkpointing: none; see ``tests``). Needs launching threads with a
process id (nsys, torch.profiler); without a main thread among the launching threads (training on a worker
thread) or without a second launching thread (backward on the calling thread: CPU-only autograd) there is
nothing to compare, and the fact is empty. No NVTX range is needed: bare nsys recordings are read the same
way. Designed after seeing the fifth held-out batch (``checkpoint_everything``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import column, frame_memo, text, text_codes
from analyzer.facts.api import step_index
from analyzer.facts.breakdown_ranges import generic_keys
from analyzer.facts.registry import FactContext, fact

#: consecutive kernels (tokens in forward order) a recomputed run matches at least
NGRAM = 4
#: kernel categories that make a matched run a forward's compute, not a cast or copy a backward may share
HEAVY = ("gemm", "normalization", "softmax", "attention", "convolution")

RECOMPUTE_COLUMNS = {
    "device": "GPU device id",
    "start": "start of the run's time on the GPU timeline (ns): its first kernel's start, or the end of the kernel "
             "launched before it when the GPU sat idle in between (waiting for the run's host work, at most "
             "host_ns before the first kernel)",
    "end": "the run's last kernel end (ns)",
    "kernels": "kernels in the run (forward kernels launched again inside the backward, in forward order)",
    "gpu_ns": "the run's kernel time (ns): GPU work the backward repeats",
    "host_ns": "the host time of the run (ns): from the launch of the kernel before it to the launch of the "
               "kernel after it on that thread, less the thread's median time between launches (the one "
               "interval the backward takes there anyway); the checkpoint's own work (restoring the RNG "
               "state, unpacking) and the recomputed ops' dispatch",
    "impact_ns": "what the run costs the step (ns): its GPU time, plus the host time beyond it (host_ns - "
                 "gpu_ns) as far as the GPU waited in the backward segment: the segment's runs' excess together "
                 "at most its idle_ns, shared in proportion",
    "idle_ns": "the GPU's idle time in the run's backward segment (no kernel running on the device between the "
               "segment's first kernel start and last kernel end), the same value on every run of the segment",
    "heavy_kernel": "the run's longest compute kernel (a forward GEMM, a normalization's forward...)",
    "forward_ns": "kernel time of the forward segment the run repeats (the main thread's kernels before the "
                  "backward segment), the same value on every run of that segment",
    "segment": "index of the backward segment (per device, in launch order) the run is in",
    "tid": "the thread that launched the run (the autograd engine's)",
    "nvtx_path": "NVTX path of the run's first kernel ('' outside every range)",
    "range_key": "nvtx_path as the program's ranges name it, enumerated parts made generic (step_N/...)",
    "step": "index of the window's step the run starts in (-1 outside every step or without steps)",
}
_INTS = ("device", "start", "end", "kernels", "gpu_ns", "host_ns", "impact_ns", "idle_ns", "forward_ns", "segment", "tid",
         "step")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in _INTS else object) for c in RECOMPUTE_COLUMNS})


def _grams(tok: np.ndarray, n: int) -> np.ndarray:
    """A 64-bit code of each ``n``-gram of ``tok`` (one per start position; a polynomial hash modulo 2**64,
    collisions negligible against the few thousand kernels of a segment)."""
    m = len(tok) - n + 1
    if m <= 0:
        return np.zeros(0, dtype=np.uint64)
    g = np.zeros(m, dtype=np.uint64)
    t = tok.astype(np.uint64)
    for j in range(n):
        g = g * np.uint64(1_000_003) + t[j:j + m] + np.uint64(1)
    return g


def recomputed_mask(tok: np.ndarray, heavy: np.ndarray, seg: np.ndarray, main: np.ndarray,
                    n: int = NGRAM) -> np.ndarray:
    """For kernels in launch order (``tok`` their tokens, ``heavy`` whether compute, ``seg`` their
    segment: a run of one thread, nondecreasing, ``main`` whether that thread is the main thread), whether
    each kernel of a non-main segment lies in an ``n``-gram holding a compute kernel whose tokens also run,
    in order, in the main-thread segment just before it. Array operations only (no loop over segments)."""
    out = np.zeros(len(tok), dtype=bool)
    m = len(tok) - n + 1
    if m <= 0:
        return out
    grams = _grams(tok, n)
    whole = seg[:m] == seg[n - 1:]  # the n-gram lies in one segment
    hv = np.convolve(heavy.astype(np.int64), np.ones(n, dtype=np.int64), mode="valid") > 0
    first = np.r_[True, seg[1:] != seg[:-1]]
    seg_main = np.zeros(int(seg.max()) + 2, dtype=bool)
    seg_main[seg[first]] = main[first]
    g_seg = seg[:m]
    fwd = whole & main[:m]
    # a backward n-gram is looked up in the main segment just before its own: tag both with that segment
    back = whole & ~main[:m] & hv & (g_seg > 0) & seg_main[np.maximum(g_seg - 1, 0)]
    if not fwd.any() or not back.any():
        return out
    mix = np.uint64(0x9E3779B97F4A7C15)
    f_key = grams[fwd] ^ (g_seg[fwd].astype(np.uint64) * mix)
    b_key = grams[back] ^ ((g_seg[back] - 1).astype(np.uint64) * mix)
    hit = np.zeros(m, dtype=bool)
    hit[np.flatnonzero(back)[np.isin(b_key, f_key)]] = True
    if not hit.any():
        return out
    return np.convolve(hit.astype(np.int64), np.ones(n, dtype=np.int64), mode="full")[:len(tok)] > 0


@fact("recomputed_forward", columns=RECOMPUTE_COLUMNS, requires=("kernel_categories",),
      scope_keys=("device", "nvtx_path", "heavy_kernel"))
def recomputed_forward(ctx: FactContext) -> pd.DataFrame:
    """One row per run of forward kernels launched again inside the backward (activation
    checkpointing; see :mod:`analyzer.facts.recompute`)."""
    k = ctx.get("kernel_categories")
    if k.empty or "tid" not in k.columns or "pid" not in k.columns or "api_start" not in k.columns:
        return _empty()
    tid_all = _ints(k["tid"])
    pid_all = _ints(k["pid"])
    ok = (tid_all >= 0) & (pid_all >= 0) & k["api_start"].notna().to_numpy()  # -1: thread unknown
    main_all = tid_all == pid_all
    if not (ok & main_all).any() or not (ok & ~main_all).any():
        return _empty()  # one launching thread, or no main thread among them: nothing to compare
    heavy_all = k["category"].isin(HEAVY).to_numpy() if "category" in k.columns else np.zeros(len(k), bool)
    fwd_h, back_h = ok & main_all & heavy_all, ok & ~main_all & heavy_all
    if not fwd_h.any() or not back_h.any():
        return _empty()
    codes, labels = frame_memo(k, "text_codes:name", lambda: text_codes(k["name"]))
    named = np.zeros(len(labels) + 1, dtype=bool)
    named[codes[fwd_h]] = True
    if not named[codes[back_h]].any():
        return _empty()
    dims = [codes] + [column(k, c, 0).fillna(0).to_numpy()
                      for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")]
    # first the compute kernels alone: a backward thread launching none of the main thread's (name, grid,
    # block) has nothing recomputed (most traces stop here)
    h_f, h_b = _hash(dims, fwd_h), _hash(dims, back_h)
    if not np.isin(h_b, h_f).any():
        return _empty()
    tok_all = pd.factorize(_hash(dims, None))[0].astype(np.int64)
    rows = []
    for dev in np.unique(k["device"].to_numpy(dtype=np.int64)):
        idx = np.flatnonzero(ok & (k["device"].to_numpy(dtype=np.int64) == dev))
        api = k["api_start"].to_numpy()[idx].astype(np.int64)
        idx = idx[np.argsort(api, kind="stable")]
        tid = tid_all[idx]
        main = main_all[idx]
        seg = np.cumsum(np.r_[0, (tid[1:] != tid[:-1]).astype(np.int64)])
        mask = recomputed_mask(tok_all[idx], heavy_all[idx], seg, main)
        if not mask.any():
            continue
        rows.append((dev, idx, seg, main, mask))
    if not rows:
        return _empty()
    return _runs(ctx, k, rows)


def _ints(col: pd.Series) -> np.ndarray:
    """An id column as int64, missing values -1."""
    if col.dtype.kind in "iu":
        return col.to_numpy(dtype=np.int64)
    return pd.to_numeric(col, errors="coerce").fillna(-1).to_numpy(dtype=np.int64)


def _hash(dims: list[np.ndarray], rows: np.ndarray | None) -> np.ndarray:
    """A 64-bit hash of each kernel's (name code, grid, block) (of the ``rows`` mask when given)."""
    h: np.ndarray | None = None
    for d in dims:
        v = (d if rows is None else d[rows]).astype(np.uint64)
        h = v if h is None else h * np.uint64(1_000_003) + v
    assert h is not None
    return h


def _launch_pace(api: np.ndarray, seg: np.ndarray, which: np.ndarray) -> np.ndarray:
    """For the segments ``which``, the median time between consecutive launches of the segment's thread
    (ns; 0 for one launch), indexed by segment."""
    out = np.zeros(int(seg.max()) + 1 if len(seg) else 0, dtype=np.int64)
    bounds = np.searchsorted(seg, np.stack([which, which + 1]))
    for s, a, b in zip(which, bounds[0], bounds[1]):
        if b - a > 1:
            out[s] = int(np.median(np.diff(api[a:b])))
    return out


def _segment_idle(k_start: np.ndarray, k_end: np.ndarray, s_start: np.ndarray, s_end: np.ndarray,
                  seg: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Per segment, the GPU's idle time (no kernel of the device running: ``k_start``/``k_end``, every
    stream) between its first kernel's start and its last kernel's end (``s_start``/``s_end`` per kernel
    of the segments, ``seg`` their segment), for the segments ``which``."""
    n = int(seg.max()) + 1 if len(seg) else 0
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, seg, s_start)
    np.maximum.at(hi, seg, s_end)
    order = np.argsort(k_start, kind="stable")
    st, en = k_start[order], np.maximum.accumulate(k_end[order])
    g0, g1 = en[:-1], st[1:]  # idle gaps [g0, g1) where positive; both nondecreasing
    keep = g1 > g0
    g0, g1 = g0[keep], g1[keep]
    out = np.zeros(n, dtype=np.int64)
    for s in which[hi[which] > lo[which]]:
        i, j = np.searchsorted(g1, lo[s], side="right"), np.searchsorted(g0, hi[s], side="left")
        if j > i:
            out[s] = int(np.clip(np.minimum(g1[i:j], hi[s]) - np.maximum(g0[i:j], lo[s]), 0, None).sum())
    return out


def _add_host_excess(out: dict[str, list], n0: int) -> None:
    """Runs ``n0:`` of one device: add to each run's impact (its GPU time) the host time its launches take
    beyond that GPU time, as far as the GPU waited for the host in its backward segment: per segment the
    runs' excess together at most the segment's GPU idle time, shared in proportion."""
    seg = np.asarray(out["segment"][n0:], dtype=np.int64)
    if not len(seg):
        return
    gpu = np.asarray(out["gpu_ns"][n0:], dtype=np.int64)
    extra = np.maximum(np.asarray(out["host_ns"][n0:], dtype=np.int64) - gpu, 0)
    idle = np.asarray(out["idle_ns"][n0:], dtype=np.int64)
    _, inv = np.unique(seg, return_inverse=True)
    total = np.bincount(inv, weights=extra)
    room = np.minimum(total, np.bincount(inv, weights=idle) / np.bincount(inv))
    scale = np.divide(room, total, out=np.zeros_like(total), where=total > 0)
    out["impact_ns"][n0:] = (gpu + np.rint(extra * scale[inv])).astype(np.int64).tolist()


def _runs(ctx: FactContext, k: pd.DataFrame, rows: list) -> pd.DataFrame:
    start_all = k["start"].to_numpy(dtype=np.int64)
    end_all = k["end"].to_numpy(dtype=np.int64)
    dur_all = k["duration"].to_numpy(dtype=np.int64)
    api_all = k["api_start"].to_numpy()
    names = text(k["short_name"]).to_numpy(dtype=object)
    paths = text(column(k, "nvtx_path", "")).to_numpy(dtype=object)
    heavy = k["category"].isin(HEAVY).to_numpy()
    spans = ctx.window.steps
    steps = tuple(zip(spans.starts, spans.ends)) if spans else ()
    out: dict[str, list] = {c: [] for c in RECOMPUTE_COLUMNS if c != "range_key"}
    dev_all = k["device"].to_numpy(dtype=np.int64)
    for dev, idx, seg, main, mask in rows:
        api = api_all[idx].astype(np.int64)
        # the main-thread segment before each backward segment: its kernel time
        seg_ns = np.bincount(seg, weights=dur_all[idx]).astype(np.int64)
        which = np.unique(seg[mask])
        pace = _launch_pace(api, seg, which)
        on = dev_all == dev
        idle = _segment_idle(start_all[on], end_all[on], start_all[idx], end_all[idx], seg, which)
        n0 = len(out["device"])
        edges = np.flatnonzero(np.r_[True, mask[1:] != mask[:-1] | (seg[1:] != seg[:-1]), True])
        for a, b in zip(edges[:-1], edges[1:]):
            if not mask[a]:
                continue
            j = idx[a:b]
            nxt = api[b] if b < len(idx) and seg[b] == seg[a] else api[b - 1]
            prv = api[a - 1] if a > 0 and seg[a - 1] == seg[a] else api[a]
            gpu = int(dur_all[j].sum())
            host = max(int(nxt - prv - pace[seg[a]]), 0)
            hv = j[heavy[j]]
            top = hv[np.argmax(dur_all[hv])] if len(hv) else j[0]
            out["device"].append(int(dev))
            first = int(start_all[j].min())
            if a > 0 and seg[a - 1] == seg[a]:  # the GPU idle before the run is the run's (its host work)
                first = min(first, max(int(end_all[idx[a - 1]]), first - host))
            out["start"].append(first)
            out["end"].append(int(end_all[j].max()))
            out["kernels"].append(int(b - a))
            out["gpu_ns"].append(gpu)
            out["host_ns"].append(host)
            out["impact_ns"].append(gpu)
            out["idle_ns"].append(int(idle[seg[a]]))
            out["heavy_kernel"].append(names[top])
            out["forward_ns"].append(int(seg_ns[seg[a] - 1]) if seg[a] > 0 else 0)
            out["segment"].append(int(seg[a]))
            out["tid"].append(int(k["tid"].to_numpy()[j[0]]))
            out["nvtx_path"].append(paths[j[0]])
            out["step"].append(-1)
        _add_host_excess(out, n0)
    res = pd.DataFrame(out)
    res["step"] = step_index(res["start"].to_numpy(dtype=np.int64), steps)
    res = res.sort_values(["device", "start"], kind="stable").reset_index(drop=True)
    p_codes, p_uniques = pd.factorize(res["nvtx_path"])
    keys = np.array(generic_keys(np.asarray(p_uniques, dtype=object)) + [""], dtype=object)
    res.insert(res.columns.get_loc("step"), "range_key", keys[p_codes])
    for c in _INTS:
        res[c] = res[c].astype("int64")
    return res
