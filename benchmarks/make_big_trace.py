"""Build a big nsys SQLite trace by replaying a real export back to back.

    python benchmarks/make_big_trace.py SRC.sqlite[.xz] OUT.sqlite --kernels 1000000

The replayed window is the source's GPU activity: from the first API call that launched GPU work to the
last GPU operation's end, widened to the NVTX ranges that overlap it (so ranges stay properly nested).
Kernels, memcpy, memset, synchronization, runtime/driver API calls and NVTX ranges inside the window
are copied ``R`` times, copy ``i`` shifted by ``i`` window periods in time and by ``i`` correlation-id
spans (so correlation joins stay unique per process); ``StringIds`` and every other table are shared.
All copying is ``INSERT ... SELECT`` inside SQLite (no Python rows), so a million kernels take seconds.
``ANALYSIS_DETAILS`` is stretched to cover the new span. Used by ``bench_load.py`` and later benchmarks.
"""
from __future__ import annotations

import argparse
import lzma
import math
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ACTIVITY = {
    # table: (time columns, has correlationId)
    "CUPTI_ACTIVITY_KIND_KERNEL": True,
    "CUPTI_ACTIVITY_KIND_MEMCPY": True,
    "CUPTI_ACTIVITY_KIND_MEMSET": True,
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": True,
    "CUPTI_ACTIVITY_KIND_RUNTIME": True,
    "CUPTI_ACTIVITY_KIND_DRIVER": True,
    "NVTX_EVENTS": False,
}
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
NVTX_RANGE_TYPES = "(34, 59, 60)"
GAP_NS = 10_000  # idle time between two replayed copies


def _tables(conn: sqlite3.Connection, schema: str = "main") -> set[str]:
    return {r[0] for r in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str, schema: str = "main") -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA {schema}.table_info("{table}")')]


def _window(conn: sqlite3.Connection, tables: set[str]) -> tuple[int, int]:
    gpu = [t for t in GPU_TABLES if t in tables]
    api = [t for t in API_TABLES if t in tables]
    if not gpu or not api:
        raise SystemExit("error: the source has no GPU activity or no API tables to replay")
    corr = " UNION ".join(f"SELECT correlationId FROM src.{t}" for t in gpu)
    api_union = " UNION ALL ".join(f"SELECT start, correlationId FROM src.{t}" for t in api)
    w0 = conn.execute(f"SELECT min(a.start) FROM ({api_union}) a WHERE a.correlationId IN ({corr})").fetchone()[0]
    w1 = conn.execute(
        "SELECT max(e) FROM (" + " UNION ALL ".join(f"SELECT max(end) AS e FROM src.{t}" for t in gpu) + ")"
    ).fetchone()[0]
    if w0 is None or w1 is None:
        raise SystemExit("error: no GPU operation in the source is joined to an API call")
    if "NVTX_EVENTS" in tables:
        for _ in range(8):  # widen to overlapping ranges until stable (outer ranges pull in more)
            lo, hi = conn.execute(
                f"SELECT min(start), max(end) FROM src.NVTX_EVENTS WHERE eventType IN {NVTX_RANGE_TYPES} "
                f"AND end IS NOT NULL AND start < ? AND end > ?", (w1, w0)).fetchone()
            if lo is None:
                break
            n0, n1 = min(w0, lo), max(w1, hi)
            if (n0, n1) == (w0, w1):
                break
            w0, w1 = n0, n1
    return int(w0), int(w1)


def build(src: Path, out: Path, kernels: int, *, verbose: bool = True) -> dict[str, int]:
    """Write ``out`` with at least ``kernels`` kernels; return row counts per replayed table."""
    t0 = time.perf_counter()
    if out.exists():
        out.unlink()
    shutil.copyfile(src, out)
    conn = sqlite3.connect(out, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -262144")
    conn.execute(f"ATTACH DATABASE 'file:{src.resolve()}?mode=ro' AS src")
    tables = _tables(conn, "src")
    w0, w1 = _window(conn, tables)
    period = w1 - w0 + GAP_NS
    k_window = conn.execute(
        "SELECT count(*) FROM src.CUPTI_ACTIVITY_KIND_KERNEL WHERE start >= ? AND end <= ?", (w0, w1)
    ).fetchone()[0]
    if k_window == 0:
        raise SystemExit("error: the replay window holds no kernels")
    reps = math.ceil(kernels / k_window)
    corr_span = 1 + max(
        conn.execute(f"SELECT coalesce(max(correlationId), 0) FROM src.{t}").fetchone()[0]
        for t, has_corr in ACTIVITY.items() if has_corr and t in tables
    )
    if verbose:
        print(f"window [{w0:,}, {w1:,}] ns holds {k_window} kernels; {reps:,} copies, period {period:,} ns",
              file=sys.stderr)
    conn.execute("BEGIN")
    conn.execute("CREATE TEMP TABLE reps (i INTEGER PRIMARY KEY)")
    conn.execute(
        "WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i + 1 < ?) "
        "INSERT INTO temp.reps SELECT i FROM r", (reps,))
    counts: dict[str, int] = {}
    for table in ACTIVITY:
        if table not in tables:
            continue
        cols = _columns(conn, table, "src")
        exprs = []
        for c in cols:
            if c in ("start", "end"):
                exprs.append(f'x."{c}" + reps.i * {period}')
            elif c == "correlationId":
                exprs.append(f'x."{c}" + reps.i * {corr_span}')
            else:
                exprs.append(f'x."{c}"')
        where = "x.start >= ? AND x.end <= ?"
        if table == "NVTX_EVENTS":
            where = f"x.eventType IN {NVTX_RANGE_TYPES} AND x.start >= ? AND coalesce(x.end, x.start) <= ?"
            # keep the events outside the window that name things (domains, categories) once
            conn.execute(f"DELETE FROM main.NVTX_EVENTS WHERE eventType IN {NVTX_RANGE_TYPES}")
        else:
            conn.execute(f'DELETE FROM main."{table}"')
        col_list = ", ".join(f'"{c}"' for c in cols)
        # the window's rows once into a small temp table, then one pass per copy over it
        conn.execute(f'CREATE TEMP TABLE "w_{table}" AS SELECT * FROM src."{table}" AS x WHERE {where}',
                     (w0, w1))
        conn.execute(
            f'INSERT INTO main."{table}" ({col_list}) SELECT {", ".join(exprs)} '
            f'FROM temp.reps AS reps CROSS JOIN temp."w_{table}" AS x')
        counts[table] = conn.execute(f'SELECT count(*) FROM main."{table}"').fetchone()[0]
    new_max = w1 + (reps - 1) * period
    if "ANALYSIS_DETAILS" in tables:
        row = conn.execute("SELECT startTime, stopTime, duration FROM main.ANALYSIS_DETAILS").fetchone()
        if row and None not in row:
            a_start, a_stop, a_dur = row
            if a_start <= w0:
                stop = max(a_stop, new_max)
                conn.execute("UPDATE main.ANALYSIS_DETAILS SET stopTime = ?, duration = ?", (stop, stop - a_start))
            else:  # events counted from the session start (2023.1 exports)
                dur = max(a_dur, new_max)
                conn.execute("UPDATE main.ANALYSIS_DETAILS SET stopTime = ?, duration = ?", (a_start + dur, dur))
    conn.execute("COMMIT")
    conn.execute("DETACH DATABASE src")
    conn.close()
    if verbose:
        size = out.stat().st_size
        summary = ", ".join(f"{t.replace('CUPTI_ACTIVITY_KIND_', '').lower()} {n:,}" for t, n in counts.items())
        print(f"wrote {out} ({size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f} s: {summary}", file=sys.stderr)
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path, help="a real nsys SQLite export")
    ap.add_argument("out", type=Path, help="the big SQLite to write (overwritten)")
    ap.add_argument("--kernels", type=int, default=1_000_000, help="at least this many kernels")
    args = ap.parse_args(argv)
    if args.src.resolve() == args.out.resolve():
        ap.error("OUT must differ from SRC")
    with tempfile.TemporaryDirectory(prefix="make_big_trace-") as tmp:
        src = args.src
        if src.suffix == ".xz":  # a committed export (tests/data/*.sqlite.xz): decompressed to a temporary file
            src = Path(tmp) / src.with_suffix("").name
            with lzma.open(args.src) as f, open(src, "wb") as dst:
                shutil.copyfileobj(f, dst, 1 << 20)
        with open(src, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                ap.error(f"{args.src} is not an nsys SQLite export (.sqlite or .sqlite.xz)")
        build(src, args.out, args.kernels)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
