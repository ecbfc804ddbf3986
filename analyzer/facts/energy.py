"""Energy: average power, energy over the window and per step, from a power log aligned to the trace
(``analyze --power FILE``; :mod:`analyzer.loading.power`).

The energy of a span ``[a, b)`` is read from the GPU's cumulative energy counter when the log has one
(NVML ``nvmlDeviceGetTotalEnergyConsumption``): the counter advances in steps (every ~100 ms on an
H100), so its readings are interpolated linearly between the samples where it changed. A log with
power readings only (nvidia-smi) is integrated over time (trapezoids). ``resolution_ns`` is the time
between two counter updates (or two power samples): per-step energies are reported only for steps at
least twice that long; shorter steps get the window's energy divided by the number of steps.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts._util import text
from analyzer.facts.registry import FactContext, fact

ENERGY_COLUMNS = {
    "device": "GPU device id",
    "source": "energy counter | power readings",
    "samples": "power-log samples inside the window",
    "resolution_ns": "time between two counter updates / power samples (ns)",
    "window_ns": "window length (ns)",
    "energy_j": "energy the GPU used in the window (J)",
    "avg_power_w": "energy_j / window (W)",
    "steps": "steps in the window (0 when the window has no NVTX steps)",
    "energy_per_step_j": "energy_j / steps (J; NaN without steps)",
    "step_ns": "median step length (ns; NaN without steps)",
    "per_step_measured": "True when steps are long enough (>= 2 x resolution) to measure each one",
}


def step_spans(trace: object, window: object) -> pd.DataFrame:
    """The window's steps: the outermost NVTX ranges inside it, on the thread that has most of them
    (``start``, ``end``, ``text``); empty unless the window was chosen from NVTX steps."""
    nv = trace.nvtx  # type: ignore[attr-defined]
    cols = ["start", "end", "text"]
    if getattr(window, "source", "") != "nvtx" or nv.empty:
        return empty_typed((c, object if c == "text" else "int64") for c in cols)
    kind = text(nv["kind"]).to_numpy()
    sel = (nv["depth"].to_numpy() == 0) & (kind != "mark") \
        & (nv["start"].to_numpy() >= window.start_ns) & (nv["end"].to_numpy() <= window.end_ns)  # type: ignore[attr-defined]
    part = nv.loc[sel]
    if part.empty:
        return empty_typed((c, object if c == "text" else "int64") for c in cols)
    tid = part["tid"].value_counts().index[0]
    part = part.loc[part["tid"] == tid].sort_values("start")
    return pd.DataFrame({"start": part["start"].to_numpy(), "end": part["end"].to_numpy(),
                         "text": text(part["text"]).to_numpy()})


class EnergyCurve:
    """Cumulative energy of one GPU as a function of trace time."""

    def __init__(self, samples: pd.DataFrame) -> None:
        t = samples["start"].to_numpy(dtype=np.int64)
        e = samples["energy_j"].to_numpy(dtype=np.float64)
        p = samples["power_w"].to_numpy(dtype=np.float64)
        order = np.argsort(t, kind="stable")
        t, e, p = t[order], e[order], p[order]
        if np.isfinite(e).sum() >= 2:
            ok = np.isfinite(e)
            t, e = t[ok], e[ok]
            changed = np.r_[True, np.diff(e) != 0]  # the counter steps: keep the first sample of each level
            self.t, self.e = t[changed], e[changed]
            self.source = "energy counter"
        else:
            ok = np.isfinite(p)
            t, p = t[ok], p[ok]
            dt = np.diff(t) / 1e9
            cum = np.r_[0.0, np.cumsum((p[1:] + p[:-1]) / 2 * dt)] if len(t) else np.empty(0)
            self.t, self.e = t, cum
            self.source = "power readings"
        self.resolution_ns = float(np.median(np.diff(self.t))) if len(self.t) > 1 else float("nan")

    def covers(self, a: int, b: int) -> bool:
        return len(self.t) >= 2 and self.t[0] <= a and self.t[-1] >= b

    def energy(self, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
        return np.interp(b, self.t, self.e) - np.interp(a, self.t, self.e)


@fact("energy", columns=ENERGY_COLUMNS, scope_keys=("device",))
def energy(ctx: FactContext) -> pd.DataFrame:
    """Per GPU with a power log covering the window: energy and average power in the window and per
    step. Empty without a power log (``analyze --power FILE``)."""
    power = ctx.trace.power
    w = ctx.window
    if power.empty:
        return empty_typed((c, object if c == "source" else "float64") for c in ENERGY_COLUMNS)
    steps = step_spans(ctx.trace, w)
    rows = []
    for device, samples in power.groupby("device", sort=True):
        curve = EnergyCurve(samples)
        if not curve.covers(w.start_ns, w.end_ns):
            continue
        e = float(curve.energy(w.start_ns, w.end_ns))
        n = len(steps)
        step_ns = float(np.median(steps["end"] - steps["start"])) if n else float("nan")
        inside = power["start"].between(w.start_ns, w.end_ns) & (power["device"] == device)
        rows.append({
            "device": int(device), "source": curve.source, "samples": int(inside.sum()),
            "resolution_ns": curve.resolution_ns, "window_ns": w.duration_ns, "energy_j": e,
            "avg_power_w": e / (w.duration_ns / 1e9) if w.duration_ns else float("nan"),
            "steps": n, "energy_per_step_j": e / n if n else float("nan"), "step_ns": step_ns,
            "per_step_measured": bool(n and step_ns >= 2 * curve.resolution_ns),
        })
    return pd.DataFrame(rows, columns=list(ENERGY_COLUMNS))


@fact(
    "energy_steps",
    columns={"device": "GPU device id", "step": "NVTX step name", "start": "step start (ns)",
             "end": "step end (ns)", "energy_j": "energy of the step (J)", "avg_power_w": "mean power (W)"},
    requires=("energy",),
    scope_keys=("device", "step"),
)
def energy_steps(ctx: FactContext) -> pd.DataFrame:
    """Energy of each step, where steps are long enough for the log's resolution (see ``energy``)."""
    summary = ctx.get("energy")
    cols = ["device", "step", "start", "end", "energy_j", "avg_power_w"]
    frames = []
    steps = step_spans(ctx.trace, ctx.window)
    for _, row in summary.iterrows():
        if not row["per_step_measured"]:
            continue
        curve = EnergyCurve(ctx.trace.power.loc[ctx.trace.power["device"] == row["device"]])
        e = curve.energy(steps["start"].to_numpy(), steps["end"].to_numpy())
        dur = (steps["end"] - steps["start"]).to_numpy() / 1e9
        frames.append(pd.DataFrame({"device": int(row["device"]), "step": steps["text"].to_numpy(),
                                    "start": steps["start"].to_numpy(), "end": steps["end"].to_numpy(),
                                    "energy_j": e, "avg_power_w": np.where(dur > 0, e / np.maximum(dur, 1e-12),
                                                                           np.nan)}))
    if not frames:
        return empty_typed((c, object if c == "step" else "float64") for c in cols)
    return pd.concat(frames, ignore_index=True)[cols]
