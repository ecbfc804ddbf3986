"""A multi-GPU job, end to end: per-rank analyses plus cross-rank facts, serially or on Dask.

1. Phase 1 per input file (where the file is): load, split a multi-process report into ranks
   (:func:`analyzer.job.ranks.split_processes`), prepare each rank through the single-trace pipeline
   (:func:`analyzer.job.rank.prepare_rank`). Only :class:`RankSummary` objects come back.
2. Here: number the ranks, decide whether the inputs are one job, match collectives and align clocks
   (:mod:`analyzer.job.cross`), compute every rank's waits and the intervals in which the others
   waited for it.
3. Phase 2 per rank (where its trace is): rules, its report section, what it did while others
   waited (:func:`analyzer.job.rank.finish_rank`). Only :class:`RankResult` objects come back.
4. Here: the job tables (:mod:`analyzer.facts.job`) and the job rules on them.

With ``scheduler`` (a Dask ``distributed.Client`` or a scheduler address), steps 1 and 3 run as Dask
tasks (:mod:`analyzer.job.remote`): each file's loaded ranks stay in its worker's process between the
phases, only summaries and results travel or are held by Dask, and every wait has a time limit, so
a failed task, a dead worker or a stalled cluster ends the run with one line instead of a hang. The result is the same object as the serial path's (a test checks that the
reports are byte for byte equal).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from analyzer.analysis import Analysis, StepSpans, Window, step_spans
from analyzer.facts.comm import JobRankContext, bus_factor
from analyzer.findings import Finding
from analyzer.job.cross import RankComm, align, waits
from analyzer.job.outcome import JobOutcome
from analyzer.facts.job import (
    JOB_COLLECTIVES_COLUMNS,
    JOB_RANKS_COLUMNS,
    JobTables,
    empty,
)
from analyzer.job.rank import (
    AloneResult,
    FileState,
    RankJobInput,
    RankResult,
    RankSummary,
    finish_file,
    generic_path,
    prepare_file,
)
from analyzer.job.ranks import number_ranks
from analyzer.trace_analysis import AnalysisOptions, pack_parameters, rules_label

from analyzer.loading.model import NcuReport, Trace
from analyzer.loading.vocabulary import CUDA_WORDS, Vocabulary, job_vocabulary
from analyzer.progress import Progress

if TYPE_CHECKING:
    from analyzer.job.remote import Scheduler
    from analyzer.rules.model import RulePack
#: a rank counts as late at a collective when it arrived this much after the second latest
LATE_MIN_NS = 20_000
#: lateness intervals described per rank (the largest lags)
LATE_DESCRIBED = 400


@dataclass
class JobAnalysis:
    """What a job report renders."""

    ranks: list[RankResult]  # in rank order
    findings: list[Finding]  # job-level findings (straggler, rank-imbalance, collective-bandwidth-low)
    tables: JobTables
    window: Window  # job window, reference rank clock
    world_size: int
    how: str  # how ranks were numbered
    offsets: dict[int, int]
    notes: list[str] = field(default_factory=list)
    rules_file: str = ""
    parameters: dict[str, dict[str, object]] = field(default_factory=dict)
    #: the ranks' words (:func:`analyzer.loading.vocabulary.job_vocabulary`): a job of ROCm ranks says
    #: HIP, RCCL and compute units in its findings and report
    words: Vocabulary = CUDA_WORDS


# -- phase 1/3 task bodies (module-level: picklable for Dask) ---------------------------------------
# -- job detection ---------------------------------------------------------------------------------
def several_runs(summaries: Sequence[RankSummary]) -> str:
    """Why these inputs are several runs rather than one job ("" when nothing they record says so): a
    rank number that every input states from the same source (NCCL, torch.distributed, the file name)
    appearing twice, or different world sizes. Two runs of a 2-rank job in one folder are never one
    4-rank job (numbered by input order, with the time between the runs as clock skew)."""
    for how in ("nccl", "torch.distributed", "file name"):
        ranks = [s.hint.rank for s in summaries if s.hint.how == how and s.hint.rank is not None]
        if len(ranks) != len(summaries):
            continue
        repeated = sorted({r for r in ranks if ranks.count(r) > 1})
        if repeated:
            times = max(ranks.count(r) for r in repeated)
            many = len(repeated) > 1
            return (f"the inputs hold {times} runs: {how} rank{'s' if many else ''} "
                    f"{', '.join(map(str, repeated))} appear{'' if many else 's'} {times} times")
        break
    worlds = sorted({int(s.hint.world_size) for s in summaries if s.hint.world_size})
    if len(worlds) > 1:
        return f"the inputs come from runs of different sizes (world size {', '.join(map(str, worlds))})"
    return ""


def is_one_job(summaries: Sequence[RankSummary]) -> tuple[bool, str]:
    """Whether these ranks look like one job: at least two, all with communication kernels, and
    their GPU activity overlapping in time (same clock) or matching collective counts."""
    if len(summaries) < 2:
        return False, "a single rank"
    runs = several_runs(summaries)
    if runs:
        return False, runs
    if any(s.comm.empty for s in summaries):
        missing = [s.label for s in summaries if s.comm.empty]
        said = job_vocabulary(s.words for s in summaries).text("no NCCL kernels in")
        return False, f"{said} {', '.join(missing)}"
    spans = [(s.origin_ns + s.first_op_ns, s.origin_ns + s.last_op_ns) for s in summaries]
    if len({s.clock_id for s in summaries}) == 1 and summaries[0].clock_id:
        lo = max(a for a, _ in spans)
        hi = min(b for _, b in spans)
        if hi <= lo:
            return False, "their GPU activity does not overlap in time"
    return True, ""


def _rank_comm(summary: RankSummary, rank: int) -> RankComm:
    c = summary.comm
    return RankComm(rank=rank, start=c["start"].to_numpy(dtype=np.int64), end=c["end"].to_numpy(dtype=np.int64),
                    name=c["collective"].to_numpy(dtype=object), group=c["comm"].to_numpy(dtype=object),
                    origin_ns=summary.origin_ns, clock_id=summary.clock_id)


# -- scheduling -------------------------------------------------------------------------------------
class _Serial:
    """Runs the phases here (the reference the Dask path must equal)."""

    def __init__(self, ncu: NcuReport | None = None, progress: Progress = None,
                 loaded: dict[str, Trace] | None = None) -> None:
        self.files: list[FileState] = []
        self.ncu = ncu
        self.progress = progress
        self.loaded = dict(loaded or {})  # path -> a trace the caller already loaded

    def phase1(self, paths: Sequence[Path], options: AnalysisOptions) -> list[list[RankSummary]]:
        out = []
        index = 0
        for p in paths:
            fs = prepare_file(str(p), index, options, self.ncu, keep_trace=True, progress=self.progress,
                              trace=self.loaded.pop(str(p), None))
            index += len(fs.summaries)
            self.files.append(fs)
            out.append(fs.summaries)
        return out

    def phase2(self, pack: RulePack, inputs: list[list[RankJobInput | None]]) -> list[list[RankResult]]:
        return [finish_file(fs, pack, inp) for fs, inp in zip(self.files, inputs)]

    def separately(self, pack: RulePack, options: AnalysisOptions) -> list[Analysis] | None:
        """Each input analyzed on its own, from the states already prepared (not a job)."""
        from analyzer.analysis import REPORT_FACTS
        from analyzer.trace_analysis import analyze_loaded, finish

        out = []
        for fs in self.files:
            if fs.trace is not None:  # a multi-process report that is not a job: the whole report
                out.append(analyze_loaded(fs.trace, pack, options=options, ncu=self.ncu))
            else:
                out.append(finish(fs.states[0].store, pack, keep=REPORT_FACTS))
        return out

    def release(self) -> None:
        """Nothing is held elsewhere."""


class _Runner(Protocol):
    """Where the phases run: here (:class:`_Serial`) or on Dask (:class:`analyzer.job.remote.DaskRunner`)."""

    def phase1(self, paths: Sequence[Path], options: AnalysisOptions) -> list[list[RankSummary]]: ...

    def phase2(self, pack: RulePack, inputs: list[list[RankJobInput | None]]) -> list[list[RankResult]]: ...

    def separately(self, pack: RulePack, options: AnalysisOptions) -> list[Analysis] | list[AloneResult] | None: ...

    def release(self) -> None: ...


# -- the job ----------------------------------------------------------------------------------------
def analyze_job(
    paths: Sequence[Path],
    options: AnalysisOptions,
    *,
    pack: RulePack | None = None,
    scheduler: Scheduler | None = None,
    workers: int | None = None,
    force: bool | None = None,
    ncu: NcuReport | None = None,
    progress: Progress = None,
    loaded: dict[str, Trace] | None = None,
) -> JobOutcome:
    """Analyze ``paths`` (trace files, already told apart from Nsight Compute files) as one multi-GPU
    job: the per-rank analyses and the cross-rank facts. ``force`` True: a job even if it does not look
    like one; None: detect. When the inputs are not one job, the outcome carries the per-input analyses
    instead (serial runs; a Dask run leaves them to the caller: ``analyses`` None). Accepted findings
    are the caller's next step (:meth:`JobOutcome.mark_accepted`, :func:`analyzer.pipeline.analyze_inputs`)."""
    from analyzer.trace_analysis import load_rules

    pack = pack if pack is not None else load_rules(options)
    cleanup = contextlib.ExitStack()
    runner: _Runner
    if scheduler is not None:
        from analyzer.job.remote import DaskRunner, dask_client, quiet_dask

        with contextlib.ExitStack() as opening:
            opening.enter_context(quiet_dask())
            client, close = dask_client(scheduler, workers)
            opening.callback(close)
            runner = DaskRunner(client, options, ncu)
            cleanup = opening.pop_all()  # closed (cluster, then Dask's logging) when the job ends
    else:
        runner = _Serial(ncu, progress, loaded)
    try:
        if progress:
            progress(f"job: preparing {len(paths)} input(s)")
        per_file = runner.phase1(paths, options)
        summaries = [s for fs in per_file for s in fs]
        ok, why = is_one_job(summaries)
        notes: list[str] = []
        if not ok and (not force or len(summaries) < 2):
            done = runner.separately(pack, options)
            if done and all(isinstance(d, AloneResult) for d in done):
                return JobOutcome(None, None, why, alone=[d for d in done if isinstance(d, AloneResult)])
            return JobOutcome(None, [d for d in done if isinstance(d, Analysis)] if done is not None else None, why)
        if not ok:
            notes.append(f"analyzed as one job on request (--job) although {why}")
        ranks, how, rank_notes = number_ranks([s.hint for s in summaries])
        notes += rank_notes
        world = max(ranks) + 1 if ranks else 0
        declared = [s.hint.world_size for s in summaries if s.hint.world_size]
        if declared and max(declared) > len(summaries):
            present = sorted(ranks)
            missing = sorted(set(range(max(declared))) - set(present))
            notes.append(f"{len(summaries)} of {max(declared)} ranks given (missing: "
                         f"{', '.join(map(str, missing[:16]))}{' ...' if len(missing) > 16 else ''}); "
                         "cross-rank facts cover the ranks given")
            world = max(declared)
        elif len(set(ranks)) < world:
            missing = sorted(set(range(world)) - set(ranks))
            notes.append(f"rank(s) {', '.join(map(str, missing))} missing; cross-rank facts cover the ranks given")
        if progress:
            progress("job: matching collectives across ranks")
        plan = _cross_rank(summaries, ranks, notes)
        full = featured_ranks(plan, options.rank_sections)
        if len(full) < len(summaries):
            shown = sorted(ranks[k] for k in full)
            if shown:
                notes.append(f"{len(full)} of {len(summaries)} ranks shown in full ({plural_ranks(shown)}), chosen in "
                             "turn as the rank the others waited for most, the one with the most and the one with the "
                             "least compute per step, and the most idle one; every other rank is its row of the "
                             "per-rank table (--rank-sections all shows every rank in full)")
            else:  # --rank-sections 0
                notes.append(f"none of the {len(summaries)} ranks shown in full (--rank-sections 0): each rank is its "
                             "row of the per-rank table (--rank-sections all shows every rank in full)")
        inputs: list[list[RankJobInput | None]] = []
        order = sorted(range(len(summaries)), key=lambda i: ranks[i])
        section_of = {i: n + 1 for n, i in enumerate(order)}
        k = 0
        for fs in per_file:
            row: list[RankJobInput | None] = []
            for _s in fs:
                row.append(plan.inputs(k, ranks[k], world, how, section_of[k], full=k in full))
                k += 1
            inputs.append(row)
        plan.drop_comm()  # every rank's input is built: the collectives table reads the reference rank's only
        if progress:
            progress("job: finishing each rank")
        results = [r for fr in runner.phase2(pack, inputs) for r in fr]
        for r, s in zip(results, summaries):  # the client's summaries carry the final input indices
            r.summary = s
    except BaseException:
        runner.release()
        raise
    finally:
        cleanup.close()
    results.sort(key=lambda r: r.rank)
    tables = _tables(results, plan, world, how)
    for r in results:  # the job's lateness table holds them now
        r.lateness = r.lateness.iloc[:0]
    words = job_vocabulary(s.words for s in summaries)
    findings = _job_findings(pack, tables, plan.window, words)
    return JobOutcome(JobAnalysis(
        ranks=results, findings=findings, tables=tables, window=plan.window, world_size=world, how=how,
        offsets=plan.offsets, notes=notes + plan.notes,
        rules_file=rules_label(pack),
        parameters=pack_parameters(pack), words=words,
    ))


@dataclass
class _Plan:
    """Cross-rank facts before phase 2 (reference rank clock)."""

    summaries: list[RankSummary]
    ranks: list[int]
    offsets: dict[int, int]
    skews: dict[int, int]
    per_rank: pd.DataFrame
    per_instance: pd.DataFrame
    window: Window
    lane_span: tuple[int, int] | None
    notes: list[str]

    def drop_comm(self) -> None:
        """Every rank's communication kernels dropped but the reference rank's (the lowest aligned one,
        whose kernels describe the collectives in the job's table): once phase 2's inputs are built,
        the client keeps one rank's kernels, not the job's."""
        ref = min(self.offsets) if self.offsets else None
        for s, r in zip(self.summaries, self.ranks):
            if r != ref and len(s.comm):
                s.comm = s.comm.iloc[:0]

    def inputs(self, k: int, rank: int, world: int, how: str, section: int, full: bool = True) -> RankJobInput:
        s = self.summaries[k]
        off = self.offsets.get(rank)
        if off is None or self.per_rank.empty:
            ctx = JobRankContext(rank=rank, world_size=world)
            late = pd.DataFrame({"inst": pd.Series(dtype="int64"), "start": pd.Series(dtype="int64"),
                                 "end": pd.Series(dtype="int64")})
            span = None
        else:
            mine = self.per_rank.loc[self.per_rank["rank"] == rank].sort_values("kernel")
            kernel = mine["kernel"].to_numpy(dtype=np.int64)
            own_start = s.comm["start"].to_numpy(dtype=np.int64)[kernel]
            inst = self.per_instance.set_index("inst")
            last = inst["last_arrival"].reindex(mine["inst"]).to_numpy(dtype=np.int64) - off
            last_rank = inst["last_rank"].reindex(mine["inst"]).to_numpy(dtype=np.int64)
            order = np.argsort(own_start, kind="stable")
            ctx = JobRankContext(rank=rank, world_size=world, kernel_start=own_start[order],
                                 arrival_last=last[order], wait_ns=mine["wait_ns"].to_numpy(dtype=np.int64)[order],
                                 last_rank=last_rank[order])
            lead = self.per_instance.loc[(self.per_instance["last_rank"] == rank)
                                         & (self.per_instance["lead_ns"] >= LATE_MIN_NS)]
            lead = lead.nlargest(LATE_DESCRIBED, "lead_ns").sort_values("inst")
            late = pd.DataFrame({"inst": lead["inst"].to_numpy(dtype=np.int64),
                                 "start": lead["second_arrival"].to_numpy(dtype=np.int64) - off,
                                 "end": lead["last_arrival"].to_numpy(dtype=np.int64) - off})
            span = (self.lane_span[0] - off, self.lane_span[1] - off) if self.lane_span else None
        return RankJobInput(rank=rank, world_size=world, how=how, context=ctx, late_intervals=late,
                            lane_span=span, section_index=section, full=full)


def plural_ranks(ranks: Sequence[int]) -> str:
    """``rank 3`` or ``ranks 0, 3, 7``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def featured_ranks(plan: _Plan, limit: int | None) -> set[int]:
    """The ranks (input indices) a job report shows in full when it has more than ``limit`` (None: every
    rank): in turn, the next of the ranks the others waited for most (the stragglers: the time by which
    each arrived after the second latest, summed over the collectives it reached last), with the most
    compute per step, with the least, and with the most idle GPU (the least compute in its window),
    until ``limit`` are chosen. Decided before phase 2 from the ranks' summaries and the cross-rank
    waits, so the other ranks never build a section and the client never holds one."""
    n = len(plan.summaries)
    if limit is None or n <= limit:
        return set(range(n))
    pi = plan.per_instance
    lead = (pi.groupby("last_rank")["lead_ns"].sum() if len(pi) else pd.Series(dtype="float64"))
    rows = []
    for k, (s, r) in enumerate(zip(plan.summaries, plan.ranks)):
        steps = max(len(step_spans(s.window)), 1)
        window = max(int(s.window.duration_ns), 1)
        rows.append((k, r, float(lead.get(r, 0.0)), s.compute_ns / steps, s.compute_ns / window))
    by = [
        [x for x in sorted(rows, key=lambda x: (-x[2], x[1])) if x[2] > 0],  # others waited for it most
        sorted(rows, key=lambda x: (-x[3], x[1])),  # most compute per step
        sorted(rows, key=lambda x: (x[3], x[1])),  # least compute per step
        sorted(rows, key=lambda x: (x[4], x[1])),  # most idle
    ]
    chosen: list[int] = []
    at = [0] * len(by)
    while len(chosen) < max(limit, 0) and any(a < len(b) for a, b in zip(at, by)):
        for i, order in enumerate(by):
            while at[i] < len(order) and order[at[i]][0] in chosen:
                at[i] += 1
            if at[i] < len(order) and len(chosen) < limit:
                chosen.append(order[at[i]][0])
                at[i] += 1
    return set(chosen)


def _how_steps(steps: StepSpans) -> str:
    """How a rank's window chooser found its iterations, in a few words."""
    if steps.source == "nvtx":
        return "NVTX step ranges"
    # the chooser's own words without its count ("15 iterations from one 'detach_' annotation to the
    # next (157 GPU ops ...)" -> "iterations from one 'detach_' annotation to the next")
    words = steps.description.split(" (")[0].split(" ", 1)
    return words[1] if len(words) == 2 and words[0].isdigit() else words[0]


def _cross_rank(summaries: list[RankSummary], ranks: list[int], notes: list[str]) -> _Plan:
    comms = [_rank_comm(s, r) for s, r in zip(summaries, ranks) if not s.comm.empty]
    if len(comms) >= 2:
        al = align(comms)
        notes += al.notes
        offsets, skews, instances = al.offset_ns, al.skew_ns, al.instances
    else:
        offsets = {r: 0 for r in ranks}
        skews = {r: 0 for r in ranks}
        instances = pd.DataFrame(columns=["inst", "rank", "kernel", "start", "end"])
    # job window: the span every rank's window covers (reference clock)
    spans = [(s.window.start_ns + offsets.get(r, 0), s.window.end_ns + offsets.get(r, 0))
             for s, r in zip(summaries, ranks) if r in offsets]
    lo = max((a for a, _ in spans), default=0)
    hi = min((b for _, b in spans), default=0)
    desc = "the span every rank's analysis window covers"
    if hi <= lo:
        lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
        desc = "the union of the ranks' analysis windows (they do not overlap)"
        notes.append("the ranks' analysis windows do not overlap; the job window is their union")
    ref = summaries[int(np.argmin(ranks))]
    off = offsets.get(min(ranks), 0)
    ref_steps = ref.window.steps if ref.window.steps is not None and len(ref.window.steps) else None
    pairs = [(a + off, b + off, name) for (a, b), name in
             zip(step_spans(ref.window), ref_steps.names if ref_steps is not None else ())]
    # a step is the job's when most of it lies in the job window, clipped to it: the ranks' windows
    # start and end microseconds apart on the common clock (ddp_straggler_2gpu: rank 1's first step
    # begins 61 us after rank 0's), which must not drop a step whose collectives all count (per step
    # numbers were divided by 15 steps for 16 steps' waits)
    pairs = [(max(a, lo), min(b, hi), name) for a, b, name in pairs if 2 * (min(b, hi) - max(a, lo)) > b - a] or pairs
    steps = None
    if pairs and ref_steps is not None:
        # the reference rank's iterations as its own analysis found them (NVTX steps, a repeated
        # annotation, the GPU op period), and the job window says how
        how = _how_steps(ref_steps)
        desc += f"; steps: rank {min(ranks)}'s {how}"
        steps = StepSpans(ref_steps.source, f"{len(pairs)} steps of rank {min(ranks)} ({how})",
                          tuple(p[2] for p in pairs), tuple(p[0] for p in pairs), tuple(p[1] for p in pairs),
                          period=ref_steps.period)
    window = Window(lo, hi, "job", desc, 0, steps=steps)
    aligned = [r for r in ranks if r in offsets]
    per_rank, per_instance = waits(instances, aligned)
    if len(per_instance):
        keep = (per_instance["last_arrival"] >= lo) & (per_instance["last_arrival"] < hi)
        per_instance = per_instance.loc[keep].reset_index(drop=True)
        per_rank = per_rank.loc[per_rank["inst"].isin(per_instance["inst"])].reset_index(drop=True)
    # swimlanes: one step from the middle of the job window (two when steps are short)
    lane = None
    spans = [(a, b) for a, b, _ in pairs]
    if spans:
        mid = spans[len(spans) // 2]
        lane = mid
        if mid[1] - mid[0] < 5_000_000 and len(spans) > len(spans) // 2 + 1:
            lane = (mid[0], spans[len(spans) // 2 + 1][1])
    elif hi > lo:
        lane = (lo + (hi - lo) // 2, min(hi, lo + (hi - lo) // 2 + 50_000_000))
    return _Plan(summaries, ranks, offsets, skews, per_rank, per_instance, window, lane, [])


# -- job tables --------------------------------------------------------------------------------------
def _weighted_mode(values: pd.Series, weights: pd.Series) -> tuple[str, float]:
    if values.empty or float(weights.sum()) <= 0:
        return "", 0.0
    sums = weights.groupby(values.to_numpy()).sum().sort_values(ascending=False, kind="stable")
    return str(sums.index[0]), float(sums.iloc[0] / weights.sum())


def _tables(results: list[RankResult], plan: _Plan, world: int, how: str) -> JobTables:
    pr, pi = plan.per_rank, plan.per_instance
    steps = len(step_spans(plan.window))
    rank_rows = []
    for res in results:
        r = res.rank
        mine = pr.loc[pr["rank"] == r] if len(pr) else pr
        last = pi.loc[pi["last_rank"] == r] if len(pi) else pi
        first = pi.set_index("inst")["first_arrival"] if len(pi) else pd.Series(dtype="int64")
        late = (mine["start"].to_numpy() - first.reindex(mine["inst"]).to_numpy()).sum() if len(mine) else 0
        st = res.step_ns
        ov = res.overlap
        nsteps = len(st)
        compute = int(ov.get("compute_ns", res.summary.compute_ns))
        rank_rows.append({
            "rank": r, "label": res.summary.label, "device": res.summary.device,
            "hostname": res.summary.hostname, "steps": nsteps,
            "step_ns": float(np.mean(st)) if st else math.nan, "step_max_ns": int(max(st)) if st else 0,
            "window_ns": int(res.window.duration_ns), "compute_ns": compute,
            "compute_per_step_ns": compute / nsteps if nsteps else math.nan,
            "comm_ns": int(ov.get("comm_ns", 0)), "overlap_ns": int(ov.get("overlap_ns", 0)),
            "exposed_ns": int(ov.get("exposed_ns", 0)), "exposed_wait_ns": int(ov.get("exposed_wait_ns", 0)),
            "exposed_transfer_ns": int(ov.get("exposed_transfer_ns", 0)),
            "wait_ns": int(mine["wait_ns"].sum()) if len(mine) else 0, "late_ns": int(late),
            "lead_ns": int(last["lead_ns"].sum()) if len(last) else 0, "last_count": int(len(last)),
            "instances": int(len(pi)), "skew_ns": int(plan.skews.get(r, 0)), "how": how, "world_size": world,
        })
    job_ranks = pd.DataFrame(rank_rows, columns=list(JOB_RANKS_COLUMNS))

    # collectives: attributes from the reference rank's kernels
    coll = empty(JOB_COLLECTIVES_COLUMNS)
    if len(pi):
        ref_rank = min(plan.offsets)
        ref_sum = next(s for s, r in zip(plan.summaries, plan.ranks) if r == ref_rank)
        ref_rows = pr.loc[pr["rank"] == ref_rank].set_index("inst")["kernel"]
        kern = ref_rows.reindex(pi["inst"]).to_numpy(dtype=np.int64)
        c = ref_sum.comm
        nbytes = c["bytes"].to_numpy(dtype=np.float64)[kern]
        nbytes[nbytes < 0] = np.nan  # unknown: the trace has no NCCL NVTX payloads
        collective = c["collective"].to_numpy(dtype=object)[kern]
        transfer = pi["transfer_ns"].to_numpy(dtype=np.float64)
        n = len(plan.offsets)
        algbw = np.where((nbytes > 0) & (transfer > 0), nbytes / np.maximum(transfer, 1) * 1e9, np.nan)
        factor = np.array([bus_factor(str(x), n) for x in collective])
        busbw = algbw * factor
        link_bw, link = _link_peak(plan.summaries)
        coll = pd.DataFrame({
            "inst": pi["inst"].to_numpy(), "collective": collective,
            "algorithm": c["algorithm"].to_numpy(dtype=object)[kern],
            "protocol": c["protocol"].to_numpy(dtype=object)[kern],
            "dtype": c["dtype"].to_numpy(dtype=object)[kern], "bytes": nbytes,
            "start": pi["first_arrival"].to_numpy(), "end": pi["end"].to_numpy(),
            "first_arrival": pi["first_arrival"].to_numpy(), "last_arrival": pi["last_arrival"].to_numpy(),
            "last_rank": pi["last_rank"].to_numpy(), "spread_ns": pi["spread_ns"].to_numpy(),
            "lead_ns": pi["lead_ns"].to_numpy(), "transfer_ns": pi["transfer_ns"].to_numpy(),
            "duration": pi["transfer_ns"].to_numpy(), "algbw": algbw, "busbw": busbw,
            "link_bw": np.full(len(pi), link_bw if link_bw else np.nan), "link": np.full(len(pi), link, dtype=object),
            "bus_share": busbw / link_bw if link_bw else np.full(len(pi), np.nan), "world_size": world,
        })

    # lateness: rows per late collective, with what the late rank did
    late_rows = []
    for res in results:
        d = res.lateness
        if d.empty:
            continue
        lag = (d["end"] - d["start"]).clip(lower=0)
        path, share = _weighted_mode(d["host_nvtx_path"].map(generic_path), lag)
        api, _ = _weighted_mode(d["host_api"], lag)
        gbusy = float((d["gpu_busy_share"] * lag).sum() / lag.sum()) if float(lag.sum()) > 0 else 0.0
        inst = d["inst"].to_numpy()
        pinst = pi.set_index("inst")
        others = pr.loc[(pr["rank"] != res.rank) & pr["inst"].isin(inst)].groupby("inst")["wait_ns"].sum()
        kind = coll.set_index("inst") if len(coll) else None
        off = plan.offsets.get(res.rank, 0)
        late_rows.append(pd.DataFrame({
            "inst": inst, "rank": res.rank,
            "collective": kind["collective"].reindex(inst).to_numpy(dtype=object) if kind is not None else "",
            "bytes": kind["bytes"].reindex(inst).to_numpy(dtype=np.float64) if kind is not None else np.nan,
            "start": d["start"].to_numpy(dtype=np.int64) + off, "end": d["end"].to_numpy(dtype=np.int64) + off,
            "duration": lag.to_numpy(dtype=np.int64), "lag_ns": lag.to_numpy(dtype=np.int64),
            "others_wait_ns": others.reindex(inst).fillna(0).to_numpy(dtype=np.int64),
            "host_nvtx_path": d["host_nvtx_path"].to_numpy(dtype=object),
            "host_api": d["host_api"].to_numpy(dtype=object),
            "gpu_busy_share": d["gpu_busy_share"].to_numpy(dtype=np.float64),
            "gpu_kernel": d["gpu_kernel"].to_numpy(dtype=object),
            "main_host_path": path, "main_host_share": share, "main_api": api, "main_gpu_busy": gbusy,
            "steps": steps,
        }))
        del pinst
    lateness = pd.concat(late_rows, ignore_index=True) if late_rows else None
    tables = {"job_ranks": job_ranks, "job_collectives": coll}
    if lateness is not None:
        tables["job_lateness"] = lateness.sort_values(["rank", "lag_ns"], ascending=[True, False],
                                                      kind="stable").reset_index(drop=True)
    return JobTables(tables)


def _link_peak(summaries: Sequence[RankSummary]) -> tuple[float | None, str]:
    """The link the ranks' data crosses, per direction: NVLink when every GPU has it and all ranks
    are on one host, else PCIe (a lower bound for cross-host jobs, where the network is the limit)."""
    hosts = {s.hostname for s in summaries}
    links = [s.link for s in summaries]
    nv = [lk.nvlink for lk in links]
    if len(hosts) == 1 and all(v for v in nv):
        return float(min(v for v in nv if v)), f"NVLink, {links[0].nvlink_detail}"
    pc = [lk.pcie for lk in links]
    if all(v for v in pc):
        where = "PCIe" if len(hosts) == 1 else "PCIe (ranks on several hosts: the network may be slower)"
        return float(min(v for v in pc if v)), f"{where}, {links[0].pcie_detail}"
    return None, "unknown (GPU not in the hardware table)"


def _job_findings(pack: RulePack, tables: JobTables, window: Window, words: Vocabulary = CUDA_WORDS) -> list[Finding]:
    """The job rules (those reading job_* facts) evaluated on the job tables, in the ranks' ``words``
    (as :func:`analyzer.trace_analysis.finish` words a trace's findings)."""
    from analyzer.facts import FactStore
    from analyzer.loading.model import Trace, TraceInfo
    from analyzer.rules import evaluate
    from analyzer.rules.model import RulePack
    from analyzer.rules.wording import finding_words, pack_words

    rules = [r for r in pack.rules if str(r.source).startswith("job_")]
    if not rules:
        return []
    sub = dataclasses.replace(pack, rules=tuple(rules)) if isinstance(pack, RulePack) else pack
    info = TraceInfo(path=Path("job"), source_format="job", nsys_version=None, schema_version=None,
                     origin_ns=0, duration_ns=int(window.duration_ns))
    store = FactStore(Trace.from_frames(info), window, {"job": tables})
    if isinstance(sub, RulePack):
        sub = pack_words(sub, words)
    return [finding_words(f, words) for f in evaluate(sub, store, window, {})]


__all__ = ["JobAnalysis", "JobOutcome", "analyze_job", "featured_ranks", "is_one_job"]
