"""The trace model's compact dtypes (model.py, "Dtypes"): what they are, that the values are the export's,
and the reader's fallbacks (text in an integer column, values beyond 32 bits)."""
from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from analyzer.loading import load_trace
from analyzer.arrays import sorted_distinct
from analyzer.loading.columns import TextCodes, categorical, narrow_int
from analyzer.loading.model import COMPACT_INT_COLUMNS, FRAME_COLUMNS, NARROW_INT_COLUMNS
from analyzer.loading.sqlite_reader import SqliteReader

TIMES = {"start", "end", "duration", "api_start", "bytes"}
BIG = ("kernels", "memcpy", "memset", "api", "sync")


@pytest.fixture(scope="module")
def trace():
    from analyzer.testing import real_trace

    return load_trace(real_trace("small_training_ctx128"))


@pytest.mark.parametrize("frame", BIG)
def test_big_frames_are_compact(trace, frame):
    f = getattr(trace, frame)
    assert len(f)
    assert list(f.columns) == list(FRAME_COLUMNS[frame])
    assert isinstance(f.index, pd.RangeIndex)
    for c in f.columns:
        dtype = f[c].dtype
        if c in TIMES:
            assert dtype == np.int64, c
        elif c in NARROW_INT_COLUMNS:  # every value of this trace fits the narrow type
            assert dtype == np.dtype(NARROW_INT_COLUMNS[c]), c
        elif c in COMPACT_INT_COLUMNS:
            assert dtype == np.int32, c  # every id of this trace fits
        else:
            assert isinstance(dtype, pd.CategoricalDtype), c
            cats = list(dtype.categories)
            assert dtype.categories.dtype == object and cats == sorted(cats) and len(set(cats)) == len(cats), c
            assert not f[c].isna().any(), c
            assert (f[c].value_counts() > 0).all(), f"{c}: unused categories"


def test_text_columns_behave_as_strings(trace):
    k = trace.kernels
    obj = k["name"].astype(object)
    name = obj.iloc[0]
    assert ((k["name"] == name) == (obj == name)).all()
    assert (k["name"].str.contains("gemm") == obj.str.contains("gemm")).all()
    assert k.sort_values("name", kind="stable")["name"].astype(object).tolist() == sorted(obj.tolist())
    assert set(k["attribution"].unique()) <= {"none", "process", "thread"}
    assert set(trace.api["kind"].unique()) <= {"runtime", "driver"}


def test_kernel_names_are_the_exports(trace):
    """Every kernel's name and short name equal the StringIds texts of its row (by start time)."""
    from analyzer.testing import real_trace

    conn = sqlite3.connect(f"file:{real_trace('small_training_ctx128')}?mode=ro&immutable=1", uri=True)
    rows = conn.execute("""
        SELECT k.start, coalesce(nullif(d.value, ''), s.value), s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN StringIds s ON s.id = k.shortName LEFT JOIN StringIds d ON d.id = k.demangledName
        ORDER BY k.start""").fetchall()
    conn.close()
    k = trace.kernels.sort_values("start", kind="stable")
    assert k["name"].astype(object).tolist() == [r[1] for r in rows]
    assert k["short_name"].astype(object).tolist() == [r[2] for r in rows]


def test_categorical_helper():
    labels = np.array(["b", "", "a", "b", "zz"], dtype=object)  # a repeated text, an empty one, an unused one
    cat = categorical(np.array([0, 3, -1, 2, 1, 0]), labels)
    assert list(cat.categories) == ["", "a", "b"]
    assert list(cat) == ["b", "b", "", "a", "", "b"]
    assert cat.categories.dtype == object
    assert len(categorical(np.empty(0, dtype=np.int64), labels)) == 0
    codes = TextCodes.of(np.array(["x", "y", "x"], dtype=object)).take(np.array([2, -1, 1]))
    assert list(codes.categorical()) == ["x", "", "y"]


def test_narrow_int():
    assert narrow_int(np.array([1, -1, 2**31 - 1])).dtype == np.int32
    assert narrow_int(np.array([1, 2**31])).dtype == np.int64
    assert narrow_int(np.array([-(2**31) - 1])).dtype == np.int64
    assert narrow_int(np.empty(0, dtype=np.int64)).dtype == np.int32
    assert narrow_int(np.array([0, 2], dtype=np.int8)).dtype == np.int32  # the default widens to 32 bits
    # a smaller floor: the smallest type from it up to int32 that holds every value, else unchanged
    assert narrow_int(np.array([-1, 127]), "int8").dtype == np.int8
    assert narrow_int(np.array([-1, 128]), "int8").dtype == np.int16
    assert narrow_int(np.array([-1, 127]), "int16").dtype == np.int16
    assert narrow_int(np.array([-(2**15) - 1, 1], dtype=np.int32), "int8").dtype == np.int32
    assert narrow_int(np.array([2**31]), "int8").dtype == np.int64
    assert narrow_int(np.empty(0, dtype=np.int64), "int8").dtype == np.int8
    values = np.array([3, -1, 100], dtype=np.int32)
    assert narrow_int(values, "int8").tolist() == [3, -1, 100]


def test_narrow_columns_hold_the_exports_values(trace):
    """The 8- and 16-bit columns of the real trace's kernels hold the values the export has (the SQLite
    kernel table, by start time): device, context, stream, block dimensions and registers."""
    from analyzer.testing import real_trace

    k = trace.kernels.sort_values("start", kind="stable")
    assert k["device"].dtype == np.int8 and k["stream"].dtype == np.int16 and k["block_x"].dtype == np.int16
    conn = sqlite3.connect(f"file:{real_trace('small_training_ctx128')}?mode=ro&immutable=1", uri=True)
    rows = np.array(conn.execute("""SELECT deviceId, contextId, streamId, blockX, blockY, blockZ,
        registersPerThread FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start""").fetchall(), dtype=np.int64)
    conn.close()
    cols = ["device", "context", "stream", "block_x", "block_y", "block_z", "registers_per_thread"]
    np.testing.assert_array_equal(k[cols].to_numpy(dtype=np.int64), rows)


def test_sorted_distinct_is_numpy_unique(trace):
    # the real trace's timestamps (many distinct, repeated where ops share an instant), its devices and
    # threads (few distinct), narrowed ids, booleans, an empty array, and the dtypes handed to np.unique
    k, api = trace.kernels, trace.api
    cases = [np.r_[k["start"].to_numpy(), k["end"].to_numpy(), api["end"].to_numpy()], k["device"].to_numpy(),
             api["tid"].to_numpy(), k["correlation_id"].to_numpy(), k["duration"].to_numpy() > 5000,
             np.empty(0, dtype=np.int64), np.r_[k["duration"].to_numpy() / 7.0, np.nan, np.nan],
             k["name"].astype(object).to_numpy()]
    for values in cases:
        got, want = sorted_distinct(values), np.unique(values)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["adbc", "sqlite3", "pages"])
def test_fetch_ints_fallbacks(tmp_path, monkeypatch, backend):
    """Plain columns, NULLs, a column beyond 32 bits, and text in an integer column (damaged export):
    the text is read as SQLite's CAST reads it, on both backends and through the page route (which
    leaves the table with text to the backend)."""
    monkeypatch.setenv("ANALYZER_SQLITE_BACKEND", "adbc" if backend == "pages" else backend)
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "1" if backend == "pages" else "0")
    db = tmp_path / "t.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)")
    n = 70_000  # more than one record batch
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                     [(i, None if i < 66_000 else i, 2**40 + i) for i in range(n)])
    conn.commit()
    reader = SqliteReader(db)
    got = reader.fetch_ints("t", {"a": "a", "b": "b", "c": "c", "d": "missing"}, narrow={"a", "b", "c", "d"})
    assert got["a"].dtype == np.int32 and got["a"].tolist() == list(range(n))
    assert got["b"].dtype == np.int32 and (got["b"][:66_000] == -1).all() and got["b"][-1] == n - 1
    assert got["c"].dtype == np.int64 and got["c"][-1] == 2**40 + n - 1
    assert got["d"].dtype == np.int32 and (got["d"] == -1).all()
    reader.close()
    conn.execute("INSERT INTO t VALUES ('12', 'x', 3)")
    conn.commit()
    conn.close()
    reader = SqliteReader(db)
    got = reader.fetch_ints("t", {"a": "a", "b": "b"}, narrow={"a"})
    assert got["a"][-1] == 12 and got["b"][-1] == 0 and len(got["a"]) == n + 1
    reader.close()


def test_split_fetch_equals_one_query(monkeypatch):
    """Big tables are fetched in rowid ranges on the ADBC backend; ranges of 997 rows (dozens per table of
    a real trace, none aligned with a record batch) give exactly the frames of one unsplit query per table
    (sqlite3 backend), dtypes included."""
    pytest.importorskip("adbc_driver_sqlite")
    import analyzer.loading.sqlite_reader as sr

    path = "tests/data/small_training_ctx128.sqlite.xz"
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "0")  # the page route: test_sqlite_pages.py
    monkeypatch.setenv("ANALYZER_SQLITE_BACKEND", "sqlite3")
    whole = load_trace(path)
    monkeypatch.setenv("ANALYZER_SQLITE_BACKEND", "adbc")
    monkeypatch.setattr(sr, "CHUNK_ROWS", 997)
    calls = []
    real = sr.SqliteReader._rowid_ranges
    monkeypatch.setattr(sr.SqliteReader, "_rowid_ranges",
                        lambda self, table: calls.append(r := real(self, table)) or r)
    split = load_trace(path)
    assert any(r and len(r) > 5 for r in calls)  # the kernel and runtime tables were split
    for name in FRAME_COLUMNS:
        pd.testing.assert_frame_equal(getattr(split, name), getattr(whole, name), check_exact=True)


def test_split_fetch_narrows_per_table(tmp_path, monkeypatch):
    """A narrow column is int32 only when every range's values fit: one value beyond 32 bits in the last
    range widens the whole column; NULLs read as the default in every range."""
    pytest.importorskip("adbc_driver_sqlite")
    import analyzer.loading.sqlite_reader as sr

    monkeypatch.setenv("ANALYZER_SQLITE_BACKEND", "adbc")
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "0")
    monkeypatch.setattr(sr, "CHUNK_ROWS", 1000)
    db = tmp_path / "t.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    n = 10_500
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, None if i % 3 else i) for i in range(n)])
    conn.execute("INSERT INTO t VALUES (?, 1)", (2**40,))
    conn.commit()
    conn.close()
    reader = SqliteReader(db)
    got = reader.fetch_ints("t", {"a": "a", "b": "b", "c": None}, narrow={"a", "b", "c"})
    reader.close()
    assert got["a"].dtype == np.int64 and got["a"].tolist() == [*range(n), 2**40]
    assert got["b"].dtype == np.int32 and got["b"][:6].tolist() == [0, -1, -1, 3, -1, -1] and got["b"][-1] == 1
    assert got["c"].dtype == np.int32 and len(got["c"]) == n + 1


def test_split_fetch_gaps_and_late_widening(tmp_path, monkeypatch):
    """Ranges write straight into the table's preallocated columns: rows that a WHERE leaves out or rowids
    that were deleted leave gaps that are closed afterwards, and a narrow column whose value beyond 32
    bits comes in a later record batch of a range is widened for the whole table; the result equals the
    unsplit sqlite3 read, dtypes included."""
    pytest.importorskip("adbc_driver_sqlite")
    import analyzer.loading.sqlite_reader as sr

    db = tmp_path / "t.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)")
    n = 5_000
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                     [(2**40 if i == 2_345 else i, None if i % 7 == 0 else -i, i % 5) for i in range(n)])
    conn.execute("DELETE FROM t WHERE rowid BETWEEN 3001 AND 3400")  # a hole in the rowids
    conn.commit()
    conn.close()
    cols = {"a": "a", "b": "b", "c": "c", "none": None}
    got = {}
    import analyzer.loading.sqlite_pages as sp

    for backend in ("sqlite3", "adbc", "pages"):
        monkeypatch.setenv("ANALYZER_SQLITE_BACKEND", "adbc" if backend == "pages" else backend)
        monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "1" if backend == "pages" else "0")
        monkeypatch.setattr(sr, "CHUNK_ROWS", 1_000)
        monkeypatch.setattr(sr, "BATCH_ROWS", 300)
        monkeypatch.setattr(sp, "BATCH_BYTES", 3 * 4096)  # batches of 3 pages within each range
        reader = SqliteReader(db)
        keep = sr.ValuesIn("c", (3,), negate=True)
        got[backend] = (reader.fetch_ints("t", cols, narrow={"a", "b", "c", "none"}),
                        reader.fetch_ints("t", cols, where="c != 3", narrow={"b", "c"}),
                        reader.fetch_ints("t", cols, where=keep, narrow={"b", "c"}))
        reader.close()
    for other in ("adbc", "pages"):
        for whole, split in zip(got["sqlite3"], got[other]):
            assert list(split) == list(whole)
            for name in whole:
                assert split[name].dtype == whole[name].dtype, (other, name)
                assert np.array_equal(split[name], whole[name]), (other, name)
    everything, where, _ = got["adbc"]
    assert everything["a"].dtype == np.int64 and everything["b"].dtype == np.int32
    assert len(everything["a"]) == n - 400 and 2**40 in everything["a"]
    assert len(where["a"]) == sum(1 for i in range(n) if not 3_000 <= i < 3_400 and i % 5 != 3)


def test_empty_tables_are_typed_and_independent(trace):
    """The tables a trace lacks are empty frames of the contract's columns and dtypes, built once per column
    set (``empty_typed``) and handed out as copies: changing one never shows in the next."""
    from analyzer.loading.columns import empty_typed
    from analyzer.loading.model import empty_frame

    empties = [name for name, cols in FRAME_COLUMNS.items() if not len(getattr(trace, name, [1]))]
    assert empties  # this trace has no power log, ...
    for name in empties:
        frame = getattr(trace, name)
        assert list(frame.columns) == list(FRAME_COLUMNS[name])
        assert frame.dtypes.equals(empty_frame(FRAME_COLUMNS[name]).dtypes)
    spec = [("name", object), ("start", "int64"), ("value", "float64")]
    first = empty_typed(spec)
    first["extra"] = pd.Series(dtype="int64")
    first.loc[0] = ["x", 1, 1.5, 2]
    second = empty_typed(spec)
    assert list(second.columns) == ["name", "start", "value"] and second.empty
    assert [str(t) for t in second.dtypes] == ["object", "int64", "float64"]


def test_small_tables_skip_adbc(monkeypatch):
    """With the backend chosen automatically, a table the SQL backend reads goes to ADBC only from
    ``ADBC_MIN_ROWS`` rowids on (importing the driver costs more than ``sqlite3`` takes for a small
    table); both read a real trace's NVTX texts and memory events to the same arrays."""
    pytest.importorskip("adbc_driver_sqlite")
    import analyzer.loading.sqlite_reader as sr
    from analyzer.testing import real_trace

    monkeypatch.delenv("ANALYZER_SQLITE_BACKEND", raising=False)
    monkeypatch.setenv("ANALYZER_SQLITE_PAGES", "0")  # every table by the SQL backend
    calls: list[str] = []
    for name in ("_adbc_query", "_adbc_batches"):
        real = getattr(sr.SqliteReader, name)
        monkeypatch.setattr(sr.SqliteReader, name,
                            lambda self, sql, real=real: calls.append(sql) or real(self, sql))
    got = {}
    for min_rows in (sr.ADBC_MIN_ROWS, 1):
        monkeypatch.setattr(sr, "ADBC_MIN_ROWS", min_rows)
        reader = SqliteReader(real_trace("small_training_ctx128"))
        assert reader.backend == "adbc"
        got[min_rows] = (reader.fetch_text("NVTX_EVENTS", "text"),
                         reader.fetch_ints("CUPTI_ACTIVITY_KIND_MEMCPY", {"start": "start", "bytes": "bytes"}))
        reader.close()
        assert bool(calls) is (min_rows == 1)  # the trace's tables are far below the default
    texts, ints = got[sr.ADBC_MIN_ROWS]
    assert len(texts) > 0 and len(ints["start"]) > 0
    assert texts.tolist() == got[1][0].tolist()
    for column, values in ints.items():
        assert values.dtype == got[1][1][column].dtype and np.array_equal(values, got[1][1][column])


def _stored_once(frame: pd.DataFrame) -> list[str]:
    return sorted(c for c in frame.columns
                  if isinstance(frame[c].dtype, np.dtype) and frame[c].to_numpy().strides == (0,))


def test_constant_columns_are_stored_once(trace, tmp_path):
    """load_trace stores an integer column holding one value in every row once (stride 0), with the values
    the loader read; so does a trace served lazily from the cache, and gpu_ops for its constant columns."""
    from analyzer.analysis import Window
    from analyzer.facts import FactStore
    from analyzer.loading import _load
    from analyzer.loading.cache import TraceCache
    from analyzer.testing import real_trace

    path = real_trace("small_training_ctx128")
    plain = _load(path, "nsys-sqlite" if path.suffix == ".sqlite" else "xz", None, None)
    assert _stored_once(trace.kernels) == ["block_z", "context", "device", "graph_id", "graph_node_id",
                                           "in_graph", "launch_type", "pid", "stream"]
    assert _stored_once(trace.api) == ["pid", "return_value"]
    assert _stored_once(trace.memcpy) == []  # 345 rows: below shared_constants' 4,096
    saved = sum(getattr(trace, n)[c].to_numpy().nbytes for n in BIG for c in _stored_once(getattr(trace, n)))
    assert saved == 85_512 + 76_374
    for name in ("kernels", "memcpy", "memset", "api", "sync", "memory"):
        assert _stored_once(getattr(plain, name)) == []
        pd.testing.assert_frame_equal(getattr(trace, name), getattr(plain, name), check_exact=True)
    with pytest.raises(ValueError, match="read-only"):
        trace.kernels["device"].to_numpy()[:1] = 3
    for lazy in (False, True):  # stored, then served from the cache
        cache = TraceCache(tmp_path / "cache", limit=10**9, lazy=lazy)
        for _ in range(2):
            cached = load_trace(path, cache=cache)
            cache.wait()
            assert _stored_once(cached.kernels) == _stored_once(trace.kernels)
            assert _stored_once(cached.api) == ["pid", "return_value"]
            pd.testing.assert_frame_equal(cached.kernels, plain.kernels, check_exact=True)
    window = Window(start_ns=0, end_ns=int(trace.info.duration_ns) + 1, source="user", description="all")
    ops = FactStore(trace, window, {}).get("gpu_ops")
    plain_ops = FactStore(plain, window, {}).get("gpu_ops")
    pd.testing.assert_frame_equal(ops, plain_ops, check_exact=True)
    assert _stored_once(ops) == ["device", "in_graph", "pid", "stream"]
