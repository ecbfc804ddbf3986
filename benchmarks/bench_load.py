"""Load-time benchmark: our ``load_trace`` against the obvious alternatives, on one big trace.

    python benchmarks/make_big_trace.py SRC.sqlite BIG.sqlite --kernels 1000000
    python benchmarks/bench_load.py BIG.sqlite [--repeat 3] [--only NAME ...]

Each contender runs in its own Python subprocess (so peak RSS is its own): it reports its wall time
inside the process and its peak RSS from ``resource.getrusage`` (``RUSAGE_SELF``, or ``RUSAGE_CHILDREN``
for ``nsys analyze``, which it runs as its child). Contenders:

``load_trace``          our loader, default backend (ADBC when installed), full Trace with attribution
``load_trace[sqlite3]`` our loader forced onto the standard-library backend
``sqlite3.fetchall``    Python's sqlite3: fetchall of the same tables and columns our loader reads
``pandas.read_sql``     pandas.read_sql_query of the same columns (the naive loader)
``nsys analyze``        NVIDIA's expert system on the same file (when ``nsys`` is found), all its rules

The best of ``--repeat`` runs is reported (warm page cache), with ratios against ``load_trace``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = ("load_trace", "load_trace[sqlite3]", "sqlite3.fetchall", "pandas.read_sql", "nsys analyze")


def _fetch_plan() -> list[tuple[str, list[str], str | None]]:
    """(table, columns, where) that our loader reads, from the loader's own constants."""
    from analyzer.loading.nsys_sqlite import schema as ns

    plan = [
        (ns.KERNEL_TABLE, list(ns.KERNEL_FETCH.values()), None),
        (ns.MEMCPY_TABLE, list(ns.MEMCPY_FETCH.values()), None),
        (ns.MEMSET_TABLE, list(ns.MEMSET_FETCH.values()), None),
        (ns.SYNC_TABLE, list(ns.SYNC_FETCH.values()), None),
        (ns.RUNTIME_TABLE, list(ns.API_FETCH.values()), None),
        (ns.DRIVER_TABLE, list(ns.API_FETCH.values()), None),
        (ns.NVTX_TABLE, list(ns.NVTX_FETCH.values()) + ["text"], ns.NVTX_WANTED),
        ("StringIds", ["id", "value"], None),
    ]
    return plan


def _present(conn, plan):
    out = []
    for table, cols, where in plan:
        have = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
        if have:
            out.append((table, [c for c in cols if c in have], where))
    return out


def _sql(table: str, cols: list[str], where: str | None) -> str:
    return f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{table}"' + (
        f" WHERE {where}" if where else "")


# ------------------------------------------------------------------------------------------ children
def child(name: str, path: str) -> dict:
    sys.path.insert(0, str(REPO))
    t0 = time.perf_counter()
    rows = 0
    who = resource.RUSAGE_SELF
    if name.startswith("load_trace"):
        if name == "load_trace[sqlite3]":
            os.environ["ANALYZER_SQLITE_BACKEND"] = "sqlite3"
        from analyzer.loading import load_trace

        trace = load_trace(path)
        rows = len(trace.kernels) + len(trace.api) + len(trace.nvtx)
        from analyzer.loading.sqlite_reader import choose_backend

        extra = {"backend": choose_backend()}
    elif name == "sqlite3.fetchall":
        import sqlite3

        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        keep = []
        for table, cols, where in _present(conn, _fetch_plan()):
            keep.append(conn.execute(_sql(table, cols, where)).fetchall())
            rows += len(keep[-1])
        extra = {}
    elif name == "pandas.read_sql":
        import sqlite3

        import pandas as pd

        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
        keep = []
        for table, cols, where in _present(conn, _fetch_plan()):
            keep.append(pd.read_sql_query(_sql(table, cols, where), conn))
            rows += len(keep[-1])
        extra = {}
    elif name == "nsys analyze":
        from analyzer.loading.nsys_rep import find_nsys

        nsys = find_nsys()
        if nsys is None:
            return {"skipped": "nsys not found"}
        # nsys may add tables/indexes to its input: give it a private copy
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / Path(path).name
            shutil.copyfile(path, copy)
            t0 = time.perf_counter()
            proc = subprocess.run([nsys, "analyze", str(copy)], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, check=False)
            elapsed = time.perf_counter() - t0
        who = resource.RUSAGE_CHILDREN
        rss = resource.getrusage(who).ru_maxrss
        return {"inner_s": elapsed, "maxrss_kb": rss, "rc": proc.returncode,
                "tail": proc.stdout.strip().splitlines()[-1:] if proc.returncode else []}
    else:
        raise SystemExit(f"unknown contender {name}")
    elapsed = time.perf_counter() - t0
    return {"inner_s": elapsed, "maxrss_kb": resource.getrusage(who).ru_maxrss, "rows": rows, **extra}


# ------------------------------------------------------------------------------------------ parent
def run_one(name: str, path: Path) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", name, str(path)],
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=2, help="runs per contender; the best is reported")
    ap.add_argument("--only", nargs="*", choices=CONTENDERS, help="run only these")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, str(args.trace))))
        return 0
    path = args.trace.resolve()
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
              for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")}
    conn.close()
    print(f"{path.name}: {path.stat().st_size / 1e6:.0f} MB, kernels {counts['CUPTI_ACTIVITY_KIND_KERNEL']:,}, "
          f"runtime API {counts['CUPTI_ACTIVITY_KIND_RUNTIME']:,}, NVTX {counts['NVTX_EVENTS']:,}; "
          f"{os.cpu_count()} CPUs; best of {args.repeat}")
    results: dict[str, dict] = {}
    for name in args.only or CONTENDERS:
        best: dict | None = None
        for _ in range(max(1, args.repeat)):
            res = run_one(name, path)
            if "inner_s" not in res:
                best = res
                break
            if best is None or res["inner_s"] < best["inner_s"]:
                best = res
        results[name] = best or {}
    base = results.get("load_trace", {})
    print(f"{'contender':22} {'time s':>8} {'peak MB':>8} {'time/ours':>10} {'mem/ours':>9}  notes")
    for name, res in results.items():
        if "inner_s" not in res:
            print(f"{name:22} {'-':>8} {'-':>8} {'':>10} {'':>9}  {res.get('skipped') or res.get('error')}")
            continue
        mb = res["maxrss_kb"] / 1024
        tr = res["inner_s"] / base["inner_s"] if base.get("inner_s") else float("nan")
        mr = res["maxrss_kb"] / base["maxrss_kb"] if base.get("maxrss_kb") else float("nan")
        note = res.get("backend", "")
        if res.get("rc"):
            note = f"exit {res['rc']}: {' '.join(res.get('tail', []))}"
        print(f"{name:22} {res['inner_s']:8.2f} {mb:8.0f} {tr:10.2f} {mr:9.2f}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
