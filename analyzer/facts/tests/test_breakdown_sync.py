"""A synchronization's refill (:mod:`analyzer.facts.breakdown_sync`) on the host_sync recordings: charged
where host and GPU take turns (``--shape balanced``) or the GPU waits for each refill (``--shape gpu``),
not where the loop is launch-bound anyway (the default shape), never beyond what the host was blocked,
and counted by exactly one rule."""
from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from analyzer.facts import FactStore, load_all
from analyzer.facts.api import api_base_codes
from analyzer.facts.breakdown import host_wait_kind
from analyzer.facts.breakdown_sync import REFILL_PREFIX, refill_detail, refilled_call
from analyzer.facts.scalars import breakdown_scalars
from analyzer.facts.tests.test_breakdown import check_partition
from analyzer.loading import load_trace
from analyzer.testing import DATA_DIR, real_trace
from analyzer.window import choose_window

load_all()

BALANCED = "round3/host_sync_balanced"
GPU = "round3/host_sync_gpu"
LAUNCH = "host_sync"  # the launch-bound shape, recorded first
TORCH = "round3/host_sync_balanced.pt.trace.json.gz"


@cache
def _store(name: str) -> FactStore:
    path = DATA_DIR / name if ".pt.trace.json" in name else real_trace(name)
    if not path.is_file():
        pytest.skip(f"{name} not in tests/data")
    t = load_trace(path)
    return FactStore(t, choose_window(t), {})


def _window(st: FactStore):  # type: ignore[no-untyped-def]
    b = st.get("timeline_breakdown")
    return b.loc[b["scope"] == "window"]


def _refill_ns(st: FactStore) -> int:
    w = _window(st)
    refill = (w["cause"] == "host_sync") & w["detail"].astype(str).str.startswith(REFILL_PREFIX)
    return int(w.loc[refill, "duration_ns"].sum())


def _blocked_ns(st: FactStore) -> int:
    """Time the window's synchronizing calls held the host (the bound of what removing them buys)."""
    seg = st.get("timeline_segments")
    w = st.window
    api = st.trace.api
    names = set(seg.loc[seg["cause"] == "host_sync", "detail"].astype(str).map(refilled_call))
    codes, base = api_base_codes(st)
    rows = api.loc[np.isin(base.astype(str), list(names))[codes]]
    s = np.maximum(rows["start"].to_numpy(), w.start_ns)
    e = np.minimum(rows["end"].to_numpy(), w.end_ns)
    return int(np.maximum(e - s, 0).sum())


@pytest.mark.parametrize("name", [BALANCED, GPU, f"{BALANCED}_run2", f"{GPU}_run2", TORCH])
def test_the_refill_is_charged_to_the_sync_and_the_partition_stays_exact(name):
    st = _store(name)
    check_partition(st)
    refill = _refill_ns(st)
    w = _window(st)
    hs = int(w.loc[w["cause"] == "host_sync", "duration_ns"].sum())
    assert refill > 0.05 * hs  # charged (on nsys most of the cost: see below)
    assert refill <= _blocked_ns(st)  # never more than the host was blocked: at most S per interval
    seg = st.get("timeline_segments")
    r = seg.loc[seg["detail"].astype(str).str.startswith(REFILL_PREFIX)]
    # refills are the host's idle time, by the sync's thread, in the sync's range
    assert (r["cause"] == "host_sync").all() and (r["host_tid"] >= 0).all()
    assert r["nvtx_path"].astype(str).str.contains("host_check").mean() > 0.9


@pytest.mark.parametrize("name", [BALANCED, GPU])
def test_on_nsys_the_refill_is_most_of_the_syncs_cost(name):
    st = _store(name)
    w = _window(st)
    hs = int(w.loc[w["cause"] == "host_sync", "duration_ns"].sum())
    assert _refill_ns(st) > 0.5 * hs


def test_a_launch_bound_loop_keeps_its_launch_bound_time():
    """The default shape issues each micro-step more slowly than the GPU runs it: the GPU drained long
    before each sync, so the sync costs its own wait only (S small) and launch-bound stays the cause."""
    st = _store(LAUNCH)
    check_partition(st)
    w = _window(st)
    by = w.groupby("cause", observed=True)["duration_ns"].sum()
    assert _refill_ns(st) < 0.01 * by["launch_bound"]
    assert by["launch_bound"] > 5 * by["host_sync"]


@pytest.mark.parametrize("name", [BALANCED, TORCH])
def test_each_refill_counts_with_its_calls_kind_and_only_once(name):
    st = _store(name)
    w = _window(st)
    scal = breakdown_scalars(st.get("timeline_breakdown"))
    hs = w.loc[w["cause"] == "host_sync"]
    total = int(hs["duration_ns"].sum())
    assert scal["host_sync_ns"] + scal["host_copy_wait_ns"] + scal["host_alloc_wait_ns"] == pytest.approx(total)
    kinds = {str(d): host_wait_kind(str(d)) for d in hs["detail"].unique()}
    for detail, kind in kinds.items():
        assert kind == host_wait_kind(refilled_call(detail))
    sync_refill = sum(int(n) for d, n in zip(hs["detail"].astype(str), hs["duration_ns"])
                      if d.startswith(REFILL_PREFIX) and kinds[d] == "sync")
    assert sync_refill > 0 and scal["host_sync_ns"] >= sync_refill


def test_refill_detail_names_its_call():
    assert refill_detail("cudaStreamSynchronize") == "refill (cudaStreamSynchronize)"
    assert refilled_call("refill (cudaMemcpyAsync)") == "cudaMemcpyAsync"
    assert refilled_call("cudaMemcpyAsync") == "cudaMemcpyAsync"
    assert host_wait_kind("refill (cudaMemcpyAsync)") == "copy"
    assert host_wait_kind("refill (cudaFree)") == "alloc"
    assert host_wait_kind("refill (cudaStreamSynchronize)") == "sync"
