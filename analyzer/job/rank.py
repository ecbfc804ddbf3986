"""One rank of a job, in two phases that run where the rank's trace is (a Dask worker, or here).

Phase 1, :func:`prepare_rank`: load (or take) the rank's trace, choose its window and fact store
through the single-trace pipeline (:func:`analyzer.pipeline.prepare`), and return a small
:class:`RankSummary`: what the cross-rank facts need (its communication kernels, clock, steps,
hardware). The trace and its fact store stay with the caller (:class:`RankState`).

Phase 2, :func:`finish_rank`: given what the other ranks told us (:class:`RankJobInput`: this rank's
number, waits per collective, the intervals in which the others waited for it, the span drawn in the
swimlanes), evaluate the rule pack on the rank (:func:`analyzer.pipeline.finish`), describe what it
was doing in those intervals, and return a small :class:`RankResult` (findings, its report section,
swimlane items). Only summaries and results travel; traces never do.
"""
from __future__ import annotations

import dataclasses
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyzer.analysis import Window, step_spans
from analyzer.facts._util import column, generic_path, text, union_intervals
from analyzer.facts.comm import JobRankContext
from analyzer.facts.nccl_nvtx import internal_ranges
from analyzer.facts.registry import UnknownFactError
from analyzer.findings import Finding
from analyzer.job.ranks import RankHint, rank_hint, split_processes
from analyzer.loading.model import Trace
from analyzer.loading.vocabulary import CUDA_WORDS, Vocabulary, vocabulary_of
from analyzer.progress import Progress

if TYPE_CHECKING:  # the boundary's types
    from analyzer.facts.registry import FactStore
    from analyzer.loading.model import NcuReport
    from analyzer.reports.viewmodel import TraceSection
    from analyzer.rules.model import RulePack
    from analyzer.trace_analysis import AnalysisOptions

#: cap on swimlane items per kind and rank (the HTML stays small at any trace size)
LANE_ITEMS = 400


@dataclass(frozen=True)
class RankLink:
    """What a rank's GPU moves data over, per direction: peak bytes/s (None: unknown) and where the
    number comes from (:mod:`analyzer.hardware`)."""

    nvlink: float | None = None
    nvlink_detail: str = "unknown GPU"
    pcie: float | None = None
    pcie_detail: str = "unknown GPU"


@dataclass
class RankSummary:
    """Phase-1 facts of one rank: small, picklable."""

    index: int  # input order
    label: str  # how the report names this input ("r1.sqlite", "job.sqlite pid 4242")
    file: str
    hint: RankHint
    hostname: str
    origin_ns: int  # time of the trace's t = 0 on its clock (the report's, or UTC; 0 unknown)
    clock_id: str  # "report:<path>" (ranks of one report), "utc" (wall clock of the session start), "" unknown
    trace_ns: int
    first_op_ns: int
    last_op_ns: int
    window: Window
    device: int
    gpu_name: str
    link: RankLink
    comm: pd.DataFrame  # start, end, collective, bytes, comm, algorithm, protocol, dtype (what the job reads)
    compute_ns: int  # union of compute kernels in the window (main device)
    kernel_count: int
    notes: list[str] = field(default_factory=list)
    #: the trace's words (its platform, the HIP names it recorded for CUDA calls): the job's findings and
    #: report speak them (:func:`analyzer.loading.vocabulary.job_vocabulary`)
    words: Vocabulary = CUDA_WORDS


@dataclass
class RankState:
    """What stays where the rank was prepared: its trace and fact store."""

    trace: Trace
    store: FactStore


@dataclass(frozen=True)
class RankJobInput:
    """What the job tells one rank for phase 2 (its own clock)."""

    rank: int
    world_size: int
    how: str
    context: JobRankContext
    late_intervals: pd.DataFrame  # inst, start, end: when the others waited for this rank
    lane_span: tuple[int, int] | None  # (start, end) of the swimlane span, this rank's clock
    section_index: int
    #: the rank is shown in full (its report section and swimlanes); False: only its findings and the
    #: numbers of its row in the job's rank table come back (a job of many ranks, :func:`featured_ranks`)
    full: bool = True


class _PackedSection:
    """A report section held packed (:func:`pack_section`) in ``packed_section``, read and written as
    :attr:`section`: the one implementation for :class:`RankResult` and :class:`AloneResult`."""

    packed_section: bytes

    @property
    def section(self) -> TraceSection:
        """The report section (a new object at each read; a job's rank only when shown in full)."""
        return pickle.loads(zlib.decompress(self.packed_section))  # noqa: S301 - packed by this program

    @section.setter
    def section(self, value: TraceSection) -> None:
        self.packed_section = pack_section(value)


@dataclass
class RankResult(_PackedSection):
    """Phase-2 facts of one rank: small, picklable. Its report section is held packed (pickled and
    compressed where it was built: about a twentieth of its size as objects), so a job's client holds
    every rank's section in little memory and the report unpacks one at a time (:attr:`section`)."""

    summary: RankSummary
    rank: int
    findings: list[Finding]
    packed_section: bytes  # b"": not shown in full (RankJobInput.full False): no section, no swimlanes
    overlap: dict[str, int]  # comm_overlap of the main device, with waits
    lateness: pd.DataFrame  # inst, start, end, host_nvtx_path, host_api, gpu_busy_share, gpu_kernel
    lanes: dict[str, list[tuple[int, int, str]]]  # kind -> (start, end, label), this rank's clock
    step_ns: list[int]
    window: Window
    phases: dict[str, float] = field(default_factory=dict)  # phase -> GPU ns per step (strong scaling)

    @property
    def full(self) -> bool:
        """Whether the rank is shown in full (it holds its report section)."""
        return bool(self.packed_section)


@dataclass
class AloneResult(_PackedSection):
    """One input analyzed on its own where it was prepared (a Dask worker), when the inputs are not one
    job: what the report and the orchestration read of it (its trace's name, window, findings and its
    report section, packed as :attr:`RankResult.packed_section` is), never its trace or facts."""

    name: str
    window: Window
    findings: list[Finding]
    packed_section: bytes


def finish_alone(state: RankState, pack: RulePack, position: int, multi: bool) -> AloneResult:
    """The rank of ``state`` finished as an input on its own (no job): the rules, and its section as the
    report's ``position``-th (1-based; ``multi``: the report has several) -- what
    :func:`analyzer.reports.build.build_report` builds from the same analysis."""
    from analyzer.analysis import REPORT_FACTS
    from analyzer.reports.build import trace_section
    from analyzer.reports.viewmodel import Limits
    from analyzer.trace_analysis import finish

    analysis = finish(state.store, pack, keep=REPORT_FACTS)
    return AloneResult(analysis.trace.name, analysis.window, list(analysis.findings),
                       pack_section(trace_section(analysis, position, multi, Limits())))


def pack_section(section: TraceSection) -> bytes:
    """``section`` as :attr:`RankResult.packed_section` holds it."""
    return zlib.compress(pickle.dumps(section, protocol=pickle.HIGHEST_PROTOCOL), 1)


def _comm_frame(trace: Trace, store: FactStore) -> pd.DataFrame:
    """Every communication kernel of the trace (not only the window), start order: the columns the
    cross-rank facts read (the summary travels to the client, so nothing more: kernel names stay)."""
    from analyzer.facts.comm import comm_kernel_mask, kernel_collectives, parse_nccl_kernel
    from analyzer.facts.nccl_nvtx import kernel_payloads
    from analyzer.facts.registry import FactContext

    k = trace.kernels
    labels = ("collective", "comm", "algorithm", "protocol", "dtype")
    if k.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in labels else "int64")
                             for c in ("start", "end", "collective", "bytes", "comm", "algorithm", "protocol",
                                       "dtype")})
    ctx = FactContext(trace=trace, window=store.window, store=store, options=store.options)
    mask = comm_kernel_mask(ctx)
    c = k.loc[mask].sort_values("start", kind="stable").reset_index(drop=True)
    names = text(c["short_name"])
    codes, uniq = pd.factorize(names)
    parsed = [parse_nccl_kernel(str(u)) for u in uniq]
    coll = kernel_collectives(c)
    coll = np.where(coll == "", names.to_numpy(dtype=object), coll) if len(c) else np.zeros(0, dtype=object)
    nbytes, comm = kernel_payloads(trace.nvtx, c)
    pick = lambda a: np.array([getattr(p, a) for p in parsed], dtype=object)[codes] if len(c) \
        else np.zeros(0, dtype=object)  # noqa: E731
    return pd.DataFrame({
        "start": c["start"].to_numpy(dtype=np.int64), "end": c["end"].to_numpy(dtype=np.int64),
        "collective": coll, "bytes": nbytes, "comm": comm, "algorithm": pick("algorithm"),
        "protocol": pick("protocol"), "dtype": pick("dtype"),
    })


def _link(trace: Trace, device: int) -> tuple[str, RankLink]:
    from analyzer.hardware import trace_hardware

    try:
        hw = trace_hardware(trace).get(device)
    except Exception:  # noqa: BLE001 - hardware lookup is best effort for the job report
        hw = None
    if hw is None:
        return "", RankLink()
    return hw.name, RankLink(hw.nvlink.value, hw.nvlink.detail, hw.pcie.value, hw.pcie.detail)


def prepare_rank(trace: Trace, options: AnalysisOptions, *, index: int, label: str, file: str,
                 ncu: NcuReport | None = None) -> tuple[RankSummary, RankState]:
    """Phase 1 for one loaded rank trace (see the module docstring)."""
    from analyzer.facts.comm import compute_kernel_mask
    from analyzer.facts.registry import FactContext
    from analyzer.trace_analysis import prepare

    store = prepare(trace, options, ncu=ncu)
    w = store.window
    hint = rank_hint(trace, Path(file).name)
    comm = _comm_frame(trace, store)
    k = trace.kernels
    device = hint.device
    compute_ns = 0
    if len(k):
        ctx = FactContext(trace=trace, window=w, store=store, options=store.options)
        sel = compute_kernel_mask(ctx) & (column(k, "device", 0).fillna(0).to_numpy() == device)
        s = np.clip(k["start"].to_numpy()[sel], w.start_ns, w.end_ns)
        e = np.clip(k["end"].to_numpy()[sel], w.start_ns, w.end_ns)
        u = union_intervals(s, e)
        compute_ns = int((u.end - u.start).sum())
    ops = [f for f in (trace.kernels, trace.memcpy, trace.memset) if len(f)]
    first = min(int(f["start"].min()) for f in ops) if ops else 0
    last = max(int(f["end"].max()) for f in ops) if ops else 0
    gpu_name, link = _link(trace, device)
    info = trace.info
    same_report = trace.extras.get("job_pid") is not None
    # ranks of one report share its clock; separate reports each count from their own session start,
    # so their common clock is the wall clock of their session starts (UTC), when recorded
    clock = f"report:{info.path}" if same_report else ("utc" if info.utc_origin_ns else "")
    origin = int(info.origin_ns) if same_report else int(info.utc_origin_ns or 0)
    summary = RankSummary(
        index=index, label=label, file=file, hint=hint, hostname=info.hostname or "",
        origin_ns=origin, clock_id=clock, trace_ns=int(info.duration_ns),
        first_op_ns=first, last_op_ns=last, window=w, device=device, gpu_name=gpu_name, link=link,
        comm=comm, compute_ns=compute_ns, kernel_count=len(k), words=vocabulary_of(trace),
    )
    if comm.empty:
        summary.notes.append(summary.words.text("no NCCL (communication) kernels"))
    return summary, RankState(trace, store)


# -- phase 2 ---------------------------------------------------------------------------------------
def _main_tid(trace: Trace) -> int:
    from analyzer.facts.nvtx import main_threads

    pid_obj = trace.extras.get("job_pid")
    pid = pid_obj if isinstance(pid_obj, int) else -1
    nv = trace.nvtx
    if nv.empty:
        return -1
    user = nv.loc[~internal_ranges(nv)]
    threads = main_threads(user if len(user) else nv)
    if pid in threads:
        return threads[pid]
    return next(iter(threads.values()), -1)


def describe_intervals(trace: Trace, store: FactStore, intervals: pd.DataFrame, device: int) -> pd.DataFrame:
    """What the rank was doing in each ``[start, end)`` of ``intervals`` (its clock): the deepest user
    NVTX range on its main thread covering most of it, the CUDA call open on that thread most of the
    time ('' = the host ran its own code), and its GPU: the busy share of compute kernels and the
    kernel that ran longest in it."""
    from analyzer.facts.comm import compute_kernel_mask
    from analyzer.facts.registry import FactContext

    out = intervals.copy()
    n = len(out)
    host_path = np.full(n, "", dtype=object)
    host_api = np.full(n, "", dtype=object)
    busy = np.zeros(n)
    top = np.full(n, "", dtype=object)
    if n == 0:
        return out.assign(host_nvtx_path=host_path, host_api=host_api, gpu_busy_share=busy, gpu_kernel=top)
    a = out["start"].to_numpy(dtype=np.int64)
    b = out["end"].to_numpy(dtype=np.int64)
    length = np.maximum(b - a, 1)
    tid = _main_tid(trace)
    nv = trace.nvtx
    if tid >= 0 and len(nv):
        user = nv.loc[(nv["tid"].to_numpy() == tid) & ~internal_ranges(nv)
                      & (text(column(nv, "kind", "pushpop")) != "mark").to_numpy()]
        rs, re_ = user["start"].to_numpy(dtype=np.int64), user["end"].to_numpy(dtype=np.int64)
        depth = column(user, "depth", 0).fillna(0).to_numpy(dtype=np.int64)
        paths = text(column(user, "path", "")).to_numpy(dtype=object)
        for i in range(n):
            ov = np.minimum(re_, b[i]) - np.maximum(rs, a[i])
            ok = ov >= 0.5 * length[i]
            if ok.any():
                j = np.flatnonzero(ok)[np.argmax(depth[ok])]
                host_path[i] = paths[j]
    api = trace.api
    if tid >= 0 and len(api):
        mine = api.loc[api["tid"].to_numpy() == tid]
        s_, e_ = mine["start"].to_numpy(dtype=np.int64), mine["end"].to_numpy(dtype=np.int64)
        names = text(mine["name"]).to_numpy(dtype=object)
        for i in range(n):
            ov = np.minimum(e_, b[i]) - np.maximum(s_, a[i])
            j = int(np.argmax(ov)) if len(ov) else -1
            if j >= 0 and ov[j] >= 0.5 * length[i]:
                host_api[i] = names[j]
    k = trace.kernels
    if len(k):
        ctx = FactContext(trace=trace, window=store.window, store=store, options=store.options)
        sel = compute_kernel_mask(ctx) & (column(k, "device", 0).fillna(0).to_numpy() == device)
        ks, ke = k["start"].to_numpy(dtype=np.int64)[sel], k["end"].to_numpy(dtype=np.int64)[sel]
        kn = text(k["short_name"]).to_numpy(dtype=object)[sel]
        order = np.argsort(ks, kind="stable")
        ks, ke, kn = ks[order], ke[order], kn[order]
        u = union_intervals(ks, ke)
        from analyzer.facts._util import covered_until

        busy = (covered_until(u.start, u.end, b) - covered_until(u.start, u.end, a)) / length
        reach = np.maximum.accumulate(ke) if len(ke) else ke
        for i in range(n):
            lo = np.searchsorted(reach, a[i], side="right")  # kernels that may end after a
            hi = np.searchsorted(ks, b[i], side="left")
            if hi > lo:
                ov = np.minimum(ke[lo:hi], b[i]) - np.maximum(ks[lo:hi], a[i])
                j = int(np.argmax(ov))
                if ov[j] > 0:
                    top[i] = kn[lo + j]
    return out.assign(host_nvtx_path=host_path, host_api=host_api, gpu_busy_share=busy, gpu_kernel=top)


def _lanes(trace: Trace, store: FactStore, span: tuple[int, int] | None, device: int,
           comm: pd.DataFrame) -> dict[str, list[tuple[int, int, str]]]:
    """Swimlane items inside ``span``: merged compute busy blocks, communication kernels (with the
    wait part), and the main thread's user NVTX ranges below the step (phases)."""
    from analyzer.facts.comm import compute_kernel_mask
    from analyzer.facts.registry import FactContext

    lanes: dict[str, list[tuple[int, int, str]]] = {"compute": [], "comm": [], "wait": [], "host": []}
    if span is None:
        return lanes
    a, b = span
    k = trace.kernels
    if len(k):
        ctx = FactContext(trace=trace, window=store.window, store=store, options=store.options)
        sel = compute_kernel_mask(ctx) & (column(k, "device", 0).fillna(0).to_numpy() == device)
        ks, ke = k["start"].to_numpy()[sel], k["end"].to_numpy()[sel]
        keep = (ke > a) & (ks < b)
        u = union_intervals(np.clip(ks[keep], a, b), np.clip(ke[keep], a, b))
        lanes["compute"] = _cap([(int(s), int(e), "compute") for s, e in zip(u.start, u.end)])
    if len(comm):
        c = comm.loc[(comm["end"].to_numpy() > a) & (comm["start"].to_numpy() < b)]
        items, waits = [], []
        for row in c.itertuples(index=False):
            s, e = max(int(row.start), a), min(int(row.end), b)
            w = int(getattr(row, "wait_ns", 0) or 0)
            items.append((s, e, str(row.collective)))
            if w > 0:
                waits.append((s, min(e, int(row.start) + w), "wait"))
        lanes["comm"], lanes["wait"] = _cap(items), _cap(waits)
    tid = _main_tid(trace)
    nv = trace.nvtx
    if tid >= 0 and len(nv):
        user = nv.loc[(nv["tid"].to_numpy() == tid) & ~internal_ranges(nv)]
        user = user.loc[(user["end"].to_numpy() > a) & (user["start"].to_numpy() < b)
                        & (column(user, "depth", 0).fillna(0).to_numpy() == 1)]
        lanes["host"] = _cap([(max(int(s), a), min(int(e), b), str(t)) for s, e, t in
                              zip(user["start"], user["end"], text(user["text"]))])
    return lanes


def _cap(items: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    if len(items) <= LANE_ITEMS:
        return items
    return sorted(sorted(items, key=lambda x: x[0] - x[1])[:LANE_ITEMS])


def finish_rank(state: RankState, summary: RankSummary, pack: RulePack, job: RankJobInput | None) -> RankResult:
    """Phase 2 (see the module docstring); ``job`` None: the rank alone (no cross-rank facts). Accepted
    findings are marked once the whole job is done (:meth:`analyzer.job.run.JobOutcome.mark_accepted`;
    their fingerprints include the rank)."""
    from analyzer.trace_analysis import finish
    from analyzer.reports.build import trace_section
    from analyzer.reports.viewmodel import Limits

    store = state.store
    if job is not None:
        store.update_options({"job_rank": job.context}, forget=("comm_kernels",))
    analysis = finish(store, pack)
    rank = job.rank if job is not None else summary.index
    scoped = [dataclasses.replace(f, scope=dataclasses.replace(f.scope, rank=rank)) for f in analysis.findings]
    # the rank is part of a finding's key: the links between this rank's findings (a symptom's
    # explained_by, a cause's explains) follow their new keys, or no cause would explain a symptom
    renamed = {old.key: new.key for old, new in zip(analysis.findings, scoped)}
    findings = [dataclasses.replace(f, explains=tuple(renamed.get(k, k) for k in f.explains),
                                    explained_by=tuple(renamed.get(k, k) for k in f.explained_by))
                for f in scoped]
    analysis.findings = findings
    full = job is None or job.full
    packed = pack_section(trace_section(analysis, job.section_index if job is not None else summary.index + 1,
                                        True, Limits())) if full else b""
    if not full:  # footprints serve a section's impact union (tens of KB a finding): a table row has none
        findings = [dataclasses.replace(f, footprint=None) for f in findings]
    overlap_rows = store.get("comm_overlap")
    dev_rows = overlap_rows.loc[overlap_rows["device"] == summary.device] if len(overlap_rows) else overlap_rows
    overlap = {c: int(dev_rows[c].iloc[0]) for c in ("compute_ns", "comm_ns", "overlap_ns", "exposed_ns",
                                                      "exposed_wait_ns", "exposed_transfer_ns")} \
        if len(dev_rows) else {}
    late = job.late_intervals if job is not None else pd.DataFrame(columns=["inst", "start", "end"])
    lateness = describe_intervals(state.trace, store, late, summary.device)
    comm = store.get("comm_kernels")
    lanes = _lanes(state.trace, store, job.lane_span if job is not None and full else None, summary.device, comm)
    steps = [int(e - s) for s, e in step_spans(summary.window)]
    return RankResult(summary=summary, rank=rank, findings=findings, packed_section=packed,
                      overlap=overlap, lateness=lateness, lanes=lanes, step_ns=steps, window=summary.window,
                      phases=phase_gpu_per_step(store, len(steps)))




def phase_gpu_per_step(store: FactStore, steps: int) -> dict[str, float]:
    """GPU ns per step of each phase directly inside the step (``step_N/forward`` -> ``forward``)."""
    try:
        proj = store.get("nvtx_projection")
    except UnknownFactError:
        return {}
    if proj.empty or steps <= 0:
        return {}
    rows = proj.loc[proj["depth"] == 1]
    if rows.empty:
        return {}
    names = rows["path"].astype(str).map(lambda p: generic_path(p).split("/", 1)[-1])
    sums = rows["gpu_ns"].groupby(names.to_numpy()).sum()
    return {str(k): float(v) / steps for k, v in sums.items()}


@dataclass
class FileState:
    """One input file after phase 1: its ranks' summaries and states (a report of several processes
    gives several)."""

    summaries: list[RankSummary]
    states: list[RankState]
    trace: Trace | None = None  # the loaded file (kept here only; a multi-process report before the split)


def prepare_file(path: str, index: int, options: AnalysisOptions, ncu: NcuReport | None = None,
                 keep_trace: bool = False, progress: Progress = None, trace: Trace | None = None) -> FileState:
    """Phase 1 of one input file: loaded (unless ``trace`` is given), split into its processes, each
    prepared as a rank (:func:`prepare_rank`)."""
    from analyzer.loading import load_trace

    if trace is None:
        from analyzer.trace_analysis import trace_cache

        trace = load_trace(Path(path), progress=progress, cache=trace_cache(options))
    parts = split_processes(trace)
    summaries, states = [], []
    for i, part in enumerate(parts):
        label = Path(path).name if len(parts) == 1 else f"{Path(path).name} pid {part.extras.get('job_pid')}"
        s, st = prepare_rank(part, options, index=index + i, label=label, file=str(path),
                             ncu=ncu if len(parts) == 1 else None)
        summaries.append(s)
        states.append(st)
    return FileState(summaries, states, trace if keep_trace and len(parts) > 1 else None)


def finish_file(fs: FileState, pack: RulePack, inputs: list[RankJobInput | None]) -> list[RankResult]:
    """Phase 2 of one input file: each of its ranks finished with the job's inputs."""
    return [finish_rank(st, s, pack, inp) for st, s, inp in zip(fs.states, fs.summaries, inputs)]


__all__ = ["AloneResult", "RankJobInput", "RankResult", "RankState", "RankSummary", "FileState", "describe_intervals", "finish_alone", "finish_file", "finish_rank", "pack_section",
           "generic_path", "phase_gpu_per_step", "prepare_file",
           "prepare_rank"]
