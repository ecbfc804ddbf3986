"""Small pieces of a report that more than its view model needs: a link cell, the JSON-safe value of
anything a fact holds, the GPU label of a trace and a pack's parameters as flat ``rule.param`` pairs.

The report's view model (:mod:`analyzer.reports.viewmodel`), its JSON, the diff baseline every JSON
report carries (:mod:`analyzer.reports.baseline`), the job report and the diff renderings use these
one implementation each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Link:
    """A cell or list item that points to an anchor in the same report."""

    text: str
    anchor: str

    def __str__(self) -> str:
        return self.text


def py_value(value: Any) -> Any:
    """A JSON-safe, deterministic Python scalar: numpy -> python, NaN/inf -> None, floats rounded."""
    if value is None or isinstance(value, (str, bool, Link)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            return None
        return float(f"{v:.6g}") if abs(v) < 1e15 else v
    if isinstance(value, (pd.Timestamp, datetime)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, dict):
        return {str(k): py_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [py_value(v) for v in value]
    return str(value)


def used_devices(trace: Any) -> set[int]:
    """Devices that ran at least one kernel, copy or memset."""
    used: set[int] = set()
    for frame in (trace.kernels, trace.memcpy, trace.memset):
        if len(frame) and "device" in frame.columns:
            used |= {int(d) for d in pd.unique(frame["device"])}
    return used


def gpu_label(trace: Any) -> tuple[str, dict[int, str], int]:
    """``"2 x NVIDIA H100"`` for the devices that did work (``"(1 of 4 used)"`` when some idled),
    device -> name, and the number of devices that did work."""
    gpus = trace.gpus
    names: dict[int, str] = {}
    if len(gpus) and {"device", "name"} <= set(gpus.columns):
        for dev, name in zip(gpus["device"].tolist(), gpus["name"].tolist()):
            names[int(dev)] = str(name)
    used = used_devices(trace)
    devices = used or set(names)
    if not devices:
        return "unknown GPU", names, 0
    counts: dict[str, int] = {}
    for dev in sorted(devices):
        label = names.get(dev) or unnamed_gpu(gpus, dev)
        counts[label] = counts.get(label, 0) + 1
    text = ", ".join(f"{n} \u00d7 {name}" if n > 1 else name for name, n in sorted(counts.items()))
    known = set(names) | used
    if used and len(known) > len(used):
        text += f" ({len(used)} of {len(known)} used)"
    return text, names, len(used)


def unnamed_gpu(gpus: pd.DataFrame, dev: int) -> str:
    """``unknown GPU (compute capability 12.0)`` when the trace recorded no name but a compute capability."""
    if len(gpus) and {"device", "compute_major", "compute_minor"} <= set(gpus.columns):
        row = gpus[gpus["device"] == dev]
        if len(row) and int(row["compute_major"].iloc[0] or 0) > 0:
            return f"unknown GPU (compute capability {int(row['compute_major'].iloc[0])}.{int(row['compute_minor'].iloc[0])})"
    return "unknown GPU"


def flat_parameters(params: Any, prefix: str = "") -> tuple[tuple[str, str], ...]:
    """``{"rule": {"param": 1}}`` -> ``(("rule.param", "1"),)``, sorted; values as text."""
    out: list[tuple[str, str]] = []
    for key, value in (params or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += flat_parameters(value, f"{name}.")
        else:
            out.append((name, str(py_value(value))))
    return tuple(sorted(out))
