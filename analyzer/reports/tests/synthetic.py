"""Synthetic analyses for report tests: hand-made frames with the contract's columns.

These exercise rendering only (layout, capping, escaping, determinism); they are not evidence that any
diagnosis works. Real-trace tests live in ``test_real_trace.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis, Window
from analyzer.facts.registry import UnknownFactError
from analyzer.findings import Finding, Footprint, Scope, Severity
from analyzer.loading.model import (
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    THREAD_COLUMNS,
    Trace,
    TraceInfo,
)

MS = 1_000_000


@dataclass
class DictFacts:
    """A fact source over precomputed frames; unknown names raise ``UnknownFactError`` like the real store."""

    frames: dict[str, pd.DataFrame] = field(default_factory=dict)

    def get(self, name: str) -> pd.DataFrame:
        if name not in self.frames:
            raise UnknownFactError(name)
        return self.frames[name]


@dataclass
class FakeNcu:
    kernels: pd.DataFrame


def _trace(name: str, kernel_names: list[str], nvtx_texts: list[str], process: str) -> Trace:
    gpus = pd.DataFrame([{**{c: 0 for c in GPU_COLUMNS}, "device": d, "name": "NVIDIA H100 80GB HBM3",
                          "sm_count": 132} for d in (0, 1)])
    n = 400
    starts = np.arange(n, dtype="int64") * (2 * MS) + 100 * MS
    kern = pd.DataFrame({c: np.zeros(n, dtype="int64") for c in KERNEL_COLUMNS if c not in ("name", "short_name")})
    kern["start"] = starts
    kern["duration"] = 1 * MS
    kern["end"] = starts + 1 * MS
    kern["device"] = np.arange(n) % 2
    kern["name"] = [kernel_names[i % len(kernel_names)] for i in range(n)]
    kern["short_name"] = kern["name"]
    for c in ("api_name", "nvtx_range", "nvtx_path", "attribution"):
        kern[c] = ""
    steps = 10
    rows = []
    for i in range(steps):
        s = 50 * MS + i * 95 * MS
        rows.append((s, s + 90 * MS, nvtx_texts[i % len(nvtx_texts)], 0, -1))
        rows.append((s + 5 * MS, s + 40 * MS, "forward", 1, len(rows) - 1))
    nvtx = pd.DataFrame(
        {
            "range_id": np.arange(len(rows)),
            "start": [r[0] for r in rows],
            "end": [r[1] for r in rows],
            "duration": [r[1] - r[0] for r in rows],
            "text": [r[2] for r in rows],
            "domain": "",
            "kind": "pushpop",
            "pid": 4242,
            "tid": 4243,
            "depth": [r[3] for r in rows],
            "parent_id": [r[4] for r in rows],
            "path": [r[2] for r in rows],
        }
    )[list(NVTX_COLUMNS)]
    info = TraceInfo(
        path=Path(name), source_format="nsys-sqlite", nsys_version="2025.3.1.90", schema_version="3.11.3",
        origin_ns=0, duration_ns=1_100 * MS, hostname="gpu-node-1", export_schema="2024+",
    )
    return Trace.from_frames(
        info,
        kernels=kern,
        nvtx=nvtx,
        gpus=gpus,
        processes=pd.DataFrame({"pid": [4242], "name": [process]})[list(PROCESS_COLUMNS)],
        threads=pd.DataFrame({"pid": [4242], "tid": [4243], "name": [process]})[list(THREAD_COLUMNS)],
    )


def _facts(window: Window, kernel_names: list[str], nvtx_texts: list[str], process: str) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(7)
    bins = 250
    edges = np.linspace(window.start_ns, window.end_ns, bins + 1).astype("int64")
    util_parts, busy_parts, gap_parts = [], [], []
    for dev in (0, 1):
        util = np.clip(rng.normal(0.62 if dev == 0 else 0.45, 0.2, bins), 0, 1)
        util[40:55] = 0.0
        util[170:180] = 0.02
        width = np.diff(edges)
        util_parts.append(pd.DataFrame({"device": dev, "bin_start": edges[:-1], "bin_end": edges[1:],
                                        "busy_ns": (util * width).astype("int64"), "util": util}))
        busy_parts.append(pd.DataFrame({"device": dev, "start": edges[:-1],
                                        "end": edges[:-1] + (util * width).astype("int64")}))
        g_start = edges[:-1][util < 0.1]
        gap_parts.append(pd.DataFrame({
            "device": dev, "start": g_start, "end": g_start + width[0] - 1000,
            "duration": np.full(len(g_start), width[0] - 1000),
            "prev_op": kernel_names[0], "next_op": "memcpy H2D",
            "host_nvtx_range": nvtx_texts[0], "host_nvtx_path": f"{nvtx_texts[0]}/dataloader",
            "host_api": "cudaStreamSynchronize", "host_tid": 4243,
        }))
    names = kernel_names + ["ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel<4, AddFunctor<float>>",
                            "reduce_kernel<512, 1>", "softmax_warp_forward<float, float, float, 10>"]
    totals = np.array([90, 55, 40, 22, 12, 8, 5][: len(names)] + [3] * max(0, len(names) - 7), dtype="int64") * MS
    counts = np.array([400, 800, 120, 60, 900, 10, 7][: len(names)] + [2] * max(0, len(names) - 7))
    cats = ["gemm", "elementwise", "reduction", "softmax", "memory", "communication", "other"]
    top = pd.DataFrame({
        "name": names, "category": [cats[i % len(cats)] for i in range(len(names))],
        "count": counts, "total_ns": totals, "mean_ns": totals / counts, "median_ns": totals / counts * 0.9,
        "share": totals / totals.sum(),
    })
    cat = top.groupby("category", sort=True).agg(count=("count", "sum"), total_ns=("total_ns", "sum")).reset_index()
    cat["share"] = cat["total_ns"] / cat["total_ns"].sum()
    nvtx = pd.DataFrame({
        "name": [nvtx_texts[0], "forward", "backward", "optimizer_step", process],
        "path": [nvtx_texts[0], f"{nvtx_texts[0]}/forward", f"{nvtx_texts[0]}/backward",
                 f"{nvtx_texts[0]}/optimizer_step", f"{nvtx_texts[0]}/{process}"],
        "count": [8, 8, 8, 8, 1],
        "cpu_ns": np.array([720, 280, 300, 60, 15]) * MS,
        "gpu_ns": np.array([460, 190, 230, 30, 0]) * MS,
        "kernel_count": [3200, 1200, 1800, 200, 0],
    })
    # the timeline breakdown: per GPU the 900 ms window as compute / host work / launch-bound, per step
    # (8 steps of 112.5 ms) and per NVTX range; details and keys carry the trace's names
    k0, n0 = kernel_names[0], nvtx_texts[0]
    parts = (("compute", k0, 500), ("host_work", f"{n0}/dataloader", 300), ("launch_bound", "cudaLaunchKernel", 100))
    rows = []
    for dev in (0, 1):
        for cause, detail, ms in parts:
            rows.append((dev, "window", "", cause, detail, ms * MS))
            for i in range(2, 10):
                rows.append((dev, "step", nvtx_texts[i % len(nvtx_texts)] + ("" if i < len(nvtx_texts) else f"#{i}"),
                             cause, detail, ms * MS // 8))
        rows += [(dev, "range", f"{n0}/forward", "compute", k0, 500 * MS),
                 (dev, "range", f"{n0}/dataloader", "host_work", f"{n0}/dataloader", 300 * MS),
                 (dev, "range", "", "launch_bound", "cudaLaunchKernel", 100 * MS)]
    breakdown = pd.DataFrame(rows, columns=["device", "scope", "key", "cause", "detail", "duration_ns"])
    breakdown["share"] = breakdown["duration_ns"] / breakdown.groupby(["device", "scope", "key"])["duration_ns"].transform("sum")
    return {
        "timeline_breakdown": breakdown,
        "utilization": pd.concat(util_parts, ignore_index=True),
        "gpu_busy": pd.concat(busy_parts, ignore_index=True),
        "gpu_gaps": pd.concat(gap_parts, ignore_index=True),
        "top_kernels": top,
        "category_summary": cat,
        "nvtx_projection": nvtx,
    }


def _footprint(device: int, start_ms: int, end_ms: int) -> Footprint:
    return Footprint(np.array([device]), np.array([start_ms * MS]), np.array([end_ms * MS]))


def findings(kernel_names: list[str], nvtx_texts: list[str], evidence_rows: int = 40) -> list[Finding]:
    k0, n0 = kernel_names[0], nvtx_texts[0]
    gap_rows = tuple((0, 150 * MS + i * MS, 3 * MS + i, f"{n0}/dataloader", "cudaStreamSynchronize")
                     for i in range(evidence_rows))
    return [
        Finding(
            rule="gpu-idle-gaps", id="GPU001", severity=Severity.ERROR, title="GPU idle between steps",
            message=f"GPU 0 was idle 212 ms (21% of the window) in 38 gaps; 80% of it while the host was in "
                    f"NVTX range '{n0}/dataloader'.",
            category="gpu-utilization", scope=Scope("device", device=0), impact_ns=212 * MS, impact_pct=21.2,
            evidence_columns=("device", "start", "duration", "host_nvtx_path", "host_api"),
            evidence=gap_rows[:20], evidence_total=len(gap_rows),
            what="The GPU had no work queued for long stretches inside the analyzed window.",
            why="Idle GPU time is lost throughput: the step takes longer than the kernels need.",
            fix="Overlap data loading with compute (DataLoader num_workers>0, pin_memory=True), prefetch the "
                "next batch, and remove host synchronizations from the step loop.",
            references=("https://docs.nvidia.com/nsight-systems/UserGuide/index.html",
                        "https://pytorch.org/docs/stable/data.html#memory-pinning"),
            explains=("sync-in-loop",),
            footprint=_footprint(0, 150, 362),
        ),
        Finding(
            rule="sync-in-loop", id="API002", severity=Severity.WARNING, title="Host synchronizes every step",
            message="cudaStreamSynchronize called 8 times inside the step loop (once per step), blocking the "
                    "CPU for 96 ms in total.",
            category="synchronization", scope=Scope("trace"), impact_ns=96 * MS, impact_pct=9.6,
            evidence_columns=("api", "calls", "total_ns", "nvtx_path"),
            evidence=(("cudaStreamSynchronize", 8, 96 * MS, f"{n0}/loss.item()"),), evidence_total=1,
            what="A blocking synchronization in the loop.", why="The CPU stops queuing work.",
            fix="Avoid .item() / .cpu() in the step; accumulate losses on the GPU.",
            explained_by=("gpu-idle-gaps",),
            footprint=_footprint(0, 200, 296),  # inside the idle gaps: the same time, counted once
        ),
        Finding(
            rule="low-occupancy", id="KRN003", severity=Severity.WARNING,
            title="Kernel limited by registers", message=f"{k0} reaches 25% theoretical occupancy "
            "(limiter: registers, 168 per thread).",
            category="kernel", scope=Scope("kernel", kernel=k0), impact_ns=31 * MS, impact_pct=3.1,
            evidence_columns=("name", "block_size", "registers", "theoretical_occupancy", "count"),
            evidence=((k0, 256, 168, 0.25, 400),), evidence_total=1,
            what="Few warps resident per SM.", why="Latency cannot be hidden.",
            fix="Cap registers with __launch_bounds__ or -maxrregcount; reduce per-thread state.",
            references=("CUDA C++ Best Practices Guide, section 'Occupancy'",),
            footprint=_footprint(1, 500, 600),
        ),
        Finding(
            rule="short-kernels", id="KRN010", severity=Severity.INFO, title="Many very short kernels",
            message="62% of launches run under 10 us; launch overhead dominates them.",
            category="launch", scope=Scope("trace"), impact_ns=None, impact_pct=None,
            fix="Fuse elementwise chains (torch.compile) or capture the step in a CUDA graph.",
        ),
    ]


def ncu_frame(kernel_names: list[str]) -> pd.DataFrame:
    names = kernel_names + ["ampere_sgemm_128x64_tn", "reduce_kernel<512, 1>", "elementwise_add"]
    return pd.DataFrame({
        "name": names,
        "duration_ns": [900_000, 420_000, 180_000, 60_000][: len(names)] + [30_000] * max(0, len(names) - 4),
        "arithmetic_intensity": [42.0, 120.0, 0.9, 0.08][: len(names)] + [0.5] * max(0, len(names) - 4),
        "achieved_flops": [2.1e13, 4.4e13, 3.0e11, 1.5e11][: len(names)] + [1e11] * max(0, len(names) - 4),
        "peak_flops": 6.7e13,
        "peak_bandwidth": 3.35e12,
        "sm_throughput_pct": [71.0, 88.5, 12.0, 5.5][: len(names)] + [9.0] * max(0, len(names) - 4),
        "memory_throughput_pct": [35.0, 22.0, 81.0, 92.0][: len(names)] + [60.0] * max(0, len(names) - 4),
        "matched_ns": [90_000_000, 55_000_000, 40_000_000, 8_000_000][: len(names)] + [0] * max(0, len(names) - 4),
    })


def make_analysis(
    name: str = "train_step.sqlite",
    *,
    kernel_names: list[str] | None = None,
    nvtx_texts: list[str] | None = None,
    process: str = "python3 train.py",
    with_ncu: bool = True,
    with_phases: bool = True,
    drop_facts: tuple[str, ...] = (),
    extra_findings: list[Finding] | None = None,
    evidence_rows: int = 40,
) -> Analysis:
    """A deterministic two-GPU analysis with every section a report can show."""
    kernel_names = kernel_names or ["flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>"]
    nvtx_texts = nvtx_texts or [f"step_{i}" for i in range(10)]
    window = Window(100 * MS, 1_000 * MS, "nvtx", "steps step_2..step_9 (NVTX), warmup excluded",
                    setup_ns=100 * MS)
    trace = _trace(name, kernel_names, nvtx_texts, process)
    frames = _facts(window, kernel_names, nvtx_texts, process)
    if with_phases:
        frames["phases"] = pd.DataFrame({
            "name": ["forward", "backward", "optimizer_step"],
            "path": [f"{nvtx_texts[0]}/forward", f"{nvtx_texts[0]}/backward", f"{nvtx_texts[0]}/optimizer_step"],
            "count": [8, 8, 8], "cpu_ns": np.array([280, 300, 60]) * MS, "gpu_ns": np.array([190, 230, 30]) * MS,
            "gpu_share": [0.41, 0.5, 0.07],
            # forward's ranges end before their GPU work (async); backward waits; optimizer is launch-bound
            "gpu_span_ns": np.array([600, 290, 45]) * MS, "waited": ["no", "yes", "3 of 8"],
            "measure": ["gpu", "cpu_wall", "cpu_wall"], "phase_ns": np.array([600, 300, 60]) * MS,
        })
    for f in drop_facts:
        frames.pop(f, None)
    found = findings(kernel_names, nvtx_texts, evidence_rows) + list(extra_findings or [])
    ncu: Any = FakeNcu(ncu_frame(kernel_names)) if with_ncu else None
    return Analysis(trace=trace, window=window, findings=found, facts=DictFacts(frames),
                    rules_file="rules/default.yaml", parameters={"gpu-idle-gaps": {"min_gap_ms": 1.0}}, ncu=ncu)
