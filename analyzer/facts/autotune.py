"""Autotuning inside the loop: a library timing candidate kernels for a shape it has not seen (issue 27).

``torch.backends.cudnn.benchmark = True`` makes cuDNN, for every new input shape of a convolution,
build the plans of its candidate algorithms (forward, backward data, backward filter), run each one
with its workspace and time it, and keep the fastest; Triton's and cuBLASLt's autotuners do the same.
Each timing is one *trial*, the idiom every autotuner uses: drain the device
(``cudaDeviceSynchronize``), record an event, launch the candidate's kernels, record an event, wait
for it (``cudaEventSynchronize``). In the trace (nsys and torch.profiler alike, the committed
``cudnn_benchmark_shapes`` recordings): 200 such trials a step (20 convolutions, about 10 candidates
each, several kernels of different algorithms, ``sm90_xmma_fprop_*`` / ``implicit_convolve_sgemm`` /
``Kernel``...), between them the plans' host work (module loads, heuristics, ``cudaMemGetInfo``) and
the workspaces' ``cudaMalloc``/``cudaFree``: the step takes 0.83-1.9 s against the twin's 55-80 ms
(``cudnn.benchmark = False``: one algorithm chosen per shape by heuristics, no trial).

A **trial**: a ``cudaEventSynchronize`` (``cuEventSynchronize``, ``hipEventSynchronize``) on a thread
whose previous synchronizing call on that thread is a device or stream synchronization made after the
thread's previous event synchronization (the drain that opens the trial), with one to
:data:`MAX_TRIAL_KERNELS` kernels launched between the two. A **burst**: the trials of one thread whose starts follow the previous
trial's end by at most :data:`BURST_GAP_NS` (the plan building between two convolutions' trials is part
of it), kept when it holds at least :data:`MIN_TRIALS` trials that launched at least
:data:`MIN_CANDIDATES` distinct kernels (candidates, not one kernel timed again and again). A program
timing its own layers with events synchronizes after each, but does not drain the device before each
record, nor try several kernels for one piece of work.

The timeline breakdown names the host's time inside a burst ``autotune`` (the idle time that would be
launch-bound, host sync, allocation or host work there: :func:`relabel_autotuning`), so that
host-sync-in-loop, alloc-in-loop and host-work-in-loop no longer count it and its finding's impact is
that time, once. The ``autotune_bursts`` fact lists the bursts in the window for the rule.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import frame_memo, text, text_codes
from analyzer.facts.api import step_index
from analyzer.facts.breakdown_pieces import relabel_inside
from analyzer.facts.registry import FactContext, fact

#: the longest host time from one trial's end to the next one's start inside one burst (ns): cuDNN builds
#: the next convolution's plans between two convolutions' trials (4.7-73 ms on the H100 recordings)
BURST_GAP_NS = 100_000_000
#: fewest trials in a burst
MIN_TRIALS = 4
#: fewest distinct kernels (by short name) the burst's trials launched
MIN_CANDIDATES = 3
#: most kernels one trial launches: a candidate is a handful (layout transforms, the algorithm's kernels, a
#: reduction; 1-6 on the H100 recordings). A program timing a whole step between a drain and an event
#: (layer_timing_sync's twin: 183 kernels) is not trying candidates
MAX_TRIAL_KERNELS = 16

_EVENT_SYNC = frozenset({"cudaEventSynchronize", "cuEventSynchronize"})
_DRAIN = frozenset({"cudaDeviceSynchronize", "cuCtxSynchronize", "cudaStreamSynchronize", "cuStreamSynchronize",
                    "cudaThreadSynchronize"})

AUTOTUNE_COLUMNS = {
    "device": "GPU device id of the trials' kernels",
    "tid": "thread that ran the trials",
    "start": "burst start: the first trial's drain (ns)",
    "end": "burst end: the last trial's event synchronization return (ns)",
    "duration": "end - start (ns)",
    "trials": "timed trials in the burst (drain, event, candidate kernels, event, event synchronization)",
    "candidates": "distinct kernels (short names) the trials launched",
    "trial_kernels": "kernels the trials launched",
    "kernels": "the candidates most often launched, up to 6, with their launch counts",
    "idle_ns": "GPU idle time inside the burst the timeline breakdown names autotune (ns)",
    "nvtx_path": "NVTX path of the burst's first trial kernel ('' none): torch.profiler's operator "
                 "(aten::cudnn_convolution...) where recorded",
    "step": "index of the window's step the burst starts in (-1 outside every step or without steps)",
    "tenth": "tenth of the window the burst starts in (0-9; 0 for a burst begun before the window)",
}
_INTS = ("device", "tid", "start", "end", "duration", "trials", "candidates", "trial_kernels", "idle_ns", "step",
         "tenth")


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in _INTS else object) for c in AUTOTUNE_COLUMNS})


def _call_kind(names: np.ndarray) -> np.ndarray:
    """Per distinct API name: 1 event synchronization, 2 drain, 0 other."""
    from analyzer.loading.api_names import cuda_equivalent
    from analyzer.loading.common import strip_api_suffix

    out = np.zeros(len(names), dtype=np.int8)
    for i, n in enumerate(names):
        c = cuda_equivalent(strip_api_suffix(str(n)))
        out[i] = 1 if c in _EVENT_SYNC else (2 if c in _DRAIN else 0)
    return out


_SPAN_COLUMNS = ["tid", "start", "end", "device", "trials", "candidates", "trial_kernels", "kernels", "nvtx_path"]


def autotune_spans(trace) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """Every burst of timed trials in the trace (not only the window): tid, start, end, device, trials,
    candidates, trial_kernels, kernels, nvtx_path; sorted by (tid, start). Empty when none. Worked out
    once per trace (the breakdown and the fact both ask)."""
    api = trace.api
    if api is None or api.empty or trace.kernels.empty:
        return pd.DataFrame(columns=_SPAN_COLUMNS)
    return frame_memo(api, "autotune_spans", lambda: _spans(trace))


def _spans(trace) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    api = trace.api
    cols = _SPAN_COLUMNS
    codes, names = frame_memo(api, "text_codes:name", lambda: text_codes(api["name"]))
    kind = _call_kind(np.asarray(names, dtype=object))[codes] if len(names) else np.zeros(0, np.int8)
    if not (kind == 1).any() or not (kind == 2).any():
        return pd.DataFrame(columns=cols)
    at = np.flatnonzero(kind > 0)
    tid = api["tid"].to_numpy()[at].astype(np.int64)
    start = api["start"].to_numpy()[at].astype(np.int64)
    end = api["end"].to_numpy()[at].astype(np.int64)
    k = kind[at]
    o = np.lexsort((start, tid))
    tid, start, end, k = tid[o], start[o], end[o], k[o]
    # an event sync is a trial when the call before it on its thread (among syncs) is a drain
    prev_same = np.r_[False, tid[1:] == tid[:-1]]
    is_trial = (k == 1) & prev_same & (np.r_[0, k[:-1]] == 2)
    t_at = np.flatnonzero(is_trial)
    if not len(t_at):
        return pd.DataFrame(columns=cols)
    t_tid, t_s, t_e = tid[t_at], start[t_at - 1], end[t_at]
    # kernels launched inside each trial (by their launch call's start on the trial's thread)
    kern = trace.kernels
    k_tid = kern["tid"].to_numpy().astype(np.int64)
    k_api = kern["api_start"].to_numpy().astype(np.int64)
    ko = np.lexsort((k_api, k_tid))
    k_tid_s, k_api_s = k_tid[ko], k_api[ko]
    key_lo = np.searchsorted(k_tid_s, t_tid, side="left")
    key_hi = np.searchsorted(k_tid_s, t_tid, side="right")
    lo = np.empty(len(t_at), dtype=np.int64)
    hi = np.empty(len(t_at), dtype=np.int64)
    for g in np.unique(t_tid):  # one thread (a handful) at a time: sorted launch starts of that thread
        m = t_tid == g
        a, b = int(key_lo[m][0]), int(key_hi[m][0])
        lo[m] = a + np.searchsorted(k_api_s[a:b], t_s[m], side="left")
        hi[m] = a + np.searchsorted(k_api_s[a:b], t_e[m], side="right")
    has = (hi > lo) & (hi - lo <= MAX_TRIAL_KERNELS)
    t_tid, t_s, t_e, lo, hi = t_tid[has], t_s[has], t_e[has], lo[has], hi[has]
    if not len(t_tid):
        return pd.DataFrame(columns=cols)
    # bursts: trials of one thread each starting at most BURST_GAP_NS after the previous one's end
    new = np.r_[True, (t_tid[1:] != t_tid[:-1]) | (t_s[1:] - t_e[:-1] > BURST_GAP_NS)]
    bid = np.cumsum(new) - 1
    short = text(kern["short_name"]).to_numpy(dtype=object)
    dev = kern["device"].to_numpy()
    path = text(kern["nvtx_path"]).to_numpy(dtype=object) if "nvtx_path" in kern else np.full(len(kern), "", object)
    rows = []
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(bid)]
    for f, z in zip(first.tolist(), last.tolist()):
        idx = np.concatenate([ko[a:b] for a, b in zip(lo[f:z].tolist(), hi[f:z].tolist())])
        names_b, counts = np.unique(short[idx].astype(str), return_counts=True)
        if z - f < MIN_TRIALS or len(names_b) < MIN_CANDIDATES:
            continue
        top = np.argsort(-counts, kind="stable")[:6]
        first_k = idx[np.argmin(k_api[idx])]
        rows.append((int(t_tid[f]), int(t_s[f]), int(t_e[z - 1]), int(dev[first_k]), z - f, len(names_b), len(idx),
                     ", ".join(f"{names_b[i]} x{counts[i]}" for i in top), str(path[first_k])))
    return pd.DataFrame(rows, columns=cols)


def relabel_autotuning(ctx: FactContext, seg: pd.DataFrame, host_causes: tuple[str, ...]) -> pd.DataFrame:
    """``timeline_segments`` with its host-held idle segments (``host_causes``) that start inside a burst of
    their feeding thread renamed ``autotune`` (:func:`analyzer.facts.breakdown_pieces.relabel_inside`)."""
    spans = autotune_spans(ctx.trace)
    if spans.empty:
        return seg
    return relabel_inside(seg, host_causes, spans["tid"].to_numpy(dtype=np.int64),
                          spans["start"].to_numpy(dtype=np.int64), spans["end"].to_numpy(dtype=np.int64), "autotune")


@fact("autotune_bursts", columns=AUTOTUNE_COLUMNS, requires=("timeline_segments",),
      scope_keys=("device", "nvtx_path"))
def autotune_bursts(ctx: FactContext) -> pd.DataFrame:
    """One row per burst of timed autotuning trials overlapping the window (see
    :mod:`analyzer.facts.autotune`), with the GPU idle time the breakdown names ``autotune`` inside it."""
    w = ctx.window
    spans = autotune_spans(ctx.trace)
    if spans.empty or w.duration_ns <= 0:
        return _empty()
    s, e = spans["start"].to_numpy(dtype=np.int64), spans["end"].to_numpy(dtype=np.int64)
    spans = spans.loc[(s < w.end_ns) & (e > w.start_ns)].reset_index(drop=True)
    if spans.empty:
        return _empty()
    seg = ctx.get("timeline_segments")
    a = seg.loc[(seg["cause"] == "autotune").to_numpy()]
    a_s = a["start"].to_numpy(dtype=np.int64)
    a_d = a["duration"].to_numpy(dtype=np.int64)
    a_t = a["host_tid"].to_numpy().astype(np.int64)
    idle = np.zeros(len(spans), dtype=np.int64)
    for i, (t, s0, e0) in enumerate(zip(spans["tid"].tolist(), spans["start"].tolist(), spans["end"].tolist())):
        m = (a_t == t) & (a_s >= s0) & (a_s < e0)
        idle[i] = int(a_d[m].sum())
    start = spans["start"].to_numpy(dtype=np.int64)
    steps = w.steps
    out = pd.DataFrame({
        "device": spans["device"].to_numpy(dtype=np.int64), "tid": spans["tid"].to_numpy(dtype=np.int64),
        "start": start, "end": spans["end"].to_numpy(dtype=np.int64),
        "duration": (spans["end"] - spans["start"]).to_numpy(dtype=np.int64),
        "trials": spans["trials"].to_numpy(dtype=np.int64), "candidates": spans["candidates"].to_numpy(dtype=np.int64),
        "trial_kernels": spans["trial_kernels"].to_numpy(dtype=np.int64),
        "kernels": spans["kernels"].to_numpy(dtype=object), "idle_ns": idle,
        "nvtx_path": spans["nvtx_path"].to_numpy(dtype=object),
        "step": step_index(start, tuple(zip(steps.starts, steps.ends)) if steps else ()),
        "tenth": np.clip((start - w.start_ns) * 10 // max(w.duration_ns, 1), 0, 9).astype(np.int64),
    })
    return out.sort_values(["device", "start"], kind="stable").reset_index(drop=True)
