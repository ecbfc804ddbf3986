"""Cross-check with Holistic Trace Analysis (HTA): the same torch.profiler traces, HTA's numbers and ours.

    python benchmarks/hta_crosscheck.py TRACE_OR_DIR...        # one line per rank and quantity

For every trace (a directory holds one job's rank traces, HTA's layout) it prints, per rank, HTA's
temporal breakdown (``get_temporal_breakdown``: idle, compute, non-compute and kernel time) and kernel
time per kernel type (``get_gpu_kernel_breakdown``: COMPUTATION, COMMUNICATION, MEMORY, and per kernel
name), next to the same quantities computed from our loaded trace with our interval code
(:func:`analyzer.facts._util.union_intervals`), and the difference.

Same definitions as HTA, on purpose (they are HTA's, not our rules'):

* the GPU operations are kernels, copies and memsets whose launching CUDA call is in the trace and,
  when the trace has two ProfilerStep ranges or more, started before the last ProfilerStep (HTA drops
  the last step, which the profiler often cuts short);
* kernel time = last operation end - first operation start; idle = kernel time - the union of all
  operations; compute = the union of COMPUTATION kernels; non-compute = the rest;
* kernel types: a name with ``nccl`` is COMMUNICATION (our ``communication`` category), ``Memcpy`` /
  ``Memset`` operations are MEMORY, every other kernel COMPUTATION.

Tolerance, and why: HTA parses timestamps as float64 microseconds; we parse the JSON text to exact
integer nanoseconds. With HTA's nanosecond rounding switched off (``HTA_DISABLE_NS_ROUNDING=1``, which
this script sets; by default HTA rounds every start up and every end down to a whole microsecond), a
float64 holds a timestamp of the 2024+ relative format (below 2**52 ns) to within half a nanosecond, so
each interval end may differ by 1 ns: a sum over N operations agrees within N ns. Traces with integer
microseconds (2021-2023) must agree exactly. Timestamps in epoch microseconds with nanosecond decimals
(the 2024 format before ``baseTimeNanoseconds``) exceed 2**53 ns and lose up to 0.25 us in a float64:
there the bound is 0.5 us per operation.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

QUANTITIES = ("idle_us", "compute_us", "non_compute_us", "kernel_time_us")
TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY")


@dataclass
class RankNumbers:
    """One rank's numbers, all in microseconds (HTA's unit)."""

    rank: int
    ops: int
    idle_us: float
    compute_us: float
    non_compute_us: float
    kernel_time_us: float
    by_type_us: dict[str, float] = field(default_factory=dict)
    by_kernel_us: dict[str, float] = field(default_factory=dict)
    ns_decimals: bool = False  # timestamps carry nanosecond decimals
    epoch_ns: bool = False  # ... and are epoch microseconds (beyond a float64's nanosecond range)

    def tolerance_us(self) -> float:
        """The agreement bound for sums over this rank's operations (see the module docstring)."""
        if not self.ns_decimals:
            return 1e-6
        return (0.5 if self.epoch_ns else 0.001) * (self.ops + 1)


# ----------------------------------------------------------------------------------------------------
# ours
# ----------------------------------------------------------------------------------------------------
def ours(path: Path) -> RankNumbers:
    """HTA's quantities computed from our loader's trace of ``path``."""
    from analyzer.facts._util import union_intervals
    from analyzer.facts.categories import classify_names, load_categories
    from analyzer.loading import load_trace

    trace = load_trace(path)
    parts = []
    for frame, kind in ((trace.kernels, "kernel"), (trace.memcpy, "memcpy"), (trace.memset, "memset")):
        if len(frame):
            part = frame[["start", "end", "api_name", "api_start", "name" if kind == "kernel" else "start"]].copy()
            if kind == "kernel":
                cats = classify_names(frame["name"], frame["short_name"], load_categories(None))
                part["type"] = np.where(cats == "communication", "COMMUNICATION", "COMPUTATION")
            else:
                part = part.loc[:, ~part.columns.duplicated()]
                part["name"] = kind
                part["type"] = "MEMORY"
            parts.append(part[["start", "end", "api_name", "api_start", "name", "type"]])
    ops = pd.concat(parts, ignore_index=True)
    ops = ops[ops["api_name"] != ""]  # launched by a call in the trace
    nv = trace.nvtx
    steps = nv[nv["text"].str.startswith("ProfilerStep")]
    if len(steps) >= 2:
        ops = ops[ops["api_start"] < int(steps["start"].max())]
    start = ops["start"].to_numpy(np.int64)
    end = ops["end"].to_numpy(np.int64)
    busy = union_intervals(start, end)
    busy_ns = int((busy.end - busy.start).sum())
    comp = ops["type"].to_numpy() == "COMPUTATION"
    cu = union_intervals(start[comp], end[comp])
    compute_ns = int((cu.end - cu.start).sum())
    span_ns = int(end.max() - start.min()) if len(ops) else 0
    idle_ns = span_ns - busy_ns
    dur_us = (end - start) / 1000.0
    by_type = pd.Series(dur_us).groupby(ops["type"].to_numpy()).sum().to_dict()
    kern = ops["type"].to_numpy() != "MEMORY"
    by_kernel = pd.Series(dur_us[kern]).groupby(ops["name"].to_numpy()[kern]).sum().to_dict()
    gen = trace.info.export_schema
    return RankNumbers(
        rank=trace.info.rank if trace.info.rank is not None else 0, ops=len(ops),
        idle_us=idle_ns / 1000.0, compute_us=compute_ns / 1000.0,
        non_compute_us=(span_ns - compute_ns - idle_ns) / 1000.0, kernel_time_us=span_ns / 1000.0,
        by_type_us={t: float(by_type.get(t, 0.0)) for t in TYPES}, by_kernel_us={str(k): float(v) for k, v in by_kernel.items()},
        ns_decimals=gen == "2024+", epoch_ns=gen == "2024+" and trace.info.origin_ns < 10**18 and
        not (trace.extras.get("kineto") or {}).get("base_time_ns"),
    )


# ----------------------------------------------------------------------------------------------------
# HTA
# ----------------------------------------------------------------------------------------------------
def hta(trace_dir: Path) -> dict[int, dict]:
    """HTA's temporal breakdown and kernel breakdown per rank of the traces in ``trace_dir``."""
    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=str(trace_dir))
    temporal = ta.get_temporal_breakdown(visualize=False)
    _types, kernels = ta.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**9,
                                                  include_memory_kernels=True)
    out: dict[int, dict] = {}
    for row in temporal.to_dict("records"):
        out[int(row["rank"])] = {
            "idle_us": float(row["idle_time(us)"]), "compute_us": float(row["compute_time(us)"]),
            "non_compute_us": float(row["non_compute_time(us)"]), "kernel_time_us": float(row["kernel_time(us)"]),
            "by_type_us": {t: 0.0 for t in TYPES}, "by_kernel_us": {},
        }
    total = "sum (us)" if "sum (us)" in kernels.columns else "sum"  # the name changed between HTA releases
    for row in kernels.to_dict("records"):
        rank = int(row["rank"])
        rec = out.setdefault(rank, {"by_type_us": {t: 0.0 for t in TYPES}, "by_kernel_us": {}})
        kind, name, value = row["kernel_type"], str(row["name"]), float(row[total])
        rec["by_type_us"][kind] = rec["by_type_us"].get(kind, 0.0) + value
        if kind != "MEMORY":
            rec["by_kernel_us"][name] = rec["by_kernel_us"].get(name, 0.0) + value
    return out


# ----------------------------------------------------------------------------------------------------
# comparison
# ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Difference:
    rank: int
    quantity: str
    ours_us: float
    hta_us: float
    tolerance_us: float

    @property
    def ok(self) -> bool:
        return abs(self.ours_us - self.hta_us) <= self.tolerance_us


def compare(mine: Iterable[RankNumbers], theirs: dict[int, dict]) -> list[Difference]:
    """Every compared quantity of every rank (``ok`` says whether it is within the tolerance)."""
    out: list[Difference] = []
    for r in mine:
        h = theirs.get(r.rank)
        tol = r.tolerance_us()
        if h is None:
            out.append(Difference(r.rank, "rank present in HTA", 1.0, 0.0, 0.0))
            continue
        for q in QUANTITIES:
            out.append(Difference(r.rank, q, getattr(r, q), h[q], tol))
        for t in TYPES:
            out.append(Difference(r.rank, f"type {t}", r.by_type_us.get(t, 0.0), h["by_type_us"].get(t, 0.0), tol))
        names = set(r.by_kernel_us) | set(h["by_kernel_us"])
        worst = max(names, key=lambda n: abs(r.by_kernel_us.get(n, 0.0) - h["by_kernel_us"].get(n, 0.0)), default=None)
        if worst is not None:
            out.append(Difference(r.rank, f"kernels ({len(names)} names), worst: {worst[:60]}",
                                  r.by_kernel_us.get(worst, 0.0), h["by_kernel_us"].get(worst, 0.0), tol))
    return out


def check_traces(paths: Iterable[Path]) -> list[Difference]:
    """Ours and HTA's numbers for the traces in ``paths`` (files of one job, or one file each)."""
    paths = list(paths)
    with tempfile.TemporaryDirectory(prefix="hta-check-") as tmp:
        folder = Path(tmp)
        for p in paths:  # HTA reads a directory of .json / .json.gz files
            if p.name.endswith(".xz"):
                import lzma

                (folder / p.name.removesuffix(".xz")).write_bytes(lzma.decompress(p.read_bytes()))
                continue
            name = p.name if p.name.endswith((".json", ".json.gz")) else p.name + ".json"
            (folder / name).symlink_to(p.resolve())
        theirs = hta(folder)
    return compare([ours(p) for p in paths], theirs)


_RANK = re.compile(r"^(?P<job>.*?)[_.-]?rank[_.-]?(?P<rank>\d+)(?=[._]|$)", re.I)


def jobs_in(files: Iterable[Path]) -> dict[str, list[Path]]:
    """Trace files grouped by job: names that differ only in a ``rank<N>`` part are one job (HTA reads a
    directory as one job, so each job is checked on its own)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(files):
        m = _RANK.match(p.name)
        out.setdefault(m.group("job") if m else p.name, []).append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path, help="torch.profiler traces, or directories of rank traces")
    args = ap.parse_args(argv)
    failed = 0
    groups: dict[str, list[Path]] = {}
    for target in args.traces:
        if target.is_dir():
            groups.update({f"{target}/{job}": files for job, files in jobs_in(
                p for p in target.iterdir() if p.name.endswith((".json", ".json.gz", ".json.xz"))).items()})
        else:
            groups[str(target)] = [target]
    for label, files in groups.items():
        print(f"== {label} ({len(files)} file{'s' if len(files) > 1 else ''})")
        for d in check_traces(files):
            mark = "ok " if d.ok else "BAD"
            failed += not d.ok
            print(f"  {mark} rank {d.rank:<3} {d.quantity:<70} ours {d.ours_us:>16,.3f} us  HTA {d.hta_us:>16,.3f} us"
                  f"  diff {d.ours_us - d.hta_us:>+10.3f} (tolerance {d.tolerance_us:,.3f})")
    print(f"\n{failed} quantities outside the tolerance")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
