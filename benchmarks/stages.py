"""Where one ``analyze`` run spends its time, stage by stage (wall and CPU seconds).

    python benchmarks/stages.py TRACE [analyze options...]      e.g. big_1M.sqlite --window full

Runs the real CLI in this process (``-o`` defaults to a temporary HTML file, ``-q`` is added) with
every :func:`analyzer.watchdog.stage` timed: the top-level stages (loading, choosing the window,
rules, building and writing the report), the facts and rules inside them (a fact is computed inside
the first rule or report section that reads it, so it is also counted there; facts the second
thread computed while the rules ran are marked ``[2nd thread]``), and what is left: interpreter
start-up and imports before the first stage. CPU time of a top-level stage is the process's (all
threads: the loader's readers, the second fact thread), that of a fact or rule its own thread's (the
process's CPU over a fact computed on the second thread counted the main thread's work at the same
time too: ``gpu_gaps`` read 1.46 s at 1M kernels for about 0.85 s of its own); CPU time is steadier
than wall time on a shared machine. Run it twice to see a re-analysis served from the trace cache
(``--no-cache`` to see the loader every time). Byte-compile the package first where
``PYTHONDONTWRITEBYTECODE`` is set (``python -m compileall -q analyzer``; benchmarks/run.py does):
otherwise start-up includes compiling every module from source, which an installed copy never does.
``STAGES_TOP=N`` lists the N most costly facts and rules (default 16).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

T0_WALL, T0_CPU = time.perf_counter(), time.process_time()  # as early as we can, before the imports
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import analyzer.watchdog as watchdog  # noqa: E402

_real_stage = watchdog.stage
_local = threading.local()  # .depth: this thread's stage nesting
_totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])  # name -> wall, cpu, count
_first = [None]  # (wall, cpu) when the first stage began


@contextlib.contextmanager
def _timed_stage(name: str) -> Iterator[None]:
    if _first[0] is None:
        _first[0] = (time.perf_counter(), time.process_time())  # type: ignore[assignment]
    depth = getattr(_local, "depth", 0)
    second = threading.current_thread() is not threading.main_thread()
    if depth == 0 and not second:
        key = name
    else:
        key = ("  fact " if name.startswith("fact ") else "  rule ") + name.split(" ", 1)[1]
        key += " [2nd thread]" if second else ""
    clock = time.process_time if key == name else time.thread_time  # a fact or rule: its own thread's
    w, c = time.perf_counter(), clock()
    _local.depth = depth + 1
    try:
        with _real_stage(name):
            yield
    finally:
        _local.depth = depth
        t = _totals[key]
        t[0] += time.perf_counter() - w
        t[1] += clock() - c
        t[2] += 1


watchdog.stage = _timed_stage  # type: ignore[assignment]  # before the modules that import it


def main(argv: list[str]) -> int:
    from analyzer.cli import cli

    if not any(Path(__file__).resolve().parents[1].joinpath("analyzer", "__pycache__").glob("cli.*.pyc")):
        print("note: analyzer is not byte-compiled (PYTHONDONTWRITEBYTECODE?): start-up includes compiling "
              "every module from source, which an installed copy never does; run "
              "`python -m compileall -q analyzer` first (benchmarks/run.py does)", file=sys.stderr)
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    args = list(argv)
    if "-o" not in args and "--output" not in args:
        args += ["-o", os.path.join(tempfile.mkdtemp(prefix="stages-"), "report.html")]
    try:
        cli.main(args=[*args, "-q"], prog_name="analyze", standalone_mode=False)
    except SystemExit as exc:  # --fail-on and friends
        if exc.code not in (0, 1, None):
            raise
    wall, cpu = time.perf_counter() - T0_WALL, time.process_time() - T0_CPU
    print(f"{'stage':<44} {'wall s':>8} {'CPU s':>8}")
    if _first[0] is not None:
        fw, fc = _first[0]
        print(f"{'start-up and imports (before the first stage)':<44} {fw - T0_WALL:8.2f} {fc - T0_CPU:8.2f}")
    top = [(k, v) for k, v in _totals.items() if not k.startswith(" ")]
    for name, (w, c, _) in top:
        print(f"{name:<44} {w:8.2f} {c:8.2f}")
    inner = sorted(((k, v) for k, v in _totals.items() if k.startswith(" ")), key=lambda kv: -kv[1][0])
    for name, (w, c, n) in inner[:int(os.environ.get("STAGES_TOP", "16"))]:
        print(f"{(name + (f' (x{n})' if n > 1 else ''))[:56]:<56} {w:8.2f} {c:8.2f}")
    print(f"{'whole process':<44} {wall:8.2f} {cpu:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
