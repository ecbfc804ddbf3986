"""The trace model (:class:`~analyzer.loading.model.Trace`) built from an Nsight Systems export: the
stages of :mod:`analyzer.loading.nsys_sqlite`, from fetched columns to frames.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import InputError
from analyzer.loading import attribution as attr
from analyzer.loading.capabilities import missing_capabilities
from analyzer.loading.columns import TextCodes, narrow_int
from analyzer.loading.common import by_start as _by_start
from analyzer.loading.common import contract_frame as _frame
from analyzer.loading.common import OPERATOR_DOMAIN, emit_nvtx_names
from analyzer.loading.common import fill_cc_limits as _fill_cc_limits
from analyzer.loading.common import strip_api_suffix
from analyzer.loading.common import text_as_object as _text_as_object
from analyzer.loading.common import text_column as _text_column
from analyzer.loading.model import (
    API_COLUMNS,
    GPU_COLUMNS,
    GRAPH_EXECUTION,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMORY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    SYNC_COLUMNS,
    THREAD_COLUMNS,
    TIME_MAX,
    Trace,
    TraceInfo,
    empty_frame,
)
from analyzer.loading.nsys_sqlite.decode import (
    StringTable,
    direction_label,
    enum_names,
    int_or_none,
    map_codes,
    memkind_label,
    memory_kind_label,
    min_not_negative,
    pid_of,
    property_int,
    sync_label,
    tid_of,
)
from analyzer.loading.nsys_sqlite.schema import (
    API_FETCH,
    DRIVER_TABLE,
    EVENT_CLASS_DRIVER,
    GRAPH_FETCH,
    GRAPH_EVENT_CLASSES,
    GRAPH_EVENTS_FETCH,
    GRAPH_EVENTS_TABLE,
    GRAPH_TABLE,
    KERNEL_FETCH,
    KERNEL_TABLE,
    MEM_KIND_NAMES,
    MEMCPY_FETCH,
    MEMCPY_KIND_NAMES,
    MEMCPY_TABLE,
    MEMORY_FETCH,
    MEMORY_OPER_NAMES,
    MEMORY_TABLE,
    MEMSET_FETCH,
    MEMSET_TABLE,
    NARROW_FETCH,
    NVTX_DOMAIN_CREATE,
    NVTX_FETCH,
    NVTX_MARK,
    NVTX_PUSHPOP,
    NVTX_STARTEND,
    NVTX_TABLE,
    NVTX_WANTED,
    RUNTIME_TABLE,
    SYNC_FETCH,
    SYNC_TABLE,
    SYNC_TYPE_NAMES,
    Schema,
    backtrace_event_classes,
    detect_schema,
    no_gpu_activity,
)
from analyzer.loading.sqlite_reader import IntColumns, SqliteReader, ValuesIn
from analyzer.resources import release_free_memory

Progress = Callable[[str], None]

#: the most instantiation times kept in ``extras["cuda_graphs"]["instantiated_at"]`` (the rest counted)
MAX_GRAPH_EVENT_TIMES = 10_000


def _with_graph_executions(k: dict[str, np.ndarray], short: TextCodes, name: TextCodes,
                           g: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], TextCodes, TextCodes,
                                                              dict[str, int]]:
    """The kernel rows plus one row per CUDA graph execution of ``GRAPH_TABLE`` whose kernels the trace
    lacks (nsys' default ``--cuda-graph-trace=graph``): the execution is GPU work like a kernel (busy
    time, gaps, windows, steps), named ``CUDA graph <id>``, with an unknown launch configuration and
    ``in_graph`` = 2. An execution whose kernels the trace holds (node-level tracing: the kernels carry
    the graph launch's correlation id) adds no row, so its time is never counted twice."""
    g_key = attr.correlation_key(pid_of(g["global_pid"]), g["correlation_id"])
    k_key = attr.correlation_key(pid_of(k["global_pid"]), k["correlation_id"])
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


def _beyond_time_range(*columns: np.ndarray) -> bool:
    """Whether any timestamp lies beyond +-:data:`TIME_MAX` (NULL reads as -1): damage, not a time; the
    analysis would subtract such values from others and overflow int64 silently."""
    return any(len(c) and (int(c.max()) > TIME_MAX or int(c.min()) < -TIME_MAX) for c in columns)


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
            raise no_gpu_activity(r, self.display_path)
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
        for table, d in ((KERNEL_TABLE, k), (MEMCPY_TABLE, mc), (MEMSET_TABLE, ms), (SYNC_TABLE, sy),
                         ("the CUDA API tables", api), (GRAPH_TABLE, g), (NVTX_TABLE, nv)):
            if d is not None and _beyond_time_range(d["start"], d["end"]):
                raise InputError(self.display_path, f"{table} has timestamps beyond 2^62 ns (about 146 years), "
                                 "which no clock gives and whose differences overflow 64-bit integers",
                                 hint="the export is damaged; export it again with nsys export --type sqlite")
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
        self._nvtx_text = attr.narrow_codes(TextCodes.of(nvtx["text"]))
        self._nvtx_path = attr.narrow_codes(TextCodes.of(nvtx["path"]))
        del nv
        release_free_memory()

        api_name = strings.codes(api["name_id"], strip_api_suffix)
        # 32 bits (24-bit ids, range rows): shared by the API frame and the launch join (no int64 copies)
        api["pid"] = narrow_int(pid_of(api["global_tid"]))
        api["tid"] = narrow_int(tid_of(api["global_tid"]))
        api_thread_nvtx = narrow_int(timeline.thread_at(api["global_tid"], api["start"]))
        api_frame_data: dict[str, Any] = {
            "start": api["start"], "end": api["end"], "duration": api["duration"],
            "name": api_name, "kind": TextCodes(api["is_driver"], np.array(["runtime", "driver"], dtype=object)),
            "pid": api["pid"], "tid": api["tid"], "correlation_id": api["correlation_id"],
            "return_value": api["return_value"],
        }
        api_frame_data.update(attr.range_columns(self._nvtx_text, self._nvtx_path, api_thread_nvtx))

        self.say("joining GPU work to launching API calls")
        launch = attr.Launches(api, api_name, api_thread_nvtx, timeline, nvtx)
        # the API frame before the GPU frames: its text codes become categoricals and the columns only the
        # frame or the join read are dropped (global_tid, name_id, event_class: ~0.3 GB at 20.8 M calls)
        # before the largest join, not after it
        api_frame = _frame(API_COLUMNS, api_frame_data, compact=True).pipe(_by_start)
        del api_frame_data, api, api_thread_nvtx
        short = strings.codes(k["short_id"])
        # the demangled name, else the short name (exports without demangled names)
        name = strings.codes(np.where(strings.is_empty(k["name_id"]), k["short_id"], k["name_id"]))
        graph_stats: dict[str, Any] = {}
        if g is not None:
            k, short, name, graph_stats = _with_graph_executions(k, short, name, g)
        if graph_events is not None:
            graph_stats.update(_graph_event_stats(
                graph_events, origin, enum_names(r, "ENUM_NSYS_EVENT_CLASS", GRAPH_EVENT_CLASSES),
                g["exec_id"] if g is not None else None))
        kernels = self._gpu_frame(KERNEL_COLUMNS, k, launch, {"short_name": short, "name": name})
        del k, g
        copy_kinds = enum_names(r, "ENUM_CUDA_MEMCPY_OPER", MEMCPY_KIND_NAMES)
        mem_kinds = enum_names(r, "ENUM_CUDA_MEM_KIND", MEM_KIND_NAMES)
        mem_labels = {i: memkind_label(n) for i, n in mem_kinds.items()}
        memcpy = self._gpu_frame(MEMCPY_COLUMNS, mc, launch, {
            "direction": map_codes(mc["copy_kind"], {i: direction_label(n) for i, n in copy_kinds.items()},
                                    "other"),
            "src_kind": map_codes(mc["src_kind"], mem_labels, "unknown"),
            "dst_kind": map_codes(mc["dst_kind"], mem_labels, "unknown"),
        })
        memset = self._gpu_frame(MEMSET_COLUMNS, ms, launch, {
            "mem_kind": map_codes(ms["mem_kind"], mem_labels, "unknown"),
        })
        sync = self._sync_frame(sy, launch)
        memory = self._memory_frame(mem, origin, launch, mem_kinds)

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
            platform="cuda",  # Nsight Systems traces NVIDIA GPUs only
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
        rt["is_driver"] = (rt["event_class"] == EVENT_CLASS_DRIVER).astype(np.int8)
        if dr is not None and len(dr["start"]):
            dr["is_driver"] = np.ones(len(dr["start"]), dtype=np.int8)
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
        start = int_or_none(row[0][0], TIME_MAX) if row else None
        if start is None:  # NULL or damaged: no UTC clock
            return None
        return start + int(origin)

    # -- time base --------------------------------------------------------------------------------------
    def _time_base(self, schema: Schema, tables: list[dict[str, np.ndarray]],
                   nv: dict[str, np.ndarray]) -> tuple[int, int]:
        starts = [lo for d in tables if (lo := min_not_negative(d["start"])) is not None]
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
            a_start, a_stop = (int_or_none(row[0][0], TIME_MAX), int_or_none(row[0][1], TIME_MAX)) if row \
                else (None, None)
            if a_start is not None and a_stop is not None:
                if a_start <= t_min and t_max <= a_stop:
                    return a_start, a_stop - a_start
                if a_stop > a_start and 0 <= t_min and t_max <= (a_stop - a_start) and t_min < 10**15:
                    # events already counted from the session start (2023.1 exports)
                    return 0, a_stop - a_start
        if t_min > 10**17 and r.has("TARGET_INFO_SESSION_START_TIME"):
            row = r.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
            utc = int_or_none(row[0][0], TIME_MAX) if row else None
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
        d["text"], d["autograd_op"] = emit_nvtx_names(
            np.where(d["text_id"] >= 0, strings.lookup(d["text_id"]), inline))
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
                ident = int_or_none(i)
                if ident is not None:  # a NULL or text id names no domain
                    names[(-1, ident)] = str(name)
        create = np.flatnonzero(nv["event_type"] == NVTX_DOMAIN_CREATE)
        pids = pid_of(nv["global_tid"][create])
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
        pid = pid_of(gtid)
        dom_names = self._domain_names(nv, pid, nv["domain_id"][sel])
        # emit_nvtx's operators, in the default domain: named as torch.profiler's category names them,
        # so that they are known as operators (never a step) whatever their text
        dom_names[nv["autograd_op"][sel] & (dom_names == "")] = OPERATOR_DOMAIN
        n = len(start)
        frame = _frame(NVTX_COLUMNS, {
            "range_id": np.arange(n, dtype=np.int64), "start": start, "end": end, "duration": end - start,
            "text": text, "domain": dom_names, "kind": kind, "pid": pid, "tid": tid_of(gtid),
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
        data.update(attr.launch_columns(launch, pid_of(d["global_pid"]), d["correlation_id"], self._nvtx_text,
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
        opers = enum_names(self.r, "ENUM_CUDA_DEV_MEM_EVENT_OPER", MEMORY_OPER_NAMES)
        op_labels = {i: ("free" if "DEALLOC" in n.upper() or "FREE" in n.upper() else
                         "alloc" if "ALLOC" in n.upper() else "") for i, n in opers.items()}
        op = map_codes(d["oper"], op_labels, "")
        keep = (op != "") & (d["bytes"] >= 0) & (d["start"] >= 0)
        if not keep.all():
            d = {c: v[keep] for c, v in d.items()}
            op = op[keep]
        if len(d["start"]) == 0:
            return empty_frame(MEMORY_COLUMNS)
        n = len(d["start"])
        pid = pid_of(d["global_pid"])
        data: dict[str, Any] = {
            "start": d["start"] - origin, "device": d["device"], "op": op, "bytes": d["bytes"],
            "address": d["address"],
            "mem_kind": map_codes(d["mem_kind"], {i: memory_kind_label(k) for i, k in mem_kinds.items()},
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
        names = enum_names(self.r, "ENUM_CUPTI_SYNC_TYPE", SYNC_TYPE_NAMES)
        op_pid = pid_of(d["global_pid"])
        idx = launch.index.lookup(op_pid, d["correlation_id"])
        data = dict(d)
        data["sync_type"] = map_codes(d["sync_type"], {i: sync_label(n) for i, n in names.items()}, "unknown")
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
                    dev = int_or_none(row[0])
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
                        vals["memory_bytes"] = property_int(property_int(vals.pop("_mem_mib")) * 1024 * 1024)
                    if "_clock_khz" in vals:
                        vals["clock_hz"] = property_int(property_int(vals.pop("_clock_khz")) * 1000)
                    device = int_or_none(row[0])
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
                    rec[c] = property_int(rec[c])
            warps = property_int(v.get("_warps_per_sm"))
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
                gpu, cuda = int_or_none(gpu), int_or_none(cuda)
                if gpu is not None and cuda is not None:
                    cuda_of.setdefault(gpu, cuda)
        out: dict[int, dict[str, Any]] = {}
        for gid, vals in rows.items():
            cu = int_or_none(vals.pop("_cu_device", None))
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
                    "pid": pid_of(t["global_tid"]), "tid": tid_of(t["global_tid"]),
                    "name": strings.lookup(t["name_id"]),
                }).drop_duplicates(["pid", "tid"], keep="last").sort_values(["pid", "tid"], ignore_index=True)
        processes = empty_frame(PROCESS_COLUMNS)
        if r.has("PROCESSES") and {"pid", "name"} <= set(r.columns("PROCESSES")):
            rows = r.query('SELECT pid, name FROM "PROCESSES"')
            if rows:
                processes = pd.DataFrame(
                    {"pid": np.array([-1 if (v := int_or_none(p)) is None else v for p, _ in rows], dtype=np.int64),
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
