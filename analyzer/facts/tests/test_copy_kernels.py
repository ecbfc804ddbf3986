"""The ``copy_kernels`` fact: copy-like kernels (concatenation, copy_) with their growth through a step and
the host's slack, on the held-out KV-cache pair (tests/data/heldout/h100_run3), checked against the trace's
own tables."""
from __future__ import annotations

import numpy as np

from analyzer.facts import FactStore, load_all
from analyzer.facts.copy_kernels import COPY_KERNEL_COLUMNS
from analyzer.loading import load_trace
from analyzer.testing import trace_file
from analyzer.window import choose_window

load_all()


def _store(name: str) -> FactStore:
    t = load_trace(trace_file(name))
    return FactStore(t, choose_window(t), {})


def test_kv_cache_grown_by_cat_copies_the_whole_cache_every_token():
    # kv_cache_cat: 8 layers x (key, value) x 16 tokens x 20 steps = 5,120 CatArrayBatchedCopy kernels of
    # 64 MiB each, about 203 us; the cache grows from 4096 to 4111 positions through a step (0.4%)
    st = _store("heldout/h100_run3/kv_cache_cat.sqlite.xz")
    c = st.get("copy_kernels")
    assert len(c) == 5120 and set(c["op"]) == {"cat"} and set(c["short_name"]) == {"CatArrayBatchedCopy"}
    assert set(c["range_key"]) == {"step_N/token"}
    assert (np.bincount(c["step"].to_numpy()) == 256).all()  # every kernel inside one of the 20 steps
    k = st.get("kernel_categories")
    cats = k[k["short_name"] == "CatArrayBatchedCopy"]
    assert c["duration"].sum() == cats["duration"].sum()
    assert 1.0e9 < c["duration"].sum() < 1.1e9
    # the copies lengthen through the step, by about the slice over the cache's length (15/4096)
    assert 0.002 < c["growth"].iloc[0] < 0.008 and c["growth"].nunique() == 1
    # the host's slack: its cudaDeviceSynchronize at each step's end, from the trace's own API table
    api = st.trace.api
    w = st.window
    syncs = api[(api["name"].astype(str).str.startswith("cudaDeviceSynchronize")) & (api["start"] >= w.start_ns)
                & (api["start"] < w.end_ns)]
    assert len(syncs) == 20
    assert c["host_wait_ns"].iloc[0] == (np.minimum(syncs["end"], w.end_ns) - syncs["start"]).sum()
    assert 470e6 < c["host_wait_ns"].iloc[0] < 490e6


def test_static_cache_twin_has_no_copy_kernels():
    st = _store("heldout/h100_run3/kv_cache_cat_fixed.sqlite.xz")
    c = st.get("copy_kernels")
    assert c.empty and list(c.columns) == list(COPY_KERNEL_COLUMNS)
