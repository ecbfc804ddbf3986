"""Autotuning inside the loop (the ``autotune_bursts`` fact) on the held-out cudnn_benchmark_shapes pair
(tests/data/heldout/h100_run5: a conv net with ``cudnn.benchmark = True`` fed a new image size every step, and
its twin with benchmarking off), recorded bare with nsys and with torch.profiler; a fixed-shape conv net
(layout_copies) where cuDNN runs without timed trials; programs timing their own work with events."""
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


def test_bare_nsys_pathology_bursts():
    st = _store("heldout/h100_run5/cudnn_benchmark_shapes_bare.sqlite.xz")
    b = st.get("autotune_bursts")
    assert list(b.columns) == list(AUTOTUNE_COLUMNS)
    # forward on the main thread, backward on autograd's: two threads, one burst each per step
    assert len(b) == 24 and b["tid"].nunique() == 2
    assert int(b["trials"].sum()) == 2390 and (b["trials"] >= MIN_TRIALS).all()
    assert (b["candidates"] >= MIN_CANDIDATES).all() and int(b["candidates"].max()) == 44
    assert b["kernels"].str.contains("xmma").any() and b["kernels"].str.contains("nchwToNhwcKernel").all()
    assert b["tenth"].nunique() == 10
    # the host-held idle time inside the bursts: 0.91 of the twin's saving (9,566.8 ms over the window)
    assert 8_700e6 < int(b["idle_ns"].sum()) < 8_740e6


def test_torch_profiler_pathology():
    st = _store("heldout/h100_run5/cudnn_benchmark_shapes.pt.trace.json.gz")
    b = st.get("autotune_bursts")
    assert len(b) == 14 and int(b["trials"].sum()) == 1400 and sorted(set(b["step"])) == list(range(7))
    # the trials run inside cuDNN's convolution operators: forward in aten::cudnn_convolution, backward in
    # ConvolutionBackward0's aten::convolution_backward
    fwd = b["nvtx_path"].str.contains("/forward/").to_numpy()
    assert fwd.sum() == 7 and b.loc[fwd, "nvtx_path"].str.endswith("aten::cudnn_convolution").all()
    assert b.loc[~fwd, "nvtx_path"].str.endswith("ConvolutionBackward0/aten::convolution_backward").all()
    assert 5_380e6 < int(b["idle_ns"].sum()) < 5_390e6  # 0.95 of the twin's 5,660.6 ms


def test_twins_and_a_fixed_shape_conv_net_have_no_trial():
    for name in ("heldout/h100_run5/cudnn_benchmark_shapes_bare_fixed.sqlite.xz",
                 "heldout/h100_run5/cudnn_benchmark_shapes_fixed.pt.trace.json.gz",
                 "heldout/h100_run4/layout_copies.sqlite.xz", "healthy.sqlite.xz"):
        st = _store(name)
        assert autotune_spans(st.trace).empty, name
        assert st.get("autotune_bursts").empty, name


def test_event_timing_of_a_program_is_not_a_trial():
    # a DDP loop waiting for events every step, and layer_timing_sync's twin: drain, a whole step (183
    # kernels), one event wait. A trial launches a candidate's handful of kernels (1-6 in cuDNN's)
    for name in ("ddp/ddp_straggler_2gpu_rank0.sqlite.xz", "heldout/h100_run4/layer_timing_sync_fixed.sqlite.xz",
                 "heldout/h100_run4/layer_timing_sync_fixed.pt.trace.json.gz"):
        t = load_trace(trace_file(name))
        assert int(t.api["name"].astype(str).str.contains("EventSynchronize").sum()) >= 8, name
        assert autotune_spans(t).empty, name
