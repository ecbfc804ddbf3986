"""The ``fallback_kernels`` fact: ATen's slow fallback kernels (depthwise convolutions on NCHW, unfused
im2col convolutions) and what the measured fix saves, on the held-out layout_copies pair
(tests/data/heldout/h100_run4: ConvNeXt blocks in NCHW bf16 and their channels_last twin), checked
against the trace's own kernel table and the committed microbenchmark table."""
from __future__ import annotations

import numpy as np

from analyzer.facts import FactStore, load_all
from analyzer.facts.fallback_kernels import FALLBACK_KERNEL_COLUMNS, classify
from analyzer.hardware.fallbacks import KERNEL_FAMILIES, fallback_factor, fallback_table
from analyzer.loading import load_trace
from analyzer.testing import trace_file
from analyzer.window import choose_window

load_all()

FULL_FORWARD = ("void at::native::<unnamed>::conv_depthwise2d_forward_kernel_generic<c10::BFloat16, int>("
                "torch::headeronly::detail::GenericPackedTensorAccessor<float>, bool, T2, int)")
FULL_BACKWARD_KINETO = ("void at::native::(anonymous namespace)::conv_depthwise2d_backward_kernel<0, 1, "
                        "c10::BFloat16, int>(torch::headeronly::detail::GenericPackedTensorAccessor<T3>)")


def _store(name: str) -> FactStore:
    t = load_trace(trace_file(name))
    return FactStore(t, choose_window(t), {})


def test_names_family_direction_and_dtype():
    # full names as nsys and torch.profiler record them in the layout_copies traces
    assert classify(FULL_FORWARD, "conv_depthwise2d_forward_kernel_generic") == ("conv_depthwise2d", "forward", "bf16")
    assert classify(FULL_BACKWARD_KINETO, "conv_depthwise2d_backward_kernel") == (
        "conv_depthwise2d", "backward", "bf16")
    assert classify("void at::native::im2col_kernel<float>(long, const T1 *)", "im2col_kernel") == ("im2col", "", "fp32")
    # a trace that records short names only still counts; another library's kernel of a similar name does not
    assert classify("col2vol_kernel", "col2vol_kernel") == ("vol2col", "", "")
    assert classify("void cudnn::detail::im2col4d_kernel<float>(int)", "im2col4d_kernel") is None
    assert classify("void mylib::im2col_kernel<float>(int)", "im2col_kernel") is None
    assert classify("void at::native::vectorized_elementwise_kernel<4>(int)", "vectorized_elementwise_kernel") is None


def test_nchw_depthwise_convolutions_run_atens_kernels():
    # layout_copies: 8 blocks x 25 steps of one depthwise 7x7 convolution, forward (1 kernel) and backward
    # (grad input, grad weight): 600 kernels, 758 ms of the window, every one bf16 and in a step
    st = _store("heldout/h100_run4/layout_copies.sqlite.xz")
    f = st.get("fallback_kernels")
    assert list(f.columns) == list(FALLBACK_KERNEL_COLUMNS)
    assert len(f) == 600 and set(f["family"]) == {"conv_depthwise2d"} and set(f["dtype"]) == {"bf16"}
    assert f.groupby("short_name").size().to_dict() == {
        "conv_depthwise2d_backward_kernel": 200, "conv_depthwise2d_forward_kernel_generic": 200,
        "conv_depthwise2d_grad_weight_kernel": 200}
    assert set(f.loc[f["direction"] == "forward", "range_key"]) == {"step_N/forward"}
    assert set(f.loc[f["direction"] == "backward", "range_key"]) == {"step_N/backward"}
    assert (np.bincount(f["step"].to_numpy()) == 24).all() and len(np.unique(f["step"])) == 25
    k = st.get("kernel_categories")
    mine = k["short_name"].astype(str).str.startswith("conv_depthwise2d_")
    assert f["duration"].sum() == k.loc[mine, "duration"].sum()
    assert 755e6 < f["duration"].sum() < 762e6
    # the saving is the measured factor of the kernel's direction, from the committed table
    for direction in ("forward", "backward"):
        fac = fallback_factor("conv_depthwise2d", "bf16", direction)
        assert fac is not None and fac.dtype == "bf16" and fac.speedup > 1
        rows = f[f["direction"] == direction]
        assert np.allclose(rows["speedup"], fac.speedup) and np.allclose(rows["fallback_share"], fac.share)
        assert np.allclose(rows["saving_ns"], rows["duration"] * fac.saving_per_ns)
        assert rows["basis"].iloc[0] == fac.basis() and fac.gpu in fac.basis()
    # GPU-bound: the host waited for the GPU longer than the fix saves
    assert f["host_wait_ns"].iloc[0] > f["saving_ns"].sum()


def test_torch_profiler_recording_of_the_same_program():
    st = _store("heldout/h100_run4/layout_copies.pt.trace.json.gz")
    f = st.get("fallback_kernels")
    assert len(f) == 168 and set(f["dtype"]) == {"bf16"} and set(f["family"]) == {"conv_depthwise2d"}
    assert set(f["direction"]) == {"forward", "backward"} and (f["saving_ns"] > 0).all()


def test_channels_last_twin_and_other_traces_have_none():
    for name in ("heldout/h100_run4/layout_copies_fixed.sqlite.xz", "healthy.sqlite.xz"):
        f = _store(name).get("fallback_kernels")
        assert f.empty and list(f.columns) == list(FALLBACK_KERNEL_COLUMNS), name


def test_the_committed_table_is_a_gpu_measurement():
    t = fallback_table()
    assert t["benchmark"] == "workloads/conv_layouts.py" and t["gpu"] != "cpu" and t["date"]
    for family in KERNEL_FAMILIES:
        fac = fallback_factor(family, "bf16", "forward")
        if fac is None:
            continue
        assert fac.rows >= 1 and fac.low <= fac.speedup <= fac.high and 0 < fac.share <= 1
    assert fallback_factor("conv_depthwise2d", "bf16", "backward") is not None
    assert fallback_factor("no_such_family", "bf16", "forward") is None
