"""The normalized model of Nsight Compute results: :class:`NcuReport` (defined with the trace model,
:mod:`analyzer.loading.model`, whose ``Trace.ncu`` holds it), its columns and their meanings."""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from analyzer.loading.columns import empty_typed

# the report itself is part of the trace model (``Trace.ncu``); defined there, named here too
from analyzer.loading.model import NcuReport


NCU_RAW_CSV = "ncu-raw-csv"
NCU_DETAILS_CSV = "ncu-details-csv"
NCU_REP = "ncu-rep"

# First bytes of every .ncu-rep seen so far (2023.1 report: "NVR\0" then a little-endian version word).
NCU_REP_MAGIC = b"NVR\x00"

# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------

# Column -> one-line description (with unit). The fact layer re-uses these descriptions.
NCU_KERNEL_COLUMN_DOCS: dict[str, str] = {
    "id": "profiled launch id, unique in this report (ncu's ID; renumbered when several files are merged)",
    "ncu_id": "ncu's own ID column for the launch (as exported)",
    "source": "file the launch was read from",
    "name": "kernel name as ncu printed it (demangled where the export has it)",
    "short_name": "function name without namespace, template arguments, parameters or return type",
    "mangled": "mangled name (.ncu-rep only; '' otherwise)",
    "process_id": "profiled process id, -1 when unknown",
    "process_name": "profiled process name",
    "context": "CUDA context id, -1 when unknown",
    "stream": "CUDA stream id, -1 when unknown",
    "device": "CUDA device index, -1 when unknown",
    "device_name": "GPU name where the export has it (raw page and .ncu-rep), '' otherwise",
    "cc": "compute capability, e.g. '8.6'",
    "ncu_nvtx_path": "NVTX push/pop ranges open at the launch as ncu recorded them (--nvtx), outermost first, "
    "joined by '/' like nsys nvtx_path (e.g. 'step_0/attention/computing_softmax'); '' without --nvtx",
    "grid_x": "grid dimension x (blocks), -1 when unknown",
    "grid_y": "grid dimension y (blocks), -1 when unknown",
    "grid_z": "grid dimension z (blocks), -1 when unknown",
    "block_x": "block dimension x (threads), -1 when unknown",
    "block_y": "block dimension y (threads), -1 when unknown",
    "block_z": "block dimension z (threads), -1 when unknown",
    "block_size": "threads per block (block_x*block_y*block_z), -1 when unknown",
    "grid_size": "blocks per grid (grid_x*grid_y*grid_z), -1 when unknown",
    "duration_ns": "kernel duration under ncu (gpu__time_duration.sum / 'Duration'), ns; NaN if absent",
    "sm_frequency_hz": "SM clock during the measurement, Hz",
    "sm_count": "number of SMs on the device",
    "sm_throughput_pct": "Compute (SM) throughput, % of peak (sm__throughput.avg.pct_of_peak_sustained_elapsed)",
    "memory_throughput_pct": "Memory throughput, % of peak "
    "(gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed)",
    "dram_throughput_pct": "DRAM throughput, % of peak (dram__throughput.avg.pct_of_peak_sustained_elapsed)",
    "achieved_occupancy": "achieved occupancy, % of the SM's warp slots (0..100)",
    "theoretical_occupancy": "theoretical occupancy, % of the SM's warp slots (0..100)",
    "occupancy_limit_registers": "blocks per SM allowed by register use (launch__occupancy_limit_registers)",
    "occupancy_limit_shared_mem": "blocks per SM allowed by shared memory use",
    "occupancy_limit_warps": "blocks per SM allowed by the warp limit",
    "occupancy_limit_blocks": "blocks per SM allowed by the hardware block limit",
    "occupancy_limiter": "which of registers|shared_mem|warps|blocks allows the fewest blocks per SM, '' unknown",
    "registers_per_thread": "registers per thread",
    "static_smem": "static shared memory per block, bytes",
    "dynamic_smem": "dynamic shared memory per block, bytes",
    "smem_per_block": "static + dynamic shared memory per block, bytes",
    "waves_per_sm": "launch__waves_per_multiprocessor: blocks / (SMs * blocks per SM)",
    "small_grid": "True when the grid is less than one full wave (waves_per_sm < 1)",
    "tail_wave_fill_pct": "how full the last wave is, % (100 when the wave count is whole)",
    "tail_effect_pct": "share of SM capacity idle because of a partial last wave, % of the kernel's runtime "
    "(0 when waves_per_sm < 1 or whole)",
    "flop_count": "floating-point operations of flop_precision, the precision the roofline compares with its "
    "peak (ncu's roofline: add + mul + 2*fma for fp32/fp64; 2*hadd + 2*hmul + 4*hfma for fp16, whose SASS "
    "instructions are 2-wide)",
    "flop_count_all": "floating-point operations over fp16 + fp32 + fp64",
    "achieved_flops": "achieved FLOP/s of flop_precision (flop_count / duration; per-cycle counters x SM clock)",
    "flop_precision": "precision with the most FLOPs: fp16|fp32|fp64, '' when no FLOP counters",
    "dram_bytes": "bytes moved to/from DRAM (dram__bytes.sum, or read + write)",
    "dram_bandwidth": "achieved DRAM bandwidth, bytes/s",
    "arithmetic_intensity": "flop_count / dram_bytes, FLOP/byte",
    "peak_flops": "peak FLOP/s of flop_precision (fp32 when none) on this device",
    "peak_bandwidth": "peak DRAM bandwidth, bytes/s",
    "peak_source": "where the peaks came from: 'counters' (ncu peak_sustained metrics), "
    "'device-attributes' (clock x units), or ''",
    "stall_reason": "dominant warp stall reason (e.g. long_scoreboard), '' when the export has fewer than two "
    "stall reasons",
    "stall_share": "its share of the cycles between two issued instructions (all reasons + selected), % "
    "(0..100), as ncu's CPIStall rule states it; NaN when unknown",
    "global_ld_sectors": "L1TEX global load sectors (l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum)",
    "global_ld_requests": "L1TEX global load requests (l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum)",
    "sectors_per_request": "global load sectors per request (ideal: 4 for 4-byte loads by a full warp, 16 for "
    "16-byte vector loads, so it is no coalescing verdict by itself; uncoalesced_excess_pct is)",
    "uncoalesced_excess_pct": "global L2 sectors above ideal, % of sectors (memory_l2_theoretical_sectors_global"
    "[_ideal|_excessive])",
    "shared_bank_conflicts": "shared-memory bank conflicts, load + store "
    "(l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld/st.sum, as ncu's SharedMemoryConflicts rule; the "
    "all-ops aggregate ..._mem_shared.sum also counts other shared traffic and is used only without them)",
    "shared_wavefronts": "shared-memory wavefronts of the same operations "
    "(l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld/st.sum)",
    "bank_conflict_pct": "bank conflicts as % of shared wavefronts (load + store)",
    "shared_pipe_pct": "shared-memory data pipe utilization, % of peak "
    "(l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed)",
}
NCU_KERNEL_COLUMNS: tuple[str, ...] = tuple(NCU_KERNEL_COLUMN_DOCS)

NCU_JOIN_COLUMN_DOCS: dict[str, str] = {
    "matched": "True when the launch was matched to a kernel on the nsys timeline",
    "match_key": "how it matched: 'name+grid+block+nvtx' (same NVTX path too), 'name+grid+block', "
    "'base+grid+block', 'base' (name only), '' unmatched",
    "unmatched_reason": "why it did not match ('' when matched)",
    "nsys_index": "row index in trace.kernels of the matched launch, -1 when unmatched",
    "nvtx_path": "NVTX path of the matched nsys launch, '' when unmatched or none",
    "nvtx_range": "innermost NVTX range of the matched nsys launch, ''",
    "matched_ns": "total nsys time of this kernel configuration (same key) on the timeline, ns",
    "timeline_count": "nsys launches of this configuration on the timeline",
    "gpu_time_share": "matched_ns / total nsys kernel time (0..1)",
}
NCU_JOIN_COLUMNS: tuple[str, ...] = tuple(NCU_JOIN_COLUMN_DOCS)

NCU_RULE_COLUMN_DOCS: dict[str, str] = {
    "id": "profiled launch id (joins ncu_kernels.id)",
    "name": "kernel name",
    "section": "ncu section the rule belongs to (e.g. SpeedOfLight, Occupancy)",
    "rule": "ncu rule name (e.g. SOLBottleneck, TheoreticalOccupancy)",
    "type": "ncu rule type: OPT (optimization), WRN, INF, ERR, OK",
    "description": "ncu's rule text",
    "speedup_type": "'local' (this kernel) or 'global' (whole workload), '' when none",
    "speedup_pct": "ncu's estimated speed-up, %, NaN when none",
}
NCU_RULE_COLUMNS: tuple[str, ...] = tuple(NCU_RULE_COLUMN_DOCS)

NCU_STALL_COLUMN_DOCS: dict[str, str] = {
    "id": "profiled launch id (joins ncu_kernels.id)",
    "reason": "stall reason (long_scoreboard, barrier, mio_throttle, ...)",
    "value": "the metric's value (cycles per issued instruction, or samples for pcsamp metrics)",
    "share": "share of the cycles between two issued instructions (all reasons + selected), % (0..100), as ncu"
    "'s CPIStall rule states it; NaN for 'selected' (not a stall) and when "
    "the export has fewer than two stall reasons",
    "metric": "the ncu metric the value came from",
}
NCU_STALL_COLUMNS: tuple[str, ...] = tuple(NCU_STALL_COLUMN_DOCS)

_TEXT_COLUMNS = {
    "source", "name", "short_name", "mangled", "process_name", "device_name", "cc", "occupancy_limiter",
    "flop_precision", "peak_source", "stall_reason", "ncu_nvtx_path", "match_key", "unmatched_reason", "nvtx_path",
    "nvtx_range", "section", "rule", "type", "description", "speedup_type", "reason", "metric", "bound",
    "roofline_side", "time_label",
}
_INT_COLUMNS = {
    "id", "ncu_id", "process_id", "context", "stream", "device", "grid_x", "grid_y", "grid_z", "block_x",
    "block_y", "block_z", "block_size", "grid_size", "nsys_index", "timeline_count", "rank",
}
_BOOL_COLUMNS = {"small_grid", "matched"}


def empty_ncu_frame(columns: Iterable[str]) -> pd.DataFrame:
    """An empty frame with ``columns`` typed as the ncu frames type them (text object, ids int64,
    flags bool, metrics float64)."""

    def dtype(c: str) -> str:
        if c in _TEXT_COLUMNS:
            return "object"
        if c in _INT_COLUMNS:
            return "int64"
        if c in _BOOL_COLUMNS:
            return "bool"
        return "float64"

    return empty_typed((c, dtype(c)) for c in columns)


__all__ = [
    "NCU_DETAILS_CSV", "NCU_JOIN_COLUMNS", "NCU_JOIN_COLUMN_DOCS", "NCU_KERNEL_COLUMNS", "NCU_KERNEL_COLUMN_DOCS",
    "NCU_RAW_CSV", "NCU_REP", "NCU_REP_MAGIC", "NCU_RULE_COLUMNS", "NCU_RULE_COLUMN_DOCS", "NCU_STALL_COLUMNS",
    "NCU_STALL_COLUMN_DOCS", "NcuReport", "empty_ncu_frame",
]
