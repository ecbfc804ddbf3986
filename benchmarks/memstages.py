"""Where one ``analyze`` run reaches its peak memory, stage by stage (resident MiB).

    python benchmarks/memstages.py TRACE [analyze options...]      e.g. big_1M.sqlite --no-cache

Runs the real CLI in this process (``-o`` defaults to a temporary HTML file, ``-q`` is added) while a
thread reads ``VmRSS`` from ``/proc/self/status`` every 20 ms and charges it to the stage the main
thread is in (:func:`analyzer.watchdog.current_stage`: ``rules > rule GPU001 > fact gpu_gaps``, with the
last progress note). Prints, in order of first appearance, the highest RSS seen in each stage and the
RSS when it was first seen (``MEMSTAGES_STACK=300``: and the analyzer frames the main thread was in
at the peak, innermost first), then the process's peak (``VmHWM``, which the kernel keeps exactly; the
sampler can miss a short spike between two reads). Linux only.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import analyzer.watchdog as watchdog  # noqa: E402

INTERVAL = 0.02
#: characters of the main thread's stack (analyzer frames, innermost first) shown at each stage's peak
STACKS = int(os.environ.get("MEMSTAGES_STACK", "0"))


def _status(key: str) -> int:
    """``key`` (VmRSS, VmHWM) of this process in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main(argv: list[str]) -> int:
    from analyzer.cli import cli

    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    args = list(argv)
    if "-o" not in args and "--output" not in args:
        args += ["-o", os.path.join(tempfile.mkdtemp(prefix="memstages-"), "report.html")]
    peaks: dict[str, list[Any]] = {}  # stage -> [peak KiB, first KiB, first seen s, stack at the peak]
    main_id = threading.main_thread().ident
    done = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not done.is_set():
            rss = _status("VmRSS")
            where = watchdog.current_stage()
            entry = peaks.setdefault(where, [0, rss, time.perf_counter() - t0, ""])
            if rss > entry[0]:
                entry[0] = rss
                if STACKS:
                    frame = sys._current_frames().get(main_id)
                    entry[3] = " < ".join(f"{Path(f.f_code.co_filename).stem}:{line}" for f, line in
                                          traceback.walk_stack(frame) if "/analyzer/" in f.f_code.co_filename)[:STACKS]
            done.wait(INTERVAL)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        cli.main(args=[*args, "-q"], prog_name="analyze", standalone_mode=False)
    except SystemExit as exc:  # --fail-on and friends
        if exc.code not in (0, 1, None):
            raise
    finally:
        done.set()
        thread.join()
    min_mib = float(os.environ.get("MEMSTAGES_MIN_MIB", "0"))
    print(f"{'t s':>7} {'first MiB':>9} {'peak MiB':>9}  stage")
    for where, (peak, first, seen, stack) in peaks.items():
        if peak / 1024 >= min_mib:
            print(f"{seen:7.2f} {first / 1024:9.0f} {peak / 1024:9.0f}  {where[:150]}")
            if stack:
                print(f"{'':27} at {stack}")
    print(f"process peak (VmHWM): {_status('VmHWM') / 1024:.0f} MiB; wall {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
