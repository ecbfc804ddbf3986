"""A synchronization's refill (:mod:`analyzer.facts.breakdown_sync`) on the host_sync recordings: charged
where host and GPU take turns (``--shape balanced``) or the GPU waits for each refill (``--shape gpu``),
not where the loop is launch-bound anyway (the default shape), never beyond what the host was blocked,
and counted by exactly one rule; and the definition (min(S, I) per interval, none around a step
boundary) on small timelines."""
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


# -- the definition, on a small timeline (one thread, one stream; distinct kernels, so no steps) ---------
US = 1_000


def _turns(host_us: int, gpu_us: int, n: int = 4):  # type: ignore[no-untyped-def]
    """n rounds of: a launch [t, t+8) of a kernel of ``gpu_us`` from t+10, a stream sync from t+12 until
    2 us after the kernel, then ``host_us`` of host code with no CUDA call."""
    from analyzer.facts.tests._build import trace

    api, kernels, t = [], [], 0
    for i in range(n):
        k0, k1 = t + 10 * US, t + (10 + gpu_us) * US
        api.append({"start": t, "end": t + 8 * US, "name": "cudaLaunchKernel", "correlation_id": i + 1,
                    "pid": 1, "tid": 1})
        kernels.append({"start": k0, "end": k1, "short_name": f"k{i}", "api_start": t, "correlation_id": i + 1,
                        "pid": 1, "tid": 1})
        api.append({"start": t + 12 * US, "end": k1 + 2 * US, "name": "cudaStreamSynchronize",
                    "correlation_id": -1, "pid": 1, "tid": 1})
        t = k1 + (2 + host_us) * US
    return trace(kernels=kernels, api=api), kernels[0]["start"], kernels[-1]["end"]


def _causes(t, start, end):  # type: ignore[no-untyped-def]
    from analyzer.facts.tests._build import store

    st = store(t, start, end, "user")
    check_partition(st)
    assert st.get("steps").empty
    w = _window(st)
    return {(c, d): int(n) for c, d, n in zip(w["cause"], w["detail"], w["duration_ns"]) if n}


def test_host_and_gpu_taking_turns_charge_min_s_i_per_interval():
    # 100 us kernels, 1.5 ms of host code after each sync: between two syncs' returns the host was blocked
    # S = 100 us and the GPU idle I = 1,512 us (1,500 host, 8 launch, 2 latency, 2 in the sync); removing
    # the sync buys min(S, I) = 100 us, 2 of which the sync's own wait already holds: 98 us of refill,
    # taken from the host code right after the previous sync. Before the first sync: nothing to refill;
    # after the last one the interval has no sync at its end.
    got = _causes(*_turns(1500, 100))
    assert got[("host_sync", "refill (cudaStreamSynchronize)")] == 3 * 98 * US
    assert got[("host_sync", "cudaStreamSynchronize")] == 3 * 2 * US  # the window ends with the last kernel
    assert got[("host_work", "(no NVTX range)")] == 3 * 1500 * US - 3 * 98 * US
    assert got[("launch_bound", "cudaLaunchKernel")] == 3 * 8 * US


def test_a_host_bound_loop_is_charged_only_what_the_sync_blocked():
    # 20 us kernels, 3 ms of host code: S = 20 us, so the refill is 18 us an interval and the rest of the
    # host code stays host work (removing the sync overlaps only 20 us of GPU work with it)
    got = _causes(*_turns(3000, 20))
    assert got[("host_sync", "refill (cudaStreamSynchronize)")] == 3 * 18 * US
    assert got[("host_work", "(no NVTX range)")] == 3 * (3000 - 18) * US


def test_host_code_after_a_sync_is_host_work_not_dispatch():
    # 100 us kernels, 150 us of host code after each sync: longer than a sync's return (100 us) and
    # shorter than the dispatch gap (1 ms), but the host is not between two launches there (the loop's own
    # code after a wait: a step's bookkeeping, a check): host work, from which the refill (98 us an
    # interval, as above) is taken
    got = _causes(*_turns(150, 100))
    assert got[("host_sync", "refill (cudaStreamSynchronize)")] == 3 * 98 * US
    assert got[("host_work", "(no NVTX range)")] == 3 * 150 * US - 3 * 98 * US  # the window ends with a kernel
    assert ("launch_bound", "dispatch") not in got


def test_the_syncs_around_a_step_boundary_get_no_refill():
    # the same turns, 4 rounds in each of 2 NVTX steps: of the 7 intervals between the 8 syncs' returns,
    # the one holding the step boundary, the one ending at the step's last sync and the one after the last
    # sync are not charged; the other 4 are, 98 us each
    from analyzer.facts.tests._build import trace
    from analyzer.window import choose_window

    t, _, _ = _turns(150, 100, 8)
    step = 4 * (10 + 100 + 2 + 150) * US
    nvtx = [{"start": i * step, "end": (i + 1) * step, "text": f"step_{i}", "path": f"step_{i}", "pid": 1, "tid": 1}
            for i in range(2)]
    t = trace(kernels=t.kernels.to_dict("records"), api=t.api.to_dict("records"), nvtx=nvtx)
    st = FactStore(t, choose_window(t), {})
    check_partition(st)
    assert len(st.get("steps")) == 2
    assert _refill_ns(st) == 4 * 98 * US


def test_the_gap_around_two_small_pageable_copies_is_the_syncs():
    """heldout/h100_run3/tensor_from_list (nsys): each layer builds two constants with
    ``torch.tensor(list, device="cuda")``, a pageable cudaMemcpyAsync and a cudaStreamSynchronize each; the
    first waits for the layer's kernels, and the host converts the next list (105-166 us) before the second,
    the GPU empty. Both uploads are small (4 KiB and 2 bytes, under SMALL_UPLOAD_BYTES), so that gap, from
    the layer's last kernel to the next layer's first, is the synchronizations' (charge_drains), named by
    the gap's last cudaStreamSynchronize (host-sync-in-loop counts it): host_sync 438.9 ms of the window,
    launch-bound 77.0 ms (before: 279.7 and 111.2, host work 125.0 ms, now 0); the twin saved 480.9."""
    st = _store("heldout/h100_run3/tensor_from_list")
    check_partition(st)
    by = _window(st).groupby("cause", observed=True)["duration_ns"].sum()
    assert 420e6 < by["host_sync"] < 480e6
    assert by["launch_bound"] < 90e6 and by.get("host_work", 0) < 1e6
    seg = st.get("timeline_segments")
    refill = seg.loc[seg["detail"].astype(str) == refill_detail("cudaStreamSynchronize")]
    assert int((refill["end"] - refill["start"]).sum()) > 300e6
    assert refill["nvtx_path"].astype(str).str.contains("layer_").mean() > 0.9


def test_host_code_of_a_millisecond_after_a_sync_keeps_min_s_i():
    """charge_drains leaves host code of the dispatch bound or more alone: in the taking-turns timeline
    (1.5 ms of host code after each sync) the sync's refill stays min(S, I) per interval, and the host
    code keeps host work beyond it."""
    got = _causes(*_turns(1500, 100))
    assert got[("host_sync", "refill (cudaStreamSynchronize)")] == 3 * 98 * US
    assert sum(n for (c, _d), n in got.items() if c == "host_work") > 3 * 1300 * US


def test_a_batch_uploaded_after_a_sync_keeps_the_loaders_host_work():
    """ddp/ddp_straggler_fixed_2gpu (rank 0): each step's gap around its synchronizations holds the
    host's making of the next batch (up to 1 ms) and the batch's 4 MiB pageable upload. Removing the
    syncs would not remove that work, and the upload is no value made on the host (at least
    SMALL_UPLOAD_BYTES): charge_drains leaves it alone. Charging it made host_sync 4.4 ms and
    host-sync-in-loop appear on the fixed job (analyze diff: "worse" on a 3.5x faster job); it stays
    1.6 ms, host work 19.1 ms."""
    st = _store("ddp/ddp_straggler_fixed_2gpu_rank0")
    check_partition(st)
    by = _window(st).groupby("cause", observed=True)["duration_ns"].sum()
    assert 1.0e6 < by["host_sync"] < 2.5e6
    assert by["host_work"] > 18e6
    up = st.trace.memcpy
    up = up.loc[(up["direction"].astype(str) == "H2D") & (up["bytes"] == 4 * 2**20)]
    assert len(up) >= 7 and (up["src_kind"].astype(str) == "pageable").all()
