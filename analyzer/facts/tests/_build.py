"""Builders for small model-contract frames (synthetic, for unit tests of the arithmetic only; the
behaviour on real data is tested on the public exports in ``test_public.py``)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyzer.analysis import Window
from analyzer.facts import FactStore
from analyzer.loading.model import (
    API_COLUMNS,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)
from analyzer.testing import PUBLIC_DIR

PUBLIC = PUBLIC_DIR
CUDF_2020 = PUBLIC / "quasiben__nvtx-examples__cudf.sqlite"
MEMFUSION_2023 = PUBLIC / "LeiWang1999__memfusion_artifact__report1.sqlite"

_DEFAULTS: dict[str, object] = {
    "device": 0, "context": 1, "stream": 7, "correlation_id": -1, "short_name": "k", "name": "",
    "grid_x": 1, "grid_y": 1, "grid_z": 1, "block_x": 128, "block_y": 1, "block_z": 1,
    "registers_per_thread": 32, "static_smem": 0, "dynamic_smem": 0, "launch_type": 0,
    "graph_node_id": -1, "in_graph": 0, "graph_id": -1, "api_name": "cudaLaunchKernel", "api_start": -1, "pid": 1, "tid": 1,
    "nvtx_id": -1, "nvtx_range": "", "nvtx_path": "", "attribution": "none", "bytes": 0,
    "direction": "H2D", "src_kind": "pinned", "dst_kind": "device", "mem_kind": "device",
    "kind": "runtime", "return_value": 0, "domain": "", "depth": 0, "parent_id": -1, "path": "",
    "text": "", "sync_type": "stream_synchronize",
}


def frame(columns: tuple[str, ...], rows: list[dict] | None = None) -> pd.DataFrame:
    """A contract frame from dicts; ``duration`` is derived, missing columns get defaults."""
    if not rows:
        return empty_frame(columns)
    df = pd.DataFrame(rows)
    if "end" in columns and "duration" not in df:
        df["duration"] = df["end"] - df["start"]
    for c in columns:
        if c not in df:
            df[c] = _DEFAULTS.get(c, 0)
        elif c in _DEFAULTS and df[c].isna().any():  # a key some rows leave out: its default, as above
            df[c] = df[c].fillna(_DEFAULTS[c]).infer_objects()
    if "name" in columns and "short_name" in columns:
        df["name"] = np.where(df["name"] == "", df["short_name"], df["name"])
    if "range_id" in columns:
        df["range_id"] = np.arange(len(df))
        df.index = df["range_id"].to_numpy()
    return df[list(columns)]


def trace(kernels=None, memcpy=None, memset=None, api=None, nvtx=None, gpus=None) -> Trace:
    gpu_rows = gpus if gpus is not None else [{
        "device": 0, "name": "H100", "sm_count": 132, "compute_major": 9, "compute_minor": 0,
        "max_threads_per_block": 1024, "max_registers_per_block": 65536, "max_registers_per_sm": 65536,
        "max_shared_per_sm": 233472, "max_threads_per_sm": 2048, "max_blocks_per_sm": 32,
        "threads_per_warp": 32,
    }]
    return Trace.from_frames(
        TraceInfo(path=Path("synthetic.sqlite"), source_format="nsys-sqlite", nsys_version=None,
                  schema_version=None, origin_ns=0, duration_ns=10**10),
        kernels=frame(KERNEL_COLUMNS, kernels), memcpy=frame(MEMCPY_COLUMNS, memcpy),
        memset=frame(MEMSET_COLUMNS, memset), api=frame(API_COLUMNS, api),
        nvtx=frame(NVTX_COLUMNS, nvtx), gpus=frame(GPU_COLUMNS, gpu_rows),
    )


def store(t: Trace, start: int = 0, end: int = 10**10, source: str = "full", **options) -> FactStore:
    return FactStore(t, Window(start, end, source, "test"), options)
