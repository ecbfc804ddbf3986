"""Signals an nsys export holds only when the profile asked for them: call stacks, CPU samples,
OS-runtime calls and GPU metrics -> the ``stacks``, ``api_stacks``, ``cpu_samples``, ``osrt`` and
``gpu_metrics`` frames of :class:`~analyzer.loading.model.Trace`.

What records what (Nsight Systems 2025.3, seen on the traces under ``tests/data/callstacks`` and
``tests/data/gpu_metrics``):

* ``--cudabacktrace=all`` (with ``--python-backtrace=cuda``): ``CUPTI_ACTIVITY_KIND_RUNTIME.callchainId``
  -> ``CUDA_CALLCHAINS(id, stackDepth, symbol, module, unresolved)``, depth 0 the innermost frame.
  nsys 2025.3.1 exports *native* frames only (CPython, libtorch, libcudart ...): the Python frames it
  shows in its GUI are absent from every export format (the file and function names sit in
  ``StringIds``, referenced by nothing), so Python file:line comes from torch.profiler traces instead.
* ``-s process-tree`` (+ ``--python-sampling=true``): ``COMPOSITE_EVENTS(id, start, globalTid,
  threadState)`` -> ``SAMPLING_CALLCHAINS``.
* OS runtime tracing (``-t osrt``): ``OSRT_API(start, end, globalTid, nameId, callchainId)`` ->
  ``OSRT_CALLCHAINS`` (stacks for calls longer than ``BACKTRACES_THRESHOLD_NS``, 80 us by default).
* ``--gpu-metrics-devices``: ``GPU_METRICS(timestamp, typeId, metricId, value)`` with names in
  ``TARGET_INFO_GPU_METRICS(typeId, metricId, metricName)``. Names differ across GPUs and nsys releases
  ("SMs Active [Throughput %]", "SM Active", "Tensor Active / FP16 Active" ...): they are mapped by
  meaning through :data:`METRIC_PATTERNS`; names no pattern knows are kept out and listed in
  ``trace.extras['gpu_metrics_unmapped']``.

Every table is optional; a missing or empty one yields an empty frame. Times are trace-relative like
every other frame (``origin`` subtracted).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from analyzer.loading.columns import categorical
from analyzer.loading.common import text_as_object
from analyzer.loading.model import (
    API_STACK_COLUMNS,
    CPU_SAMPLE_COLUMNS,
    GPU_METRIC_COLUMNS,
    OSRT_COLUMNS,
    STACK_COLUMNS,
    empty_frame,
)

#: canonical metric -> pattern over the exported metric name (case-insensitive, searched).
METRIC_PATTERNS: dict[str, str] = {
    "sm_active": r"^sms? active\b",
    "sm_issue": r"^sm issue\b",
    "tensor_active": r"^tensor (active|pipe)",
    "gr_active": r"^gr active\b",
    "warps_in_flight": r"^compute warps in flight \[throughput",
    "unallocated_warps": r"^unallocated warps in active sms \[throughput",
    "dram_read": r"^dram read (bandwidth|throughput)",
    "dram_write": r"^dram write (bandwidth|throughput)",
    "pcie_rx": r"^pcie (rx|read)",
    "pcie_tx": r"^pcie (tx|write)",
    "nvlink_rx": r"^nvlink (rx|read)",
    "nvlink_tx": r"^nvlink (tx|write)",
    "gpc_clock_mhz": r"^gpc clock",
}
#: metrics whose raw value is a frequency in Hz (shown in MHz)
_HZ_METRICS = frozenset({"gpc_clock_mhz"})

_RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


def canonical_metric(name: str) -> str | None:
    """The canonical key of an exported GPU metric name, or None."""
    text = name.strip().lower()
    for key, pattern in METRIC_PATTERNS.items():
        if re.search(pattern, text):
            return key
    return None


def read_signals(reader: Any, strings: Any, origin: int, *, api_name: Callable[[str], str],
                 devices: list[int]) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """The optional frames of one export (only those it has) and extras to record."""
    frames: dict[str, pd.DataFrame] = {}
    extras: dict[str, Any] = {}
    stacks: list[pd.DataFrame] = []

    if _rows(reader, "CUDA_CALLCHAINS") and reader.has_column(_RUNTIME, "callchainId"):
        # the stacks sit on the "CUDA backtrace" rows nsys adds next to each call (same correlation id)
        calls = reader.fetch_ints(_RUNTIME, {"start": "start", "global_tid": "globalTid",
                                             "correlation_id": "correlationId", "name_id": "nameId",
                                             "chain_id": "callchainId"}, where='"callchainId" IS NOT NULL')
        if len(calls["start"]):
            frames["api_stacks"] = pd.DataFrame({
                "start": calls["start"] - origin,
                "pid": _pid(calls["global_tid"]), "tid": _tid(calls["global_tid"]),
                "correlation_id": calls["correlation_id"],
                "name": strings.mapped(calls["name_id"], api_name),
                "chain_id": calls["chain_id"], "source": "cuda",
            })[list(API_STACK_COLUMNS)].sort_values("start", kind="stable", ignore_index=True)
            stacks.append(_chains(reader, strings, "CUDA_CALLCHAINS", "cuda"))

    if _rows(reader, "COMPOSITE_EVENTS"):
        cols = {"id": "id", "start": "start", "global_tid": "globalTid", "state": "threadState"}
        s = reader.fetch_ints("COMPOSITE_EVENTS", cols)
        states = _enum(reader, "ENUM_SAMPLING_THREAD_STATE")
        frames["cpu_samples"] = pd.DataFrame({
            "start": s["start"] - origin, "pid": _pid(s["global_tid"]), "tid": _tid(s["global_tid"]),
            "chain_id": s["id"], "source": "sampling",
            "state": [states.get(int(v), "") for v in s["state"]] if len(states) else "",
        })[list(CPU_SAMPLE_COLUMNS)].sort_values("start", kind="stable", ignore_index=True)
        if _rows(reader, "SAMPLING_CALLCHAINS"):
            stacks.append(_chains(reader, strings, "SAMPLING_CALLCHAINS", "sampling"))

    if _rows(reader, "OSRT_API"):
        cols = {"start": "start", "end": "end", "global_tid": "globalTid", "name_id": "nameId",
                "chain_id": "callchainId"}
        o = reader.fetch_ints("OSRT_API", cols, default=-1)
        start = o["start"] - origin
        end = np.maximum(o["end"], o["start"]) - origin
        frames["osrt"] = pd.DataFrame({
            "start": start, "end": end, "duration": end - start,
            "pid": _pid(o["global_tid"]), "tid": _tid(o["global_tid"]),
            "name": strings.lookup(o["name_id"]), "chain_id": o["chain_id"],
        })[list(OSRT_COLUMNS)].sort_values("start", kind="stable", ignore_index=True)
        if _rows(reader, "OSRT_CALLCHAINS"):
            stacks.append(_chains(reader, strings, "OSRT_CALLCHAINS", "osrt"))

    if stacks:
        frames["stacks"] = pd.concat(stacks, ignore_index=True)[list(STACK_COLUMNS)]

    if _rows(reader, "GPU_METRICS"):
        metrics, unmapped = _gpu_metrics(reader, origin, devices)
        frames["gpu_metrics"] = metrics
        if unmapped:
            extras["gpu_metrics_unmapped"] = unmapped
    return {name: text_as_object(frame) for name, frame in frames.items()}, extras


def _rows(reader: Any, table: str) -> bool:
    return bool(reader.has(table) and not reader.is_empty(table))


def _pid(global_id: np.ndarray) -> np.ndarray:
    return ((global_id >> 24) & 0xFFFFFF).astype(np.int64)


def _tid(global_tid: np.ndarray) -> np.ndarray:
    return (global_tid & 0xFFFFFF).astype(np.int64)


def _enum(reader: Any, table: str) -> dict[int, str]:
    if not reader.has(table) or not {"id", "name"} <= set(reader.columns(table)):
        return {}
    return {int(i): str(n) for i, n in reader.query(f'SELECT id, name FROM "{table}"') if i is not None}


def _chains(reader: Any, strings: Any, table: str, source: str) -> pd.DataFrame:
    cols = {"chain_id": "id", "depth": "stackDepth", "symbol_id": "symbol", "module_id": "module",
            "unresolved": "unresolved"}
    c = reader.fetch_ints(table, cols, default=0)
    return pd.DataFrame({
        "source": source, "chain_id": c["chain_id"], "depth": c["depth"],
        "symbol": categorical(*_codes(strings, c["symbol_id"])),
        "module": categorical(*_codes(strings, c["module_id"])),
        "line": np.full(len(c["chain_id"]), -1, dtype=np.int64),
        "unresolved": (c["unresolved"] != 0).astype(np.int64),
    })


def _codes(strings: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    codes = strings.codes(ids)
    return codes.codes, codes.labels


def _gpu_metrics(reader: Any, origin: int, devices: list[int]) -> tuple[pd.DataFrame, list[str]]:
    names = reader.query('SELECT typeId, metricId, metricName FROM "TARGET_INFO_GPU_METRICS"') \
        if reader.has("TARGET_INFO_GPU_METRICS") else []
    key: dict[tuple[int, int], str] = {}
    unmapped: set[str] = set()
    for type_id, metric_id, name in names:
        canon = canonical_metric(str(name or ""))
        if canon is None:
            unmapped.add(str(name))
        else:
            key[(int(type_id), int(metric_id))] = canon
    if not key:
        return empty_frame(GPU_METRIC_COLUMNS), sorted(unmapped)
    wanted = sorted({m for (_t, m) in key})
    g = reader.fetch_ints("GPU_METRICS", {"start": "timestamp", "type_id": "typeId", "metric_id": "metricId",
                                          "value": "value"},
                          where=f'"metricId" IN ({", ".join(str(m) for m in wanted)})')
    # one metrics source per GPU; sources are matched to the trace's GPUs in order (nsys numbers both
    # in the same order; a one-GPU trace has one of each)
    type_ids = sorted({int(t) for t, _m in key})
    dev_of = {t: (devices[i] if i < len(devices) else i) for i, t in enumerate(type_ids)}
    metric = _map_pairs(g["type_id"], g["metric_id"], key)
    keep = metric != ""
    metric = metric[keep]
    value = g["value"][keep].astype(np.float64)
    hz = np.isin(metric, list(_HZ_METRICS))
    value[hz] = value[hz] / 1e6
    frame = pd.DataFrame({
        "start": g["start"][keep] - origin,
        "device": pd.Series(g["type_id"][keep]).map(dev_of).fillna(-1).astype(np.int64).to_numpy(),
        "metric": pd.Categorical(metric),
        "value": value,
    })[list(GPU_METRIC_COLUMNS)]
    return frame.sort_values(["device", "metric", "start"], kind="stable", ignore_index=True), sorted(unmapped)


def _map_pairs(type_ids: np.ndarray, metric_ids: np.ndarray, key: dict[tuple[int, int], str]) -> np.ndarray:
    """Canonical names of (typeId, metricId) pairs, one dictionary lookup per distinct pair."""
    pairs = np.stack([type_ids, metric_ids], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    labels = np.array([key.get((int(t), int(m)), "") for t, m in uniq], dtype=object)
    return labels[inverse.reshape(-1)]
