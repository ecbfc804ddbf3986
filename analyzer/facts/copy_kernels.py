"""Copy-like kernels on the GPU (concatenation, ``copy_``, ``clone``, ``.contiguous()``) and what removing
them can buy.

A program that grows a buffer by ``torch.cat`` every iteration (a KV cache extended token by token, a
list of results concatenated into a running tensor) copies the whole old buffer into a new one each
time: the copies' bytes, and with them their kernels' durations, grow with the buffer, and the total
is quadratic in its final length. Preallocating the buffer at its full size and writing each new slice
in place (``index_copy_``, slice assignment, a static KV cache) removes those kernels and leaves one
small write per slice.

One row per copy-like kernel starting in the window: kernels whose name says they concatenate
(``CatArrayBatchedCopy``) or copy element by element (``direct_copy_kernel``: ``copy_``, ``clone``,
``.contiguous()``, ``.to()``). Per device and kernel name, ``growth`` is how much their duration grows
from the first to the last of a step (a least-squares line through duration against the kernel's
position in its step, 0..1, pooled over the steps; the whole window is one step without steps),
relative to their mean duration.

What removing them buys is bounded by the host: the GPU cannot finish a step before the host has issued
its work. ``host_wait_ns`` is the time the threads launching the device's copy kernels spent blocked in
synchronizing calls in the window (``sync_calls``' blocking calls: waiting for the device): the slack a
GPU-bound program has before the host becomes the bound. A program whose host never waits gains
nothing from shorter kernels (it is bound by its launches); one that waits gains at most that wait.
Launch calls that block because the launch queue is full are counted as the host's own time (an
underestimate of the slack).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import column, first_positions, frame_memo, text, text_codes
from analyzer.facts.api import all_sync_call_rows, step_index
from analyzer.facts.breakdown_ranges import generic_keys
from analyzer.facts.registry import FactContext, fact

#: full kernel names of copy-like kernels: concatenation, and element-by-element copies (copy_, clone,
#: contiguous, to): PyTorch's CatArrayBatchedCopy* and direct_copy_kernel_cuda
COPY_LIKE = re.compile(r"CatArrayBatchedCopy|direct_copy_kernel")

COPY_KERNEL_COLUMNS = {
    "device": "GPU device id",
    "start": "kernel start (ns)",
    "end": "kernel end (ns)",
    "duration": "kernel duration (ns)",
    "short_name": "kernel short name",
    "op": "cat (concatenation: CatArrayBatchedCopy) or copy (direct_copy_kernel: copy_, clone, contiguous, to)",
    "nvtx_path": "NVTX path of the kernel ('' outside every range)",
    "range_key": "nvtx_path as the program's ranges name it, enumerated parts made generic (step_N/token)",
    "step": "index of the window's step the kernel starts in (-1 outside every step or without steps)",
    "growth": "per device and short name: the duration's growth from the first to the last such kernel of a "
              "step (least-squares line against the position in the step, pooled over steps), over the "
              "mean duration (0.5: the last is 50% longer than the first)",
    "host_wait_ns": "per device: time the threads that launched its copy kernels spent blocked in "
                    "synchronizing calls in the window (ns), the host's slack before it bounds the step",
}

_INTS = ("device", "start", "end", "duration", "step", "host_wait_ns")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in _INTS else ("float64" if c == "growth" else object))
                         for c in COPY_KERNEL_COLUMNS})


@fact("copy_kernels", columns=COPY_KERNEL_COLUMNS, requires=("kernel_categories",),
      scope_keys=("device", "nvtx_path", "short_name"), per_kernel=True)
def copy_kernels(ctx: FactContext) -> pd.DataFrame:
    """One row per copy-like kernel (concatenation, copy_, clone, contiguous) in the window, with how
    their duration grows through a step and the host's slack (see :mod:`analyzer.facts.copy_kernels`)."""
    k = ctx.get("kernel_categories")
    if k.empty:
        return _empty()
    # per distinct name, never per kernel: the name column's codes (a categorical's own), each label
    # matched once
    codes, labels = frame_memo(k, "text_codes:name", lambda: text_codes(k["name"]))
    hit = np.array([bool(COPY_LIKE.search(u)) for u in labels], dtype=bool)
    mine = hit[codes]
    if not mine.any():
        return _empty()
    cat = np.array(["CatArray" in u for u in labels], dtype=bool)
    c = k.loc[mine]
    start = c["start"].to_numpy(dtype=np.int64)
    dev = c["device"].to_numpy(dtype=np.int64)
    dur = c["duration"].to_numpy(dtype=np.int64)
    short = text(c["short_name"]).to_numpy(dtype=object)
    spans = ctx.window.steps
    step = step_index(start, tuple(zip(spans.starts, spans.ends)) if spans else ())
    out = pd.DataFrame({
        "device": dev, "start": start, "end": c["end"].to_numpy(dtype=np.int64), "duration": dur,
        "short_name": short,
        "op": np.where(cat[codes[mine]], "cat", "copy").astype(object),
        "nvtx_path": text(column(c, "nvtx_path", "")).to_numpy(dtype=object),
        "step": step,
    }).sort_values(["device", "start"], kind="stable").reset_index(drop=True)
    codes, uniques = pd.factorize(out["nvtx_path"])
    keys = np.array(generic_keys(np.asarray(uniques, dtype=object)) + [""], dtype=object)
    out.insert(7, "range_key", keys[codes])
    out["growth"] = _growth(out)
    out["host_wait_ns"] = launching_threads_wait(ctx, c, out["device"].to_numpy(dtype=np.int64))
    return out


def _growth(out: pd.DataFrame) -> np.ndarray:
    """Per (device, short_name): the pooled least-squares slope of duration against the position in the
    step (0..1), over the mean duration; broadcast to the group's rows."""
    g = np.zeros(len(out), dtype=np.float64)
    for _, idx in out.groupby(["device", "short_name"], sort=False).indices.items():
        sub = out.iloc[idx]
        pos = sub.groupby("step", sort=False).cumcount().to_numpy(dtype=np.float64)
        n = sub.groupby("step", sort=False)["step"].transform("size").to_numpy(dtype=np.float64)
        x = np.where(n > 1, pos / np.maximum(n - 1, 1), 0.5)
        y = sub["duration"].to_numpy(dtype=np.float64)
        # pooled within steps: each step's own mean removed (a step whose kernels are all longer is no trend)
        keys = sub["step"].to_numpy()
        xm = pd.Series(x).groupby(keys).transform("mean").to_numpy()
        ym = pd.Series(y).groupby(keys).transform("mean").to_numpy()
        sxx = float(((x - xm) ** 2).sum())
        mean = float(y.mean())
        if sxx <= 0 or mean <= 0:
            continue
        g[idx] = float(((x - xm) * (y - ym)).sum()) / sxx / mean
    return g


def launching_threads_wait(ctx: FactContext, c: pd.DataFrame, dev: np.ndarray) -> np.ndarray:
    """Per device: the blocking synchronizing calls' time in the window on the threads that launched the
    kernels ``c`` (rows of ``kernel_categories``) on it, broadcast to ``dev`` (the output rows' devices;
    also read by :mod:`analyzer.facts.fallback_kernels`)."""
    api = ctx.trace.api
    out = np.zeros(len(dev), dtype=np.int64)
    if api.empty or "correlation_id" not in c.columns:
        return out
    pos = first_positions(api["correlation_id"].to_numpy(dtype=np.int64), c["correlation_id"].to_numpy(dtype=np.int64))
    tid = np.where(pos >= 0, api["tid"].to_numpy(dtype=np.int64)[np.maximum(pos, 0)], -1)
    kdev = c["device"].to_numpy(dtype=np.int64)
    sync = all_sync_call_rows(ctx.store)
    st = sync["start"].to_numpy(dtype=np.int64)
    w = ctx.window
    sync = sync.loc[(st >= w.start_ns) & (st < w.end_ns) & sync["blocking"].to_numpy(dtype=bool)]
    if sync.empty:
        return out
    s_tid = sync["tid"].to_numpy(dtype=np.int64)
    s_end = np.minimum(sync["end"].to_numpy(dtype=np.int64), w.end_ns)
    s_ns = s_end - sync["start"].to_numpy(dtype=np.int64)
    for d in np.unique(kdev):
        threads = np.unique(tid[(kdev == d) & (tid >= 0)])
        out[dev == d] = int(s_ns[np.isin(s_tid, threads)].sum())
    return out
