"""Setup-like work in the analysis window, and whether the program repeats it in its steady state.

The timeline breakdown (:mod:`analyzer.facts.breakdown`) labels ``setup`` the GPU idle time while the host
is inside a call that is one-time work by its nature: CUDA graph capture (BeginCapture to EndCapture),
graph instantiation, upload and destruction, module or library loading, a kernel's first launch, device
queries and attribute calls, and ``compile`` the host-held idle time inside torch.compile's compilation
ranges (dynamo, AOT autograd, inductor, the first call's Triton autotuning:
:func:`analyzer.facts.graphs.compile_spans`; the per-call ``Torch-Compiled Region`` and ``TorchDynamo Cache
Lookup`` are not compilation). Such work is paid once per process only when the program
does it once: a server that captures a new CUDA graph for every request, or a model that recompiles for
every new input shape, pays it step after step, and the time is a per-step cause like any other.

``setup_segments`` lists those segments of ``timeline_segments`` (every ``setup`` and ``compile``
segment) with their *kind* and whether the kind *recurs* on its device:

* with steps in the window (NVTX step instances or periods of the repeating GPU work: the window's
  steps), the kind's segments start in at least :data:`MIN_RECURRING_STEPS` steps and in at least
  :data:`MIN_STEP_SHARE` of them (most steps), or in that many steps spread over at least
  :data:`MIN_TENTHS` tenths of the window (periodic recurrence, e.g. a recompilation every few steps,
  rather than a warm-up prefix);
* without steps, they start in at least :data:`MIN_TENTHS` tenths of the window and the GPU computes
  between them: at least :data:`MIN_BUSY_SHARE` of the window is compute (a recording of start-up
  alone, a serving engine capturing one graph per batch size back to back, is one-time work however
  long it runs).

Rules: ``setup-window`` reads the segments whose kind does not recur (``recurring == 0``: one-time
capture, loading or compilation), and ``recurring-setup`` the recurring ones (every kind). Each segment is
idle time of the breakdown, so the two never state the same nanosecond, and compilation time is no
other host cause's (host-work-in-loop, launch-bound, host-sync-in-loop do not count it).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts.registry import FactContext, fact

#: a kind recurs in at least this many steps...
MIN_RECURRING_STEPS = 2
#: ...and in at least this share of the window's steps (most of them)...
MIN_STEP_SHARE = 0.5
#: ...or (periodic) spread over at least this many tenths of the window; without steps, this many tenths
MIN_TENTHS = 5
#: without steps: the GPU computes at least this share of the window between the recurring work
MIN_BUSY_SHARE = 0.2

GRAPH = "CUDA graph capture"
MODULE = "module loading"
COMPILE = "torch.compile compilation"
OTHER = "device or library setup"
KINDS = (GRAPH, MODULE, COMPILE, OTHER)
_GRAPH_DETAIL = re.compile(r"graph|capture", re.IGNORECASE)
_MODULE_DETAIL = re.compile(r"Module|Library|Link|one-time", re.IGNORECASE)

COLUMNS = {
    "device": "GPU device id",
    "start": "segment start (ns)",
    "duration": "segment length (ns): GPU idle time (timeline_segments)",
    "cause": "the breakdown's cause: setup, or compile (torch.compile compilation)",
    "detail": "the breakdown's detail (the call: 'CUDA graph capture', cudaGraphInstantiateWithFlags, ...)",
    "kind": f"'{GRAPH}' (capture, instantiation, upload, destruction), '{MODULE}' (module or library loads, "
            f"first launches, one-time long calls), '{COMPILE}' (idle time under a compilation range) or "
            f"'{OTHER}' (device queries, attribute calls)",
    "nvtx_path": "the segment's NVTX path (timeline_segments)",
    "range_key": "its range key, enumerated components made generic (step_12/request -> step_N/request)",
    "step": "the step the segment starts in (timeline_segments; '' outside every step or without steps)",
    "step_index": "index of the window step the segment starts in, -1 outside every step or without steps",
    "tenth": "which tenth of the window the segment starts in (0..9)",
    "kind_steps": "on the device, the window steps in which segments of this kind start",
    "kind_tenths": "on the device, the tenths of the window in which segments of this kind start",
    "recurring": "1 when the kind recurs in the steady state on the device (see the module), else 0",
}


def _kind(detail: str) -> str:
    if _GRAPH_DETAIL.search(detail):
        return GRAPH
    if _MODULE_DETAIL.search(detail):
        return MODULE
    return OTHER


def _empty() -> pd.DataFrame:
    text = ("cause", "detail", "kind", "nvtx_path", "range_key", "step")
    return pd.DataFrame({c: pd.Series(dtype=object if c in text else "int64") for c in COLUMNS})


@fact("setup_segments", columns=COLUMNS, requires=("timeline_segments",),
      scope_keys=("device", "kind", "range_key"))
def setup_segments(ctx: FactContext) -> pd.DataFrame:
    """The window's setup-like segments (see :mod:`analyzer.facts.recurring_setup`), by device and start.
    Text columns stay the breakdown's categoricals (hundreds of thousands of rows on a replayed trace)."""
    from analyzer.facts.api import step_index
    from analyzer.loading.columns import categorical

    seg = ctx.get("timeline_segments")
    if seg.empty:
        return _empty()
    cause = seg["cause"]
    compile_rows = (cause == "compile").to_numpy()
    pick = (cause == "setup").to_numpy() | compile_rows
    rows = np.flatnonzero(pick)
    if not len(rows):
        return _empty()
    sub = seg.iloc[rows]
    detail = sub["detail"]
    if not isinstance(detail.dtype, pd.CategoricalDtype):
        detail = detail.astype("category")
    kinds = np.array(KINDS, dtype=object)
    per_detail = np.array([KINDS.index(_kind(str(x))) for x in detail.cat.categories] + [KINDS.index(OTHER)],
                          dtype=np.int8)
    d_codes = detail.cat.codes.to_numpy()
    kind_codes = per_detail[np.where(d_codes < 0, len(per_detail) - 1, d_codes)]
    kind_codes[compile_rows[rows]] = KINDS.index(COMPILE)
    w = ctx.window
    spans = w.steps
    starts = np.array(sub["start"].to_numpy(), dtype=np.int64)
    device = np.array(sub["device"].to_numpy(), dtype=np.int64)
    s_idx = step_index(starts, tuple(zip(spans.starts, spans.ends)) if spans else ())
    rel = (starts.astype(np.float64) - float(w.start_ns)) / float(max(w.duration_ns, 1))
    tenth = np.clip(np.floor(rel * 10), 0, 9).astype(np.int64)
    n_steps = len(spans) if spans else 0
    busy = _compute_share(seg) if n_steps == 0 else {}
    kind_steps = np.zeros(len(rows), dtype=np.int64)
    kind_tenths = np.zeros(len(rows), dtype=np.int64)
    recurring = np.zeros(len(rows), dtype=np.int64)
    key = device * len(KINDS) + kind_codes
    for k in np.unique(key).tolist():  # a few (device, kind) groups
        mine = key == k
        steps = len(np.unique(s_idx[mine & (s_idx >= 0)]))
        tenths = len(np.unique(tenth[mine]))
        if n_steps > 0:
            recurs = steps >= MIN_RECURRING_STEPS and (steps >= MIN_STEP_SHARE * n_steps or tenths >= MIN_TENTHS)
        else:
            recurs = tenths >= MIN_TENTHS and busy.get(k // len(KINDS), 0.0) >= MIN_BUSY_SHARE
        kind_steps[mine], kind_tenths[mine], recurring[mine] = steps, tenths, int(recurs)
    out = pd.DataFrame({
        "device": device, "start": starts, "duration": np.array(sub["duration"].to_numpy(), dtype=np.int64),
        "cause": sub["cause"].array, "detail": detail.array,
        "kind": categorical(kind_codes.astype(np.int64), kinds),
        "nvtx_path": sub["nvtx_path"].array, "range_key": sub["range_key"].array,
        "step": sub["step"].array, "step_index": s_idx, "tenth": tenth,
        "kind_steps": kind_steps, "kind_tenths": kind_tenths, "recurring": recurring,
    }, copy=False)
    return out.reset_index(drop=True)


def _compute_share(seg: pd.DataFrame) -> dict[int, float]:
    """Per device: the share of its window time the breakdown labels ``compute``."""
    dev = seg["device"].to_numpy(dtype=np.int64)
    dur = seg["duration"].to_numpy(dtype=np.int64)
    comp = (seg["cause"] == "compute").to_numpy()
    out = {}
    for d in np.unique(dev).tolist():
        mine = dev == d
        total = float(dur[mine].sum())
        out[int(d)] = float(dur[mine & comp].sum()) / total if total > 0 else 0.0
    return out
