"""Where one ``analyze`` run reaches its peak memory, stage by stage (resident MiB).

    python benchmarks/memstages.py TRACE [analyze options...]      e.g. big_1M.sqlite --no-cache

Runs the real CLI in this process (``-o`` defaults to a temporary HTML file, ``-q`` is added) while a
thread reads ``VmRSS`` from ``/proc/self/status`` every 20 ms and charges it to the stage the main
thread is in (:func:`analyzer.watchdog.current_stage`: ``rules > rule GPU001 > fact gpu_gaps``, with the
last progress note). Prints, in order of first appearance, the highest RSS seen in each stage and the
RSS when it was first seen (``MEMSTAGES_STACK=300``: and the analyzer frames the main thread was in
at the peak, innermost first; ``MEMSTAGES_FACTS=1``: and the facts and shared values the fact stores held
then, largest first, in MiB of their arrays, each array once and the trace's own columns not at all), then the
process's peak (``VmHWM``, which the kernel keeps exactly; the sampler can miss a short spike between two
reads). Linux only.
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
#: also show what the fact stores held at each stage's peak (facts and memo values of 1 MiB or more)
FACTS = os.environ.get("MEMSTAGES_FACTS", "") not in ("", "0")


def _arrays(value: Any, depth: int = 0) -> list[Any]:
    """The numpy arrays a fact or memo value holds (frames: their columns' arrays, categoricals' codes;
    containers and plain objects: their items, a few levels down)."""
    import numpy as np
    import pandas as pd

    if depth > 4:
        return []
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, pd.Series):
        value = value.to_frame()
    if isinstance(value, pd.DataFrame):
        out = []
        for i in range(value.shape[1]):
            arr = value.iloc[:, i].array
            if isinstance(arr, pd.Categorical):
                out.append(np.asarray(arr.codes))
            else:
                data = getattr(arr, "_ndarray", None)
                out.extend([data] if isinstance(data, np.ndarray) else [])
        return out
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (tuple, list)):
        items = list(value)
    else:
        items = list(getattr(value, "__dict__", {}).values())
    return [a for v in items for a in _arrays(v, depth + 1)]


def _root(arr: Any) -> int:
    """The id of the array owning ``arr``'s memory (a view's base, followed to the end)."""
    while getattr(arr, "base", None) is not None:
        arr = arr.base
    return id(arr)


def _held(stores: list[Any]) -> str:
    """The facts (and ``memo:`` values) the live fact stores hold, largest first (``timeline_segments
    1834``): MiB of arrays not already counted, the trace's own columns (which a fact may share) and
    earlier facts' arrays not charged again."""
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    for store in stores:
        trace = store.trace
        for frame in list(getattr(trace, "__dict__", {}).values()):
            if frame is not None and type(frame).__name__ == "DataFrame":
                seen.update(_root(a) for a in _arrays(frame))
    for store in stores:
        named = [(n, v) for n, v in list(store._cache.items())]
        named += [("memo:" + k, v) for k, v in list(store._memo.items())]
        for name, value in named:
            for arr in _arrays(value):
                root = _root(arr)
                if root not in seen:
                    seen.add(root)
                    sizes[name] = sizes.get(name, 0) + int(arr.nbytes)
    shown = sorted(((n, b >> 20) for n, b in sizes.items() if b >= 1 << 20), key=lambda x: -x[1])
    return ", ".join(f"{n} {mib}" for n, mib in shown) or "(nothing of 1 MiB or more)"


def _status(key: str) -> int:
    """``key`` (VmRSS, VmHWM) of this process in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main(argv: list[str]) -> int:
    import weakref

    from analyzer.cli import cli
    from analyzer.facts.registry import FactStore

    stores: list[weakref.ref[Any]] = []  # FactStore is a dataclass (unhashable): no WeakSet
    if FACTS:  # every fact store made from now on, to read what it holds at a peak
        made = FactStore.__post_init__

        def post_init(self: Any) -> None:
            made(self)
            stores.append(weakref.ref(self))

        FactStore.__post_init__ = post_init  # type: ignore[method-assign]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    args = list(argv)
    if "-o" not in args and "--output" not in args:
        args += ["-o", os.path.join(tempfile.mkdtemp(prefix="memstages-"), "report.html")]
    peaks: dict[str, list[Any]] = {}  # stage -> [peak KiB, first KiB, first seen s, stack, held at the peak]
    main_id = threading.main_thread().ident
    done = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not done.is_set():
            rss = _status("VmRSS")
            where = watchdog.current_stage()
            entry = peaks.setdefault(where, [0, rss, time.perf_counter() - t0, "", ""])
            if rss > entry[0]:
                entry[0] = rss
                if STACKS:
                    frame = sys._current_frames().get(main_id)
                    entry[3] = " < ".join(f"{Path(f.f_code.co_filename).stem}:{line}" for f, line in
                                          traceback.walk_stack(frame) if "/analyzer/" in f.f_code.co_filename)[:STACKS]
                if FACTS:
                    try:
                        entry[4] = _held([x for x in (r() for r in list(stores)) if x is not None])
                    except RuntimeError:  # a store's dict changed while read: the next sample reads it
                        pass
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
    for where, (peak, first, seen, stack, held) in peaks.items():
        if peak / 1024 >= min_mib:
            print(f"{seen:7.2f} {first / 1024:9.0f} {peak / 1024:9.0f}  {where[:150]}")
            if stack:
                print(f"{'':27} at {stack}")
            if held:
                print(f"{'':27} held (MiB) {held}")
    print(f"process peak (VmHWM): {_status('VmHWM') / 1024:.0f} MiB; wall {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
