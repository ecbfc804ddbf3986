"""Autotuning inside the loop (``autotune_bursts`` and the breakdown's ``autotune`` cause) on the held-out
cudnn_benchmark_shapes pair (tests/data/heldout/h100_run5: a conv net with ``cudnn.benchmark = True`` fed a
new image size every step, and its twin with benchmarking off), recorded bare with nsys and with
torch.profiler; and a fixed-shape conv net (layout_copies) where cuDNN runs without timed trials."""
from __future__ import annotations

from analyzer.facts import FactStore, load_all
from analyzer.facts.autotune import AUTOTUNE_COLUMNS, MIN_CANDIDATES, MIN_TRIALS, autotune_spans
from analyzer.loading import load_trace
from analyzer.testing import trace_file
from analyzer.window import choose_window

load_all()


def _store(name: str) -> FactStore:
    t = load_trace(trace_file(name))
    return FactStore(t, choose_window(t), {})


def _autotune_ns(st: FactStore) -> int:
    seg = st.get("timeline_segments")
    return int(seg.loc[(seg["cause"] == "autotune").to_numpy(), "duration"].sum())


def test_bare_nsys_pathology_bursts_and_breakdown():
    st = _store("heldout/h100_run5/cudnn_benchmark_shapes_bare.sqlite.xz")
    b = st.get("autotune_bursts")
    assert list(b.columns) == list(AUTOTUNE_COLUMNS)
    # forward on the main thread, backward on autograd's: two threads, one burst each per step
    assert len(b) == 24 and b["tid"].nunique() == 2
    assert int(b["trials"].sum()) == 2390 and (b["trials"] >= MIN_TRIALS).all()
    assert (b["candidates"] >= MIN_CANDIDATES).all() and int(b["candidates"].max()) == 44
    assert b["kernels"].str.contains("xmma").any() and b["kernels"].str.contains("nchwToNhwcKernel").all()
    assert b["tenth"].nunique() == 10
    # the breakdown names the host-held idle time inside the bursts autotune, and that is the fact's idle time
    total = _autotune_ns(st)
    assert total == int(b["idle_ns"].sum())
    assert 8_700e6 < total < 8_740e6  # 8,718 ms: 0.91 of the twin's saving (9,566.8 ms over the window)
    bd = st.get("timeline_breakdown")
    win = bd[(bd["scope"] == "window").to_numpy()]
    assert int(win["duration_ns"].sum()) == st.window.duration_ns  # still an exact partition
    held = int(win.loc[(win["cause"] == "host_work").to_numpy(), "duration_ns"].sum())
    assert held < 800e6  # was 8,960.8 ms of host-work-in-loop before the autotuning was named


def test_torch_profiler_pathology():
    st = _store("heldout/h100_run5/cudnn_benchmark_shapes.pt.trace.json.gz")
    b = st.get("autotune_bursts")
    assert len(b) == 14 and int(b["trials"].sum()) == 1400 and sorted(set(b["step"])) == list(range(7))
    # the trials run inside cuDNN's convolution operators: forward in aten::cudnn_convolution, backward in
    # ConvolutionBackward0's aten::convolution_backward
    fwd = b["nvtx_path"].str.contains("/forward/").to_numpy()
    assert fwd.sum() == 7 and b.loc[fwd, "nvtx_path"].str.endswith("aten::cudnn_convolution").all()
    assert b.loc[~fwd, "nvtx_path"].str.endswith("ConvolutionBackward0/aten::convolution_backward").all()
    total = _autotune_ns(st)
    assert total == int(b["idle_ns"].sum()) and 5_380e6 < total < 5_390e6  # 0.95 of the twin's 5,660.6 ms
    # the workspace allocations inside the bursts are no longer alloc-in-loop's
    alloc = st.get("alloc_calls")
    assert int(alloc["gpu_wait_ns"].sum()) < 0.1 * total


def test_twins_and_a_fixed_shape_conv_net_have_no_trial():
    for name in ("heldout/h100_run5/cudnn_benchmark_shapes_bare_fixed.sqlite.xz",
                 "heldout/h100_run5/cudnn_benchmark_shapes_fixed.pt.trace.json.gz",
                 "heldout/h100_run4/layout_copies.sqlite.xz", "heldout/h100_run4/layout_copies_fixed.pt.trace.json.gz",
                 "healthy.sqlite.xz"):
        st = _store(name)
        assert autotune_spans(st.trace).empty, name
        assert st.get("autotune_bursts").empty, name
        assert _autotune_ns(st) == 0, name


def test_event_synchronizations_of_a_training_loop_are_not_trials():
    # a DDP training loop that waits for events (80) and synchronizes the device (102) every step: no
    # burst of timed trials (one event wait per step, the same kernels, nothing tried against another)
    t = load_trace(trace_file("ddp/ddp_straggler_2gpu_rank0.sqlite.xz"))
    names = t.api["name"].astype(str)
    assert int(names.str.contains("EventSynchronize").sum()) == 80
    assert autotune_spans(t).empty


def test_a_step_timed_between_a_drain_and_an_event_is_not_a_trial():
    # layer_timing_sync's twin times its layers with events and waits for the last one once a step, after
    # the loop's device synchronization: drain, 183 kernels, event wait, every step. A trial launches a
    # candidate's handful of kernels (1-6 in the cuDNN recordings), not a step's
    for name in ("heldout/h100_run4/layer_timing_sync_fixed.sqlite.xz",
                 "heldout/h100_run4/layer_timing_sync_fixed.pt.trace.json.gz"):
        t = load_trace(trace_file(name))
        assert int(t.api["name"].astype(str).str.contains("EventSynchronize").sum()) >= 8, name
        assert autotune_spans(t).empty, name
