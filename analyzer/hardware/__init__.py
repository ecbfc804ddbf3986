"""Hardware constants: the GPU facts table and what one traced device's constants are.

- :mod:`analyzer.hardware.gpus`: the table of known GPUs (``gpus.yaml``: SMs, memory bandwidth, L2,
  PCIe and NVLink links, pinned-copy rate, dense peak FLOP/s per precision; datasheets cited per row),
  looked up by the name a trace reports.
- :mod:`analyzer.hardware.device`: the constants of one device of a trace, each with its source (the
  trace's own record, a measurement on the trace, the table, or unknown), for rules and reports.
"""
from __future__ import annotations

from analyzer.hardware.device import (
    FALLBACK_PINNED,
    DeviceHardware,
    HardwareValue,
    measured_pinned_bandwidth,
    pinned_copy_rate,
    resolve_device,
    trace_hardware,
)
from analyzer.hardware.gpus import (
    PCIE_LANE_GBS,
    PRECISIONS,
    GpuSpec,
    GpuTableError,
    NvLink,
    PcieLink,
    gpu_by_key,
    gpu_table,
    is_mig,
    lookup_gpu,
    normalize_gpu_name,
)

__all__ = [
    "FALLBACK_PINNED", "PCIE_LANE_GBS", "PRECISIONS", "DeviceHardware", "GpuSpec", "GpuTableError",
    "HardwareValue", "NvLink", "PcieLink", "gpu_by_key", "gpu_table", "is_mig", "lookup_gpu",
    "measured_pinned_bandwidth", "normalize_gpu_name", "pinned_copy_rate", "resolve_device", "trace_hardware",
]
