"""The ``timeline_breakdown`` fact: an exact partition of each GPU's window, on every committed trace,
and the idle classification's definitions on small timelines."""
from __future__ import annotations

import numpy as np
import pytest

from analyzer.facts import load_all
from analyzer.facts.breakdown import CAUSES
from analyzer.facts.tests._build import store, trace
from analyzer.loading import load_trace
from analyzer.testing import DATA_DIR, real_trace
from analyzer.window import choose_window

load_all()

US = 1_000


def _committed() -> list[str]:
    """Every trace under tests/data: nsys exports (``.sqlite.xz``, as ``real_trace`` stems) and
    torch.profiler traces (paths relative to tests/data)."""
    if not DATA_DIR.is_dir():
        return []
    nsys = sorted(str(p.relative_to(DATA_DIR)).removesuffix(".sqlite.xz") for p in DATA_DIR.rglob("*.sqlite.xz"))
    kineto = sorted(str(p.relative_to(DATA_DIR)) for p in DATA_DIR.rglob("*.pt.trace.json*"))
    return nsys + kineto


def _load(name: str):  # type: ignore[no-untyped-def]
    from analyzer.errors import InputError

    try:
        return load_trace(DATA_DIR / name if ".pt.trace.json" in name else real_trace(name))
    except InputError as err:  # CPU-only torch.profiler traces: nothing to partition
        pytest.skip(str(err))


def check_partition(st) -> None:  # type: ignore[no-untyped-def]
    """The invariants every breakdown holds."""
    w = st.window
    seg = st.get("timeline_segments")
    b = st.get("timeline_breakdown")
    devices = sorted(set(st.get("gpu_ops")["device"].astype(int)))
    if w.duration_ns <= 0 or not devices:
        assert b.empty and seg.empty
        return
    assert set(b["cause"]) <= set(CAUSES)
    assert (b["duration_ns"] >= 0).all() and (b["share"] <= 1 + 1e-12).all() and (b["share"] >= 0).all()
    assert (b["cause_share"] <= 1 + 1e-12).all()
    sums = b.groupby(["device", "scope", "key"])["share"].sum()
    assert np.allclose(sums.to_numpy(), 1.0)
    for d in devices:
        s = seg.loc[seg["device"] == d]
        start, end = s["start"].to_numpy(), s["end"].to_numpy()
        # disjoint, ordered, covering the window with no hole
        assert start[0] == w.start_ns and end[-1] == w.end_ns
        assert (end > start).all() and (start[1:] == end[:-1]).all()
        for scope in ("window", "range"):
            rows = b.loc[(b["device"] == d) & (b["scope"] == scope)]
            assert int(rows["duration_ns"].sum()) == w.duration_ns, scope
    steps = st.get("steps")
    if not steps.empty:
        inside = b.loc[b["scope"] == "step"].groupby("device")["duration_ns"].sum()
        assert (inside <= w.duration_ns).all()


@pytest.mark.parametrize("name", _committed())
def test_breakdown_partitions_the_window_on_every_committed_trace(name):
    t = _load(name)
    assert t is not None
    w = choose_window(t)
    from analyzer.facts import FactStore

    check_partition(FactStore(t, w, {}))


def test_launch_bound_loop_is_launch_bound():
    # tiny_kernels: a Python loop over 300 small tensors; nearly all idle time is launching
    from analyzer.facts import FactStore

    t = load_trace(real_trace("tiny_kernels"))
    w = choose_window(t)
    b = FactStore(t, w, {}).get("timeline_breakdown")
    win = b.loc[b["scope"] == "window"].groupby("cause")["duration_ns"].sum() / w.duration_ns
    assert win["launch_bound"] > 0.8
    assert win.drop("launch_bound").max() < 0.15


def test_data_loading_is_host_work_named_by_its_range():
    from analyzer.facts import FactStore

    t = load_trace(real_trace("dataloader_starved"))
    w = choose_window(t)
    b = FactStore(t, w, {}).get("timeline_breakdown")
    hw = b.loc[(b["scope"] == "window") & (b["cause"] == "host_work")]
    top = hw.sort_values("duration_ns").iloc[-1]
    assert top["detail"] == "load_batch" and top["cause_share"] > 0.9
    assert hw["duration_ns"].sum() > 0.5 * w.duration_ns


# -- the definitions, on small timelines (one thread launching on one stream) ---------------------------
def _api(start, end, name="cudaLaunchKernel", corr=-1):
    return {"start": start, "end": end, "name": name, "correlation_id": corr, "pid": 1, "tid": 1}


def _kernel(start, end, launch_start, corr, name="k"):
    return {"start": start, "end": end, "short_name": name, "api_start": launch_start, "correlation_id": corr,
            "pid": 1, "tid": 1}


def _window_causes(t, start, end, **options):  # type: ignore[no-untyped-def]
    st = store(t, start, end, "user", **options)
    check_partition(st)
    b = st.get("timeline_breakdown")
    win = b.loc[b["scope"] == "window"]
    return {(c, d): int(n) for c, d, n in zip(win["cause"], win["detail"], win["duration_ns"])}


def test_idle_between_launches_is_launch_bound_and_long_host_code_is_host_work():
    # k1 [10, 20) us launched by a call [0, 8); 30 us of Python; launch call [38, 46) -> k2 [50, 60);
    # 2 ms of host code; launch call [2046, 2054) -> k3 [2058, 2068)
    api = [_api(0, 8 * US, corr=1), _api(38 * US, 46 * US, corr=2), _api(2046 * US, 2054 * US, corr=3)]
    kernels = [_kernel(10 * US, 20 * US, 0, 1), _kernel(50 * US, 60 * US, 38 * US, 2),
               _kernel(2058 * US, 2068 * US, 2046 * US, 3)]
    got = _window_causes(trace(kernels=kernels, api=api), 10 * US, 2068 * US)
    assert got[("compute", "other")] == 30 * US
    # gap [20, 50): host free until 38 (dispatch: 30 us < 1 ms), launch call 38-46, latency 46-50
    assert got[("launch_bound", "dispatch")] == 18 * US
    assert got[("launch_bound", "cudaLaunchKernel")] == 8 * US * 2
    assert got[("launch_bound", "launch latency")] == 4 * US * 2
    # gap [60, 2058): 1,986 us of host code with no CUDA call, then the launch
    assert got[("host_work", "(no NVTX range)")] == 1986 * US
    assert sum(got.values()) == 2058 * US


def test_framework_code_between_two_launches_under_the_dispatch_gap_is_dispatch():
    # 400 us of host code between two launch calls (the autograd engine or an optimizer's bookkeeping
    # between two kernels: 100 us to 1 ms on the committed recordings) is dispatch; a graph removes it
    api = [_api(0, 8 * US, corr=1), _api(430 * US, 438 * US, corr=2)]
    kernels = [_kernel(10 * US, 30 * US, 0, 1), _kernel(440 * US, 450 * US, 430 * US, 2)]
    got = _window_causes(trace(kernels=kernels, api=api), 10 * US, 450 * US)
    assert got[("launch_bound", "dispatch")] == 400 * US
    assert ("host_work", "(no NVTX range)") not in got
    # the same gap with a smaller dispatch_gap_ns (fact option) is host work
    got = _window_causes(trace(kernels=kernels, api=api), 10 * US, 450 * US, dispatch_gap_ns=100 * US)
    assert got[("host_work", "(no NVTX range)")] == 400 * US


def test_a_kernel_queued_before_the_gap_waits_on_something_else():
    # k2 launched at 5 us (before k1 ends) but starts 100 us after k1 ends: another stream or an event
    api = [_api(0, 4 * US, corr=1), _api(5 * US, 9 * US, corr=2)]
    kernels = [_kernel(10 * US, 20 * US, 0, 1), _kernel(120 * US, 130 * US, 5 * US, 2)]
    got = _window_causes(trace(kernels=kernels, api=api), 10 * US, 130 * US)
    assert got == {("compute", "other"): 20 * US, ("wait_other", "queued (another stream or an event)"): 100 * US}


def test_a_blocking_sync_is_host_sync_and_its_return_too():
    # k1 [10, 50); the host syncs [12, 52) then returns and launches [60, 68) -> k2 [70, 80)
    api = [_api(0, 8 * US, corr=1), _api(12 * US, 52 * US, "cudaStreamSynchronize"), _api(60 * US, 68 * US, corr=2)]
    kernels = [_kernel(10 * US, 50 * US, 0, 1), _kernel(70 * US, 80 * US, 60 * US, 2)]
    got = _window_causes(trace(kernels=kernels, api=api), 10 * US, 80 * US)
    assert got[("host_sync", "cudaStreamSynchronize")] == 2 * US + 8 * US  # in the call, then its return
    assert got[("launch_bound", "cudaLaunchKernel")] == 8 * US
    assert got[("launch_bound", "launch latency")] == 2 * US


def test_without_api_calls_idle_time_is_unknown_and_says_why():
    kernels = [_kernel(10 * US, 20 * US, -1, -1), _kernel(50 * US, 60 * US, -1, -1)]
    got = _window_causes(trace(kernels=kernels), 10 * US, 60 * US)
    assert got[("unknown", "no CUDA API calls in the trace")] == 30 * US


def test_copies_are_exposed_only_where_no_kernel_runs():
    memcpy = [{"start": 0, "end": 40 * US, "bytes": 1 << 20, "direction": "H2D", "src_kind": "pageable",
               "dst_kind": "device", "correlation_id": 7}]
    kernels = [_kernel(10 * US, 20 * US, -1, -1)]
    got = _window_causes(trace(kernels=kernels, memcpy=memcpy), 0, 40 * US)
    assert got == {("compute", "other"): 10 * US, ("exposed_copy", "H2D pageable"): 30 * US}


def test_kernels_without_durations_leave_one_idle_gap(tmp_path):
    """A damaged torch.profiler trace whose kernels all lost their ``dur`` (read as 0 ns: found by the
    kineto fuzz harness) still partitions its window: no busy piece, so no gap has a neighbour."""
    import gzip
    import json

    from analyzer.facts import FactStore

    src = DATA_DIR / "kineto" / "occupancy_fixed.pt.trace.json.gz"
    if not src.is_file():
        pytest.skip(f"{src} is absent")
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["dur"] = None
    path = tmp_path / "no_durations.pt.trace.json"
    path.write_text(json.dumps(doc))
    t = load_trace(path)
    assert len(t.kernels) and (t.kernels["duration"] == 0).all()
    st = FactStore(t, choose_window(t), {})
    check_partition(st)
    b = st.get("timeline_breakdown")
    assert not (b.loc[b["scope"] == "window", "cause"] == "compute").any()


def test_full_window_calls_nothing_setup_for_lying_before_the_first_step():
    """``--window full`` analyzes the whole span: the host time before the first step (model loading
    in the program's ``setup`` range, warm-up) is classified by what the host did; only one-time CUDA
    calls (library loads, graph capture, the 4 warm-up launches of 10 ms or more and the 20 first
    launches of 3-10 ms, 20x or more their kernel's later launches, that load their kernels' modules)
    stay ``setup``. Before the fix 1.28 s of decode_eager's 2.05 s were "setup: before
    the first step"."""
    from analyzer.facts import FactStore
    from analyzer.facts.breakdown import _SETUP_API, one_time_detail
    from analyzer.facts.breakdown_firstlaunch import first_launch_detail

    t = load_trace(real_trace("round3/decode_eager"))
    w = choose_window(t, "full")
    assert w.steps is not None and len(w.steps.starts) >= 5
    st = FactStore(t, w, {})
    check_partition(st)
    seg = st.get("timeline_segments")
    assert "before the first step" not in set(seg["detail"])
    setup = seg.loc[seg["cause"] == "setup"]
    one_time = {one_time_detail("cudaLaunchKernel"), first_launch_detail("cudaLaunchKernel"),
                first_launch_detail("cudaLaunchKernelExC")}
    assert all(_SETUP_API.match(d) or d in one_time for d in set(setup["detail"])), set(setup["detail"])
    before = seg.loc[seg["end"] <= min(w.steps.starts)]
    by_cause = before.groupby("cause")["duration"].sum()
    # most of what ran before the first step is the program's own host code, named by its range
    assert by_cause.idxmax() == "host_work" and by_cause["host_work"] > 0.5 * by_cause.sum()
    hw = before.loc[before["cause"] == "host_work"].groupby("detail")["duration"].sum()
    assert hw.idxmax() == "setup"  # the workload's own NVTX range, not the breakdown's cause


def test_a_gpu_only_trace_partitions_its_window_and_says_what_it_cannot_classify(tmp_path):
    """Bad input (issue 27): a capture with GPU activity only (no CUDA API calls, no NVTX, no OS
    runtime), made from the real ``healthy`` trace by dropping those tables from a copy. The breakdown
    still covers the window exactly; the idle time it cannot attribute is ``unknown`` and says why."""
    import shutil
    import sqlite3

    from analyzer.facts import FactStore

    path = tmp_path / "gpu_only.sqlite"
    shutil.copyfile(real_trace("healthy"), path)
    with sqlite3.connect(path) as db:
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API", "OSRT_CALLCHAINS"):
            db.execute(f"DROP TABLE IF EXISTS {table}")
    t = load_trace(path)
    st = FactStore(t, choose_window(t), {})
    check_partition(st)
    b = st.get("timeline_breakdown")
    win = b.loc[b["scope"] == "window"]
    idle = win.loc[win["cause"].isin(["launch_bound", "host_sync", "host_work", "wait_other", "setup", "unknown"])]
    assert set(idle["cause"]) == {"unknown"} and set(idle["detail"]) == {"no CUDA API calls in the trace"}
    assert idle["duration_ns"].sum() > 0


def test_host_work_is_named_by_the_range_holding_most_of_its_time():
    """host-work-in-loop's "mostly in" is the range with the most host-work time (``top(detail,
    duration)``), not the one with the most stretches: host_sync over its whole span has 7.09 s of
    its 7.26 s in the program's ``setup`` range, in 1 stretch, and more stretches in ``forward``."""
    from analyzer.api import analyze

    analysis = analyze(real_trace("host_sync"), window="full")
    f = next(f for f in analysis.findings if f.rule == "host-work-in-loop")
    assert "mostly in `setup`" in f.message, f.message


@pytest.mark.parametrize("name", ["host_sync", "round3/decode_eager", "kineto/host_sync_stack.pt.trace.json.gz"])
def test_idle_time_classified_in_chunks_is_the_same(name, monkeypatch):
    """The idle gaps are classified :data:`IDLE_CHUNK` at a time, each feeding thread's calls cut to the
    chunk's time (10 M kernels have about 10 M gaps): chunks of 3 and 64 gaps give the same segments,
    refills (host_sync's synchronizations) and breakdown as one chunk, category order included."""
    import pandas as pd

    from analyzer.facts import breakdown
    from analyzer.facts.registry import FactStore

    t = _load(name)
    w = choose_window(t)
    whole = FactStore(t, w, {})
    seg, table = whole.get("timeline_segments"), whole.get("timeline_breakdown")
    assert len(seg) > 1000 and (seg["cause"] != "compute").sum() > 500
    for size in (3, 64):
        monkeypatch.setattr(breakdown, "IDLE_CHUNK", size)
        st = FactStore(t, w, {})
        pd.testing.assert_frame_equal(st.get("timeline_segments"), seg)
        pd.testing.assert_frame_equal(st.get("timeline_breakdown"), table)


@pytest.mark.parametrize("name", ["host_sync", "ddp/ddp_exposed_comm_2gpu", "round3/decode_eager"])
def test_breakdown_summed_in_chunks_is_the_same(name, monkeypatch):
    """``timeline_breakdown`` sums the segments :data:`SUM_CHUNK` at a time (10 M kernels have about 48 M
    segments), merging the chunks' groups: chunks of 5 and 97 segments (groups split across chunks, steps
    and devices crossing chunk boundaries) give the same table as one chunk, row order included."""
    import pandas as pd

    from analyzer.facts import breakdown_table
    from analyzer.facts.registry import FactStore

    t = _load(name)
    w = choose_window(t)
    whole = FactStore(t, w, {})
    seg, table = whole.get("timeline_segments"), whole.get("timeline_breakdown")
    assert len(seg) > 500 and (table["scope"] == "step").any() and (table["segments"] > 97).any()
    for size in (5, 97):
        monkeypatch.setattr(breakdown_table, "SUM_CHUNK", size)
        pd.testing.assert_frame_equal(FactStore(t, w, {}).get("timeline_breakdown"), table)


@pytest.mark.parametrize("name", ["host_sync", "round3/host_work_in_range_fixed", "kineto/host_sync_stack.pt.trace.json.gz"])
def test_gaps_host_calls_looked_up_in_chunks_are_the_same(name, monkeypatch):
    """``gpu_gaps`` looks up the feeding thread's CUDA call open at each gap and the calls' time inside it
    :data:`analyzer.facts.intervals.QUERY_CHUNK` gaps at a time (10 M kernels have about 10 M gaps, a
    dozen temporaries each): chunks of 3 and 50 gaps give the same gaps as one chunk."""
    import pandas as pd

    from analyzer.facts import intervals
    from analyzer.facts.registry import FactStore

    t = _load(name)
    w = choose_window(t)
    gaps = FactStore(t, w, {}).get("gpu_gaps")
    assert len(gaps) > 100 and (gaps["host_api_overlap_ns"] > 0).any() and (gaps["host_api"] != "").any()
    for size in (3, 50):
        monkeypatch.setattr(intervals, "QUERY_CHUNK", size)
        pd.testing.assert_frame_equal(FactStore(t, w, {}).get("gpu_gaps"), gaps)


@pytest.mark.parametrize("name", ["host_sync", "ddp/ddp_straggler_2gpu", "kineto/decode_b1_cudagraph_h200.pt.trace.json.xz"])
def test_segment_step_and_range_key_columns_read_row_by_row(name):
    # the step and range-key categoricals are spread from a few values (runs of steps, one key per path):
    # each row's label is its start's step and its path's key, the categories the used labels, sorted
    from analyzer.facts import FactStore
    from analyzer.facts.breakdown import step_bounds
    from analyzer.facts.breakdown_ranges import generic_keys

    t = _load(name)
    st = FactStore(t, choose_window(t), {})
    seg = st.get("timeline_segments")
    assert len(seg) > 1000
    keys = seg["range_key"].astype(str).to_numpy()
    paths = seg["nvtx_path"].astype(str).to_numpy()
    assert keys.tolist() == generic_keys(paths)
    assert list(seg["range_key"].cat.categories) == sorted(set(keys.tolist()))
    lo, hi, names = step_bounds(st.get("steps"))
    start = seg["start"].to_numpy()
    k = np.searchsorted(lo, start, side="right") - 1
    inside = (k >= 0) & (start < hi[np.maximum(k, 0)])
    want = np.where(inside, np.asarray([str(x) for x in names] + [""], dtype=object)[np.where(inside, k, -1)], "")
    got = seg["step"].astype(str).to_numpy()
    assert (got == want).all() and len(set(want.tolist()) - {""}) >= 1
    assert list(seg["step"].cat.categories) == sorted(set(got.tolist()))
