"""GPU metrics sampled by Nsight Systems (``--gpu-metrics-devices``): how much of the GPU the kernels
really used, measured rather than inferred from launch sizes.

The samples (``trace.gpu_metrics``, percent of peak per sampling period) are averaged over the analysis
window. A throughput metric is zero while the GPU is idle, so its mean over the kernels' own time is
``mean over the window x window / kernel time``: ``sm_active_busy`` is the share of SMs that were
active while a kernel ran, ``tensor_active_gemm`` the tensor-pipe activity while a GEMM ran. Both are
capped at 100 (sampling jitter) and NaN without samples.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts._util import text, union_intervals
from analyzer.facts.registry import FactContext, fact

_METRICS = ("sm_active", "sm_issue", "tensor_active", "warps_in_flight", "dram_read", "dram_write",
            "pcie_rx", "pcie_tx", "nvlink_rx", "nvlink_tx", "gr_active")

SM_ACTIVITY_COLUMNS = {
    "device": "GPU device id",
    "samples": "metric samples inside the window (per metric)",
    "period_ns": "median time between two samples (ns)",
    "window_ns": "window length (ns)",
    "kernel_ns": "time at least one kernel ran (ns, union)",
    "gemm_ns": "time at least one GEMM kernel ran (ns, union)",
    "kernel_share": "kernel_ns / window_ns",
    "gemm_share": "gemm_ns / kernel_ns",
    "sm_active_busy": "SMs active while kernels ran (% of SMs, 0..100)",
    "tensor_active_gemm": "tensor pipes active while GEMMs ran (% of peak, 0..100)",
    **{m: f"{m.replace('_', ' ')} averaged over the window (% of peak)" for m in _METRICS},
}


def _kernel_union(kernels: pd.DataFrame, window: object, device: int, mask: np.ndarray | None = None) -> int:
    k = kernels
    sel = k["device"].to_numpy() == device
    if mask is not None:
        sel &= mask
    s = np.maximum(k["start"].to_numpy()[sel], window.start_ns)  # type: ignore[attr-defined]
    e = np.minimum(k["end"].to_numpy()[sel], window.end_ns)  # type: ignore[attr-defined]
    keep = e > s
    if not keep.any():
        return 0
    u = union_intervals(s[keep], e[keep])
    return int((u.end - u.start).sum())


@fact("sm_activity", columns=SM_ACTIVITY_COLUMNS, requires=("kernel_categories",), scope_keys=("device",))
def sm_activity(ctx: FactContext) -> pd.DataFrame:
    """Per device with GPU metrics: SM and tensor-pipe activity over the window and during kernel and
    GEMM time, plus DRAM, PCIe and NVLink throughput (percent of peak). Empty without GPU metrics."""
    gm = ctx.trace.gpu_metrics
    w = ctx.window
    if gm.empty:
        return empty_typed((c, "float64") for c in SM_ACTIVITY_COLUMNS)
    st = gm["start"].to_numpy()
    gm = gm.loc[(st >= w.start_ns) & (st < w.end_ns)]
    kernels = ctx.get("kernel_categories")
    is_gemm = (text(kernels["category"]) == "gemm").to_numpy() if len(kernels) else np.empty(0, dtype=bool)
    rows = []
    for device in sorted(int(d) for d in pd.unique(gm["device"])):
        mine = gm.loc[gm["device"].to_numpy() == device]
        means = mine.groupby(text(mine["metric"]).to_numpy())["value"].mean()
        first = mine.loc[text(mine["metric"]) == (means.index[0] if len(means) else "")]
        times = np.sort(first["start"].to_numpy())
        period = float(np.median(np.diff(times))) if len(times) > 1 else float("nan")
        kernel_ns = _kernel_union(kernels, w, device) if len(kernels) else 0
        gemm_ns = _kernel_union(kernels, w, device, is_gemm) if len(kernels) else 0
        window_ns = max(1, w.duration_ns)
        row = {"device": device, "samples": len(times), "period_ns": period, "window_ns": window_ns,
               "kernel_ns": kernel_ns, "gemm_ns": gemm_ns,
               "kernel_share": kernel_ns / window_ns, "gemm_share": gemm_ns / kernel_ns if kernel_ns else 0.0}
        for m in _METRICS:
            row[m] = float(means.get(m, np.nan))
        row["sm_active_busy"] = _during(row["sm_active"], window_ns, kernel_ns)
        row["tensor_active_gemm"] = _during(row["tensor_active"], window_ns, gemm_ns)
        rows.append(row)
    out = pd.DataFrame(rows, columns=list(SM_ACTIVITY_COLUMNS))
    return out


def _during(mean_pct: float, window_ns: int, busy_ns: int) -> float:
    if not busy_ns or np.isnan(mean_pct):
        return float("nan")
    return float(min(100.0, mean_pct * window_ns / busy_ns))


@fact(
    "metric_bins",
    columns={
        "device": "GPU device id", "bin": "utilization bin index", "bin_start": "bin start (ns)",
        "bin_end": "bin end (ns)", "sm_active": "SMs active in the bin (% of SMs, NaN: no sample)",
        "tensor_active": "tensor pipes active in the bin (% of peak, NaN: no sample)",
    },
    requires=("utilization",),
    scope_keys=("device",),
)
def metric_bins(ctx: FactContext) -> pd.DataFrame:
    """SM and tensor activity on the bins of the ``utilization`` fact (for the utilization chart)."""
    util = ctx.get("utilization")
    cols = ["device", "bin", "bin_start", "bin_end", "sm_active", "tensor_active"]
    gm = ctx.trace.gpu_metrics
    if gm.empty or util.empty:
        return empty_typed((c, "float64") for c in cols)
    frames = []
    metric = text(gm["metric"]).to_numpy()
    for device, bins in util.groupby("device", sort=True):
        edges = np.r_[bins["bin_start"].to_numpy(), bins["bin_end"].to_numpy()[-1:]]
        out = bins[["device", "bin", "bin_start", "bin_end"]].reset_index(drop=True)
        for m in ("sm_active", "tensor_active"):
            sel = (gm["device"].to_numpy() == device) & (metric == m)
            t, v = gm["start"].to_numpy()[sel], gm["value"].to_numpy()[sel]
            idx = np.searchsorted(edges, t, side="right") - 1
            ok = (idx >= 0) & (idx < len(out))
            sums = np.bincount(idx[ok], weights=v[ok], minlength=len(out))
            counts = np.bincount(idx[ok], minlength=len(out))
            with np.errstate(invalid="ignore", divide="ignore"):
                out[m] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        frames.append(out)
    return pd.concat(frames, ignore_index=True)[cols]
