"""The key attribution test on the team's own training trace (nsys 2025.x, H100).

``small_training_ctx128``: ``warmup`` then ``step_N`` ranges, each holding ``forward``, ``backward`` and
``optimizer_step``. PyTorch launches backward kernels from its autograd worker thread while the main
thread holds ``backward``, so this checks the process-level fallback too.

Read from ``tests/data/small_training_ctx128.sqlite.xz`` (skipped when absent) or ``$ANALYZER_TRAINING_TRACE``."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from analyzer.loading import load_trace

NAME = "small_training_ctx128"
PHASES = ("forward", "backward", "optimizer_step")


def _training_names() -> list[str]:
    from analyzer.testing import available

    names = [n for n in available("*_training_ctx*.sqlite.xz") if n != NAME]
    return [NAME, *names]  # the key trace first; skipped with a reason when absent


@pytest.fixture(scope="module", params=_training_names())
def training_sqlite(request) -> Path:
    """The decompressed trace (``analyzer.testing.real_trace``), or ``$ANALYZER_TRAINING_TRACE``."""
    env = os.environ.get("ANALYZER_TRAINING_TRACE")
    if env:
        if request.param != NAME:
            pytest.skip("ANALYZER_TRAINING_TRACE names one trace")
        return Path(env)
    from analyzer.testing import real_trace

    return real_trace(request.param)


def _sql_phase_gpu_time(path: Path) -> dict[tuple[str, str], int]:
    """Independent SQL: per (step, phase), the summed duration of kernels whose launching API call
    (runtime or driver, same process and correlation id) starts inside the phase range, on any thread
    of the process."""
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        api_tables = [t for (t,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN "
            "('CUPTI_ACTIVITY_KIND_RUNTIME', 'CUPTI_ACTIVITY_KIND_DRIVER')")]
        api = " UNION ALL ".join(f"SELECT start, globalTid, correlationId FROM {t}" for t in api_tables)
        rows = conn.execute(f"""
            WITH ranges AS (
                SELECT n.start, n.end, n.globalTid, coalesce(s.value, n.text) AS text
                FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
                WHERE n.eventType = 59),
            steps AS (SELECT * FROM ranges WHERE text GLOB 'step_[0-9]*'),
            phases AS (
                SELECT st.text AS step, ph.text AS phase, ph.start, ph.end, ph.globalTid
                FROM ranges ph JOIN steps st
                  ON st.globalTid = ph.globalTid AND st.start <= ph.start AND ph.end <= st.end
                WHERE ph.text IN ('forward', 'backward', 'optimizer_step')),
            api AS ({api})
            SELECT p.step, p.phase, sum(k.end - k.start)
            FROM CUPTI_ACTIVITY_KIND_KERNEL k
            JOIN api a ON a.correlationId = k.correlationId AND (a.globalTid >> 24) = (k.globalPid >> 24)
            JOIN phases p ON (p.globalTid >> 24) = (a.globalTid >> 24) AND p.start <= a.start AND a.start < p.end
            GROUP BY p.step, p.phase""").fetchall()
    finally:
        conn.close()
    return {(step, phase): int(total) for step, phase, total in rows}


def test_phase_gpu_time_matches_sql(training_sqlite):
    trace = load_trace(training_sqlite)
    expected = _sql_phase_gpu_time(training_sqlite)
    nvtx = trace.nvtx
    steps = nvtx[nvtx["text"].str.fullmatch(r"step_\d+") & (nvtx["depth"] == 0)]
    assert len(steps) >= 2, "expected several measured steps"
    k = trace.kernels
    for _, step in steps.iterrows():
        got = {}
        for phase in PHASES:
            prefix = f"{step['path']}/{phase}"
            inside = (k["nvtx_path"] == prefix) | k["nvtx_path"].str.startswith(prefix + "/")
            got[phase] = int(k.loc[inside, "duration"].sum())
            assert got[phase] == expected.get((step["text"], phase), 0), (step["text"], phase)
            assert got[phase] > 0
        ratio = got["backward"] / got["forward"]
        assert 1.5 <= ratio <= 2.6, f"{step['text']}: backward/forward = {ratio:.2f}, expected about 2"
    # the backward kernels come from another thread than the one holding the range
    assert (k["attribution"] == "process").any()
    back = k[k["nvtx_path"].str.contains("/backward", regex=False)]
    assert (back["attribution"] == "process").mean() > 0.5


def test_training_trace_schema(training_sqlite):
    trace = load_trace(training_sqlite)
    assert trace.info.export_schema == "2024+"
    assert trace.info.nsys_version and trace.info.nsys_version.startswith("2025")
    gpu = trace.gpus.iloc[0]
    if "H100" in gpu["name"]:
        assert (gpu["compute_major"], gpu["compute_minor"]) == (9, 0)
        assert gpu["max_threads_per_sm"] == 2048 and gpu["max_shared_per_block_optin"] == 227 * 1024
    assert set(trace.kernels["device"]) <= set(trace.gpus["device"])
    assert (trace.kernels["api_name"] != "").all()


@pytest.mark.parametrize("name", [NAME, "kineto/host_sync.pt.trace.json.xz"])
def test_launch_join_in_chunks_equals_one_join(name, monkeypatch):
    """The launch join (``attribution.launch_columns``) runs per chunk of GPU operations: with chunks of
    a few hundred operations every loaded frame (kernels, copies, memsets, sync, memory: call, pid,
    tid, NVTX range by thread and by the process fallback) equals the join in one piece. nsys (joined on
    pid and correlation id, backward kernels attributed by the process fallback) and torch.profiler
    (on the correlation id alone)."""
    import dataclasses

    import pandas as pd

    from analyzer.loading import attribution
    from analyzer.testing import DATA_DIR, real_trace

    path = real_trace(name) if name == NAME else DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"{name} not in {DATA_DIR}")
    whole = load_trace(path)
    frames = [f.name for f in dataclasses.fields(whole) if isinstance(getattr(whole, f.name), pd.DataFrame)]
    assert (whole.kernels["attribution"] == "process").any() or name != NAME  # the fallback is exercised
    monkeypatch.setattr(attribution, "LAUNCH_CHUNK", 333)
    assert len(whole.kernels) > 3 * 333
    chunked = load_trace(path)
    for frame in frames:
        pd.testing.assert_frame_equal(getattr(whole, frame), getattr(chunked, frame), check_exact=True, obj=frame)


@pytest.mark.parametrize("name", ["small_training_ctx128", "host_sync"])
def test_one_process_index_equals_the_merge(name):
    """When every call is of one process, the correlation index keys the calls by their correlation ids'
    low 32 bits alone (no 64-bit key per call); its joins equal a merge on (pid, correlation id) keeping
    the runtime call of a runtime/driver pair, also for operations of another process (no match) and for
    calls shuffled out of order (the sorted path)."""
    import numpy as np
    import pandas as pd

    from analyzer.loading.attribution import CorrelationIndex
    from analyzer.testing import real_trace

    t = load_trace(real_trace(name))
    api, k = t.api, t.kernels
    assert api["pid"].nunique() == 1
    op_pid = k["pid"].to_numpy().copy()
    op_pid[::5] += 1  # every fifth operation as if from another process
    op_corr = k["correlation_id"].to_numpy()
    for order in (np.arange(len(api)), np.random.default_rng(3).permutation(len(api))):
        calls = api.iloc[order].reset_index(drop=True)
        driver = (calls["kind"] == "driver").to_numpy().astype(np.int8)
        index = CorrelationIndex(calls["pid"].to_numpy(), calls["correlation_id"].to_numpy(), driver)
        assert index._one_pid is not None
        ranked = pd.DataFrame({"pid": calls["pid"].to_numpy(np.int64), "corr": calls["correlation_id"].to_numpy(np.int64),
                               "driver": driver, "row": np.arange(len(calls))})
        ranked = ranked.sort_values(["pid", "corr", "driver", "row"]).drop_duplicates(["pid", "corr"])
        expected = pd.DataFrame({"pid": op_pid.astype(np.int64), "corr": op_corr.astype(np.int64)}).merge(
            ranked, on=["pid", "corr"], how="left")["row"].fillna(-1).to_numpy(np.int64)
        assert (expected >= 0).sum() > len(k) // 2 and (expected[::5] == -1).all()
        np.testing.assert_array_equal(index.lookup(op_pid, op_corr), expected)
