"""Loading the public nsys exports (2020.3 and 2023.1 schemas), checked against independent SQL."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from analyzer.loading import detect_format, load_trace
from analyzer.loading.model import (
    API_COLUMNS,
    GPU_COLUMNS,
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    PROCESS_COLUMNS,
    SYNC_COLUMNS,
    THREAD_COLUMNS,
)
from analyzer.testing import PUBLIC_DIR

PUBLIC = PUBLIC_DIR
CUDF_2020 = PUBLIC / "quasiben__nvtx-examples__cudf.sqlite"
MEMFUSION_2023 = PUBLIC / "LeiWang1999__memfusion_artifact__report1.sqlite"

needs_public = pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"public traces folder {PUBLIC} is absent")


def sql(path: Path, query: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def scalar(path: Path, query: str) -> int:
    return sql(path, query)[0][0]


@pytest.fixture(scope="module")
def cudf():
    return load_trace(CUDF_2020)


@pytest.fixture(scope="module")
def memfusion():
    return load_trace(MEMFUSION_2023)


def _check_contract(trace) -> None:
    for name, cols in (("kernels", KERNEL_COLUMNS), ("memcpy", MEMCPY_COLUMNS), ("memset", MEMSET_COLUMNS),
                       ("api", API_COLUMNS), ("sync", SYNC_COLUMNS), ("nvtx", NVTX_COLUMNS),
                       ("gpus", GPU_COLUMNS), ("processes", PROCESS_COLUMNS), ("threads", THREAD_COLUMNS)):
        frame = getattr(trace, name)
        missing = set(cols) - set(frame.columns)
        assert not missing, f"{name} lacks {missing}"
    for name in ("kernels", "memcpy", "memset", "api", "sync", "nvtx"):
        frame = getattr(trace, name)
        for col in ("start", "end", "duration"):
            assert frame[col].dtype == np.int64, (name, col)
        assert (frame["duration"] >= 0).all()
        assert (frame["end"] - frame["start"] == frame["duration"]).all()
    # times are trace-relative: the GPU work lies inside [0, duration]
    ops = trace.gpu_ops()
    assert ops["start"].min() >= 0
    assert ops["end"].max() <= trace.info.duration_ns
    assert (trace.nvtx["range_id"].to_numpy() == np.arange(len(trace.nvtx))).all()


@needs_public
def test_detect_format_public():
    assert detect_format(CUDF_2020) == "nsys-sqlite"
    assert detect_format(MEMFUSION_2023) == "nsys-sqlite"
    assert detect_format(PUBLIC / "quasiben__nvtx-examples__cudf.qdrep") == "nsys-rep"
    assert detect_format(PUBLIC / "AveryClapp__ESMM-Research__profile.ncu-rep") == "ncu-rep"


# ---------------------------------------------------------------------------------------------- 2020.3
@needs_public
def test_2020_counts_match_sql(cudf):
    p = CUDF_2020
    _check_contract(cudf)
    assert cudf.info.export_schema == "2020"
    assert cudf.info.nsys_version is None
    assert len(cudf.kernels) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 268
    assert len(cudf.memcpy) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == 144
    assert len(cudf.memset) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET") == 14
    assert len(cudf.api) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == 1161
    assert len(cudf.sync) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION") == 240
    assert len(cudf.nvtx) == scalar(p, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60)")
    # two GPUs, properties from TARGET_INFO_CUDA_GPU, per-SM limits completed from the CC table
    assert len(cudf.gpus) == 2
    g = cudf.gpus.set_index("device").loc[0]
    assert g["name"] == "Quadro RTX 8000" and g["sm_count"] == 72
    assert (g["compute_major"], g["compute_minor"]) == (7, 5)
    assert g["max_threads_per_sm"] == 1024 and g["max_shared_per_block_optin"] == 64 * 1024
    # no PROCESSES table in 2020: names come from the main threads
    assert "python" in set(cudf.processes.loc[cudf.processes["pid"] == 138543, "name"])
    assert (cudf.kernels["device"] == 0).all()


@needs_public
def test_2020_nvtx_text_inline_and_textid(cudf):
    p = CUDF_2020
    rows = sql(p, """SELECT coalesce(s.value, e.text) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                     WHERE e.eventType = 59""")
    expected = sorted(r[0] for r in rows)
    assert sorted(cudf.nvtx["text"]) == expected
    inline = {r[0] for r in sql(p, "SELECT text FROM NVTX_EVENTS WHERE eventType = 59 AND text IS NOT NULL")}
    by_id = {r[0] for r in sql(p, """SELECT s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId
                                     WHERE e.eventType = 59""")}
    assert "DATAFRAME_INIT" in inline and "from_arrow" in by_id
    texts = set(cudf.nvtx["text"])
    assert inline <= texts and by_id <= texts
    # domains from NvtxDomainCreate events
    assert set(cudf.nvtx["domain"]) == {"cudf_python", "libcudf"}
    assert cudf.nvtx.loc[cudf.nvtx["text"] == "DATAFRAME_INIT", "domain"].iloc[0] == "cudf_python"
    # nesting: from_arrow/make_fixed_width_column/make_numeric_column exists
    assert "from_arrow/make_fixed_width_column/make_numeric_column" in set(cudf.nvtx["path"])


@needs_public
def test_2020_memcpy_kinds_and_sync(cudf):
    p = CUDF_2020
    h2d_pageable = scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0")
    got = ((cudf.memcpy["direction"] == "H2D") & (cudf.memcpy["src_kind"] == "pageable")
           & (cudf.memcpy["dst_kind"] == "device")).sum()
    assert got == h2d_pageable == 96
    assert (cudf.memcpy["direction"] == "D2H").sum() == 36
    assert (cudf.memcpy["direction"] == "D2D").sum() == 12
    assert set(cudf.memset["mem_kind"]) == {"device"}
    assert set(cudf.sync["sync_type"]) == {"stream_synchronize"}
    # every copy is joined to its cudaMemcpyAsync call
    assert set(cudf.memcpy["api_name"]) == {"cudaMemcpyAsync"}
    assert set(cudf.memset["api_name"]) == {"cudaMemsetAsync"}
    assert (cudf.sync["tid"] == 138543).all()


@needs_public
def test_2020_api_names_stripped(cudf):
    names = set(cudf.api["name"])
    assert "cudaLaunchKernel" in names and "cudaStreamSynchronize" in names
    assert not any("_v" in n for n in names)
    assert set(cudf.api["kind"]) == {"runtime", "driver"}
    assert set(cudf.api.loc[cudf.api["name"] == "cuLaunchKernel", "kind"]) == {"driver"}
    launches = set(cudf.kernels["api_name"])
    assert launches == {"cudaLaunchKernel", "cuLaunchKernel"}


# ---------------------------------------------------------------------------------------------- 2023.1
@needs_public
def test_2023_counts_match_sql(memfusion):
    p = MEMFUSION_2023
    _check_contract(memfusion)
    info = memfusion.info
    assert info.export_schema == "2023"
    assert info.nsys_version == "2023.1.2.43" and info.schema_version == "3.1.2"
    assert info.origin_ns == 0  # events are already session-relative in this export
    assert info.duration_ns == scalar(p, "SELECT duration FROM ANALYSIS_DETAILS")
    assert len(memfusion.kernels) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL") == 36
    assert len(memfusion.memcpy) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY") == 4
    assert len(memfusion.memset) == 0  # no memset table in this export: empty frame, not a crash
    assert len(memfusion.api) == scalar(p, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert len(memfusion.nvtx) == scalar(p, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (34,59,60)")
    assert len(memfusion.gpus) == 4
    g = memfusion.gpus.iloc[0]
    assert g["sm_count"] == 82 and g["max_threads_per_sm"] == 1536 and g["max_shared_per_block_optin"] == 101376
    assert "python" in set(memfusion.processes["name"])
    assert set(memfusion.sync["sync_type"]) == {"stream_synchronize", "event_synchronize"}
    driver = set(memfusion.api.loc[memfusion.api["kind"] == "driver", "name"])
    assert "cuLaunchKernelEx" in driver and "cuModuleUnload" in driver


@needs_public
def test_2023_nvtx_text_from_textid(memfusion):
    p = MEMFUSION_2023
    rows = sql(p, """SELECT s.value FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId
                     WHERE e.eventType = 59""")
    assert sorted(memfusion.nvtx["text"]) == sorted(r[0] for r in rows)
    assert set(memfusion.nvtx["domain"]) == {"TensorRT"}
    roots = memfusion.nvtx[memfusion.nvtx["depth"] == 0]
    assert list(roots["text"]) == ["ExecutionContext::execute"]
    assert (memfusion.nvtx.loc[memfusion.nvtx["depth"] == 1, "parent_id"] == roots["range_id"].iloc[0]).all()


@needs_public
def test_2023_attribution_matches_sql(memfusion):
    """Each kernel's innermost NVTX range equals an independent SQL join: kernel -> launching API call
    (runtime table, same process and correlation id) -> latest-started push/pop range on the calling
    thread that is open at the call's start."""
    p = MEMFUSION_2023
    rows = sql(p, """
        SELECT k.start, k.correlationId,
          (SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType = 59 AND n.globalTid = r.globalTid AND n.start <= r.start AND r.start < n.end
            ORDER BY n.start DESC LIMIT 1) AS innermost,
          s2.value
        FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)
        JOIN StringIds s2 ON s2.id = r.nameId
        ORDER BY k.start""")
    assert len(rows) == len(memfusion.kernels) == 36
    k = memfusion.kernels.sort_values(["start", "correlation_id"], ignore_index=True)
    by_corr = {r[1]: r for r in rows}
    for corr, rng, path, api in zip(k["correlation_id"], k["nvtx_range"], k["nvtx_path"], k["api_name"]):
        expected = by_corr[corr]
        assert rng == (expected[2] or "")
        assert api == expected[3].split("_v")[0]
        assert path.startswith("ExecutionContext::execute/") and path.endswith(rng)
    assert set(k["attribution"]) == {"thread"}
    # per-layer paths: many distinct ranges, each kernel under the execute() range
    assert k["nvtx_path"].nunique() > 10
    # API rows carry their own thread's range too
    launches = memfusion.api[memfusion.api["name"].isin(["cudaLaunchKernel", "cuLaunchKernelEx"])]
    assert (launches["nvtx_id"] >= 0).all()


@needs_public
def test_same_capture_two_schemas_agree(cudf, tmp_path):
    """The 2022.4 export of the 2020 report (when nsys is installed) gives the same kernels and ranges."""
    from analyzer.loading.nsys_rep import find_nsys

    if find_nsys() is None:
        pytest.skip("nsys is not installed (needed to export the .qdrep to a 2022-schema SQLite)")
    t22 = load_trace(PUBLIC / "quasiben__nvtx-examples__cudf.qdrep", cache_dir=tmp_path)
    assert t22.info.source_format == "nsys-rep"
    assert t22.info.export_schema in ("2022", "2023", "2024+")
    assert len(t22.kernels) == len(cudf.kernels) == 268
    assert len(t22.nvtx) == len(cudf.nvtx)
    assert list(t22.kernels["nvtx_path"]) == list(cudf.kernels["nvtx_path"])
    assert list(t22.kernels["duration"]) == list(cudf.kernels["duration"])
    assert list(t22.memcpy["direction"]) == list(cudf.memcpy["direction"])
    # the reported path is the user's report, not the cached export
    assert t22.info.path.name.endswith(".qdrep")


@needs_public
def test_missing_optional_tables_and_columns(tmp_path):
    """A copy of the 2023 export stripped of optional tables (sync, enums, GPU info, threads, processes,
    metadata) and columns (textId/domainId on NVTX, graphNodeId/launchType on kernels) still loads:
    absent tables are empty frames, absent columns are -1/"" (text falls back to the inline column)."""
    import shutil

    p = tmp_path / "stripped.sqlite"
    shutil.copyfile(MEMFUSION_2023, p)
    conn = sqlite3.connect(p)
    for table in ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND",
                  "ENUM_CUPTI_SYNC_TYPE", "TARGET_INFO_GPU", "ThreadNames", "PROCESSES", "EXPORT_META_DATA",
                  "ANALYSIS_DETAILS", "TARGET_INFO_SESSION_START_TIME"):
        conn.execute(f"DROP TABLE {table}")
    for table, column in (("NVTX_EVENTS", "textId"), ("NVTX_EVENTS", "domainId"),
                          ("CUPTI_ACTIVITY_KIND_KERNEL", "graphNodeId"),
                          ("CUPTI_ACTIVITY_KIND_KERNEL", "launchType")):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    conn.commit()
    conn.close()
    trace = load_trace(p)
    _check_contract(trace)
    assert trace.info.export_schema == "2020"  # no metadata table left
    assert len(trace.kernels) == 36
    assert (trace.kernels["launch_type"] == -1).all() and (trace.kernels["graph_node_id"] == -1).all()
    assert len(trace.sync) == 0 and len(trace.gpus) == 0 and len(trace.threads) == 0
    assert set(trace.memcpy["direction"]) == {"D2D"}  # from the built-in copy-kind codes
    assert len(trace.nvtx) == 59 and set(trace.nvtx["text"]) == {""}  # text was only in textId
    # origin falls back to the earliest event
    assert trace.info.origin_ns > 0 and trace.gpu_ops()["start"].min() >= 0


@needs_public
def test_unterminated_range_clipped_to_trace_end(tmp_path):
    """nsys writes end = NULL for a range still open when the capture stopped: it runs to the trace end."""
    import shutil

    p = tmp_path / "open_range.sqlite"
    shutil.copyfile(MEMFUSION_2023, p)
    conn = sqlite3.connect(p)
    conn.execute("UPDATE NVTX_EVENTS SET end = NULL WHERE eventType = 59 AND start = "
                 "(SELECT min(start) FROM NVTX_EVENTS WHERE eventType = 59)")
    conn.commit()
    conn.close()
    trace = load_trace(p)
    root = trace.nvtx[trace.nvtx["text"] == "ExecutionContext::execute"].iloc[0]
    assert root["end"] == trace.info.duration_ns
    assert root["depth"] == 0 and (trace.nvtx["depth"] >= 0).all()
    assert (trace.kernels["nvtx_path"].str.startswith("ExecutionContext::execute/")).all()


def test_minimal_hand_built_export(tmp_path):
    """Only a kernel table and StringIds (no API, NVTX, GPU or metadata tables): loads, unattributed."""
    p = tmp_path / "minimal.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    conn.execute("INSERT INTO StringIds VALUES (1, 'k1')")
    conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, "
                 "correlationId INT, globalPid INT, shortName INT)")
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, ?, ?, 1)",
                     [(1000, 1500, 1, 42 << 24), (500, 900, 2, 42 << 24)])
    conn.commit()
    conn.close()
    trace = load_trace(p)
    assert list(trace.kernels["start"]) == [0, 500]  # origin = earliest event, rows by start
    assert list(trace.kernels["name"]) == ["k1", "k1"]  # no demangled name: the short name
    assert set(trace.kernels["attribution"]) == {"none"} and set(trace.kernels["pid"]) == {42}
    assert (trace.kernels["tid"] == -1).all() and (trace.kernels["api_start"] == -1).all()
    assert len(trace.api) == len(trace.nvtx) == len(trace.gpus) == 0
    assert trace.info.export_schema == "2020" and trace.info.duration_ns == 1000


@needs_public
def test_2020_attribution_matches_sql(cudf):
    """2020 export (NVTX text partly inline, partly textId): innermost range per kernel equals SQL."""
    rows = sql(CUDF_2020, """
        SELECT k.correlationId,
          (SELECT coalesce(s.value, n.text) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
            WHERE n.eventType = 59 AND n.globalTid = r.globalTid AND n.start <= r.start AND r.start < n.end
            ORDER BY n.start DESC, n.end ASC LIMIT 1)
        FROM CUPTI_ACTIVITY_KIND_KERNEL k
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)""")
    assert len(rows) == len(cudf.kernels)
    expected = {corr: text or "" for corr, text in rows}
    got = dict(zip(cudf.kernels["correlation_id"], cudf.kernels["nvtx_range"]))
    assert got == expected
    assert (cudf.kernels["nvtx_range"] != "").mean() > 0.9
