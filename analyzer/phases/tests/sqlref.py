"""Independent reference numbers, straight from an nsys SQLite export with ``sqlite3``.

No analyzer code is used here: ranges come from ``NVTX_EVENTS`` (push/pop and start/end, text inline
or through ``StringIds``), GPU ops are joined to the runtime/driver API call that launched them by
``correlationId`` within the same process (``globalPid``/``globalTid`` >> 24), and an op belongs to a
range instance when its launch call started inside the range, ``[start, end)``, on ANY thread of the
range's process. Nested ranges are therefore included by time containment, with no parent links.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

RANGE_TYPES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange, Nvtxt* variants
PID = "((({col}) >> 24) & 16777215)"


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _launch_sql(con: sqlite3.Connection) -> str:
    tables = _tables(con)
    apis = [t for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER") if t in tables]
    api = " UNION ALL ".join(f"SELECT start, globalTid, correlationId FROM {t}" for t in apis)
    parts = []
    for op, table in (("kernel", "CUPTI_ACTIVITY_KIND_KERNEL"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                      ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
        if table in tables:
            parts.append(
                f"SELECT a.start AS api_start, {PID.format(col='a.globalTid')} AS pid, "
                f"o.\"end\" - o.start AS dur, '{op}' AS op, o.start AS op_start, o.\"end\" AS op_end "
                f"FROM {table} o JOIN ({api}) a "
                f"ON a.correlationId = o.correlationId "
                f"AND {PID.format(col='a.globalTid')} = {PID.format(col='o.globalPid')}")
    return " UNION ALL ".join(parts)


def range_totals(path: Path) -> pd.DataFrame:
    """Per range text: ``count, cpu_total_ns, kernel_ns, kernel_count, gpu_ns, op_count``."""
    con = connect(path)
    try:
        text = "COALESCE(n.text, s.value)" if "StringIds" in _tables(con) else "n.text"
        con.execute("CREATE TEMP TABLE launches AS " + _launch_sql(con))
        con.execute("CREATE INDEX temp.launches_pid_start ON launches(pid, api_start)")
        con.execute(
            f"CREATE TEMP TABLE ranges AS SELECT n.rowid AS rid, n.start, n.\"end\", {text} AS text, "
            f"{PID.format(col='n.globalTid')} AS pid FROM NVTX_EVENTS n "
            f"LEFT JOIN StringIds s ON s.id = n.textId "
            f"WHERE n.eventType IN {RANGE_TYPES} AND n.\"end\" IS NOT NULL AND n.\"end\" >= n.start")
        sql = """
        WITH per_instance AS (
            SELECT r.rid, r.text, r."end" - r.start AS cpu,
                   COALESCE(SUM(CASE WHEN l.op = 'kernel' THEN l.dur END), 0) AS kernel_ns,
                   COUNT(CASE WHEN l.op = 'kernel' THEN 1 END) AS kernel_count,
                   COALESCE(SUM(l.dur), 0) AS gpu_ns,
                   COUNT(l.dur) AS op_count
            FROM ranges r LEFT JOIN launches l
              ON l.pid = r.pid AND l.api_start >= r.start AND l.api_start < r."end"
            GROUP BY r.rid)
        SELECT text AS name, COUNT(*) AS count, SUM(cpu) AS cpu_total_ns, SUM(kernel_ns) AS kernel_ns,
               SUM(kernel_count) AS kernel_count, SUM(gpu_ns) AS gpu_ns, SUM(op_count) AS op_count
        FROM per_instance GROUP BY text ORDER BY text
        """
        return pd.read_sql_query(sql, con)
    finally:
        con.close()


def range_instances(path: Path, text: str) -> pd.DataFrame:
    """Per instance of ranges called ``text`` (ordered by start): ``start, cpu_ns, kernel_ns``."""
    con = connect(path)
    try:
        con.execute("CREATE TEMP TABLE launches AS " + _launch_sql(con))
        con.execute("CREATE INDEX temp.launches_pid_start ON launches(pid, api_start)")
        sql = f"""
        WITH r AS (
            SELECT n.rowid AS rid, n.start, n."end", {PID.format(col='n.globalTid')} AS pid
            FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType IN {RANGE_TYPES} AND COALESCE(n.text, s.value) = ?
              AND n."end" IS NOT NULL)
        SELECT r.start, r."end" - r.start AS cpu_ns,
               COALESCE(SUM(CASE WHEN l.op = 'kernel' THEN l.dur END), 0) AS kernel_ns,
               COALESCE(SUM(l.dur), 0) AS gpu_ns
        FROM r LEFT JOIN launches l ON l.pid = r.pid AND l.api_start >= r.start AND l.api_start < r."end"
        GROUP BY r.rid ORDER BY r.start
        """
        return pd.read_sql_query(sql, con, params=(text,))
    finally:
        con.close()


def kernel_totals(path: Path) -> pd.DataFrame:
    """Per kernel (demangled name, else short name): ``name, count, total_ns`` over the whole trace."""
    con = connect(path)
    try:
        sql = """
        SELECT COALESCE(NULLIF(d.value, ''), s.value) AS name, COUNT(*) AS count,
               SUM(k."end" - k.start) AS total_ns
        FROM CUPTI_ACTIVITY_KIND_KERNEL k
        LEFT JOIN StringIds d ON d.id = k.demangledName
        LEFT JOIN StringIds s ON s.id = k.shortName
        GROUP BY 1 ORDER BY 1
        """
        return pd.read_sql_query(sql, con)
    finally:
        con.close()


def range_timing(path: Path, text: str) -> pd.DataFrame:
    """Per instance of ranges called ``text`` (ordered by start): ``start, end, first_op_start,
    last_op_end`` (ops launched inside, any thread of the process; NULL when none), ``first_launch``
    (the first launch call's start), ``prev_end`` (the
    latest end of the ops the process launched before the range began) and ``syncs``:
    runtime calls on the range's own thread, started inside it, named ``cuda*Synchronize`` (device,
    stream, event, thread) or a synchronous ``cudaMemcpy``/``cudaMemset`` (no ``Async``)."""
    con = connect(path)
    try:
        con.execute("CREATE TEMP TABLE launches AS " + _launch_sql(con))
        con.execute("CREATE INDEX temp.launches_pid_start ON launches(pid, api_start)")
        con.execute(
            "CREATE TEMP TABLE syncs AS SELECT a.start, a.globalTid AS tid FROM CUPTI_ACTIVITY_KIND_RUNTIME a "
            "JOIN StringIds s ON s.id = a.nameId WHERE (s.value LIKE 'cuda%Synchronize%' "
            "OR ((s.value LIKE 'cudaMemcpy%' OR s.value LIKE 'cudaMemset%') AND s.value NOT LIKE '%Async%'))")
        sql = f"""
        WITH r AS (
            SELECT n.rowid AS rid, n.start, n."end", n.globalTid AS tid, {PID.format(col='n.globalTid')} AS pid
            FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType IN {RANGE_TYPES} AND COALESCE(n.text, s.value) = ?
              AND n."end" IS NOT NULL)
        SELECT r.start, r."end", MIN(l.op_start) AS first_op_start, MAX(l.op_end) AS last_op_end,
               MIN(l.api_start) AS first_launch,
               (SELECT COUNT(*) FROM syncs y WHERE y.tid = r.tid AND y.start >= r.start
                AND y.start < r."end") AS syncs,
               (SELECT MAX(p.op_end) FROM launches p WHERE p.pid = r.pid AND p.api_start < r.start) AS prev_end
        FROM r LEFT JOIN launches l ON l.pid = r.pid AND l.api_start >= r.start AND l.api_start < r."end"
        GROUP BY r.rid ORDER BY r.start
        """
        return pd.read_sql_query(sql, con, params=(text,))
    finally:
        con.close()
