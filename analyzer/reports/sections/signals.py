"""What the trace recorded beyond the kernel timeline: code locations of CUDA API calls, sampled GPU
metrics, energy and power, with notes on what was not recorded.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from analyzer.analysis import Analysis
from analyzer.loading.vocabulary import vocabulary_of
from analyzer.reports.sections.common import optional_fact, table_view
from analyzer.reports.viewmodel import Column, Limits, SignalsView


def signals_view(analysis: Analysis, limits: Limits) -> SignalsView | None:
    """Code locations, GPU metrics and energy, with notes on what the trace lacks; None when there is
    nothing to show or say."""
    from analyzer.facts.stacks import RECORD_HINT

    trace = analysis.trace
    words = vocabulary_of(trace)
    notes: list[str] = [str(n) for n in cast("Iterable[object]", trace.extras.get("notes", ()))]
    parts: dict[str, Any] = {}
    locs = optional_fact(analysis, "code_locations")
    if locs is not None and len(locs):
        cols: tuple[Column, ...] = (Column("kind", "Kind", "text"),
                Column("code_location", "Code location", "code"),
                Column("name", "CUDA API", "code"), Column("calls", "Calls", "int"),
                Column("api_ns", "API time", "ns"), Column("nvtx_path", "NVTX range", "code"))
        parts["code_locations"] = table_view(locs, cols, limits.top_kernels, limits.cell_chars,
                                         "CUDA API calls in the window by the code that made them, most "
                                         "time first")
    elif trace.api_stacks.empty and any(f.rule in _CALL_SITE_RULES for f in analysis.findings):
        notes.append(words.text(f"Code locations: this trace has no call stacks; {RECORD_HINT}."))
    act = optional_fact(analysis, "sm_activity")
    if act is not None and len(act):
        cols = (Column("device", "GPU", "int"), Column("samples", "Samples", "int"),
                Column("kernel_share", "Kernels running", "share"),
                Column("sm_active_busy", "SMs active while kernels ran", "pct"),
                Column("tensor_active_gemm", "Tensor pipes active while GEMMs ran", "pct"),
                Column("dram_read", "DRAM read", "pct"), Column("dram_write", "DRAM write", "pct"),
                Column("pcie_rx", "PCIe RX", "pct"), Column("pcie_tx", "PCIe TX", "pct"))
        parts["gpu_metrics"] = table_view(act, cols, limits.devices, limits.cell_chars,
                                      "sampled GPU metrics over the window (% of peak)")
    unmapped = cast("list[str] | None", trace.extras.get("gpu_metrics_unmapped"))
    if unmapped and (act is None or not len(act) or act["sm_active"].isna().all()):
        notes.append("GPU metrics: none of this trace's metric names means SM activity to the analyzer "
                     f"({len(unmapped)} names, e.g. " + ", ".join(str(u) for u in list(unmapped)[:4])
                     + "); the SM-activity rules did not run")
    energy = optional_fact(analysis, "energy")
    if energy is not None and len(energy):
        cols = (Column("device", "GPU", "int"), Column("source", "Measured by", "text"),
                Column("energy_j", "Energy (J)", "float"), Column("avg_power_w", "Mean power (W)", "float"),
                Column("steps", "Steps", "int"), Column("energy_per_step_j", "Energy per step (J)", "float"),
                Column("resolution_ns", "Resolution", "ns"))
        parts["energy"] = table_view(energy, cols, limits.devices, limits.cell_chars, "over the analysis window")
        steps = optional_fact(analysis, "energy_steps")
        if steps is not None and len(steps):
            scol = (Column("device", "GPU", "int"), Column("step", "Step", "code"),
                    Column("energy_j", "Energy (J)", "float"), Column("avg_power_w", "Mean power (W)", "float"))
            parts["energy_steps"] = table_view(steps, scol, limits.phase_rows, limits.cell_chars)
        for _, row in energy.iterrows():
            if row["source"] == "power readings" and row["window_ns"] < 5e9:
                notes.append(f"GPU {int(row['device'])}: the power log has power readings only (nvidia-smi "
                             "power.draw averages about the last second), which lag a window of "
                             f"{row['window_ns'] / 1e9:.2f} s; log the energy counter (NVML "
                             "nvmlDeviceGetTotalEnergyConsumption) for short windows.")
            if not row["per_step_measured"] and row["steps"]:
                notes.append(f"GPU {int(row['device'])}: steps of {row['step_ns'] / 1e6:.1f} ms are shorter "
                             f"than twice the power log's resolution ({row['resolution_ns'] / 1e6:.0f} ms): "
                             "energy per step is the window's energy divided by the steps.")
    elif not trace.power.empty:
        notes.append("Energy: the power log does not cover the analysis window.")
    if not parts and not notes:
        return None
    if "code_locations" in parts:
        parts["code_locations_title"] = words.text(SignalsView.code_locations_title)
    return SignalsView(notes=tuple(notes), **parts)


#: rules whose findings point at CUDA API calls (their call sites need stacks)
_CALL_SITE_RULES = frozenset({"host-sync-in-loop", "sync-memcpy", "pageable-memcpy", "alloc-in-loop",
                              "tiny-kernels", "gpu-idle-gaps"})
