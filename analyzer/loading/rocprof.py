"""rocprofv3's JSON output (``rocprofv3 --output-format json``) -> :class:`~analyzer.loading.model.Trace`.

rocprofv3 (ROCm's rocprofiler-sdk command-line tool) writes one document per process,
``{"rocprofiler-sdk-tool": [{...}]}``, plain or compressed (``.json.gz``/``.json.xz`` read as they are).
What becomes what:

* ``agents`` -> the GPUs (``type`` 2; the CPUs are agents too): device id the HIP device index
  (``gpu_index``, else ``logical_node_type_id``, else the GPU agents' order), name the product name
  (``AMD Instinct MI350X``), compute units, memory, wavefront size, LDS, architecture from
  ``gfx_target_version`` (90500 -> 9.5).
* ``buffer_records.kernel_dispatch`` -> kernels: agent -> device, HIP stream (``stream_id``, else the HSA
  queue), name from ``kernel_symbols`` (the demangled ``formatted_kernel_name``), grid in blocks
  (HSA's ``grid_size`` counts work-items: divided by ``workgroup_size`` per dimension, as the torch.profiler
  loader does for ``hipExtModuleLaunchKernel``), LDS (``group_segment_size``) as shared memory.
* ``buffer_records.hip_api`` (``--hip-trace``/``--sys-trace``) -> API calls, names from
  ``strings.buffer_records`` (each record's ``kind`` and ``operation`` index it), joined to the kernels
  and copies on the internal correlation id, as CUPTI's correlation id joins them for nsys.
* ``buffer_records.memory_copy`` -> copies: direction from the operation's name
  (``MEMORY_COPY_HOST_TO_DEVICE`` -> H2D), device the GPU agent among source and destination.

Not read: roctx ranges (``marker_api``; what NVTX ranges are to nsys), counters, PC samples, memory
allocations and scratch memory; the trace says so (:attr:`TraceInfo.unavailable` and its notes). The
only public rocprofv3 JSON seen (AMD-AGI/TraceLens ``tests/rocprof/908_results.json.gz``, committed in
``tests/data/public``) holds kernel dispatches alone: the API and copy paths follow rocprofiler-sdk's
record layouts (the same ``kind``/``operation``/``thread_id``/``correlation_id``/timestamp fields as a
dispatch) without a real file to test them on.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzer.errors import InputError
from analyzer.loading import attribution as attr
from analyzer.loading.capabilities import missing_capabilities
from analyzer.loading.columns import TextCodes
from analyzer.loading.common import by_start, contract_frame, strip_api_suffix, text_column
from analyzer.loading.kernel_names import kernel_short_name
from analyzer.loading.model import (
    API_COLUMNS,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    SYNC_COLUMNS,
    THREAD_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)

Progress = Callable[[str], None]

#: the key that opens a rocprofv3 JSON document
ROCPROF_KEY = b'"rocprofiler-sdk-tool"'
#: HSA agent types (``hsa_device_type_t``): 1 CPU, 2 GPU
_GPU_AGENT = 2
#: buffer-record kinds read as API calls (HIP runtime calls; the compiler's __hipPushCallConfiguration
#: and friends are not the program's calls)
_API_KINDS = frozenset({"HIP_RUNTIME_API", "HIP_RUNTIME_API_EXT"})
_COPY_DIRECTIONS = {"HOST_TO_DEVICE": "H2D", "DEVICE_TO_HOST": "D2H", "DEVICE_TO_DEVICE": "D2D",
                    "HOST_TO_HOST": "H2H", "PEER_TO_PEER": "P2P"}
#: buffer records the loader does not read, as the report names them
_NOT_READ = {"marker_api": "roctx ranges", "memory_allocation": "memory allocations",
             "scratch_memory": "scratch memory", "rccl_api": "RCCL API calls", "hsa_api": "HSA API calls"}


def is_rocprof_json(head: bytes) -> bool:
    """``head`` (a document's first bytes, decompressed) opens a rocprofv3 JSON document."""
    return head.lstrip(b"\xef\xbb\xbf \t\r\n{").startswith(ROCPROF_KEY)


def load_rocprof_json(path: Path, *, progress: Progress | None = None, display_path: Path | None = None) -> Trace:
    """Load rocprofv3's JSON output (plain, ``.gz`` or ``.xz``)."""
    import msgspec

    from analyzer.loading.kineto.document import read_json_bytes

    shown = display_path or path
    say = progress or (lambda _msg: None)
    say(f"reading {shown.name}")
    buf = read_json_bytes(path, shown)
    try:
        doc = msgspec.json.decode(buf)
    except msgspec.DecodeError as exc:
        raise InputError(shown, f"rocprofv3 JSON that does not parse ({exc})",
                         hint="the file is cut short or damaged; write it again") from None
    del buf
    tool = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(tool, list) or not tool or not all(isinstance(p, dict) for p in tool):
        raise InputError(shown, "rocprofv3 JSON without a process record (rocprofiler-sdk-tool is empty)",
                         hint="profile the run again with rocprofv3 --kernel-trace (or --sys-trace)")
    return _Builder(shown, say).build(tool)


def _dig(rec: Any, *keys: str, default: int = -1) -> int:
    """``rec[k1][k2]...`` as an int, ``default`` where a level is missing or not a number."""
    for k in keys:
        if not isinstance(rec, dict):
            return default
        rec = rec.get(k)
    return int(rec) if isinstance(rec, (int, float)) and not isinstance(rec, bool) else default


def _handle(value: Any) -> int:
    """An agent, queue or stream id: ``{"handle": N}`` (or ``N``)."""
    return _dig(value, "handle") if isinstance(value, dict) else (int(value) if isinstance(value, int) else -1)


class _Builder:
    def __init__(self, shown: Path, say: Progress) -> None:
        self.shown = shown
        self.say = say
        self.gpu_rows: dict[int, dict[str, Any]] = {}  # device -> GPU_COLUMNS record
        self.agent_device: dict[int, int] = {}  # agent handle -> device (GPUs only)
        self.not_read: dict[str, int] = {}

    def build(self, tool: list[dict[str, Any]]) -> Trace:
        kern: dict[str, list[Any]] = {k: [] for k in ("start", "end", "device", "stream", "corr", "pid", "name",
                                                        "grid", "block", "lds")}
        copies: dict[str, list[Any]] = {k: [] for k in ("start", "end", "device", "stream", "corr", "pid",
                                                          "bytes", "direction", "src", "dst")}
        calls: dict[str, list[Any]] = {k: [] for k in ("start", "end", "name", "pid", "tid", "corr")}
        processes: dict[int, str] = {}
        hostname = None
        for proc in tool:
            meta: dict[str, Any] = proc["metadata"] if isinstance(proc.get("metadata"), dict) else {}
            pid = _dig(meta, "pid", default=0)
            command = meta.get("command")
            processes[pid] = " ".join(str(c) for c in command) if isinstance(command, list) else ""
            node = meta.get("node")
            if hostname is None and isinstance(node, dict) and isinstance(node.get("hostname"), str):
                hostname = node["hostname"]
            self._agents(proc.get("agents"))
            names = _operation_names(proc.get("strings"))
            symbols = _kernel_names(proc.get("kernel_symbols"))
            records: dict[str, Any] = proc["buffer_records"] if isinstance(proc.get("buffer_records"), dict) else {}
            self._dispatches(records.get("kernel_dispatch"), pid, symbols, kern)
            self._copies(records.get("memory_copy"), pid, names, copies)
            self._calls(records.get("hip_api"), pid, names, calls)
            for key in _NOT_READ:
                rows = records.get(key)
                if isinstance(rows, list) and rows:
                    self.not_read[key] = self.not_read.get(key, 0) + len(rows)
        if not kern["start"] and not copies["start"]:
            what = f"{len(calls['start']):,} HIP API calls but no" if calls["start"] else "no"
            raise InputError(self.shown, f"rocprofv3 JSON with {what} kernel dispatch or memory copy",
                             hint="profile the run with rocprofv3 --kernel-trace --memory-copy-trace (or --sys-trace)")
        return self._trace(kern, copies, calls, processes, hostname)

    # -- agents ------------------------------------------------------------------------------------------
    def _agents(self, agents: Any) -> None:
        if not isinstance(agents, list):
            return
        gpus = [a for a in agents if isinstance(a, dict) and a.get("type") == _GPU_AGENT]
        for order, a in enumerate(gpus):
            device = _dig(a, "gpu_index")
            if device < 0:
                device = _dig(a, "logical_node_type_id", default=order)
            self.agent_device[_handle(a.get("id"))] = device
            if device in self.gpu_rows:
                continue
            rec: dict[str, Any] = {c: 0 for c in GPU_COLUMNS}
            version = _dig(a, "gfx_target_version", default=0)  # 90402: gfx942 (major 9, minor 4, stepping 2)
            product, arch = a.get("product_name"), a.get("name")
            rec.update({
                "device": device,
                "name": product if isinstance(product, str) and product.strip() else str(arch or "AMD GPU"),
                "sm_count": max(_dig(a, "cu_count"), 0),
                "memory_bytes": sum(_dig(b, "size_in_bytes", default=0) for b in a.get("mem_banks") or []
                                    if isinstance(b, dict)),
                "clock_hz": max(_dig(a, "max_engine_clk_fcompute"), 0) * 1_000_000,
                "compute_major": version // 10000, "compute_minor": version // 100 % 100,
                "max_threads_per_block": max(_dig(a, "workgroup_max_size"), 0),
                "max_shared_per_block": max(_dig(a, "lds_size_in_kb"), 0) * 1024,
                "max_shared_per_sm": max(_dig(a, "lds_size_in_kb"), 0) * 1024,
                "max_threads_per_sm": max(_dig(a, "max_waves_per_cu"), 0) * max(_dig(a, "wave_front_size"), 0),
                "threads_per_warp": max(_dig(a, "wave_front_size"), 0),
                "l2_cache_bytes": next((_dig(c, "size", default=0) * 1024 for c in a.get("caches") or []
                                        if isinstance(c, dict) and c.get("level") == 2), 0),
            })
            self.gpu_rows[device] = rec

    def _device(self, agent: Any) -> int:
        return self.agent_device.get(_handle(agent), -1)

    # -- records -----------------------------------------------------------------------------------------
    def _dispatches(self, rows: Any, pid: int, symbols: dict[int, str], out: dict[str, list[Any]]) -> None:
        for r in rows if isinstance(rows, list) else ():
            info = r.get("dispatch_info") if isinstance(r, dict) else None
            if not isinstance(info, dict):
                continue
            out["start"].append(_dig(r, "start_timestamp"))
            out["end"].append(_dig(r, "end_timestamp"))
            out["device"].append(self._device(info.get("agent_id")))
            stream = _handle(r.get("stream_id")) if "stream_id" in r else -1
            out["stream"].append(stream if stream >= 0 else _handle(info.get("queue_id")))
            out["corr"].append(_dig(r, "correlation_id", "internal"))
            out["pid"].append(pid)
            out["name"].append(symbols.get(_dig(info, "kernel_id"), ""))
            out["grid"].append(tuple(_dig(info, "grid_size", k) for k in "xyz"))
            out["block"].append(tuple(_dig(info, "workgroup_size", k) for k in "xyz"))
            out["lds"].append(_dig(info, "group_segment_size"))

    def _copies(self, rows: Any, pid: int, names: dict[tuple[int, int], tuple[str, str]],
                out: dict[str, list[Any]]) -> None:
        for r in rows if isinstance(rows, list) else ():
            if not isinstance(r, dict):
                continue
            op = names.get((_dig(r, "kind"), _dig(r, "operation")), ("", ""))[1]
            direction = _COPY_DIRECTIONS.get(op.removeprefix("MEMORY_COPY_"), "other")
            dst, src = self._device(r.get("dst_agent_id")), self._device(r.get("src_agent_id"))
            out["start"].append(_dig(r, "start_timestamp"))
            out["end"].append(_dig(r, "end_timestamp"))
            out["device"].append(src if direction == "D2H" or dst < 0 else dst)
            out["stream"].append(_handle(r.get("stream_id")))
            out["corr"].append(_dig(r, "correlation_id", "internal"))
            out["pid"].append(pid)
            out["bytes"].append(_dig(r, "bytes"))
            out["direction"].append(direction)
            out["src"].append("device" if src >= 0 else "unknown")
            out["dst"].append("device" if dst >= 0 else "unknown")

    def _calls(self, rows: Any, pid: int, names: dict[tuple[int, int], tuple[str, str]],
               out: dict[str, list[Any]]) -> None:
        for r in rows if isinstance(rows, list) else ():
            if not isinstance(r, dict):
                continue
            kind, name = names.get((_dig(r, "kind"), _dig(r, "operation")), ("", ""))
            if kind not in _API_KINDS or not name:
                continue
            out["start"].append(_dig(r, "start_timestamp"))
            out["end"].append(_dig(r, "end_timestamp"))
            out["name"].append(strip_api_suffix(name))
            out["pid"].append(pid)
            out["tid"].append(_dig(r, "thread_id"))
            out["corr"].append(_dig(r, "correlation_id", "internal"))

    # -- the model ---------------------------------------------------------------------------------------
    def _trace(self, kern: dict[str, list[Any]], copies: dict[str, list[Any]], calls: dict[str, list[Any]],
               processes: dict[int, str], hostname: str | None) -> Trace:
        i64 = np.int64
        starts = [np.asarray(d["start"], dtype=i64) for d in (kern, copies, calls) if d["start"]]
        ends = [np.asarray(d["end"], dtype=i64) for d in (kern, copies, calls) if d["end"]]
        origin = int(min(int(s.min()) for s in starts))
        last = int(max(int(e.max()) for e in ends))
        self.say(f"rocprofv3 trace: {len(kern['start']):,} kernels, {len(copies['start']):,} copies, "
                 f"{len(calls['start']):,} HIP API calls")
        no_ranges = TextCodes(np.empty(0, dtype=np.int64), np.empty(0, dtype=object))
        api_data, launch = self._api(calls, origin, no_ranges)
        kernels = self._kernel_frame(kern, origin, launch, no_ranges)
        memcpy = self._memcpy_frame(copies, origin, launch, no_ranges)
        api = by_start(contract_frame(API_COLUMNS, api_data, compact=True)) if calls["start"] else empty_frame(API_COLUMNS)
        gpus = self._gpus()
        unavailable = missing_capabilities(kernels=kernels, memcpy=memcpy, memset=empty_frame(MEMSET_COLUMNS),
                                           api=api, gpus=gpus, memory=None)
        if api.empty:
            unavailable["api_calls"] = ("the trace records no HIP API calls (rocprofv3 ran without --hip-trace "
                                        "or --sys-trace)")
        info = TraceInfo(path=self.shown, source_format="rocprofv3-json", nsys_version=None, schema_version=None,
                         origin_ns=origin, duration_ns=max(0, last - origin), hostname=hostname,
                         export_schema="rocprofv3", unavailable=unavailable, platform="rocm")
        pids = sorted(processes)
        pname = np.empty(len(pids), dtype=object)
        pname[:] = [processes[p] for p in pids]
        proc_frame = pd.DataFrame({"pid": np.asarray(pids, dtype=i64), "name": pname})[list(PROCESS_COLUMNS)]
        extras: dict[str, Any] = {"rocprof": {"not_read": dict(self.not_read)}}
        if self.not_read:
            extras["notes"] = ["rocprofv3 records the analyzer does not read: " + ", ".join(
                f"{n:,} {_NOT_READ[k]}" for k, n in self.not_read.items())]
        return Trace(info=info, kernels=kernels, memcpy=memcpy, memset=empty_frame(MEMSET_COLUMNS), api=api,
                     sync=empty_frame(SYNC_COLUMNS), nvtx=empty_frame(NVTX_COLUMNS), gpus=gpus,
                     processes=proc_frame, threads=empty_frame(THREAD_COLUMNS), extras=extras)

    def _api(self, calls: dict[str, list[Any]], origin: int, no_ranges: TextCodes
             ) -> tuple[dict[str, Any], attr.Launches]:
        i64 = np.int64
        start = np.asarray(calls["start"], dtype=i64) - origin
        end = np.maximum(np.asarray(calls["end"], dtype=i64) - origin, start)
        pid, tid = np.asarray(calls["pid"], dtype=i64), np.asarray(calls["tid"], dtype=i64)
        corr = np.asarray(calls["corr"], dtype=i64)
        name = TextCodes.of(np.asarray(calls["name"], dtype=object))
        n = len(start)
        none = np.full(n, -1, dtype=i64)
        data: dict[str, Any] = {
            "start": start, "end": end, "duration": end - start, "name": name,
            "kind": TextCodes(np.zeros(n, dtype=i64), np.array(["runtime"], dtype=object)), "pid": pid, "tid": tid,
            "correlation_id": corr, "return_value": none,
        }
        data.update(attr.range_columns(no_ranges, no_ranges, none))
        empty = np.empty(0, dtype=i64)
        timeline = attr.NvtxTimeline(empty, empty, empty, empty, empty, empty)
        keys = {"start": start, "pid": pid, "tid": tid, "correlation_id": corr, "is_driver": np.zeros(n, dtype=i64)}
        return data, attr.Launches(keys, name, none, timeline, empty_frame(NVTX_COLUMNS))

    def _op_columns(self, d: dict[str, list[Any]], origin: int, launch: attr.Launches, no_ranges: TextCodes
                    ) -> dict[str, Any]:
        i64 = np.int64
        start = np.asarray(d["start"], dtype=i64) - origin
        end = np.maximum(np.asarray(d["end"], dtype=i64) - origin, start)
        corr = np.asarray(d["corr"], dtype=i64)
        data: dict[str, Any] = {"start": start, "end": end, "duration": end - start,
                                "device": np.asarray(d["device"], dtype=i64), "context": np.full(len(start), -1, i64),
                                "stream": np.asarray(d["stream"], dtype=i64), "correlation_id": corr}
        data.update(attr.launch_columns(launch, np.asarray(d["pid"], dtype=i64), corr, no_ranges, no_ranges))
        return data

    def _kernel_frame(self, kern: dict[str, list[Any]], origin: int, launch: attr.Launches,
                      no_ranges: TextCodes) -> pd.DataFrame:
        if not kern["start"]:
            return empty_frame(KERNEL_COLUMNS)
        data = self._op_columns(kern, origin, launch, no_ranges)
        n = len(kern["start"])
        grid = np.asarray(kern["grid"], dtype=np.int64).reshape(n, 3)
        block = np.asarray(kern["block"], dtype=np.int64).reshape(n, 3)
        known = (grid > 0).all(axis=1) & (block > 0).all(axis=1)
        grid[known] = -(-grid[known] // block[known])  # HSA grids count work-items: blocks, a partial one counted
        names = TextCodes.of(np.asarray(kern["name"], dtype=object))
        short = np.empty(len(names.labels), dtype=object)
        short[:] = [kernel_short_name(str(s)) for s in names.labels]
        none = np.full(n, -1, dtype=np.int64)
        data.update({
            "short_name": TextCodes(names.codes, short), "name": names,
            "grid_x": grid[:, 0], "grid_y": grid[:, 1], "grid_z": grid[:, 2],
            "block_x": block[:, 0], "block_y": block[:, 1], "block_z": block[:, 2],
            "registers_per_thread": none, "static_smem": np.zeros(n, dtype=np.int64),
            "dynamic_smem": np.maximum(np.asarray(kern["lds"], dtype=np.int64), 0),
            "launch_type": none, "graph_node_id": none, "graph_id": none,
        })
        data["in_graph"] = attr.graph_membership(data["api_name"], data["graph_node_id"],
                                                 correlation_id=data["correlation_id"])
        return by_start(contract_frame(KERNEL_COLUMNS, data, compact=True))

    def _memcpy_frame(self, copies: dict[str, list[Any]], origin: int, launch: attr.Launches,
                      no_ranges: TextCodes) -> pd.DataFrame:
        if not copies["start"]:
            return empty_frame(MEMCPY_COLUMNS)
        data = self._op_columns(copies, origin, launch, no_ranges)
        data.update({"bytes": np.asarray(copies["bytes"], dtype=np.int64),
                     "direction": TextCodes.of(np.asarray(copies["direction"], dtype=object)),
                     "src_kind": TextCodes.of(np.asarray(copies["src"], dtype=object)),
                     "dst_kind": TextCodes.of(np.asarray(copies["dst"], dtype=object))})
        return by_start(contract_frame(MEMCPY_COLUMNS, data, compact=True))

    def _gpus(self) -> pd.DataFrame:
        if not self.gpu_rows:
            return empty_frame(GPU_COLUMNS)
        rows = [self.gpu_rows[d] for d in sorted(self.gpu_rows)]
        name = np.empty(len(rows), dtype=object)
        name[:] = [r["name"] for r in rows]
        return pd.DataFrame({c: text_column(name) if c == "name" else np.array([r[c] for r in rows], dtype=np.int64)
                             for c in GPU_COLUMNS})


def _operation_names(strings: Any) -> dict[tuple[int, int], tuple[str, str]]:
    """(kind, operation) -> (kind name, operation name) from ``strings.buffer_records``: a list indexed by
    the records' ``kind``, each ``{"kind": "HIP_RUNTIME_API", "operations": [...]}`` indexed by
    ``operation``."""
    out: dict[tuple[int, int], tuple[str, str]] = {}
    table = strings.get("buffer_records") if isinstance(strings, dict) else None
    for k, entry in enumerate(table if isinstance(table, list) else ()):
        if not isinstance(entry, dict):
            continue
        kind, ops = str(entry.get("kind", "")), entry.get("operations")
        for o, op in enumerate(ops if isinstance(ops, list) else ()):
            out[(k, o)] = (kind, str(op))
    return out


def _kernel_names(symbols: Any) -> dict[int, str]:
    """kernel_id -> the kernel's demangled name (``formatted_kernel_name``, else the raw symbol without
    its ``.kd`` descriptor suffix)."""
    out: dict[int, str] = {}
    for s in symbols if isinstance(symbols, list) else ():
        if not isinstance(s, dict):
            continue
        name = next((v for v in (s.get("formatted_kernel_name"), s.get("demangled_kernel_name"),
                                 s.get("kernel_name")) if isinstance(v, str) and v), "")
        out[_dig(s, "kernel_id")] = name.removesuffix(".kd")
    return out
