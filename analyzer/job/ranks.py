"""Ranks of a multi-GPU job: splitting one multi-process report into per-rank traces, and numbering.

Layout (a), one report for the whole job (``nsys profile --trace-fork-before-exec=true torchrun ...``),
holds one process per rank. :func:`split_processes` cuts it into one :class:`Trace` per process that
launched GPU work, sharing the report's clock (so collectives line up with no skew). Layout (b), one
report per rank, gives one trace per file already.

Numbering (:func:`rank_hint`), best source first:

1. ``nccl``: the rank NCCL itself recorded (``ncclCommInitRank*`` NVTX payloads: rank and number of
   ranks of the communicator; the largest communicator is the world);
2. ``torch.distributed``: ``TraceInfo.rank`` (a Kineto trace's ``distributedInfo``);
3. ``file name``: ``rank3``, ``rank_3``, ``-r3`` ... in the file name (per-rank layout);
4. ``device``: the CUDA device the process ran on (one rank per GPU on one host);
5. ``process order``: order of first GPU activity.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzer.facts._util import column, text
from analyzer.facts.nccl_nvtx import payload_fields
from analyzer.loading.model import FRAME_COLUMNS, Trace

_RANK_IN_NAME = re.compile(r"(?i)(?:^|[_\-.])(?:rank|r)[_\-]?(\d+)(?=$|[_\-.])")


@dataclass(frozen=True)
class RankHint:
    """What one rank's trace says about its place in the job (None: it does not say)."""

    rank: int | None
    world_size: int | None
    how: str  # "nccl" | "torch.distributed" | "file name" | ""
    device: int  # the CUDA device with the most kernel time (-1: none)
    pid: int


def gpu_processes(trace: Trace) -> list[int]:
    """Processes that launched kernels, in order of their first kernel."""
    k = trace.kernels
    if k.empty or "pid" not in k.columns:
        return []
    pid = k["pid"].fillna(-1).to_numpy(dtype=np.int64)
    start = k["start"].to_numpy(dtype=np.int64)
    ok = pid >= 0
    if not ok.any():
        return []
    first = pd.Series(start[ok]).groupby(pid[ok]).min().sort_values(kind="stable")
    return [int(p) for p in first.index]


def _device_owner(trace: Trace) -> dict[int, int]:
    """device -> the process that launched most kernels on it (for ops whose pid is unknown)."""
    k = trace.kernels
    if k.empty:
        return {}
    pid = k["pid"].fillna(-1).to_numpy(dtype=np.int64)
    dev = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    ok = pid >= 0
    if not ok.any():
        return {}
    counts = pd.DataFrame({"dev": dev[ok], "pid": pid[ok]}).value_counts().reset_index(name="n")
    counts = counts.sort_values(["dev", "n"], ascending=[True, False]).drop_duplicates("dev")
    return dict(zip(counts["dev"].astype(int), counts["pid"].astype(int)))


def _rows_of(frame: pd.DataFrame, pid: int, owner: dict[int, int] | None = None) -> pd.DataFrame:
    if frame.empty or "pid" not in frame.columns:
        return frame
    p = frame["pid"].fillna(-1).to_numpy(dtype=np.int64)
    keep = p == pid
    if owner is not None and "device" in frame.columns:
        unknown = p < 0
        if unknown.any():
            dev = frame["device"].fillna(-1).to_numpy(dtype=np.int64)
            mine = np.array([owner.get(int(d), -2) == pid for d in dev[unknown]], dtype=bool)
            keep[np.flatnonzero(unknown)[mine]] = True
    return frame.loc[keep].reset_index(drop=True)


def split_processes(trace: Trace) -> list[Trace]:
    """One trace per process that launched GPU work (a list of one, ``[trace]``, when fewer than two
    did). Frames keep the report's clock and their contract columns; NVTX ``range_id`` values are
    kept (the ops' ``nvtx_id`` still points at them)."""
    pids = gpu_processes(trace)
    if len(pids) < 2:
        return [trace]
    owner = _device_owner(trace)
    out = []
    for pid in pids:
        frames = {}
        for name in FRAME_COLUMNS:
            frame = getattr(trace, name)
            if name in ("kernels", "memcpy", "memset"):
                frames[name] = _rows_of(frame, pid, owner)
            elif name in ("api", "sync", "nvtx", "processes", "threads", "memory"):
                frames[name] = _rows_of(frame, pid)
            else:  # gpus: the devices this process used
                frames[name] = frame
        if not frames["nvtx"].empty:
            frames["nvtx"] = frames["nvtx"].set_index(frames["nvtx"]["range_id"].to_numpy(), drop=False)
            frames["nvtx"].index.name = None
        used = set(column(frames["kernels"], "device", 0).astype(int)) if len(frames["kernels"]) else set()
        if used and len(trace.gpus) and "device" in trace.gpus.columns:
            frames["gpus"] = trace.gpus.loc[trace.gpus["device"].isin(used)].reset_index(drop=True)
        extras = {**trace.extras, "job_pid": pid, "job_source": f"{trace.name} pid {pid}"}
        out.append(Trace(info=trace.info, extras=extras, **frames))
    return out


def _nccl_rank(trace: Trace) -> tuple[int | None, int | None]:
    """(rank, number of ranks) of the largest communicator this process joined, from NCCL's
    ``ncclCommInitRank*`` / ``ncclCommSplit`` NVTX payloads."""
    nv = trace.nvtx
    if nv.empty or "payload" not in nv.columns:
        return None, None
    txt = text(nv["text"])
    sel = txt.str.startswith("ncclCommInit") | txt.str.startswith("ncclCommSplit")
    best: tuple[int, int] | None = None
    for value in nv.loc[sel.to_numpy(), "payload"].tolist():
        f = payload_fields(value)
        try:
            rank, n = int(f["rank"]), int(f["nranks"])
        except (KeyError, TypeError, ValueError):
            continue
        if best is None or n > best[1]:
            best = (rank, n)
    return best if best is not None else (None, None)


def main_device(trace: Trace) -> int:
    k = trace.kernels
    if k.empty:
        return -1
    dev = column(k, "device", 0).fillna(0).to_numpy(dtype=np.int64)
    dur = k["duration"].to_numpy(dtype=np.int64)
    sums = pd.Series(dur).groupby(dev).sum()
    return int(sums.idxmax())


def rank_hint(trace: Trace, file_name: str = "") -> RankHint:
    """What ``trace`` says about its rank (see the module docstring for the order of sources)."""
    device = main_device(trace)
    pids = gpu_processes(trace)
    pid_obj = trace.extras.get("job_pid")
    pid = pid_obj if isinstance(pid_obj, int) else (pids[0] if pids else -1)
    rank, world = _nccl_rank(trace)
    if rank is not None:
        return RankHint(rank, world, "nccl", device, pid)
    info_rank = getattr(trace.info, "rank", None)
    if info_rank is not None:
        return RankHint(int(info_rank), getattr(trace.info, "world_size", None), "torch.distributed",
                        device, pid)
    m = _RANK_IN_NAME.search(file_name.split("/")[-1])
    if m:
        return RankHint(int(m.group(1)), None, "file name", device, pid)
    return RankHint(None, None, "", device, pid)


def number_ranks(hints: list[RankHint]) -> tuple[list[int], str, list[str]]:
    """Job ranks for inputs with these hints: (rank per input, how they were numbered, notes).

    All inputs with a distinct hint from one source: those. Otherwise by device when the devices
    differ (one host), else by input order."""
    notes: list[str] = []
    for how in ("nccl", "torch.distributed", "file name"):
        if all(h.how == how and h.rank is not None for h in hints):
            ranks = [int(h.rank) for h in hints if h.rank is not None]
            if len(set(ranks)) == len(ranks):
                return ranks, how, notes
            notes.append(f"the {how} rank numbers repeat ({sorted(ranks)}); numbered by "
                         "device / input order instead")
            break
    devices = [h.device for h in hints]
    if len(set(devices)) == len(devices) and all(d >= 0 for d in devices):
        order = np.argsort(devices, kind="stable")
        ranks = [0] * len(hints)
        for r, i in enumerate(order):
            ranks[int(i)] = r
        return ranks, "device", notes
    return list(range(len(hints))), "process order", notes


def with_rank(trace: Trace, rank: int, world_size: int) -> Trace:
    """``trace`` with ``rank`` / ``world_size`` recorded in its info (when the model has them)."""
    names = {f.name for f in dataclasses.fields(trace.info)}
    if "rank" in names and "world_size" in names:
        info = dataclasses.replace(trace.info, rank=rank, world_size=world_size)  # type: ignore[call-arg]
        return dataclasses.replace(trace, info=info)
    return trace


__all__ = ["RankHint", "gpu_processes", "main_device", "number_ranks", "rank_hint", "split_processes",
           "with_rank"]
