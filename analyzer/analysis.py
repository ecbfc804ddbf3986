"""The result of analyzing one trace: what reports render.

``Analysis.facts`` is a :class:`analyzer.facts.FactStore`: ``facts.get(name)`` computes a derived
table on first use (and its dependencies), once, restricted to the analysis window where the fact says
so. Fact names and columns that reports rely on (all times ns, trace-relative):

``gpu_busy``          device, start, end                      union of kernel/memcpy/memset intervals
``gpu_gaps``          device, start, end, duration, prev_op, next_op, host_nvtx_range, host_nvtx_path,
                      host_api, host_tid                      idle gaps inside the window
``utilization``       device, bin_start, bin_end, busy_ns, util (0..1)   fixed-width bins over the window
``kernel_categories`` one row per kernel: the kernels frame + ``category``
``category_summary``  category, count, total_ns, share (of kernel time in window)
``top_kernels``       name, category, count, total_ns, mean_ns, median_ns, share
``nvtx_projection``   name, path, count, cpu_ns, gpu_ns, kernel_count   (GPU time of ops launched inside),
                      gpu_span_ns, waited, measure, phase_ns          (did the range time its work or only
                      its launches; ``nvtx_instances`` per instance; both from the phases' index)
``occupancy``         one row per kernel launch config: name, block_size, registers, smem,
                      theoretical_occupancy (0..1), limiter, blocks_per_sm, waves
``sync_calls``        api rows that synchronize host and device (+ nvtx attribution)
``alloc_calls``       api rows that allocate/free device or pinned memory
``copy_throughput``   memcpy rows + ``throughput`` (bytes/s)
``phases``            per NVTX range name/path: count, CPU time stats, GPU time projected, GPU span,
                      waited, which number measures the phase (see :mod:`analyzer.facts.phase_table`)
``ncu_kernels``       Nsight Compute launches joined to the timeline (empty without ``--ncu``), with
                      ``ncu_stalls`` and ``ncu_rules``
``steps``             step, start, end, gpu_end, done, duration, cpu_ns, gpu_ns, kernel_count: one row
                      per loop iteration in the window (``Window.steps``), ``duration`` from the previous
                      step's completion to this one's (see :mod:`analyzer.facts.steps`)

``python -c "from analyzer.facts import all_specs; print(list(all_specs()))"`` lists every fact; each
declares its columns (``FactSpec.columns``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pandas as pd

from analyzer.findings import Finding, NotChecked
from analyzer.loading.model import NcuReport, Trace


@dataclass(frozen=True)
class StepSpans:
    """The iterations of the program's loop inside the window, as the window chooser found them.

    ``source`` ``"nvtx"``: the user's repeated NVTX step ranges (``range_ids`` are their NVTX row ids,
    so the GPU work each one launched is known by attribution); ``"periodic"``: no usable NVTX, the
    GPU op sequence repeats every ``period`` ops and each span is one period (from the start of its
    first op to the start of the next period's first op); ``"annotation"``: a program annotation that
    occurs once per iteration without enclosing it marks them, each span from one instance's start to the
    next (``range_ids``: the instances, ``period``: the usual GPU ops per iteration). The ``steps`` fact
    turns them into per-step durations.
    """

    source: str  # "nvtx" | "periodic" | "annotation"
    description: str  # e.g. "12 NVTX steps step_0..step_11" or "GPU op sequence period of 40 ops"
    names: tuple[str, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    range_ids: tuple[int, ...] = ()  # NVTX row ids ("nvtx" only)
    period: int = 0  # ops per period ("periodic"; "annotation": the usual ops per iteration)

    def __len__(self) -> int:
        return len(self.starts)


@dataclass(frozen=True)
class Window:
    """The span analyzed for steady-state rules, and how it was chosen."""

    start_ns: int
    end_ns: int
    source: str  # "nvtx" | "auto" | "user" | "full"
    description: str  # human text, e.g. "steps step_2..step_9 (NVTX), warmup excluded"
    setup_ns: int = 0  # time before the window that is one-time setup (reported as info)
    steps: StepSpans | None = field(default=None, compare=False, repr=False)  # loop iterations inside

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


def step_spans(window: Window) -> tuple[tuple[int, int], ...]:
    """(start, end) of each iteration of the program's loop in ``window`` (``Window.steps``), in time
    order, however the window chooser found them (:class:`StepSpans`: the user's NVTX step ranges, a
    repeated annotation, or the GPU op sequence's period); empty when it found none. One step count for
    a trace alone and for each rank of a job (a rank without NVTX steps, e.g. nsys-ai's FSDP slices
    recorded under ``emit_nvtx()``, still has the iterations its own analysis states)."""
    steps = getattr(window, "steps", None)
    if steps is None or not len(steps):
        return ()
    return tuple(zip((int(s) for s in steps.starts), (int(e) for e in steps.ends)))


class FactSource(Protocol):
    def get(self, name: str) -> pd.DataFrame: ...


#: Every fact the reports read from an :class:`Analysis` (its sections in
#: :mod:`analyzer.reports.viewmodel` and the diff baseline of :func:`analyzer.reports.baseline.summarize`);
#: the pipeline keeps these past the rules and frees the others after their last rule (a test checks
#: that building a report reads no other fact).
REPORT_FACTS: frozenset[str] = frozenset({
    "gpu_busy", "utilization", "gpu_gaps", "gpu_ops", "category_summary", "top_kernels", "nvtx_projection",
    "nvtx_instances", "phases", "steps", "copy_throughput", "code_locations", "sm_activity", "energy",
    "energy_steps", "timeline_breakdown", "memory_timeline", "memory_steps", "memory_ranges", "memory_growth",
    "graph_replays",  # the diff summary: CUDA graphs traced without their kernels
})


@dataclass
class Analysis:
    trace: Trace
    window: Window
    findings: list[Finding]
    facts: FactSource
    rules_file: str = ""
    parameters: dict[str, dict[str, object]] = field(default_factory=dict)  # rule -> parameter -> value
    ncu: NcuReport | None = None  # Nsight Compute results joined to the kernels (the trace's ``ncu``)
    # rules not run because the trace lacks data they need (see analyzer.loading.capabilities)
    not_checked: list[NotChecked] = field(default_factory=list)
    #: (rule name, why) of the pack's rules that could not run on this input (e.g. timeline rules on an
    #: Nsight Compute report alone)
    not_applicable: tuple[tuple[str, str], ...] = ()
    #: rule name -> its latent impact (ns): the impact of the groups its ``where`` kept but its
    #: ``condition`` did not fire on (below a threshold); rules with none are absent
    latent_impacts: dict[str, int] = field(default_factory=dict)
    #: the rules (names) that judge individual kernels, those CUDA graphs run included: their source fact
    #: is per-kernel (:attr:`analyzer.facts.registry.FactSpec.per_kernel`) and they do not read ``in_graph``
    #: (a rule that does treats graph kernels its own way, as tiny-kernels leaves them out)
    graph_kernel_rules: tuple[str, ...] = ()

    @property
    def ncu_only(self) -> bool:
        """An Nsight Compute report analyzed without a timeline."""
        return self.trace.ncu_only
