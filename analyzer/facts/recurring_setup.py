"""Setup-like work in the analysis window, and whether the program repeats it in its steady state.

The timeline breakdown (:mod:`analyzer.facts.breakdown`) labels ``setup`` the GPU idle time while the host
is inside a call that is one-time work by its nature: CUDA graph capture (BeginCapture to EndCapture),
graph instantiation, upload and destruction, module or library loading, a kernel's first launch, device
queries and attribute calls. torch.compile's compilation ranges (dynamo, AOT autograd, inductor:
:data:`analyzer.facts.graphs.COMPILE_RANGE`) hold host time the breakdown labels ``host_work`` or
``launch_bound`` by what the host was doing. Such work is paid once per process only when the program
does it once: a server that captures a new CUDA graph for every request, or a model that recompiles for
every new input shape, pays it step after step, and the time is a per-step cause like any other.

``setup_segments`` lists those segments of ``timeline_segments`` (every ``setup`` segment, and the idle
segments under a compilation range) with their *kind* and whether the kind *recurs* on its device:

* with steps in the window (NVTX step instances or periods of the repeating GPU work: the window's
  steps), the kind's segments start in at least :data:`MIN_RECURRING_STEPS` steps and in at least
  :data:`MIN_STEP_SHARE` of them (most steps), or in that many steps spread over at least
  :data:`MIN_TENTHS` tenths of the window (periodic recurrence, e.g. a recompilation every few steps,
  rather than a warm-up prefix);
* without steps, they start in at least :data:`MIN_TENTHS` tenths of the window and the GPU computes
  between them: at least :data:`MIN_BUSY_SHARE` of the window is compute (a recording of start-up
  alone, a serving engine capturing one graph per batch size back to back, is one-time work however
  long it runs).

Rules: ``setup-window`` reads the segments that do not recur (``recurring == 0``, setup only), and
``recurring-setup`` those that do (every kind). Each segment is idle time of the breakdown, so impacts taken
from them never count a nanosecond twice (compilation segments are left out of ``host-work-in-loop``'s
ranges by nothing: see that rule's note in ``recurring-setup``'s calibration).
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
_GRAPH_DETAIL = re.compile(r"graph|capture", re.IGNORECASE)
_MODULE_DETAIL = re.compile(r"Module|Library|Link|one-time", re.IGNORECASE)

COLUMNS = {
    "device": "GPU device id",
    "start": "segment start (ns)",
    "duration": "segment length (ns): GPU idle time (timeline_segments)",
    "cause": "the breakdown's cause: setup, or host_work / launch_bound for compilation",
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
    """The window's setup-like segments (see :mod:`analyzer.facts.recurring_setup`), by start."""
    from analyzer.facts.api import step_index
    from analyzer.facts.graphs import COMPILE_RANGE

    seg = ctx.get("timeline_segments")
    if seg.empty:
        return _empty()
    cause = seg["cause"]
    pick = (cause == "setup").to_numpy()
    path = seg["nvtx_path"]
    cats = np.asarray(path.cat.categories, dtype=object) if hasattr(path, "cat") else np.unique(path.astype(str))
    compiling = np.array([any(COMPILE_RANGE.search(p) for p in str(x).split("/")) for x in cats], dtype=bool)
    if compiling.any():
        codes = (path.cat.codes.to_numpy() if hasattr(path, "cat")
                 else np.searchsorted(cats, path.astype(str).to_numpy()))
        on = np.r_[compiling, False][np.where(codes < 0, len(cats), codes)]
        pick |= on & cause.isin(["host_work", "launch_bound"]).to_numpy()
    rows = np.flatnonzero(pick)
    if not len(rows):
        return _empty()
    sub = seg.iloc[rows]
    out = pd.DataFrame({
        "device": sub["device"].to_numpy(dtype=np.int64),
        "start": sub["start"].to_numpy(dtype=np.int64),
        "duration": sub["duration"].to_numpy(dtype=np.int64),
        "cause": sub["cause"].astype(str).to_numpy(dtype=object),
        "detail": sub["detail"].astype(str).to_numpy(dtype=object),
        "nvtx_path": sub["nvtx_path"].astype(str).to_numpy(dtype=object),
        "range_key": sub["range_key"].astype(str).to_numpy(dtype=object),
        "step": sub["step"].astype(str).to_numpy(dtype=object),
    })
    out["kind"] = [COMPILE if c != "setup" else _kind(d) for c, d in zip(out["cause"], out["detail"])]
    w = ctx.window
    spans = w.steps
    starts = out["start"].to_numpy(dtype=np.int64)
    out["step_index"] = step_index(starts, tuple(zip(spans.starts, spans.ends)) if spans else ())
    rel = (starts.astype(np.float64) - float(w.start_ns)) / float(max(w.duration_ns, 1))
    out["tenth"] = np.clip(np.floor(rel * 10), 0, 9).astype(np.int64)
    n_steps = len(spans) if spans else 0
    busy = _compute_share(seg) if n_steps == 0 else {}
    out["kind_steps"] = 0
    out["kind_tenths"] = 0
    out["recurring"] = 0
    for (dev, _kind_name), idx in out.groupby(["device", "kind"], sort=False).groups.items():
        g = out.loc[idx]
        steps = int(g.loc[g["step_index"] >= 0, "step_index"].nunique())
        tenths = int(g["tenth"].nunique())
        if n_steps > 0:
            recurs = steps >= MIN_RECURRING_STEPS and (steps >= MIN_STEP_SHARE * n_steps or tenths >= MIN_TENTHS)
        else:
            recurs = tenths >= MIN_TENTHS and busy.get(int(dev), 0.0) >= MIN_BUSY_SHARE
        out.loc[idx, "kind_steps"] = steps
        out.loc[idx, "kind_tenths"] = tenths
        out.loc[idx, "recurring"] = int(recurs)
    out = out[list(COLUMNS)].sort_values(["device", "start"], kind="stable").reset_index(drop=True)
    return out


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
