"""Fuzzing the nsys SQLite loader (and everything behind it) with damaged copies of real exports.

A case is a real export (the 2025.3 ``alloc_churn_fixed`` trace from ``tests/data`` and, where
``shared/traces-public`` is present, the public 2023.1 and 2020.3 exports) plus one to four mutations
drawn by hypothesis, applied with SQL to a copy and then, for some, to its bytes:

- schema: drop / rename / add tables and columns, change a column's declared type, replace a table by
  a view, empty a table;
- values: NULLs, text in integer columns, reals, blobs, +-2^63, huge (200 kB) and non-UTF-8 strings;
- times: negative, end before start, swapped, shifted (overlapping, out of order), zero and huge;
- ids: dangling (correlation, string, thread and device ids pointing nowhere) and duplicated (rows
  copied, one correlation id for many rows);
- bytes: truncation, flipped bytes, a zeroed page, garbage appended.

The damaged copy then goes through the whole pipeline (load, window, facts, rules, JSON report) the way
``analyze`` runs it; :func:`analyzer.fuzz.harness.check_outcome` judges the result.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyzer.fuzz.harness import CASE_TIMEOUT_S, FuzzFailure, Outcome, analyze_reusing, check_outcome, sha256

KEY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER",
    "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS", "StringIds", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE", "TARGET_INFO_CUDA_GPU",
    "ANALYSIS_DETAILS", "META_DATA_EXPORT", "EXPORT_META_DATA", "ThreadNames", "PROCESSES",
    "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE", "TARGET_INFO_SYSTEM_ENV",
    "TARGET_INFO_SESSION_START_TIME", "DomainStrings",
)
# columns whose values are ids or counts the loader might index or size arrays by
ID_COLUMNS = ("id", "correlationId", "globalTid", "globalPid", "deviceId", "contextId", "streamId", "textId",
              "nameId", "shortName", "demangledName", "domainId", "eventType", "copyKind", "srcKind", "dstKind",
              "memKind", "syncType", "gpuId", "cudaId", "cuDevice", "eventClass", "gridX", "blockX")
TIME_TABLES = tuple(t for t in KEY_TABLES if t.startswith("CUPTI_ACTIVITY") or t == "NVTX_EVENTS")

# SQL value expressions a damaged export may hold where an integer belongs
VALUES = {
    "null": "NULL",
    "text": "'abc'",
    "numeric-text": "'123'",
    "empty-text": "''",
    "real": "1.5",
    "huge-real": "1e300",
    "infinity": "1e999",
    "blob": "x'00ff10'",
    "max-int": "9223372036854775807",
    "min-int": "-9223372036854775808",
    "minus-one": "-1",
    "zero": "0",
    "big": "4294967297",
    "huge-string": "replace(hex(zeroblob(100000)), '00', 'x<')",
    "non-utf8": "CAST(x'ff41c328e282' AS TEXT)",
    "control-chars": "char(0, 10, 13, 27, 8232) || 'x'",
}
ROWS = {
    "all": "1",
    "first": "rowid = (SELECT min(rowid) FROM {t})",
    "last": "rowid = (SELECT max(rowid) FROM {t})",
    "every-3rd": "rowid % 3 = 0",
    "half": "rowid % 2 = 1",
}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Mutation:
    op: str
    table: str = ""
    column: str = ""
    arg: Any = None
    rows: str = "all"

    def __str__(self) -> str:
        parts = [self.op, self.table, self.column, "" if self.arg is None else repr(self.arg),
                 "" if self.rows == "all" else self.rows]
        return ":".join(p for p in parts if p)


def schema_of(path: Path) -> dict[str, list[str]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: [r[1] for r in conn.execute(f"PRAGMA table_info({_q(t)})")] for t in names}
    finally:
        conn.close()


# ----------------------------------------------------------------------------------------------------
# applying mutations
# ----------------------------------------------------------------------------------------------------
def _where(m: Mutation) -> str:
    return ROWS.get(m.rows, "1").format(t=_q(m.table))


def _recreate(conn: sqlite3.Connection, table: str, columns: list[tuple[str, str, str]]) -> None:
    """Rebuild ``table`` as ``(name, declared type, select expression)`` columns."""
    tmp = f"{table}__fuzz_old"
    conn.execute(f"ALTER TABLE {_q(table)} RENAME TO {_q(tmp)}")
    decl = ", ".join(f"{_q(n)} {t}".strip() for n, t, _ in columns) or '"x"'
    conn.execute(f"CREATE TABLE {_q(table)} ({decl})")
    if columns:
        cols = ", ".join(_q(n) for n, _, _ in columns)
        sel = ", ".join(e for _, _, e in columns)
        conn.execute(f"INSERT INTO {_q(table)} ({cols}) SELECT {sel} FROM {_q(tmp)}")
    conn.execute(f"DROP TABLE {_q(tmp)}")


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(r[1], r[2]) for r in conn.execute(f"PRAGMA table_info({_q(table)})")]


def apply_sql(conn: sqlite3.Connection, m: Mutation) -> None:
    t, c = _q(m.table), _q(m.column)
    op = m.op
    if op == "drop-table":
        conn.execute(f"DROP TABLE {t}")
    elif op == "empty-table":
        conn.execute(f"DELETE FROM {t}")
    elif op == "rename-table":
        conn.execute(f"ALTER TABLE {t} RENAME TO {_q(m.arg)}")
    elif op == "view-table":  # the table becomes a view over a renamed copy (or over nothing usable)
        conn.execute(f"ALTER TABLE {t} RENAME TO {_q(m.table + '_fuzz_base')}")
        body = f"SELECT * FROM {_q(m.table + '_fuzz_base')}" if m.arg == "same" else "SELECT 1 AS x"
        conn.execute(f"CREATE VIEW {t} AS {body}")
    elif op == "add-table":
        conn.execute(f"CREATE TABLE {_q(m.arg)} (id INTEGER, start INTEGER, \"end\" INTEGER, value TEXT)")
        conn.execute(f"INSERT INTO {_q(m.arg)} VALUES (1, -5, 'x', CAST(x'ff' AS TEXT)), (NULL, NULL, NULL, NULL)")
    elif op == "drop-column":
        try:
            conn.execute(f"ALTER TABLE {t} DROP COLUMN {c}")
        except sqlite3.OperationalError:  # primary key, index: rebuild without it
            cols = [(n, ty, _q(n)) for n, ty in _columns(conn, m.table) if n != m.column]
            _recreate(conn, m.table, cols)
    elif op == "rename-column":
        conn.execute(f"ALTER TABLE {t} RENAME COLUMN {c} TO {_q(m.arg)}")
    elif op == "add-column":
        conn.execute(f"ALTER TABLE {t} ADD COLUMN {_q(m.arg)} TEXT DEFAULT 'junk'")
    elif op == "retype-column":  # declared type and stored values change (e.g. INTEGER -> TEXT)
        cols = [(n, m.arg if n == m.column else ty,
                 f"CAST({_q(n)} AS {m.arg or 'BLOB'})" if n == m.column else _q(n))
                for n, ty in _columns(conn, m.table)]
        _recreate(conn, m.table, cols)
    elif op == "set":
        conn.execute(f"UPDATE {t} SET {c} = {VALUES[m.arg]} WHERE {_where(m)}")
    elif op == "add":  # shift a column (times: overlap / reorder; ids: dangle)
        conn.execute(f"UPDATE {t} SET {c} = {c} + ({int(m.arg)}) WHERE {_where(m)}")
    elif op == "negate":
        conn.execute(f"UPDATE {t} SET {c} = -{c} WHERE {_where(m)}")
    elif op == "swap-times":
        conn.execute(f'UPDATE {t} SET start = "end", "end" = start WHERE {_where(m)}')
    elif op == "end-before-start":
        conn.execute(f'UPDATE {t} SET "end" = start - ({int(m.arg)}) WHERE {_where(m)}')
    elif op == "same-value":  # one value for many rows (duplicated correlation ids, one start for all)
        conn.execute(f"UPDATE {t} SET {c} = (SELECT min({c}) FROM {t}) WHERE {_where(m)}")
    elif op == "duplicate-rows":
        conn.execute(f"INSERT OR IGNORE INTO {t} SELECT * FROM {t} WHERE {_where(m)}")
    elif op == "delete-rows":
        conn.execute(f"DELETE FROM {t} WHERE {_where(m)}")
    else:
        raise ValueError(op)


def apply_bytes(path: Path, m: Mutation) -> None:
    data = bytearray(path.read_bytes())
    n = len(data)
    if m.op == "truncate":
        del data[max(1, int(n * m.arg)):]
    elif m.op == "flip-bytes":
        offset, count = m.arg
        start = 100 + int((n - 100) * offset)
        for i in range(start, min(n, start + count)):
            data[i] ^= 0xA5
    elif m.op == "zero-page":
        page = int.from_bytes(data[16:18], "big") or 65536
        index = max(1, int((n // page) * m.arg))
        data[index * page:(index + 1) * page] = bytes(len(data[index * page:(index + 1) * page]))
    elif m.op == "append-garbage":
        data += bytes(range(256)) * int(m.arg)
    path.write_bytes(bytes(data))


BYTE_OPS = ("truncate", "flip-bytes", "zero-page", "append-garbage")


def build_case(base: Path, target: Path, mutations: list[Mutation]) -> list[str]:
    """Copy ``base`` to ``target`` and apply ``mutations``; returns those that applied (an ALTER that
    SQLite refuses on this schema is skipped)."""
    shutil.copyfile(base, target)
    applied: list[str] = []
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        for m in mutations:
            if m.op in BYTE_OPS:
                continue
            try:
                conn.execute("BEGIN")
                apply_sql(conn, m)
                conn.execute("COMMIT")
                applied.append(str(m))
            except sqlite3.Error:
                conn.execute("ROLLBACK") if conn.in_transaction else None
    finally:
        conn.close()
    for m in mutations:
        if m.op in BYTE_OPS:
            apply_bytes(target, m)
            applied.append(str(m))
    return applied


# ----------------------------------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------------------------------
def mutation_strategy(schema: dict[str, list[str]]) -> Any:
    """A hypothesis strategy for one :class:`Mutation` of an export with ``schema``."""
    from hypothesis import strategies as st

    present = [t for t in KEY_TABLES if t in schema]
    others = sorted(t for t in schema if t not in KEY_TABLES)
    tables = st.one_of(st.sampled_from(present), st.sampled_from(others)) if others else st.sampled_from(present)
    timed = [t for t in TIME_TABLES if t in schema and {"start", "end"} <= set(schema[t])]
    rows = st.sampled_from(list(ROWS))

    @st.composite
    def on_column(draw: Callable[..., Any], ops: tuple[str, ...], arg: Any = st.none()) -> Mutation:
        table = draw(st.sampled_from(present))
        cols = schema[table]
        return Mutation(draw(st.sampled_from(ops)), table, draw(st.sampled_from(cols)), draw(arg), draw(rows))

    new_name = st.one_of(st.sampled_from([*KEY_TABLES, "x", "start", "end", "sqlite_fuzz", "select"]),
                         st.text(alphabet="abcXYZ_0é\u00ff", min_size=1, max_size=8))
    schema_ops = st.one_of(
        st.builds(Mutation, st.sampled_from(["drop-table", "empty-table"]), tables),
        st.builds(Mutation, st.just("rename-table"), tables, arg=new_name),
        st.builds(Mutation, st.just("view-table"), st.sampled_from(present), arg=st.sampled_from(["same", "junk"])),
        st.builds(Mutation, st.just("add-table"), arg=st.sampled_from(
            ["CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_MEMSET", "TARGET_INFO_CUDA_DEVICE",
             "META_DATA_EXPORT", "EXPORT_META_DATA", "DomainStrings", "cupti_activity_kind_kernel", "junk"])),
        on_column(("drop-column",)),
        on_column(("rename-column",), new_name),
        on_column(("add-column",), new_name),
        on_column(("retype-column",), st.sampled_from(["TEXT", "REAL", "BLOB", "", "INTEGER"])),
    )
    value_ops = on_column(("set",), st.sampled_from(list(VALUES)))
    big = st.sampled_from([1, -1, 10**3, -(10**9), 10**12, -(10**15), 2**62, -(2**62), 10**18])
    time_ops = st.one_of(
        st.builds(Mutation, st.sampled_from(["swap-times"]), st.sampled_from(timed), rows=rows),
        st.builds(Mutation, st.just("end-before-start"), st.sampled_from(timed), arg=big, rows=rows),
        st.builds(Mutation, st.just("negate"), st.sampled_from(timed), st.sampled_from(["start", "end"]),
                  rows=rows),
        st.builds(Mutation, st.just("add"), st.sampled_from(timed), st.sampled_from(["start", "end"]),
                  arg=big, rows=rows),
        st.builds(Mutation, st.just("same-value"), st.sampled_from(timed), st.sampled_from(["start", "end"]),
                  rows=rows),
    ) if timed else st.nothing()
    id_cols = [(t, c) for t in present for c in schema[t] if c in ID_COLUMNS]
    extreme = st.sampled_from(["big", "max-int", "min-int", "minus-one", "zero", "null"])
    id_ops = st.one_of(
        st.sampled_from(id_cols).flatmap(lambda tc: st.builds(Mutation, st.just("set"), st.just(tc[0]),
                                                              st.just(tc[1]), extreme, rows))
        if id_cols else st.nothing(),
        on_column(("add", "negate", "same-value"), big),
        st.builds(Mutation, st.sampled_from(["duplicate-rows", "delete-rows"]), st.sampled_from(present),
                  rows=rows),
    )
    byte_ops = st.one_of(
        st.builds(Mutation, st.just("truncate"), arg=st.floats(0.0, 0.999)),
        st.builds(Mutation, st.just("flip-bytes"), arg=st.tuples(st.floats(0, 0.999), st.integers(1, 64))),
        st.builds(Mutation, st.just("zero-page"), arg=st.floats(0, 0.999)),
        st.builds(Mutation, st.just("append-garbage"), arg=st.integers(1, 64)),
    )
    return st.one_of(schema_ops, value_ops, value_ops, time_ops, time_ops, id_ops, byte_ops)


# ----------------------------------------------------------------------------------------------------
# running a case
# ----------------------------------------------------------------------------------------------------
class Runner:
    """Runs damaged traces through the pipeline with one preloaded rule pack."""

    def __init__(self, workdir: Path, timeout: float = CASE_TIMEOUT_S) -> None:
        from analyzer.pipeline import AnalysisOptions, load_rules

        self.workdir = workdir
        self.options = AnalysisOptions(timeout=timeout)
        self.pack = load_rules(self.options)
        self.outcomes: dict[str, tuple[int, str]] = {}  # loaded-trace fingerprint -> (exit code, stderr)
        self.reused = 0
        self.loaded: Any = None  # the last case's loaded trace (None when loading failed)
        self.compared = 0  # cases whose kernel totals were checked against SQLite's own read

    def analyze(self, trace: Path, output: Path) -> Outcome:
        """The pipeline as ``analyze TRACE --format json -o OUTPUT`` runs it. A case whose loaded trace
        equals one already analyzed (a mutation of a table or column the loader does not read) reuses
        that outcome: the rest of the pipeline is a deterministic function of the loaded trace."""
        from analyzer.loading import load_trace

        return analyze_reusing(self, trace, output, lambda: load_trace(trace))

    def case(self, base: Path, mutations: list[Mutation], index: int = 0) -> tuple[Outcome, list[str]]:
        """Build, analyze and check one case; raises :class:`FuzzFailure` with the mutations listed."""
        folder = self.workdir / f"case{index % 4}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        trace = folder / f"{base.stem}-damaged.sqlite"
        applied = build_case(base, trace, mutations)
        before = sha256(trace)
        listing = sorted(os.listdir(folder))
        outcome = self.analyze(trace, self.workdir / "report.json")
        try:
            check_outcome(outcome, names=[str(trace), trace.name])
            if outcome.rc in (0, 1) and self.loaded is not None:
                self.compared += check_kernels_as_sqlite_reads_them(trace, self.loaded)
            if sha256(trace) != before:
                raise FuzzFailure("the input file changed")
            if sorted(os.listdir(folder)) != listing:
                raise FuzzFailure(f"files appeared next to the input: {sorted(os.listdir(folder))}")
        except FuzzFailure as err:
            raise FuzzFailure(f"{err} [base {base.name}; mutations {applied}]") from None
        return outcome, applied


def sqlite_kernel_totals(path: Path) -> tuple[int, int] | None:
    """(kernels, total kernel time in ns) of ``path`` as SQLite itself reads them (a full scan of the
    kernel table, found by SQLite's own name matching), or None when the table is absent or any of its
    rows lacks integer ``start``/``end`` with ``end >= start`` (values the loader deliberately treats as
    unknown). Raises ``sqlite3.DatabaseError`` when SQLite cannot read the table (a malformed file)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        try:
            n, clean, total = conn.execute(
                'SELECT count(*), sum(typeof(start) = \'integer\' AND typeof("end") = \'integer\' '
                'AND "end" >= start), sum(CAST("end" AS INTEGER) - CAST(start AS INTEGER)) '
                "FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        except sqlite3.OperationalError as err:
            if any(m in str(err) for m in ("no such table", "no such column", "integer overflow")):
                return None  # nothing to compare: no kernel table, or times past 64-bit sums
            raise
    finally:
        conn.close()
    if n == 0 or clean != n:
        return None
    return int(n), int(total)


def check_kernels_as_sqlite_reads_them(path: Path, trace: Any) -> int:
    """The property that matters (issue 33): a trace the run accepted has the kernel count and total
    kernel time SQLite's own read of the same file gives; a file SQLite cannot read must be refused.
    Returns 1 when compared, 0 when the file's kernel values are not all plain (see
    :func:`sqlite_kernel_totals`). Raises :class:`FuzzFailure`."""
    try:
        want = sqlite_kernel_totals(path)
    except sqlite3.DatabaseError as err:
        raise FuzzFailure(f"analyzed a file whose kernel table SQLite cannot read ({err})") from None
    if want is None:
        return 0
    k = trace.kernels
    got = (len(k), int((k["end"].astype("int64") - k["start"].astype("int64")).sum()) if len(k) else 0)
    if got != want:
        raise FuzzFailure(f"kernels {got[0]:,} and {got[1]:,} ns where SQLite reads {want[0]:,} and {want[1]:,} ns")
    return 1


def base_traces() -> list[Path]:
    """The real exports cases start from: 2025.3 (tests/data), 2023.1 and 2020.3 (public, when present)."""
    from analyzer.testing import DATA_DIR, PUBLIC_DIR, real_trace

    bases = []
    if (DATA_DIR / "alloc_churn_fixed.sqlite.xz").is_file():
        bases.append(real_trace("alloc_churn_fixed"))
    for name in ("LeiWang1999__memfusion_artifact__report1.sqlite", "quasiben__nvtx-examples__cudf.sqlite"):
        if (PUBLIC_DIR / name).is_file():
            bases.append(PUBLIC_DIR / name)
    return bases


def run_cases(n: int, seed: int, workdir: Path, *, stats: Any = None, derandomize: bool = False) -> Any:
    """``n`` hypothesis-generated cases (seeded); stops at the first failure (after shrinking it)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st

    from analyzer.fuzz.harness import Stats

    stats = stats or Stats("nsys", seed=seed)
    bases = base_traces()
    schemas = {b: schema_of(b) for b in bases}
    runner = Runner(workdir)
    strategies = {b: st.lists(mutation_strategy(schemas[b]), min_size=1, max_size=4) for b in bases}

    @settings(max_examples=n, deadline=None, derandomize=derandomize, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data: Any) -> None:
        stats.stop_if_out_of_time()
        base = data.draw(st.sampled_from(bases), label="base")
        mutations = data.draw(strategies[base], label="mutations")
        outcome, applied = runner.case(base, mutations, stats.cases)
        stats.record(outcome, names=[f"{base.stem}-damaged.sqlite"])
        stats.extra["mutations_applied"] = stats.extra.get("mutations_applied", 0) + len(applied)
        stats.extra["same_loaded_trace_as_an_earlier_case"] = runner.reused
        stats.extra["kernel_totals_checked_against_sqlite"] = runner.compared

    if not derandomize:
        one = hseed(seed)(one)
    one()
    return stats
