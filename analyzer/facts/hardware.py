"""Hardware facts: each device's constants (SMs, bandwidths, links, peak FLOP/s) with where each came
from, for rules that need a hardware constant and for reports that must say which one was used.

Resolution (see :mod:`analyzer.hardware.device`): the trace's own record, a measurement on the trace
(pinned copies), the GPU table (:mod:`analyzer.hardware.gpus`), else unknown (NaN); the pinned copy rate
falls back to an assumed PCIe 3 x16 link so that savings are never overstated.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyzer.facts.registry import FactContext, fact
from analyzer.hardware import DeviceHardware, pinned_copy_rate, trace_hardware

if TYPE_CHECKING:
    from analyzer.facts.registry import FactStore

_PEAKS = {"peak_fp64": "fp64", "peak_fp32": "fp32", "peak_tf32_tensor": "tf32_tensor",
          "peak_fp16_tensor": "fp16_tensor", "peak_bf16_tensor": "bf16_tensor", "peak_fp8_tensor": "fp8_tensor"}

HARDWARE_COLUMNS: dict[str, str] = {
    "device": "CUDA device id",
    "name": "GPU name as the trace reports it ('' when it does not)",
    "gpu": "the GPU table row it matched ('' when none)",
    "sm_count": "SMs (NaN when unknown)",
    "sm_count_source": "trace | table | unknown",
    "memory_bandwidth": "peak DRAM bandwidth, bytes/s (NaN when unknown)",
    "memory_bandwidth_source": "trace | table | unknown",
    "pinned_gbps": "rate a large pinned host<->device copy reaches, GB/s (= bytes/ns): measured on the trace's "
    "own pinned copies, else the GPU table, else assumed PCIe 3 x16",
    "pinned_source": "where pinned_gbps came from, as a message prints it",
    "pcie_gbps": "host link rate per direction, GB/s, theoretical (NaN when unknown)",
    "nvlink_gbps": "NVLink rate per direction over all links, GB/s (NaN: none or unknown)",
    "link_source": "where pcie_gbps/nvlink_gbps came from",
    **{col: f"dense peak {prec} FLOP/s from the GPU table (NaN: no such path or unknown)"
       for col, prec in _PEAKS.items()},
    "peak_source": "where the peaks came from",
    "tensor_speedup": "best Tensor Core matrix peak (TF32, bf16 or fp16) over the fp32 SIMT peak: what moving "
    "fp32 GEMMs to Tensor Cores can gain at most on this GPU (NaN when unknown)",
    "tensor_path": "the precision of that best peak: 'bf16', 'fp16' or 'TF32' ('' when unknown)",
}
#: the tensor paths an fp32 GEMM can move to, in the order the fix suggests them
_TENSOR_PATHS = (("tf32_tensor", "TF32"), ("bf16_tensor", "bf16"), ("fp16_tensor", "fp16"))


def device_hardware(store: FactStore) -> dict[int, DeviceHardware]:
    """:func:`analyzer.hardware.trace_hardware` of the store's trace, computed once per store."""
    return store.memo("trace_hardware", lambda: trace_hardware(store.trace))


def _value(v: float | None) -> float:
    return float(v) if v is not None and v > 0 else np.nan


@fact("hardware", columns=HARDWARE_COLUMNS, scope_keys=("device",))
def hardware(ctx: FactContext) -> pd.DataFrame:
    """One row per device of the trace: its hardware constants and the source of each."""
    rows = []
    for dev, hw in device_hardware(ctx.store).items():
        pinned = pinned_copy_rate(hw)
        row = {
            "device": dev, "name": hw.name, "gpu": hw.spec.name if hw.spec else "",
            "sm_count": _value(hw.sm_count.value), "sm_count_source": hw.sm_count.source,
            "memory_bandwidth": _value(hw.memory_bandwidth.value),
            "memory_bandwidth_source": hw.memory_bandwidth.source,
            "pinned_gbps": _value(pinned.value) / 1e9, "pinned_source": pinned.detail,
            "pcie_gbps": _value(hw.pcie.value) / 1e9, "nvlink_gbps": _value(hw.nvlink.value) / 1e9,
            "link_source": hw.nvlink.detail if hw.spec else hw.pcie.detail,
            "peak_source": hw.peaks["fp32"].detail,
        }
        for col, prec in _PEAKS.items():
            row[col] = _value(hw.peaks[prec].value)
        fp32 = _value(hw.peaks["fp32"].value)
        best: tuple[float, str] = (np.nan, "")
        for prec, label in _TENSOR_PATHS:  # first of equals wins: TF32 needs no code change, bf16 no scaling
            ratio = _value(hw.peaks[prec].value) / fp32
            if np.isfinite(ratio) and not ratio <= best[0]:
                best = (ratio, label)
        row["tensor_speedup"], row["tensor_path"] = best
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(HARDWARE_COLUMNS))
    return frame.astype({"device": "int64"}) if len(frame) else frame
