"""The trace model (:class:`~analyzer.loading.model.Trace`) built from a decoded torch.profiler
document: events grouped by kind, ranges nested per thread, GPU work joined to its launching call,
devices, processes, threads, memory and call stacks (see :mod:`analyzer.loading.kineto`).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import InputError
from analyzer.loading import attribution as attr
from analyzer.loading.api_names import grid_in_blocks, host_side_summary, launch_calls
from analyzer.loading.capabilities import missing_capabilities
from analyzer.loading.columns import TextCodes
from analyzer.loading.common import (
    by_start,
    contract_frame,
    fill_cc_limits,
    gc_paused,
    strip_api_suffix,
    text_as_object,
    text_column,
)
from analyzer.loading.kernel_names import kernel_short_name
from analyzer.loading.kineto.columns import (
    EventColumns,
    EventGroup,
    comm_columns,
    int_or,
    memcpy_info,
    mapped,
    memset_kind,
    per_label,
)
from analyzer.loading.kineto.document import (
    GEN_2021_CATS,
    OTHER_ACCELERATOR_CATS,
    PYTORCH_CATS,
    Document,
    Event,
    EventStream,
    StreamFallback,
    decode_document,
    read_json_bytes,
)
from analyzer.loading.model import (
    API_COLUMNS,
    API_STACK_COLUMNS,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMORY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    STACK_COLUMNS,
    SYNC_COLUMNS,
    THREAD_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)
from analyzer.loading.python_stacks import python_call_stacks
from analyzer.resources import release_free_memory

Progress = Callable[[str], None]


_SYNC_KINDS = {"event sync": "event_synchronize", "stream sync": "stream_synchronize",
               "context sync": "context_synchronize", "stream wait event": "stream_wait_event"}


class _KinetoLoader:
    def __init__(self, path: Path, progress: Progress | None, display_path: Path | None,
                 source_format: str) -> None:
        self.path = path
        self.shown = display_path or path
        self.say: Progress = progress or (lambda _msg: None)
        self.source_format = source_format
        # grid, block and shared memory of each API call (ROCm's launch calls), set by _api
        empty = np.empty((0, 3), dtype=np.int64)
        self._call_config: tuple[np.ndarray, np.ndarray, np.ndarray] = (empty, empty, np.empty(0, np.int64))

    def run(self) -> Trace:
        with gc_paused():
            return self._run()

    def _run(self) -> Trace:
        self.say(f"reading {self.shown.name}")
        stream = EventStream(self.path, self.shown)
        columns = EventColumns()
        try:
            stream.read(columns.add)
            doc = stream.document
            if doc is None or not columns.events:  # no events: the whole-file path says so
                raise StreamFallback
            self.say(f"parsed {stream.bytes_read / 1e6:,.1f} MB of JSON in chunks")
        except StreamFallback:
            doc, columns = self._whole_file()
        release_free_memory()  # the decoded chunks' pages: glibc's heap keeps them once freed
        trace = self._build(doc, columns)
        release_free_memory()  # and the model's temporaries, before the facts allocate theirs
        return trace

    def _whole_file(self) -> tuple[Document, EventColumns]:
        """The document decoded at once (a layout the streaming split does not expect, or a damaged
        file: this path names what is wrong)."""
        buf = read_json_bytes(self.path, self.shown)
        self.say(f"parsing JSON ({len(buf) / 1e6:,.1f} MB)")
        doc = decode_document(buf, self.shown)
        head = bytes(buf[:4096])
        del buf
        events = doc.traceEvents
        if events is None:
            what, hint = _other_json(head)
            raise InputError(self.shown, what, hint=hint)
        if not events:
            raise InputError(self.shown, "the trace has no events (empty traceEvents)",
                             hint="record a few steps inside the profiler's active window")
        columns = EventColumns()
        columns.add(events)
        doc.traceEvents = None
        return doc, columns

    # -- classification ---------------------------------------------------------------------------
    def _build(self, doc: Document, columns: EventColumns) -> Trace:
        self.say(f"classifying {columns.events:,} events")
        cats, counts = columns.x_category_counts()
        # value_counts' order: most events first, ties in order of first appearance
        cat_counts = pd.Series(counts, index=pd.Index(cats, dtype=object)).sort_values(ascending=False, kind="stable")
        present = {str(c) for c in cat_counts.index}
        if not present & PYTORCH_CATS:
            found = ", ".join(f"{c or '(none)'}" for c in list(cat_counts.index[:5])) or "no complete (X) events"
            raise InputError(self.shown, f"a Chrome trace, but not from torch.profiler (event categories: {found})",
                             hint="pass a trace written by torch.profiler (export_chrome_trace or "
                                  "tensorboard_trace_handler)")
        quality = _Quality()

        def group(name: str) -> EventGroup:
            return columns.group(name, quality)

        kernels, memcpy, memset = group("kernels"), group("memcpy"), group("memset")
        if kernels.n + memcpy.n + memset.n == 0:
            untimed = sum(columns.untimed(name) for name in ("kernels", "memcpy", "memset"))
            if untimed:
                raise InputError(self.shown, f"no GPU operation carries a usable timestamp (ts) ({untimed:,} without)",
                                 hint="record the trace again")
            other = sorted({OTHER_ACCELERATOR_CATS[c] for c in present if c in OTHER_ACCELERATOR_CATS})
            if other:
                raise InputError(self.shown, f"the trace records {', '.join(other)} activity, which this analyzer "
                                 "does not read (no CUDA kernel, gpu_memcpy or gpu_memset events)",
                                 hint="profile a CUDA (or ROCm) run")
        runtime, driver = group("runtime"), group("driver")
        if kernels.n + memcpy.n + memset.n == 0:
            raise _no_gpu_activity(self.shown, present, runtime, driver)
        ranges, syncs, spans, flows = group("ranges"), group("syncs"), group("spans"), group("flows")
        starts = np.concatenate([g.start for g in (kernels, memcpy, memset, runtime, driver, ranges, syncs, spans)])
        origin = int(starts.min())
        ends = [g.end for g in (kernels, memcpy, memset, runtime, driver, ranges, syncs) if len(g.start)]
        last = int(max((int(e.max()) for e in ends), default=origin))
        pyfuncs, instants = group("pyfuncs"), group("instants")
        for g in (kernels, memcpy, memset, runtime, driver, ranges, syncs, flows, pyfuncs, instants):
            g.start = g.start - origin
        self.say(f"torch.profiler trace: {kernels.n:,} kernels, {memcpy.n:,} copies, "
                 f"{runtime.n + driver.n:,} CUDA API calls, {ranges.n:,} ranges")

        threads = _ThreadKeys()
        flow_ids = _FlowIds(flows)
        nvtx, timeline = self._ranges(ranges, threads)
        api_frame_data, launch = self._api(runtime, driver, flow_ids, threads, nvtx, timeline)
        kernel_frame = self._kernels(kernels, flow_ids, launch)
        memcpy_frame = self._memcpy(memcpy, flow_ids, launch)
        memset_frame = self._memset(memset, flow_ids, launch)
        sync_frame = self._sync(syncs, launch)
        memory_frame = self._memory(instants, threads, timeline)
        api_frame = by_start(contract_frame(API_COLUMNS, api_frame_data, compact=True))
        stacks, api_stacks = empty_frame(STACK_COLUMNS), empty_frame(API_STACK_COLUMNS)
        if pyfuncs.n:
            self.say(f"Python call stacks from {pyfuncs.n:,} python_function events")
            stacks, api_stacks = python_call_stacks(pyfuncs.col("pid"), pyfuncs.col("tid"), pyfuncs.start,
                                                    pyfuncs.end, pyfuncs.col("name"), api_frame)
        rocm = (doc.roctracer_version is not None or doc.hip_runtime_version is not None
                or any(str(n).startswith("hip") for n in api_frame_data["name"].labels))
        gpus, renamed = _match_devices(self._gpus(doc.deviceProperties, rocm),
                                       [f["device"] for f in (kernel_frame, memcpy_frame, memset_frame) if len(f)])
        if rocm and len(memory_frame):  # ROCm's ops carry the HSA agent's number, the allocator its index
            renamed = renamed | _agent_numbers(memory_frame["device"], renamed, [f["device"] for f in (
                kernel_frame, memcpy_frame, memset_frame) if len(f)])
        if renamed and len(memory_frame):  # the allocator numbers GPUs as deviceProperties does
            mem_dev = memory_frame["device"].to_numpy(dtype=np.int64)
            mapped = mem_dev.copy()
            for listed, carried in renamed.items():  # a few GPUs: one pass each, not a Python call per event
                mapped[mem_dev == listed] = carried
            memory_frame["device"] = mapped.astype(memory_frame["device"].dtype)
        processes, thread_frame = self._processes_threads(columns.meta)

        rank, world = _distributed(doc.distributedInfo)
        base = int_or(doc.baseTimeNanoseconds, 0) if doc.baseTimeNanoseconds is not None else 0
        generation = trace_generation(present, flows, ranges, kernels)
        unavailable = missing_capabilities(kernels=kernel_frame, memcpy=memcpy_frame, memset=memset_frame,
                                           api=api_frame, gpus=gpus, memory=memory_frame)
        if "memcpy_memory_kind" in unavailable:
            names = sorted(memcpy.text("name").labels.tolist())[:2]
            unavailable["memcpy_memory_kind"] = (
                "torch.profiler names the copies without their host memory kind ("
                + ", ".join(repr(n) for n in names) + "), so pageable and pinned copies cannot be told apart")
        info = TraceInfo(
            path=self.shown,
            source_format=self.source_format,
            nsys_version=None,
            schema_version=None if doc.schemaVersion is None else str(doc.schemaVersion),
            origin_ns=base + origin,
            duration_ns=max(0, last - origin),
            hostname=doc.host_name if isinstance(doc.host_name, str) else None,
            export_schema=generation,
            rank=rank,
            world_size=world,
            unavailable=unavailable,
            platform="rocm" if rocm else "cuda",
        )
        extras: dict[str, Any] = {
            "kineto": {
                "generation": generation,
                "event_counts": {str(k): int(v) for k, v in cat_counts.items()},
                "base_time_ns": base or None,
                "trace_name": doc.traceName if isinstance(doc.traceName, str) else None,
                "distributed_info": doc.distributedInfo if isinstance(doc.distributedInfo, dict) else None,
                "ops_without_launch": int((kernel_frame["api_name"] == "").sum()) if len(kernel_frame) else 0,
                "out_of_range": quality.counts(),
            },
        }
        note = quality.note()
        if note:
            extras["notes"] = [note]
        return Trace(info=info, kernels=kernel_frame, memcpy=memcpy_frame, memset=memset_frame, api=api_frame,
                     sync=sync_frame, nvtx=nvtx, gpus=gpus, processes=processes, threads=thread_frame,
                     stacks=stacks, api_stacks=api_stacks, memory=memory_frame, extras=extras)

    # -- ranges ------------------------------------------------------------------------------------
    def _ranges(self, g: EventGroup, threads: _ThreadKeys) -> tuple[pd.DataFrame, attr.NvtxTimeline]:
        keep = np.flatnonzero(g.start >= 0)
        pid = g.col("pid")[keep]
        tid = g.col("tid")[keep]
        start = g.start[keep]
        end = g.end[keep]
        order = np.lexsort((-end, start))  # by start, outer ranges first
        pid, tid, start, end = pid[order], tid[order], start[order], end[order]
        text, cats = g.text("name").take(keep[order]), g.text("cat").take(keep[order])  # codes, no string touched
        key = threads.keys(pid, tid)
        depth, parent, crossed = attr.nest_ranges(key, start, end)
        parent = _link_secondary_threads(key, pid, tid, per_label(text, _is_step, dtype=bool), start, end, depth,
                                         parent)
        depth = _depth_from_parents(parent)
        paths = attr.path_codes(text, depth, parent)
        n = len(start)
        kind = np.empty(n, dtype=object)
        kind.fill("pushpop")  # one string shared by every row (np.full makes a str object per row)
        frame = contract_frame(NVTX_COLUMNS, {
            "range_id": np.arange(n, dtype=np.int64), "start": start, "end": end, "duration": end - start,
            "text": text, "domain": cats, "kind": kind, "pid": pid, "tid": tid,
            "depth": depth, "parent_id": parent, "path": paths,
        })
        timeline = attr.NvtxTimeline(key, pid, start, end, depth, parent, crossed)
        self._range_text, self._range_path = text, paths
        return frame, timeline

    # -- API calls -----------------------------------------------------------------------------------
    def _api(self, runtime: EventGroup, driver: EventGroup, flow_ids: _FlowIds, threads: _ThreadKeys,
             nvtx: pd.DataFrame, timeline: attr.NvtxTimeline
             ) -> tuple[dict[str, Any], attr.Launches]:
        g = EventGroup.concat(runtime, driver)
        n = g.n
        pid = g.col("pid")
        tid = g.col("tid")
        corr = g.col("correlation")
        corr = flow_ids.fill(corr, g, "s")
        is_driver = np.concatenate([np.zeros(runtime.n, np.int64), np.ones(driver.n, np.int64)])
        name = mapped(g.text("name"), strip_api_suffix)
        start = g.start
        end = np.maximum(g.end, start)
        key = threads.keys(pid, tid)
        thread_nvtx = timeline.thread_at(key, start) if n else np.empty(0, np.int64)
        api = {"start": start, "pid": pid, "tid": tid, "correlation_id": corr, "is_driver": is_driver}
        data = {
            "start": start, "end": end, "duration": end - start, "name": name,
            "kind": TextCodes(is_driver, np.array(["runtime", "driver"], dtype=object)), "pid": pid, "tid": tid,
            "correlation_id": corr, "return_value": np.full(n, -1, dtype=np.int64),
        }
        data.update(attr.range_columns(self._range_text, self._range_path, thread_nvtx))
        no_dims = np.full((driver.n, 3), -1, dtype=np.int64)
        self._call_config = (np.concatenate([runtime.col("grid"), no_dims]),
                             np.concatenate([runtime.col("block"), no_dims]),
                             np.concatenate([runtime.col("smem"), np.full(driver.n, -1, dtype=np.int64)]))
        return data, attr.Launches(api, name, thread_nvtx, timeline, nvtx)

    def _launch_config(self, g: EventGroup, corr: np.ndarray, launch: attr.Launches
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Grid, block and dynamic shared memory of each kernel: the kernel event's, else (ROCm before
        6.3 writes them on the launch call only: ``hipLaunchKernel``'s ``grid``/``block``/``shared
        memory``) its launching call's."""
        grid, block, smem = g.col("grid"), g.col("block"), g.col("smem")
        missing = (grid < 0).all(axis=1) & (block < 0).all(axis=1)
        call_grid, call_block, call_smem = self._call_config
        if missing.any() and (call_grid >= 0).any():
            idx = launch.index.lookup(None, corr)
            take = missing & (idx >= 0)
            take[take] &= (call_grid[idx[take]] >= 0).all(axis=1)
            if take.any():
                grid, block, smem = grid.copy(), block.copy(), smem.copy()
                grid[take], block[take] = call_grid[idx[take]], call_block[idx[take]]
                smem[take] = call_smem[idx[take]]
        return grid, block, smem

    # -- GPU operations ---------------------------------------------------------------------------------
    def _op_columns(self, g: EventGroup, flow_ids: _FlowIds, launch: attr.Launches) -> dict[str, Any]:
        pid = g.col("pid")
        tid = g.col("tid")
        device = g.col("device")
        device = np.where(device >= 0, device, pid)  # current format: the event's pid is the device
        stream = g.col("stream")
        no_stream = stream < 0
        if no_stream.any():
            stream = np.where(no_stream, tid, stream)  # "stream 7" (2021) or the stream id (current)
        corr = flow_ids.fill(g.col("correlation"), g, "f")
        data: dict[str, Any] = {  # arrays, and the launching call's texts as TextCodes
            "start": g.start, "end": g.end, "duration": g.dur, "device": device,
            "context": g.col("context"), "stream": stream, "correlation_id": corr,
        }
        data.update(attr.launch_columns(launch, None, corr, self._range_text, self._range_path))
        return data

    def _kernels(self, g: EventGroup, flow_ids: _FlowIds, launch: attr.Launches) -> pd.DataFrame:
        if not g.n:
            return empty_frame(KERNEL_COLUMNS)
        data = self._op_columns(g, flow_ids, launch)
        names = g.text("name")
        grid, block, smem = self._launch_config(g, data["correlation_id"], launch)
        grid = grid_in_blocks(grid, block, data["api_name"].codes, data["api_name"].labels)
        n = g.n
        data.update({
            "short_name": mapped(names, kernel_short_name), "name": names,
            "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
            "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
            "registers_per_thread": g.col("registers"),
            "static_smem": np.zeros(n, dtype=np.int64),
            "dynamic_smem": np.maximum(smem, 0),
            "launch_type": np.full(n, -1, dtype=np.int64),
            "graph_node_id": g.col("graph_node"),
            "graph_id": np.full(n, -1, dtype=np.int64),  # torch.profiler does not name the graph
        })
        data["in_graph"] = attr.graph_membership(data["api_name"], data["graph_node_id"],
                                                 correlation_id=data["correlation_id"])
        frame = contract_frame(KERNEL_COLUMNS, data, compact=True)
        for col, values in comm_columns(g).items():  # optional columns: only where the trace has them
            frame[col] = values.categorical() if isinstance(values, TextCodes) else values
        return by_start(frame)

    def _memcpy(self, g: EventGroup, flow_ids: _FlowIds, launch: attr.Launches) -> pd.DataFrame:
        if not g.n:
            return empty_frame(MEMCPY_COLUMNS)
        data = self._op_columns(g, flow_ids, launch)
        names = g.text("name")
        data.update({
            "bytes": g.col("nbytes"),
            "direction": mapped(names, lambda t: memcpy_info(t)[0]),
            "src_kind": mapped(names, lambda t: memcpy_info(t)[1]),
            "dst_kind": mapped(names, lambda t: memcpy_info(t)[2]),
        })
        return by_start(contract_frame(MEMCPY_COLUMNS, data, compact=True))

    def _memset(self, g: EventGroup, flow_ids: _FlowIds, launch: attr.Launches) -> pd.DataFrame:
        if not g.n:
            return empty_frame(MEMSET_COLUMNS)
        data = self._op_columns(g, flow_ids, launch)
        data.update({"bytes": g.col("nbytes"),
                     "mem_kind": mapped(g.text("name"), memset_kind)})
        return by_start(contract_frame(MEMSET_COLUMNS, data, compact=True))

    def _memory(self, g: EventGroup, threads: _ThreadKeys, timeline: attr.NvtxTimeline) -> pd.DataFrame:
        """``[memory]`` instant events (``profile_memory=True``) -> the memory frame: one row per caching-
        allocator block allocated (``Bytes`` > 0) or freed (< 0), with the allocator's running totals
        after it and the range open on the event's thread (else on its process). CUDA blocks
        (``Device Type`` 1, or 6: HIP, as PyTorch built for ROCm writes them) are device memory, CPU
        blocks (0) host memory; a GPU event without a ``Device Id`` keeps device -1. The ``Device Id`` is
        the index the process sees, as ``deviceProperties`` numbers them: the caller maps it to the id
        the GPU's kernels carry (:func:`_match_devices`)."""
        names = g.text("name")
        code = np.flatnonzero(names.labels == "[memory]")
        rows = np.flatnonzero(names.codes == code[0]) if len(code) else code
        if not len(rows):
            return empty_frame(MEMORY_COLUMNS)
        sub = g.take(rows)
        signed = sub.col("mem_bytes")
        keep = signed != 0
        if not keep.all():
            sub = sub.take(np.flatnonzero(keep))
            signed = signed[keep]
        n = sub.n
        if n == 0:
            return empty_frame(MEMORY_COLUMNS)
        dtype = sub.col("device_type")
        gpu = np.isin(dtype, GPU_DEVICE_TYPES)
        kind = np.full(n, "unknown", dtype=object)
        kind[gpu] = "device"
        kind[dtype == 0] = "host"
        device = np.where(gpu, sub.col("device_id"), -1)
        device[device < -1] = -1
        pid = sub.col("pid")
        tid = sub.col("tid")
        ids = timeline.thread_at(threads.keys(pid, tid), sub.start)
        none = ids < 0
        how = np.where(none, 0, 2).astype(np.int8)
        if none.any():
            proc = timeline.process_at(pid[none], sub.start[none])
            ids[none] = proc
            how[np.flatnonzero(none)[proc >= 0]] = 1
        data: dict[str, Any] = {
            "start": sub.start, "device": device, "op": np.where(signed > 0, "alloc", "free").astype(object),
            "bytes": np.abs(signed), "address": sub.col("addr"), "mem_kind": kind,
            "source": np.full(n, "allocator", dtype=object),
            "total_allocated": sub.col("total_allocated"), "total_reserved": sub.col("total_reserved"),
            "stream": np.full(n, -1, dtype=np.int64), "correlation_id": np.full(n, -1, dtype=np.int64),
            "pool_bytes": np.full(n, -1, dtype=np.int64),
            "api_name": np.full(n, "", dtype=object), "api_start": np.full(n, -1, dtype=np.int64),
            "pid": pid, "tid": tid, "attribution": np.array(["none", "process", "thread"], dtype=object)[how],
        }
        data.update(attr.range_columns(self._range_text, self._range_path, ids))
        return by_start(contract_frame(MEMORY_COLUMNS, data, compact=True))

    def _sync(self, g: EventGroup, launch: attr.Launches) -> pd.DataFrame:
        if not g.n:
            return empty_frame(SYNC_COLUMNS)
        corr = g.col("correlation")
        idx = launch.index.lookup(None, corr)
        data = {
            "start": g.start, "end": g.end, "duration": g.dur, "device": g.col("device"),
            "context": g.col("context"), "stream": g.col("stream"), "correlation_id": corr,
            "sync_type": mapped(g.text("kind"), lambda k: _SYNC_KINDS.get(k.strip().lower(), "unknown")),
            "pid": attr.take(launch.pid, idx), "tid": attr.take(launch.tid, idx),
        }
        return by_start(contract_frame(SYNC_COLUMNS, data, compact=True))

    # -- GPUs, processes, threads -------------------------------------------------------------------------
    def _gpus(self, props: Any, rocm: bool = False) -> pd.DataFrame:
        """One row per ``deviceProperties`` entry. On ROCm (``rocm``: the document or its API calls say
        so) a device without a name (ROCm 7 writes ``""``) is named ``AMD GPU (HIP arch 9.4, 304 CUs)``
        from its properties, and CUDA's per-compute-capability limits are never filled in: HIP's
        major.minor (9.0 on an MI210, 9.4 on an MI300X) is AMD's architecture, not CUDA's Hopper."""
        if not isinstance(props, list) or not props:
            return empty_frame(GPU_COLUMNS)
        mapping = {
            "name": "name", "sm_count": "numSms", "memory_bytes": "totalGlobalMem",
            "compute_major": "computeMajor", "compute_minor": "computeMinor",
            "max_threads_per_block": "maxThreadsPerBlock", "max_threads_per_sm": "maxThreadsPerMultiprocessor",
            "max_registers_per_block": "regsPerBlock", "max_registers_per_sm": "regsPerMultiprocessor",
            "threads_per_warp": "warpSize", "max_shared_per_block": "sharedMemPerBlock",
            "max_shared_per_block_optin": "sharedMemPerBlockOptin",
            "max_shared_per_sm": "sharedMemPerMultiprocessor",
        }
        records: dict[int, dict[str, Any]] = {}
        for i, p in enumerate(props):
            if not isinstance(p, dict):
                continue
            rec: dict[str, Any] = {c: 0 for c in GPU_COLUMNS}
            rec["device"] = int_or(p.get("id"), i)
            for col, key in mapping.items():
                value = p.get(key)
                if col == "name":
                    rec["name"] = value if isinstance(value, str) else ""
                else:
                    rec[col] = max(int_or(value, 0), 0)
            if not rec["max_shared_per_sm"]:
                rec["max_shared_per_sm"] = max(int_or(p.get("maxSharedMemoryPerMultiProcessor"), 0), 0)
            amd = rocm or any(w in rec["name"] for w in ("AMD", "Radeon", "Instinct"))
            if amd and not rec["name"].strip():
                rec["name"] = _amd_gpu_name(rec)
            if not amd:
                fill_cc_limits(rec)  # CUDA compute capabilities; AMD's gfx numbers are not those
            records.setdefault(rec["device"], rec)
        if not records:
            return empty_frame(GPU_COLUMNS)
        rows = [records[d] for d in sorted(records)]
        name = np.empty(len(rows), dtype=object)
        name[:] = [r["name"] for r in rows]
        return pd.DataFrame({c: text_column(name) if c == "name" else np.array([r[c] for r in rows], dtype=np.int64)
                             for c in GPU_COLUMNS})

    def _processes_threads(self, meta: list[Event]) -> tuple[pd.DataFrame, pd.DataFrame]:
        procs: dict[int, str] = {}
        gpu_pids: set[int] = set()
        thread_names: dict[tuple[int, int], str] = {}
        for e in meta:
            name = e.name if isinstance(e.name, str) else ""
            value = e.args.name if e.args is not None else None
            pid = int_or(e.pid, -1)
            if pid < 0:
                continue
            if name == "process_name" and isinstance(value, str):
                procs.setdefault(pid, value)
            elif name == "process_labels" and e.args is not None and isinstance(e.args.labels, str):
                if e.args.labels.startswith("GPU"):
                    gpu_pids.add(pid)
            elif name == "thread_name" and isinstance(value, str):
                tid = int_or(e.tid, -1)
                if tid >= 0:
                    thread_names[(pid, tid)] = value
        # text built as object columns (text_column), not left to pandas' inference of its str dtype
        processes = pd.DataFrame({"pid": np.array([p for p in procs if p not in gpu_pids], dtype=np.int64),
                                  "name": text_column(np.array([n for p, n in procs.items() if p not in gpu_pids],
                                                               dtype=object))})
        threads = pd.DataFrame({"pid": np.array([k[0] for k in thread_names], dtype=np.int64),
                                "tid": np.array([k[1] for k in thread_names], dtype=np.int64),
                                "name": text_column(np.array(list(thread_names.values()), dtype=object))})
        if processes.empty:
            processes = empty_frame(PROCESS_COLUMNS)
        if threads.empty:
            threads = empty_frame(THREAD_COLUMNS)
        return processes.sort_values("pid", ignore_index=True), threads.sort_values(["pid", "tid"], ignore_index=True)


class _Quality:
    """Values out of range in a torch.profiler trace, counted by kind and event kind, so that the one
    note the report shows says what was changed: a negative ``dur`` and one past 64-bit nanoseconds
    (``2^64``) count as 0, an event with a negative ``ts``, or one that is no number of microseconds
    within 64-bit nanoseconds (missing, ``null``, a string, ``1e300``), cannot be placed and is left out."""

    _WHAT = {"negative_dur": "a negative duration (dur), counted as 0",
             "huge_dur": "a duration (dur) too large for 64-bit nanoseconds, counted as 0",
             "negative_ts": "a negative timestamp (ts), left out",
             "unreadable_ts": "a missing or unreadable timestamp (ts: not a number, or past 64-bit "
                              "nanoseconds), left out"}

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {kind: {} for kind in self._WHAT}

    def add(self, kind: str, label: str, n: int) -> None:
        if n:
            self._counts[kind][label] = self._counts[kind].get(label, 0) + n

    def counts(self) -> dict[str, dict[str, int]]:
        return {kind: dict(by) for kind, by in self._counts.items() if by}

    def note(self) -> str | None:
        parts = []
        for kind, what in self._WHAT.items():
            by = self._counts[kind]
            if by:
                events = ", ".join(f"{n:,} {label}{'' if n == 1 else 's'}" for label, n in by.items())
                parts.append(f"{events} with {what}")
        if not parts:
            return None
        return ("Data quality: this torch.profiler trace has values out of range or unreadable: " + "; ".join(parts)
                + ". Kernel counts and times below leave those out or count them as 0.")


def _no_gpu_activity(shown: Path, cats: set[str], runtime: EventGroup, driver: EventGroup) -> InputError:
    """The one line for a trace without GPU operations: what the host did through the CUDA API (a capture
    that launched kernels still says how much time went to API calls and synchronization) and the
    likely reason, read from the trace itself."""
    names = np.concatenate([runtime.col("name"), driver.col("name")])
    durs = np.concatenate([runtime.dur, driver.dur])
    starts = np.concatenate([runtime.start, driver.start])
    span = int((starts + durs).max() - starts.min()) if len(starts) else 0
    if not len(names):
        return InputError(shown, "torch.profiler trace without GPU activity (no kernel, gpu_memcpy or gpu_memset "
                          "events, and no CUDA API call: CUDA activity was not recorded)",
                          hint="profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] on a GPU run")
    calls = list(zip(names.tolist(), [1] * len(names), durs.tolist()))
    if not launch_calls(calls):
        return InputError(shown, f"torch.profiler trace without GPU activity ({len(names):,} CUDA API calls but no "
                          "kernel launch: no GPU work inside the profiled steps)",
                          hint="profile steps that run on the GPU, with activities=[ProfilerActivity.CPU, "
                               "ProfilerActivity.CUDA]")
    host = host_side_summary(calls, span)
    if "cuda_profiler_range" in cats:
        why = ("it was recorded with the CUPTI range profiler (cuda_profiler_range events: torch.profiler's "
               "experimental_config with profiler_metrics), which replaces the GPU activity trace")
        hint = "record again without profiler_metrics to get the GPU timeline"
    else:
        why = ("CUPTI recorded the API calls but no GPU activity: WSL2 and some virtualized GPUs record none, and "
               "another profiler holding CUPTI at the same time (nsys, DCGM profiling) takes it")
        hint = "record on native Linux with no other profiler attached"
    return InputError(shown, f"torch.profiler trace without GPU activity: {host}; {why}", hint=hint)


#: c10::DeviceType values of GPU memory in ``[memory]`` events: CUDA (1), HIP (6: PyTorch built for ROCm)
GPU_DEVICE_TYPES = (1, 6)


def _amd_gpu_name(rec: dict[str, Any]) -> str:
    """A name for an AMD GPU the trace left unnamed, from what its properties say."""
    parts = []
    if rec.get("compute_major"):
        parts.append(f"HIP arch {rec['compute_major']}.{rec.get('compute_minor', 0)}")
    if rec.get("sm_count"):
        parts.append(f"{rec['sm_count']} CUs")
    return "AMD GPU" + (f" ({', '.join(parts)})" if parts else "")


def _match_devices(gpus: pd.DataFrame, used: list[Any]) -> tuple[pd.DataFrame, dict[int, int]]:
    """``gpus`` with their ids matched to the ids the GPU events carry. ``deviceProperties`` numbers the
    devices the process sees (0, 1 ...), while ROCm's tracer writes the physical index on each kernel
    (device 2 or 9 with ``HIP_VISIBLE_DEVICES`` set, ``deviceProperties`` listing only id 0). Used ids
    without properties take, in order, the listed devices no event uses; when every listed device has
    the same name, a used id beyond them takes that name too (one kind of GPU in the machine). Also
    returns the ids changed (listed id -> the id its events carry)."""
    if gpus.empty or not used:
        return gpus, {}
    ids = np.unique(np.concatenate([np.asarray(u, dtype=np.int64) for u in used]))
    listed = gpus["device"].to_numpy(dtype=np.int64)
    missing = [int(d) for d in ids if d not in set(listed.tolist())]
    if not missing:
        return gpus, {}
    spare = [i for i, d in enumerate(listed.tolist()) if d not in set(ids.tolist())]
    out = gpus.copy()
    device = out["device"].to_numpy(dtype=np.int64).copy()
    renamed: dict[int, int] = {}
    for row, d in zip(spare, missing):
        renamed[int(device[row])] = d
        device[row] = d
    out["device"] = device
    left = missing[len(spare):]
    if left and out["name"].nunique() == 1:  # the same GPU model throughout: the unlisted ones are it too
        extra = pd.DataFrame([out.iloc[0].to_dict() | {"device": d} for d in left], columns=out.columns)
        out = pd.concat([out, extra], ignore_index=True)
    return text_as_object(out.sort_values("device", ignore_index=True).astype({"device": "int64"})), renamed


def _agent_numbers(memory_device: pd.Series, renamed: dict[int, int], used: list[Any]) -> dict[int, int]:
    """Allocator GPU ids (the index the process sees) -> the ids its GPU ops carry, on ROCm where the
    tracer numbers a GPU by its HSA agent, after the CPU agents (GPU 0 of a two-socket host is device 2)
    and ``deviceProperties`` lists ids 0..7 too (vLLM on an MI300X: memory on 0, every kernel on 2).
    The allocator's ids no op carries are paired in order with the ops' ids no allocator event carries
    when there are as many of each; else nothing is changed."""
    if not used:
        return {}
    mem = {renamed.get(int(d), int(d)) for d in pd.unique(memory_device.to_numpy(dtype=np.int64)) if int(d) >= 0}
    ops = {int(d) for d in np.unique(np.concatenate([np.asarray(u, dtype=np.int64) for u in used]))}
    m, o = sorted(mem - ops), sorted(ops - mem)
    back = {v: k for k, v in renamed.items()}
    return {back.get(a, a): b for a, b in zip(m, o)} if m and len(m) == len(o) else {}


class _ThreadKeys:
    """One int64 key per (pid, tid) pair, shared by ranges and API calls: the pair packed in 64 bits."""

    @staticmethod
    def keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
        packed = ((pid.astype(np.uint64) & np.uint64(0x7FFFFFFF)) << np.uint64(32)) | (
            tid.astype(np.uint64) & np.uint64(0xFFFFFFFF))
        return packed.view(np.int64)


class _FlowIds:
    """Launch-flow ids by the (pid, tid, ts) they bind to: ``s`` at the launching call, ``f`` at the GPU
    operation. Used only for events without ``args.correlation`` (built on first need)."""

    def __init__(self, flows: EventGroup) -> None:
        self._flows = flows
        self._by_phase: dict[str, dict[tuple[int, int, int], int]] | None = None

    def _table(self, phase: str) -> dict[tuple[int, int, int], int]:
        if self._by_phase is None:
            self._by_phase = {"s": {}, "f": {}}
            flows = self._flows
            if flows.n:
                ids = flows.col("id")
                pid = flows.col("pid")
                tid = flows.col("tid")
                for p, e_pid, e_tid, t, i in zip(flows.col("ph"), pid.tolist(), tid.tolist(),
                                                  flows.start.tolist(), ids.tolist()):
                    if i >= 0:
                        self._by_phase["s" if p == "s" else "f"][(e_pid, e_tid, t)] = i
        return self._by_phase[phase]

    def fill(self, corr: np.ndarray, g: EventGroup, phase: str) -> np.ndarray:
        missing = np.flatnonzero(corr < 0)
        if not len(missing) or not self._flows.n:
            return corr
        table = self._table(phase)
        pid = g.col("pid")[missing]
        tid = g.col("tid")[missing]
        out = corr.copy()
        for j, i in enumerate(missing.tolist()):
            out[i] = table.get((int(pid[j]), int(tid[j]), int(g.start[i])), -1)
        return out


def _is_step(text: str) -> bool:
    return text.startswith("ProfilerStep#")


def _link_secondary_threads(key: np.ndarray, pid: np.ndarray, tid: np.ndarray, step: np.ndarray,
                            start: np.ndarray, end: np.ndarray, depth: np.ndarray,
                            parent: np.ndarray) -> np.ndarray:
    """Parents with the outermost ranges of secondary threads (autograd, data-loader pinning) nested
    under the innermost range of their process's main thread that encloses them.

    The main thread of a process holds its ``ProfilerStep#N`` ranges, else has tid == pid, else has the
    most ranges (``step``: whether each range is one). Ranges on it are untouched; a root elsewhere gets
    a parent only when a main-thread range covers it entirely."""
    out = parent.copy()
    if len(key) == 0:
        return out
    main = _main_threads(key, pid, tid, step)
    if main is None:  # one thread per process: nothing to link
        return out
    for p, main_key in main.items():
        on_main = np.flatnonzero(key == main_key)
        roots = np.flatnonzero((pid == p) & (key != main_key) & (parent < 0))
        if not len(on_main) or not len(roots):
            continue
        # innermost main-thread range open at each root's start: among main ranges starting at or
        # before it (sorted by start, outer first), walk up from the latest until one encloses the root
        m_start, m_end = start[on_main], end[on_main]
        cand = np.searchsorted(m_start, start[roots], side="right") - 1
        local_parent = np.where(parent[on_main] >= 0, np.searchsorted(on_main, parent[on_main]), -1)
        for _ in range(int(depth[on_main].max()) + 2):
            bad = (cand >= 0) & (m_end[np.maximum(cand, 0)] < end[roots])
            if not bad.any():
                break
            cand[bad] = local_parent[cand[bad]]
        ok = cand >= 0
        out[roots[ok]] = on_main[cand[ok]]
    return out


def _main_threads(key: np.ndarray, pid: np.ndarray, tid: np.ndarray, step: np.ndarray) -> dict[int, int] | None:
    """Each process's main thread (pid -> thread key): the one with the most ``ProfilerStep#`` ranges,
    then the one whose tid is the pid, then the one with the most ranges, then the first seen. None when
    every process has one thread. (Per-thread counts by one ``np.unique`` and two ``bincount``: a
    pandas groupby here cost a fifth of a small trace's load.)"""
    _keys, first, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if (pid[first][inv] != pid).any() or (tid[first][inv] != tid).any():  # packed keys collide (pid >= 2^31)
        _rows, first, inv = np.unique(np.stack([pid, tid]), axis=1, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
    n = np.bincount(inv, minlength=len(first))
    steps = np.bincount(inv, weights=step, minlength=len(first))
    seen = np.argsort(first, kind="stable")  # threads in order of first appearance
    t_pid, t_tid = pid[first][seen], tid[first][seen]
    order = seen[np.lexsort((-n[seen], t_pid != t_tid, -steps[seen], t_pid))]
    g_pid = pid[first][order]
    lead = np.r_[True, g_pid[1:] != g_pid[:-1]]
    if lead.all():
        return None
    return dict(zip(g_pid[lead].tolist(), key[first][order][lead].tolist()))


def _depth_from_parents(parent: np.ndarray) -> np.ndarray:
    depth = np.zeros(len(parent), dtype=np.int64)
    cur = parent.copy()
    for _ in range(len(parent) + 1):
        has = cur >= 0
        if not has.any():
            break
        depth[has] += 1
        cur[has] = parent[cur[has]]
    return depth


def _distributed(info: Any) -> tuple[int | None, int | None]:
    if not isinstance(info, dict):
        return None, None
    rank = info.get("rank")
    world = info.get("world_size")
    r = int_or(rank, -1) if rank is not None else -1
    w = int_or(world, -1) if world is not None else -1
    return (r if r >= 0 else None), (w if w > 0 else None)


def trace_generation(cats: set[str], flows: EventGroup, ranges: EventGroup, kernels: EventGroup) -> str:
    """Which vocabulary/time format the trace uses: ``2021`` (Operator/Runtime/Kernel), ``2024+``
    (nanosecond decimals), ``2023`` (``ac2g`` flows), ``2022`` (``async_cpu_to_gpu`` flows), ``2022+``."""
    if cats & GEN_2021_CATS:
        return "2021"
    sample = kernels.head[:50] + ranges.head[:50]
    if any(b"." in bytes(r) for r in sample):
        return "2024+"
    flow_cats = set(flows.text("cat").labels.tolist())
    if "ac2g" in flow_cats:
        return "2023"
    if "async_cpu_to_gpu" in flow_cats:
        return "2022"
    return "2022+"


def load_kineto(path: Path, *, progress: Progress | None = None, display_path: Path | None = None,
                source_format: str = "kineto-json") -> Trace:
    """Load a torch.profiler (Kineto) Chrome-trace JSON file (plain, ``.gz`` or ``.xz``)."""
    return _KinetoLoader(Path(path), progress, display_path, source_format).run()


def _other_json(head: bytes) -> tuple[str, str]:
    """``(message, hint)`` for a JSON document without ``traceEvents``, naming the tools whose JSON people
    pass for a trace by the keys opening it: rocprofv3's ``--output-format json`` (``rocprofiler-sdk-tool``)
    and PyTorch's execution trace (``ExecutionTraceObserver``: ``schema`` and ``nodes``, operators
    without GPU timing)."""
    if b'"rocprofiler-sdk-tool"' in head:
        return ("rocprofv3's JSON output (rocprofiler-sdk) with the rocprofiler-sdk-tool list not first, a "
                "layout rocprofv3 does not write", "pass the file rocprofv3 wrote (PID_results.json) unedited")
    if b'"nodes"' in head and b'"schema"' in head:
        return ("a PyTorch execution trace (ExecutionTraceObserver: operators and their inputs, no GPU timeline)",
                "pass the .pt.trace.json that torch.profiler wrote beside it")
    return ("JSON without a traceEvents list: not a Chrome trace", "pass the .pt.trace.json that torch.profiler wrote")
