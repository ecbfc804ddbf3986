"""Strong scaling: the same training loop (same global batch) on 1 and N GPUs, and where the time went.

Each run is one trace (a 1-GPU run, or one report holding a whole job) or the rank files of one job
(``NAME_rank0..``). For every run: GPUs, mean step time, compute per step (union of compute kernels
of one rank), exposed communication per step (no compute beside it, waiting left out), waiting per
step (for a late rank), and the GPU time per step of each phase (the NVTX ranges directly inside the
step, communication kernels launched in them included). Against the 1-GPU run:

* speedup = T1 / TN, efficiency = speedup / N;
* lost time per step = TN - T1 / N, split into compute that did not shrink by N (compute_N - compute_1/N),
  exposed communication, waiting, and the rest (host time, launch gaps);
* per phase: its GPU time per step on N GPUs against 1/N of the 1-GPU run's (an optimizer step that
  updates every parameter on every rank does not shrink, a backward on half the batch does).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer._paths import trace_stem
from analyzer.analysis import step_spans
from analyzer.job.rank import phase_gpu_per_step

_RANK_FILE = re.compile(r"^(?P<job>.+?)[_\-.]rank\d+$")


@dataclass
class ScalingRun:
    label: str
    gpus: int
    steps: int
    step_ns: float
    compute_ns: float  # per step, mean over ranks
    exposed_ns: float  # per step, mean over ranks
    wait_ns: float  # per step, mean over ranks
    phases: dict[str, float] = field(default_factory=dict)  # generic phase path -> GPU ns per step


@dataclass
class ScalingResult:
    runs: list[ScalingRun]
    table: pd.DataFrame
    phases: pd.DataFrame
    notes: list[str]


def group_runs(paths: Sequence[Path]) -> list[list[Path]]:
    """Inputs grouped into runs: files named ``<job>_rank<N>`` with the same ``<job>`` are one run."""
    groups: dict[str, list[Path]] = {}
    order: list[str] = []
    for p in paths:
        m = _RANK_FILE.match(trace_stem(p))
        key = m.group("job") if m else str(p)
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(p)
    return [sorted(groups[k]) for k in order]


def _single_run(label: str, analysis: Any) -> ScalingRun:
    from analyzer.facts.comm import compute_kernel_mask
    from analyzer.facts.registry import FactContext
    from analyzer.facts._util import union_intervals

    store, w = analysis.facts, analysis.window
    spans = step_spans(w)
    steps = len(spans)
    step_ns = float(np.mean([e - s for s, e in spans])) if steps else float(w.duration_ns)
    k = analysis.trace.kernels
    compute = 0.0
    if len(k):
        ctx = FactContext(trace=analysis.trace, window=w, store=store, options=store.options)
        sel = compute_kernel_mask(ctx)
        u = union_intervals(np.clip(k["start"].to_numpy()[sel], w.start_ns, w.end_ns),
                            np.clip(k["end"].to_numpy()[sel], w.start_ns, w.end_ns))
        compute = float((u.end - u.start).sum())
    overlap = store.get("comm_overlap")
    exposed = float(overlap["exposed_transfer_ns"].sum()) if len(overlap) else 0.0
    n = max(steps, 1)
    return ScalingRun(label, 1, steps, step_ns, compute / n, exposed / n, 0.0, phase_gpu_per_step(store, steps))


def _job_run(label: str, job: Any) -> ScalingRun:
    ranks = job.tables.tables["job_ranks"]
    steps = ranks["steps"].replace(0, np.nan)
    per_step = lambda col: float((ranks[col] / steps).mean())  # noqa: E731
    phases: dict[str, list[float]] = {}
    for res in job.ranks:
        for k, v in res.phases.items():
            phases.setdefault(k, []).append(v)
    return ScalingRun(label, int(job.world_size), int(ranks["steps"].min()), float(ranks["step_ns"].mean()),
                      per_step("compute_ns"), per_step("exposed_transfer_ns"), per_step("wait_ns"),
                      {k: float(np.mean(v)) for k, v in phases.items()})


def strong_scaling(paths: Sequence[Path], options: Any = None, *, progress: Any = None) -> ScalingResult:
    """Analyze each run of ``paths`` (see :func:`group_runs`) and compare it with the 1-GPU run."""
    from analyzer.errors import InputError
    from analyzer.pipeline import AnalysisOptions, analyze_inputs  # the whole analysis: imported when run

    options = options or AnalysisOptions()
    runs: list[ScalingRun] = []
    notes: list[str] = []
    for group in group_runs(paths):
        job_name = _RANK_FILE.sub(r"\g<job>", trace_stem(group[0]))
        label = f"{job_name} ({len(group)} rank files)" if len(group) > 1 else trace_stem(group[0])
        out = analyze_inputs(group, options, progress=progress)
        if out.job is not None:
            runs.append(_job_run(label, out.job))
        else:
            for p, a in zip(group, out.analyses or []):
                runs.append(_single_run(trace_stem(p), a))
    runs.sort(key=lambda r: (r.gpus, r.label))
    base = next((r for r in runs if r.gpus == 1), None)
    if base is None:
        raise InputError(Path(paths[0]), "no 1-GPU run among the inputs",
                         hint="give the same training loop run on one GPU (same global batch) next to the multi-GPU runs")
    if sum(1 for r in runs if r.gpus == 1) > 1:
        notes.append(f"several 1-GPU runs; {base.label} is the baseline")
    rows = []
    for r in runs:
        ideal = base.step_ns / r.gpus
        lost = r.step_ns - ideal
        compute_lost = r.compute_ns - base.compute_ns / r.gpus
        other = lost - compute_lost - r.exposed_ns - r.wait_ns
        rows.append({
            "run": r.label, "gpus": r.gpus, "steps": r.steps, "step_ns": r.step_ns,
            "speedup": base.step_ns / r.step_ns if r.step_ns else np.nan,
            "efficiency": base.step_ns / r.step_ns / r.gpus if r.step_ns else np.nan,
            "lost_ns": lost if r.gpus > 1 else 0.0,
            "compute_lost_ns": compute_lost if r.gpus > 1 else 0.0,
            "exposed_comm_ns": r.exposed_ns, "wait_ns": r.wait_ns,
            "other_ns": other if r.gpus > 1 else 0.0,
        })
    phase_rows = []
    names = sorted({k for r in runs for k in r.phases}, key=lambda k: -base.phases.get(k, 0.0))
    for name in names:
        b = base.phases.get(name, np.nan)
        for r in runs:
            if r.gpus == 1:
                continue
            got = r.phases.get(name, np.nan)
            phase_rows.append({"phase": name, "run": r.label, "gpus": r.gpus, "one_gpu_ns": b,
                               "ideal_ns": b / r.gpus, "gpu_ns": got, "excess_ns": got - b / r.gpus})
    notes.append("strong scaling assumes every run processes the same global batch per step")
    return ScalingResult(runs, pd.DataFrame(rows), pd.DataFrame(phase_rows), notes)


def render_scaling(result: ScalingResult) -> str:
    """Markdown tables of a :class:`ScalingResult`."""
    from analyzer.reports.format import fmt_duration, fmt_share
    from analyzer.reports.markdown import md_text

    def ms(v: float) -> str:
        return "—" if v is None or not np.isfinite(v) else fmt_duration(v)

    lines = ["# Strong scaling", "",
             "| Run | GPUs | Step (mean) | Speedup | Efficiency | Lost / step | compute not scaled | "
             "exposed comm. | waiting | other |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result.table.itertuples(index=False):
        lines.append(f"| {md_text(r.run, 80)} | {r.gpus} | {ms(r.step_ns)} | {r.speedup:.2f}x | "
                     f"{fmt_share(r.efficiency)} | {ms(r.lost_ns)} | {ms(r.compute_lost_ns)} | "
                     f"{ms(r.exposed_comm_ns)} | {ms(r.wait_ns)} | {ms(r.other_ns)} |")
    if len(result.phases):
        lines += ["", "GPU time per step of each phase (kernels launched inside it, communication included), "
                  "against 1/N of the 1-GPU run:", "",
                  "| Phase | Run | GPUs | 1 GPU | ideal (1 GPU / N) | measured | excess |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for p in result.phases.itertuples(index=False):
            lines.append(f"| {md_text(p.phase, 60)} | {md_text(p.run, 60)} | {p.gpus} | {ms(p.one_gpu_ns)} | "
                         f"{ms(p.ideal_ns)} | {ms(p.gpu_ns)} | {ms(p.excess_ns)} |")
    lines += [""] + [f"_{md_text(n, 300)}_" for n in result.notes]
    return "\n".join(lines) + "\n"


__all__ = ["ScalingResult", "ScalingRun", "group_runs", "render_scaling", "strong_scaling"]
