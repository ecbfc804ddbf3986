"""Normalization: long metric rows -> the kernels, stalls and rules frames of an :class:`NcuReport`."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyzer.errors import InputError
from analyzer.loading.ncu.model import NCU_KERNEL_COLUMNS, NCU_RULE_COLUMNS, NCU_STALL_COLUMNS, NcuReport, empty_ncu_frame
from analyzer.loading.ncu.names import kernel_base_name
from analyzer.loading.ncu.units import parse_values


# --------------------------------------------------------------------------------------------------
# Normalization: long metric rows -> the kernels frame
# --------------------------------------------------------------------------------------------------

# canonical column -> candidates, best first. A candidate is a raw metric name, or
# "Display Name|base unit" for details-page metrics (the unit disambiguates e.g. "Memory Throughput",
# which is a % in Speed Of Light and bytes/s in Memory Workload Analysis).
_CANON: dict[str, tuple[str, ...]] = {
    "duration": ("gpu__time_duration.sum", "gpu__time_duration.avg", "Duration|second"),
    "sm_frequency_hz": (
        "sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second",
        "gpc__cycles_elapsed.avg.per_second", "SM Frequency|hz",
    ),
    "sm_count": ("device__attribute_multiprocessor_count", "launch__sm_count", "# SMs|SM", "# SMs|"),
    "sm_throughput_pct": (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed", "Compute (SM) Throughput|%", "SOL SM|%",
    ),
    "memory_throughput_pct": (
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", "Memory Throughput|%",
        "SOL Memory|%",
    ),
    "dram_throughput_pct": (
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput|%", "SOL FB|%",
        "SOL DRAM|%",
    ),
    "achieved_occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", "Achieved Occupancy|%"),
    "theoretical_occupancy": ("sm__maximum_warps_per_active_cycle_pct", "Theoretical Occupancy|%"),
    "occupancy_limit_registers": ("launch__occupancy_limit_registers", "Block Limit Registers|block"),
    "occupancy_limit_shared_mem": ("launch__occupancy_limit_shared_mem", "Block Limit Shared Mem|block"),
    "occupancy_limit_warps": ("launch__occupancy_limit_warps", "Block Limit Warps|block"),
    "occupancy_limit_blocks": ("launch__occupancy_limit_blocks", "Block Limit SM|block"),
    "registers_per_thread": ("launch__registers_per_thread", "Registers Per Thread|register/thread"),
    "static_smem": (
        "launch__shared_mem_per_block_static", "Static Shared Memory Per Block|byte/block",
    ),
    "dynamic_smem": (
        "launch__shared_mem_per_block_dynamic", "Dynamic Shared Memory Per Block|byte/block",
    ),
    "waves_per_sm": ("launch__waves_per_multiprocessor", "Waves Per SM|"),
    "grid_x": ("launch__grid_dim_x",),
    "grid_y": ("launch__grid_dim_y",),
    "grid_z": ("launch__grid_dim_z",),
    "block_x": ("launch__block_dim_x",),
    "block_y": ("launch__block_dim_y",),
    "block_z": ("launch__block_dim_z",),
    "grid_size_metric": ("launch__grid_size", "Grid Size|"),
    "block_size_metric": ("launch__block_size", "Block Size|"),
    "dram_bytes": ("dram__bytes.sum",),
    "dram_bytes_read": ("dram__bytes_read.sum",),
    "dram_bytes_write": ("dram__bytes_write.sum",),
    "dram_bandwidth": ("dram__bytes.sum.per_second", "Memory Throughput|byte/second"),
    "peak_dram_per_cycle": ("dram__bytes.sum.peak_sustained",),
    "dram_cycles_per_second": ("dram__cycles_elapsed.avg.per_second",),
    "global_ld_sectors": ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",),
    "global_ld_requests": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",),
    "l2_sectors_global": ("memory_l2_theoretical_sectors_global",),
    "l2_sectors_global_ideal": ("memory_l2_theoretical_sectors_global_ideal",),
    "l2_sectors_global_excessive": (
        "derived__memory_l2_theoretical_sectors_global_excessive", "memory_l2_theoretical_sectors_global_excessive",
    ),
    "bank_conflicts_ld": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",),
    "bank_conflicts_st": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",),
    "bank_conflicts_all": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",),
    "wavefronts_ld": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",),
    "wavefronts_st": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",),
    "wavefronts_all": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",),
    "shared_pipe_pct": ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",),
    "cc_major": ("device__attribute_compute_capability_major",),
    "cc_minor": ("device__attribute_compute_capability_minor",),
    "clock_rate_khz": ("device__attribute_clock_rate",),
    "memory_clock_khz": ("device__attribute_memory_clock_rate",),
    "memory_bus_bits": ("device__attribute_global_memory_bus_width",),
    "device_id": ("launch__device_id",),
    "stream_id": ("launch__stream_id",),
    "context_id": ("launch__context_id",),
}
_PRECISIONS = (("fp16", "h"), ("fp32", "f"), ("fp64", "d"))
_FLOP_WEIGHTS = {"fp16": (2, 2, 4), "fp32": (1, 1, 2), "fp64": (1, 1, 2)}  # add, mul, fma
for _p, _l in _PRECISIONS:
    for _op in ("add", "mul", "fma"):
        for _unit in ("sm", "smsp"):
            _base = f"{_unit}__sass_thread_inst_executed_op_{_l}{_op}_pred_on.sum"
            _CANON.setdefault(f"{_p}_{_op}_count", ())
            _CANON[f"{_p}_{_op}_count"] += (_base,)
            _CANON.setdefault(f"{_p}_{_op}_per_cycle", ())
            _CANON[f"{_p}_{_op}_per_cycle"] += (_base + ".per_cycle_elapsed",)
    _CANON[f"{_p}_fma_peak_per_cycle"] = (
        f"sm__sass_thread_inst_executed_op_{_l}fma_pred_on.sum.peak_sustained",
        f"smsp__sass_thread_inst_executed_op_{_l}fma_pred_on.sum.peak_sustained",
    )
_CANON["cycles_per_second_smsp"] = ("smsp__cycles_elapsed.avg.per_second", "sm__cycles_elapsed.avg.per_second")

_CANDIDATES = pd.DataFrame(
    [(cand, canon, prio) for canon, cands in _CANON.items() for prio, cand in enumerate(cands)],
    columns=["lookup", "canon", "prio"],
)

# FP32 lanes per SM by compute capability, for the device-attribute peak fallback (fp32 FMA = 2 FLOP).
_FP32_LANES_PER_SM = {
    (6, 0): 64, (6, 1): 128, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 7): 128,
    (8, 9): 128, (9, 0): 128, (10, 0): 128, (10, 3): 128, (12, 0): 128, (12, 1): 128,
}

_STALL_RE = re.compile(
    r"^smsp__(?P<family>average_warps_issue_stalled|average_warp_latency_issue_stalled|pcsamp_warps_issue_stalled|"
    r"warp_issue_stalled|warps_issue_stalled)_(?P<reason>[a-z0-9_]+?)"
    r"(?P<suffix>_per_issue_active|_per_warp_active|_not_issued)?(?:\.(?P<roll>ratio|pct|sum|avg))?$"
)
_WARP_LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"
# Preferred stall metric families (first present wins per launch), with the rollup to use.
_STALL_FAMILIES = (
    ("average_warps_issue_stalled", "_per_issue_active", "ratio"),
    ("average_warp_latency_issue_stalled", "", "ratio"),
    ("pcsamp_warps_issue_stalled", "", None),
    ("warp_issue_stalled", "_per_warp_active", "pct"),
    ("warps_issue_stalled", "", "avg"),
)


def _dims(text: pd.Series) -> pd.DataFrame:
    """``"(32, 4, 1)"`` strings -> three int columns (-1 where unparseable)."""
    parts = text.fillna("").astype(str).str.extract(r"^\s*\(?\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)?\s*$")
    return parts.apply(pd.to_numeric, errors="coerce")


def _ncu_ids(text: pd.Series) -> pd.Series:
    """ncu's ``ID`` column as float ids (``1,234`` grouping allowed); NaN where the cell is no whole number
    that int64 holds exactly (text, ``1e400``, ``inf``, fractions)."""
    ids = pd.to_numeric(text.astype(str).str.replace(",", "", regex=False), errors="coerce").astype("float64")
    whole = np.isfinite(ids) & (ids == np.floor(ids)) & (ids.abs() <= 2.0**53)
    return ids.where(whole)


def build_ncu_report(path: Path, fmt: str, ident: pd.DataFrame, long: pd.DataFrame, rules: pd.DataFrame) -> NcuReport:
    ident = ident.fillna("").copy()
    ids = _ncu_ids(ident["ncu_id"])
    if ids.isna().any():
        bad = ident.loc[ids.isna(), "ncu_id"].iloc[0]
        raise InputError(path, f"ncu export has an ID that is not a kernel number ({bad!r}); the file looks corrupt")
    ident["id"] = ids.astype("int64")
    ident = ident.drop_duplicates("id").sort_values("id", kind="stable").reset_index(drop=True)

    long = long.copy()
    long["id"] = _ncu_ids(long["ncu_id"])
    long = long[long["id"].notna()]
    long["id"] = long["id"].astype("int64")
    value, base = parse_values(long["value"], long["unit"])
    long["value"] = value
    long["base_unit"] = base

    numeric = long[long["value"].notna()]
    dedup = numeric.drop_duplicates(["id", "key"], keep="first")
    metrics = dedup.pivot(index="id", columns="key", values="value").reindex(ident["id"])
    metrics.columns.name = None
    units = dict(zip(dedup["key"], dedup["base_unit"]))

    # Canonical values: match raw names by key, display names by "metric|unit".
    # as object text: pandas 3.0 refused str + object ("operation 'add' not supported") on a truncated export
    numeric = numeric.assign(display=as_text(numeric["metric"]) + "|" + as_text(numeric["base_unit"]))
    hits = pd.concat(
        [
            numeric.merge(_CANDIDATES, left_on="key", right_on="lookup"),
            numeric.merge(_CANDIDATES, left_on="display", right_on="lookup"),
        ],
        ignore_index=True,
    )
    hits = hits.sort_values(["id", "canon", "prio"], kind="stable").drop_duplicates(["id", "canon"])
    canon = hits.pivot(index="id", columns="canon", values="value").reindex(ident["id"])
    canon = canon.reindex(columns=list(_CANON)).reset_index(drop=True)

    stalls = _stalls(long)
    kernels = _kernels(ident, canon, stalls, path)
    rules = _rules_frame(rules, ident)
    stalls = stalls.reset_index(drop=True)
    return NcuReport(
        source=(path,), format=fmt, kernels=kernels, metrics=metrics, rules=rules, stalls=stalls, units=units
    )


def as_text(series: pd.Series) -> pd.Series:
    """Object-dtype text with missing values as ``""`` (whatever dtype ``series`` had)."""
    return series.astype(object).where(series.notna(), "").astype(str).astype(object)


def int_or(series: pd.Series, default: int = -1) -> pd.Series:
    """Whole numbers as int64; ``default`` for text, NaN, infinities (``1e400``) and values int64 cannot hold."""
    values = pd.to_numeric(series, errors="coerce").astype("float64")
    fits = np.isfinite(values) & (values.abs() < 2.0**62)
    return values.where(fits, default).round().astype("int64")


def _kernels(ident: pd.DataFrame, c: pd.DataFrame, stalls: pd.DataFrame, path: Path) -> pd.DataFrame:
    k = pd.DataFrame(index=ident.index)
    k["id"] = ident["id"]
    k["ncu_id"] = ident["id"]
    k["source"] = path.name
    k["name"] = ident["name"].astype(str)
    k["short_name"] = k["name"].map({n: kernel_base_name(n) for n in k["name"].unique()})
    k["mangled"] = ident["mangled"].astype(str) if "mangled" in ident else ""
    k["process_id"] = int_or(ident["process_id"])
    k["process_name"] = ident["process_name"].astype(str)
    k["context"] = int_or(ident["context"].where(ident["context"] != "", c["context_id"]))
    k["stream"] = int_or(ident["stream"].where(ident["stream"] != "", c["stream_id"]))
    k["device"] = int_or(ident["device"].where(ident["device"] != "", c["device_id"]))
    k["device_name"] = ident["device_name"].astype(str) if "device_name" in ident else ""
    # whole numbers only: a damaged attribute (9.5, 1e400) cannot be cast to Int64 ("non-equivalent object")
    cc_major, cc_minor = int_or(c["cc_major"]), int_or(c["cc_minor"])
    cc_attr = (cc_major.astype(str) + "." + cc_minor.astype(str)).astype(object)
    k["cc"] = ident["cc"].astype(str).where(ident["cc"].astype(str) != "",
                                            cc_attr.where((cc_major >= 0) & (cc_minor >= 0), ""))
    stacks = ident["nvtx_stack"].astype(str) if "nvtx_stack" in ident else pd.Series("", index=k.index)
    k["ncu_nvtx_path"] = stacks.map({t: _nvtx_path(t) for t in stacks.unique()}).astype(object)

    grid = _dims(ident["grid_dims"])
    block = _dims(ident["block_dims"])
    for i, axis in enumerate("xyz"):
        k[f"grid_{axis}"] = int_or(grid[i].fillna(c[f"grid_{axis}"]))
        k[f"block_{axis}"] = int_or(block[i].fillna(c[f"block_{axis}"]))
    have_grid = (k[["grid_x", "grid_y", "grid_z"]] >= 0).all(axis=1)
    have_block = (k[["block_x", "block_y", "block_z"]] >= 0).all(axis=1)
    k["block_size"] = (k["block_x"] * k["block_y"] * k["block_z"]).where(have_block, int_or(c["block_size_metric"]))
    k["grid_size"] = (k["grid_x"] * k["grid_y"] * k["grid_z"]).where(have_grid, int_or(c["grid_size_metric"]))

    duration_s = c["duration"]
    k["duration_ns"] = duration_s * 1e9
    clock = c["sm_frequency_hz"].fillna(c["clock_rate_khz"] * 1e3)
    k["sm_frequency_hz"] = clock
    k["sm_count"] = c["sm_count"]
    for col in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "achieved_occupancy",
                "theoretical_occupancy", "occupancy_limit_registers", "occupancy_limit_shared_mem",
                "occupancy_limit_warps", "occupancy_limit_blocks", "registers_per_thread", "static_smem",
                "dynamic_smem", "shared_pipe_pct"):
        k[col] = c[col]
    limit_cols = ["occupancy_limit_registers", "occupancy_limit_shared_mem", "occupancy_limit_warps",
                  "occupancy_limit_blocks"]
    limits = c[limit_cols].astype("float64")
    blocks_per_sm = limits.min(axis=1, skipna=True)
    # Every resource that allows only the fewest blocks limits occupancy (ncu names them all: "limited by the
    # number of required registers, and the required amount of shared memory"); none does when the
    # theoretical occupancy is already the maximum (the real naive-attention softmax: registers and warps
    # both allow 2 blocks of 1024 threads = 100%).
    at_min = limits.eq(blocks_per_sm, axis=0) & limits.notna()
    limiter = pd.Series("", index=k.index, dtype=object)
    for col in limit_cols:
        name = col.removeprefix("occupancy_limit_")
        limiter = limiter.where(~at_min[col], limiter.where(limiter == "", limiter + "+") + name)
    k["occupancy_limiter"] = limiter.where(~(c["theoretical_occupancy"] >= 99.95), "")
    k["smem_per_block"] = c["static_smem"] + c["dynamic_smem"]

    # launch__waves_per_multiprocessor is printed with two decimals (4 blocks on 132 SMs read "0"); the
    # exact value is blocks / (SMs x blocks per SM), which we use whenever the launch limits are known.
    exact = k["grid_size"].where(k["grid_size"] > 0) / (c["sm_count"] * blocks_per_sm.where(blocks_per_sm > 0))
    waves = exact.fillna(c["waves_per_sm"]).astype("float64")
    k["waves_per_sm"] = waves
    few_blocks = (k["grid_size"] > 0) & (k["grid_size"] < c["sm_count"])
    k["small_grid"] = ((waves < 1) | few_blocks).fillna(False).astype(bool)
    frac = waves - np.floor(waves)
    whole = np.isclose(frac, 0.0) | np.isclose(frac, 1.0)
    k["tail_wave_fill_pct"] = np.where(whole, 100.0, frac * 100.0)
    k.loc[waves.isna(), "tail_wave_fill_pct"] = np.nan
    tail = np.where((waves >= 1) & ~whole, (1.0 - frac) / np.ceil(waves) * 100.0, 0.0)
    k["tail_effect_pct"] = pd.Series(tail, index=k.index).where(waves.notna())

    # FLOPs per precision from totals or per-cycle rates times the SM clock, weighted as ncu's roofline
    # weighs them (its derived__..._x2/_x4 metrics): fp32/fp64 add 1, mul 1, fma 2; fp16 SASS instructions
    # are 2-wide (HADD2/HMUL2/HFMA2), so 2, 2, 4.
    smsp_clock = c["cycles_per_second_smsp"].fillna(clock)
    flops_by_p = {}
    for p, _ in _PRECISIONS:
        w = _FLOP_WEIGHTS[p]
        count = (w[0] * c[f"{p}_add_count"].fillna(0) + w[1] * c[f"{p}_mul_count"].fillna(0)
                 + w[2] * c[f"{p}_fma_count"].fillna(0))
        has_count = c[[f"{p}_{op}_count" for op in ("add", "mul", "fma")]].notna().any(axis=1)
        rate = (w[0] * c[f"{p}_add_per_cycle"].fillna(0) + w[1] * c[f"{p}_mul_per_cycle"].fillna(0)
                + w[2] * c[f"{p}_fma_per_cycle"].fillna(0)) * smsp_clock
        has_rate = c[[f"{p}_{op}_per_cycle" for op in ("add", "mul", "fma")]].notna().any(axis=1)
        flops_by_p[p] = count.where(has_count, (rate * duration_s).where(has_rate))
    flops = pd.DataFrame(flops_by_p)
    any_flops = flops.notna().any(axis=1)
    dominant = flops.fillna(0).idxmax(axis=1) if len(flops) else pd.Series(dtype="object")
    k["flop_precision"] = dominant.where(any_flops & (flops.fillna(0).max(axis=1) > 0), "")
    # The roofline compares one precision with that precision's peak (ncu: "achieved 14% of this device's
    # FP32 peak" on the real softmax, whose fp16 HFMA2 work is not part of that 14%).
    k["flop_count_all"] = flops.sum(axis=1, min_count=1)
    mine = pd.Series(np.nan, index=k.index)
    for p, _ in _PRECISIONS:
        mine = mine.where(k["flop_precision"] != p, flops[p])
    k["flop_count"] = mine.where(k["flop_precision"] != "", k["flop_count_all"])
    k["achieved_flops"] = k["flop_count"] / duration_s

    rw = c["dram_bytes_read"].add(c["dram_bytes_write"], fill_value=0)
    k["dram_bytes"] = c["dram_bytes"].fillna(rw).fillna(c["dram_bandwidth"] * duration_s)
    k["dram_bandwidth"] = c["dram_bandwidth"].fillna(k["dram_bytes"] / duration_s)
    k["arithmetic_intensity"] = (k["flop_count"] / k["dram_bytes"]).where(k["dram_bytes"] > 0)

    # Peaks: from ncu's peak_sustained metrics where collected, else from device attributes.
    prec = k["flop_precision"].where(k["flop_precision"] != "", "fp32")
    peak_counter = pd.Series(np.nan, index=k.index)
    for p, _ in _PRECISIONS:
        peak_counter = peak_counter.where(prec != p, _FLOP_WEIGHTS[p][2] * c[f"{p}_fma_peak_per_cycle"] * smsp_clock)
    lanes = pd.Series(
        [_FP32_LANES_PER_SM.get((int(a), int(b)), np.nan) if pd.notna(a) and pd.notna(b) else np.nan
         for a, b in _cc_pairs(k["cc"])],
        index=k.index, dtype="float64",
    )
    attr_clock = c["clock_rate_khz"] * 1e3
    peak_attr = (c["sm_count"] * lanes * 2 * attr_clock).where(prec == "fp32")
    bw_counter = c["peak_dram_per_cycle"] * c["dram_cycles_per_second"]
    bw_attr = c["memory_clock_khz"] * 1e3 * 2 * c["memory_bus_bits"] / 8
    k["peak_flops"] = peak_counter.fillna(peak_attr)
    k["peak_bandwidth"] = bw_counter.fillna(bw_attr)
    from_counters = peak_counter.notna() | bw_counter.notna()
    from_attrs = peak_attr.notna() | bw_attr.notna()
    k["peak_source"] = np.where(from_counters, "counters", np.where(from_attrs, "device-attributes", ""))

    if len(stalls):
        top = stalls.dropna(subset=["share"]).sort_values(["id", "share"], ascending=[True, False])
        top = top.drop_duplicates("id").set_index("id")
        k["stall_reason"] = as_text(k["id"].map(top["reason"]))
        k["stall_share"] = k["id"].map(top["share"]).astype("float64")
    else:
        k["stall_reason"] = ""
        k["stall_share"] = np.nan

    k["global_ld_sectors"] = c["global_ld_sectors"]
    k["global_ld_requests"] = c["global_ld_requests"]
    k["sectors_per_request"] = (c["global_ld_sectors"] / c["global_ld_requests"]).where(c["global_ld_requests"] > 0)
    excessive = c["l2_sectors_global_excessive"].fillna(c["l2_sectors_global"] - c["l2_sectors_global_ideal"])
    k["uncoalesced_excess_pct"] = (excessive / c["l2_sectors_global"] * 100).where(c["l2_sectors_global"] > 0)
    # ncu's SharedMemoryConflicts rule reads the load and store counters; the all-ops aggregate also counts
    # other shared traffic (7.1 M "conflicts" against 91 k load + store ones on the real softmax export).
    conflicts = c["bank_conflicts_ld"].add(c["bank_conflicts_st"], fill_value=0).fillna(c["bank_conflicts_all"])
    wavefronts = c["wavefronts_ld"].add(c["wavefronts_st"], fill_value=0).fillna(c["wavefronts_all"])
    k["shared_bank_conflicts"] = conflicts
    k["shared_wavefronts"] = wavefronts
    k["bank_conflict_pct"] = (conflicts / wavefronts * 100).where(wavefronts > 0)
    return k[list(NCU_KERNEL_COLUMNS)].reset_index(drop=True)


_NVTX_QUOTED = re.compile(r'"([^"]*)"')


def _nvtx_path(stack: str) -> str:
    """ncu's NVTX column (``544  "<default domain>:step_0:none:...:step_0"  "<default domain>:attention:..."``:
    a thread id, then one quoted ``Domain:Push/Pop_Range:PL_Type:...:Msg`` entry per open range, outermost
    first) -> ``"step_0/attention"``."""
    names = [q.split(":")[1] for q in _NVTX_QUOTED.findall(str(stack)) if q.count(":") >= 1]
    return "/".join(n for n in names if n)


def _cc_pairs(cc: pd.Series) -> list[tuple[float, float]]:
    parts = cc.astype(str).str.extract(r"^(\d+)\.(\d+)$").apply(pd.to_numeric, errors="coerce")
    return list(zip(parts[0], parts[1]))


def _stalls(long: pd.DataFrame) -> pd.DataFrame:
    """Warp stall rows (one per launch and reason) from whichever stall family each launch has."""
    keys = pd.Series(long["key"].unique())
    parsed = keys.str.extract(_STALL_RE)
    parsed["key"] = keys
    parsed = parsed.dropna(subset=["family"])
    if parsed.empty:
        return empty_ncu_frame(NCU_STALL_COLUMNS)
    parsed = parsed.fillna({"suffix": "", "roll": ""})
    chosen = []
    for prio, (family, suffix, roll) in enumerate(_STALL_FAMILIES):
        sel = parsed[(parsed["family"] == family) & (parsed["suffix"] == suffix)]
        if roll is not None:
            sel = sel[sel["roll"] == roll]
        else:
            sel = sel[sel["roll"] == ""]
        chosen.append(sel.assign(prio=prio))
    table = pd.concat(chosen, ignore_index=True)
    rows = long[["id", "key", "value"]].merge(table[["key", "reason", "prio"]], on="key")
    rows = rows[rows["value"].notna()]
    if rows.empty:
        return empty_ncu_frame(NCU_STALL_COLUMNS)
    best = rows.groupby("id")["prio"].transform("min")
    rows = rows[rows["prio"] == best]
    rows = rows.drop_duplicates(["id", "reason"])
    is_stall = rows["reason"] != "selected"
    # The total includes "selected" (the one cycle a warp issues): ncu's CPIStall rule states a reason's
    # share "of the total average of N cycles between issuing two instructions" that way (real softmax
    # export: not_selected 6.49 of 19.2 cycles = 33.8%, ncu prints 33.8%).
    total = rows["value"].groupby(rows["id"]).transform("sum")
    # ...and where ncu collected it, its denominator exactly: the average warp latency per issued instruction
    # (differs from the sum of the reasons on short kernels: 44.1 vs 37.4 cycles on the real tiny kernels).
    latency = long.loc[long["key"] == _WARP_LATENCY, ["id", "value"]].dropna().drop_duplicates("id")
    per_issue = rows["prio"] == 0  # the *_per_issue_active.ratio family shares that denominator
    total = total.where(~per_issue, rows["id"].map(latency.set_index("id")["value"]).fillna(total))
    reasons = is_stall.groupby(rows["id"]).transform("sum")
    # A share needs something to share with: one reason alone (a report that collected a single stall
    # metric) says nothing about dominance, so its share stays NaN.
    rows = rows.assign(share=(rows["value"] / total * 100).where(is_stall & (total > 0) & (reasons >= 2)))
    out = rows.rename(columns={"key": "metric"})[list(NCU_STALL_COLUMNS)]
    return out.sort_values(["id", "value"], ascending=[True, False], kind="stable").reset_index(drop=True)


def _rules_frame(rules: pd.DataFrame, ident: pd.DataFrame) -> pd.DataFrame:
    if rules is None or rules.empty:
        return empty_ncu_frame(NCU_RULE_COLUMNS)
    r = rules.copy()
    r["id"] = _ncu_ids(r["ncu_id"])
    r = r.loc[r["id"].notna()].copy()  # a rule row whose ID is damaged belongs to no kernel
    r["id"] = r["id"].astype("int64")
    r["name"] = r["id"].map(ident.set_index("id")["name"]).fillna("")
    speed, _ = parse_values(r["speedup_pct"].astype(str))
    r["speedup_pct"] = speed
    for col in ("section", "rule", "type", "description", "speedup_type"):
        r[col] = r[col].fillna("").astype(str)
    return r[list(NCU_RULE_COLUMNS)].reset_index(drop=True)


def merge_ncu_reports(parts: list[NcuReport]) -> NcuReport:
    """Concatenate reports, renumbering ``id`` so it stays unique (``ncu_id`` keeps ncu's value)."""
    kernels, metrics, rules, stalls = [], [], [], []
    units: dict[str, str] = {}
    offset = 0
    for part in parts:
        mapping = dict(zip(part.kernels["id"], part.kernels["id"].rank(method="first").astype("int64") - 1 + offset))
        kernels.append(part.kernels.assign(id=part.kernels["id"].map(mapping)))
        m = part.metrics.copy()
        m.index = m.index.map(mapping)
        metrics.append(m)
        rules.append(part.rules.assign(id=part.rules["id"].map(mapping)))
        stalls.append(part.stalls.assign(id=part.stalls["id"].map(mapping)))
        units.update(part.units)
        offset += len(part.kernels)
    return NcuReport(
        source=tuple(p for part in parts for p in part.source),
        format=parts[0].format,
        kernels=pd.concat(kernels, ignore_index=True),
        metrics=pd.concat(metrics),
        rules=pd.concat(rules, ignore_index=True),
        stalls=pd.concat(stalls, ignore_index=True),
        units=units,
    )


