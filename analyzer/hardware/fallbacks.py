"""Measured speed-ups of ATen's slow fallback convolution kernels over the layout or backend that
replaces them (``conv_layouts.json``, package data: the output of ``workloads/conv_layouts.py`` as it
ran, with its GPU, torch, cuDNN and date), behind a typed accessor.

The microbenchmark times each op, forward and backward, on the fallback path and on its fix at several
shapes and dtypes, and records which kernels each side ran. A row counts when the fallback kernels ran
on the slow side only. The kernel families a trace shows map onto its cases:

* ``conv_depthwise2d`` / ``conv_depthwise3d``: depthwise convolutions on NCHW (NCDHW) tensors; the
  fix is ``torch.channels_last`` (``channels_last_3d``), where cuDNN's NHWC kernels run. Per direction:
  the forward kernel is the forward op's, ``_backward_`` and ``_grad_weight_`` the backward op's;
* ``im2col``: ``im2col_kernel`` / ``col2im_kernel``, the unfused convolutions (``slow_conv2d``,
  ``slow_conv_dilated2d``, ``slow_conv_transpose2d``) ATen runs when cuDNN is not used; the name does not
  say which op or direction, so every such row is pooled;
* ``vol2col``: ``vol2col_kernel`` / ``col2vol_kernel`` (``slow_conv3d``), pooled likewise.

A factor is the median over the family's rows of that dtype and direction (all dtypes when the table
has none of the trace's); ``share`` is the median share of the slow op's GPU time spent in the
fallback kernels themselves (the rest: the GEMMs between the im2col copies), so the op's time is the
fallback kernels' time over ``share``.

    >>> f = fallback_factor("conv_depthwise2d", "bf16", "backward")
    >>> f is not None and f.speedup > 1 and 0 < f.share <= 1
    True
"""
from __future__ import annotations

import functools
import json
import statistics
from dataclasses import dataclass
from importlib import resources
from typing import Any

#: kernel family (as a trace shows it) -> the microbenchmark's cases it pools
KERNEL_FAMILIES: dict[str, tuple[str, ...]] = {
    "conv_depthwise2d": ("conv_depthwise2d",),
    "conv_depthwise3d": ("conv_depthwise3d",),
    "im2col": ("slow_conv2d", "slow_conv_dilated2d", "slow_conv_transpose2d"),
    "vol2col": ("slow_conv3d",),
}
#: families whose kernel names say the direction (the others pool forward and backward)
DIRECTED = ("conv_depthwise2d", "conv_depthwise3d")


@dataclass(frozen=True)
class FallbackFactor:
    """What the fix bought in the microbenchmark for one kernel family, dtype and direction."""

    family: str
    dtype: str  # the dtype of the rows used ("any": pooled over dtypes)
    direction: str  # "forward", "backward" or "any"
    speedup: float  # median of slow / fixed op time
    share: float  # median share of the slow op's GPU time in the fallback kernels
    low: float  # smallest and largest speed-up of the rows
    high: float
    rows: int
    gpu: str
    date: str

    @property
    def saving_per_ns(self) -> float:
        """Time the fix saves per nanosecond of fallback kernel: (1 - 1 / speedup) / share; 0 where the
        "fix" measured slower (depthwise 3-d convolutions in channels_last_3d, fp32 depthwise backward)."""
        if self.speedup <= 1 or self.share <= 0:
            return 0.0
        return (1.0 - 1.0 / self.speedup) / self.share

    def basis(self) -> str:
        """How a message names the measurement."""
        n = f"{self.rows} shape{'s' if self.rows != 1 else ''}"
        d = "" if self.dtype == "any" else f" {self.dtype}"
        return (f"median of {n}{d}, {self.low:.1f}-{self.high:.1f}x, measured on {self.gpu} {self.date} "
                "(workloads/conv_layouts.py)")


@functools.lru_cache(maxsize=1)
def fallback_table() -> dict[str, Any]:
    """The committed microbenchmark output (``conv_layouts.json``)."""
    text = resources.files("analyzer.hardware").joinpath("conv_layouts.json").read_text()
    table = json.loads(text)
    if not isinstance(table, dict) or not isinstance(table.get("rows"), list):
        raise ValueError("analyzer/hardware/conv_layouts.json: no rows")
    return table


def _usable(row: dict[str, Any]) -> bool:
    return (bool(row.get("fallback_on_slow")) and not row.get("fallback_on_fixed")
            and bool(row.get("speedup")) and bool(row.get("fallback_share")))


@functools.lru_cache(maxsize=None)
def fallback_factor(family: str, dtype: str, direction: str) -> FallbackFactor | None:
    """The measured factor for a kernel family (:data:`KERNEL_FAMILIES`), dtype (bf16, fp16, fp32,
    fp64) and direction (forward/backward); None when the table has no usable row of the family."""
    cases = KERNEL_FAMILIES.get(family)
    if cases is None:
        return None
    table = fallback_table()
    rows = [r for r in table["rows"] if r.get("family") in cases and _usable(r)]
    used_dir = direction if family in DIRECTED else "any"
    if used_dir != "any":
        rows = [r for r in rows if r.get("direction") == used_dir]
    same = [r for r in rows if r.get("dtype") == dtype]
    used_dtype = dtype if same else "any"
    rows = same or rows
    if not rows:
        return None
    speed = [float(r["speedup"]) for r in rows]
    return FallbackFactor(family, used_dtype, used_dir, float(statistics.median(speed)),
                          float(statistics.median(float(r["fallback_share"]) for r in rows)),
                          min(speed), max(speed), len(rows), str(table.get("gpu", "?")),
                          str(table.get("date", "?")))
