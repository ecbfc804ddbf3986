"""Parse benchmark: our torch.profiler loader against Holistic Trace Analysis' parser, same files.

    python benchmarks/bench_kineto.py [TRACE...] [--scale 10,52] [--repeat 3] [--big-gb 1] [--write]

Each measurement is a fresh process (interpreter start and imports included, as a user runs it),
repeated; the table gives each figure's median over the runs: wall seconds, CPU seconds (user +
system, from the kernel's accounting of the finished child: steadier than wall on a shared machine)
and peak RSS, then HTA / ours for time and memory. What each side does:

* ours: ``analyzer.loading.load_trace(path)``: decompress, decode, and the whole trace model (GPU
  operations joined to their launching calls, the range tree, attribution), ready for every fact;
* HTA: ``hta.common.trace.Trace(trace_files={0: path}).parse_traces(max_ranks=1,
  use_multiprocessing=False)``: its parse into per-rank DataFrames plus symbol table, with HTA's
  default backend, before any analysis (``TraceAnalysis`` then also aligns and filters).

Inputs: the files named, else every committed torch.profiler trace with GPU activity
(``tests/data/kineto``, ``tests/data/round3``, ``tests/data/public``). HTA reads plain and gzipped
JSON only, so an ``.xz`` input is recompressed to a temporary ``.json.gz`` that both sides read.
``--scale K`` adds, for the input with the most JSON text, a copy with its steps replayed K times back to back
(``make_big_kineto``: events shifted in time, correlation and flow ids offset), to show how both grow;
``--no-hta-above MB`` measures only ours on larger inputs (HTA holds the whole JSON as Python objects:
about 8x the text). A trace our loader refuses (no GPU activity) is listed with the reason.

The summary gives, over the traces both read, the geometric mean and the smallest of HTA / ours for
CPU time and for peak memory: the target is at least 5x the time at no more than half the memory
(HTA / ours memory at least 2). Each side's start-up alone (a fresh process that only imports what it
would use, no trace) is measured the same way and stated above the table: both import pandas, which is
most of every small trace's time and memory on either side, so the summary also gives the ratios beyond
start-up (each figure minus its side's start-up) over the traces of at least ``WORK_MB`` of JSON: what
the two parsers themselves cost. A third start-up, ``numpy`` and ``msgspec`` alone (all the streaming
decode itself imports), is stated too: the floor of a loader that built the model without pandas.

``--big-gb G`` adds the scale check of issue 34 (a 1 GB trace analyzed in under 4 GB): the input with the
most JSON replayed (``make_big_kineto``) to at least G GB of JSON, then, once each, ours loading it and
``analyze --no-cache`` on it (fresh processes; wall, CPU, peak RSS). HTA is not run on it: it holds the
whole document as Python objects (2.5 GB peak on the 311 MB replay of the committed table).
``--write`` also writes ``benchmarks/RESULTS-kineto.md``.
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import lzma
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OURS = """
import sys
sys.path.insert(0, {repo!r})
from analyzer.loading import load_trace
tr = load_trace({path!r})
print("RESULT", len(tr.kernels) + len(tr.memcpy) + len(tr.memset), len(tr.api), len(tr.nvtx))
"""
HTA = """
import logging, sys, warnings
logging.disable(logging.CRITICAL); warnings.simplefilter("ignore")
from hta.common.trace import Trace
tr = Trace(trace_files={{0: {path!r}}}, trace_dir="/")
tr.parse_traces(max_ranks=1, use_multiprocessing=False)
df = tr.get_trace(0)
print("RESULT", len(df), 0, 0)
"""


# start-up alone: the interpreter and each side's imports, no trace (both import pandas, with pyarrow)
OURS_START = """
import sys
sys.path.insert(0, {repo!r})
from analyzer.loading import load_trace
print("RESULT 0 0 0")
"""
#: what the streaming decode imports, nothing more: the start-up of a loader without pandas
FLOOR_START = """
import numpy, msgspec
print("RESULT 0 0 0")
"""
#: ``analyze --no-cache`` of one trace, report to a file (the whole program: load, facts, rules, report)
ANALYZE = """
import sys
sys.path.insert(0, {repo!r})
from analyzer.cli import main
rc = main([{path!r}, "--no-cache", "-o", {out!r}])
print("RESULT", rc, 0, 0)
sys.exit(rc)
"""
#: what each side's measured call produces (stated above the table: the two do not do the same work)
WORK = ("What each side produces: ours, ``load_trace``: the whole trace model (kernels, copies and memsets "
        "joined to their launching API calls; the range tree with each operation's range path and attribution; "
        "Python call stacks where recorded; GPUs, threads, memory events), every column typed, as pandas "
        "frames, ready for every fact; HTA, ``Trace.parse_traces``: one pandas frame of all events (its "
        "``args`` flattened to columns, names and categories numbered in a symbol table), before "
        "``TraceAnalysis`` aligns ranks, filters incomplete iterations or links kernels to their launches. "
        "Ours does more work per event; both decompress and decode every event of the file.")
HTA_START = """
import logging, sys, warnings
logging.disable(logging.CRITICAL); warnings.simplefilter("ignore")
from hta.common.trace import Trace
print("RESULT 0 0 0")
"""
#: traces with at least this much JSON (MB) enter the beyond-start-up ratios (below, the difference of
#: two start-ups of ~0.4 s is mostly noise)
WORK_MB = 5.0


class Failed(Exception):
    pass


def run_measured(code: str) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak RSS MB, last stdout line) of one fresh-process run."""
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # child: exec the interpreter with stdout to the pipe, stderr dropped
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.execv(sys.executable, [sys.executable, "-c", code])
    os.close(w)
    with os.fdopen(r) as fh:
        out = fh.read()
    _pid, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise Failed(f"exit status {status >> 8 if os.WIFEXITED(status) else status}")
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT")), "")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, line


def median_of(code: str, repeat: int) -> tuple[float, float, float]:
    runs = [run_measured(code) for _ in range(repeat)]
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]


def default_inputs() -> list[Path]:
    data = REPO / "tests" / "data"
    found = [p for p in (data / "kineto").glob("*.pt.trace.json*") if not p.name.startswith("cpu_")]
    found += list((data / "round3").glob("*.pt.trace.json*"))
    found += list((data / "public").rglob("*.pt.trace.json*")) + list((data / "public").rglob("*.json.gz"))
    return sorted(set(found))


def json_size(path: Path) -> int:
    opener = gzip.open if path.suffix == ".gz" else lzma.open if path.suffix == ".xz" else open
    with opener(path, "rb") as fh:
        return sum(len(b) for b in iter(lambda: fh.read(1 << 22), b""))


def readable_by_both(path: Path, tmp: Path) -> Path:
    """``path``, or for ``.xz`` a gzipped copy (HTA reads plain and gzipped JSON only)."""
    if path.suffix != ".xz":
        return path
    out = tmp / (path.name.removesuffix(".xz") + ".gz")
    with lzma.open(path, "rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
        for block in iter(lambda: src.read(1 << 22), b""):
            dst.write(block)
    return out


def versions() -> str:
    code = ("import importlib.metadata as m\n"
            "for p in ('msgspec', 'pandas', 'numpy', 'HolisticTraceAnalysis'):\n"
            "    try: print(p, m.version(p))\n"
            "    except m.PackageNotFoundError: print(p, 'absent')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split("\n")
    return ", ".join(ln for ln in out if ln)


def commit() -> str:
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--scale", default="", help="comma-separated replay factors for the largest input, e.g. 10,52")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hta-above", type=float, default=0.0, metavar="MB",
                    help="skip HTA on inputs with more JSON than this (0: never skip)")
    ap.add_argument("--big-gb", type=float, default=0.0, metavar="GB",
                    help="also replay the largest input to at least GB of JSON and measure ours loading and "
                         "analyzing it, once (0: not)")
    ap.add_argument("--write", action="store_true", help="also write benchmarks/RESULTS-kineto.md")
    args = ap.parse_args(argv)
    inputs = [p.resolve() for p in args.traces] or default_inputs()  # HTA reads paths below trace_dir="/"
    if not inputs:
        print("no torch.profiler traces given or committed under tests/data", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-kineto-"))
    # byte-compile our package first, as installing it does (pip compiled HTA's): under
    # PYTHONDONTWRITEBYTECODE, or from a read-only checkout, every "ours" process would otherwise
    # compile the loading modules from source (0.05 s of CPU on a tiny trace), which no installed copy pays
    import compileall

    compileall.compile_dir(str(REPO / "analyzer"), quiet=1)
    scales = [int(x) for x in args.scale.split(",") if x.strip()]
    if scales:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from make_big_kineto import replay

        base = max(inputs, key=json_size)  # the most JSON text
        for k in scales:
            out = tmp / f"{base.name.split('.')[0]}_x{k}.pt.trace.json"
            replay(base, out, k)
            inputs.append(out)
    start_ours = median_of(OURS_START.format(repo=str(REPO)), args.repeat)
    floor = median_of(FLOOR_START, args.repeat)
    try:
        start_hta: tuple[float, float, float] | None = median_of(HTA_START, args.repeat)
    except Failed:
        start_hta = None
    rows: list[tuple] = []
    for path in inputs:
        raw_mb = json_size(path) / 1e6
        read = readable_by_both(path, tmp)
        try:
            ours = median_of(OURS.format(repo=str(REPO), path=str(read)), args.repeat)
        except Failed as err:
            rows.append((path.name, raw_mb, None, None, f"ours refused it ({err})"))
            print(f"{path.name}: ours refused it ({err})", file=sys.stderr)
            continue
        hta: tuple[float, float, float] | None = None
        note = ""
        if args.no_hta_above and raw_mb > args.no_hta_above:
            note = f"HTA not run (over {args.no_hta_above:g} MB)"
        else:
            try:
                hta = median_of(HTA.format(path=str(read)), args.repeat)
            except Failed as err:
                note = f"HTA failed ({err})"
        rows.append((path.name, raw_mb, ours, hta, note))
        print(f"{path.name}: {raw_mb:.1f} MB JSON; ours {ours[1]:.2f} CPU s {ours[2]:.0f} MB"
              + (f"; HTA {hta[1]:.2f} CPU s {hta[2]:.0f} MB" if hta else f"; {note}"), file=sys.stderr)
    text = table(rows, args.repeat, (start_ours, start_hta), floor)
    if args.big_gb > 0:
        originals = inputs[:len(inputs) - len(scales)] or inputs  # not a replay made for --scale
        text += "\n" + big_trace(max(originals, key=json_size), args.big_gb, tmp)
    print(text)
    if args.write:
        (REPO / "benchmarks" / "RESULTS-kineto.md").write_text(
            "# torch.profiler parse: ours vs HTA\n\n"
            f"`python benchmarks/bench_kineto.py{' --scale ' + args.scale if args.scale else ''} "
            f"--repeat {args.repeat}{f' --no-hta-above {args.no_hta_above:g}' if args.no_hta_above else ''}"
            f"{f' --big-gb {args.big_gb:g}' if args.big_gb else ''} --write`\n\n"
            + text)
    return 0


def big_trace(base: Path, gb: float, tmp: Path) -> str:
    """The scale check: ``base`` replayed to at least ``gb`` GB of JSON, loaded and analyzed by ours once."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_big_kineto import replay

    copies = max(1, math.ceil(gb * 1e9 / json_size(base)))
    path = replay(base, tmp / f"{base.name.split('.')[0]}_x{copies}.pt.trace.json", copies)
    size = path.stat().st_size / 1e6
    print(f"{path.name}: {size:,.1f} MB JSON (scale check)", file=sys.stderr)
    lines = [f"Scale check (`--big-gb {gb:g}`): {base.name} replayed {copies} times, {size:,.1f} MB of JSON; "
             "one fresh-process run each, HTA not run (it holds the whole document as Python objects).", "",
             "| ours | wall s | CPU s | peak MB |", "|---|---:|---:|---:|"]
    for what, code in (("load_trace", OURS.format(repo=str(REPO), path=str(path))),
                       ("analyze --no-cache", ANALYZE.format(repo=str(REPO), path=str(path),
                                                             out=str(tmp / "big-report.md")))):
        try:
            wall, cpu, peak, _line = run_measured(code)
            lines.append(f"| {what} | {wall:.1f} | {cpu:.1f} | {peak:,.0f} |")
        except Failed as err:
            lines.append(f"| {what} | failed ({err}) | | |")
        print(lines[-1], file=sys.stderr)
    path.unlink()
    return "\n".join(lines) + "\n"


def table(rows: list[tuple], repeat: int,
          start: tuple[tuple[float, float, float], tuple[float, float, float] | None] | None = None,
          floor: tuple[float, float, float] | None = None) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f} at the end; {when}; commit {commit()}; "
        f"{versions()}. Medians of {repeat} fresh-process runs (interpreter start and imports included); "
        "CPU = user + system seconds of the process; peak = its peak RSS.",
        "",
        WORK,
        "",
        *([] if start is None else [_start_line(*start) + ("" if floor is None else _floor_line(floor)), ""]),
        "| trace | JSON MB | ours wall s | ours CPU s | ours peak MB | HTA wall s | HTA CPU s | HTA peak MB "
        "| HTA/ours CPU | HTA/ours peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cpu_ratios, mem_ratios = [], []
    work_cpu, work_mem = [], []  # beyond each side's start-up, on traces of at least WORK_MB
    for name, raw_mb, ours, hta, note in rows:
        if ours is None:
            lines.append(f"| {name} | {raw_mb:,.1f} | {note} | | | | | | | |")
            continue
        cells = [name, f"{raw_mb:,.1f}", f"{ours[0]:.2f}", f"{ours[1]:.2f}", f"{ours[2]:,.0f}"]
        if hta is None:
            cells += [note, "", "", "", ""]
        else:
            cpu_ratios.append(hta[1] / ours[1])
            mem_ratios.append(hta[2] / ours[2])
            if start is not None and start[1] is not None and raw_mb >= WORK_MB:
                (_w0, c0, m0), (_w1, c1, m1) = start[0], start[1]
                if ours[1] > c0 and ours[2] > m0 and hta[1] > c1 and hta[2] > m1:
                    work_cpu.append((hta[1] - c1) / (ours[1] - c0))
                    work_mem.append((hta[2] - m1) / (ours[2] - m0))
            cells += [f"{hta[0]:.2f}", f"{hta[1]:.2f}", f"{hta[2]:,.0f}", f"{cpu_ratios[-1]:.1f}x",
                      f"{mem_ratios[-1]:.1f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    if cpu_ratios:
        def gmean(xs: list[float]) -> float:
            return math.exp(sum(math.log(x) for x in xs) / len(xs))

        lines += ["", f"Over the {len(cpu_ratios)} traces both read: HTA / ours CPU time geometric mean "
                  f"{gmean(cpu_ratios):.1f}x (smallest {min(cpu_ratios):.1f}x), peak memory geometric mean "
                  f"{gmean(mem_ratios):.1f}x (smallest {min(mem_ratios):.1f}x). Target: time at least 5x, "
                  "memory at least 2x."]
        if work_cpu:
            lines += ["", f"Beyond start-up (each figure minus its side's start-up above), over the {len(work_cpu)} "
                      f"traces of at least {WORK_MB:g} MB of JSON: HTA / ours CPU time geometric mean "
                      f"{gmean(work_cpu):.1f}x (smallest {min(work_cpu):.1f}x), peak memory geometric mean "
                      f"{gmean(work_mem):.1f}x (smallest {min(work_mem):.1f}x): what the parsers themselves cost."]
    return "\n".join(lines) + "\n"


def _start_line(ours: tuple[float, float, float], hta: tuple[float, float, float] | None) -> str:
    """The start-up both sides pay before reading a byte (interpreter and imports, pandas among them):
    the floor of every row below, which bounds the ratio on small traces."""
    text = (f"Start-up alone (interpreter and imports, no trace; medians as below): ours {ours[0]:.2f} s wall, "
            f"{ours[1]:.2f} s CPU, {ours[2]:,.0f} MB peak")
    if hta is None:
        return text + "; HTA's failed."
    return (text + f"; HTA {hta[0]:.2f} s wall, {hta[1]:.2f} s CPU, {hta[2]:,.0f} MB peak. Both import pandas "
            "(and pyarrow through it), so on a trace whose parse takes less than that, the ratio "
            "tends to 1.")


def _floor_line(floor: tuple[float, float, float]) -> str:
    return (f" For comparison, numpy and msgspec alone (all the streaming decode imports): {floor[0]:.2f} s wall, "
            f"{floor[1]:.2f} s CPU, {floor[2]:,.0f} MB peak: where a loader that built the model without pandas "
            "would start.")


if __name__ == "__main__":
    sys.exit(main())
