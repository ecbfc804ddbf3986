"""A GPU power sampler (NVML), run beside a profiled workload: ``python -m workloads._power``.

    python -m workloads._power --out run.power.csv [--interval-ms 20] [--duration S]

Writes one CSV row per GPU per sample until it is terminated (SIGTERM/SIGINT) or ``--duration``
passes. Columns::

    timestamp_utc_ns,gpu_index,gpu_name,power_w,energy_j,sm_clock_mhz,util_gpu_pct

``timestamp_utc_ns`` is the host's UTC wall clock (``time.time_ns()``) when the sample was read, so
it aligns with an Nsight Systems trace through the session's UTC start time. ``power_w`` is NVML's
power reading (``nvmlDeviceGetPowerUsage``); ``energy_j`` the GPU's cumulative energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, Volta and later; empty where unsupported), which gives the
energy of any interval exactly as the difference of two readings. The first line is a comment
``# workloads.power/1 ...`` naming the source and the sampling interval.
"""
from __future__ import annotations

import argparse
import signal
import socket
import sys
import time
from collections.abc import Sequence

SCHEMA = "workloads.power/1"
HEADER = "timestamp_utc_ns,gpu_index,gpu_name,power_w,energy_j,sm_clock_mhz,util_gpu_pct"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads._power", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    args = parser.parse_args(argv)
    try:
        import pynvml
    except ImportError:
        print("error: pynvml (nvidia-ml-py) is not installed", file=sys.stderr)
        return 2
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"error: NVML unavailable: {exc}", file=sys.stderr)
        return 2
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    names = []
    for h in handles:
        name = pynvml.nvmlDeviceGetName(h)
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    stop = False

    def _stop(*_a: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    deadline = time.monotonic() + args.duration if args.duration else None
    interval = args.interval_ms / 1e3
    with open(args.out, "w", buffering=1) as fh:
        fh.write(f"# {SCHEMA} source=nvml interval_ms={args.interval_ms:g} host={socket.gethostname()} "
                 f"driver={_driver(pynvml)}\n{HEADER}\n")
        nxt = time.monotonic()
        while not stop and (deadline is None or time.monotonic() < deadline):
            for i, h in enumerate(handles):
                ts = time.time_ns()
                fh.write(f"{ts},{i},{names[i]},{_power_w(pynvml, h)},{_energy_j(pynvml, h)},"
                         f"{_clock(pynvml, h)},{_util(pynvml, h)}\n")
            nxt += interval
            time.sleep(max(0.0, nxt - time.monotonic()))
    pynvml.nvmlShutdown()
    return 0


def _driver(pynvml: object) -> str:
    try:
        v = pynvml.nvmlSystemGetDriverVersion()  # type: ignore[attr-defined]
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return "unknown"


def _power_w(pynvml: object, h: object) -> str:
    try:
        return f"{pynvml.nvmlDeviceGetPowerUsage(h) / 1e3:.3f}"  # type: ignore[attr-defined]
    except Exception:
        return ""


def _energy_j(pynvml: object, h: object) -> str:
    try:
        return f"{pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3:.3f}"  # type: ignore[attr-defined]
    except Exception:
        return ""


def _clock(pynvml: object, h: object) -> str:
    try:
        return str(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))  # type: ignore[attr-defined]
    except Exception:
        return ""


def _util(pynvml: object, h: object) -> str:
    try:
        return str(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)  # type: ignore[attr-defined]
    except Exception:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
