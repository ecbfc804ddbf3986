"""Where each GPU's time went: an exact partition of the analysis window by cause.

Two facts:

``timeline_segments``
    Per device, labelled disjoint intervals that cover the window exactly, each with one ``cause``
    (below), a ``detail``, the NVTX path it belongs to and the step it falls in.
``timeline_breakdown``
    Those intervals summed per device for the whole window, per step and per NVTX range (see its
    docstring for the columns). Rules read this one; impacts taken from it never count a nanosecond
    twice, because every nanosecond of the window has exactly one cause.

Busy time (from ``gpu_ops``, so every op ``gpu_ops`` lists counts, CUDA-graph executions included)
---------------------------------------------------------------------------------------------------
At each instant the GPU is in the first of these that applies:

``compute``       a compute kernel (or any other GPU op that is not a copy, memset or communication
                  kernel, e.g. a graph execution) runs; detail = kernel category (``categories.yaml``).
                  Also the time between two kernels of one CUDA graph execution when nothing else
                  runs (detail ``CUDA graph (between nodes)``, :func:`analyzer.facts.intervals.graph_spans`):
                  the GPU resolving the graph's dependencies and starting the next node itself (a few
                  hundred ns per edge, no host involved), the execution's own time as nsys' graph-level
                  trace counts it, so node-level tracing and torch.profiler agree with it
``exposed_comm``  a communication kernel runs and no compute kernel does (the ``communication``
                  category of the comm facts); detail = the collective (``AllReduce``...)
``exposed_copy``  a copy or memset runs and no kernel does; detail = direction and host memory kind
                  (``H2D pageable``, ``D2H pinned``, ``D2D``, ``memset``)

Among concurrent ops of one class the time goes to the op that extends the busy frontier (sorted by
start, an op owns the part of its interval no earlier op covers), so the class's time is its union.

Idle time, classified by what held the GPU back
-----------------------------------------------
For each idle gap the *feeding thread* is the one that launched the op ending the gap (else the one
that launched the op before it). The op's *submission* is the end of its launch call.

``wait_other``    the op ending the gap was submitted before the gap began: the GPU had work but
                  waited (another stream, an event, another rank); also the tail of a gap between a
                  submission and a start later than ``dispatch_gap_ns``
``launch_bound``  the feeding thread was issuing work: inside a CUDA call (detail = the call:
                  ``cudaLaunchKernel``...), or between two CUDA calls less than ``dispatch_gap_ns``
                  apart (detail ``dispatch``: Python/framework dispatch; also less than that after
                  another thread of the process launched work eagerly, neither after that thread's
                  CUDA graph replay nor before one: the autograd engine's thread taking over from the
                  main thread, :mod:`analyzer.facts.breakdown_handoff`), or the op's launch latency
                  after its submission (detail ``launch latency``). Where the op ending the gap is a
                  CUDA graph replay's (a kernel it ran, or a whole execution), or the op just before
                  one on its device (the replay's input copy: cudagraph trees and hand-written graph
                  loops copy fresh inputs into the graph's static buffers right before each replay),
                  the host was preparing and launching that replay: the details other than the graph
                  launch call itself say so (``dispatch (before a graph replay)``, :data:`GRAPH_NEXT`);
                  launch-bound's finding counts the rest only, the eager launches (a graph-broken
                  step's eager remainder, an eager optimizer after the replays)
``host_sync``     the feeding thread was blocked in a synchronizing call (detail = the call:
                  ``cudaStreamSynchronize``, a synchronous or pageable ``cudaMemcpy*``, and the
                  implicitly synchronizing allocations: ``cudaMalloc``, ``cudaHostAlloc``, ``cudaFree``...),
                  or returning from one (the host time after it, up to the next CUDA call, when
                  shorter than ``dispatch_gap_ns``); and the GPU's *refill* after a synchronization
                  (detail ``refill (<call>)``, NVTX path the call's range): the host's time is cut at
                  the returns of its synchronizing calls, and in each interval (previous return, this
                  call's return] removing the call buys ``min(S, I)`` (``S`` the time the host was
                  blocked in it, ``I`` the GPU's idle time in the interval; without the call host and
                  GPU overlap and the interval takes about ``max(T - S, T - I)``). What the two charges
                  above leave of it is taken from the interval's launch-bound and host-work time from
                  its start, the refill of the queue the previous synchronization drained
                  (:mod:`analyzer.facts.breakdown_sync`). Before that, the GPU's gap around syncs that
                  leave it empty while the host makes and uploads small values (pageable copies under
                  64 KiB, host code between them) is the syncs', its pieces under ``dispatch_gap_ns``
                  (:func:`~analyzer.facts.breakdown_sync.charge_drains`). And the synchronizing *operator's* own time:
                  where the trace has operator ranges (torch.profiler's ``cpu_op``, nsys with
                  ``emit_nvtx``), the launch-bound and host-work time while the feeding thread was in
                  the innermost operator enclosing the call, up to the call's return (``aten::nonzero``'s
                  launches and copy: detail ``aten::nonzero (up to cudaStreamSynchronize)``,
                  :mod:`analyzer.facts.breakdown_syncop`); nsys without them cannot tell which launches
                  belong to the operator, and that part stays launch-bound (not separable, said there).
                  A launch-bound loop (the GPU drained long before the host synchronized: ``S``
                  small) keeps its launch-bound time, bar those operators' own; the
                  intervals on either side of a step boundary are not charged (a loop synchronizes
                  once a step anyway: the step's start and end stay the host's own time)
``host_work``     the feeding thread ran its own code with no CUDA call for ``dispatch_gap_ns`` or
                  more; detail = the innermost NVTX range open on it, made generic as the NVTX paths are
                  (``step_N``, ``ProfilerStep#N``; ``(no NVTX range)`` without).
                  Where the OS-runtime trace shows it blocked meanwhile (``sem_wait``,
                  ``pthread_cond_wait``, ``futex``...: a future, a queue, a lock, a join) while another
                  thread of its process ran inside an NVTX range, that part names the other thread and
                  its range instead (``load_weights (thread 1081, waited for)``, column ``waited_tid``:
                  :mod:`analyzer.facts.breakdown_threads`); without OS-runtime calls (torch.profiler)
                  waiting cannot be told from running Python, and the time keeps the waiting thread's range
``setup``         inside a one-time CUDA call (module or library load, graph capture or instantiation,
                  device queries); detail says which. Also inside one call that issues work (a launch,
                  not a synchronization or allocation) lasting :data:`ONE_TIME_CALL_NS` or more: the
                  first launch loading a kernel's module, a library's initialization (detail
                  ``cudaLaunchKernel (one-time: 10 ms or more in one call)``), and inside a kernel's
                  first launch call when it takes far longer than its later ones (its code object
                  loading: :mod:`analyzer.facts.breakdown_firstlaunch`). What ran before the steady state
                  is outside the window (the window chooser's ``setup_ns``); time inside the window is never
                  setup for its position (``--window full``, a time span, a window opened at the program's
                  annotation: the work before its first step is classified like any other)
``autotune``      launch-bound, host sync or host work time in an autotuning burst of the feeding thread (timed
                  trials of candidate kernels, :mod:`analyzer.facts.autotune`); detail kept
``compile``       the same inside the feeding thread's torch.compile compilation ranges (graphs.compile_spans)
``unknown``       the trace cannot tell; detail says why (:data:`UNKNOWN_WHY`: no CUDA API calls
                  recorded, none on the launching thread, or the op ending the gap has no launch call
                  in the trace) and reports state it once, with what to record. Nothing else is
                  unclassified: several launching threads (each gap is fed by the thread that launched
                  the op ending it), several processes (each GPU's ops by their own process) and traces
                  without NVTX (host work named ``(no NVTX range)``) are all classified

Parameter: ``dispatch_gap_ns`` (fact option ``dispatch_gap_ns``, nanoseconds, default
:data:`DISPATCH_GAP_NS` = 1 ms): the longest host time between two CUDA calls that still counts as
dispatching work. Python eager dispatch of one op takes 5-50 us, but the framework's own code between
two launches (the autograd engine between backward kernels, an optimizer's bookkeeping around its
foreach calls, module hooks) takes 100-300 us on the committed H200 recordings (host_sync's eager loop:
median 112-139 us in forward, backward and the optimizer), and a CUDA graph removes it with the
launches: the eager-vs-graphed pairs (``round3/host_sync_graph*``) measure it (graphs bought 36.5 ms of
a 58.7 ms step; at a 100 us bound launch-bound stated about half of that, at 1 ms 73-84%; pieces of 0.5-1
ms between two calls there are the autograd engine's thread waiting for work). Host code that does
something else (loading data or weights, preprocessing) runs for milliseconds without a CUDA call
(8-16 ms pieces in the committed dataloader and weight-loading workloads). The host time after a
synchronizing call's return and the launch latency keep a 100 us bound (:data:`RETURN_NS`), and the
host's time after a synchronization's return is never dispatch (the host is not between two launches
there: a loop's bookkeeping after its step-end sync, a check after ``.item()``): longer than the return,
it is host work, which the synchronization's refill charge weighs. That keeps the host code around a
CUDA-graph replay loop's step-end synchronization out of launch-bound (compile_train's cudagraph-tree
twin: host-bound-graph-loop judges it).

NVTX path (``nvtx_path``): for busy time, the innermost range open on the thread that launched the op
(``gpu_ops``); for idle time, the innermost range open on the feeding thread at that instant (else on
its process's main thread, as ``gpu_gaps`` does). Launches no range below the step level covers (a
trace without any NVTX range, or one marking only its steps) have the loops they show instead
(:mod:`analyzer.facts.launch_loops`: one thread launching the same short cycle of kernels back to back, a
Python loop over tensors or layers, ``(per-tensor loop: lerp_scalar, Mul, ...)``, nested in the step:
``step_12/(loop: ...)``), each a range on its launching thread from its first launch call to the end of
its last (torch.profiler's ``aten::`` ranges are no place: a loop open on the thread names the time in
theirs); on a trace without ranges host work keeps the detail ``(no NVTX range)``. Steps: the window's steps from completion to completion (the ``steps`` fact): step i holds ``(done[i-1], done[i]]``.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import FAR_NS, column, generic_path, key_groups, text, text_codes
from analyzer.facts.breakdown_busy import _op_classes, busy_and_gaps, label_coder
from analyzer.facts.breakdown_threads import cross_thread_waits, host_activity_column
from analyzer.facts.nvtx import main_threads, operator_ranges
from analyzer.facts.nvtx_ranges import ranges_only, shared_innermost
from analyzer.facts.registry import FactContext, fact
from analyzer.facts.breakdown_launch import submission as _submission, wait_details as _wait_details
from analyzer.facts.breakdown_firstlaunch import first_launch_detail, first_launch_rows
from analyzer.facts.breakdown_handoff import Handoffs, hand_off
from analyzer.facts.graphs import capture_blocks, relabel_compilation
from analyzer.facts.breakdown_ranges import generic_keys
from analyzer.facts.autotune import relabel_autotuning
from analyzer.facts.breakdown_pieces import _ascending, _gathered, _places, gathered_edges, shared_columns, span_of, spread
from analyzer.facts.breakdown_sync import SyncBlocks, charge_drains, charge_refills, refilled_call
from analyzer.facts.breakdown_syncop import charge_sync_ops
from analyzer.facts.breakdown_overhead import PER_OP_COLUMNS, split_per_op
from analyzer.facts.launch_loops import LoopNames, op_paths as op_paths_of, trace_loop_ranges, with_loops
from analyzer.loading.columns import categorical, narrow_int

DISPATCH_GAP_NS = 1_000_000  #: default longest host time between two CUDA calls that still counts as dispatch (ns)
#: the longest host time after a synchronizing call's return that still counts as returning from it, and the
#: longest time from an op's submission to its start that counts as launch latency (ns)
RETURN_NS = 100_000

#: a call that issues work (a launch, a stream or event call: not a synchronization) and lasts this long
#: does one-time work inside it: ``setup``, detail :func:`one_time_detail`. A launch costs microseconds
#: (median 4-21 us on every committed trace, at most 2.4 ms); the first launch of a kernel whose module
#: is loaded lazily, or a library's first call, takes milliseconds to seconds (3.06 s in HTA's AlexNet
#: capture). Synchronizations and allocations keep their cause whatever their length.
ONE_TIME_CALL_NS = 10_000_000


def one_time_detail(call: str) -> str:
    """Detail of the ``setup`` time inside one long call that issues work (:data:`ONE_TIME_CALL_NS`)."""
    return f"{call} (one-time: 10 ms or more in one call)"

CAUSES = ("compute", "exposed_comm", "exposed_copy", "launch_bound", "host_sync", "host_work",
          "wait_other", "setup", "unknown", "autotune", "compile")
#: idle causes the host held the GPU back with (what the "GPU-bound floor" removes)
HOST_CAUSES = ("launch_bound", "host_sync", "host_work", "autotune", "compile")
_C = {c: i for i, c in enumerate(CAUSES)}
#: ``unknown`` details: why the trace cannot tell what held the GPU back, and what to record so it can
#: (reports state each once, with its time; the breakdown's only unclassified part)
NO_API_IN_TRACE, NO_API_ON_THREAD = "no CUDA API calls in the trace", "no CUDA API calls on the launching thread"
NO_THREAD = "launching thread unknown"
UNKNOWN_WHY: dict[str, str] = {
    NO_API_IN_TRACE: "the trace recorded GPU activity only, no CUDA API calls, so what the host did in the "
                     "GPU's idle time cannot be told; record the host side too (nsys -t cuda, or "
                     "torch.profiler with ProfilerActivity.CPU)",
    NO_API_ON_THREAD: "the thread that launched the next GPU operation has no CUDA API call recorded (a "
                      "thread or process the profiler did not trace); trace every thread of every process "
                      "(nsys -s process-tree, or torch.profiler started in each process)",
    NO_THREAD: "the GPU operation ending the idle time has no launching call in the trace (made before "
               "the profiler's CPU side started, or by a thread or process it did not trace), so which "
               "host thread held the GPU back cannot be told; start CPU and CUDA activity together, on "
               "every thread (nsys -t cuda -s process-tree, torch.profiler CPU and CUDA activities)",
}
#: ``compute`` detail of the time between dependent nodes of one CUDA graph execution
GRAPH_NODE_GAPS = "CUDA graph (between nodes)"
#: ``setup`` detail of a stream capture's host time, BeginCapture to EndCapture (the launches in it are
#: recorded into a graph, not run: one-time work however many launches it holds)
GRAPH_CAPTURE = "CUDA graph capture"
#: the details the analyzer words itself (the others name what the trace recorded: NVTX ranges, calls,
#: kernel categories); reports put these in the trace's platform words (analyzer.loading.vocabulary)
OWN_DETAILS = frozenset({*UNKNOWN_WHY, GRAPH_NODE_GAPS, GRAPH_CAPTURE})
#: suffix of a ``launch_bound`` detail whose idle gap ends at a CUDA graph replay's op, or at the op just
#: before one (its input copy): the host preparing and launching the replay (``dispatch (before a graph
#: replay)``); the time inside a graph launch call keeps the call's name. Launch-bound counts only the
#: rest, the eager launches (:func:`graph_launch_time`)
GRAPH_NEXT = " (before a graph replay)"


def graph_launch_time(detail: str) -> bool:
    """A ``launch_bound`` detail of time spent on a CUDA graph replay's launch rather than on eager
    work: inside a graph launch call (``cudaGraphLaunch``...), or any launch-bound time of a gap that
    ends at a replay's op or its input copy (detail ending in :data:`GRAPH_NEXT`)."""
    from analyzer.loading.api_names import GRAPH_LAUNCH_APIS, cuda_equivalent
    from analyzer.loading.common import strip_api_suffix

    return detail.endswith(GRAPH_NEXT) or cuda_equivalent(strip_api_suffix(detail)) in GRAPH_LAUNCH_APIS


# one-time CUDA calls: module/library loading, graph capture and instantiation, device queries
_SETUP_API = re.compile(
    r"^(?:cu|cuda)(?:Module|Library|Link|Init$|DevicePrimaryCtx|CtxCreate|GetDeviceProperties|DeviceGetAttribute|"
    r"FuncGetAttributes|FuncSetAttribute|FuncSetCacheConfig|OccupancyMaxActive|StreamBeginCapture|"
    r"StreamEndCapture|ThreadExchangeStreamCaptureMode|Graph(?!Launch)|DeviceGetGraphMemAttribute|"
    r"GetDriverEntryPoint|GetProcAddress|GetExportTable|DeviceSetLimit|DeviceGetStreamPriorityRange)")

# allocating or freeing device or page-locked memory synchronizes implicitly (CUDA C++ Programming
# Guide, "Implicit Synchronization"): every alloc/free call but the stream-ordered (pool) ones
def host_wait_kind(detail: str) -> str:
    """What a ``host_sync`` segment's call is: ``alloc`` (an allocation or free), ``copy`` (a blocking copy
    or memset) or ``sync`` (an explicit synchronization, and anything else); a refill
    (``refill (cudaMemcpyAsync)``) is its call's."""
    from analyzer.facts.api import ALLOC_APIS, sync_kind

    detail = refilled_call(detail)
    if detail in ALLOC_APIS:
        return "alloc"
    kind = sync_kind(detail)
    return "copy" if kind in ("memcpy", "memset", "async_copy") else "sync"


def _syncing_alloc(name: str) -> bool:
    from analyzer.facts.api import ALLOC_APIS

    kind = ALLOC_APIS.get(name)
    return kind is not None and kind[1] not in ("pool", "virtual")


SEGMENT_COLUMNS = {
    "device": "GPU device id",
    "start": "segment start (ns, inside the window)",
    "end": "segment end (ns)",
    "cause": "compute | exposed_comm | exposed_copy | launch_bound | host_sync | host_work | wait_other | "
             "setup | unknown | autotune | compile",
    "detail": "kernel category, copy direction and memory kind, CUDA call, 'dispatch', 'refill (<call>)' (a "
              "synchronization's refill, host_sync), NVTX range or why unknown",
    "duration": "end - start (ns)",
    "nvtx_path": "NVTX path of the launching thread's innermost range ('' none); where no range below the step "
                 "level covers the launches, the loop they show ('(loop: ...)', analyzer.facts.launch_loops)",
    "range_key": "nvtx_path cut before the first framework operator (aten::...), enumerated components "
                 "made generic (step_12/load_batch -> step_N/load_batch): the breakdown's range key",
    "step": "step the segment's start lies in ('' outside every step or without steps)",
    "host_tid": "feeding thread of an idle segment (-1 for busy time or unknown)",
    "waited_tid": "host_work time the feeding thread spent blocked in an OS-runtime wait (sem_wait, "
                  "pthread_cond_wait, futex...) while another thread of its process ran inside an NVTX "
                  "range: that thread (the detail names it and its range); -1 otherwise",
    "host_activity": "for the longest host_work segments: the feeding thread's CPU samples and OS-runtime "
                     "calls inside it, when recorded ('' otherwise)",
}

BREAKDOWN_COLUMNS = {
    "device": "GPU device id",
    "scope": "window | step | range",
    "key": "'' for the window, the step name, or the range_key of timeline_segments (the NVTX path without "
           "framework operators, step_12/load_batch -> step_N/load_batch; '' = no range)",
    "cause": SEGMENT_COLUMNS["cause"],
    "detail": SEGMENT_COLUMNS["detail"],
    "duration_ns": "time the cause holds in that scope row-group (ns)",
    "share": "duration_ns / the (device, scope, key) row-group's total (0..1; sums to 1 per group)",
    "cause_share": "duration_ns / that cause's total time in the window on the device (0..1): which "
                   "steps, ranges or details hold it",
    "segments": "number of disjoint intervals summed",
    "key_cause_ns": "the row's cause in its (device, scope, key) group, all details together (ns)",
    "key_cause_share": "key_cause_ns / that cause's total time in the window on the device (0..1): the "
                       "step's or range's part of the cause",
    "device_host_held_ns": "on the row's device, window time the host held the GPU back (launch_bound + "
                           "host_sync + host_work, ns): the window minus it is the GPU-bound floor",
    "device_cause_ns": "on the row's device, the row's cause's total time in the window (ns)",
    "phase": "range rows: the range key cut at the level under the step (step_N/forward/layer_N -> "
             "step_N/forward; a range outside the steps, or any range without NVTX steps: its outermost "
             "component); '' for the time outside every range and for window and step rows",
    "phase_ns": "range rows: the phase's time on the device, every cause (ns; 0 for other rows)",
    "phase_host_held_ns": "range rows: the phase's time the host held the GPU back (launch_bound + host_sync "
                          "+ host_work, ns): phase_ns minus it is the phase's GPU-bound floor",
    "compiled_share": "range rows: of the kernels the phase launched one by one in the window (not replayed "
                      "from a CUDA graph), the share torch.compile's Inductor generated (Triton kernels "
                      "named triton_*; 0..1; 0 for other rows)",
    "graphed_share": "range rows: of the phase's kernel time in the window, the share CUDA graph replays ran "
                     "(kernels of a replay, or whole graph executions where nsys traced graphs, not their "
                     "nodes; 0..1; 0 for other rows)",
    "graphed": "range rows: 1 when the phase runs mostly in CUDA graphs (graphed_share at least GRAPHED_SHARE, "
               "50%): torch.compile's fix is in place there, the phase joins no group of compiled phases "
               "still to graph; else 0",
    "graph_launch": "1 for a launch_bound row of time spent on CUDA graph replays' launches (inside a graph "
                    "launch call, or in a gap that ends at a replay's op or at its input copy just before it: "
                    "detail ending ' (before a graph replay)'), which launch-bound does not count; 0 for every "
                    "other row (the eager launches)",
    "device_graph_launch_ns": "every row: on the row's device, the launch_bound time spent launching CUDA graph "
                              "replays in the window (ns; part of device_cause_ns for launch_bound rows)",
    "compiled": "range rows: 1 when the phase runs torch.compile'd code (compiled_share at least "
                "COMPILED_SHARE, 25%) and is not graphed, else 0",
    "per_tensor_share": "range rows: share of the phase's one-by-one launches in per-tensor loops (0..1)",
    "per_tensor": "range rows: 1 when the phase is in its device's per-tensor fix group, else 0",
    "fix_group": "range rows: the phases one fix covers, as launch-bound states them: the phase itself, "
                 "except that every compiled phase of a device under an NVTX range forms one group "
                 "(CUDA graphs of torch.compile(mode='reduce-overhead') cover every compiled region at "
                 "once), and so do its per-tensor loop phases (per_tensor_share >= 50%: one foreach change), named by its phases joined with ' + ' in name order (beyond 4: the first 3 and 'N more'); "
                 "'' for other rows",
    "group_ns": "range rows: the fix group's time on the device, every cause (ns); phase_ns for a phase "
                "of its own",
    "group_host_held_ns": "range rows: the fix group's time the host held the GPU back (ns)",
    **PER_OP_COLUMNS,
    "group_parts": "range rows of a group of several phases: each phase's part of the group's time of the "
                   "row's cause, largest first ('step_N/backward 25.7 ms (65%), step_N/forward ...'); '' "
                   "otherwise",
}


def empty_frame(columns: dict[str, str], ints: tuple[str, ...], floats: tuple[str, ...] = ()) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64" if c in ints else "float64" if c in floats else object)
                         for c in columns})


# -- the host side ---------------------------------------------------------------------------------
def _api_classes(ctx: FactContext) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``trace.api``: cause code of time spent inside it (launch_bound, host_sync, setup),
    and a detail code into the returned labels (the call's base name)."""
    from analyzer.facts.api import sync_kind, api_base_codes

    api = ctx.trace.api
    codes, base = api_base_codes(ctx.store)
    names = np.array([b if b is not None else "" for b in base], dtype=object)
    per_name = np.full(len(names), _C["launch_bound"], dtype=np.int8)
    async_copy = np.zeros(len(names), dtype=bool)
    for i, b in enumerate(names):
        kind = sync_kind(b) if b else None
        if kind in ("device", "stream", "event", "memcpy", "memset") or _syncing_alloc(b):
            per_name[i] = _C["host_sync"]
        elif kind == "async_copy":
            async_copy[i] = True
        elif b and _SETUP_API.match(b):
            per_name[i] = _C["setup"]
    cause = per_name[codes]
    # an asynchronous copy touching pageable memory blocks the host for the whole copy
    rows = np.flatnonzero(async_copy[codes])
    mc = ctx.trace.memcpy
    if len(rows) and len(mc):
        pageable = ((text(column(mc, "src_kind", "")) == "pageable")
                    | (text(column(mc, "dst_kind", "")) == "pageable")).to_numpy()
        ids = column(mc, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64)[pageable]
        hit = np.isin(api["correlation_id"].to_numpy(dtype=np.int64)[rows], ids)
        cause[rows[hit]] = _C["host_sync"]
    return cause, codes, names


def _thread_timeline(starts: np.ndarray, reach: np.ndarray, cause: np.ndarray, detail: np.ndarray,
                     dispatch_ns: int, dispatch_code: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One thread's host time as one sorted partition of all time: inside CUDA calls (the outermost call
    owns nested ones) and between them. ``starts``: its calls' starts in order, ``reach``: the running
    maximum of their ends (:func:`_frontier`'s). Returns ``(edges, cause, detail)``: segment ``i`` is
    ``[edges[i], edges[i + 1])``; the odd ones are the call blocks, the even ones the free time before
    each block (the last: after the last block), empty where two blocks touch. A host-work segment's
    detail is -1 (filled from NVTX later)."""
    prev = np.empty_like(reach)
    if len(prev):
        prev[0] = np.iinfo(np.int64).min
        prev[1:] = reach[:-1]
    s = np.maximum(starts, prev)
    del prev
    pos = np.flatnonzero(reach > s)  # the calls extending the frontier: one block each
    m = len(pos)
    edges = np.empty(2 * m + 2, dtype=np.int64)
    edges[0], edges[-1] = -FAR_NS, FAR_NS
    edges[1:-1:2] = s[pos]
    edges[2:-1:2] = reach[pos]
    del s
    fc, fd = cause[pos], detail[pos]
    # free span i lies after block i-1 (the block's cause says whether it is a sync's return)
    span = edges[1::2] - edges[0::2]
    prev_sync = np.zeros(m + 1, dtype=bool)
    prev_sync[1:] = fc == _C["host_sync"]
    returning = prev_sync & (span < RETURN_NS)
    short = ~prev_sync & (span < dispatch_ns)  # after a sync the host is not between two launches
    seg_cause = np.empty(2 * m + 1, dtype=np.int8)
    seg_cause[1::2] = fc
    seg_cause[0::2] = np.where(returning, _C["host_sync"], np.where(short, _C["launch_bound"], _C["host_work"]))
    seg_detail = np.empty(2 * m + 1, dtype=np.int32)
    seg_detail[1::2] = fd
    free_detail = np.full(m + 1, -1, dtype=np.int32)
    free_detail[short] = dispatch_code
    sync_ret = np.flatnonzero(returning)
    free_detail[sync_ret] = fd[sync_ret - 1]
    seg_detail[0::2] = free_detail
    return edges, seg_cause, seg_detail


# -- the segments ----------------------------------------------------------------------------------
def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    """The pieces of one column joined, the list emptied (its pieces freed as the column is made)."""
    out = np.concatenate(pieces) if len(pieces) != 1 else pieces[0]
    pieces.clear()
    return out


@fact("timeline_segments", columns=SEGMENT_COLUMNS, requires=("gpu_ops", "steps"),
      scope_keys=("device", "nvtx_path", "step"), alone=True)
def timeline_segments(ctx: FactContext) -> pd.DataFrame:
    """Per device, disjoint labelled intervals covering the analysis window exactly (one cause each:
    see :mod:`analyzer.facts.breakdown`), ordered by (device, start)."""
    w = ctx.window
    ops = ctx.get("gpu_ops")
    if w.duration_ns <= 0 or ops.empty:
        return empty_frame(SEGMENT_COLUMNS, ("device", "start", "end", "duration", "host_tid", "waited_tid"))
    dispatch_ns = int(ctx.options.get("dispatch_gap_ns", DISPATCH_GAP_NS) or DISPATCH_GAP_NS)
    level, op_detail, labels = _op_classes(ctx, ops)
    op_detail = op_detail.astype(np.int32)  # label codes (a few hundred): a column per segment
    code = label_coder(labels)

    busy, gaps = busy_and_gaps(ops, level, op_detail, w.start_ns, w.end_ns, code(GRAPH_NODE_GAPS), _C)
    del op_detail
    # the busy pieces clipped to the window, one column at a time (its pieces freed as it is made)
    clip_s = np.maximum(_joined(busy[1]), w.start_ns)
    clip_e = np.minimum(_joined(busy[2]), w.end_ns)
    inside = clip_e > clip_s
    # the loops the launches show stand for the ranges the program did not mark (none, or only steps)
    loops = trace_loop_ranges(ctx.trace, ctx.options.get("categories_file") or None, w)
    if loops.empty:
        op_paths_codes, op_paths = text_codes(ops["nvtx_path"])
    else:
        op_paths_codes, op_paths = op_paths_of(loops, ops)
    busy_frame = {"device": narrow_int(_joined(busy[0])[inside]), "start": clip_s[inside]}
    del clip_s
    busy_frame["end"] = clip_e[inside]
    del clip_e
    busy_frame["cause"] = _joined(busy[3])[inside]
    busy_frame["detail"] = _joined(busy[4])[inside].astype(np.int32, copy=False)  # codes in 32 bits
    busy_frame["path_codes"] = op_paths_codes[_joined(busy[5])[inside]].astype(np.int32, copy=False)
    del op_paths_codes, inside, busy
    gdev, gs, ge, gprev, gnext = (_joined(x) for x in gaps)
    gdev = narrow_int(gdev)
    syncs: list[SyncBlocks] = []
    idle = _classify_idle(ctx, ops, level, gdev, gs, ge, gprev, gnext, dispatch_ns, code, labels, syncs, loops)
    del gdev, gs, ge, gprev, gnext
    # the synchronizing operator's own host time, then the refill after it, are the sync's cost (in place)
    op_cut = charge_sync_ops(ctx, idle, syncs, labels, code, _C)
    if op_cut is not None:
        idle.update({k: np.concatenate([idle[k], v]) for k, v in op_cut.items()})
        del op_cut
    # the idle after a synchronization that drained the GPU, up to its next kernel (in place)
    kern = (busy_frame["cause"] == _C["compute"]) | (busy_frame["cause"] == _C["exposed_comm"])
    charge_drains(ctx, idle, syncs, labels, code, _C,
                  (busy_frame["device"][kern], busy_frame["start"][kern], busy_frame["end"][kern]), dispatch_ns)
    cut = charge_refills(ctx, idle, syncs, labels, code, _C)
    del syncs, kern
    # every column scattered in (device, start) order from its busy, idle and cut-off idle parts, each
    # part freed once placed (a 10 M-kernel trace has about 48 M segments: no joined copy of a column,
    # the places in 32 bits); text columns are categoricals built from codes (a few hundred texts)
    parts = [busy_frame, idle] + ([cut] if cut is not None else [])
    dest = _places([x["device"] for x in parts], [x["start"] for x in parts])
    bounds = np.cumsum([0] + [len(x["start"]) for x in parts]).tolist()
    seg_dev = _gathered(parts, dest, bounds, "device")
    start, end = gathered_edges(parts, dest, bounds)  # one device: end shares start's array
    seg_cause = _gathered(parts, dest, bounds, "cause")
    detail = _gathered(parts, dest, bounds, "detail")
    # NVTX paths: busy segments' codes into gpu_ops' labels, idle ones' into the range table's
    n_op = len(op_paths)
    for x in parts[1:]:
        idle_codes = x["path_codes"]
        idle_codes[idle_codes >= 0] += n_op
    path_codes = _gathered(parts, dest, bounds, "path_codes")
    paths = np.r_[np.asarray(op_paths, dtype=object), np.asarray(idle["path_labels"], dtype=object)]
    paths = np.array(["" if x is None or (isinstance(x, float) and np.isnan(x)) else str(x) for x in paths]
                     + [""], dtype=object)
    path_codes[path_codes < 0] = len(paths) - 1
    host_tid = _gathered(parts, dest, bounds, "tid", -1)
    pid = _gathered(parts, dest, bounds, "pid", -1)
    for x in parts:
        x.clear()
    del dest, busy_frame, idle, cut
    parts.clear()
    nvtx_path = categorical(path_codes, paths)
    seg = pd.DataFrame({
        "device": seg_dev, "start": start, "end": end,
        "cause": categorical(seg_cause, CAUSES),
        "detail": categorical(detail, labels),  # code -1 (a host-work detail never filled): ""
        "duration": end - start,
        "nvtx_path": nvtx_path,
        # each distinct path's key, read through the path's own (narrow) codes: one pass over the segments
        "range_key": spread(categorical(np.arange(len(nvtx_path.categories)), np.array(generic_keys(
            np.asarray(nvtx_path.categories, dtype=object)), dtype=object)), np.asarray(nvtx_path.codes)),
        "step": _step_column(ctx, start),
        "host_tid": host_tid,
    }, copy=False)
    del detail, path_codes, nvtx_path
    n_seg = len(seg)
    seg, pid = cross_thread_waits(ctx, seg, pid)
    if len(seg) != n_seg:  # host-work segments split at waits on another thread: their pieces' steps
        seg["step"] = _step_column(ctx, seg["start"].to_numpy(dtype=np.int64))
    seg = relabel_autotuning(ctx, seg, HOST_CAUSES[:3])  # a library's timed trials: analyzer.facts.autotune
    seg = relabel_compilation(ctx, seg, HOST_CAUSES[:3])  # torch.compile compiling: analyzer.facts.graphs
    seg["host_activity"] = host_activity_column(ctx, seg, (seg["cause"] == "host_work").to_numpy(), pid)
    del seg_dev, start, end, host_tid, pid  # only the frame holds its columns: those replaced below are freed
    seg = seg[list(SEGMENT_COLUMNS)]
    for c in ("device", "host_tid", "waited_tid"):  # ids in 32 bits where they fit (millions of rows)
        if seg[c].dtype != np.int32:
            seg[c] = narrow_int(seg[c].to_numpy())
    return shared_columns(split_per_op(ctx, seg))  # per-op host work split off; start/end on one array


class _HostCalls:
    """The API calls' classes and each thread's calls sorted by start, with the running maximum of their
    ends, made once for all chunks of gaps (:data:`IDLE_CHUNK`) on the first chunk that needs them."""

    def __init__(self, ctx: FactContext, code) -> None:  # type: ignore[no-untyped-def]
        api = ctx.trace.api
        a_cause, a_codes, a_names = _api_classes(ctx)
        name_code = np.array([code(str(x)) for x in a_names], dtype=np.int32)
        self.cause = a_cause
        self.detail = name_code[a_codes] if len(a_codes) else np.empty(0, np.int32)
        self.start = api["start"].to_numpy(dtype=np.int64)
        self.end = api["end"].to_numpy(dtype=np.int64)
        # one call issuing work for ONE_TIME_CALL_NS or more is one-time work inside it (the first launch
        # of a kernel loading its module, a library's initialization), not launch overhead
        long = np.flatnonzero((a_cause == _C["launch_bound"]) & (self.end - self.start >= ONE_TIME_CALL_NS))
        if len(long):
            from analyzer.facts.api import ALLOC_APIS  # a stream-ordered allocation growing its pool keeps its cause

            long = long[~np.array([str(a_names[c]) in ALLOC_APIS for c in a_codes[long].tolist()], dtype=bool)]
        if len(long):
            self.cause[long] = _C["setup"]
            self.detail[long] = [code(one_time_detail(str(a_names[c]))) for c in a_codes[long].tolist()]
        # a kernel's first launch far longer than its later ones loads its code object: one-time work too
        first = first_launch_rows(api, ctx.trace.kernels, self.cause == _C["launch_bound"])
        if len(first):
            self.cause[first] = _C["setup"]
            self.detail[first] = [code(first_launch_detail(str(a_names[c]))) for c in a_codes[first].tolist()]
        del a_codes
        # a stream capture is one block of setup from BeginCapture to EndCapture: its calls and the time
        # between them (the outermost call owns nested ones) record a graph, none of it launch overhead
        cap, cap_end = capture_blocks(ctx)
        if len(cap):
            self.end = self.end.copy()
            self.end[cap] = np.maximum(self.end[cap], cap_end)
            self.cause[cap], self.detail[cap] = _C["setup"], code(GRAPH_CAPTURE)
        a_tid = api["tid"].to_numpy()  # its own integer type: the same stable grouping without an int64 copy
        if a_tid.dtype.kind not in "iu":
            a_tid = a_tid.astype(np.int64)
        self.order, self.first, self.last = key_groups(a_tid)
        if len(self.order) < np.iinfo(np.int32).max:  # held through the idle classification: 32 bits
            self.order = self.order.astype(np.int32)
        self.threads = a_tid[self.order[self.first]] if len(self.first) else np.empty(0, np.int64)
        self._thread: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: per feeding thread (by id), its synchronizing calls' blocks on its whole timeline
        self.syncs: dict[int, SyncBlocks] = {}

    def group(self, tid: int) -> int:
        """The thread's group (-1: no CUDA call on it)."""
        g = int(np.searchsorted(self.threads, tid))
        return g if g < len(self.threads) and self.threads[g] == tid else -1

    def thread(self, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, starts, running maximum of the ends)`` of the calls of thread group ``g`` by start;
        the first time, also the thread's synchronizing calls' blocks (:attr:`syncs`): the parts of them
        no earlier call covers, as :func:`_thread_timeline` cuts them."""
        if g not in self._thread:
            rows = self.order[self.first[g]:self.last[g]]
            if not _ascending(rows):
                rows = np.sort(rows)
            # a thread making every call (sorted rows: all of them in order) reads the starts as they are
            t_start = self.start if len(rows) == len(self.start) else self.start[rows]
            if not _ascending(t_start):  # calls recorded out of start order
                o = np.argsort(t_start, kind="stable")
                rows, t_start = rows[o], t_start[o]
            reach = np.maximum.accumulate(np.maximum(self.end[rows], t_start))  # as _frontier's
            self._thread[g] = (rows, t_start, reach)
            sync = np.flatnonzero(self.cause[rows] == _C["host_sync"])
            if len(sync):
                prev = np.where(sync > 0, reach[np.maximum(sync - 1, 0)], np.iinfo(np.int64).min)
                s, e = np.maximum(t_start[sync], prev), reach[sync]
                keep = e > s
                if keep.any():
                    tid = int(self.threads[g])
                    self.syncs[tid] = (tid, s[keep], e[keep], self.detail[rows[sync[keep]]].astype(np.int64))
        return self._thread[g]


def _host_pieces(calls: _HostCalls, qidx: np.ndarray, feeder: np.ndarray, cs: np.ndarray, host_e: np.ndarray,
                 dispatch_ns: int, code, emit) -> None:  # type: ignore[no-untyped-def]
    """Emit the host part ``[cs, host_e)`` of the gaps ``qidx``, piece by piece: what the feeding thread
    did then (inside a CUDA call, dispatching between calls, returning from a sync, its own code)."""
    dispatch_code = code("dispatch")
    q_order, q_from, q_to = key_groups(feeder[qidx])

    def one_thread(q: np.ndarray, g: int) -> None:  # temporaries freed per thread
        rows, t_start, reach = calls.thread(g)
        qs, qe = cs[q], host_e[q]
        # only the calls around the gaps' time [lo, hi): from the call whose end is the last one before lo
        # (the free time after it takes its cause) to the first call starting at or after hi (the free
        # time before it is whole); every piece inside [lo, hi) is then what the whole thread gives
        lo, hi = int(qs.min()), int(qe.max())
        j = int(np.searchsorted(reach, lo, side="left"))
        if j > 0:
            j = int(np.searchsorted(reach, reach[j - 1], side="left"))
        k = min(int(np.searchsorted(t_start, hi, side="left")) + 1, len(rows))
        # the calls from j on extend the frontier as they do in the whole thread: its running maximum
        # (reach[j] > reach[j - 1]: j is the first call reaching as far as call j - 1's frontier end)
        r = rows[j:k]
        edges, tc, td = _thread_timeline(t_start[j:k], reach[j:k], calls.cause[r], calls.detail[r],
                                         dispatch_ns, dispatch_code)
        del r
        # the partition's open ends (+-FAR_NS) reach past any gap of a real trace's window, not one made
        # as wide as int64 allows (a whole-trace window ends at 1 << 62): widened to the gaps
        edges[0], edges[-1] = min(int(edges[0]), int(qs.min())), max(int(edges[-1]), hi)
        # each gap's pieces are the partition's segments lo..hi-1, cut to the gap at either end: every
        # piece's bounds read from the edges, the gap's own only at its first start and last end
        lo = np.searchsorted(edges, qs, side="right")
        lo -= 1
        count = np.searchsorted(edges, qe, side="left")
        count -= lo  # at least 1: qs < qe
        first = np.cumsum(count)
        first -= count
        seg = np.arange(int(first[-1] + count[-1])) - np.repeat(first - lo, count)
        del lo
        s, e = edges[seg], edges[seg + 1]
        s[first] = qs
        first += count
        first -= 1
        e[first] = qe
        del first
        emit(np.repeat(q, count), s, e, tc[seg], td[seg])  # empty pieces (touching calls) are dropped

    for qa, qb in zip(q_from.tolist(), q_to.tolist()):
        q = qidx[q_order[qa:qb]]
        g = calls.group(int(feeder[q[0]]))
        if g < 0:
            emit(q, cs[q], host_e[q], _C["unknown"], code(NO_API_ON_THREAD))
            continue
        one_thread(q, g)


#: idle gaps classified per chunk of this many (the per-gap temporaries, the pieces of each chunk and the
#: feeding threads' calls around them stay bounded: a 10 M-kernel trace has about 10 M gaps); the pieces
#: are the same for any chunk size
IDLE_CHUNK = 1 << 18


class _Idle:
    """What every chunk of gaps reads: ops' threads, NVTX ranges, host calls (made on first use, so the detail
    codes are numbered as one pass over the gaps would number them), the wait-details cache."""

    def __init__(self, ctx: FactContext, ops: pd.DataFrame, labels: list[str],
                 loops: pd.DataFrame | None = None, op_submit: np.ndarray | None = None) -> None:
        from analyzer.loading.model import NOT_IN_GRAPH

        self.op_submit = op_submit  # every op's submission (None: not made)
        self.otid = narrow_int(ops["tid"].to_numpy(dtype=np.int64))
        self.opid = narrow_int(ops["pid"].to_numpy(dtype=np.int64))
        # per op: a CUDA graph replay ran it, or it runs just before one (the gaps it ends are a replay's
        # launch); None: no graph in the trace
        in_graph = column(ops, "in_graph", NOT_IN_GRAPH).fillna(NOT_IN_GRAPH).to_numpy(dtype=np.int64)
        self.graph_op: np.ndarray | None = None
        if (in_graph != NOT_IN_GRAPH).any():
            # also the op just before a replay's on its device (gpu_ops is ordered by start): the replay's
            # input copy (cudagraph trees and hand-written graph loops copy fresh inputs into the graph's
            # static buffers right before each replay), so the gap before it is the replay's preparation
            graph = in_graph != NOT_IN_GRAPH
            lead = np.zeros(len(graph), dtype=bool)
            order, first, last = key_groups(ops["device"].to_numpy(dtype=np.int64))
            for a, b in zip(first.tolist(), last.tolist()):
                rows = np.sort(order[a:b])
                lead[rows[:-1]] = graph[rows[1:]]
            self.graph_op = graph | lead
        self.labels = labels
        self._graph_detail: dict[int, int] = {}
        self.calls: _HostCalls | None = None
        self.waits: dict = {}
        self.nv = ranges_only(ctx.trace.nvtx)
        if self.nv.empty:
            self.path_codes, self.path_labels = np.empty(0, np.int64), np.empty(0, dtype=object)
            self.text_codes, self.text_labels = np.empty(0, np.int64), np.empty(0, dtype=object)
            self.mains: dict[int, int] = {}
        else:
            path_codes, self.path_labels = text_codes(column(self.nv, "path", ""))
            text_codes_, self.text_labels = text_codes(self.nv["text"])
            # each followed by a -1: what range position -1 (no range) reads in one gather
            self.path_codes = np.r_[path_codes.astype(np.int32), -1]
            self.text_codes = np.r_[text_codes_.astype(np.int32), -1]
            self.mains = main_threads(self.nv)
        # the main threads as sorted arrays: each segment's process looked up by one binary search
        self._main_pid = np.array(sorted(self.mains), dtype=np.int64)
        self._main_tid = np.array([self.mains[k] for k in sorted(self.mains)], dtype=np.int64)
        self.loops: LoopNames | None = None
        if not self.nv.empty and loops is not None and not loops.empty and operator_ranges(self.nv).any():
            # torch.profiler's operator ranges cover every launch, across a loop's bounds: they stay, and a
            # loop open on the feeding thread names the time in their place
            self.loops = LoopNames(loops, self.path_labels, self.text_labels)
            self.path_labels, self.text_labels = self.loops.path_labels, self.loops.text_labels
        elif not self.nv.empty and loops is not None and not loops.empty:
            # loops nested in the program's step ranges: found like its own ranges (main threads as before)
            self.nv = with_loops(self.nv, loops)
            path_codes, self.path_labels = text_codes(column(self.nv, "path", ""))
            text_codes_, self.text_labels = text_codes(self.nv["text"])
            self.path_codes = np.r_[path_codes.astype(np.int32), -1]
            self.text_codes = np.r_[text_codes_.astype(np.int32), -1]
        elif self.nv.empty and loops is not None and not loops.empty:
            # the loops found from the launches (:mod:`analyzer.facts.launch_loops`) name the time on
            # their own thread only (no main-thread fallback), and host work keeps "(no NVTX range)"
            self.nv = loops
            path_codes, self.path_labels = text_codes(loops["path"])
            self.path_codes = np.r_[path_codes.astype(np.int32), -1]
            self.text_codes = np.full(len(loops) + 1, -1, dtype=np.int32)
            self.text_labels = np.empty(0, dtype=object)
        self.innermost = shared_innermost(self.nv)  # each chunk's lookups read one table of answers
        self._fallbacks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._handoffs: Handoffs | None = None

    def handoffs(self, ctx: FactContext, ops: pd.DataFrame) -> Handoffs:
        """The processes' launching threads (:mod:`analyzer.facts.breakdown_handoff`), made on first use."""
        if self._handoffs is None:
            self._handoffs = Handoffs(ctx, ops, self.otid, self.opid, self.op_submit)
        return self._handoffs

    def range_at(self, tid: np.ndarray, pid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Row in the range table of the innermost range open at ``t[i]`` on thread ``tid[i]``, else on its
        process's main thread (``pid[i]``'s), -1 for neither. Many queries (a chunk of segments): per
        (thread, process) one table of the answer at every instant either thread's ranges start or end
        (each answer changes only there), made once, and one binary search per query."""
        if len(t) <= 4 * len(self.nv):  # few queries: the thread's answer, then the main thread's for the misses
            rpos = self.innermost(tid, t)
            missing = rpos < 0
            if missing.any():
                retry = self.innermost(self.main_tid(pid[missing]), t[missing])
                sub = rpos[missing]
                sub[retry >= 0] = retry[retry >= 0]
                rpos[missing] = sub
            return rpos
        if tid.min() == tid.max() and pid.min() == pid.max():  # one thread and process: no grouping
            times, table = self._fallback_table(int(tid[0]), int(pid[0]))
            return table[np.searchsorted(times, t, side="right")]
        # one process (several threads): its threads are the groups, no 64-bit key made
        key = tid if pid.min() == pid.max() else (tid.astype(np.int64) << 32) | (pid.astype(np.int64) & 0xFFFFFFFF)
        order, first, last = key_groups(key)
        del key
        out = np.empty(len(t), dtype=np.int64)
        for a, b in zip(first.tolist(), last.tolist()):
            rows = order[a:b]
            times, table = self._fallback_table(int(tid[rows[0]]), int(pid[rows[0]]))
            out[rows] = table[np.searchsorted(times, t[rows], side="right")]
        return out

    def _fallback_table(self, tid: int, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """``(instants, answers)`` of :meth:`range_at` for one thread and process: the instants sorted, the
        answers behind a -1 (position k + 1: from instant k on; before the first, no range is open)."""
        if (tid, pid) not in self._fallbacks:
            main = int(self.main_tid(np.array([pid], dtype=np.int64))[0])
            r_tid = self.nv["tid"].to_numpy(dtype=np.int64)
            mine = (r_tid == tid) | (r_tid == main)
            times = np.sort(np.r_[self.nv["start"].to_numpy(dtype=np.int64)[mine],
                                  self.nv["end"].to_numpy(dtype=np.int64)[mine]])
            times = times[np.r_[True, times[1:] != times[:-1]]] if len(times) else times
            own = self.innermost(np.full(len(times), tid, dtype=np.int64), times)
            other = self.innermost(np.full(len(times), main, dtype=np.int64), times)
            self._fallbacks[(tid, pid)] = (times, np.r_[-1, np.where(own >= 0, own, other)].astype(np.int64))
        return self._fallbacks[(tid, pid)]

    def main_tid(self, pid: np.ndarray) -> np.ndarray:
        """Per process id, its main thread (:func:`analyzer.facts.nvtx.main_threads`), -1 for none."""
        out = np.full(len(pid), -1, dtype=np.int64)
        if len(self._main_pid) and len(pid):
            at = np.minimum(np.searchsorted(self._main_pid, pid), len(self._main_pid) - 1)
            hit = self._main_pid[at] == pid
            out[hit] = self._main_tid[at[hit]]
        return out

    def graph_details(self, detail: np.ndarray, code) -> np.ndarray:  # type: ignore[no-untyped-def]
        """The launch-bound detail codes ``detail`` of time before a graph replay: ``X (before a graph
        replay)`` (:data:`GRAPH_NEXT`), a graph launch call's own name kept; each distinct code named once."""
        used = np.unique(detail)
        for x in used.tolist():
            if x not in self._graph_detail:
                label = str(self.labels[x]) if x >= 0 else ""
                self._graph_detail[x] = x if graph_launch_time(label) else code(label + GRAPH_NEXT)
        mapped = np.array([self._graph_detail[x] for x in used.tolist()], dtype=np.int32)
        return mapped[np.searchsorted(used, detail)]


def _classify_idle(ctx: FactContext, ops: pd.DataFrame, level: np.ndarray, gdev: np.ndarray, g0: np.ndarray,
                   g1: np.ndarray, prev_op: np.ndarray, next_op: np.ndarray, dispatch_ns: int, code,  # type: ignore[no-untyped-def]
                   labels: list[str], syncs: list[SyncBlocks], loops: pd.DataFrame | None = None) -> dict[str, np.ndarray]:
    """Idle segments (clipped to the window) of the gaps ``[g0, g1)`` and the ops around them, :data:`IDLE_CHUNK`
    gaps at a time; the feeding threads' synchronizing calls go to ``syncs`` (each thread's once). ``labels``:
    the texts ``code`` numbers (a launch-bound detail before a graph replay is named from its eager one)."""
    n = len(g0)
    submit = np.full(n, -1, dtype=np.int64)  # the end of the launch call of the op ending each gap
    has_next = next_op >= 0
    op_submit = _submission(ctx, ops, np.arange(len(ops))) if 2 * int(has_next.sum()) >= len(ops) else None
    if has_next.any():  # gaps after most ops: all ops' submissions (the hand-offs read them too)
        submit[has_next] = (op_submit[next_op[has_next]] if op_submit is not None
                            else _submission(ctx, ops, next_op[has_next]))
    del has_next
    shared = _Idle(ctx, ops, labels, loops, op_submit)
    parts = [_classify_chunk(ctx, ops, level, gdev[a:a + IDLE_CHUNK], g0[a:a + IDLE_CHUNK], g1[a:a + IDLE_CHUNK],
                             prev_op[a:a + IDLE_CHUNK], next_op[a:a + IDLE_CHUNK], submit[a:a + IDLE_CHUNK],
                             dispatch_ns, code, shared)
             for a in range(0, max(n, 1), IDLE_CHUNK)]
    del submit
    if shared.calls is not None:
        syncs.extend(shared.calls.syncs[t] for t in sorted(shared.calls.syncs))
    # every chunk's path codes point into the range table's paths; the host calls' tables (each thread's
    # calls sorted, their running maxima) freed before the chunks' pieces are joined
    path_labels = shared.path_labels
    del shared
    out: dict[str, np.ndarray] = {}
    for name in ("device", "start", "end", "cause", "detail", "path_codes", "tid", "pid"):
        out[name] = np.concatenate([p.pop(name) for p in parts]) if len(parts) > 1 else parts[0].pop(name)
    out["path_labels"] = path_labels if len(out["start"]) else np.empty(0, dtype=object)
    return out


def _classify_chunk(ctx: FactContext, ops: pd.DataFrame, level: np.ndarray, gdev: np.ndarray, g0: np.ndarray,
                    g1: np.ndarray, prev_op: np.ndarray, next_op: np.ndarray, submit: np.ndarray, dispatch_ns: int,
                    code, shared: _Idle) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """:func:`_classify_idle` of one chunk of gaps (``submit``: their next ops' submissions)."""
    w = ctx.window
    n = len(g0)
    otid, opid = shared.otid, shared.opid
    has_next = next_op >= 0
    feeder = np.where(has_next, otid[np.maximum(next_op, 0)], -1)
    fb = (feeder < 0) & (prev_op >= 0)
    feeder[fb] = otid[prev_op[fb]]
    fpid = np.where(has_next, opid[np.maximum(next_op, 0)], -1)
    fpid[fb] = opid[prev_op[fb]]
    del fb
    cs = np.maximum(g0, w.start_ns)
    ce = np.minimum(g1, w.end_ns)
    out_dev: list[np.ndarray] = []
    out_s: list[np.ndarray] = []
    out_e: list[np.ndarray] = []
    out_c: list[np.ndarray] = []
    out_d: list[np.ndarray] = []
    out_t: list[np.ndarray] = []  # feeding thread (for the NVTX lookup), -1 none
    out_p: list[np.ndarray] = []

    # the gaps a CUDA graph replay's op (or its input copy) ends: their launch-bound time launches the replay
    graph_next = has_next & shared.graph_op[np.maximum(next_op, 0)] if shared.graph_op is not None else None

    def emit(idx: np.ndarray, s: np.ndarray, e: np.ndarray, cause: int | np.ndarray, detail: int | np.ndarray) -> None:
        keep = e > s
        if not keep.any():
            return
        idx, s, e = idx[keep], s[keep], e[keep]
        c = (np.broadcast_to(np.asarray(cause, dtype=np.int8), keep.shape)[keep] if np.ndim(cause)
             else np.full(len(s), cause, dtype=np.int8))
        d = (np.broadcast_to(np.asarray(detail, dtype=np.int32), keep.shape)[keep] if np.ndim(detail)
             else np.full(len(s), detail, dtype=np.int32))
        if np.ndim(cause) and shared.handoffs(ctx, ops):  # the work handed from one launching thread to another
            idx, s, e, c, d = hand_off(shared.handoffs(ctx, ops), idx, s, e, c, d, feeder, fpid, graph_next,
                                       _C["host_work"], _C["launch_bound"], code("dispatch"), dispatch_ns)
        out_dev.append(gdev[idx])
        out_s.append(s)
        out_e.append(e)
        if graph_next is not None:
            to_graph = np.flatnonzero(graph_next[idx] & (c == _C["launch_bound"]))
            if len(to_graph):
                d = d.copy()
                d[to_graph] = shared.graph_details(d[to_graph], code)
        out_c.append(c)
        out_d.append(d)
        out_t.append(feeder[idx])
        out_p.append(fpid[idx])

    all_idx = np.arange(n)
    # queued before the gap: the GPU waited on something other than the host
    queued = has_next & (submit >= 0) & (submit <= g0)
    comm_next = has_next & (level[np.maximum(next_op, 0)] == 1)
    emit(all_idx[queued & comm_next], cs[queued & comm_next], ce[queued & comm_next], _C["wait_other"],
         code("collective (another rank)"))
    waited = queued & ~comm_next
    emit(all_idx[waited], cs[waited], ce[waited], _C["wait_other"],
         _wait_details(ctx, ops, next_op[waited], code, shared.waits))
    rest = ~queued
    # submitted during the gap: from the submission to the start, launch latency (or a wait)
    sub_in = rest & (submit > g0)
    tail_s = np.where(sub_in, np.clip(submit, cs, ce), ce)
    tail_len = np.where(sub_in, g1 - np.maximum(submit, g0), 0)
    lat = sub_in & (tail_len <= RETURN_NS)
    emit(all_idx[lat], tail_s[lat], ce[lat], _C["launch_bound"], code("launch latency"))
    late = sub_in & ~lat
    emit(all_idx[late], tail_s[late], ce[late], _C["wait_other"], _wait_details(ctx, ops, next_op[late], code, shared.waits))
    host_e = np.where(sub_in, tail_s, ce)
    # the host part: what the feeding thread did, piece by piece
    api = ctx.trace.api
    hq = rest & (host_e > cs)
    if api.empty:
        emit(all_idx[hq], cs[hq], host_e[hq], _C["unknown"], code(NO_API_IN_TRACE))
        hq &= False
    no_thread = hq & (feeder < 0)
    emit(all_idx[no_thread], cs[no_thread], host_e[no_thread], _C["unknown"], code(NO_THREAD))
    hq &= ~no_thread
    if hq.any():
        if shared.calls is None:
            shared.calls = _HostCalls(ctx, code)
        _host_pieces(shared.calls, np.flatnonzero(hq), feeder, cs, host_e, dispatch_ns, code, emit)
    del all_idx, queued, comm_next, rest, sub_in, tail_s, tail_len, lat, late, host_e, hq, no_thread
    # the pieces as columns, each list freed once joined (millions of segments at a million kernels)
    cols = {}
    for name, parts, dtype in (("dev", out_dev, gdev.dtype), ("s", out_s, np.int64), ("e", out_e, np.int64),
                               ("c", out_c, np.int8), ("d", out_d, np.int32), ("t", out_t, feeder.dtype),
                               ("p", out_p, fpid.dtype)):
        cols[name] = np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype=dtype)
        parts.clear()
    cols["t"][cols["c"] == _C["unknown"]] = -1
    dev, s, e, c, d, t, p = (cols.pop(name) for name in ("dev", "s", "e", "c", "d", "t", "p"))
    # NVTX path (and the host-work detail): the feeding thread's innermost range at the middle; as
    # codes into the range table's distinct texts (code -1: no range)
    path_codes = np.full(len(s), -1, dtype=np.int32)
    path_labels = np.empty(0, dtype=object)
    rng_codes = np.full(len(s), -1, dtype=np.int32)
    rng_labels = np.empty(0, dtype=object)
    nv = shared.nv
    if len(s) and not nv.empty:
        mid = s + (e - s) // 2
        rpos = shared.range_at(t, p, mid)
        path_labels, rng_labels = shared.path_labels, shared.text_labels
        path_codes = shared.path_codes[rpos]
        rng_codes = shared.text_codes[rpos]
        if shared.loops is not None:
            shared.loops.rename(t, mid, path_codes, rng_codes)
    hw = (c == _C["host_work"]) & (d < 0)
    if hw.any():
        d = d.copy()
        # the range codes in use (small integers from -1: counted, not sorted), each named once
        hw_codes = rng_codes[hw] + 1
        used = np.flatnonzero(np.bincount(hw_codes, minlength=len(rng_labels) + 1)) - 1
        per = np.zeros(len(rng_labels) + 1, dtype=np.int64)
        # the range's text made generic (``ProfilerStep#12`` -> ``ProfilerStep#N``, ``step_3`` -> ``step_N``):
        # the name the NVTX paths, the verdict and every table give the same code in every step
        per[used + 1] = [code(generic_path(str(rng_labels[u])) if u >= 0 and rng_labels[u] else "(no NVTX range)")
                         for u in used]
        d[hw] = per[hw_codes]
    return {"device": dev, "start": s, "end": e, "cause": c, "detail": d, "path_codes": path_codes,
            "path_labels": path_labels, "tid": t, "pid": p}


def _step_column(ctx: FactContext, start: np.ndarray) -> pd.Categorical:
    """The step holding each segment start, "" outside every step (the breakdown splits crossing ones)."""
    steps = ctx.get("steps")
    if steps.empty or not len(start):
        return categorical(np.zeros(len(start), dtype=np.int64), np.array([""], dtype=object))
    lo, hi, names = step_bounds(steps)
    labels = np.array([str(x) for x in names] + [""], dtype=object)
    if len(start) > 1 and _ascending(start):
        # sorted starts (one device's segments): runs of codes written at once, in the narrowest integer
        # type: before the first step outside, then per step its own starts (from the first at or after
        # its start to the first at or after its end) and the starts outside it up to the next step's
        # (steps are sorted and disjoint: a step ends no later than the next one starts)
        first = np.searchsorted(start, lo, side="left")
        inside = np.maximum(np.searchsorted(start, hi, side="left"), first)
        bounds = np.empty(2 * len(lo) + 2, dtype=np.int64)
        bounds[0], bounds[-1] = 0, len(start)
        bounds[1:-1:2] = first
        bounds[2:-1:2] = inside
        values = np.full(2 * len(lo) + 1, len(names), dtype=np.int16 if len(names) < 2**15 - 1 else np.int64)
        values[1::2] = np.arange(len(lo))
        runs = np.diff(bounds)
        return spread(categorical(values[runs > 0], labels), repeats=runs[runs > 0])
    k = span_of(start, lo)  # a fresh array: the codes made in it (millions of segments)
    outside = k < 0
    np.maximum(k, 0, out=k)
    outside |= start >= hi[k]
    k[outside] = len(names)
    return categorical(k, labels)


def step_bounds(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps as contiguous spans ``[previous completion, completion)``, sorted and disjoint."""
    done = steps["done"].to_numpy(dtype=np.int64)
    prev = done - steps["duration"].to_numpy(dtype=np.int64)
    order = np.argsort(prev, kind="stable")
    lo, hi = prev[order], done[order]
    # disjoint even where completions overlap: a step starts no earlier than every earlier one ended
    reach = np.maximum.accumulate(np.maximum(hi, lo))
    lo = np.maximum(lo, np.r_[np.iinfo(np.int64).min, reach[:-1]])
    return lo, np.maximum(hi, lo), steps["step"].to_numpy(dtype=object)[order]
