"""Facts and window on the public nsys exports, checked against independent SQL over the SQLite."""
from __future__ import annotations

import sqlite3
from functools import lru_cache
from pathlib import Path

import pytest

from analyzer.analysis import Window
from analyzer.facts import FactStore
from analyzer.facts.scalars import trace_scalars
from analyzer.facts.tests._build import CUDF_2020, MEMFUSION_2023, PUBLIC
from analyzer.window import choose_window

pytestmark = pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"public traces folder {PUBLIC} is absent")

ALL_FACTS = ["gpu_ops", "gpu_busy", "gpu_gaps", "utilization", "nvtx_instances", "nvtx_projection",
             "kernel_categories", "category_summary", "top_kernels", "occupancy", "sync_calls",
             "alloc_calls", "copy_throughput", "memcpy_summary", "launch_stats"]


@lru_cache(maxsize=4)
def _trace(path: Path):
    from analyzer.loading import load_trace

    return load_trace(path)


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("select name from sqlite_master where type='table'")}


def sql_busy_ns(path: Path) -> dict[int, int]:
    """Per device, the union of GPU op intervals computed inside SQLite with window functions."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    parts = [f"select deviceId d, start s, end e from {t}" for t in
             ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
             if t in _tables(con)]
    query = f"""
    with ops as ({' union all '.join(parts)}),
    m as (select d, s, e, max(e) over (partition by d order by s, e
                 rows between unbounded preceding and 1 preceding) pm from ops),
    b as (select d, s, e, case when pm is null or s > pm then 1 else 0 end nb from m),
    g as (select d, s, e, sum(nb) over (partition by d order by s, e rows unbounded preceding) bid from b)
    select d, sum(be - bs) from (select d, bid, min(s) bs, max(e) be from g group by d, bid) group by d"""
    return {int(d): int(v) for d, v in con.execute(query)}


@pytest.mark.parametrize("path", [CUDF_2020, MEMFUSION_2023], ids=["cudf2020", "memfusion2023"])
def test_busy_time_matches_sql(path):
    t = _trace(path)
    store = FactStore(t, choose_window(t, "full"), {})
    busy = store.get("gpu_busy").groupby("device")["duration"].sum().to_dict()
    assert busy == sql_busy_ns(path)
    # busy + gaps covers the whole GPU activity span of each device
    gaps = store.get("gpu_gaps").groupby("device")["duration"].sum().to_dict()
    ops = store.get("gpu_ops").groupby("device").agg(lo=("start", "min"), hi=("end", "max"))
    for dev, row in ops.iterrows():
        assert busy[dev] + gaps.get(dev, 0) == row.hi - row.lo


@pytest.mark.parametrize("path", [CUDF_2020, MEMFUSION_2023], ids=["cudf2020", "memfusion2023"])
def test_every_fact_computes_with_declared_columns(path):
    t = _trace(path)
    store = FactStore(t, choose_window(t, None), {})
    for name in ALL_FACTS:
        store.get(name)  # the store checks declared columns
    scalars = trace_scalars(store)
    assert scalars["kernel_count"] == len(store.get("kernel_categories"))
    assert 0 <= scalars["gpu_busy_share"] <= 1


def test_memfusion_auto_window_is_the_whole_inference():
    # one TensorRT inference with per-layer NVTX ranges (Conv_239_clone_1.., Identity_0..): no steps
    t = _trace(MEMFUSION_2023)
    w = choose_window(t, None)
    assert w.source == "auto" and w.setup_ns == 0
    assert (w.start_ns, w.end_ns) == (int(t.kernels["start"].min()), int(t.kernels["end"].max()))


def test_memfusion_projection_and_occupancy_match_sql():
    t = _trace(MEMFUSION_2023)
    store = FactStore(t, choose_window(t, "full"), {})
    proj = store.get("nvtx_projection").set_index("path")
    con = sqlite3.connect(f"file:{MEMFUSION_2023}?mode=ro", uri=True)
    (ktime,) = con.execute("select sum(end - start) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    (mtime,) = con.execute("select sum(end - start) from CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
    # every op is launched inside the single ExecutionContext::execute range
    root = proj.loc["ExecutionContext::execute"]
    assert root.gpu_ns == ktime + mtime and root.kernel_count == 36
    assert proj["gpu_ns_exclusive"].sum() == ktime + mtime
    # a 128-thread, 166-register, 64 KiB-smem implicit GEMM on an RTX 3090 (CC 8.6): 1 block/SM
    occ = store.get("occupancy")
    row = occ.loc[(occ.registers == 166) & (occ.smem == 65536)].iloc[0]
    assert (row.blocks_per_sm, row.limiter) == (1, "shared_memory")
    assert row.theoretical_occupancy == pytest.approx(4 / 48)
    cats = store.get("category_summary").set_index("category")
    assert cats.loc["convolution", "count"] == 20


def test_cudf_window_and_sync_calls_match_sql():
    t = _trace(CUDF_2020)
    w = choose_window(t, None)
    assert w.source == "nvtx" and "GROUPBY_AGG" in w.description
    store = FactStore(t, Window(-(2**62), 2**62, "user", "everything"), {})
    con = sqlite3.connect(f"file:{CUDF_2020}?mode=ro", uri=True)
    (n_sync,) = con.execute(
        "select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId "
        "where s.value like 'cudaStreamSynchronize%' or s.value like 'cudaDeviceSynchronize%'").fetchone()
    sync = store.get("sync_calls")
    assert int(sync["sync_kind"].isin(["stream", "device"]).sum()) == n_sync
    (n_alloc,) = con.execute(
        "select count(*) from CUPTI_ACTIVITY_KIND_RUNTIME r join StringIds s on s.id = r.nameId "
        "where s.value like 'cudaMalloc%' or s.value like 'cudaFree%'").fetchone()
    assert len(store.get("alloc_calls")) == n_alloc
