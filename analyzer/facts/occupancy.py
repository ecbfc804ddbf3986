"""Theoretical occupancy per kernel launch configuration, computed like the CUDA Occupancy Calculator.

Rules (``cuda_occupancy.h`` shipped with the CUDA toolkit, ``cudaOccMaxActiveBlocksPerMultiprocessor``;
the same numbers Nsight Compute shows in its Occupancy section):

* warps per block = ceil(threads per block / warp size);
* **warps** limit: floor(max warps per SM / warps per block) (max warps = max threads per SM / 32);
  a block larger than the device's max threads per block cannot launch (0);
* **blocks_per_sm** limit: the device's max resident blocks per SM;
* **registers** limit: registers are allocated per warp in units of 256 (``regs * 32`` rounded up to
  256); the register file is split over 4 SM sub-partitions (2 on CC 6.0), each holding
  ``floor(regs per SM / sub-partitions / regs per warp)`` warps; blocks =
  floor(warps per sub-partition * sub-partitions / warps per block); a block needing more than
  the per-block register limit (with warps rounded up to the sub-partition count) cannot launch;
* **shared_memory** limit: static + dynamic shared memory per block, plus the 1 KiB the runtime
  reserves per block on CC >= 8.0, rounded up to the allocation granularity (128 B on CC >= 7.0,
  256 B before); blocks = floor(shared memory per SM / that); unlimited when it is 0.

Active blocks per SM = the minimum of the four; theoretical occupancy = active warps / max warps.
The limiter is the smallest limit (ties prefer warps, then blocks_per_sm, then registers, then
shared memory: a launch limited only by the hardware's warp count is as good as it gets).

Device limits come from ``trace.gpus``; values the export lacks (0 or missing) fall back to the
per-compute-capability table below (CUDA C Programming Guide, "Technical Specifications per
Compute Capability").

Window: kernels whose start lies in the window; one row per distinct launch configuration
(device, name, grid, block, registers, static and dynamic shared memory).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from analyzer.facts._util import column, factorize_objects, new_frame, starts_in_window, text_codes
from analyzer.facts.registry import FactContext, fact

# (major, minor) -> max threads per SM, max blocks per SM, registers per SM, shared memory per SM (B),
# max threads per block, registers per block
CC_LIMITS: dict[tuple[int, int], tuple[int, int, int, int, int, int]] = {
    (5, 0): (2048, 32, 65536, 65536, 1024, 65536),
    (5, 2): (2048, 32, 65536, 98304, 1024, 65536),
    (5, 3): (2048, 32, 65536, 65536, 1024, 32768),
    (6, 0): (2048, 32, 65536, 65536, 1024, 65536),
    (6, 1): (2048, 32, 65536, 98304, 1024, 65536),
    (6, 2): (2048, 32, 65536, 65536, 1024, 65536),
    (7, 0): (2048, 32, 65536, 98304, 1024, 65536),
    (7, 2): (2048, 32, 65536, 98304, 1024, 65536),
    (7, 5): (1024, 16, 65536, 65536, 1024, 65536),
    (8, 0): (2048, 32, 65536, 167936, 1024, 65536),
    (8, 6): (1536, 16, 65536, 102400, 1024, 65536),
    (8, 7): (1536, 16, 65536, 167936, 1024, 65536),
    (8, 9): (1536, 24, 65536, 102400, 1024, 65536),
    (9, 0): (2048, 32, 65536, 233472, 1024, 65536),
    (10, 0): (2048, 32, 65536, 233472, 1024, 65536),
    (10, 3): (2048, 32, 65536, 233472, 1024, 65536),
    (12, 0): (1536, 32, 65536, 102400, 1024, 65536),
}
REG_ALLOC_UNIT = 256  # registers, per warp
MAX_REGS_PER_THREAD = 255
LIMITERS = ("warps", "blocks_per_sm", "registers", "shared_memory")


def _cc_default(major: int, minor: int) -> tuple[int, int, int, int, int, int]:
    if (major, minor) in CC_LIMITS:
        return CC_LIMITS[(major, minor)]
    same_major = [k for k in CC_LIMITS if k[0] == major]
    if same_major:
        return CC_LIMITS[max(same_major)]
    return CC_LIMITS[(9, 0)] if major > 9 else CC_LIMITS[(5, 0)]


def device_limits(gpus: pd.DataFrame) -> pd.DataFrame:
    """Per device: the limits the occupancy calculation needs, export values first, CC table second."""
    rows = []
    for rec in gpus.to_dict("records"):  # one row per GPU
        major = int(rec.get("compute_major") or 0)
        minor = int(rec.get("compute_minor") or 0)
        d_threads, d_blocks, d_regs, d_smem, d_tpb, d_rpb = _cc_default(major, minor)

        def val(key: str, default: int, rec: dict = rec) -> int:
            v = rec.get(key)
            try:
                v = int(v) if v is not None and not pd.isna(v) else 0
            except (TypeError, ValueError):
                v = 0
            return v if v > 0 else default

        rows.append({
            "device": int(rec.get("device", 0)),
            "cc_major": major,
            "cc_minor": minor,
            "sm_count": val("sm_count", 0),
            "warp_size": val("threads_per_warp", 32),
            "max_threads_per_sm": val("max_threads_per_sm", d_threads),
            "max_blocks_per_sm": val("max_blocks_per_sm", d_blocks),
            "regs_per_sm": val("max_registers_per_sm", d_regs),
            "regs_per_block": val("max_registers_per_block", d_rpb),
            "smem_per_sm": val("max_shared_per_sm", d_smem),
            "max_threads_per_block": val("max_threads_per_block", d_tpb),
        })
    return pd.DataFrame(rows)


def occupancy_arrays(
    block_size: np.ndarray,
    registers: np.ndarray,
    smem: np.ndarray,
    *,
    cc_major: np.ndarray,
    cc_minor: np.ndarray,
    warp_size: np.ndarray,
    max_threads_per_sm: np.ndarray,
    max_blocks_per_sm: np.ndarray,
    regs_per_sm: np.ndarray,
    regs_per_block: np.ndarray,
    smem_per_sm: np.ndarray,
    max_threads_per_block: np.ndarray,
) -> dict[str, np.ndarray]:
    """The occupancy calculation, vectorized over launch configurations (see the module docstring).

    ``smem`` is static + dynamic shared memory per block in bytes. Returns the four limits (blocks
    per SM), ``blocks_per_sm``, ``warps_per_sm``, ``max_warps_per_sm``, ``occupancy`` (0..1) and
    ``limiter``.
    """
    i64 = np.int64
    bs = np.asarray(block_size, dtype=i64)
    regs = np.asarray(registers, dtype=i64)
    smem = np.asarray(smem, dtype=i64)
    major = np.asarray(cc_major, dtype=i64)
    minor = np.asarray(cc_minor, dtype=i64)
    ws = np.maximum(np.asarray(warp_size, dtype=i64), 1)
    big = np.iinfo(np.int32).max

    warps_per_block = -(-np.maximum(bs, 1) // ws)
    max_warps = np.asarray(max_threads_per_sm, dtype=i64) // ws
    lim_warps = np.where(bs <= np.asarray(max_threads_per_block, dtype=i64), max_warps // warps_per_block, 0)

    lim_blocks = np.asarray(max_blocks_per_sm, dtype=i64)

    subparts = np.where((major == 6) & (minor == 0), 2, 4)
    regs_per_warp = -(-(regs * ws) // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    assumed_per_block = regs_per_warp * (-(-warps_per_block // subparts) * subparts)
    fits = (assumed_per_block <= np.asarray(regs_per_block, dtype=i64)) & (regs <= MAX_REGS_PER_THREAD)
    warps_per_sub = (np.asarray(regs_per_sm, dtype=i64) // subparts) // np.maximum(regs_per_warp, 1)
    lim_regs = np.where(regs_per_warp > 0, (warps_per_sub * subparts) // warps_per_block, big)
    lim_regs = np.where(fits, lim_regs, 0)

    granularity = np.where(major >= 7, 128, 256)
    reserved = np.where(major >= 8, 1024, 0)
    smem_alloc = -(-(smem + reserved) // granularity) * granularity
    lim_smem = np.where(smem_alloc > 0, np.asarray(smem_per_sm, dtype=i64) // np.maximum(smem_alloc, 1), big)

    limits = np.stack([lim_warps, lim_blocks, lim_regs, lim_smem])  # order = LIMITERS (tie preference)
    blocks = limits.min(axis=0)
    which = limits.argmin(axis=0)
    warps = blocks * warps_per_block
    occ = np.where(max_warps > 0, warps / np.maximum(max_warps, 1), 0.0)
    return {
        "limit_warps": lim_warps,
        "limit_blocks": lim_blocks,
        "limit_registers": np.minimum(lim_regs, big),
        "limit_shared_memory": np.minimum(lim_smem, big),
        "blocks_per_sm": blocks,
        "warps_per_sm": warps,
        "max_warps_per_sm": max_warps,
        "occupancy": occ,
        "limiter": np.array(LIMITERS, dtype=object)[which],
    }


_OCC_COLUMNS = {
    "device": "GPU device id",
    "name": "demangled kernel name",
    "short_name": "short kernel name",
    "grid_blocks": "blocks in the grid",
    "block_size": "threads per block",
    "registers": "registers per thread",
    "static_smem": "static shared memory per block (B)",
    "dynamic_smem": "dynamic shared memory per block (B)",
    "smem": "static + dynamic shared memory per block (B)",
    "blocks_per_sm": "active blocks per SM (0: the launch cannot fit per the calculation)",
    "warps_per_sm": "active warps per SM",
    "theoretical_occupancy": "active warps / max warps per SM (0..1)",
    "limiter": "what caps the blocks per SM: warps | blocks_per_sm | registers | shared_memory",
    "limit_warps": "blocks per SM allowed by the warp count",
    "limit_blocks": "blocks per SM allowed by the block slots",
    "limit_registers": "blocks per SM allowed by registers",
    "limit_shared_memory": "blocks per SM allowed by shared memory",
    "sm_count": "SMs on the device",
    "waves": "grid_blocks / (blocks_per_sm * sm_count)",
    "count": "launches with this configuration in the window",
    "total_ns": "their summed duration (ns)",
    "mean_ns": "their mean duration (ns)",
    "floor_ns": "the device's kernel latency floor (ns): the 1st percentile of its compute kernels' durations "
                "over the whole trace, what a launch with almost no work takes on this GPU (0 unknown)",
}


def known_launch_config(kernels: pd.DataFrame) -> np.ndarray:
    """Per kernel row: its grid and block dimensions are all recorded (> 0). torch.profiler on ROCm
    leaves them out for kernels a graph replays (-1 here), nsys' whole graph executions have none."""
    ok = np.ones(len(kernels), dtype=bool)
    for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"):
        if c in kernels.columns:
            ok &= kernels[c].fillna(-1).to_numpy(dtype=np.int64) > 0
    return ok


def _product(frame: pd.DataFrame, *columns: str) -> np.ndarray:
    out = np.ones(len(frame), dtype=np.int64)
    for c in columns:
        out *= frame[c].to_numpy(dtype=np.int64)
    return out


_RESOURCES = ("kernel_resources", "kernel_launch_config", "gpu_properties")
_OCC_NEEDS = {c: _RESOURCES for c in (
    "registers", "static_smem", "dynamic_smem", "smem", "blocks_per_sm", "warps_per_sm", "theoretical_occupancy",
    "limiter", "limit_warps", "limit_blocks", "limit_registers", "limit_shared_memory", "waves")} | {
    "grid_blocks": ("kernel_launch_config",), "block_size": ("kernel_launch_config",), "sm_count": ("gpu_properties",)}

#: percentile of a device's kernel durations taken as its latency floor
FLOOR_PERCENTILE = 1.0


def latency_floor(kernels: pd.DataFrame) -> dict[int, int]:
    """Per device: the kernel latency floor (ns), the :data:`FLOOR_PERCENTILE` percentile of its kernels'
    durations (whole CUDA-graph executions left out: they are no kernels). A launch this short did almost
    no work: its time is the GPU's fixed cost of running a grid (block dispatch, a memory round trip, the
    drain), which no grid size shortens."""
    if kernels.empty or "duration" not in kernels.columns:
        return {}
    dur = kernels["duration"].to_numpy(dtype=np.int64)
    dev = column(kernels, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    ok = dur > 0
    if "in_graph" in kernels.columns:
        from analyzer.loading.model import GRAPH_EXECUTION

        ok &= kernels["in_graph"].fillna(0).to_numpy(dtype=np.int64) != GRAPH_EXECUTION
    devices = np.sort(pd.unique(dev[ok]))  # few: hashed, not sorted whole
    return {int(d): int(np.percentile(dur[ok if len(devices) == 1 else ok & (dev == d)], FLOOR_PERCENTILE))
            for d in devices.tolist()}


@fact("occupancy", columns=_OCC_COLUMNS, scope_keys=("device", "name"), column_needs=_OCC_NEEDS, per_kernel=True)
def occupancy(ctx: FactContext) -> pd.DataFrame:
    """Theoretical occupancy, its limiter and the wave count per kernel launch configuration.
    Communication kernels (NCCL ...) are left out: they use few blocks on purpose and mostly wait."""
    from analyzer.facts.comm import compute_kernel_mask

    kernels = ctx.trace.kernels
    compute = compute_kernel_mask(ctx)
    if len(compute) and not compute.all():
        kernels = kernels.loc[compute]
    floors = latency_floor(kernels)
    k = starts_in_window(kernels, ctx.window, [
        "start", "device", "name", "short_name", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
        "block_z", "registers_per_thread", "static_smem", "dynamic_smem", "duration"])
    known = known_launch_config(k)
    if not known.all():  # no grid or block recorded (ROCm graph replays, whole graph executions): unknown,
        k = k.loc[known]  # never a small grid or a low occupancy (the unknown-launch-config rule says so)
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("name", "short_name", "limiter") else "int64")
                             for c in _OCC_COLUMNS})
    # names as codes (the column's dictionary codes, one per distinct text): no per-row strings
    row_codes, labels = text_codes(k["name"])
    label_codes, names = factorize_objects(labels)
    name_codes = label_codes[row_codes]
    short_codes, short_labels = text_codes(k["short_name"])
    cfg = {  # plain arrays: the fast path never needs them as a frame (the groupby below builds one)
        "device": column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64),
        "name_code": name_codes,
        # products in int64: the trace keeps launch dimensions in int32, where they could wrap
        "grid_blocks": _product(k, "grid_x", "grid_y", "grid_z"),
        "block_size": _product(k, "block_x", "block_y", "block_z"),
        "registers": k["registers_per_thread"].fillna(0).to_numpy(dtype=np.int64),
        "static_smem": k["static_smem"].fillna(0).to_numpy(dtype=np.int64),
        "dynamic_smem": k["dynamic_smem"].fillna(0).to_numpy(dtype=np.int64),
        "duration": k["duration"].to_numpy(dtype=np.int64),
        "row": np.arange(len(k)),
    }
    keys = ["device", "name_code", "grid_blocks", "block_size", "registers", "static_smem", "dynamic_smem"]
    out = _configs(cfg, keys)
    if out is None:
        out = new_frame(cfg).groupby(keys, sort=False).agg(
            first_row=("row", "first"), count=("duration", "size"), total_ns=("duration", "sum"),
            mean_ns=("duration", "mean"),
        ).reset_index()
    out["name"] = np.asarray(names, dtype=object)[out["name_code"].to_numpy()]
    out["short_name"] = short_labels[short_codes[out["first_row"].to_numpy()]]
    out["smem"] = out["static_smem"] + out["dynamic_smem"]
    limits = device_limits(ctx.trace.gpus)
    if limits.empty:
        limits = pd.DataFrame([{"device": d} for d in out["device"].unique()])
    out = out.merge(limits, on="device", how="left")
    # a device missing from trace.gpus: assume the most common limits of the trace, else CC 9.0
    fallback = dict(zip(("max_threads_per_sm", "max_blocks_per_sm", "regs_per_sm", "smem_per_sm",
                         "max_threads_per_block", "regs_per_block"), _cc_default(9, 0)))
    fallback |= {"cc_major": 9, "cc_minor": 0, "warp_size": 32, "sm_count": 0}
    for key, default in fallback.items():
        if key not in out.columns:
            out[key] = default
        out[key] = out[key].fillna(default).astype(np.int64)
    if (out["sm_count"] <= 0).any():  # not recorded: the GPU table's, for a GPU it knows by name
        from analyzer.facts.hardware import device_hardware

        hw = device_hardware(ctx.store)
        table = {d: int(h.sm_count.value) for d, h in hw.items() if h.sm_count.known and h.sm_count.value}
        missing = out["sm_count"] <= 0
        out.loc[missing, "sm_count"] = out.loc[missing, "device"].map(table).fillna(0).astype(np.int64)
    res = occupancy_arrays(
        out["block_size"].to_numpy(), out["registers"].to_numpy(), out["smem"].to_numpy(),
        cc_major=out["cc_major"].to_numpy(), cc_minor=out["cc_minor"].to_numpy(),
        warp_size=out["warp_size"].to_numpy(), max_threads_per_sm=out["max_threads_per_sm"].to_numpy(),
        max_blocks_per_sm=out["max_blocks_per_sm"].to_numpy(), regs_per_sm=out["regs_per_sm"].to_numpy(),
        regs_per_block=out["regs_per_block"].to_numpy(), smem_per_sm=out["smem_per_sm"].to_numpy(),
        max_threads_per_block=out["max_threads_per_block"].to_numpy(),
    )
    out["blocks_per_sm"] = res["blocks_per_sm"]
    out["warps_per_sm"] = res["warps_per_sm"]
    out["theoretical_occupancy"] = res["occupancy"]
    out["limiter"] = res["limiter"]
    for key in ("limit_warps", "limit_blocks", "limit_registers", "limit_shared_memory"):
        out[key] = res[key]
    per_wave = out["blocks_per_sm"].to_numpy() * out["sm_count"].to_numpy()
    out["waves"] = np.where(per_wave > 0, out["grid_blocks"].to_numpy() / np.maximum(per_wave, 1), np.nan)
    out["floor_ns"] = out["device"].map(floors).fillna(0).astype(np.int64)
    return out.sort_values("total_ns", ascending=False, ignore_index=True)[list(_OCC_COLUMNS)]


def _configs(cfg: Mapping[str, np.ndarray], keys: list[str]) -> pd.DataFrame | None:
    """``cfg``'s ``groupby(keys, sort=False)`` with the first row, count, summed and mean duration of each
    launch configuration: the key columns packed into one int64 per row (their bit widths from their
    maxima), factorized in order of first appearance; then counts and sums by ``bincount`` and each
    configuration's first row where the running maximum of the codes grows (codes number groups by first
    appearance): no sort. None (use the groupby) when the keys need more than 63 bits or hold negative
    values, or the sums could round in float64 (the groupby's mean sums in float64; ``bincount`` sums
    in float64 too, exact below 2^53)."""
    duration = np.asarray(cfg["duration"], dtype=np.int64)
    if not len(duration):
        return None
    packed = np.zeros(len(duration), dtype=np.int64)
    bits = 0
    for k in keys:
        values = np.asarray(cfg[k], dtype=np.int64)
        lo, hi = int(values.min()), int(values.max())
        width = max(hi, 1).bit_length()
        if lo < 0 or bits + width > 63:
            return None
        packed |= values << bits
        bits += width
    if float(np.abs(duration).sum(dtype=np.float64)) >= 2.0 ** 52:
        return None
    codes, _ = pd.factorize(packed)  # numbered by first appearance, like groupby(sort=False)
    del packed
    ngroups = int(codes.max()) + 1
    # a group's first row: where the running maximum of the codes steps up (to the new group's code)
    running = np.maximum.accumulate(codes)
    first = np.flatnonzero(np.diff(running, prepend=-1) > 0)
    count = np.bincount(codes, minlength=ngroups).astype(np.int64)
    total = np.bincount(codes, weights=duration, minlength=ngroups).astype(np.int64)  # exact: |sum| < 2^52
    out = pd.DataFrame({k: np.asarray(cfg[k], dtype=np.int64)[first] for k in keys})
    out["first_row"] = np.asarray(cfg["row"])[first]
    out["count"] = count
    out["total_ns"] = total
    out["mean_ns"] = total / count
    return out
