"""An Nsight Compute report on its own (no nsys timeline): :func:`profiled_totals`, :func:`ncu_trace`."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analyzer.loading.ncu.build import as_text, int_or
from analyzer.loading.ncu.join import DIMS
from analyzer.loading.ncu.model import NCU_JOIN_COLUMNS, NcuReport

if TYPE_CHECKING:
    from analyzer.loading.model import Trace


# --------------------------------------------------------------------------------------------------
# An Nsight Compute report on its own (no nsys timeline)
# --------------------------------------------------------------------------------------------------

NO_TIMELINE_REASON = "no timeline: an Nsight Compute report analyzed on its own"


def profiled_totals(report: NcuReport) -> NcuReport:
    """The report with :data:`NCU_JOIN_COLUMNS` filled from the profiled launches themselves, for an ncu
    report analyzed without an nsys trace: ``matched_ns``/``timeline_count`` are the summed ncu durations
    and the count of the profiled launches of the same configuration (name, grid, block), ``nvtx_path`` the
    path ncu recorded (``--nvtx``), ``matched`` False with :data:`NO_TIMELINE_REASON`. Rules then estimate
    from what was profiled, and say so."""
    k = report.kernels.drop(columns=[c for c in NCU_JOIN_COLUMNS if c in report.kernels.columns])
    k = k.reset_index(drop=True)
    duration = pd.to_numeric(k["duration_ns"], errors="coerce").astype("float64")
    config = pd.DataFrame({"name": k["name"].astype(str).to_numpy()}
                          | {d: pd.to_numeric(k[d], errors="coerce").fillna(-1).to_numpy() for d in DIMS})
    codes = config.groupby(list(config.columns), sort=False).ngroup().to_numpy() if len(k) else np.zeros(0, int)
    groups = pd.Series(duration.to_numpy(), index=k.index).groupby(codes, sort=False)
    total = float(np.nansum(duration.to_numpy())) if len(k) else 0.0
    nvtx = as_text(k["ncu_nvtx_path"]) if "ncu_nvtx_path" in k.columns else pd.Series("", index=k.index)
    out = pd.DataFrame({
        "matched": False,
        "match_key": "",
        "unmatched_reason": NO_TIMELINE_REASON,
        "nsys_index": -1,
        "nvtx_path": nvtx.to_numpy(dtype=object),
        "nvtx_range": [p.rsplit("/", 1)[-1] if p else "" for p in nvtx],
        "matched_ns": groups.transform(lambda s: s.sum(min_count=1)).to_numpy(dtype="float64")
        if len(k) else np.zeros(0),
        "timeline_count": groups.transform("size").to_numpy(dtype="int64") if len(k) else np.zeros(0, "int64"),
    }, index=k.index)
    out["gpu_time_share"] = out["matched_ns"] / total if total > 0 else np.nan
    out["matched"] = out["matched"].astype(bool)
    out["nsys_index"] = out["nsys_index"].astype("int64")
    return replace(report, kernels=pd.concat([k, out], axis=1), joined=True)


def ncu_trace(report: NcuReport) -> Trace:
    """A trace model for an Nsight Compute report analyzed on its own: no timeline frames (every
    timeline fact is empty), the GPUs ncu recorded (name, SM count, compute capability), the profiled
    time as its duration, and the report (with :func:`profiled_totals`) as ``Trace.ncu``;
    ``Trace.ncu_only`` marks it."""
    from analyzer.loading.model import GPU_COLUMNS, Trace, TraceInfo, empty_frame

    report = profiled_totals(report)
    k = report.kernels
    duration = pd.to_numeric(k["duration_ns"], errors="coerce").fillna(0)
    gpus = empty_frame(GPU_COLUMNS)
    if len(k):
        rows = []
        devices = int_or(k["device"], 0).clip(lower=0)
        for dev in sorted(set(devices.tolist())):
            sel = k[devices == dev]
            rec: dict[str, Any] = {c: 0 for c in GPU_COLUMNS}
            rec["device"] = int(dev)
            names = [n for n in as_text(sel["device_name"]).tolist() if n]
            rec["name"] = names[0] if names else ""
            sms = pd.to_numeric(sel["sm_count"], errors="coerce").dropna()
            rec["sm_count"] = int(sms.iloc[0]) if len(sms) else 0
            cc = [c for c in as_text(sel["cc"]).tolist() if c]
            if cc and re.fullmatch(r"\d+\.\d+", cc[0]):
                major, minor = cc[0].split(".")
                rec["compute_major"], rec["compute_minor"] = int(major), int(minor)
            bw = pd.to_numeric(sel["peak_bandwidth"], errors="coerce").dropna()
            rec["memory_bandwidth"] = int(bw.iloc[0]) if len(bw) and (sel["peak_source"] != "").any() else 0
            rows.append(rec)
        gpus = pd.DataFrame.from_records(rows, columns=list(GPU_COLUMNS))
        gpus = gpus.astype({c: "int64" for c in GPU_COLUMNS if c != "name"})
        gpus["name"] = gpus["name"].astype(object)
    info = TraceInfo(
        path=report.source[0] if report.source else Path("ncu"),
        source_format=report.format,
        nsys_version=None,
        schema_version=None,
        origin_ns=0,
        duration_ns=int(duration.sum()),
        export_schema="ncu",
        platform="cuda",  # Nsight Compute profiles NVIDIA GPUs only
    )
    return replace(Trace.from_frames(info, gpus=gpus), ncu=report, ncu_only=True)
