"""Communication kernels (NCCL and friends): what they are, and how much of them compute hides.

A kernel is *communication* when the category table (``categories.yaml``) puts it in the
``communication`` category (``ncclDevKernel_*``, ``ncclKernel_*``, NVSHMEM, custom all-reduce
kernels ...). Such kernels use few blocks on purpose and spend much of their time waiting for the
other ranks, so compute facts and rules never count them (see ``occupancy``, the ``compute_*``
scalars and :func:`compute_kernel_mask`); the facts here describe them instead:

``comm_kernels``   one row per communication kernel starting in the window: collective, reduction,
                   data type, algorithm and protocol parsed from the NCCL kernel name, message bytes
                   and communicator from NCCL's NVTX payload where the trace has it, and, inside a
                   multi-GPU job, the rank's arrival, the last rank's arrival and the wait
``comm_overlap``   per device: compute, communication, overlapped and exposed communication time,
                   and the part of the exposed time spent waiting for other ranks (job only)

Within a job (``options["job_rank"]``, a :class:`JobRankContext` the job analysis fills in after
matching collectives across ranks) the wait of each of this rank's collectives is known; alone, a
trace cannot tell waiting from transferring and ``wait_ns`` is 0 (``wait_known`` False).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzer.loading.columns import empty_typed

from analyzer.facts._util import column, covered_between, new_frame, text, union_intervals
from analyzer.facts.registry import FactContext, fact

COMMUNICATION = "communication"

# -- NCCL kernel names ------------------------------------------------------------------------------
_COLLECTIVES = {
    "allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast", "reduce": "Reduce", "sendrecv": "SendRecv", "send": "Send",
    "recv": "Recv", "alltoall": "AllToAll", "alltoallv": "AllToAll", "alltoallpivot": "AllToAll",
    "generic": "Generic",
}
_OPS = {"sum": "Sum", "prod": "Prod", "min": "Min", "max": "Max", "premulsum": "PreMulSum",
        "sumpostdiv": "SumPostDiv", "avg": "Avg"}
_DTYPES = {
    "i8": "i8", "u8": "u8", "i32": "i32", "u32": "u32", "i64": "i64", "u64": "u64", "f16": "f16",
    "f32": "f32", "f64": "f64", "bf16": "bf16", "b16": "bf16", "f8e4m3": "f8e4m3", "f8e5m2": "f8e5m2",
    "int8_t": "i8", "uint8_t": "u8", "int32_t": "i32", "uint32_t": "u32", "int64_t": "i64",
    "uint64_t": "u64", "half": "f16", "float": "f32", "double": "f64", "__nv_bfloat16": "bf16",
    "bfloat16": "bf16", "int8": "i8", "uint8": "u8", "int32": "i32", "uint32": "u32", "int64": "i64",
    "uint64": "u64",
}
_ALGOS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "RING", "TREE", "COLLNET", "NVLS", "PAT")
_PROTOS = ("LL128", "LL", "SIMPLE")
_NEW = re.compile(r"nccl(?:Dev)?Kernel_(?P<rest>[A-Za-z0-9_]+)")
_OLD = re.compile(r"nccl(?P<coll>AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv)"
                  r"(?P<algo>Ring|Tree|CollNet)?(?P<proto>LL128|LL|Simple)?Kernel_?(?P<rest>[A-Za-z0-9_]*)")


@dataclass(frozen=True)
class NcclKernel:
    """What an NCCL kernel's name says ("" when it does not say)."""

    collective: str = ""
    reduce_op: str = ""
    dtype: str = ""
    algorithm: str = ""
    protocol: str = ""


def parse_nccl_kernel(name: str) -> NcclKernel:
    """``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> (AllReduce, Sum, f32, RING, LL); also the
    ``ncclKernel_AllReduce_RING_LL_Sum_float`` and ``ncclAllReduceRingLLKernel_sum_f32`` forms of
    older NCCL. Unknown names give empty fields."""
    m = _NEW.search(name)
    if m:
        tokens = m.group("rest").split("_")
        coll = _COLLECTIVES.get(tokens[0].lower(), "")
        rest = "_".join(tokens[1:]).upper()
        algo = next((a for a in _ALGOS if re.search(rf"(^|_){a}(_|$)", rest)), "")
        proto = next((p for p in _PROTOS if re.search(rf"(^|_){p}(_|$)", rest)), "")
        op = dtype = ""
        for tok in tokens[1:]:
            low = tok.lower()
            op = op or _OPS.get(low, "")
            dtype = dtype or _DTYPES.get(low, "")
        return NcclKernel(coll, op, dtype, algo, proto)
    m = _OLD.search(name)
    if m:
        op = dtype = ""
        for tok in m.group("rest").split("_"):
            low = tok.lower()
            op = op or _OPS.get(low, "")
            dtype = dtype or _DTYPES.get(low, "")
        return NcclKernel(m.group("coll"), op, dtype, (m.group("algo") or "").upper(),
                          (m.group("proto") or "").upper())
    return NcclKernel()


#: c10d's ``Collective name`` (letters only, lower case) prefix -> the collective; longer prefixes first
_C10D_PREFIXES = (("allreduce", "AllReduce"), ("allgather", "AllGather"), ("reducescatter", "ReduceScatter"),
                  ("alltoall", "AllToAll"), ("broadcast", "Broadcast"), ("reduce", "Reduce"),
                  ("sendrecv", "SendRecv"), ("send", "Send"), ("recv", "Recv"), ("gather", "Gather"),
                  ("scatter", "Scatter"), ("barrier", "Barrier"))


def c10d_collective(name: str) -> str:
    """The collective of a torch.distributed call as c10d records it on the kernel (``allreduce``,
    ``_allgather_base``, ``all_gather_into_tensor_coalesced``, ``_reduce_scatter_base``, ``send`` ...);
    ``""`` for anything else."""
    key = re.sub(r"[^a-z]", "", name.lower())
    return next((coll for prefix, coll in _C10D_PREFIXES if key.startswith(prefix)), "")


def kernel_collectives(kernels: pd.DataFrame) -> np.ndarray:
    """Per row of ``kernels`` (communication kernels): the collective its name says
    (:func:`parse_nccl_kernel`), else -- a name that says none, or NCCL/RCCL's ``ncclDevKernel_Generic``
    that runs several -- the torch.distributed call c10d recorded on the kernel (the optional
    ``comm_collective`` column: torch.profiler traces), else ``""`` (``Generic`` where only the name
    says that much)."""
    if kernels.empty:
        return np.zeros(0, dtype=object)
    names = text(kernels["short_name"]).where(text(kernels["short_name"]) != "", text(kernels["name"]))
    codes, uniq = pd.factorize(names)
    out = np.array([parse_nccl_kernel(str(u)).collective for u in uniq], dtype=object)[codes]
    if "comm_collective" in kernels.columns:
        ccodes, cuniq = pd.factorize(text(kernels["comm_collective"]))
        c10d = np.array([c10d_collective(str(u)) for u in cuniq], dtype=object)[ccodes]
        out = np.where(((out == "") | (out == "Generic")) & (c10d != ""), c10d, out)
    return out


#: nccl-tests' bus-bandwidth factors for n ranks (bus bandwidth = algorithm bandwidth x factor)
def bus_factor(collective: str, n: int) -> float:
    """``AllReduce``: 2(n-1)/n; ``AllGather``/``ReduceScatter``: (n-1)/n; ``Broadcast``/``Reduce``/
    send-receive: 1 (nccl-tests' definitions, doc/PERFORMANCE.md). Unknown collectives: 1."""
    if n <= 1:
        return 1.0
    if collective == "AllReduce":
        return 2.0 * (n - 1) / n
    if collective in ("AllGather", "ReduceScatter", "AllToAll"):
        return (n - 1) / n
    return 1.0


# -- which kernels are communication ---------------------------------------------------------------
def comm_kernel_mask(ctx: FactContext) -> np.ndarray:
    """Per row of ``trace.kernels``: is it a communication kernel (computed once per store)."""
    from analyzer.facts.categories import classify_names, load_categories

    def compute() -> np.ndarray:
        k = ctx.trace.kernels
        if k.empty:
            return np.zeros(0, dtype=bool)
        table = load_categories(ctx.options.get("categories_file") or None)
        return np.asarray(classify_names(k["name"], k["short_name"], table) == COMMUNICATION, dtype=bool)

    return ctx.store.memo("comm_kernel_mask", compute)


def compute_kernel_mask(ctx: FactContext) -> np.ndarray:
    """Per row of ``trace.kernels``: not a communication kernel (what compute facts may count)."""
    return ~comm_kernel_mask(ctx)


# -- job context -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobRankContext:
    """What the job analysis tells one rank's fact store after matching collectives across ranks.

    ``kernel_start``: the start (ns, this trace's clock) of each of this rank's matched
    communication kernels; ``arrival_last``: when the last rank arrived at that collective (ns, this
    trace's clock, after clock alignment); ``wait_ns``: how long this rank's kernel waited for it."""

    rank: int
    world_size: int
    kernel_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    arrival_last: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wait_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def job_rank(options: Mapping[str, Any]) -> JobRankContext | None:
    ctx = options.get("job_rank")
    return ctx if isinstance(ctx, JobRankContext) else None


# -- facts -----------------------------------------------------------------------------------------
_COMM_COLUMNS = {
    "start": "kernel start (ns)",
    "end": "kernel end (ns)",
    "duration": "kernel duration (ns): transfer plus any wait for the other ranks",
    "device": "GPU device id",
    "stream": "CUDA stream",
    "pid": "launching process",
    "tid": "launching thread",
    "correlation_id": "CUDA correlation id",
    "short_name": "kernel short name",
    "name": "kernel name",
    "collective": "AllReduce | AllGather | ReduceScatter | Broadcast | Reduce | SendRecv | ... ('' unknown)",
    "reduce_op": "Sum | Prod | Min | Max | ... ('' none or unknown)",
    "dtype": "element type from the kernel name (f32, bf16 ...; '' unknown)",
    "algorithm": "NCCL algorithm from the kernel name (RING, TREE, NVLS ...; '' unknown)",
    "protocol": "NCCL protocol from the kernel name (LL, LL128, SIMPLE; '' unknown)",
    "bytes": "message size from NCCL's NVTX payload (bytes; -1 unknown)",
    "comm": "NCCL communicator id from the NVTX payload ('' unknown)",
    "nvtx_path": "NVTX path open on the launching thread",
    "grid_x": "grid blocks (x): NCCL channels",
    "block_x": "threads per block (x)",
    "wait_ns": "time this kernel waited for the last rank to arrive (ns; 0 outside a job)",
    "arrival_last": "when the last rank arrived (ns, this trace's clock; -1 outside a job)",
    "last_rank": "the rank that arrived last (-1 outside a job)",
    "transfer_ns": "duration minus wait (ns): the collective itself",
    "gap_ns": "time since the previous communication kernel on this device ended (ns; -1 for the first)",
}


def _empty_comm() -> pd.DataFrame:
    text_cols = {"short_name", "name", "collective", "reduce_op", "dtype", "algorithm", "protocol",
                 "comm", "nvtx_path"}
    return empty_typed((c, object if c in text_cols else "int64") for c in _COMM_COLUMNS)


def _payloads(ctx: FactContext, k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, communicator) per communication kernel from NCCL's NVTX payloads (``-1``/``''``
    when the trace has none): see :func:`analyzer.facts.nccl_nvtx.kernel_payloads`."""
    from analyzer.facts.nccl_nvtx import kernel_payloads

    return kernel_payloads(ctx.trace.nvtx, k)


@fact("comm_kernels", columns=_COMM_COLUMNS, scope_keys=("device", "stream", "nvtx_path", "name"),
      per_kernel=True)
def comm_kernels(ctx: FactContext) -> pd.DataFrame:
    """One row per communication kernel starting in the window, with what its name and NCCL's NVTX
    payload say about it and, inside a job, how long it waited for the other ranks."""
    kernels = ctx.trace.kernels
    if kernels.empty:
        return _empty_comm()
    mask = comm_kernel_mask(ctx)
    w = ctx.window
    s = kernels["start"].to_numpy()
    sel = np.flatnonzero(mask & (s >= w.start_ns) & (s < w.end_ns))
    if not len(sel):
        return _empty_comm()
    k = kernels.iloc[sel].reset_index(drop=True)
    names = text(k["short_name"]).where(text(k["short_name"]) != "", text(k["name"]))
    codes, uniq = pd.factorize(names)
    parsed = [parse_nccl_kernel(str(u)) for u in uniq]
    take = lambda attr: np.array([getattr(p, attr) for p in parsed], dtype=object)[codes]  # noqa: E731
    nbytes, comm = _payloads(ctx, k)
    start = k["start"].to_numpy(dtype=np.int64)
    end = k["end"].to_numpy(dtype=np.int64)
    wait = np.zeros(len(k), dtype=np.int64)
    last_arrival = np.full(len(k), -1, dtype=np.int64)
    last_rank = np.full(len(k), -1, dtype=np.int64)
    job = job_rank(ctx.options)
    if job is not None and len(job.kernel_start):
        pos = np.searchsorted(job.kernel_start, start)
        pos_ok = pos < len(job.kernel_start)
        hit = np.zeros(len(k), dtype=bool)
        hit[pos_ok] = job.kernel_start[pos[pos_ok]] == start[pos_ok]
        wait[hit] = job.wait_ns[pos[hit]]
        last_arrival[hit] = job.arrival_last[pos[hit]]
        last_rank[hit] = job.last_rank[pos[hit]]
    duration = end - start
    # gap to the previous communication kernel of the same device (over the whole trace, so the
    # first one in the window has its real predecessor)
    dev = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    all_dev = column(kernels, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    gap = np.full(len(k), -1, dtype=np.int64)
    for d in np.unique(dev):
        idx = np.flatnonzero(mask & (all_dev == d))
        ends = kernels["end"].to_numpy(dtype=np.int64)[idx]
        starts_all = s[idx]
        order = np.argsort(starts_all, kind="stable")
        prev_end = np.maximum.accumulate(ends[order])
        mine = np.flatnonzero(dev == d)
        pos = np.searchsorted(starts_all[order], start[mine], side="left")  # kernels starting before
        has = pos > 0
        gap[mine[has]] = np.maximum(start[mine[has]] - prev_end[pos[has] - 1], 0)
    return new_frame({
        "start": start, "end": end, "duration": duration,
        "device": column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64),
        "stream": column(k, "stream", -1).fillna(-1).to_numpy(dtype=np.int64),
        "pid": column(k, "pid", -1).fillna(-1).to_numpy(dtype=np.int64),
        "tid": column(k, "tid", -1).fillna(-1).to_numpy(dtype=np.int64),
        "correlation_id": column(k, "correlation_id", -1).fillna(-1).to_numpy(dtype=np.int64),
        "short_name": text(k["short_name"]).to_numpy(dtype=object),
        "name": text(k["name"]).to_numpy(dtype=object),
        "collective": kernel_collectives(k), "reduce_op": take("reduce_op"), "dtype": take("dtype"),
        "algorithm": take("algorithm"), "protocol": take("protocol"),
        "bytes": nbytes, "comm": comm,
        "nvtx_path": text(column(k, "nvtx_path", "")).to_numpy(dtype=object),
        "grid_x": column(k, "grid_x", 0).fillna(0).to_numpy(dtype=np.int64),
        "block_x": column(k, "block_x", 0).fillna(0).to_numpy(dtype=np.int64),
        "wait_ns": wait, "arrival_last": last_arrival, "last_rank": last_rank,
        "transfer_ns": np.maximum(duration - wait, 0), "gap_ns": gap,
    })


_OVERLAP_COLUMNS = {
    "device": "GPU device id",
    "window_ns": "analysis window (ns)",
    "compute_ns": "time any non-communication kernel ran (union, ns)",
    "comm_ns": "time any communication kernel ran (union, ns)",
    "overlap_ns": "communication time with a compute kernel running beside it (ns)",
    "exposed_ns": "communication time with no compute kernel beside it (ns)",
    "exposed_wait_ns": "part of exposed_ns spent waiting for other ranks (ns; 0 outside a job)",
    "exposed_transfer_ns": "exposed_ns - exposed_wait_ns: exposed time of the collectives themselves (ns)",
    "comm_kernels": "communication kernels starting in the window",
    "comm_kernel_ns": "their summed duration (ns)",
    "overlap_share": "overlap_ns / comm_ns (0..1)",
    "exposed_share": "exposed_ns / window_ns (0..1)",
    "wait_known": "1 when waits come from a job analysis (all ranks), else 0",
}


def _intersect_len(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> np.ndarray:
    """Per interval of ``a``: its overlap with the sorted disjoint set ``b`` (ns)."""
    return covered_between(b_s, b_e, a_s, a_e)


@fact("comm_overlap", columns=_OVERLAP_COLUMNS, requires=("comm_kernels",), scope_keys=("device",))
def comm_overlap(ctx: FactContext) -> pd.DataFrame:
    """Per device with communication in the window: how much communication kernel time had a compute
    kernel running beside it (overlapped) and how much did not (exposed), and, inside a job, how much
    of the exposed time was waiting for other ranks rather than moving data."""
    comm = ctx.get("comm_kernels")
    w = ctx.window
    kernels = ctx.trace.kernels
    rows = []
    if comm.empty:
        return empty_typed((c, "float64" if "share" in c else "int64") for c in _OVERLAP_COLUMNS)
    compute = compute_kernel_mask(ctx)
    ks, ke = kernels["start"].to_numpy(dtype=np.int64), kernels["end"].to_numpy(dtype=np.int64)
    kdev = column(kernels, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    in_w = (ke > w.start_ns) & (ks < w.end_ns)
    job = job_rank(ctx.options)
    for dev in sorted(set(comm["device"].tolist())):
        c = comm.loc[comm["device"].to_numpy() == dev]
        cs = np.clip(c["start"].to_numpy(dtype=np.int64), w.start_ns, w.end_ns)
        ce = np.clip(c["end"].to_numpy(dtype=np.int64), w.start_ns, w.end_ns)
        cu = union_intervals(cs, ce)
        sel = compute & in_w & (kdev == dev)
        pu = union_intervals(np.clip(ks[sel], w.start_ns, w.end_ns), np.clip(ke[sel], w.start_ns, w.end_ns))
        comm_ns = int((cu.end - cu.start).sum())
        compute_ns = int((pu.end - pu.start).sum())
        overlap_ns = int(_intersect_len(cu.start, cu.end, pu.start, pu.end).sum()) if len(cu.start) else 0
        exposed_ns = comm_ns - overlap_ns
        # waiting: the first wait_ns of each kernel; the exposed part of those wait intervals
        wait_exposed = 0
        if job is not None:
            wt = c["wait_ns"].to_numpy(dtype=np.int64)
            has = wt > 0
            if has.any():
                wu = union_intervals(cs[has], np.minimum(cs[has] + wt[has], ce[has]))
                wait_total = int((wu.end - wu.start).sum())
                wait_hidden = int(_intersect_len(wu.start, wu.end, pu.start, pu.end).sum())
                wait_exposed = max(0, min(exposed_ns, wait_total - wait_hidden))
        rows.append({
            "device": int(dev), "window_ns": int(w.duration_ns), "compute_ns": compute_ns,
            "comm_ns": comm_ns, "overlap_ns": overlap_ns, "exposed_ns": exposed_ns,
            "exposed_wait_ns": wait_exposed, "exposed_transfer_ns": exposed_ns - wait_exposed,
            "comm_kernels": len(c), "comm_kernel_ns": int(c["duration"].sum()),
            "overlap_share": overlap_ns / comm_ns if comm_ns else 0.0,
            "exposed_share": exposed_ns / w.duration_ns if w.duration_ns else 0.0,
            "wait_known": int(job is not None),
        })
    return pd.DataFrame(rows, columns=list(_OVERLAP_COLUMNS))


__all__ = ["COMMUNICATION", "JobRankContext", "NcclKernel", "bus_factor", "comm_kernel_mask",
           "compute_kernel_mask", "parse_nccl_kernel", "c10d_collective", "kernel_collectives"]
