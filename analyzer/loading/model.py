"""The one normalized trace model every fact, rule and report reads.

All times are integer nanoseconds from the trace origin (the session start of the nsys export),
stored as ``int64``. Frames are pandas DataFrames with exactly the columns listed in the ``*_COLUMNS``
tuples below (a loader may add more, never fewer). A table that the export lacks is an empty frame with
these columns, never ``None``.

Dtypes (what code reading the frames must accept)
-------------------------------------------------
A million-kernel trace is ~1 M kernel rows and ~2 M API rows, so the nsys loader stores the big frames
(kernels, memcpy, memset, api, sync) compactly:

* **times** (``start``, ``end``, ``duration``, ``api_start``) and ``bytes``: ``int64``, always;
* **id-like integers** (:data:`COMPACT_INT_COLUMNS`: device, context, stream, correlation id, launch
  dimensions, registers, shared memory, launch type, graph node, pid, tid, nvtx_id, return value):
  ``int32`` when the trace's values fit, else ``int64``; those of :data:`NARROW_INT_COLUMNS` (device,
  context, ``in_graph``, launch type, graph and graph node ids from ``int8``; stream, return value,
  block dimensions, registers from ``int16``) in the narrowest type that holds every value. Compute with them in ``int64``
  (``k["grid_x"].astype("int64") * k["grid_y"] * k["grid_z"]``): a narrow product can wrap, and with
  NumPy 2 an ``int8`` column plus or times a Python integer beyond its range raises;
* **text** (``name``, ``short_name``, ``api_name``, ``nvtx_range``, ``nvtx_path``, ``attribution``,
  ``kind``, ``direction``, ``src_kind``, ``dst_kind``, ``mem_kind``, ``sync_type``): pandas
  ``category`` with ``object`` categories: the distinct texts in use, sorted (so sorting by the column
  is lexical); missing text is ``""``, never NaN. ``==``, ``isin``, ``.str.*``, ``groupby`` and
  ``sort_values`` behave as on strings. Unlike ``object`` text: assigning a text that is not yet a
  category raises (``col.astype(object)`` first), ``s + "x"`` raises, ``value_counts()`` of a
  filtered subset lists the unused categories with count 0, ``unique()`` returns a Categorical.
  ``analyzer.facts._util.factorize_objects`` and ``text`` take both and use the codes directly.

* **constant columns**: an integer column of those frames (and of the memory frame) that holds one value in
  every row (device, context, launch type, graph ids, ``pid``, ``return_value`` on most traces) is stored once,
  a read-only view of one element with stride 0 (:func:`analyzer.loading.columns.shared_constants`, applied
  by ``load_trace`` last): 14% of the model on the 1M-kernel benchmark trace. It reads as any column; do not
  write into the model's frames in place (``trace.kernels.loc[rows, c] = v`` raises on such a column):
  replace a column or change a copy.

The small frames (nvtx, gpus, processes, threads), :func:`empty_frame` and frames other loaders or
tests build keep ``object`` text and ``int64`` integers: code must accept both forms.

Attribution columns (shared by kernels, memcpy, memset):

``api_name``        CUDA API call that launched the operation (joined on correlation id), or ``""``
``api_start``       its start (ns), ``-1`` when unknown
``pid`` / ``tid``   process / OS thread that launched it (from the API call), ``-1`` when unknown
``nvtx_id``         row index (``range_id``) of the innermost NVTX range open at launch, ``-1`` if none
``nvtx_range``      text of that innermost range, ``""`` if none
``nvtx_path``       ``/``-joined texts of the open range stack, outermost first (``step_3/forward/...``)
``attribution``     how the range was found: ``"thread"`` (ranges on the launching thread),
                    ``"process"`` (launching thread had none open; ranges open on another thread of the
                    same process were used, e.g. PyTorch's autograd worker), or ``"none"``

CUDA graphs (kernel columns ``in_graph`` and ``graph_id``)
-----------------------------------------------------------
A graph replay is one launch call (``cudaGraphLaunch``, ``cuGraphLaunch``, ``hipGraphLaunch``) that runs
many kernels; they share the launch's correlation id, so their attribution columns name that call and the
NVTX range open around it. ``in_graph`` is 1 for each such kernel (node-level nsys tracing, torch.profiler;
or a kernel carrying a graph node id). With nsys' default ``--cuda-graph-trace=graph`` the export holds
only whole executions (``CUPTI_ACTIVITY_KIND_GRAPH_TRACE``): each becomes one kernel row named ``CUDA graph
<graphId>`` with ``in_graph`` = 2 and no launch configuration (grid, block, registers -1), so it is GPU work
in every fact (busy time, gaps, windows, steps, phases, diff, jobs). An execution whose kernels the
export holds adds no row: nothing is counted twice. ``trace.extras["cuda_graphs"]`` counts the executions
read (``executions``, ``with_kernels``, ``without_kernels``, ``untimed``) and, from nsys' ``CUDA_GRAPH_EVENTS``,
the graph lifecycle: ``graphs_created`` (captures), ``instantiations``, ``nodes_created``, ``clones``,
``instantiated_at`` (each instantiation's time, ns from the origin, sorted; at most 10,000, the rest counted
in ``instantiated_at_left_out``) and ``executions_without_instantiation`` (executions of graphs instantiated
before the recording began, said once in the notes).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analyzer.loading.columns import empty_typed

#: the largest time (ns) the trace model holds: timestamps beyond +-TIME_MAX (UTC ones are ~2^60.6) and
#: durations that add up to more (about 146 years) are damage, since differences and totals of such
#: values overflow the 64-bit integers every time is kept in; loaders refuse them
TIME_MAX = 1 << 62

ATTRIBUTION_COLUMNS: tuple[str, ...] = (
    "api_name",
    "api_start",
    "pid",
    "tid",
    "nvtx_id",
    "nvtx_range",
    "nvtx_path",
    "attribution",
)

KERNEL_COLUMNS: tuple[str, ...] = (
    "start",
    "end",
    "duration",
    "device",
    "context",
    "stream",
    "correlation_id",
    "short_name",
    "name",  # demangled name (falls back to the short name when the export has none)
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "static_smem",  # bytes per block
    "dynamic_smem",  # bytes per block
    "launch_type",  # int as exported (0 regular, ...); -1 unknown
    "graph_node_id",  # -1 when not launched from a CUDA graph
    "in_graph",  # 0 launched on its own; 1 a kernel a CUDA graph replay ran; 2 a whole graph execution
    #              whose kernels the trace does not hold (nsys --cuda-graph-trace=graph): see GRAPH_EXECUTION
    "graph_id",  # the CUDA graph's id where the trace says (nsys graphId), else -1
) + ATTRIBUTION_COLUMNS

#: ``in_graph`` values
NOT_IN_GRAPH, GRAPH_KERNEL, GRAPH_EXECUTION = 0, 1, 2

MEMCPY_COLUMNS: tuple[str, ...] = (
    "start",
    "end",
    "duration",
    "device",
    "context",
    "stream",
    "correlation_id",
    "bytes",
    "direction",  # "H2D" | "D2H" | "D2D" | "P2P" | "H2H" | "other"
    "src_kind",  # "pageable" | "pinned" | "device" | "managed" | "array" | "unknown"
    "dst_kind",
) + ATTRIBUTION_COLUMNS

MEMSET_COLUMNS: tuple[str, ...] = (
    "start",
    "end",
    "duration",
    "device",
    "context",
    "stream",
    "correlation_id",
    "bytes",
    "mem_kind",  # as memcpy kinds
) + ATTRIBUTION_COLUMNS

API_COLUMNS: tuple[str, ...] = (
    "start",
    "end",
    "duration",
    "name",  # e.g. "cudaLaunchKernel", "cudaMemcpyAsync", "cuLaunchKernel" (version suffix _v7000 stripped)
    "kind",  # "runtime" | "driver"
    "pid",
    "tid",
    "correlation_id",
    "return_value",
    "nvtx_id",  # innermost NVTX range open on the calling thread at the call's start, -1 if none
    "nvtx_range",
    "nvtx_path",
)

SYNC_COLUMNS: tuple[str, ...] = (
    "start",
    "end",
    "duration",
    "device",
    "context",
    "stream",
    "correlation_id",
    "sync_type",  # e.g. "stream_synchronize", "context_synchronize", "event_synchronize", "stream_wait_event"
    "pid",
    "tid",
)

NVTX_COLUMNS: tuple[str, ...] = (
    "range_id",  # stable row id, equal to the frame's index
    "start",
    "end",  # for marks, end == start
    "duration",
    "text",
    "domain",  # "" for the default domain
    "kind",  # "pushpop" | "startend" | "mark"
    "pid",
    "tid",
    "depth",  # 0 for outermost (per thread, push/pop and start/end ranges nested by containment)
    "parent_id",  # range_id of the enclosing range on the same thread, -1 for roots
    "path",  # "/"-joined texts from the outermost range down to this one
)
#: optional NVTX column, present when the trace has payloads as JSON text (nsys export
#: --include-json=true): ``payload`` (str, "" for none), e.g. NCCL's {"NCCL communicator ID": ...,
#: "Message size [bytes]": ...}; read by analyzer.facts.nccl_nvtx

#: id-like integer columns of the big frames stored as int32 when the trace's values fit
COMPACT_INT_COLUMNS: frozenset[str] = frozenset({
    "device", "context", "stream", "correlation_id", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
    "block_z", "registers_per_thread", "static_smem", "dynamic_smem", "launch_type", "graph_node_id",
    "in_graph", "graph_id", "pid", "tid", "nvtx_id", "return_value",
})

#: of :data:`COMPACT_INT_COLUMNS`, those stored narrower than 32 bits where the trace's values fit: small
#: enumerations and ids that no code does arithmetic on (device, context, ``in_graph``, launch type, graph
#: and graph node ids, -1 on most traces: from 8 bits; stream, CUDA return value: from 16 bits) and the
#: launch sizes whose products stay small (block dimensions, at most 1,024 threads a block, and
#: registers, at most 255 a thread: from 16 bits). Read them
#: ``to_numpy(dtype=np.int64)`` before arithmetic: with NumPy 2 an 8-bit column times ``1000`` raises
#: (``OverflowError``) and a product of 16-bit columns can wrap
NARROW_INT_COLUMNS: Mapping[str, str] = {
    "device": "int8", "context": "int8", "in_graph": "int8", "launch_type": "int8", "graph_id": "int8",
    "graph_node_id": "int8",
    "stream": "int16", "return_value": "int16", "block_x": "int16", "block_y": "int16", "block_z": "int16",
    "registers_per_thread": "int16",
}

GPU_COLUMNS: tuple[str, ...] = (
    "device",
    "name",
    "sm_count",
    "memory_bytes",
    "memory_bandwidth",  # bytes/s, 0 if unknown
    "clock_hz",
    "compute_major",
    "compute_minor",
    "max_threads_per_block",
    "max_registers_per_block",
    "max_registers_per_sm",
    "max_shared_per_block",  # default (non opt-in) limit, bytes
    "max_shared_per_block_optin",
    "max_shared_per_sm",
    "max_threads_per_sm",
    "max_blocks_per_sm",
    "threads_per_warp",
    "l2_cache_bytes",
)

PROCESS_COLUMNS: tuple[str, ...] = ("pid", "name")
THREAD_COLUMNS: tuple[str, ...] = ("pid", "tid", "name")

# -- host and device signals a profile holds only when asked to record them ------------------------------
# (nsys --cudabacktrace / --python-backtrace / -s process-tree / --gpu-metrics-devices, torch.profiler
# with_stack, a power log). Empty frames when the trace has none; see analyzer/loading/nsys_signals.py.

STACK_COLUMNS: tuple[str, ...] = (
    "source",  # "cuda" (stacks of CUDA API calls), "sampling" (CPU samples), "osrt" (OS runtime calls),
    #            "python" (Python frames, e.g. torch.profiler with_stack)
    "chain_id",  # the stack's id within its source
    "depth",  # 0 = the innermost frame (the callee), growing towards main()
    "symbol",  # function name ("0x7f..." when unresolved)
    "module",  # shared object or Python file
    "line",  # Python line number, -1 for native frames
    "unresolved",  # 1 when the symbol could not be resolved
)

API_STACK_COLUMNS: tuple[str, ...] = (
    "start",  # the API call's start (ns), as in the api frame
    "pid",
    "tid",
    "correlation_id",
    "name",  # API name, suffix stripped as in the api frame
    "chain_id",  # STACK_COLUMNS chain of source "cuda" (or "python")
    "source",  # which stacks: "cuda" | "python"
)

CPU_SAMPLE_COLUMNS: tuple[str, ...] = (
    "start",  # sample time (ns)
    "pid",
    "tid",
    "chain_id",  # STACK_COLUMNS chain of source "sampling" (or "python")
    "source",
    "state",  # thread state as exported ("Running", ...), "" when unknown
)

OSRT_COLUMNS: tuple[str, ...] = (
    "start",
    "end",
    "duration",
    "pid",
    "tid",
    "name",  # e.g. "read", "pthread_cond_wait", "nanosleep", "ioctl"
    "chain_id",  # STACK_COLUMNS chain of source "osrt", -1 when none was recorded
)

GPU_METRIC_COLUMNS: tuple[str, ...] = (
    "start",  # sample time (ns); the value covers the sampling period that ends here
    "device",
    "metric",  # canonical name (analyzer.loading.nsys_signals.METRIC_PATTERNS): sm_active, tensor_active...
    "value",  # float: percent of peak (0..100) for throughput metrics, MHz for clocks
)

MEMORY_COLUMNS: tuple[str, ...] = (
    "start",  # event time (ns)
    "device",  # CUDA device ordinal, -1 when the event names none (host memory, or a damaged event)
    "op",  # "alloc" | "free"
    "bytes",  # size of the allocation or free (B, > 0)
    "address",  # address allocated or freed, -1 when unknown
    "mem_kind",  # "device" | "device_static" | "array" | "managed" | "pinned" | "pageable" | "host" | "unknown"
    "source",  # "cuda": CUDA driver allocations (nsys --cuda-memory-usage=true; what the process holds
    #            from the device, for PyTorch its caching allocator's reserved segments);
    #            "allocator": PyTorch caching-allocator blocks (torch.profiler profile_memory=True)
    "total_allocated",  # the allocator's running total after the event (B), -1 when the trace has none
    "total_reserved",  # the allocator's reserved total after the event (B), -1 when the trace has none
    "stream",  # -1 when unknown
    "correlation_id",  # the allocating/freeing API call (nsys), -1 when unknown
    "pool_bytes",  # size of the stream-ordered memory pool used (cudaMallocAsync), -1 when none
) + ATTRIBUTION_COLUMNS
#: device memory kinds: what counts against a GPU's capacity
DEVICE_MEMORY_KINDS: frozenset[str] = frozenset({"device", "device_static", "array"})

POWER_COLUMNS: tuple[str, ...] = (
    "start",  # sample time (ns, on the trace's clock)
    "device",  # GPU index as the power log names it
    "power_w",  # float, instantaneous/averaged power reading (W), NaN when absent
    "energy_j",  # float, cumulative energy counter (J), NaN when the log has none
    "sm_clock_mhz",  # float, NaN when absent
)


@dataclass(frozen=True)
class TraceInfo:
    """What the export says about itself."""

    path: Path
    source_format: str  # "nsys-sqlite" | "nsys-rep" | "kineto-json" (torch.profiler) | ...
    nsys_version: str | None  # e.g. "2025.3.1.90"; None for old exports without metadata (and Kineto)
    schema_version: str | None  # e.g. "3.11.3" (nsys), "1" (Kineto's schemaVersion)
    origin_ns: int  # absolute timestamp that trace-relative times count from (Kineto: epoch ns)
    duration_ns: int  # span of the capture (session end - start) or of all events when unknown
    hostname: str | None = None
    # which generation the loader recognised: nsys "2020", "2022", "2023", "2024+"; Kineto "2021"
    # (Operator/Runtime/Kernel, us), "2022", "2022+", "2023" (ac2g flows), "2024+" (ns decimals)
    export_schema: str = "unknown"
    # the process's place in a multi-process job (torch.distributed rank and world size, from Kineto's
    # distributedInfo), None when the trace does not say; a multi-GPU job analysis groups rank traces
    rank: int | None = None
    world_size: int | None = None
    # capabilities the trace lacks -> why (see analyzer.loading.capabilities); rules that need one of
    # them are reported "not available in this trace" instead of run
    unavailable: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    #: wall-clock (UTC, ns since the epoch) time of the trace's t = 0, when the export records it:
    #: what puts one-file-per-rank traces, each on its own session clock, on a common clock
    utc_origin_ns: int | None = None
    #: the GPU software platform the trace was recorded on: "cuda" (NVIDIA) or "rocm" (AMD: HIP API names,
    #: compute units); "" when the loader could not tell (:func:`analyzer.loading.vocabulary.platform_of`
    #: then reads the trace's API and GPU names). Reports name what the trace recorded through it
    platform: str = ""


@dataclass(frozen=True)
class NcuReport:
    """Nsight Compute results for a set of profiled launches, normalized (read by
    :mod:`analyzer.loading.ncu`, whose ``model`` module documents every column; on a trace as
    :attr:`Trace.ncu`).

    ``kernels``  one row per profiled launch, ``NCU_KERNEL_COLUMNS`` (+ ``NCU_JOIN_COLUMNS`` once
                 ``join_ncu`` ran), ordered by ``id``.
    ``metrics``  every numeric metric of every launch, wide: index ``id``, one column per metric in SI
                 base units (raw counter names as ncu spells them; details-page display metrics as
                 ``"<Section>: <Metric>"``), for rules that need what the normalized columns lack.
    ``units``    metric column -> its SI base unit after conversion (``second``, ``byte``, ``%``, ...).
    ``rules``    ncu's own rule verdicts (``NCU_RULE_COLUMNS``), empty when the export has none.
    ``stalls``   warp stall breakdown, one row per (launch, reason) (``NCU_STALL_COLUMNS``).
    ``joined``   ``kernels`` carries the join columns (matched to a timeline, or the profiled totals of
                 a report analyzed on its own).
    """

    source: tuple[Path, ...]
    format: str  # "ncu-raw-csv" | "ncu-details-csv" | "ncu-rep" (the first file's, when merged)
    kernels: pd.DataFrame
    metrics: pd.DataFrame
    rules: pd.DataFrame
    stalls: pd.DataFrame
    units: Mapping[str, str] = field(default_factory=dict)
    joined: bool = False

    @property
    def name(self) -> str:
        return ", ".join(p.name for p in self.source)

    def __len__(self) -> int:
        return len(self.kernels)


@dataclass
class Trace:
    """One loaded trace. Frames follow the ``*_COLUMNS`` contracts above."""

    info: TraceInfo
    kernels: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame
    api: pd.DataFrame
    sync: pd.DataFrame
    nvtx: pd.DataFrame
    gpus: pd.DataFrame
    processes: pd.DataFrame
    threads: pd.DataFrame
    # host and device signals recorded on request (empty frames otherwise)
    stacks: pd.DataFrame = field(default_factory=lambda: empty_frame(STACK_COLUMNS))
    api_stacks: pd.DataFrame = field(default_factory=lambda: empty_frame(API_STACK_COLUMNS))
    cpu_samples: pd.DataFrame = field(default_factory=lambda: empty_frame(CPU_SAMPLE_COLUMNS))
    osrt: pd.DataFrame = field(default_factory=lambda: empty_frame(OSRT_COLUMNS))
    gpu_metrics: pd.DataFrame = field(default_factory=lambda: empty_frame(GPU_METRIC_COLUMNS))
    power: pd.DataFrame = field(default_factory=lambda: empty_frame(POWER_COLUMNS))
    # device allocations and frees (nsys --cuda-memory-usage=true, torch.profiler profile_memory=True)
    memory: pd.DataFrame = field(default_factory=lambda: empty_frame(MEMORY_COLUMNS))
    # Free-form extras a loader found (e.g. raw metadata rows); never required by rules.
    extras: dict[str, object] = field(default_factory=dict)
    #: Nsight Compute results for this trace's kernels (``--ncu``: joined to the timeline over the analysis
    #: window when the trace is prepared), or the whole input of an Nsight Compute report analyzed on its own
    ncu: NcuReport | None = None
    #: True for an Nsight Compute report analyzed on its own: no timeline frames, ``ncu`` holds the
    #: profiled totals (``analyzer.loading.ncu.ncu_trace``)
    ncu_only: bool = False

    @classmethod
    def from_frames(cls, info: TraceInfo, **frames: pd.DataFrame) -> Trace:
        """A trace from the frames given; every other frame is an empty contract frame (for
        synthetic inputs in tests and tools). Unknown frame names raise ``TypeError``."""
        unknown = set(frames) - set(FRAME_COLUMNS)
        if unknown:
            raise TypeError(f"unknown trace frames {sorted(unknown)}; known: {sorted(FRAME_COLUMNS)}")
        return cls(info=info, **{name: frames.get(name, empty_frame(cols)) for name, cols in FRAME_COLUMNS.items()})

    @property
    def name(self) -> str:
        return self.info.path.name

    def gpu_ops(self) -> pd.DataFrame:
        """Kernels, copies and memsets stacked: ``start, end, duration, device, stream, op`` (op in
        ``kernel|memcpy|memset``), ordered by start."""
        parts = []
        for op, frame in (("kernel", self.kernels), ("memcpy", self.memcpy), ("memset", self.memset)):
            if len(frame):
                part = frame[["start", "end", "duration", "device", "stream"]].copy()
                part["op"] = op
                parts.append(part)
        if not parts:
            return pd.DataFrame(
                {c: pd.Series(dtype="int64") for c in ("start", "end", "duration", "device", "stream")}
                | {"op": pd.Series(dtype="object")}
            )
        return pd.concat(parts, ignore_index=True).sort_values("start", kind="stable", ignore_index=True)


FRAME_COLUMNS: dict[str, tuple[str, ...]] = {
    "kernels": KERNEL_COLUMNS,
    "memcpy": MEMCPY_COLUMNS,
    "memset": MEMSET_COLUMNS,
    "api": API_COLUMNS,
    "sync": SYNC_COLUMNS,
    "nvtx": NVTX_COLUMNS,
    "gpus": GPU_COLUMNS,
    "processes": PROCESS_COLUMNS,
    "threads": THREAD_COLUMNS,
    "stacks": STACK_COLUMNS,
    "api_stacks": API_STACK_COLUMNS,
    "cpu_samples": CPU_SAMPLE_COLUMNS,
    "osrt": OSRT_COLUMNS,
    "gpu_metrics": GPU_METRIC_COLUMNS,
    "power": POWER_COLUMNS,
    "memory": MEMORY_COLUMNS,
}


def empty_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    """An empty frame with the contract's columns (text columns as object, the rest int64)."""
    text = {
        "short_name", "name", "api_name", "nvtx_range", "nvtx_path", "attribution", "direction",
        "src_kind", "dst_kind", "mem_kind", "kind", "sync_type", "text", "domain", "path",
        "source", "symbol", "module", "state", "metric", "op",
    }
    real = {"value", "power_w", "energy_j", "sm_clock_mhz"}
    return empty_typed((c, "object" if c in text else "float64" if c in real else "int64") for c in columns)
