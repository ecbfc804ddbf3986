"""Joining profiled launches to the nsys timeline's kernels: :func:`join_ncu`."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyzer.loading.ncu.build import as_text
from analyzer.loading.ncu.model import NCU_JOIN_COLUMNS, NcuReport
from analyzer.loading.ncu.names import kernel_base_name, normalize_kernel_name

if TYPE_CHECKING:
    from analyzer.loading.model import Trace


# --------------------------------------------------------------------------------------------------
# Joining to the nsys timeline
# --------------------------------------------------------------------------------------------------

_LEVELS = (  # (label, name column, with grid/block, with NVTX path)
    ("name+grid+block+nvtx", "full", True, True),
    ("name+grid+block", "full", True, False),
    ("base+grid+block", "base", True, False),
    ("base", "base", False, False),
)
DIMS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


def join_ncu(
    report: NcuReport, trace: Trace, *, window: tuple[int, int] | None = None
) -> NcuReport:
    """Match profiled launches to nsys kernels and add :data:`NCU_JOIN_COLUMNS` to ``report.kernels``.

    The k-th profiled launch of a (name, grid, block) key is matched to the k-th nsys launch (by start
    time) with the same key: ``ncu -k/-c`` profile the first N launches, so order within a key is the
    only link between two separate runs. Keys are tried from strict to loose: the normalized demangled
    name with grid, block and the NVTX path ncu recorded (``--nvtx``: a launch profiled under
    ``--nvtx-include step_0/`` joins the nsys launch inside ``step_0``, not the first one of the run), the
    same without the NVTX path, then the bare function name with grid and block, then the bare name alone;
    each level sees only what earlier levels left unmatched. Unmatched launches stay, with
    ``matched=False`` and a reason.

    ``matched_ns``/``timeline_count``/``gpu_time_share`` describe the matched configuration (the key of
    the level that matched) over the kernels that start inside ``window`` (trace-relative ns, the whole
    trace when None).
    """
    k = report.kernels.drop(columns=[c for c in NCU_JOIN_COLUMNS if c in report.kernels.columns])
    k = k.reset_index(drop=True)
    nsys = trace.kernels
    out = pd.DataFrame(
        {
            "matched": False,
            "match_key": "",
            "unmatched_reason": "",
            "nsys_index": -1,
            "nvtx_path": "",
            "nvtx_range": "",
            "matched_ns": np.nan,
            "timeline_count": 0,
            "gpu_time_share": np.nan,
        },
        index=k.index,
    )
    if nsys is None or len(nsys) == 0:
        out["unmatched_reason"] = "the nsys trace has no kernels"
        return replace(report, kernels=pd.concat([k, out], axis=1), joined=True)

    ns = pd.DataFrame(index=nsys.index)
    names = nsys["name"].astype(str).where(nsys["name"].astype(str) != "", nsys["short_name"].astype(str))
    uniq = names.unique()
    ns["full"] = names.map(dict(zip(uniq, (normalize_kernel_name(n) for n in uniq))))
    ns["base"] = names.map(dict(zip(uniq, (kernel_base_name(n) for n in uniq))))
    for d in DIMS:
        ns[d] = pd.to_numeric(nsys[d], errors="coerce").fillna(-1).astype("int64")
    ns["nvtx"] = as_text(nsys["nvtx_path"]) if "nvtx_path" in nsys.columns else ""
    ns["start"] = nsys["start"].to_numpy()
    ns["duration"] = nsys["duration"].to_numpy()
    ns = ns.sort_values("start", kind="stable")
    if window is not None:
        in_window = (ns["start"] >= window[0]) & (ns["start"] < window[1])
    else:
        in_window = pd.Series(True, index=ns.index)
    total_ns = float(ns.loc[in_window, "duration"].sum())

    kk = pd.DataFrame(index=k.index)
    kuniq = k["name"].unique()
    kk["full"] = k["name"].map(dict(zip(kuniq, (normalize_kernel_name(n) for n in kuniq))))
    kk["base"] = k["name"].map(dict(zip(kuniq, (kernel_base_name(n) for n in kuniq))))
    for d in DIMS:
        kk[d] = k[d]
    kk["nvtx"] = as_text(k["ncu_nvtx_path"]) if "ncu_nvtx_path" in k.columns else ""
    kk["id"] = k["id"]
    kk = kk.sort_values("id", kind="stable")

    taken = pd.Series(False, index=ns.index)
    for label, name_col, with_dims, with_nvtx in _LEVELS:
        config = [name_col] + (list(DIMS) if with_dims else [])
        key = config + (["nvtx"] if with_nvtx else [])
        left = kk[~out.loc[kk.index, "matched"]]
        if with_nvtx:
            left = left[left["nvtx"] != ""]
        if left.empty:
            continue
        right = ns[~taken]
        lk = left[key].assign(rank=left.groupby(key, sort=False).cumcount(), _k=left.index)
        rk = right[key].assign(rank=right.groupby(key, sort=False).cumcount(), _n=right.index)
        pairs = lk.merge(rk, on=key + ["rank"], how="inner")
        if pairs.empty:
            continue
        stats = ns[in_window].groupby(config, sort=False)["duration"].agg(["sum", "count"]).reset_index()
        pairs = pairs.merge(stats, on=config, how="left")
        idx = pairs["_k"].to_numpy()
        out.loc[idx, "matched"] = True
        out.loc[idx, "match_key"] = label
        out.loc[idx, "nsys_index"] = pairs["_n"].to_numpy()
        out.loc[idx, "matched_ns"] = pairs["sum"].fillna(0).to_numpy(dtype="float64")
        out.loc[idx, "timeline_count"] = pairs["count"].fillna(0).to_numpy(dtype="int64")
        taken.loc[pairs["_n"].to_numpy()] = True

    matched_idx = out.index[out["matched"]]
    src = out.loc[matched_idx, "nsys_index"].to_numpy()
    for col in ("nvtx_path", "nvtx_range"):
        if col in nsys.columns and len(src):
            out.loc[matched_idx, col] = nsys[col].reindex(src).fillna("").astype(str).to_numpy()
    out["gpu_time_share"] = (out["matched_ns"] / total_ns) if total_ns > 0 else np.nan
    out["nsys_index"] = out["nsys_index"].astype("int64")
    out["timeline_count"] = out["timeline_count"].astype("int64")
    out["matched"] = out["matched"].astype(bool)

    un = ~out["matched"]
    if un.any():
        bases_present = set(ns["base"])
        configs_present = set(map(tuple, ns[["base", *DIMS]].drop_duplicates().to_numpy().tolist()))
        base = kk.loc[un[un].index, "base"]
        cfg = pd.Series(
            list(map(tuple, kk.loc[un[un].index, ["base", *DIMS]].to_numpy().tolist())), index=base.index
        )
        reason = np.where(
            ~base.isin(bases_present),
            "no kernel with this name on the nsys timeline",
            np.where(
                cfg.isin(configs_present),
                "more profiled launches of this configuration than nsys launches",
                "more profiled launches of this name than nsys launches",
            ),
        )
        out.loc[base.index, "unmatched_reason"] = reason
    joined = pd.concat([k, out], axis=1)
    return replace(report, kernels=joined, joined=True)


