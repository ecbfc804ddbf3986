"""GPU power logs recorded beside a profiled run -> the trace's ``power`` frame.

Two formats, detected by content:

* the workloads' NVML sampler (``python -m workloads._power``): a ``# workloads.power/1 ...`` comment,
  then ``timestamp_utc_ns,gpu_index,gpu_name,power_w,energy_j,sm_clock_mhz,util_gpu_pct``; ``energy_j``
  is the GPU's cumulative energy counter (``nvmlDeviceGetTotalEnergyConsumption``);
* ``nvidia-smi --query-gpu=timestamp,index,power.draw[,clocks.sm,...] --format=csv -lms N``: local
  wall-clock timestamps (``2026/11/23 03:42:13.849``), ``power.draw [W]`` values with units.

Samples are put on the trace's clock through its UTC origin (:attr:`TraceInfo.utc_origin_ns`, the nsys
session's start). nvidia-smi prints local time: the trace's own record of the recording machine's UTC
offset (nsys ``TARGET_INFO_SESSION_START_TIME`` local vs UTC time) converts it; without one the log is
taken as UTC and the note says so. Problems that leave the log unusable for this trace (no overlap in
time, no matching GPU, unreadable rows) are returned as notes, never raised: the analysis goes on
without energy. A file that is not a power log at all is an :class:`InputError`.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from analyzer.boundedio import BoundedReadError, read_regular
from analyzer.errors import InputError
from analyzer.loading.model import POWER_COLUMNS, Trace, empty_frame

_SMI_TIME = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
MAX_BYTES = 512 * 2**20


@dataclass(frozen=True)
class PowerLog:
    """A parsed power log: samples with UTC times, before alignment to a trace."""

    path: Path
    source: str  # "nvml" | "nvidia-smi"
    utc_ns: np.ndarray
    device: np.ndarray
    power_w: np.ndarray
    energy_j: np.ndarray
    sm_clock_mhz: np.ndarray
    local_time: bool  # timestamps were local wall-clock time (nvidia-smi)


def read_power_log(path: Path, *, utc_offset_s: float | None = None) -> PowerLog:
    """Parse ``path``; ``utc_offset_s`` (local minus UTC) converts nvidia-smi's local timestamps."""
    try:
        raw = read_regular(path, MAX_BYTES, "power log")
    except BoundedReadError as exc:
        raise InputError(path, f"power log {exc.reason}",
                         hint="log at a lower rate (-lms 100) or cut the log to the profiled run") from None
    except OSError as exc:
        raise InputError(path, f"cannot read the power log ({exc.strerror or exc})") from None
    content = raw.decode("utf-8", errors="replace")
    lines = [ln for ln in content.splitlines() if ln.strip()]
    body = [ln for ln in lines if not ln.lstrip().startswith("#")]
    if not body:
        raise InputError(path, "power log is empty", hint="give the CSV nvidia-smi or the NVML sampler wrote")
    header = [h.strip().lower() for h in next(csv.reader([body[0]]))]
    if "timestamp_utc_ns" in header:
        return _read_nvml(path, header, body[1:])
    if header and header[0].startswith("timestamp") and any(h.startswith("power.draw") for h in header):
        return _read_smi(path, header, body[1:], utc_offset_s)
    raise InputError(path, "not a power log: expected the CSV of `nvidia-smi --query-gpu=timestamp,index,"
                     "power.draw --format=csv -lms 100` or of `python -m workloads._power`",
                     hint="record one with nvidia-smi beside the profiled run")


def _floats(values: list[str]) -> np.ndarray:
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        m = _NUMBER.search(v or "")
        if m:
            out[i] = float(m.group(0))
    return out


def _read_nvml(path: Path, header: list[str], rows: list[str]) -> PowerLog:
    recs = list(csv.reader(io.StringIO("\n".join(rows))))
    col = {h: i for i, h in enumerate(header)}

    def get(name: str) -> list[str]:
        i = col.get(name)
        return [r[i] if i is not None and i < len(r) else "" for r in recs]

    ts = _floats(get("timestamp_utc_ns"))
    ok = ~np.isnan(ts)
    if not ok.any():
        raise InputError(path, "power log has no readable timestamp_utc_ns values")
    dev = _floats(get("gpu_index"))
    return PowerLog(path, "nvml", ts[ok].astype(np.int64), np.nan_to_num(dev[ok], nan=0).astype(np.int64),
                    _floats(get("power_w"))[ok], _floats(get("energy_j"))[ok], _floats(get("sm_clock_mhz"))[ok],
                    local_time=False)


def _read_smi(path: Path, header: list[str], rows: list[str], utc_offset_s: float | None) -> PowerLog:
    recs = list(csv.reader(io.StringIO("\n".join(rows))))
    col = {h.split(" [")[0].strip(): i for i, h in enumerate(header)}
    stamps, keep = [], []
    for r in recs:
        t = r[0].strip() if r else ""
        if not _SMI_TIME.match(t):  # repeated header lines, garbage
            keep.append(False)
            continue
        try:
            stamps.append(dt.datetime.strptime(t, "%Y/%m/%d %H:%M:%S.%f" if "." in t else "%Y/%m/%d %H:%M:%S"))
            keep.append(True)
        except ValueError:
            keep.append(False)
    recs = [r for r, k in zip(recs, keep) if k]
    if not recs:
        raise InputError(path, "nvidia-smi power log has no readable rows")
    offset = utc_offset_s or 0.0
    utc = np.array([int((s.replace(tzinfo=dt.timezone.utc).timestamp() - offset) * 1e9) for s in stamps],
                   dtype=np.int64)

    def get(name: str) -> list[str]:
        i = col.get(name)
        return [r[i] if i is not None and i < len(r) else "" for r in recs]

    dev = _floats(get("index")) if "index" in col else np.zeros(len(recs))
    return PowerLog(path, "nvidia-smi", utc, np.nan_to_num(dev, nan=0).astype(np.int64),
                    _floats(get("power.draw")), np.full(len(recs), np.nan), _floats(get("clocks.sm")),
                    local_time=True)


def utc_offset_of(trace: Trace) -> float | None:
    """The recording machine's UTC offset (s), from the trace's local and UTC session start times."""
    meta = trace.extras.get("session_times")
    if isinstance(meta, (tuple, list)) and len(meta) == 2:
        try:
            local = dt.datetime.fromisoformat(str(meta[0]))
            utc = dt.datetime.fromisoformat(str(meta[1]))
            return (local - utc).total_seconds()
        except ValueError:
            return None
    return None


def _one_log_per_device(frames: list[pd.DataFrame], notes: list[str]) -> list[pd.DataFrame]:
    """Where several logs cover one GPU, keep the one with an energy counter (else the first)."""
    chosen: dict[int, int] = {}
    for i, f in enumerate(frames):
        for d in pd.unique(f["device"]):
            j = chosen.get(int(d))
            if j is None or (f["energy_j"].notna().any() and not frames[j]["energy_j"].notna().any()):
                chosen[int(d)] = i
    kept = []
    for i, f in enumerate(frames):
        mine = [d for d, j in chosen.items() if j == i]
        part = f.loc[f["device"].isin(mine)]
        if len(part) < len(f):
            notes.append(f"power log {i + 1}: samples of GPU(s) another log covers with an energy counter "
                         "were not used")
        if len(part):
            kept.append(part)
    return kept


def attach_power(trace: Trace, paths: list[Path]) -> list[str]:
    """Read ``paths`` and set ``trace.power`` to the samples on the trace's clock and GPUs; returns notes
    about what could not be used (empty when everything aligned)."""
    notes: list[str] = []
    if trace.info.utc_origin_ns is None:
        return [f"power log {p.name} not used: the trace does not record its UTC start time, so the log "
                "cannot be aligned" for p in paths]
    offset = utc_offset_of(trace)
    frames = []
    trace_devices = set(int(d) for d in trace.gpus["device"]) if len(trace.gpus) else set()
    for path in paths:
        log = read_power_log(path, utc_offset_s=offset)
        start = log.utc_ns - int(trace.info.utc_origin_ns)
        span = (0, trace.info.duration_ns)
        inside = (start >= span[0]) & (start <= span[1])
        if not inside.any():
            first = dt.datetime.fromtimestamp(log.utc_ns.min() / 1e9, dt.timezone.utc)
            t0 = dt.datetime.fromtimestamp(trace.info.utc_origin_ns / 1e9, dt.timezone.utc)
            notes.append(f"power log {path.name} not used: its samples ({first:%Y-%m-%d %H:%M:%S} UTC, "
                         f"{len(start)} rows) do not overlap the trace (from {t0:%Y-%m-%d %H:%M:%S} UTC)"
                         + ("; nvidia-smi logs local time, taken as UTC" if log.local_time and offset is None
                            else ""))
            continue
        devices = set(int(d) for d in np.unique(log.device))
        use = log.device >= 0
        if trace_devices and not devices & trace_devices:
            if len(devices) == 1 and len(trace_devices) == 1:
                notes.append(f"power log {path.name}: GPU index {devices.pop()} taken as the trace's GPU "
                             f"{next(iter(trace_devices))} (one GPU in each)")
                mapped = np.full(len(log.device), next(iter(trace_devices)), dtype=np.int64)
            else:
                notes.append(f"power log {path.name} not used: its GPU indices {sorted(devices)} match none of "
                             f"the trace's GPUs {sorted(trace_devices)}")
                continue
        else:
            mapped = log.device
            if trace_devices:
                use &= np.isin(log.device, list(trace_devices))
        frames.append(pd.DataFrame({
            "start": start[use], "device": mapped[use], "power_w": log.power_w[use],
            "energy_j": log.energy_j[use], "sm_clock_mhz": log.sm_clock_mhz[use],
        }))
        sources = cast("list[str]", trace.extras.setdefault("power_sources", []))
        sources.append(f"{path.name} ({log.source})")
    frames = _one_log_per_device(frames, notes)
    if frames:
        power = pd.concat(frames, ignore_index=True).sort_values(["device", "start"], kind="stable",
                                                                  ignore_index=True)[list(POWER_COLUMNS)]
        trace.power = power
    else:
        trace.power = empty_frame(POWER_COLUMNS)
    trace_notes = cast("list[str]", trace.extras.setdefault("notes", []))
    trace_notes.extend(notes)
    return notes
