"""What an Nsight Systems export is and what the loader reads of it: the tables that mark a file as an
export, the export generation (:func:`detect_schema`), nsys's enum numbering for exports without the
``ENUM_*`` tables, the columns fetched per table, and why an export holds no GPU activity.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from analyzer.errors import InputError
from analyzer.loading.api_names import host_side_summary, launch_calls
from analyzer.loading.nsys_sqlite.decode import int_or_none
from analyzer.loading.sqlite_reader import SqliteReader, ValuesIn

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
        found = [int_or_none(i) for i, name in reader.query(f'SELECT id, name FROM "{table}"')
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


@dataclass(frozen=True)
class Schema:
    """What the loader recognised about an export."""

    generation: str  # "2020" | "2022" | "2023" | "2024+"
    nsys_version: str | None
    schema_version: str | None
    metadata: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None


_WSL = re.compile(r"(?i)microsoft|wsl")


def no_gpu_activity(r: SqliteReader, shown: Path) -> InputError:
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
