"""A synchronizing operator's own time (:mod:`analyzer.facts.breakdown_syncop`): on mask_index_sync_loop
recorded by torch.profiler (65 synchronizing ``aten::nonzero`` a step, launch-bound), the GPU idle time
inside each ``aten::nonzero`` up to its ``cudaStreamSynchronize``'s return is charged to that call;
nothing is charged on the nsys recording of the same loop (no operator ranges), the partition stays
exact, and host-sync-in-loop's calls own the time (sync_calls' gpu_wait_ns)."""
from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from analyzer.facts import FactStore, load_all
from analyzer.facts.breakdown import host_wait_kind
from analyzer.facts.breakdown_sync import op_charged, op_detail, owned_by_next, owning_calls, refilled_call
from analyzer.facts.breakdown_syncop import _flatten, op_name
from analyzer.facts.nvtx import operator_ranges
from analyzer.facts.tests.test_breakdown import check_partition
from analyzer.loading import load_trace
from analyzer.testing import DATA_DIR
from analyzer.window import choose_window

load_all()

TORCH = "heldout/h100_run2/mask_index_sync_loop.pt.trace.json.gz"
NSYS = "heldout/h100_run2/mask_index_sync_loop.sqlite.xz"


@cache
def _store(name: str) -> FactStore:
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"{name} not in tests/data")
    t = load_trace(path)
    return FactStore(t, choose_window(t), {})


def _op_rows(seg):  # type: ignore[no-untyped-def]
    d = seg["detail"].astype(str)
    return seg.loc[(seg["cause"] == "host_sync").to_numpy() & d.map(lambda x: op_charged(x) is not None).to_numpy()]


def test_the_nonzero_launches_before_its_sync_are_the_syncs_cost():
    st = _store(TORCH)
    check_partition(st)
    seg = st.get("timeline_segments")
    ops = _op_rows(seg)
    assert set(ops["detail"].astype(str)) == {"aten::nonzero (up to cudaStreamSynchronize)"}
    # 65 synchronizing nonzero a step, about 90 us of GPU idle time each before the return
    per_step = ops["duration"].sum() / len(st.get("steps"))
    assert 4e6 < per_step < 8e6
    # each charged piece lies inside an aten::nonzero range of its thread, before a sync's return
    nv = st.trace.nvtx
    nz = nv.loc[operator_ranges(nv) & (nv["text"].astype(str) == "aten::nonzero").to_numpy()]
    s, e = nz["start"].to_numpy(), nz["end"].to_numpy()
    o = np.argsort(s)
    s, e = s[o], e[o]
    at = np.searchsorted(s, ops["start"].to_numpy(), side="right") - 1
    assert (at >= 0).all() and (ops["end"].to_numpy() <= e[at]).all()
    api = st.trace.api
    sync = api.loc[api["name"].astype(str) == "cudaStreamSynchronize"]
    ends = np.sort(sync["end"].to_numpy())
    nxt = np.searchsorted(ends, ops["start"].to_numpy(), side="left")
    # the sync ending next after each piece returns inside the same nonzero
    assert (ends[nxt] <= e[at]).all()
    # only launch-bound and host-work time moved: the launch-bound time fell by what was charged
    assert ops["nvtx_path"].astype(str).str.contains("aten::nonzero").all()


def test_host_sync_in_loops_calls_own_the_operators_time():
    st = _store(TORCH)
    seg = st.get("timeline_segments")
    calls = st.get("sync_calls")
    stream = calls.loc[calls["blocking"].to_numpy(dtype=bool)
                       & (calls["name"].astype(str) == "cudaStreamSynchronize").to_numpy()]
    hs = seg.loc[(seg["cause"] == "host_sync").to_numpy()
                 & (seg["detail"].astype(str).map(refilled_call) == "cudaStreamSynchronize").to_numpy()]
    assert int(stream["gpu_wait_ns"].sum()) == int(hs["duration"].sum())
    assert int(_op_rows(seg)["duration"].sum()) > 0.5 * int(stream["gpu_wait_ns"].sum())


def test_without_operator_ranges_nothing_is_charged():
    st = _store(NSYS)
    check_partition(st)
    assert _op_rows(st.get("timeline_segments")).empty


def test_details_name_the_operator_and_the_call():
    d = op_detail("aten::nonzero", "cudaStreamSynchronize")
    assert d == "aten::nonzero (up to cudaStreamSynchronize)"
    assert op_charged(d) == ("aten::nonzero", "cudaStreamSynchronize")
    assert refilled_call(d) == "cudaStreamSynchronize" and host_wait_kind(d) == "sync"
    assert owned_by_next(d) and owned_by_next("refill (cudaStreamSynchronize)")
    assert not owned_by_next("cudaStreamSynchronize")
    assert op_charged("refill (cudaStreamSynchronize)") is None and op_charged("cudaFree") is None
    assert op_name("aten::nonzero, seq = 12, sizes = [[8, 2]]") == "aten::nonzero"


def test_an_operators_time_belongs_to_the_call_it_holds():
    # two syncs on thread 1 returning at 100 and 300; an op piece at 150-200 (before the second's return)
    owner = owning_calls(np.array([1, 1]), np.array([150, 40]), np.array(["s", "s"], dtype=object),
                         np.array([True, False]), np.array([1, 1]), np.array([90, 290]), np.array([100, 300]),
                         np.array(["s", "s"], dtype=object))
    assert owner.tolist() == [1, -1]


def test_nested_spans_flatten_to_the_innermost():
    # outer 0-100 holding inner 20-50; a later span 120-130
    flat = _flatten([(0, 100, 7, 0), (20, 50, 8, 1), (120, 130, 9, 2)])
    assert flat == [(0, 20, 7, 0), (20, 50, 8, 1), (50, 100, 7, 0), (120, 130, 9, 2)]
    # a span overlapping the open one without nesting in it is left out
    assert _flatten([(0, 100, 7, 0), (50, 150, 8, 1)]) == [(0, 50, 7, 0), (50, 100, 7, 0)]
