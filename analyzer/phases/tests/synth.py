"""Small hand-built trace models for logic tests (never evidence that a real trace works).

``make_trace(ranges, ops)``: ranges are ``(range_id, text, start, end, parent_id, tid)``; ops are
``(kind, name, start, end, nvtx_id, tid[, launch])`` with kind ``kernel|memcpy|memset`` (launch: the
API call's start, default ``start - 1``). Paths, depths and
the attribution columns are filled in from the parent links, as the loader would.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from analyzer.loading.model import (
    API_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)

PID = 100


def _nvtx(ranges: list[tuple]) -> pd.DataFrame:
    rows = []
    by_id = {r[0]: r for r in ranges}

    def path(rid: int) -> str:
        r = by_id[rid]
        return r[1] if r[4] < 0 else f"{path(r[4])}/{r[1]}"

    def depth(rid: int) -> int:
        r = by_id[rid]
        return 0 if r[4] < 0 else depth(r[4]) + 1

    for rid, text, start, end, parent, tid, *kind in ranges:
        rows.append({"range_id": rid, "start": start, "end": end, "duration": end - start, "text": text,
                     "domain": "", "kind": kind[0] if kind else "pushpop", "pid": PID, "tid": tid,
                     "depth": depth(rid), "parent_id": parent, "path": path(rid)})
    frame = pd.DataFrame(rows, columns=list(NVTX_COLUMNS)) if rows else empty_frame(NVTX_COLUMNS)
    return frame.set_index(frame["range_id"].rename(None)) if rows else frame


def make_trace(ranges: list[tuple], ops: list[tuple], name: str = "synthetic.sqlite",
               api: Sequence[tuple] = ()) -> Trace:
    """``api``: extra CUDA API calls ``(name, start, end, nvtx_id, tid)`` (e.g. synchronizations)."""
    nvtx = _nvtx(ranges)
    paths = dict(zip(nvtx["range_id"], nvtx["path"])) if len(nvtx) else {}
    texts = dict(zip(nvtx["range_id"], nvtx["text"])) if len(nvtx) else {}
    frames: dict[str, list[dict]] = {"kernel": [], "memcpy": [], "memset": []}
    for i, (kind, kname, start, end, nvtx_id, tid, *launch) in enumerate(ops):
        row = {"start": start, "end": end, "duration": end - start, "device": 0, "context": 1,
               "stream": 7, "correlation_id": i + 1, "api_name": "cudaLaunchKernel",
               "api_start": launch[0] if launch else start - 1, "pid": PID, "tid": tid, "nvtx_id": nvtx_id,
               "nvtx_range": texts.get(nvtx_id, ""), "nvtx_path": paths.get(nvtx_id, ""),
               "attribution": "none" if nvtx_id < 0 else "thread" if tid == 1 else "process"}
        if kind == "kernel":
            row.update({"short_name": kname, "name": kname, "grid_x": 1, "grid_y": 1, "grid_z": 1,
                        "block_x": 128, "block_y": 1, "block_z": 1, "registers_per_thread": 32,
                        "static_smem": 0, "dynamic_smem": 0, "launch_type": 0, "graph_node_id": -1,
                        "in_graph": 0, "graph_id": -1})
        elif kind == "memcpy":
            row.update({"bytes": 1024, "direction": "H2D", "src_kind": "pinned", "dst_kind": "device"})
        else:
            row.update({"bytes": 1024, "mem_kind": "device"})
        frames[kind].append(row)

    def frame(kind: str, cols: tuple[str, ...]) -> pd.DataFrame:
        return pd.DataFrame(frames[kind], columns=list(cols)) if frames[kind] else empty_frame(cols)

    end = max([r[3] for r in ranges] + [o[3] for o in ops] + [1])
    info = TraceInfo(path=Path(name), source_format="nsys-sqlite", nsys_version=None,
                     schema_version=None, origin_ns=0, duration_ns=end)
    calls = [{"start": s, "end": e, "duration": e - s, "name": n, "kind": "runtime", "pid": PID, "tid": tid,
              "correlation_id": 10_000 + i, "return_value": 0, "nvtx_id": rid,
              "nvtx_range": texts.get(rid, ""), "nvtx_path": paths.get(rid, "")}
             for i, (n, s, e, rid, tid) in enumerate(api)]
    api_frame = pd.DataFrame(calls, columns=list(API_COLUMNS)) if calls else empty_frame(API_COLUMNS)
    return Trace.from_frames(info, kernels=frame("kernel", KERNEL_COLUMNS), memcpy=frame("memcpy", MEMCPY_COLUMNS),
                             memset=frame("memset", MEMSET_COLUMNS), nvtx=nvtx, api=api_frame)


def training_trace(name: str = "small_training_ctx128.sqlite", steps: int = 2) -> Trace:
    """warmup (with a nested forward) then ``steps`` steps of forward/backward/optimizer_step.

    Each step s starts at 1000*(s+1): forward [+10,+110) with computing_softmax [+20,+40) and
    final_matmul [+50,+70); backward [+120,+320) whose kernels come from the autograd thread (tid 2);
    optimizer_step [+330,+380). Kernels: gemm 30 ns (forward), softmax 10 ns (in computing_softmax),
    gemm 15 ns (in final_matmul), bwd gemm 100 ns (tid 2), adam 20 ns x2 (optimizer), memset 5 ns in
    the step outside the phases."""
    ranges: list[tuple] = [(0, "warmup", 0, 500, -1, 1), (1, "forward", 10, 100, 0, 1)]
    ops: list[tuple] = [("kernel", "ampere_sgemm_128x64", 20, 50, 1, 1)]
    rid = 2
    for s in range(steps):
        b = 1000 * (s + 1)
        step, fwd, soft, fin, bwd, opt = range(rid, rid + 6)
        rid += 6
        ranges += [
            (step, f"step_{s}", b, b + 400, -1, 1),
            (fwd, "forward", b + 10, b + 110, step, 1),
            (soft, "computing_softmax", b + 20, b + 40, fwd, 1),
            (fin, "final_matmul", b + 50, b + 70, fwd, 1),
            (bwd, "backward", b + 120, b + 320, step, 1),
            (opt, "optimizer_step", b + 330, b + 380, step, 1),
        ]
        ops += [
            ("kernel", "ampere_sgemm_128x64", b + 15, b + 45, fwd, 1),
            ("kernel", "cunn_SoftMaxForward", b + 45, b + 55, soft, 1),
            ("kernel", "ampere_sgemm_64x64", b + 60, b + 75, fin, 1),
            ("kernel", "ampere_sgemm_bwd", b + 150, b + 250, bwd, 2),
            ("kernel", "multi_tensor_apply_kernel", b + 335, b + 355, opt, 1),
            ("kernel", "multi_tensor_apply_kernel", b + 350, b + 370, opt, 1),
            ("memset", "", b + 390, b + 395, step, 1),
        ]
    ops.append(("kernel", "ampere_sgemm_128x64", 9000, 9010, -1, 1))  # outside any range
    return make_trace(ranges, ops, name=name)


def step_trace(
    name: str,
    *,
    steps: int = 3,
    phases: tuple[str, ...] = ("forward",),
    step_len: int = 400,
    fwd_len: int = 100,
    backward_kernels: bool = True,
    top_kernel: str = "ampere_sgemm_128x64",
    marks: tuple[str, ...] = (),
) -> Trace:
    """A warmup range then ``steps`` ``step_N`` ranges of ``step_len`` ns, each holding the ``phases``
    one after the other (forward ``fwd_len`` ns, the others 100 ns), one 10 ns kernel per phase
    (``top_kernel`` 20 ns in forward; backward's from the autograd thread unless
    ``backward_kernels=False``), and the given NVTX marks."""
    ranges: list[tuple] = [(0, "warmup", 0, 500, -1, 1)]
    ops: list[tuple] = [("kernel", "warmup_kernel", 10, 20, 0, 1)]
    rid = 1
    for s in range(steps):
        b = 1000 * (s + 1)
        step = rid
        ranges.append((step, f"step_{s}", b, b + step_len, -1, 1))
        rid += 1
        t = b + 5
        for p in phases:
            length = fwd_len if p == "forward" else 100
            ranges.append((rid, p, t, t + length, step, 1))
            if p == "forward":
                ops.append(("kernel", top_kernel, t + 1, t + 21, rid, 1))
            elif p != "backward" or backward_kernels:
                ops.append(("kernel", f"{p}_kernel", t + 1, t + 11, rid, 2 if p == "backward" else 1))
            rid += 1
            t += length + 1
    for i, text in enumerate(marks):
        ranges.append((rid + i, text, 50 + i, 50 + i, -1, 1, "mark"))
    return make_trace(ranges, ops, name=name)
