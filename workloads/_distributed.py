"""Driver support for the multi-GPU workloads (modules with ``DISTRIBUTED = True``).

A distributed workload is profiled as a *job* of ``--nproc N`` processes launched by ``torchrun``
(as ``python -m torch.distributed.run``, so no console script is needed), in one of two layouts:

* ``single``: one report for the whole job, nsys wrapping the launcher and following its children
  (``nsys profile --trace-fork-before-exec=true ... torchrun --standalone --nproc_per_node=N -m
  workloads.X``): trace ``X_<N>gpu`` holds one process per rank.
* ``per-rank``: one report per rank, each rank's process wrapped by its own nsys (``torchrun ...
  --no-python bash -c 'exec nsys profile ... -o X_<N>gpu_rank$RANK python -m workloads.X'``):
  traces ``X_<N>gpu_rank0`` .. ``X_<N>gpu_rank<N-1>``.

``--nproc 1`` runs the workload alone (no torchrun, no process group): trace ``X_1gpu``, the
1-GPU side of a strong-scaling pair (the workloads keep the global batch fixed).
Every process gets :data:`NCCL_ENV_DEFAULTS` (NVLink multicast off) unless the
environment already sets them. Pure functions, testable without a GPU or nsys.
"""
from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from . import _tools as tools

#: Set for every process of a job unless already set: NVLink SHARP (multicast) stays off, as the
#: multi-GPU machines here need, which also keeps NCCL on the ring/tree algorithms most machines use.
NCCL_ENV_DEFAULTS: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
LAYOUTS = ("single", "per-rank")
#: nsys must follow torchrun's fork+exec of the ranks to see their CUDA work.
FOLLOW_CHILDREN = ("--trace-fork-before-exec=true",)
_RANK_SUFFIX = re.compile(r"_rank\d+$")


def is_distributed(module: ModuleType) -> bool:
    return bool(getattr(module, "DISTRIBUTED", False))


def job_name(trace: str, nproc: int) -> str:
    """``ddp_straggler`` -> ``ddp_straggler_2gpu`` (``_1gpu`` for the run alone)."""
    return f"{trace}_{nproc}gpu"


def rank_names(job: str, nproc: int) -> list[str]:
    """Trace names of the per-rank layout: ``JOB_rank0`` .. ``JOB_rank<N-1>``."""
    return [f"{job}_rank{r}" for r in range(nproc)]


def launcher(nproc: int, python: str | None = None) -> list[str]:
    """``torchrun --standalone --nproc_per_node=N`` spelled through the interpreter."""
    return [python or sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}"]


def job_program(program: Sequence[str], nproc: int) -> list[str]:
    """The job's command line from the 1-process ``[python, -m, workloads.X, ARGS...]``:
    unchanged for ``nproc == 1``, else ``torchrun ... -m workloads.X ARGS...``."""
    program = list(program)
    if nproc == 1:
        return program
    if len(program) < 3 or program[1] != "-m":
        raise ValueError(f"expected [python, -m, module, ...], got {program!r}")
    return [*launcher(nproc, program[0]), "-m", *program[2:]]


def nsys_job_cmd(nsys: Path | str, base: Path, program: Sequence[str], nproc: int, layout: str,
                 extra_flags: Sequence[str] = (), **nsys_opts: Any) -> list[str]:
    """The whole profiling command of a job in ``layout`` (``base``: the job's trace path);
    ``nsys_opts`` go to :func:`workloads._tools.nsys_profile_cmd` (``backtrace``, ...)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if nproc == 1:
        return tools.nsys_profile_cmd(nsys, base, program, extra_flags, **nsys_opts)
    if layout == "single":
        return tools.nsys_profile_cmd(nsys, base, job_program(program, nproc),
                                      [*FOLLOW_CHILDREN, *extra_flags], **nsys_opts)
    # per-rank: torchrun starts `bash -c 'exec nsys ... -o BASE_rank$RANK python -m workloads.X'`
    inner = tools.nsys_profile_cmd(nsys, Path("BASE"), program, extra_flags, **nsys_opts)
    out = inner.index("BASE")
    script = (f"{shlex.join(inner[:out])} {shlex.quote(str(base))}_rank\"$RANK\" "
              f"{shlex.join(inner[out + 1:])}")
    return [*launcher(nproc, program[0]), "--no-python", "bash", "-c", f"exec {script}"]


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """How the driver runs one distributed workload: trace name, command, reports it writes."""

    name: str
    cmd: list[str]
    bases: list[Path]
    nproc: int
    layout: str


def plan(tool: str, tool_path: Path | str, out_dir: Path, trace: str, program: Sequence[str],
         nproc: int, layout: str, **nsys_opts: Any) -> JobPlan:
    """The driver's plan for a distributed workload. ``tool`` ``nsys``: :func:`nsys_job_cmd`;
    ``torch`` (torch.profiler inside the run loop): the job itself, one trace file per rank."""
    if nproc < 1:
        raise ValueError(f"--nproc must be >= 1, got {nproc}")
    name = job_name(trace, nproc)
    base = out_dir / name
    if tool == "nsys":
        return JobPlan(name, nsys_job_cmd(tool_path, base, program, nproc, layout, **nsys_opts),
                       report_bases(base, nproc, layout), nproc, layout)
    if tool == "torch":
        return JobPlan(name, job_program(program, nproc), [base], nproc, "per-rank")
    raise ValueError(f"{tool} cannot profile a distributed job; profile one rank "
                     "(--nproc 1) or use nsys")


def report_bases(base: Path, nproc: int, layout: str) -> list[Path]:
    """The report paths (without suffix) a job writes."""
    if nproc > 1 and layout == "per-rank":
        return [base.with_name(n) for n in rank_names(base.name, nproc)]
    return [base]


def job_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus the NCCL settings every rank must see (kept where already set)."""
    out = dict(env)
    for key, value in NCCL_ENV_DEFAULTS.items():
        out.setdefault(key, value)
    return out


def manifest_records(record: Mapping[str, object], nproc: int, layout: str) -> list[dict]:
    """One manifest line per trace file: the per-rank layout gets a line per rank."""
    base = {**record, "nproc": nproc, "layout": layout if nproc > 1 else "single",
            "job": str(record["name"]), "nccl_env": dict(NCCL_ENV_DEFAULTS)}
    if nproc > 1 and layout == "per-rank":
        return [{**base, "name": name, "rank": r}
                for r, name in enumerate(rank_names(str(record["name"]), nproc))]
    return [base]


def post_targets(out_dir: Path, traces: Sequence[str], suffix: str = ".nsys-rep") -> list[str]:
    """Expand job names to the per-rank reports present (``JOB`` -> ``JOB_rank0``, ...) when
    ``JOB<suffix>`` itself does not exist; other names pass through unchanged."""
    targets: list[str] = []
    for trace in traces:
        if (out_dir / f"{trace}{suffix}").exists() or _RANK_SUFFIX.search(trace):
            targets.append(trace)
            continue
        ranks = sorted((p.name[: -len(suffix)] for p in out_dir.glob(f"{trace}_rank*{suffix}")
                        if _RANK_SUFFIX.search(p.name[: -len(suffix)])),
                       key=lambda n: int(n.rsplit("_rank", 1)[1]))
        targets.extend(ranks or [trace])
    return targets
