"""The timeline breakdown on the inputs issue 27 calls bad: several host threads launching on one GPU,
kernels from several processes, torch.profiler traces without ProfilerStep, graph replays whose launch
call the trace lacks, traces without NVTX, GPU-only captures. Each still partitions every GPU's window
exactly, and the report states the part it cannot classify once, with why."""
from __future__ import annotations

import json

import numpy as np
import pytest

from analyzer.facts import FactStore, load_all
from analyzer.facts.breakdown import NO_API_IN_TRACE, NO_THREAD, UNKNOWN_WHY
from analyzer.facts.launch_loops import LOOP_PREFIX, TENSOR_LOOP_PREFIX
from analyzer.facts.tests.test_breakdown import check_partition
from analyzer.loading import load_trace
from analyzer.testing import DATA_DIR, real_trace
from analyzer.window import choose_window

load_all()

IDLE = ("launch_bound", "host_sync", "host_work", "wait_other", "setup", "unknown")


def _store(path):  # type: ignore[no-untyped-def]
    t = load_trace(path)
    return FactStore(t, choose_window(t), {})


def _kineto(name: str):  # type: ignore[no-untyped-def]
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return path


def _idle_fed_by(st, device: int) -> dict[int, int]:  # type: ignore[no-untyped-def]
    seg = st.get("timeline_segments")
    s = seg.loc[(seg["device"] == device) & (seg["host_tid"] >= 0)]
    return {int(k): int(v) for k, v in s.groupby("host_tid")["duration"].sum().items()}


def test_two_processes_each_with_two_launching_threads():
    """ddp_exposed_comm_2gpu: one nsys report of a 2-rank DDP job (2 processes, one GPU each); on each GPU
    the rank's main thread and DDP's reducer thread (the all-reduce launches) both launch work. Every GPU's
    window is partitioned, nothing is unknown, and each idle stretch is attributed to a thread of the
    process that owns that GPU, both threads feeding some of it."""
    st = _store(real_trace("ddp/ddp_exposed_comm_2gpu"))
    check_partition(st)
    ops = st.get("gpu_ops")
    seg = st.get("timeline_segments")
    devices = sorted(set(ops["device"]))
    assert len(devices) == 2
    assert ops.groupby("device")["pid"].nunique().eq(1).all() and ops["pid"].nunique() == 2
    for d in devices:
        mine = ops.loc[ops["device"] == d]
        assert mine["tid"].nunique() >= 2  # several launching threads on one GPU
        fed = _idle_fed_by(st, d)
        assert len(fed) >= 2 and set(fed) <= set(mine["tid"])
    assert not (seg["cause"] == "unknown").any()


def test_torch_profiler_without_profiler_step_two_launching_threads():
    """A public torch.profiler trace of ResNet training with no ProfilerStep (PARAM benchmarks): the main
    thread and the autograd engine's thread launch the kernels. The breakdown partitions the window with
    nothing unknown; the main thread's idle time is its DataLoader wait, named by its range."""
    st = _store(_kineto("public/param_resnet_no_profilerstep.pt.trace.json.xz"))
    check_partition(st)
    ops = st.get("gpu_ops")
    assert ops["tid"].nunique() == 2
    seg = st.get("timeline_segments")
    assert not (seg["cause"] == "unknown").any()
    fed = _idle_fed_by(st, int(ops["device"].iloc[0]))
    assert set(fed) == set(ops["tid"])
    hw = seg.loc[seg["cause"] == "host_work"].groupby("detail", observed=True)["duration"].sum()
    assert "DataLoader" in str(hw.idxmax())


def test_graph_replays_whose_launch_call_was_not_recorded():
    """decode_b1_cudagraph_h200 (torch.profiler, H200): the first CUDA graph replays' kernels are in the
    trace but their cudaGraphLaunch is not (the CPU side started later); they share the replay's
    correlation id. They are graph kernels: the time between their nodes is the graph's own GPU time, not
    hundreds of unknown slivers (309 us in 700+ pieces before); only the gap before such a replay stays
    unknown, and the report says so once, with why."""
    from analyzer.api import analyze

    path = _kineto("kineto/decode_b1_cudagraph_h200.pt.trace.json.xz")
    st = _store(path)
    check_partition(st)
    ops = st.get("gpu_ops")
    orphans = ops.loc[ops["api_start"] < 0]
    assert len(orphans) > 100 and (orphans["in_graph"] == 1).all()
    seg = st.get("timeline_segments")
    unknown = seg.loc[seg["cause"] == "unknown"]
    assert set(unknown["detail"]) == {NO_THREAD} and len(unknown) <= 5
    assert unknown["duration"].sum() < 20_000
    assert (seg.loc[seg["cause"] == "compute", "detail"] == "CUDA graph (between nodes)").any()

    result = analyze(path)
    md = result.to_markdown()
    assert md.count("Not classified in the timeline breakdown") == 1
    assert UNKNOWN_WHY[NO_THREAD].split(";")[0] in md
    notes = json.loads(result.to_json())["traces"][0]["overview"]["breakdown_notes"]
    assert len(notes) == 1 and NO_THREAD in notes[0]


def _derived(tmp_path, name: str, drop: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """A copy of the real trace ``name`` without the tables ``drop`` (a bad input made from a real one)."""
    import shutil
    import sqlite3

    path = tmp_path / f"{name.replace('/', '_')}_derived.sqlite"
    shutil.copyfile(real_trace(name), path)
    with sqlite3.connect(path) as db:
        for table in drop:
            db.execute(f"DROP TABLE IF EXISTS {table}")
    return path


def test_a_gpu_only_trace_says_once_what_it_cannot_classify(tmp_path):
    """GPU activity only (no CUDA API calls, NVTX or OS runtime, dropped from a copy of healthy): the
    idle time is unknown, and every report format states it once with its time and what to record."""
    from analyzer.api import analyze

    path = _derived(tmp_path, "healthy", ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API",
                                          "OSRT_CALLCHAINS"))
    result = analyze(path)
    b = result.fact("timeline_breakdown")
    win = b.loc[b["scope"] == "window"]
    unknown_ns = int(win.loc[win["cause"] == "unknown", "duration_ns"].sum())
    assert unknown_ns > 0
    md = result.to_markdown()
    assert md.count("Not classified in the timeline breakdown") == 1 and NO_API_IN_TRACE in md
    assert "ProfilerActivity.CPU" in md
    html = result.to_html()
    assert html.count("Not classified in the timeline breakdown") == 1
    doc = json.loads(result.to_json())
    (note,) = doc["traces"][0]["overview"]["breakdown_notes"]
    assert NO_API_IN_TRACE in note and "of its window" in note
    from analyzer.reports.summary import summary_text

    assert sum("Not classified" in line for line in summary_text(result.report()).splitlines()) == 1


def test_without_nvtx_host_work_is_outside_every_range(tmp_path):
    """No NVTX (dropped from a copy of dataloader_starved): the breakdown partitions the window, the
    host work is named '(no NVTX range)', the range scope holds no key but '' and the loops found from
    the launches (``launch_loops``: the loader's short loops of fills), the host work is all outside any
    range, and host-work-in-loop still fires, saying the time is in code outside any NVTX range."""
    from analyzer.api import analyze

    path = _derived(tmp_path, "dataloader_starved", ("NVTX_EVENTS",))
    t = load_trace(path)
    st = FactStore(t, choose_window(t), {})
    check_partition(st)
    b = st.get("timeline_breakdown")
    ranges = b.loc[b["scope"] == "range"]
    assert "" in set(ranges["key"])
    assert all(k == "" or k.startswith((LOOP_PREFIX, TENSOR_LOOP_PREFIX)) for k in set(ranges["key"]))
    assert set(ranges.loc[ranges["cause"] == "host_work", "key"]) == {""}
    win = b.loc[b["scope"] == "window"]
    assert not (win["cause"] == "unknown").any()
    hw = win.loc[win["cause"] == "host_work"]
    assert set(hw["detail"]) == {"(no NVTX range)"}
    assert hw["duration_ns"].sum() > 0.3 * win["duration_ns"].sum()
    result = analyze(path)
    f = next(f for f in result.findings if f.rule == "host-work-in-loop")
    assert "outside any NVTX range" in f.message
    assert "Not classified" not in result.to_markdown()
    shares = win.groupby("cause")["share"].sum()
    assert np.isclose(shares.sum(), 1.0) and (shares <= 1.0 + 1e-12).all()


def test_host_work_waiting_on_another_thread_names_that_thread():
    """host_work_in_range_fixed (nsys with OS-runtime calls): the main thread, which launches every GPU
    op, waits in its ``wait_weights`` range (``fut.result()``: ``sem_wait``) for a background thread
    decoding the next weights inside ``load_weights``. Over the whole run that wait holds the GPU idle
    several milliseconds (H200 recording of 2026-11-27: 6.8 ms, of 8.3 ms of host work named
    ``wait_weights`` before, the range that only waits). The pieces spent blocked name the decoding
    thread and its range; the waiting thread's own Python time keeps its range; the window is still
    partitioned. The single-threaded pathology has no such piece."""
    t = load_trace(real_trace("round3/host_work_in_range_fixed"))
    st = FactStore(t, choose_window(t, "full"), {})
    check_partition(st)
    ops = st.get("gpu_ops")
    seg = st.get("timeline_segments")
    waited = seg.loc[seg["waited_tid"] >= 0]
    (other,) = set(waited["waited_tid"])
    assert other not in set(ops["tid"])  # the decoding thread launches nothing itself
    assert set(waited["cause"]) == {"host_work"}
    assert set(waited["detail"]) == {f"load_weights (thread {other}, waited for)"}
    assert waited["duration"].sum() > 2_000_000
    where = waited.groupby(waited["nvtx_path"].astype(str).str.rsplit("/", n=1).str[-1])["duration"].sum()
    assert where.idxmax() == "wait_weights" and where["wait_weights"] > 0.9 * where.sum()
    assert (waited["host_tid"] != other).all()
    left = seg.loc[(seg["cause"] == "host_work") & (seg["detail"] == "wait_weights"), "duration"].sum()
    assert left < 0.5 * waited["duration"].sum()

    t = load_trace(real_trace("round3/host_work_in_range"))
    st = FactStore(t, choose_window(t), {})
    assert not (st.get("timeline_segments")["waited_tid"] >= 0).any()


def test_a_gpu_only_torch_profiler_trace(tmp_path):
    """torch.profiler with CUDA activity only (the CPU events dropped from a copy of the real healthy
    trace): the window is partitioned, the idle time between kernels is unknown, and the report and the
    terminal say so once; no traceback."""
    import gzip

    from analyzer.api import analyze
    from analyzer.reports.summary import summary_text

    src = _kineto("kineto/healthy.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") == "M"]
    path = tmp_path / "gpu_only.pt.trace.json"
    path.write_text(json.dumps(doc))
    check_partition(_store(path))
    result = analyze(path)
    b = result.fact("timeline_breakdown")
    win = b.loc[b["scope"] == "window"]
    assert set(win.loc[win["cause"].isin(IDLE), "cause"]) == {"unknown"}
    assert result.to_markdown().count("Not classified in the timeline breakdown") == 1
    assert sum("Not classified" in line for line in summary_text(result.report()).splitlines()) == 1


def test_a_launching_thread_the_profiler_did_not_trace(tmp_path):
    """ddp_exposed_comm_2gpu with the CUDA calls of DDP's reducer threads (one per rank, the all-reduce
    launches) removed from a copy, as when a profiler traces only some threads: those collectives' launch
    is unknown, so the idle time before them is unknown for that reason on both GPUs, stated once in
    each rank's section of the job report; the main threads' idle time is classified as before (within
    1%: a gap ending at an op of unknown thread is fed by the thread of the op before it) and both
    windows stay partitioned."""
    import shutil
    import sqlite3

    from analyzer.api import analyze

    full = _store(real_trace("ddp/ddp_exposed_comm_2gpu")).get("timeline_segments")
    path = tmp_path / "ddp_reducer_untraced.sqlite"

    shutil.copyfile(real_trace("ddp/ddp_exposed_comm_2gpu"), path)
    ops = _store(path).get("gpu_ops")
    reducers = [int(t) for d, g in ops.groupby("device") for t in g["tid"].value_counts().index[1:]]
    assert len(reducers) == 2
    with sqlite3.connect(path) as db:
        db.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid % 16777216 IN ({reducers[0]}, {reducers[1]})")
    st = _store(path)
    check_partition(st)
    seg = st.get("timeline_segments")
    unknown = seg.loc[seg["cause"] == "unknown"]
    assert set(unknown["detail"]) == {NO_THREAD} and set(unknown["device"]) == {0, 1}
    for cause in ("host_work", "host_sync"):  # the main threads' own idle time is (nearly) unchanged
        now, before = (int(x.loc[x["cause"] == cause, "duration"].sum()) for x in (seg, full))
        assert abs(now - before) <= 0.01 * before + 10_000  # 1%, or 10 us where the cause is (nearly) absent
    md = analyze(path).to_markdown()  # a 2-rank job: one section per rank, each stating its own GPU once
    notes = [line for line in md.splitlines() if "Not classified in the timeline breakdown" in line]
    assert len(notes) == 2 and "on GPU 0" in notes[0] and "on GPU 1" in notes[1]


def test_kernels_launched_before_the_cpu_capture_began():
    """A public PARAM DLRM rank trace (worker1, torch.profiler): its first 64 kernels ran before the
    profiler's first recorded CUDA call, so their launches (and threads) are not in the trace. The idle
    time before them is unknown for that reason, none of it after the last of them; the report says
    so once; the rest of the window (two launching threads) is classified."""
    from analyzer.api import analyze

    (path,) = sorted((DATA_DIR / "public" / "param_dlrm_8rank").glob("worker1_*.pt.trace.json*")) or [None]
    if path is None:
        pytest.skip("the PARAM DLRM traces are absent")
    t = load_trace(path)
    st = FactStore(t, choose_window(t), {})
    check_partition(st)
    ops = st.get("gpu_ops")
    assert (ops["pid"] < 0).sum() > 10 and ops.loc[ops["pid"] >= 0, "tid"].nunique() == 2
    seg = st.get("timeline_segments")
    unknown = seg.loc[seg["cause"] == "unknown"]
    assert set(unknown["detail"]) == {NO_THREAD}
    orphan_starts = ops.loc[ops["pid"] < 0, "start"]
    assert unknown["end"].max() <= orphan_starts.max() and orphan_starts.min() < int(t.api["start"].min())
    assert unknown["duration"].sum() < 0.1 * st.window.duration_ns
    md = analyze(path).to_markdown()
    assert md.count("Not classified in the timeline breakdown") == 1 and "before the profiler's CPU side" in md
