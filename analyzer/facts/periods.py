"""The window's repeated units (steps) as a fact: how busy the GPU was in each, so rules can point at
the least busy steps instead of anonymous time slices.

``Window.steps`` are the NVTX step instances the window was chosen from, or the periods of the
repeating GPU op sequence (the ``steps`` fact times each one from completion to completion; this one
says how busy the GPU was inside each span); a window without such structure is cut into tenths.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import covered_between
from analyzer.facts.registry import FactContext, fact

PERIOD_COLUMNS: dict[str, str] = {
    "device": "GPU device id",
    "period": "index of the step (or tenth) in the window, from 0",
    "label": "what the period is: the NVTX step's text (step_7), 'period 3' of a repeating GPU op "
    "sequence, 'before period 1' (the window's time before its first step), or '30-40%' of a window "
    "without steps",
    "kind": "steps | periods | tenths (plural, as a message prints it)",
    "start": "period start (ns)",
    "end": "period end (ns)",
    "duration": "period length (ns)",
    "busy_ns": "GPU busy time inside the period (ns; concurrent ops count once)",
    "util": "busy_ns / duration (0..1)",
    "in_step": "False for the window's time before its first step (label 'before ...'), True otherwise",
}


def _periods(ctx: FactContext) -> tuple[np.ndarray, np.ndarray, list[str], str, np.ndarray]:
    """The window's periods: starts, ends, labels, kind, and which are steps (False: the head)."""
    w = ctx.window
    spans = w.steps
    if spans:
        starts = np.asarray(spans.starts, dtype=np.int64)
        ends = np.asarray(spans.ends, dtype=np.int64)
        if spans.source in ("nvtx", "annotation"):
            labels, kind = [str(n) for n in spans.names], "steps"
        else:
            labels, kind = [f"period {i + 1}" for i in range(len(starts))], "periods"
        p_starts, p_ends, p_labels = _with_head(w.start_ns, starts, ends, labels)
        return p_starts, p_ends, p_labels, kind, np.arange(len(p_starts)) >= len(p_starts) - len(starts)
    edges = np.round(np.linspace(w.start_ns, w.end_ns, 11)).astype(np.int64)
    return edges[:-1], edges[1:], [f"{i * 10}-{(i + 1) * 10}%" for i in range(10)], "tenths", np.ones(10, bool)


def _with_head(start_ns: int, starts: np.ndarray, ends: np.ndarray,
               labels: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The steps, and before them the window's time that precedes the first one (a window opened at
    the program's own annotation before its repeating work began, ``--window full``), so the periods
    hold all of the window's idle time that low utilization counts: its least busy part is in the
    evidence, and a finding of that time explains the symptom."""
    first = int(starts.min()) if len(starts) else start_ns
    if first <= start_ns:
        return starts, ends, labels
    at = int(np.argmin(starts))
    return np.r_[start_ns, starts], np.r_[first, ends], [f"before {labels[at]}", *labels]


@fact("window_periods", columns=PERIOD_COLUMNS, requires=("gpu_busy", "gpu_ops"), scope_keys=("device",))
def window_periods(ctx: FactContext) -> pd.DataFrame:
    """Per device and window step (or tenth of the window): GPU busy time and share."""
    starts, ends, labels, kind, in_step = _periods(ctx)
    busy = ctx.get("gpu_busy")
    # the distinct devices hashed, then the few sorted (np.unique sorted every op: 25 ms at a million)
    devices = np.unique(pd.unique(ctx.get("gpu_ops")["device"].to_numpy(dtype=np.int64)))
    frames = []
    for d in devices:
        b = busy.loc[busy["device"].to_numpy() == d]
        us, ue = b["start"].to_numpy(), b["end"].to_numpy()
        busy_ns = covered_between(us, ue, starts, ends)
        dur = ends - starts
        frames.append(pd.DataFrame({
            "device": d, "period": np.arange(len(starts), dtype=np.int64), "label": labels, "kind": kind,
            "start": starts, "end": ends, "duration": dur, "busy_ns": busy_ns,
            "util": np.where(dur > 0, busy_ns / np.maximum(dur, 1), 0.0),
            "in_step": in_step,
        }))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("label", "kind") else "int64")
                             for c in PERIOD_COLUMNS}).astype({"util": "float64", "in_step": "bool"})
    out = pd.concat(frames, ignore_index=True)
    out["label"] = out["label"].astype(object)
    out["kind"] = out["kind"].astype(object)
    return out
