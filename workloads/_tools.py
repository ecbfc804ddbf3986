"""Finding Nsight Systems / Nsight Compute and building their command lines.

Pure functions (no process is started here except version queries), so the command
construction is unit-testable without a GPU or the tools installed.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Where NVIDIA installs the tools, searched after $NSYS/$NCU and the PATH (last match wins,
#: i.e. the highest version when directories are versioned).
SEARCH_GLOBS: dict[str, tuple[str, ...]] = {
    "nsys": (
        "/usr/local/cuda/bin/nsys",
        "/usr/local/cuda-*/bin/nsys",
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
        "/opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
        "/opt/nvidia/nsight-systems/*/bin/nsys",
    ),
    "ncu": (
        "/usr/local/cuda/bin/ncu",
        "/usr/local/cuda-*/bin/ncu",
        "/opt/nvidia/nsight-compute/*/ncu",
    ),
}
ENV_OVERRIDE = {"nsys": "NSYS", "ncu": "NCU"}

NSYS_TRACE_FLAGS: tuple[str, ...] = (
    "-t", "cuda,nvtx,osrt", "-s", "none", "--cpuctxsw=none", "--cuda-memory-usage=true",
)
#: ``--backtrace``: call stacks on CUDA API calls (C and Python: CUDA_CALLCHAINS), sampled CPU stacks
#: with Python frames (SAMPLING_CALLCHAINS) and OS-runtime call stacks (OSRT_CALLCHAINS).
NSYS_BACKTRACE_FLAGS: tuple[str, ...] = (
    "-s", "process-tree", "--python-sampling=true", "--python-backtrace=cuda", "--cudabacktrace=all",
)
#: ``--gpu-metrics``: GPU_METRICS samples (SM active, tensor active, DRAM/PCIe bandwidth ...).
GPU_METRICS_DEFAULT_HZ = 2000
NVIDIA_SMI_POWER_QUERY = "timestamp,index,power.draw,clocks.sm,utilization.gpu"
NSYS_STATS_REPORTS: tuple[str, ...] = (
    "nvtx_sum", "cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum",
)


class ToolNotFoundError(RuntimeError):
    """Raised when nsys/ncu cannot be found; the message lists every place searched."""


def _version_key(path: str) -> tuple:
    parts = []
    for piece in Path(path).parts:
        nums = [int(x) for x in piece.replace("-", ".").split(".") if x.isdigit()]
        parts.append(tuple(nums))
    return tuple(parts)


def find_tool(
    tool: str,
    *,
    env: Mapping[str, str] | None = None,
    globs: Sequence[str] | None = None,
) -> Path:
    """Locate ``nsys`` or ``ncu``: ``$NSYS``/``$NCU``, then ``PATH``, then NVIDIA's install dirs."""
    if tool not in SEARCH_GLOBS:
        raise ValueError(f"unknown tool {tool!r}")
    env = os.environ if env is None else env
    patterns = SEARCH_GLOBS[tool] if globs is None else tuple(globs)
    override = env.get(ENV_OVERRIDE[tool])
    if override:
        if os.access(override, os.X_OK):
            return Path(override)
        raise ToolNotFoundError(f"${ENV_OVERRIDE[tool]}={override} is not an executable file")
    on_path = shutil.which(tool, path=env.get("PATH", ""))
    if on_path:
        return Path(on_path)
    for pattern in reversed(patterns):  # later patterns are preferred
        hits = sorted((h for h in glob.glob(pattern) if os.access(h, os.X_OK)), key=_version_key)
        if hits:
            return Path(hits[-1])
    raise ToolNotFoundError(
        f"{tool} not found: set ${ENV_OVERRIDE[tool]}, put it on PATH, or install it; searched "
        f"PATH={env.get('PATH', '')!r} and {', '.join(patterns)}")


def _usable_libs(libs: Path) -> Path:
    """``libs`` itself, or a /tmp copy with real symlinks when the ``*.so.1`` "links" arrived as
    small text files holding the target name (what copying a tree without symlinks produces)."""
    pointers = [p for p in libs.glob("*.so.*") if p.is_file() and not p.is_symlink()
                and p.stat().st_size < 256]
    if not pointers:
        return libs
    fixed = Path(os.environ.get("TMPDIR", "/tmp")) / "workloads-nsys-libs"
    fixed.mkdir(parents=True, exist_ok=True)
    for src in libs.iterdir():
        dst = fixed / src.name
        if dst.exists() or dst.is_symlink():
            dst.unlink()
        if src in pointers:
            dst.symlink_to(src.read_text().strip())
        else:
            shutil.copyfile(src, dst)
    return fixed


def nsys_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for nsys: adds ``.devtools/libs`` (libdw/libelf for the importer) if present."""
    env = dict(os.environ if base is None else base)
    libs = REPO_ROOT / ".devtools" / "libs"
    if libs.is_dir():
        libs = _usable_libs(libs)
        old = env.get("LD_LIBRARY_PATH", "")
        env["LD_LIBRARY_PATH"] = f"{libs}:{old}" if old else str(libs)
    return env


def nsys_profile_cmd(nsys: Path | str, out_base: Path | str, program: Sequence[str],
                     extra_flags: Iterable[str] = (), *, backtrace: bool = False,
                     gpu_metrics_hz: int | None = None) -> list[str]:
    """``nsys profile`` writing ``out_base.nsys-rep``; ``backtrace`` swaps ``-s none`` for CPU
    sampling with Python stacks and call stacks on CUDA calls, ``gpu_metrics_hz`` samples GPU metrics."""
    flags = list(NSYS_TRACE_FLAGS)
    if backtrace:
        i = flags.index("-s")
        del flags[i:i + 2]
        flags += NSYS_BACKTRACE_FLAGS
    if gpu_metrics_hz:
        flags += ["--gpu-metrics-devices=all", f"--gpu-metrics-frequency={int(gpu_metrics_hz)}"]
    return [str(nsys), "profile", *flags, *extra_flags,
            "-f", "true", "-o", str(out_base), *program]


def nvidia_smi_power_cmd(interval_ms: int = 100) -> list[str]:
    """``nvidia-smi`` logging power, SM clock and utilization every ``interval_ms`` (CSV on stdout)."""
    return ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_POWER_QUERY}", "--format=csv",
            "-lms", str(int(interval_ms))]


def nsys_export_cmd(nsys: Path | str, out_base: Path | str) -> list[str]:
    return [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true",
            "-o", f"{out_base}.sqlite", f"{out_base}.nsys-rep"]


def nsys_analyze_cmd(nsys: Path | str, out_base: Path | str) -> list[str]:
    """stdout goes to ``out_base.analyze.txt``."""
    return [str(nsys), "analyze", f"{out_base}.sqlite"]


def nsys_stats_cmd(nsys: Path | str, out_base: Path | str,
                   reports: Sequence[str] = NSYS_STATS_REPORTS) -> list[str]:
    """Writes ``out_base_<report>.csv`` per report."""
    return [str(nsys), "stats", "-r", ",".join(reports), "--format", "csv",
            "--force-export", "false", "-o", str(out_base), f"{out_base}.sqlite"]


def ncu_profile_cmd(ncu: Path | str, out_base: Path | str, kernel_filter: str, count: int,
                    program: Sequence[str], extra_flags: Iterable[str] = ()) -> list[str]:
    """``ncu --set full`` of the first ``count`` kernels matching ``kernel_filter``."""
    return [str(ncu), "--set", "full", "--nvtx", "-k", kernel_filter, "-c", str(count),
            *extra_flags, "-f", "-o", str(out_base), *program]


def ncu_import_cmd(ncu: Path | str, out_base: Path | str, page: str) -> list[str]:
    """stdout goes to ``out_base.<page>.csv``."""
    return [str(ncu), "--import", f"{out_base}.ncu-rep", "--csv", "--page", page]


def tool_version(tool_path: Path | str, env: Mapping[str, str] | None = None) -> str:
    """First line of ``TOOL --version`` (or ``unknown``)."""
    try:
        out = subprocess.run([str(tool_path), "--version"], capture_output=True, text=True,
                             timeout=60, env=None if env is None else dict(env))
        lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
        return lines[-1] if lines else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def gpu_info() -> dict[str, str]:
    """GPU name and driver version from ``nvidia-smi`` (``unknown`` when unavailable)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
        first = out.stdout.strip().splitlines()[0]
        name, driver = (p.strip() for p in first.split(",", 1))
        return {"gpu": name, "driver": driver}
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        return {"gpu": "unknown", "driver": "unknown"}
