"""Driver: ``python -m workloads list|profile|post|pack``.

    python -m workloads list
    python -m workloads profile NAME... --tool nsys|ncu|torch --out DIR [--size full|smoke]
                                [--fixed | --both] [--timeout S] [--post inline|none]
                                [--backtrace] [--gpu-metrics [HZ]] [--power] [--gzip]
                                [--suffix S] [--dry-run] [--nproc N] [--layout single|per-rank]
                                [--cuda-graph-trace graph|node] [--torch-memory]
                                [WORKLOAD ARGS...]
    python -m workloads post --out DIR TRACE...      # nsys: export/analyze/stats; ncu: CSVs
    python -m workloads pack --src DIR --dest DIR    # tar.xz bundles < 16 MiB each

Unknown options after the names are passed to the workload, e.g.
``profile transformer --model small --context 128 --mode training`` (trace
``small_training_ctx128``). Each profiled trace appends one JSON line to ``DIR/manifest.jsonl``.
``--bare`` (a workload option) records without any NVTX range or torch.profiler step markers
(``workloads/_common.py``); name such traces with ``--suffix _bare``; the manifest flags say ``bare``.

``--tool torch`` records torch.profiler (Kineto) JSON instead of an nsys report (no external tool:
see ``workloads/_torchprof.py``), as ``DIR/<trace>.pt.trace.json[.gz]`` (``--gzip``).
``--backtrace``: nsys call stacks on CUDA calls, Python sampling and OS-runtime stacks; torch.profiler
Python stacks on every op (``with_stack=True``). nsys only:
``--gpu-metrics [HZ]`` (GPU_METRICS samples), ``--cuda-graph-trace node`` (one event per kernel
of each CUDA-graph replay instead of one per graph). torch only: ``--torch-memory`` records the
allocator's allocations and frees (``profile_memory=True``). Any tool: ``--power`` samples GPU power
beside the run (NVML: ``<trace>.power.csv``; nvidia-smi: ``<trace>.nvidia-smi.csv``). ``--suffix S`` appends ``S``
to the trace name (e.g. ``_run2`` for a repeated run). Each manifest line of a single-process run
holds the program's own measured step wall times (``step_ms``, ``mean_ms``, ``median_ms``, from its
``<trace>.result.json``, see ``workloads/_common.py``). Workloads that write a sidecar (the
transformer's Python timings) get ``<trace>.pytime.json``.

Multi-GPU workloads (``ddp_*``, ``fsdp_*``) run as a torchrun job of ``--nproc`` processes (trace
``NAME_2gpu``; ``--nproc 1``: alone, ``NAME_1gpu``), profiled into one report (``--layout single``)
or one per rank (``--layout per-rank``: ``NAME_2gpu_rank0`` ...): see ``workloads/_distributed.py``.
With ``--tool torch`` every rank writes ``NAME_2gpu_rank<R>.pt.trace.json``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from . import WORKLOADS
from . import _distributed
from . import _tools as tools

MANIFEST = "manifest.jsonl"


def load_workload(name: str) -> ModuleType:
    if name not in WORKLOADS:
        raise SystemExit(f"error: unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    return importlib.import_module(f"workloads.{name}")


def variants(module: ModuleType, fixed: bool, both: bool) -> list[bool]:
    """Which variants to run: [False], [True] or [False, True] (no twin -> [False])."""
    if not getattr(module, "HAS_TWIN", True):
        return [False]
    if both:
        return [False, True]
    return [fixed]


def trace_name(name: str, module: ModuleType, fixed: bool, extra: Sequence[str]) -> str:
    if hasattr(module, "trace_name"):
        return module.trace_name(extra)
    return f"{name}_fixed" if fixed else name


def workload_cmd(name: str, size: str, fixed: bool, extra: Sequence[str]) -> list[str]:
    cmd = [sys.executable, "-m", f"workloads.{name}", "--size", size]
    return cmd + (["--fixed"] if fixed else []) + list(extra)


def sidecar_args(module: ModuleType, base: Path) -> list[str]:
    """Arguments asking the workload for its sidecar files next to the trace (``SIDECAR_ARGS``
    in the module, ``{base}`` replaced), e.g. the transformer's ``--pytime <trace>.pytime.json``."""
    return [a.replace("{base}", str(base)) for a in getattr(module, "SIDECAR_ARGS", ())]


def torch_env(out_dir: Path, trace: str, gzip: bool, stack: bool = False,
              memory: bool = False) -> dict[str, str]:
    """Environment that makes the common run loop record torch.profiler traces (``_torchprof``);
    ``stack``: Python stacks on every op (``with_stack=True``); ``memory``: allocator events
    (``profile_memory=True``)."""
    from . import _torchprof as tp

    env = {tp.ENV_DIR: str(out_dir), tp.ENV_WORKER: trace}
    if gzip:
        env[tp.ENV_GZIP] = "1"
    if stack:
        env[tp.ENV_STACK] = "1"
    if memory:
        env[tp.ENV_MEMORY] = "1"
    return env


def read_result(path: Path) -> dict:
    """The program's own timing (``step_ms``, ``mean_ms``, ``median_ms``) from the result file
    :func:`workloads._common.report` wrote, removed afterwards; {} when there is none."""
    try:
        with open(path) as fh:
            data = json.load(fh)
        path.unlink()
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: data[k] for k in ("step_ms", "mean_ms", "median_ms") if k in data}


def collect_torch_traces(out_dir: Path, trace: str) -> list[Path]:
    """Rename ``<trace>[_rankN].<ms>.pt.trace.json[.gz]`` (tensorboard_trace_handler's names) to
    ``<trace>[_rankN].pt.trace.json[.gz]``; returns the final paths."""
    import re

    pat = re.compile(rf"^({re.escape(trace)}(?:_rank\d+)?)\.\d+\.pt\.trace\.json(\.gz)?$")
    done = []
    for p in sorted(out_dir.iterdir()):
        m = pat.match(p.name)
        if m:
            target = out_dir / f"{m.group(1)}.pt.trace.json{m.group(2) or ''}"
            p.replace(target)
            done.append(target)
    return done


def start_power(base: Path) -> list[subprocess.Popen]:
    """Start the NVML sampler and an nvidia-smi logger writing next to ``base``."""
    procs = []
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "workloads._power", "--out", f"{base}.power.csv", "--interval-ms", "20"],
        start_new_session=True))
    try:
        fh = open(f"{base}.nvidia-smi.csv", "w")
        procs.append(subprocess.Popen(tools.nvidia_smi_power_cmd(100), stdout=fh,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
        fh.close()
    except OSError as exc:
        print(f"[driver] nvidia-smi power log not started: {exc}", file=sys.stderr)
    time.sleep(0.5)  # a few samples of the idle GPU before the run
    return procs


def stop_power(procs: list[subprocess.Popen]) -> None:
    time.sleep(0.5)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def ncu_filter(module: ModuleType, fixed: bool) -> tuple[str, int]:
    filt = getattr(module, "NCU_KERNEL_FILTER_FIXED", None) if fixed else None
    return filt or module.NCU_KERNEL_FILTER, int(getattr(module, "NCU_COUNT", 2))


def ncu_extra_flags(module: ModuleType) -> list[str]:
    """Restrict ncu to kernels inside an NVTX range (default: the first measured step)."""
    rng = getattr(module, "NCU_NVTX_INCLUDE", "step_0/")
    return ["--nvtx-include", rng] if rng else []


def profile_cmd(tool: str, tool_path: Path | str, out_base: Path, module: ModuleType,
                fixed: bool, program: Sequence[str], *, backtrace: bool = False,
                gpu_metrics_hz: int | None = None, graph_trace: str | None = None) -> list[str]:
    if tool == "torch":
        return list(program)
    if tool == "nsys":
        extra = [f"--cuda-graph-trace={graph_trace}"] if graph_trace else []
        return tools.nsys_profile_cmd(tool_path, out_base, program, extra, backtrace=backtrace,
                                      gpu_metrics_hz=gpu_metrics_hz)
    filt, count = ncu_filter(module, fixed)
    return tools.ncu_profile_cmd(tool_path, out_base, filt, count, program,
                                 ncu_extra_flags(module))


def run_logged(cmd: Sequence[str], *, timeout: float | None, env: dict | None = None,
               stdout_path: Path | None = None) -> int:
    """Run ``cmd`` in its own process group; kill the whole group on timeout (rc 124)."""
    out = open(stdout_path, "w") if stdout_path else None
    try:
        proc = subprocess.Popen(list(cmd), env=env, start_new_session=True,
                                stdout=out, stderr=subprocess.STDOUT if out else None)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            print(f"[driver] TIMEOUT after {timeout}s: {shlex.join(cmd)}", file=sys.stderr)
            return 124
    finally:
        if out:
            out.close()


def post_nsys(nsys: Path | str, base: Path, timeout: float = 300) -> int:
    """Export SQLite, run ``nsys analyze`` and ``nsys stats`` (CSV) for ``base.nsys-rep``."""
    env = tools.nsys_env()
    rc = run_logged(tools.nsys_export_cmd(nsys, base), timeout=timeout, env=env,
                    stdout_path=base.with_name(base.name + ".export.log"))
    if rc != 0 or not base.with_name(base.name + ".sqlite").exists():
        print(f"[driver] export failed for {base} (rc={rc})", file=sys.stderr)
        return rc or 1
    run_logged(tools.nsys_analyze_cmd(nsys, base), timeout=timeout, env=env,
               stdout_path=base.with_name(base.name + ".analyze.txt"))
    run_logged(tools.nsys_stats_cmd(nsys, base), timeout=timeout, env=env,
               stdout_path=base.with_name(base.name + ".stats.log"))
    base.with_name(base.name + ".export.log").unlink(missing_ok=True)
    return 0


def post_ncu(ncu: Path | str, base: Path, timeout: float = 300) -> int:
    """Export the ``raw`` and ``details`` pages of ``base.ncu-rep`` as CSV."""
    rc = 0
    for page in ("raw", "details"):
        rc |= run_logged(tools.ncu_import_cmd(ncu, base, page), timeout=timeout,
                         stdout_path=base.with_name(f"{base.name}.{page}.csv"))
    return rc


def manifest_line(out_dir: Path, record: dict) -> None:
    with open(out_dir / MANIFEST, "a") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")


def cmd_list(_args: argparse.Namespace) -> int:
    for name in WORKLOADS:
        mod = load_workload(name)
        doc = (mod.__doc__ or "").strip().splitlines()[0]
        twin = "twin" if getattr(mod, "HAS_TWIN", True) else "no twin"
        print(f"{name:20s} {twin:8s} ncu {mod.NCU_KERNEL_FILTER:32s} {doc}")
    return 0


def torch_version() -> str:
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, timeout=120)
        return f"torch {out.stdout.strip() or 'unknown'}"
    except (OSError, subprocess.SubprocessError):
        return "torch unknown"


def cmd_profile(args: argparse.Namespace, extra: list[str]) -> int:
    if args.tool == "ncu" and args.backtrace or args.tool != "nsys" and args.gpu_metrics:
        print("error: --gpu-metrics needs --tool nsys, --backtrace --tool nsys or torch", file=sys.stderr)
        return 2
    if args.tool != "nsys" and args.cuda_graph_trace or args.tool != "torch" and args.torch_memory:
        print("error: --cuda-graph-trace needs --tool nsys, --torch-memory --tool torch",
              file=sys.stderr)
        return 2
    from ._common import ENV_RESULT_FILE  # here: _common may import torch (no `nvtx` package)

    tool_path: Path | str = args.tool
    if args.tool != "torch":
        try:
            tool_path = tools.find_tool(args.tool)
        except tools.ToolNotFoundError as exc:
            if not args.dry_run:
                print(f"error: {exc}", file=sys.stderr)
                return 2
    out_dir = Path(args.out).resolve()
    if not args.dry_run:
        out_dir.mkdir(parents=True, exist_ok=True)
    env = tools.nsys_env() if args.tool == "nsys" else dict(os.environ)
    info: dict[str, str] = {}
    worst = 0
    for name in args.names:
        mod = load_workload(name)
        for fixed in variants(mod, args.fixed, args.both):
            tname = trace_name(name, mod, fixed, extra) + args.suffix
            base = out_dir / tname
            program = workload_cmd(name, args.size, fixed, [*extra, *sidecar_args(mod, base)])
            nsys_opts = {"backtrace": args.backtrace, "gpu_metrics_hz": args.gpu_metrics}
            if args.cuda_graph_trace:
                nsys_opts["graph_trace"] = args.cuda_graph_trace
            job = None  # a multi-GPU job (workloads/_distributed.py)
            if _distributed.is_distributed(mod):
                try:
                    job = _distributed.plan(args.tool, tool_path, out_dir, tname, program,
                                            args.nproc, args.layout, **nsys_opts)
                except ValueError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                tname, base, cmd = job.name, out_dir / job.name, job.cmd
            else:
                cmd = profile_cmd(args.tool, tool_path, base, mod, fixed, program, **nsys_opts)
            run_env = ({**env, **torch_env(out_dir, tname, args.gzip, args.backtrace,
                                           args.torch_memory)} if args.tool == "torch"
                       else env)
            result_file = out_dir / f"{tname}.result.json"
            if job:
                run_env = _distributed.job_env(run_env)
            else:  # one process: it writes its measured step times for the manifest
                run_env = {**run_env, ENV_RESULT_FILE: str(result_file)}
            print(f"[driver] {tname}: {shlex.join(cmd)}", flush=True)
            if args.dry_run:
                continue
            result_file.unlink(missing_ok=True)  # never a previous run's times
            if not info:
                version = torch_version() if args.tool == "torch" else tools.tool_version(tool_path, env)
                info = {**tools.gpu_info(), "tool_version": version}
            power = start_power(base) if args.power else []
            t0 = time.monotonic()
            try:
                rc = run_logged(cmd, timeout=args.timeout, env=run_env)
            finally:
                wall = time.monotonic() - t0
                stop_power(power)
            outputs: list[str] = []
            if args.tool == "torch":
                outputs = [p.name for p in collect_torch_traces(out_dir, tname)]
            elif args.post == "inline":
                post = post_nsys if args.tool == "nsys" else post_ncu
                for b in job.bases if job else [base]:
                    post(tool_path, b)
            flags = [f for f, on in (("backtrace", args.backtrace), ("power", args.power),
                                     ("gzip", args.gzip and args.tool == "torch"),
                                     ("memory", args.torch_memory), ("bare", "--bare" in extra))
                     if on]
            if args.gpu_metrics:
                flags.append(f"gpu-metrics={args.gpu_metrics}Hz")
            if args.cuda_graph_trace:
                flags.append(f"cuda-graph-trace={args.cuda_graph_trace}")
            record = {
                "name": tname, "workload": name, "variant": "fixed" if fixed else "pathology",
                "tool": args.tool, "command": shlex.join(cmd), "program": shlex.join(program),
                "exit_code": rc, "wall_s": round(wall, 2), "size": args.size, "flags": flags,
                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                **({"outputs": outputs} if outputs else {}),
                **({} if job else read_result(result_file)), **info}
            for rec in (_distributed.manifest_records(record, job.nproc, job.layout) if job
                        else [record]):
                manifest_line(out_dir, rec)
            print(f"[driver] {tname}: exit {rc} in {wall:.1f}s", flush=True)
            worst = worst or rc
    return worst


def cmd_post(args: argparse.Namespace) -> int:
    try:
        tool_path = tools.find_tool(args.tool)
    except tools.ToolNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    post = post_nsys if args.tool == "nsys" else post_ncu
    out = Path(args.out).resolve()
    suffix = ".nsys-rep" if args.tool == "nsys" else ".ncu-rep"
    traces = _distributed.post_targets(out, args.traces, suffix)  # a job -> its rank reports
    return max((post(tool_path, out / t, args.timeout) for t in traces), default=0)


def cmd_pack(args: argparse.Namespace) -> int:
    from . import _pack

    return _pack.pack(Path(args.src), Path(args.dest), prefix=args.prefix,
                      keep_reps=tuple(args.keep_rep), max_bytes=int(args.max_mib * 2**20),
                      max_files=args.max_files)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workloads", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list workloads")
    p = sub.add_parser("profile", help="profile workloads with nsys or ncu")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--tool", choices=("nsys", "ncu", "torch"), default="nsys")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--backtrace", action="store_true",
                   help="nsys: call stacks on CUDA calls, Python sampling, OS-runtime stacks; "
                        "torch: Python stacks on every op (with_stack=True)")
    p.add_argument("--gpu-metrics", type=int, nargs="?", const=tools.GPU_METRICS_DEFAULT_HZ,
                   default=None, metavar="HZ", help="nsys: sample GPU metrics (default %(const)s Hz)")
    p.add_argument("--power", action="store_true",
                   help="sample GPU power beside the run (NVML and nvidia-smi CSV logs)")
    p.add_argument("--gzip", action="store_true", help="torch: write .pt.trace.json.gz")
    p.add_argument("--torch-memory", action="store_true",
                   help="torch: record allocations and frees (profile_memory=True)")
    p.add_argument("--cuda-graph-trace", choices=("graph", "node"), default=None,
                   help="nsys: trace CUDA graphs as a whole (nsys' default) or node by node")
    p.add_argument("--suffix", default="", help="append this to each trace name (e.g. _run2)")
    p.add_argument("--size", choices=("smoke", "full"), default="full")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--fixed", action="store_true", help="profile the twin only")
    g.add_argument("--both", action="store_true", help="profile pathology and twin")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per profiled run")
    p.add_argument("--post", choices=("inline", "none"), default="inline",
                   help="post-process right away (default) or leave it to `post`")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument("--nproc", type=int, default=2,
                   help="multi-GPU workloads: processes (GPUs) of the job, 1 = alone (default 2)")
    p.add_argument("--layout", choices=_distributed.LAYOUTS, default="single",
                   help="multi-GPU workloads under nsys: one report for the job (single, "
                        "default) or one per rank (per-rank)")
    q = sub.add_parser("post", help="post-process traces already recorded in --out")
    q.add_argument("traces", nargs="+", metavar="TRACE")
    q.add_argument("--tool", choices=("nsys", "ncu"), default="nsys")
    q.add_argument("--out", required=True)
    q.add_argument("--timeout", type=float, default=300.0, help="seconds per post-processing command")
    k = sub.add_parser("pack", help="pack outputs into tar.xz files under a size limit")
    k.add_argument("--src", required=True)
    k.add_argument("--dest", required=True)
    k.add_argument("--prefix", default="nsys_traces")
    k.add_argument("--keep-rep", action="append", default=[],
                   help="a .nsys-rep/.ncu-rep file name to keep (repeatable)")
    k.add_argument("--max-mib", type=float, default=15.5)
    k.add_argument("--max-files", type=int, default=6)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "profile":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "list":
        return cmd_list(args)
    if args.command == "profile":
        return cmd_profile(args, [e for e in extra if e != "--"])
    if args.command == "post":
        return cmd_post(args)
    return cmd_pack(args)


if __name__ == "__main__":
    raise SystemExit(main())
