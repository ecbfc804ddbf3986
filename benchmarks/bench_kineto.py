"""Parse benchmark: our torch.profiler loader against Holistic Trace Analysis' parser, same files.

    python benchmarks/bench_kineto.py [TRACE...] [--scale 1,10,50] [--repeat 2] [--out DIR]

Each measurement runs in a fresh process (so peak RSS is that run's own) and is repeated; the best
wall time and its peak RSS are reported, with the ratios HTA / ours. What each side does:

* ours: ``analyzer.loading.load_trace(path)``: decompress, decode, and the whole trace model (GPU
  operations joined to their launching calls, the range tree, attribution), ready for every fact;
* HTA: ``hta.common.trace.Trace(trace_files={0: path}).parse_traces(max_ranks=1,
  use_multiprocessing=False)``: its parse into per-rank DataFrames plus symbol table, with HTA's
  default backend, before any analysis (``TraceAnalysis`` then also aligns and filters).

Inputs: the files named, else the committed torch.profiler GPU traces under ``tests/data/kineto/``;
``--scale K`` adds, for the largest input, a copy with its steps replayed K times back to back
(``make_big_kineto``: events shifted in time, correlation and flow ids offset), to show how both grow.
Results go to stdout (Markdown table) and ``benchmarks/RESULTS-kineto.md`` with ``--write``.
"""
from __future__ import annotations

import argparse
import gzip
import os
import platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OURS = """
import sys, time
sys.path.insert(0, {repo!r})
t = time.perf_counter()
from analyzer.loading import load_trace
tr = load_trace({path!r})
print("RESULT", time.perf_counter() - t, len(tr.kernels) + len(tr.memcpy) + len(tr.memset), len(tr.api), len(tr.nvtx))
"""
HTA = """
import logging, sys, time, warnings
logging.disable(logging.CRITICAL); warnings.simplefilter("ignore")
t = time.perf_counter()
from hta.common.trace import Trace
tr = Trace(trace_files={{0: {path!r}}}, trace_dir="/")
tr.parse_traces(max_ranks=1, use_multiprocessing=False)
df = tr.get_trace(0)
print("RESULT", time.perf_counter() - t, len(df), 0, 0)
"""


def run_measured(code: str) -> tuple[float, float]:
    """(wall s inside the child, peak RSS MB of the child) for one fresh-process run."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: exec the interpreter with stdout to the pipe
        os.close(r)
        os.dup2(w, 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.execv(sys.executable, [sys.executable, "-c", code])
    os.close(w)
    with os.fdopen(r) as fh:
        out = fh.read()
    _pid, status, usage = os.wait4(pid, 0)
    if status != 0:
        raise RuntimeError(f"benchmark child failed (status {status})")
    line = next(ln for ln in out.splitlines() if ln.startswith("RESULT"))
    return float(line.split()[1]), usage.ru_maxrss / 1024.0


def best_of(code: str, repeat: int) -> tuple[float, float]:
    runs = [run_measured(code) for _ in range(repeat)]
    return min(runs)  # the fastest run and its peak RSS


def default_inputs() -> list[Path]:
    folder = REPO / "tests" / "data" / "kineto"
    return sorted(p for p in folder.glob("*.pt.trace.json*") if not p.name.startswith("cpu_"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--scale", default="", help="comma-separated replay factors for the largest input, e.g. 10,50")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="also write benchmarks/RESULTS-kineto.md")
    args = ap.parse_args(argv)
    inputs = [p.resolve() for p in args.traces] or default_inputs()  # HTA reads paths below trace_dir="/"
    if not inputs:
        print("no torch.profiler GPU traces given or committed under tests/data/kineto/", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-kineto-"))
    if args.scale:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from make_big_kineto import replay

        base = max(inputs, key=lambda p: p.stat().st_size)
        for k in (int(x) for x in args.scale.split(",") if x.strip()):
            out = tmp / f"{base.name.split('.')[0]}_x{k}.pt.trace.json"
            replay(base, out, k)
            inputs.append(out)
    rows = []
    for path in inputs:
        size_mb = path.stat().st_size / 1e6
        raw_mb = len(gzip.decompress(path.read_bytes())) / 1e6 if path.suffix == ".gz" else size_mb
        ours_s, ours_mb = best_of(OURS.format(repo=str(REPO), path=str(path)), args.repeat)
        try:
            hta_s, hta_mb = best_of(HTA.format(path=str(path)), args.repeat)
        except RuntimeError as err:
            hta_s, hta_mb = float("nan"), float("nan")
            print(f"HTA failed on {path.name}: {err}", file=sys.stderr)
        rows.append((path.name, raw_mb, ours_s, ours_mb, hta_s, hta_mb))
        print(f"{path.name}: {raw_mb:.1f} MB JSON; ours {ours_s:.2f} s {ours_mb:.0f} MB; HTA {hta_s:.2f} s {hta_mb:.0f} MB",
              file=sys.stderr)
    lines = [
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"best of {args.repeat} fresh-process runs; peak RSS of that run.",
        "",
        "| trace | JSON MB | ours s | ours peak MB | HTA s | HTA peak MB | HTA/ours time | HTA/ours memory |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, raw_mb, os_, om, hs, hm in rows:
        lines.append(f"| {name} | {raw_mb:,.1f} | {os_:.2f} | {om:,.0f} | {hs:.2f} | {hm:,.0f} | "
                     f"{hs / os_:.1f}x | {hm / om:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        (REPO / "benchmarks" / "RESULTS-kineto.md").write_text(
            "# torch.profiler parse: ours vs HTA\n\n`python benchmarks/bench_kineto.py --scale ... --write`\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
