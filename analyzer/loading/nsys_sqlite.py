"""Nsight Systems SQLite export -> :class:`~analyzer.loading.model.Trace`.

Schema detection, not version switches: the export's tables and columns move between nsys releases
(2020.3 has no metadata table and inline NVTX text, 2022.4/2023.1 call the metadata ``EXPORT_META_DATA``,
later releases ``META_DATA_EXPORT``; ``greenContextId``, ``textId``, ``jsonTextId``, ``domainId`` come
and go). Every query selects only columns that ``PRAGMA table_info`` lists; a missing optional table
becomes an empty frame.

Times: nsys stores nanoseconds on the session clock. The origin is ``ANALYSIS_DETAILS.startTime`` when
the events lie inside ``[startTime, stopTime]`` (2022.4 and 2025.3 exports), ``0`` when the export's
events are already session-relative (2023.1 exports whose ``ANALYSIS_DETAILS`` uses another clock base),
the session start (``TARGET_INFO_SESSION_START_TIME``) when timestamps were exported as UTC
(``--ts-normalize``), else the earliest event (2020.3 exports have no ``ANALYSIS_DETAILS``).

Stages: (1) fetch integer columns of every table we use, concurrently on the ADBC backend
(:mod:`analyzer.loading.sqlite_reader`); (2) time base, trace-relative times; (3) NVTX nesting, paths and
per-thread step functions (:mod:`analyzer.loading.attribution`); (4) API frame with its own thread's
range; (5) GPU operations joined to their launching call on (pid, correlationId) and from it to the NVTX
range (thread, else process fallback); (6) GPUs, processes, threads. Strings are resolved once per
distinct ``StringIds`` id and shared between rows (object columns, as :func:`empty_frame` makes them).
"""
from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import InputError
from analyzer.loading.api_names import host_side_summary, launch_calls
from analyzer.loading import attribution as attr
from analyzer.loading.capabilities import missing_capabilities
from analyzer.loading.common import CC_LIMITS, DEFAULT_SMEM_PER_BLOCK, strip_api_suffix  # noqa: F401 (re-exported)
from analyzer.loading.common import text_column as _text_column
from analyzer.loading.common import by_start as _by_start
from analyzer.loading.common import contract_frame as _frame
from analyzer.loading.common import fill_cc_limits as _fill_cc_limits
from analyzer.loading.common import text_as_object as _text_as_object
from analyzer.loading.model import (
    API_COLUMNS,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMORY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    SYNC_COLUMNS,
    GRAPH_EXECUTION,
    THREAD_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)
from analyzer.loading.columns import TextCodes
from analyzer.loading.sqlite_reader import IntColumns, SqliteReader, ValuesIn, release_free_memory

Progress = Callable[[str], None]

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_DRIVER"
SYNC_TABLE = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
#: whole CUDA graph executions (nsys' default --cuda-graph-trace=graph: the graph's kernels are not traced)
GRAPH_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX_TABLE = "NVTX_EVENTS"
MEMORY_TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"  # nsys profile --cuda-memory-usage=true
METADATA_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

# tables that mark a file as an nsys export (any one suffices)
NSYS_MARKER_TABLES = ("StringIds", "TARGET_INFO_GPU", KERNEL_TABLE, RUNTIME_TABLE, NVTX_TABLE,
                      "ThreadNames", *METADATA_TABLES)

# NVTX event types (ENUM_NSYS_EVENT_TYPE)
NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 34, 59, 60, 75

# nsys ENUM_NSYS_EVENT_CLASS ids for CUPTI_ACTIVITY_KIND_RUNTIME.eventClass
EVENT_CLASS_DRIVER = 1
#: "CUDA backtrace", "... start", "... finish" (nsys 2025.3's ENUM_NSYS_EVENT_CLASS), used when the
#: export has no enum table
EVENT_CLASS_BACKTRACE = frozenset({67, 68, 69})


def backtrace_event_classes(reader: SqliteReader) -> frozenset[int]:
    """Event classes of the runtime table's backtrace rows, from ``ENUM_NSYS_EVENT_CLASS`` when present."""
    table = "ENUM_NSYS_EVENT_CLASS"
    if reader.has(table) and {"id", "name"} <= set(reader.columns(table)):
        found = [_int_or_none(i) for i, name in reader.query(f'SELECT id, name FROM "{table}"')
                 if "BACKTRACE" in str(name).upper()]
        return frozenset(i for i in found if i is not None)
    return EVENT_CLASS_BACKTRACE

# Fallbacks when the export lacks the ENUM_* tables (2020.3): nsys's own numbering, identical in the
# ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND / ENUM_CUPTI_SYNC_TYPE tables of 2022.4 and 2023.1 exports.
MEMCPY_KIND_NAMES = {
    0: "CUDA_MEMCPY_KIND_UNKNOWN", 1: "CUDA_MEMCPY_KIND_HTOD", 2: "CUDA_MEMCPY_KIND_DTOH",
    3: "CUDA_MEMCPY_KIND_HTOA", 4: "CUDA_MEMCPY_KIND_ATOH", 5: "CUDA_MEMCPY_KIND_ATOA",
    6: "CUDA_MEMCPY_KIND_ATOD", 7: "CUDA_MEMCPY_KIND_DTOA", 8: "CUDA_MEMCPY_KIND_DTOD",
    9: "CUDA_MEMCPY_KIND_HTOH", 10: "CUDA_MEMCPY_KIND_PTOP", 11: "CUDA_MEMCPY_KIND_UVM_HTOD",
    12: "CUDA_MEMCPY_KIND_UVM_DTOH", 13: "CUDA_MEMCPY_KIND_UVM_DTOD",
}
MEM_KIND_NAMES = {
    0: "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", 1: "CUDA_MEMOPR_MEMORY_KIND_PINNED",
    2: "CUDA_MEMOPR_MEMORY_KIND_DEVICE", 3: "CUDA_MEMOPR_MEMORY_KIND_ARRAY",
    4: "CUDA_MEMOPR_MEMORY_KIND_MANAGED", 5: "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC",
    6: "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", 7: "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN",
}
SYNC_TYPE_NAMES = {
    0: "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN",
    1: "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE",
    2: "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT",
    3: "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE",
    4: "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE",
}

# what the loader fetches: output name -> column (absent columns read as -1)
_OP_FETCH = {"start": "start", "end": "end", "device": "deviceId", "context": "contextId",
             "stream": "streamId", "correlation_id": "correlationId", "global_pid": "globalPid"}
KERNEL_FETCH = _OP_FETCH | {
    "short_id": "shortName", "name_id": "demangledName",
    "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
    "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ",
    "registers_per_thread": "registersPerThread", "static_smem": "staticSharedMemory",
    "dynamic_smem": "dynamicSharedMemory", "launch_type": "launchType", "graph_node_id": "graphNodeId",
    "graph_id": "graphId"}
GRAPH_FETCH = _OP_FETCH | {"graph_id": "graphId", "exec_id": "graphExecId"}
#: CUDA graph lifecycle events nsys records with CUDA tracing: graph creation (the end of a stream
#: capture), executable-graph creation (instantiation), node creation, clones; instants (start = end)
GRAPH_EVENTS_TABLE = "CUDA_GRAPH_EVENTS"
GRAPH_EVENTS_FETCH = {"start": "start", "event_class": "eventClass", "global_tid": "globalTid",
                      "graph_id": "graphId", "exec_id": "graphExecId"}
#: ENUM_NSYS_EVENT_CLASS ids of those events (nsys 2024-2025 numbering), where the export lacks the table
GRAPH_EVENT_CLASSES = {77: "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION",
                       94: "TRACE_PROCESS_EVENT_CUDA_GRAPHEXEC_CREATION",
                       95: "TRACE_PROCESS_EVENT_CUDA_GRAPH_CREATION", 96: "TRACE_PROCESS_EVENT_CUDA_GRAPH_CLONE"}
#: the most instantiation times kept in ``extras["cuda_graphs"]["instantiated_at"]`` (the rest counted)
MAX_GRAPH_EVENT_TIMES = 10_000
MEMCPY_FETCH = _OP_FETCH | {"bytes": "bytes", "copy_kind": "copyKind", "src_kind": "srcKind", "dst_kind": "dstKind"}
MEMSET_FETCH = _OP_FETCH | {"bytes": "bytes", "mem_kind": "memKind"}
SYNC_FETCH = _OP_FETCH | {"sync_type": "syncType"}
API_FETCH = {"start": "start", "end": "end", "global_tid": "globalTid", "correlation_id": "correlationId",
             "name_id": "nameId", "return_value": "returnValue", "event_class": "eventClass"}
MEMORY_FETCH = {"start": "start", "global_pid": "globalPid", "device": "deviceId", "address": "address",
                "bytes": "bytes", "mem_kind": "memKind", "oper": "memoryOperationType",
                "correlation_id": "correlationId", "stream": "streamId", "pool_bytes": "localMemoryPoolSize"}
#: ENUM_CUDA_DEV_MEM_EVENT_OPER as nsys 2025.3 writes it, for exports without the enum table
MEMORY_OPER_NAMES = {0: "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", 1: "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION"}
NVTX_FETCH = {"start": "start", "end": "end", "event_type": "eventType", "global_tid": "globalTid",
              "text_id": "textId", "domain_id": "domainId"}
# fetched columns stored in 32 bits when the trace's values fit (ids, enums, launch dimensions)
NARROW_FETCH = frozenset({
    "device", "context", "stream", "correlation_id", "short_id", "name_id", "grid_x", "grid_y", "grid_z",
    "block_x", "block_y", "block_z", "registers_per_thread", "static_smem", "dynamic_smem", "launch_type",
    "graph_node_id", "graph_id", "copy_kind", "src_kind", "dst_kind", "mem_kind", "sync_type", "return_value",
    "event_class", "event_type", "text_id", "domain_id"})
NVTX_WANTED = ValuesIn("eventType", (NVTX_MARK, NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE))

# ----------------------------------------------------------------------------------------------------
# schema
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Schema:
    """What the loader recognised about an export."""

    generation: str  # "2020" | "2022" | "2023" | "2024+"
    nsys_version: str | None
    schema_version: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None


_WSL = re.compile(r"(?i)microsoft|wsl")


def _no_gpu_activity(r: SqliteReader, shown: Path) -> InputError:
    """The one line for an export without GPU operations: the host side the API calls still tell (calls,
    launches per second, synchronization time) and the likely reason from the export itself (WSL2's
    kernel string, CUDA tracing off in the capture settings)."""
    calls: list[tuple[str, int, int, int, int]] = []
    for table in (RUNTIME_TABLE, DRIVER_TABLE):
        if r.has(table) and r.has("StringIds") and {"nameId", "start", "end"} <= set(r.columns(table)):
            try:
                calls += [(str(n), int(c), int(d or 0), int(a or 0), int(b or 0)) for n, c, d, a, b in r.query(
                    f'SELECT s.value, COUNT(*), SUM(t."end" - t.start), MIN(t.start), MAX(t."end") '
                    f'FROM "{r.table(table)}" t JOIN StringIds s ON s.id = t.nameId GROUP BY t.nameId')]
            except sqlite3.DatabaseError:
                calls = []
    env: dict[str, str] = {}
    if r.has("TARGET_INFO_SYSTEM_ENV") and {"name", "value"} <= set(r.columns("TARGET_INFO_SYSTEM_ENV")):
        env = {str(k): str(v) for k, v in r.query(
            "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV WHERE name IN "
            "('SoftwareReleaseVersion', 'OsDescription')")}
    capture: list[tuple[str, str]] = []
    if r.has("META_DATA_CAPTURE") and {"name", "value"} <= set(r.columns("META_DATA_CAPTURE")):
        capture = [(str(k), str(v)) for k, v in r.query(
            "SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE '%COLLECT_CUDA_TRACE'")]
    wsl = next((v for v in env.values() if _WSL.search(v)), None)
    if not launch_calls([(n, c, d) for n, c, d, _a, _b in calls]):
        if capture and all(v.lower() == "false" for _, v in capture):
            why = "CUDA tracing was off in the capture (nsys profile without --trace=cuda)"
        else:
            why = (f"{sum(c for _n, c, *_ in calls):,} CUDA API calls but no kernel launch: the program launched no "
                   "GPU work inside the capture range" if calls else "no CUDA API call either: the program did "
                   "not use CUDA inside the capture range")
        return InputError(shown, f"trace contains no GPU activity (no kernels, memcpy or memset rows): {why}",
                          hint="profile with CUDA tracing on (nsys profile --trace=cuda,nvtx ...) and make sure the "
                               "program launches GPU work inside the capture range")
    span = max(b for *_, b in calls) - min(a for *_, a in calls)
    host = host_side_summary([(n, c, d) for n, c, d, _a, _b in calls], span)
    if wsl:
        why = (f"it was recorded on WSL2 ({wsl}), where Nsight Systems records the CUDA calls but no GPU "
               "activity")
        hint = "profile on native Linux for the GPU timeline"
    else:
        why = ("the CUDA calls were recorded but no GPU activity: WSL2 and some virtualized GPUs record none, "
               "and another profiler holding CUPTI at the same time (DCGM profiling, a second nsys) takes it")
        hint = "profile on native Linux with no other profiler attached"
    return InputError(shown, f"trace contains no GPU activity (no kernels, memcpy or memset rows): {host}; {why}",
                      hint=hint)


def detect_schema(reader: SqliteReader) -> Schema:
    """Identify the export generation from its metadata table (absent before 2022)."""
    if not any(reader.has(t) for t in NSYS_MARKER_TABLES):
        raise InputError(
            reader.path,
            "SQLite file has no Nsight Systems tables (no StringIds, CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS)",
            hint="export the report with: nsys export --type sqlite -o OUT.sqlite IN.nsys-rep",
        )
    meta: dict[str, str] = {}
    for t in METADATA_TABLES:
        if reader.has(t) and {"name", "value"} <= set(reader.columns(t)):
            meta = {str(k): str(v) for k, v in reader.query(f'SELECT name, value FROM "{reader.table(t)}"')}
            break
    version = meta.get("EXPORT_PRODUCT_VERSION")
    schema_version = meta.get("EXPORT_SCHEMA_VERSION")
    hostname = None
    if reader.has("TARGET_INFO_SYSTEM_ENV") and {"name", "value"} <= set(reader.columns("TARGET_INFO_SYSTEM_ENV")):
        rows = reader.query("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
        hostname = str(rows[0][0]) if rows else None
    if not meta:
        generation = "2020"
    else:
        year = _year(version or meta.get("EXPORT_PRODUCT_DATE", ""))
        if year is None or year >= 2024:
            generation = "2024+"
        elif year >= 2023:
            generation = "2023"
        else:
            generation = "2022"
    return Schema(generation, version, schema_version, meta, hostname)


def _year(version: str) -> int | None:
    m = re.match(r"(\d{4})", version or "")
    return int(m.group(1)) if m else None


# ----------------------------------------------------------------------------------------------------
# strings and enums
# ----------------------------------------------------------------------------------------------------
class StringTable:
    """``StringIds`` as an id-indexed object array; lookups are one vectorized ``take``."""

    def __init__(self, reader: SqliteReader) -> None:
        rows = reader.query("SELECT id, value FROM StringIds") if reader.has("StringIds") else []
        try:
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(reader.path, f"StringIds holds a non-integer id ({exc})",
                             hint="the export is damaged; export it again") from None
        if len(ids) and (ids < 0).any():
            keep = ids >= 0
            rows = [r for r, k in zip(rows, keep) if k]
            ids = ids[keep]
        # nsys numbers strings 0..n-1; ids far beyond the row count (a damaged export) would make the
        # id-indexed table huge, so such a table is indexed by the sorted ids instead
        self._remap: np.ndarray | None = None
        if len(ids) and int(ids.max()) > 4 * len(ids) + (1 << 20):
            order = np.argsort(ids, kind="stable")
            self._remap = ids[order]
            rows = [rows[i] for i in order.tolist()]
            ids = np.arange(len(ids), dtype=np.int64)
        size = int(ids.max()) + 2 if len(ids) else 1
        self._values = np.full(size, "", dtype=object)
        if len(ids):
            self._values[ids] = [r[1] if isinstance(r[1], str) else "" for r in rows]
        self._default = size - 1  # always ""
        self._empty: np.ndarray | None = None

    def _dense(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` as indexes of ``_values`` (-1 where unknown) when the table is remapped."""
        if self._remap is None:
            return ids
        pos = np.searchsorted(self._remap, ids)
        found = pos < len(self._remap)
        found[found] = self._remap[pos[found]] == ids[found]
        return np.where(found, pos, -1)

    def _safe(self, ids: np.ndarray) -> np.ndarray:
        """``ids`` with -1/NULL and unknown ids replaced by the index of ``""`` (``ids`` itself when every
        id is known: one min/max pass)."""
        size = len(self._values)
        if not len(ids) or (int(ids.min()) >= 0 and int(ids.max()) < size):
            return ids
        return np.where((ids < 0) | (ids >= size), self._default, ids)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Text for each id (``""`` for -1/NULL or unknown ids)."""
        return self._values[self._safe(self._dense(ids))]

    def codes(self, ids: np.ndarray, fn: Callable[[str], str] | None = None) -> TextCodes:
        """The text of each id as :class:`TextCodes` over the distinct ids used (``fn`` applied once
        per distinct id, e.g. API suffix stripping); no per-row string is touched."""
        size = len(self._values)
        safe = self._safe(self._dense(ids))
        present = np.zeros(size, dtype=bool)
        present[safe] = True
        used = np.flatnonzero(present)
        labels = self._values[used]
        if fn is not None:
            labels = np.array([fn(t) for t in labels], dtype=object)
        dense = np.full(size, -1, dtype=np.int32)
        dense[used] = np.arange(len(used), dtype=np.int32)
        return TextCodes(dense[safe], labels)

    def is_empty(self, ids: np.ndarray) -> np.ndarray:
        """Per id: its text is ``""`` (or the id is -1/NULL/unknown)."""
        if self._empty is None:
            self._empty = self._values == ""
        return self._empty[self._safe(self._dense(ids))]

    def mapped(self, ids: np.ndarray, fn: Callable[[str], str]) -> np.ndarray:
        """``fn`` applied once per distinct id, then broadcast (e.g. API suffix stripping)."""
        size = len(self._values)
        safe = self._safe(self._dense(ids))
        present = np.zeros(size, dtype=bool)
        present[safe] = True
        table = np.full(size, "", dtype=object)
        used = np.flatnonzero(present)
        table[used] = [fn(t) for t in self._values[used]]
        return table[safe]


def _enum(reader: SqliteReader, table: str, fallback: dict[int, str]) -> dict[int, str]:
    if reader.has(table) and {"id", "name"} <= set(reader.columns(table)):
        rows = reader.query(f'SELECT id, name FROM "{reader.table(table)}"')
        mapping = {k: str(n) for k, n in ((_int_or_none(i), n) for i, n in rows) if k is not None}
        if mapping:  # NULL or text ids name no value
            return mapping
    return dict(fallback)


def _map_codes(codes: np.ndarray, mapping: dict[int, str], default: str) -> np.ndarray:
    """Vectorized int -> label via a small lookup table (object array)."""
    if len(codes) == 0:
        return np.empty(0, dtype=object)
    lo, hi = int(codes.min()), int(codes.max())
    if 0 <= lo and hi < 4096:  # small enum codes: a direct table, no sort
        table = np.empty(hi + 1, dtype=object)
        table[:] = [mapping.get(i, default) for i in range(hi + 1)]
        return table[codes]
    uniq, inv = np.unique(codes, return_inverse=True)
    labels = np.empty(len(uniq), dtype=object)
    labels[:] = [mapping.get(int(u), default) for u in uniq]
    return labels[inv.reshape(-1)]


def _direction_label(enum_name: str) -> str:
    n = enum_name.upper()
    if "PTOP" in n:
        return "P2P"
    for key, label in (("HTOD", "H2D"), ("HTOA", "H2D"), ("DTOH", "D2H"), ("ATOH", "D2H"),
                       ("DTOD", "D2D"), ("ATOA", "D2D"), ("ATOD", "D2D"), ("DTOA", "D2D"),
                       ("HTOH", "H2H")):
        if n.endswith(key):
            return label
    return "other"


def _memkind_label(enum_name: str) -> str:
    n = enum_name.upper()
    for key, label in (("PAGEABLE", "pageable"), ("PINNED", "pinned"), ("MANAGED", "managed"),
                       ("ARRAY", "array"), ("DEVICE", "device")):
        if key in n:
            return label
    return "unknown"


def _memory_kind_label(enum_name: str) -> str:
    """A memory kind of the memory frame: as copies name them, with static device memory (module
    globals, ``__device__`` variables) told apart."""
    n = enum_name.upper()
    if "STATIC" in n and "DEVICE" in n:
        return "device_static"
    return _memkind_label(n)


def _sync_label(enum_name: str) -> str:
    n = enum_name.upper()
    label = n.removeprefix("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_")
    return label.lower() or "unknown"


# ----------------------------------------------------------------------------------------------------
# loading
# ----------------------------------------------------------------------------------------------------
#: device ids and GPU properties beyond this are damage, not hardware (and would overflow int64 math)
_PROPERTY_MAX = 1 << 53
#: timestamps (ns; UTC ones are ~2^60.6) beyond this are damage: differences of two would overflow int64
_TIME_MAX = 1 << 62


def _int_or_none(value: Any, limit: int = _PROPERTY_MAX) -> int | None:
    """An integer cell as int; None for NULL, text that is no integer, blobs, NaN and magnitudes beyond
    ``limit`` (2^53 for ids and properties; :data:`_TIME_MAX` for timestamps)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not value == value or abs(value) > limit:
            return None
        value = int(value)
    if not isinstance(value, int) or abs(value) > limit:
        return None
    return value


def _property(value: Any) -> int:
    """A GPU property (count, size, rate) as a non-negative int; 0 (unknown) for anything else."""
    v = _int_or_none(value)
    return v if v is not None and v > 0 else 0


def _min_not_negative(values: np.ndarray) -> int | None:
    """The smallest value >= 0 (negative: NULL), None when there is none; one pass when none is negative."""
    if not len(values):
        return None
    lo = values.min()
    if lo < 0:
        values = values[values >= 0]
        lo = values.min() if len(values) else None
    return lo


def _pid(global_id: np.ndarray) -> np.ndarray:
    """nsys globalPid/globalTid -> OS pid: bits 24..47 (-1 for a negative id: NULL)."""
    out = global_id >> 24
    out &= 0xFFFFFF
    return _unknown_where_negative(out, global_id)


def _tid(global_tid: np.ndarray) -> np.ndarray:
    """nsys globalTid -> OS tid: bits 0..23 (-1 for a negative id: NULL)."""
    return _unknown_where_negative(global_tid & 0xFFFFFF, global_tid)


def _unknown_where_negative(out: np.ndarray, global_id: np.ndarray) -> np.ndarray:
    """``out`` (a new array) with -1 where ``global_id`` is negative; one pass when none is (the usual)."""
    if len(global_id) and global_id.min() < 0:
        out[global_id < 0] = -1
    return out


def _with_graph_executions(k: dict[str, np.ndarray], short: TextCodes, name: TextCodes,
                           g: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], TextCodes, TextCodes,
                                                              dict[str, int]]:
    """The kernel rows plus one row per CUDA graph execution of ``GRAPH_TABLE`` whose kernels the trace
    lacks (nsys' default ``--cuda-graph-trace=graph``): the execution is GPU work like a kernel (busy
    time, gaps, windows, steps), named ``CUDA graph <id>``, with an unknown launch configuration and
    ``in_graph`` = 2. An execution whose kernels the trace holds (node-level tracing: the kernels carry
    the graph launch's correlation id) adds no row, so its time is never counted twice."""
    g_key = attr.correlation_key(_pid(g["global_pid"]), g["correlation_id"])
    k_key = attr.correlation_key(_pid(k["global_pid"]), k["correlation_id"])
    covered = np.isin(g_key, k_key) if len(k_key) else np.zeros(len(g_key), dtype=bool)
    add = np.flatnonzero(~covered)
    stats = {"executions": len(g_key), "with_kernels": int(covered.sum()), "without_kernels": int(len(add))}
    if not len(add):
        return k, short, name, stats
    n = len(add)
    gid = g["graph_id"][add]
    labels, codes = np.unique(gid, return_inverse=True)
    texts = np.array([f"CUDA graph {int(i)}" if i >= 0 else "CUDA graph" for i in labels.tolist()], dtype=object)
    rows: dict[str, np.ndarray] = {}
    for col, values in k.items():
        if col in g:
            extra = g[col][add]
        elif col == "graph_node_id":
            extra = np.full(n, -1, dtype=values.dtype)
        elif col in ("static_smem", "dynamic_smem"):
            extra = np.zeros(n, dtype=values.dtype)
        else:  # launch dimensions, registers, launch type, string ids: unknown
            extra = np.full(n, -1, dtype=values.dtype)
        rows[col] = np.concatenate([values, extra.astype(values.dtype, copy=False)])
    rows["in_graph"] = np.concatenate([np.zeros(len(k["start"]), dtype=np.int8),
                                       np.full(n, GRAPH_EXECUTION, dtype=np.int8)])

    def joined(tc: TextCodes) -> TextCodes:
        return TextCodes(np.concatenate([tc.codes.astype(np.int64), codes.reshape(-1) + len(tc.labels)]),
                         np.concatenate([tc.labels, texts]))

    return rows, joined(short), joined(name), stats


def _executions_without_launch(kernels: pd.DataFrame) -> int:
    """Whole CUDA graph executions (``in_graph`` = 2) whose launch call the trace does not hold."""
    if kernels.empty or "in_graph" not in kernels.columns or "api_name" not in kernels.columns:
        return 0
    ex = kernels["in_graph"].to_numpy() == GRAPH_EXECUTION
    if not ex.any():
        return 0
    name = kernels["api_name"]
    missing = name.isna().to_numpy() | (name.astype(object).fillna("").astype(str).to_numpy() == "")
    return int((ex & missing).sum())


def _graph_event_stats(ev: dict[str, np.ndarray], origin: int, classes: dict[int, str],
                       executed: np.ndarray | None) -> dict[str, Any]:
    """What ``CUDA_GRAPH_EVENTS`` says, for ``trace.extras["cuda_graphs"]``: how many graphs were created
    (captures), instantiated, cloned and how many nodes created; the instantiation times (ns from the trace
    origin, sorted, at most :data:`MAX_GRAPH_EVENT_TIMES`) for setup and for updates between replays; and
    how many executions of ``executed`` (graph exec ids of the graph trace table) ran an executable graph
    with no instantiation event."""
    cls = ev["event_class"]
    names = {i: n.upper() for i, n in classes.items()}

    def of(marker: str) -> np.ndarray:
        ids = [i for i, n in names.items() if marker in n]
        return np.isin(cls, ids) if ids else np.zeros(len(cls), dtype=bool)

    inst = of("GRAPHEXEC_CREATION")
    created = of("GRAPH_CREATION")
    nodes = of("NODE_CREATION")
    clones = of("CLONE")
    at = np.sort(ev["start"][inst & (ev["start"] >= origin)] - origin)
    out: dict[str, Any] = {
        "graphs_created": int(created.sum()), "instantiations": int(inst.sum()),
        "nodes_created": int(nodes.sum()), "clones": int(clones.sum()),
        "instantiated_at": [int(x) for x in at[:MAX_GRAPH_EVENT_TIMES]],
    }
    if len(at) > MAX_GRAPH_EVENT_TIMES:
        out["instantiated_at_left_out"] = int(len(at) - MAX_GRAPH_EVENT_TIMES)
    if executed is not None and len(executed):
        known = ev["exec_id"][inst]
        has_id = executed >= 0
        out["executions_without_instantiation"] = int((has_id & ~np.isin(executed, known[known >= 0])).sum())
    return out


class _Loader:
    def __init__(self, path: Path, progress: Progress | None, source_format: str,
                 display_path: Path | None) -> None:
        self.path = path
        self.display_path = display_path or path
        self.say: Progress = progress or (lambda _msg: None)
        self.source_format = source_format

    def run(self) -> Trace:
        self.r = SqliteReader(self.path, self.display_path if self.display_path != self.path else None)
        try:
            trace = self._load()
            self.r.check_unchanged()  # an export still being written: refused, never half-read
            return trace
        except sqlite3.DatabaseError as exc:
            self.r.check_unchanged()  # a live file reads as malformed: say why
            text = str(exc)
            if "no such column" in text or "no such table" in text or "mismatch" in text:
                raise InputError(self.display_path, f"the export's tables are not laid out as nsys writes them "
                                 f"({text[:300]})", hint="export it again with nsys export --type sqlite") from exc
            raise InputError(self.display_path, f"SQLite file is corrupt or truncated ({text[:300]})",
                             hint="copy or export it again") from exc
        finally:
            self.r.close()

    def _load(self) -> Trace:
        r = self.r
        schema = detect_schema(r)
        self.say(f"nsys export schema {schema.generation}" + (f" (nsys {schema.nsys_version})"
                                                              if schema.nsys_version else ""))
        if all(r.is_empty(t) for t in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, GRAPH_TABLE)):
            raise _no_gpu_activity(r, self.display_path)
        jobs: dict[str, Callable[[], Any] | IntColumns] = {}

        def add(name: str, table: str, cols: Mapping[str, str | None], label: str,
                where: ValuesIn | None = None) -> None:
            n = r.count(table)
            r.columns(table)  # schema lookups on this thread; workers only fetch
            if n:
                self.say(f"reading {label} ({n:,} rows)")
            jobs[name] = IntColumns(table, cols, where=where, narrow=NARROW_FETCH)

        add("k", KERNEL_TABLE, KERNEL_FETCH, "kernels")
        add("rt", RUNTIME_TABLE, API_FETCH, "CUDA runtime API calls", where=self._api_where(RUNTIME_TABLE))
        if r.has(DRIVER_TABLE):
            add("dr", DRIVER_TABLE, API_FETCH, "CUDA driver API calls", where=self._api_where(DRIVER_TABLE))
        # without an eventType column (not an export nsys writes) every row reads as a push/pop range
        nv_where = NVTX_WANTED if r.has_column(NVTX_TABLE, "eventType") else None
        add("nv", NVTX_TABLE, NVTX_FETCH, "NVTX events", where=nv_where)
        if r.count(NVTX_TABLE) and r.has_column(NVTX_TABLE, "text"):
            jobs["nv_text"] = lambda: r.fetch_text(NVTX_TABLE, "text", where=nv_where)
        if self._has_json_payloads(nv_where):
            jobs["nv_json"] = lambda: r.fetch_text(NVTX_TABLE, "jsonText", where=nv_where)
        add("mc", MEMCPY_TABLE, MEMCPY_FETCH, "memcpy")
        add("ms", MEMSET_TABLE, MEMSET_FETCH, "memset")
        add("sy", SYNC_TABLE, SYNC_FETCH, "synchronization")
        if r.has(MEMORY_TABLE):
            add("mem", MEMORY_TABLE, MEMORY_FETCH, "device memory events")
        if r.has(GRAPH_TABLE):
            add("g", GRAPH_TABLE, GRAPH_FETCH, "CUDA graph executions")
        if r.has(GRAPH_EVENTS_TABLE):
            add("ge", GRAPH_EVENTS_TABLE, GRAPH_EVENTS_FETCH, "CUDA graph events")
        jobs["strings"] = lambda: StringTable(r)
        res = r.fetch_parallel(jobs)
        strings: StringTable = res.pop("strings")
        k, mc, ms, sy = (res.pop(n) for n in ("k", "mc", "ms", "sy"))
        mem = res.pop("mem", None)
        g = res.pop("g", None)
        graph_events = res.pop("ge", None)
        untimed_graphs = 0
        if g is not None:  # start = end = 0: CUPTI could not time the execution (left out, counted)
            timed = (g["start"] > 0) & (g["end"] >= g["start"])
            untimed_graphs = int((~timed).sum())
            if untimed_graphs:
                g = {c: v[timed] for c, v in g.items()}
            if not len(g["start"]):
                g = None
        api = self._combine_api(res.pop("rt"), res.pop("dr", None))
        nv = self._nvtx_raw(res.pop("nv"), res.pop("nv_text", None), strings)
        nv_json = res.pop("nv_json", None)
        if nv_json is not None and len(nv_json) == len(nv["start"]):
            nv["payload"] = nv_json
        del res
        release_free_memory()

        graph_tables = [g] if g is not None else []
        origin, duration = self._time_base(schema, [k, mc, ms, sy, api, *graph_tables], nv)
        trace_end = origin + duration
        for d in (k, mc, ms, sy, api, *graph_tables):  # in place: the fetched arrays are this loader's own
            start, end = d["start"], d["end"]
            np.maximum(end, start, out=end)
            start -= origin
            end -= origin
            d["duration"] = end - start

        self.say(f"attributing NVTX ranges ({len(nv['start']):,} events)")
        nvtx, timeline = self._build_nvtx(nv, origin, trace_end)
        self._nvtx_text = TextCodes.of(nvtx["text"])
        self._nvtx_path = TextCodes.of(nvtx["path"])
        del nv
        release_free_memory()

        api_name = strings.codes(api["name_id"], strip_api_suffix)
        api["pid"] = _pid(api["global_tid"])
        api["tid"] = _tid(api["global_tid"])
        api_thread_nvtx = timeline.thread_at(api["global_tid"], api["start"])
        api_frame_data: dict[str, Any] = {
            "start": api["start"], "end": api["end"], "duration": api["duration"],
            "name": api_name, "kind": TextCodes(api["is_driver"], np.array(["runtime", "driver"], dtype=object)),
            "pid": api["pid"], "tid": api["tid"], "correlation_id": api["correlation_id"],
            "return_value": api["return_value"],
        }
        api_frame_data.update(attr.range_columns(self._nvtx_text, self._nvtx_path, api_thread_nvtx))

        self.say("joining GPU work to launching API calls")
        launch = attr.Launches(api, api_name, api_thread_nvtx, timeline, nvtx)
        short = strings.codes(k["short_id"])
        # the demangled name, else the short name (exports without demangled names)
        name = strings.codes(np.where(strings.is_empty(k["name_id"]), k["short_id"], k["name_id"]))
        graph_stats: dict[str, Any] = {}
        if g is not None:
            k, short, name, graph_stats = _with_graph_executions(k, short, name, g)
        if graph_events is not None:
            graph_stats.update(_graph_event_stats(
                graph_events, origin, _enum(r, "ENUM_NSYS_EVENT_CLASS", GRAPH_EVENT_CLASSES),
                g["exec_id"] if g is not None else None))
        kernels = self._gpu_frame(KERNEL_COLUMNS, k, launch, {"short_name": short, "name": name})
        del k, g
        copy_kinds = _enum(r, "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KIND_NAMES)
        mem_kinds = _enum(r, "ENUM_CUDA_MEM_KIND", MEM_KIND_NAMES)
        mem_labels = {i: _memkind_label(n) for i, n in mem_kinds.items()}
        memcpy = self._gpu_frame(MEMCPY_COLUMNS, mc, launch, {
            "direction": _map_codes(mc["copy_kind"], {i: _direction_label(n) for i, n in copy_kinds.items()},
                                    "other"),
            "src_kind": _map_codes(mc["src_kind"], mem_labels, "unknown"),
            "dst_kind": _map_codes(mc["dst_kind"], mem_labels, "unknown"),
        })
        memset = self._gpu_frame(MEMSET_COLUMNS, ms, launch, {
            "mem_kind": _map_codes(ms["mem_kind"], mem_labels, "unknown"),
        })
        sync = self._sync_frame(sy, launch)
        memory = self._memory_frame(mem, origin, launch, mem_kinds)
        api_frame = _frame(API_COLUMNS, api_frame_data, compact=True).pipe(_by_start)

        self.say("reading GPUs, processes and threads")
        gpus = self._gpus()
        processes, threads = self._processes_threads(strings)
        from analyzer.loading.nsys_signals import read_signals

        signals, signal_extras = read_signals(r, strings, origin, api_name=strip_api_suffix,
                                              devices=sorted(int(d) for d in gpus["device"]))
        info = TraceInfo(
            path=self.display_path,
            source_format=self.source_format,
            nsys_version=schema.nsys_version,
            schema_version=schema.schema_version,
            origin_ns=int(origin),
            duration_ns=int(duration),
            hostname=schema.hostname or schema.metadata.get("EXPORT_HOST") or None,
            export_schema=schema.generation,
            unavailable=missing_capabilities(kernels=kernels, memcpy=memcpy, memset=memset, api=api_frame,
                                             gpus=gpus, memory=memory),
            utc_origin_ns=self._utc_origin(int(origin)),
        )
        extras: dict[str, Any] = {"metadata": dict(schema.metadata), **signal_extras}
        if graph_stats or untimed_graphs:
            extras["cuda_graphs"] = {"executions": 0, "with_kernels": 0, "without_kernels": 0, **graph_stats,
                                     "untimed": untimed_graphs}
        unmatched = int(graph_stats.get("executions_without_instantiation", 0))
        if unmatched:  # said once, in the report's notes
            extras.setdefault("notes", []).append(
                f"{unmatched:,} CUDA graph executions in {GRAPH_TABLE} ran graphs with no instantiation event in "
                f"{GRAPH_EVENTS_TABLE} (instantiated before the recording began, or the table is incomplete): the "
                "setup time counts only the capture and instantiation calls the trace holds.")
        unlaunched = _executions_without_launch(kernels)
        if unlaunched:  # said once, in the report's notes
            extras.setdefault("notes", []).append(
                f"{unlaunched:,} CUDA graph executions have no launch call in the trace (the API trace lost it, or "
                "it came from a thread nsys did not trace): they count as GPU work, attributed to no thread or "
                "NVTX range.")
        if untimed_graphs:  # said once, in the report's notes
            extras.setdefault("notes", []).append(
                f"{untimed_graphs:,} CUDA graph executions in {GRAPH_TABLE} carry no timestamps (CUPTI could not "
                "time them) and are left out of GPU time; record with nsys profile --cuda-graph-trace=node to "
                "time their kernels.")
        session = self._session_times()
        if session:
            extras["session_times"] = list(session)  # (local, UTC) wall-clock start: the machine's UTC offset
        if self.path != self.display_path:
            extras["sqlite_path"] = str(self.path)
        if r.damage_notes:
            extras.setdefault("notes", []).extend(r.damage_notes)
        return Trace(info=info, kernels=kernels, memcpy=memcpy, memset=memset, api=api_frame,
                     sync=sync, nvtx=nvtx, gpus=gpus, processes=processes, threads=threads, extras=extras,
                     memory=memory, **signals)

    def _api_where(self, table: str) -> ValuesIn | None:
        """Leave out the extra rows nsys writes for ``--cudabacktrace``: with it, every call that got a
        stack appears twice in the runtime table, once as the call (its own event class) and once as a
        "CUDA backtrace" row (same correlation id, the stack's ``callchainId``, a start ~0.1 us earlier).
        Counting both would double the call counts; the stacks are read by ``nsys_signals``."""
        if not self.r.has(table) or not self.r.has_column(table, "eventClass"):
            return None
        classes = backtrace_event_classes(self.r)
        return ValuesIn("eventClass", tuple(sorted(classes)), negate=True) if classes else None

    def _session_times(self) -> tuple[str, str] | None:
        table = "TARGET_INFO_SESSION_START_TIME"
        if self.r.has(table) and {"localTime", "utcTime"} <= set(self.r.columns(table)):
            row = self.r.query(f'SELECT localTime, utcTime FROM "{table}" LIMIT 1')
            if row and row[0][0] and row[0][1]:
                return str(row[0][0]), str(row[0][1])
        return None

    # -- API calls --------------------------------------------------------------------------------------
    @staticmethod
    def _combine_api(rt: dict[str, np.ndarray], dr: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """Runtime table rows, then driver table rows; ``is_driver`` marks driver calls (they lose
        correlation-id ties against runtime calls)."""
        rt["is_driver"] = (rt["event_class"] == EVENT_CLASS_DRIVER).astype(np.int64)
        if dr is not None and len(dr["start"]):
            dr["is_driver"] = np.ones(len(dr["start"]), dtype=np.int64)
            out = {c: np.concatenate([rt[c], dr[c]]) for c in rt}
        else:
            out = rt
        return out

    def _utc_origin(self, origin: int) -> int | None:
        """UTC time of trace-relative t = 0: the session's UTC start (``TARGET_INFO_SESSION_START_TIME.
        utcEpochNs``) plus the origin on the session clock, which counts from that start (or the origin
        itself when the export's timestamps are UTC already, ``--ts-normalize``). Checked against an NVML
        power log recorded beside the run: the GPU's power rises within 0.3 s of the first kernel.
        None when the export lacks the session start (then traces of different sessions share no clock)."""
        if origin > 10**17:
            return int(origin)
        r = self.r
        if not r.has("TARGET_INFO_SESSION_START_TIME") \
                or "utcEpochNs" not in r.columns("TARGET_INFO_SESSION_START_TIME"):
            return None
        row = r.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        start = _int_or_none(row[0][0], _TIME_MAX) if row else None
        if start is None:  # NULL or damaged: no UTC clock
            return None
        return start + int(origin)

    # -- time base --------------------------------------------------------------------------------------
    def _time_base(self, schema: Schema, tables: list[dict[str, np.ndarray]],
                   nv: dict[str, np.ndarray]) -> tuple[int, int]:
        starts = [lo for d in tables if (lo := _min_not_negative(d["start"])) is not None]
        ends = [d["end"].max() for d in tables if len(d["end"])]
        rng = nv["kind"] != ""
        if rng.any():
            starts.append(nv["start"][rng].min())
            ends.append(max(nv["start"][rng].max(), nv["end"][rng].max()))
        t_min = int(min(starts)) if starts else 0
        t_max = int(max(ends)) if ends else t_min
        r = self.r
        if r.has("ANALYSIS_DETAILS") and {"startTime", "stopTime"} <= set(r.columns("ANALYSIS_DETAILS")):
            row = r.query("SELECT startTime, stopTime FROM ANALYSIS_DETAILS LIMIT 1")
            a_start, a_stop = (_int_or_none(row[0][0], _TIME_MAX), _int_or_none(row[0][1], _TIME_MAX)) if row \
                else (None, None)
            if a_start is not None and a_stop is not None:
                if a_start <= t_min and t_max <= a_stop:
                    return a_start, a_stop - a_start
                if a_stop > a_start and 0 <= t_min and t_max <= (a_stop - a_start) and t_min < 10**15:
                    # events already counted from the session start (2023.1 exports)
                    return 0, a_stop - a_start
        if t_min > 10**17 and r.has("TARGET_INFO_SESSION_START_TIME"):
            row = r.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            utc = _int_or_none(row[0][0], _TIME_MAX) if row else None
            if utc is not None and utc <= t_min:
                return utc, t_max - utc
        return t_min, t_max - t_min

    # -- NVTX -------------------------------------------------------------------------------------------
    def _has_json_payloads(self, where: ValuesIn | None) -> bool:
        """Whether NVTX_EVENTS carries payloads as JSON text (``nsys export --include-json=true``: NCCL's
        communicator, rank and message sizes); the default export leaves ``jsonText`` NULL. The probe
        stops at the first such row."""
        r = self.r
        real = r.table(NVTX_TABLE)
        if real is None or not r.count(NVTX_TABLE) or not r.has_column(NVTX_TABLE, "jsonText"):
            return False
        cond = "jsonText IS NOT NULL AND jsonText != ''" + (f" AND {where}" if where else "")
        return bool(r.query(f'SELECT 1 FROM "{real}" WHERE {cond} LIMIT 1'))

    @staticmethod
    def _nvtx_raw(d: dict[str, np.ndarray], inline: np.ndarray | None, strings: StringTable) -> dict[str, np.ndarray]:
        """NVTX rows with text resolved: ``textId`` through StringIds, else the inline ``text`` (2020).
        ``end`` NULL (unterminated range) reads as -1 and is clipped to the trace end later."""
        if inline is None or len(inline) != len(d["start"]):
            inline = np.full(len(d["start"]), "", dtype=object)
        d["text"] = np.where(d["text_id"] >= 0, strings.lookup(d["text_id"]), inline)
        et = d["event_type"]
        kind = np.full(len(et), "", dtype=object)
        kind[(et == NVTX_PUSHPOP) | (et == -1)] = "pushpop"  # -1: no eventType column (or NULL)
        kind[et == NVTX_STARTEND] = "startend"
        kind[et == NVTX_MARK] = "mark"
        d["kind"] = kind
        return d

    def _domain_names(self, nv: dict[str, np.ndarray], pid: np.ndarray, dom: np.ndarray) -> np.ndarray:
        """Domain name per NVTX row from NvtxDomainCreate events (per process; 2020's DomainStrings as a
        fallback); ``""`` for the default domain. One dict lookup per distinct (pid, domainId)."""
        names: dict[tuple[int, int], str] = {}
        if self.r.has("DomainStrings") and {"id", "domainName"} <= set(self.r.columns("DomainStrings")):
            for i, name in self.r.query("SELECT id, domainName FROM DomainStrings"):
                ident = _int_or_none(i)
                if ident is not None:  # a NULL or text id names no domain
                    names[(-1, ident)] = str(name)
        create = np.flatnonzero(nv["event_type"] == NVTX_DOMAIN_CREATE)
        pids = _pid(nv["global_tid"][create])
        for p, d, text in zip(pids.tolist(), nv["domain_id"][create].tolist(), nv["text"][create].tolist()):
            names[(p, d)] = text
        out = np.full(len(dom), "", dtype=object)
        if not names or len(dom) == 0:
            return out
        key = attr.correlation_key(pid, dom)  # (pid, id) packed like correlation keys
        uniq, inv = np.unique(key, return_inverse=True)
        labels = np.empty(len(uniq), dtype=object)
        labels[:] = [
            names.get((int(k >> 32), int(k & 0xFFFFFFFF)), names.get((-1, int(k & 0xFFFFFFFF)), ""))
            if (k & 0xFFFFFFFF) not in (0, 0xFFFFFFFF) else ""
            for k in uniq.tolist()
        ]
        return labels[inv.reshape(-1)]

    def _build_nvtx(self, nv: dict[str, np.ndarray], origin: int,
                    trace_end: int) -> tuple[pd.DataFrame, attr.NvtxTimeline]:
        keep = np.flatnonzero(nv["kind"] != "")  # ranges and marks (not domain-create rows)
        start = nv["start"][keep]
        end = nv["end"][keep]
        kind = nv["kind"][keep]
        np.copyto(end, trace_end, where=end < 0)  # unterminated ranges (end NULL) run to the trace end
        np.maximum(end, start, out=end)
        np.copyto(end, start, where=kind == "mark")
        order = np.lexsort((-end, start))  # by start, outer ranges first
        if (order[1:] > order[:-1]).all():
            sel = keep
        else:
            sel = keep[order]
            start, end, kind = start[order], end[order], kind[order]
        del order, keep
        start -= origin
        end -= origin
        gtid = nv["global_tid"][sel]
        text = nv["text"][sel]
        depth, parent, crossed = attr.nest_ranges(gtid, start, end)
        paths = attr.build_paths(text, depth, parent)
        pid = _pid(gtid)
        dom_names = self._domain_names(nv, pid, nv["domain_id"][sel])
        n = len(start)
        frame = _frame(NVTX_COLUMNS, {
            "range_id": np.arange(n, dtype=np.int64), "start": start, "end": end, "duration": end - start,
            "text": text, "domain": dom_names, "kind": kind, "pid": pid, "tid": _tid(gtid),
            "depth": depth, "parent_id": parent, "path": paths,
        })
        if "payload" in nv and n:  # optional column: NVTX payloads as JSON text ("" none)
            frame["payload"] = _text_column(nv["payload"][sel])
        timeline = attr.NvtxTimeline(gtid, pid, start, end, depth, parent, crossed)
        return frame, timeline

    # -- GPU operations ---------------------------------------------------------------------------------
    def _gpu_frame(self, columns: tuple[str, ...], d: dict[str, np.ndarray], launch: attr.Launches,
                   extra: dict[str, Any]) -> pd.DataFrame:
        if len(d["start"]) == 0:
            return empty_frame(columns)
        data: dict[str, Any] = dict(d)
        data.update(extra)
        data.update(attr.launch_columns(launch, _pid(d["global_pid"]), d["correlation_id"], self._nvtx_text,
                                        self._nvtx_path))
        if "in_graph" in columns:
            data["in_graph"] = attr.graph_membership(data["api_name"], d["graph_node_id"], d.get("in_graph"))
        return _frame(columns, data, compact=True).pipe(_by_start)

    def _memory_frame(self, d: dict[str, np.ndarray] | None, origin: int, launch: attr.Launches,
                      mem_kinds: dict[int, str]) -> pd.DataFrame:
        """``CUDA_GPU_MEMORY_USAGE_EVENTS`` (one row per cudaMalloc/cudaFree and their driver, pool and
        static-memory kin) -> the memory frame: operation, size, kind, and the API call and NVTX range
        that allocated it. Rows with a negative size or an operation nsys does not name are left out."""
        if d is None or len(d["start"]) == 0:
            return empty_frame(MEMORY_COLUMNS)
        opers = _enum(self.r, "ENUM_CUDA_DEV_MEM_EVENT_OPER", MEMORY_OPER_NAMES)
        op_labels = {i: ("free" if "DEALLOC" in n.upper() or "FREE" in n.upper() else
                         "alloc" if "ALLOC" in n.upper() else "") for i, n in opers.items()}
        op = _map_codes(d["oper"], op_labels, "")
        keep = (op != "") & (d["bytes"] >= 0) & (d["start"] >= 0)
        if not keep.all():
            d = {c: v[keep] for c, v in d.items()}
            op = op[keep]
        if len(d["start"]) == 0:
            return empty_frame(MEMORY_COLUMNS)
        n = len(d["start"])
        pid = _pid(d["global_pid"])
        data: dict[str, Any] = {
            "start": d["start"] - origin, "device": d["device"], "op": op, "bytes": d["bytes"],
            "address": d["address"],
            "mem_kind": _map_codes(d["mem_kind"], {i: _memory_kind_label(k) for i, k in mem_kinds.items()},
                                   "unknown"),
            "source": np.full(n, "cuda", dtype=object),
            "total_allocated": np.full(n, -1, dtype=np.int64), "total_reserved": np.full(n, -1, dtype=np.int64),
            "stream": d["stream"], "correlation_id": d["correlation_id"], "pool_bytes": d["pool_bytes"],
        }
        data.update(attr.launch_columns(launch, pid, d["correlation_id"], self._nvtx_text, self._nvtx_path))
        return _frame(MEMORY_COLUMNS, data, compact=True).pipe(_by_start)

    def _sync_frame(self, d: dict[str, np.ndarray], launch: attr.Launches) -> pd.DataFrame:
        if len(d["start"]) == 0:
            return empty_frame(SYNC_COLUMNS)
        names = _enum(self.r, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPE_NAMES)
        op_pid = _pid(d["global_pid"])
        idx = launch.index.lookup(op_pid, d["correlation_id"])
        data = dict(d)
        data["sync_type"] = _map_codes(d["sync_type"], {i: _sync_label(n) for i, n in names.items()}, "unknown")
        data["pid"] = np.where(idx >= 0, attr.take(launch.pid, idx), op_pid)
        data["tid"] = attr.take(launch.tid, idx)
        return _frame(SYNC_COLUMNS, data, compact=True).pipe(_by_start)

    # -- GPUs -------------------------------------------------------------------------------------------
    def _gpus(self) -> pd.DataFrame:
        r = self.r
        rows: dict[int, dict[str, Any]] = {}
        if r.has("TARGET_INFO_GPU"):
            cols = set(r.columns("TARGET_INFO_GPU"))
            dev_col = "id" if "id" in cols else ("deviceId" if "deviceId" in cols else None)
            mapping = {
                "name": "name", "sm_count": "smCount", "memory_bytes": "totalMemory",
                "memory_bandwidth": "memoryBandwidth", "clock_hz": "clockRate",
                "compute_major": "computeMajor", "compute_minor": "computeMinor",
                "max_threads_per_block": "maxThreadsPerBlock", "max_registers_per_block": "maxRegistersPerBlock",
                "max_registers_per_sm": "maxRegistersPerSm", "max_shared_per_block": "maxShmemPerBlock",
                "max_shared_per_block_optin": "maxShmemPerBlockOptin", "max_shared_per_sm": "maxShmemPerSm",
                "max_blocks_per_sm": "maxBlocksPerSm", "threads_per_warp": "threadsPerWarp",
                "l2_cache_bytes": "l2CacheSize", "_warps_per_sm": "maxWarpsPerSm", "_cu_device": "cuDevice",
            }
            if dev_col:
                present = {k: v for k, v in mapping.items() if v in cols}
                sel = ", ".join(f'"{v}"' for v in present.values())
                for row in r.query(f'SELECT "{dev_col}"{", " + sel if sel else ""} FROM TARGET_INFO_GPU'):
                    dev = _int_or_none(row[0])
                    dev = len(rows) if dev is None else dev
                    rows.setdefault(dev, {}).update(
                        {k: v for k, v in zip(present, row[1:]) if v is not None})
        rows = self._key_by_cuda_device(rows)
        if r.has("TARGET_INFO_CUDA_GPU"):  # 2020.3: properties per CUDA device
            cols = set(r.columns("TARGET_INFO_CUDA_GPU"))
            mapping2 = {
                "name": "name", "sm_count": "numMultiprocessors", "_mem_mib": "globalMemorySize",
                "_clock_khz": "coreClockRate", "compute_major": "computeCapabilityMajor",
                "compute_minor": "computeCapabilityMinor", "max_threads_per_block": "maxThreadsPerBlock",
                "max_registers_per_block": "maxRegistersPerBlock",
                "max_registers_per_sm": "maxRegistersPerMultiprocessor",
                "max_shared_per_block": "maxSharedMemoryPerBlock",
                "max_shared_per_sm": "maxSharedMemoryPerMultiprocessor",
                "max_blocks_per_sm": "maxBlocksPerMultiprocessor", "threads_per_warp": "numThreadsPerWarp",
                "l2_cache_bytes": "l2CacheSize", "_warps_per_sm": "maxWarpsPerMultiprocessor",
            }
            if "deviceId" in cols:
                present = {k: v for k, v in mapping2.items() if v in cols}
                sel = ", ".join(f'"{v}"' for v in present.values())
                for row in r.query(f'SELECT "deviceId", {sel} FROM TARGET_INFO_CUDA_GPU'):
                    vals = {k: v for k, v in zip(present, row[1:]) if v is not None}
                    if "_mem_mib" in vals:
                        vals["memory_bytes"] = _property(_property(vals.pop("_mem_mib")) * 1024 * 1024)
                    if "_clock_khz" in vals:
                        vals["clock_hz"] = _property(_property(vals.pop("_clock_khz")) * 1000)
                    device = _int_or_none(row[0])
                    if device is None:  # a NULL or text deviceId: no device to describe
                        continue
                    target = rows.setdefault(device, {})
                    for key, v in vals.items():
                        if not target.get(key):
                            target[key] = v
        if not rows:
            return empty_frame(GPU_COLUMNS)
        records = []
        for dev in sorted(rows):
            v = rows[dev]
            rec: dict[str, Any] = {c: 0 for c in GPU_COLUMNS}
            rec.update({k: val for k, val in v.items() if k in rec})
            rec["device"] = dev
            rec["name"] = str(v.get("name") or "")
            for c in GPU_COLUMNS:
                if c not in ("device", "name"):
                    rec[c] = _property(rec[c])
            warps = _property(v.get("_warps_per_sm"))
            if warps and not rec["max_threads_per_sm"]:
                rec["max_threads_per_sm"] = warps * int(rec["threads_per_warp"] or 32)
            _fill_cc_limits(rec)
            records.append(rec)
        return _text_as_object(pd.DataFrame.from_records(records, columns=list(GPU_COLUMNS)).astype(
            {c: "int64" for c in GPU_COLUMNS if c != "name"}))

    def _key_by_cuda_device(self, rows: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Re-key TARGET_INFO_GPU rows (nsys GPU ids) by the CUDA device ordinal that the activity tables'
        ``deviceId`` uses: ``TARGET_INFO_CUDA_DEVICE`` (gpuId -> cudaId, 2024+) or ``cuDevice``."""
        cuda_of: dict[int, int] = {}
        t = "TARGET_INFO_CUDA_DEVICE"
        if self.r.has(t) and {"gpuId", "cudaId"} <= set(self.r.columns(t)):
            for gpu, cuda in self.r.query(f'SELECT gpuId, cudaId FROM "{self.r.table(t)}"'):
                gpu, cuda = _int_or_none(gpu), _int_or_none(cuda)
                if gpu is not None and cuda is not None:
                    cuda_of.setdefault(gpu, cuda)
        out: dict[int, dict[str, Any]] = {}
        for gid, vals in rows.items():
            cu = _int_or_none(vals.pop("_cu_device", None))
            key = cuda_of.get(gid, cu if cu is not None else gid)
            if key in out:  # ambiguous mapping: keep nsys ids
                return {g: v for g, v in rows.items()}
            out[key] = vals
        return out

    # -- processes and threads --------------------------------------------------------------------------
    def _processes_threads(self, strings: StringTable) -> tuple[pd.DataFrame, pd.DataFrame]:
        r = self.r
        threads = empty_frame(THREAD_COLUMNS)
        if r.has("ThreadNames") and {"nameId", "globalTid"} <= set(r.columns("ThreadNames")):
            t = r.fetch_ints("ThreadNames", {"name_id": "nameId", "global_tid": "globalTid"})
            if len(t["global_tid"]):
                threads = pd.DataFrame({
                    "pid": _pid(t["global_tid"]), "tid": _tid(t["global_tid"]),
                    "name": strings.lookup(t["name_id"]),
                }).drop_duplicates(["pid", "tid"], keep="last").sort_values(["pid", "tid"], ignore_index=True)
        processes = empty_frame(PROCESS_COLUMNS)
        if r.has("PROCESSES") and {"pid", "name"} <= set(r.columns("PROCESSES")):
            rows = r.query('SELECT pid, name FROM "PROCESSES"')
            if rows:
                processes = pd.DataFrame(
                    {"pid": np.array([-1 if (v := _int_or_none(p)) is None else v for p, _ in rows], dtype=np.int64),
                     "name": np.array([str(n or "") for _, n in rows], dtype=object)})
        elif len(threads):
            # 2020.3 has no PROCESSES table: the main thread (tid == pid) carries the process name
            main = threads[threads["pid"] == threads["tid"]]
            processes = main[["pid", "name"]].reset_index(drop=True)
        processes = processes.drop_duplicates("pid", keep="first").sort_values("pid", ignore_index=True)
        return _text_as_object(processes), _text_as_object(threads)


def load_nsys_sqlite(path: Path, *, progress: Progress | None = None, source_format: str = "nsys-sqlite",
                     display_path: Path | None = None) -> Trace:
    """Load an nsys SQLite export. ``display_path`` names the user's file in errors and ``TraceInfo``
    when ``path`` is a cached export of an ``.nsys-rep``."""
    return _Loader(path, progress, source_format, display_path).run()
