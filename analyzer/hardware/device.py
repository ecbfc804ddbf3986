"""The hardware constants of one traced GPU, each with the source it came from.

Order of preference, per constant: what the trace recorded about the device (nsys ``TARGET_INFO_GPU``:
SM count, memory bandwidth, L2; ncu device attributes), what the trace measured (pinned copy rate from
its own pinned copies), the GPU table (:mod:`analyzer.hardware.gpus`), and nothing (``value`` None,
``source`` ``"unknown"``): a rule then says it could not estimate rather than assume an H100.

    hw = resolve_device(name="Tesla T4", measured_pinned=None)
    hw.pinned_copy.value      # 12.6e9 bytes/s
    hw.pinned_copy.detail     # 'GPU table: NVIDIA T4, PCIe 3 x16, derived: 80% of ...'
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analyzer.hardware.gpus import PRECISIONS, GpuSpec, is_mig, lookup_gpu

#: pinned copies at least this large count as a measurement of the link (smaller ones are latency-bound)
MIN_MEASURED_COPY_BYTES = 4 * 1024 * 1024
#: ...and at least this many of them
MIN_MEASURED_COPIES = 2

SOURCES = ("trace", "measured", "table", "assumed", "unknown")


@dataclass(frozen=True)
class HardwareValue:
    """A constant and where it came from: ``source`` in trace | measured | table | assumed | unknown, ``detail``
    a phrase a report can print after the number."""

    value: float | None
    source: str
    detail: str

    @property
    def known(self) -> bool:
        return self.value is not None and self.value > 0


@dataclass(frozen=True)
class DeviceHardware:
    device: int
    name: str
    spec: GpuSpec | None
    sm_count: HardwareValue
    memory_bandwidth: HardwareValue  # bytes/s
    l2_bytes: HardwareValue
    pinned_copy: HardwareValue  # bytes/s, one direction
    pcie: HardwareValue  # bytes/s per direction, theoretical
    nvlink: HardwareValue  # bytes/s per direction over all links
    peaks: Mapping[str, HardwareValue]  # precision -> FLOP/s

    def peak_flops(self, precision: str) -> HardwareValue:
        if precision not in PRECISIONS:
            raise KeyError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
        return self.peaks[precision]


def _unknown(what: str) -> HardwareValue:
    return HardwareValue(None, "unknown", f"{what} unknown: not recorded in the trace, GPU not in the table")


def _positive(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) and number > 0 else None


def resolve_device(
    name: str = "",
    *,
    device: int = 0,
    sm_count: Any = None,
    memory_bandwidth: Any = None,
    l2_bytes: Any = None,
    measured_pinned: tuple[float, int] | None = None,
) -> DeviceHardware:
    """Hardware constants for one device. ``sm_count``, ``memory_bandwidth`` (bytes/s) and ``l2_bytes``
    are what the trace recorded (0/None: not recorded); ``measured_pinned`` is (bytes/s, copies) from
    :func:`measured_pinned_bandwidth`."""
    spec = lookup_gpu(name)
    table = f"GPU table: {spec.label()}" if spec else ""

    def pick(recorded: Any, tabled: float | None, what: str) -> HardwareValue:
        value = _positive(recorded)
        if value is not None:
            return HardwareValue(value, "trace", "recorded in the trace")
        if spec is not None and tabled:
            return HardwareValue(float(tabled), "table", table)
        return _unknown(what)

    mig = is_mig(name)
    sms = pick(sm_count, None if mig else (spec.sm_count if spec else None), "SM count")
    bw = pick(memory_bandwidth, None if mig else (spec.memory_bandwidth if spec else None), "memory bandwidth")
    l2 = pick(l2_bytes, None if mig else (spec.l2_bytes if spec else None), "L2 size")
    if measured_pinned is not None and _positive(measured_pinned[0]):
        rate, copies = measured_pinned
        pinned = HardwareValue(float(rate), "measured",
                               f"measured on this trace's {copies} pinned copies of 4 MiB or more")
    elif spec is not None:
        pinned = HardwareValue(spec.pinned_copy_bandwidth, "table",
                               f"{table} on {spec.pcie.label()}, {spec.pinned_copy_note}")
    else:
        pinned = _unknown("pinned copy rate")
    pcie = HardwareValue(spec.pcie_bandwidth, "table", f"{table}, {spec.pcie.label()}") if spec \
        else _unknown("host link")
    if spec is not None and spec.nvlink is not None:
        nvlink = HardwareValue(spec.nvlink_bandwidth, "table", f"{table}, {spec.nvlink.label()}")
    elif spec is not None:
        nvlink = HardwareValue(None, "table", f"{table}: no NVLink")
    else:
        nvlink = _unknown("NVLink")
    # a MIG slice runs on part of the SMs: the table's whole-GPU peaks scale by the slice's SM share
    scale, how = 1.0, table
    if mig and spec is not None:
        if sms.source == "trace" and sms.value:
            scale = float(sms.value) / spec.sm_count
            how = f"{table}, scaled to the MIG slice's {sms.value:.0f} of {spec.sm_count} SMs"
        else:
            scale = 0.0
    peaks: dict[str, HardwareValue] = {}
    for precision in PRECISIONS:
        value = spec.peak_flops(precision) if spec is not None else None
        if value is not None and scale > 0:
            peaks[precision] = HardwareValue(value * scale, "table", how)
        elif spec is not None and value is None:
            peaks[precision] = HardwareValue(None, "table", f"{table}: no {precision} peak in the datasheet")
        else:
            peaks[precision] = _unknown(f"{precision} peak")
    return DeviceHardware(device=int(device), name=str(name or ""), spec=spec, sm_count=sms,
                          memory_bandwidth=bw, l2_bytes=l2, pinned_copy=pinned, pcie=pcie, nvlink=nvlink,
                          peaks=peaks)


#: what a rule assumes for a pinned copy when the GPU is unknown and the trace has no pinned copies to
#: measure: the slowest link current GPUs ship with (PCIe 3 x16), so savings are never overstated
FALLBACK_PINNED = HardwareValue(
    round(0.8 * 15.75, 1) * 1e9, "assumed",
    "assumed PCIe 3 x16, the slowest current link (GPU not in the table, no pinned copies to measure)",
)


def pinned_copy_rate(hw: DeviceHardware | None) -> HardwareValue:
    """The pinned copy rate a rule should use for a device: measured > table > :data:`FALLBACK_PINNED`."""
    if hw is not None and hw.pinned_copy.known:
        return hw.pinned_copy
    return FALLBACK_PINNED


def measured_pinned_bandwidth(memcpy: pd.DataFrame) -> dict[int, tuple[float, int]]:
    """Per device: (median bytes/s, copies) of the trace's own pinned host<->device copies of at least
    :data:`MIN_MEASURED_COPY_BYTES`, where there are at least :data:`MIN_MEASURED_COPIES` of them. The
    median keeps one copy slowed by a concurrent one from deciding the rate."""
    needed = {"device", "bytes", "duration", "direction", "src_kind", "dst_kind"}
    if not len(memcpy) or not needed <= set(memcpy.columns):
        return {}
    direction = memcpy["direction"].astype(str)
    src, dst = memcpy["src_kind"].astype(str), memcpy["dst_kind"].astype(str)
    pinned = ((direction == "H2D") & (src == "pinned")) | ((direction == "D2H") & (dst == "pinned"))
    size = memcpy["bytes"].to_numpy(dtype=np.float64)
    dur = memcpy["duration"].to_numpy(dtype=np.float64)
    keep = pinned.to_numpy(dtype=bool) & (size >= MIN_MEASURED_COPY_BYTES) & (dur > 0)
    if not keep.any():
        return {}
    rates = pd.DataFrame({"device": memcpy["device"].to_numpy()[keep], "rate": size[keep] / dur[keep] * 1e9})
    out: dict[int, tuple[float, int]] = {}
    for dev, group in rates.groupby("device", sort=True):
        if len(group) >= MIN_MEASURED_COPIES:
            out[int(dev)] = (float(group["rate"].median()), len(group))  # type: ignore[call-overload]
    return out


def trace_hardware(trace: Any) -> dict[int, DeviceHardware]:
    """:class:`DeviceHardware` for every device of a loaded trace (its ``gpus`` frame plus the devices its
    GPU operations ran on), with pinned rates measured on its own copies."""
    gpus = getattr(trace, "gpus", None)
    rows: dict[int, Mapping[str, Any]] = {}
    if gpus is not None and len(gpus):
        for rec in gpus.to_dict("records"):
            rows[int(rec.get("device", 0))] = rec
    devices = set(rows)
    for frame in (getattr(trace, "kernels", None), getattr(trace, "memcpy", None)):
        if frame is not None and len(frame) and "device" in frame.columns:
            devices.update(int(d) for d in pd.unique(frame["device"]))
    measured = measured_pinned_bandwidth(getattr(trace, "memcpy", pd.DataFrame()))
    out: dict[int, DeviceHardware] = {}
    for dev in sorted(devices):
        rec = rows.get(dev, {})
        out[dev] = resolve_device(
            str(rec.get("name") or ""), device=dev, sm_count=rec.get("sm_count"),
            memory_bandwidth=rec.get("memory_bandwidth"), l2_bytes=rec.get("l2_cache_bytes"),
            measured_pinned=measured.get(dev),
        )
    return out
