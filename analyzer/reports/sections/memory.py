"""The device memory section: one summary line per GPU, the per-GPU table, the peak per step and per NVTX
range.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis
from analyzer.reports.format import plural
from analyzer.reports.sections.common import optional_fact, table_view
from analyzer.reports.viewmodel import Column, Limits, MemoryView


def memory_line_text(row: Any) -> str:
    """One GPU's memory summary (a ``memory_growth`` row) as every format prints it."""
    from analyzer.rules.templates import FILTERS

    size, pct = FILTERS["bytes"], FILTERS["pct"]
    what = "allocated" if str(row["measure"]) == "allocated" else "held from CUDA"
    text = f"GPU {int(row['device'])} memory ({what}): peak {size(row['peak_bytes'])}"
    if row["peak_step"]:
        text += f" in {row['peak_step']}"
    before = int(row["held_before_bytes"])
    if row["peak_held_in"]:
        text += f" ({pct(row['peak_held_share'])} of it allocated in {row['peak_held_in']})"
    elif before > 0 and 2 * before >= int(row["peak_bytes"]):
        text += f" ({size(before)} of it allocated before the trace began)"
    elif row["peak_range"]:
        text += f" (set in {row['peak_range']})"
    if int(row["capacity_bytes"]) > 0:
        text += f", {pct(row['peak_share'])} of {size(row['capacity_bytes'])}"
    if int(row["steps"]) >= 2:
        span = f"{int(row['steps'])} steps ({row['first_step']} to {row['last_step']}"
        if float(row["bytes_per_step"]) == 0 and float(row["slope_low"]) == 0 and float(row["slope_high"]) == 0:
            text += f"; no growth over {span})"
        else:
            text += (f"; {size(row['bytes_per_step'])} per step over {span}, middle half of the step-to-step "
                     f"slopes {size(row['slope_low'])} to {size(row['slope_high'])})")
    return text


def _memory_notes(memory: pd.DataFrame, growth: pd.DataFrame) -> tuple[str, ...]:
    """What the memory levels leave out or combine, said once: events that name no GPU, GPUs whose
    memory several processes hold."""
    notes = []
    kind = memory["mem_kind"].astype(str).to_numpy() if len(memory) else np.empty(0, dtype=object)
    lost = int(((memory["device"].to_numpy() < 0) & (kind != "host")).sum()) if len(memory) else 0
    if lost:
        notes.append(f"{plural(lost, 'memory event')} name no GPU and are left out of the memory levels")
    for _, row in growth.iterrows():
        if int(row["unmatched_frees"]) > 0 and str(row["measure"]) == "reserved":
            notes.append(f"GPU {int(row['device'])}: {plural(int(row['unmatched_frees']), 'free')} of memory allocated "
                         "before the capture; its levels count from the lowest point of the capture (what the "
                         "process held before is unknown)")
        if int(row["processes"]) > 1:
            notes.append(f"GPU {int(row['device'])}: memory events of {int(row['processes'])} processes; their "
                         "allocations are added up (each holds its own memory)")
    return tuple(notes)


def memory_view(analysis: Analysis, limits: Limits) -> MemoryView | None:
    """The memory section: None when the trace has no memory events (the not-checked rules say what
    to record)."""
    if "memory_events" in analysis.trace.info.unavailable:
        return None
    growth = optional_fact(analysis, "memory_growth")
    if growth is None or not len(growth):
        return None
    dcols = (Column("device", "GPU", "int"), Column("measure", "Measure", "text"),
             Column("peak_bytes", "Peak", "bytes"), Column("peak_step", "Peak step", "text"),
             Column("peak_range", "Peak set in", "text"), Column("peak_held_in", "Peak held in", "text"),
             Column("capacity_bytes", "GPU memory", "bytes"),
             Column("peak_share", "Peak share", "share"), Column("bytes_per_step", "Growth per step", "bytes"),
             Column("slope_low", "Slope p25", "bytes"), Column("slope_high", "Slope p75", "bytes"),
             Column("steps", "Steps", "int"), Column("growth_range", "Kept memory allocated in", "text"),
             Column("unmatched_frees", "Frees before capture", "int"))
    view: dict[str, Any] = {
        "lines": tuple(memory_line_text(r) for _, r in growth.iterrows()),
        "notes": _memory_notes(analysis.trace.memory, growth),
        "devices": table_view(growth, dcols, limits.devices, limits.cell_chars),
    }
    steps = optional_fact(analysis, "memory_steps")
    if steps is not None and len(steps):
        scols = (Column("device", "GPU", "int"), Column("step", "Step", "text"),
                 Column("start_bytes", "At start", "bytes"), Column("peak_bytes", "Peak", "bytes"),
                 Column("end_bytes", "At end", "bytes"), Column("growth", "Change", "bytes"),
                 Column("peak_range", "Peak set in", "text"))
        view["steps"] = table_view(steps, scols, limits.phase_rows, limits.cell_chars, "peak memory per step")
    ranges = optional_fact(analysis, "memory_ranges")
    if ranges is not None and len(ranges):
        rcols = (Column("device", "GPU", "int"), Column("nvtx_path", "NVTX range", "text"),
                 Column("peak_bytes", "Peak", "bytes"), Column("peak_steps", "Steps it set the peak", "int"),
                 Column("alloc_bytes", "Allocated", "bytes"), Column("free_bytes", "Freed", "bytes"),
                 Column("kept_bytes", "Kept at window end", "bytes"), Column("events", "Events", "int"))
        ordered = ranges.sort_values(["peak_bytes", "nvtx_path"], ascending=[False, True], kind="stable")
        view["ranges"] = table_view(ordered, rcols, limits.phase_rows, limits.cell_chars)
    return MemoryView(**view)
