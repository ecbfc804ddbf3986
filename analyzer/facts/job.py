"""Job facts: the cross-rank tables the job rules read (``straggler``, ``rank-imbalance``,
``collective-bandwidth-low``).

They are computed by :mod:`analyzer.job.run` from the ranks' summaries and results (never from a
trace) and handed to a job-level fact store as ``options["job"]`` (a :class:`JobTables`); these
registrations declare their columns, so rules are validated before any trace is read, and give
empty tables on a single trace (the job rules then stay silent). Times are ns on the reference
rank's clock (the lowest rank), the job window is the span common to all ranks' windows.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from analyzer.facts.registry import FactContext, fact
from analyzer.loading.columns import empty_typed

JOB_RANKS_COLUMNS: dict[str, str] = {
    "rank": "rank in the job",
    "label": "input it came from (file, or file and process)",
    "device": "CUDA device of the rank",
    "hostname": "host",
    "steps": "NVTX steps in the rank's window",
    "step_ns": "mean step time (ns)",
    "step_max_ns": "longest step (ns)",
    "window_ns": "the rank's analysis window (ns)",
    "compute_ns": "time any compute (non-communication) kernel ran in the window (union, ns)",
    "compute_per_step_ns": "compute_ns / steps (ns)",
    "comm_ns": "time any communication kernel ran (union, ns)",
    "overlap_ns": "communication time with compute beside it (ns)",
    "exposed_ns": "communication time with no compute beside it (ns)",
    "exposed_wait_ns": "part of exposed_ns spent waiting for other ranks (ns)",
    "exposed_transfer_ns": "exposed_ns - exposed_wait_ns (ns)",
    "wait_ns": "time this rank's collectives waited for the last rank, summed over matched collectives (ns)",
    "late_ns": "sum over collectives of (own arrival - first arrival) (ns)",
    "lead_ns": "sum over collectives it reached last of (own arrival - second latest arrival) (ns)",
    "last_count": "collectives it reached last",
    "instances": "collectives matched on every rank inside the job window",
    "skew_ns": "estimated clock skew of this rank's trace against the reference rank's (ns)",
    "how": "where the rank number came from: nccl | torch.distributed | file name | device | process order",
    "world_size": "ranks in the job",
}
JOB_COLLECTIVES_COLUMNS: dict[str, str] = {
    "inst": "collective instance (matched on every rank)",
    "collective": "AllReduce | AllGather | ReduceScatter | ...",
    "algorithm": "NCCL algorithm (kernel name)",
    "protocol": "NCCL protocol (kernel name)",
    "dtype": "element type (kernel name)",
    "bytes": "message size (NVTX payload; NaN unknown)",
    "start": "first arrival (ns)",
    "end": "median kernel end (ns)",
    "first_arrival": "first rank's kernel start (ns)",
    "last_arrival": "last rank's kernel start (ns)",
    "last_rank": "rank that arrived last",
    "spread_ns": "last - first arrival (ns)",
    "lead_ns": "last - second latest arrival (ns)",
    "transfer_ns": "median over ranks of (kernel end - last arrival): the collective itself (ns)",
    "duration": "transfer_ns (ns)",
    "algbw": "algorithm bandwidth = bytes / transfer time (bytes/s; NaN unknown)",
    "busbw": "bus bandwidth = algbw x nccl-tests factor (bytes/s; NaN unknown)",
    "link_bw": "peak of the link between the ranks per direction (bytes/s; NaN unknown)",
    "link": "which link and where its peak comes from",
    "bus_share": "busbw / link_bw (0..1; NaN unknown)",
    "world_size": "ranks in the job",
}
JOB_LATENESS_COLUMNS: dict[str, str] = {
    "inst": "collective instance the rank reached last",
    "rank": "the late rank",
    "collective": "its collective",
    "bytes": "message size (NaN unknown)",
    "start": "second latest arrival (ns): from here the others waited for this rank alone",
    "end": "this rank's arrival (ns)",
    "duration": "lag_ns",
    "lag_ns": "end - start (ns): time the job lost to this rank at this collective",
    "others_wait_ns": "summed wait of the other ranks at this collective (ns)",
    "host_nvtx_path": "NVTX range the late rank's main thread was in during the lag",
    "host_api": "CUDA call it was in ('' = its own code)",
    "gpu_busy_share": "share of the lag its GPU ran compute kernels (0..1)",
    "gpu_kernel": "the kernel that ran longest on its GPU during the lag",
    "main_host_path": "the late rank's NVTX range over most of its lag time (all collectives)",
    "main_host_share": "share of the lag time spent in main_host_path (0..1)",
    "main_api": "CUDA call over most of the lag time ('' = its own code)",
    "main_gpu_busy": "share of all lag time its GPU ran compute (0..1)",
    "steps": "steps in the job window",
}

_TEXT = {"label", "hostname", "how", "collective", "algorithm", "protocol", "dtype", "link",
         "host_nvtx_path", "host_api", "gpu_kernel", "main_host_path", "main_api"}
_FLOAT = {"algbw", "busbw", "link_bw", "bus_share", "gpu_busy_share", "main_host_share", "main_gpu_busy",
          "step_ns", "compute_per_step_ns", "bytes"}


def empty(columns: Mapping[str, str]) -> pd.DataFrame:
    return empty_typed((c, object if c in _TEXT else "float64" if c in _FLOAT else "int64") for c in columns)


@dataclass
class JobTables:
    """The job facts of one job (see the module docstring)."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def get(self, name: str, columns: Mapping[str, str]) -> pd.DataFrame:
        frame = self.tables.get(name)
        if frame is None:
            return empty(columns)
        return frame.reindex(columns=list(columns))


def _table(ctx: FactContext, name: str, columns: Mapping[str, str]) -> pd.DataFrame:
    job = ctx.options.get("job")
    return job.get(name, columns) if isinstance(job, JobTables) else empty(columns)


@fact("job_ranks", columns=JOB_RANKS_COLUMNS, scope_keys=("rank",))
def job_ranks(ctx: FactContext) -> pd.DataFrame:
    """One row per rank of a multi-GPU job: step time, compute, communication, exposed communication
    and waiting (empty outside a job)."""
    return _table(ctx, "job_ranks", JOB_RANKS_COLUMNS)


@fact("job_collectives", columns=JOB_COLLECTIVES_COLUMNS, scope_keys=("collective",))
def job_collectives(ctx: FactContext) -> pd.DataFrame:
    """One row per collective matched on every rank inside the job window: arrivals, transfer time and
    nccl-tests' algorithm and bus bandwidth against the link's peak (empty outside a job)."""
    return _table(ctx, "job_collectives", JOB_COLLECTIVES_COLUMNS)


@fact("job_lateness", columns=JOB_LATENESS_COLUMNS, scope_keys=("rank",))
def job_lateness(ctx: FactContext) -> pd.DataFrame:
    """One row per collective a rank reached last, with how long the others waited for it and what
    the late rank's host and GPU were doing meanwhile (empty outside a job)."""
    return _table(ctx, "job_lateness", JOB_LATENESS_COLUMNS)


__all__ = ["JOB_COLLECTIVES_COLUMNS", "JOB_LATENESS_COLUMNS", "JOB_RANKS_COLUMNS", "JobTables", "empty"]
