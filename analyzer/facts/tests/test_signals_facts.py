"""Code locations, host activity in idle gaps, measured SM/tensor activity and energy on the real
traces recorded with call stacks, GPU metrics and power logs (tests/data/{callstacks,gpu_metrics,power})."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.facts.stacks import native_location, python_call, python_location, short_symbol
from analyzer.pipeline import AnalysisOptions, analyze_trace

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"


@pytest.fixture(scope="module")
def host_sync_bt():
    return analyze_trace(DATA / "callstacks" / "host_sync_bt.sqlite.xz")


def test_host_syncs_name_the_pytorch_call_that_syncs(host_sync_bt) -> None:
    syncs = host_sync_bt.facts.get("sync_calls")
    explicit = syncs[syncs["sync_kind"].isin(["stream", "device"])]
    where = explicit["code_location"].value_counts()
    # host_sync.py calls .item() once and .cpu() twice per micro-step (32 per step, 5 steps), then
    # torch.cuda.synchronize() once per step
    assert where["Tensor.cpu() [aten::to_dtype_layout]"] == 320
    assert where["Tensor.item()"] == 160
    assert where["torch.cuda.synchronize()"] == 5
    assert (explicit["code_location"] != "").all()
    finding = next(f for f in host_sync_bt.findings if f.rule == "host-sync-in-loop")
    assert "the most frequent call site is `Tensor.cpu() [aten::to_dtype_layout]`" in finding.message
    assert "code_location" in finding.evidence_columns


def test_code_locations_ranked_by_api_time(host_sync_bt) -> None:
    locs = host_sync_bt.facts.get("code_locations")
    assert list(locs["api_ns"]) == sorted(locs["api_ns"], reverse=True)
    item = locs[(locs["code_location"] == "Tensor.item()") & (locs["kind"] == "sync")]
    assert int(item["calls"].iloc[0]) == 160 and item["nvtx_path"].iloc[0].endswith("host_check")


def test_allocations_name_the_allocating_call() -> None:
    a = analyze_trace(DATA / "callstacks" / "alloc_churn_bt.sqlite.xz")
    allocs = a.facts.get("alloc_calls")
    where = set(allocs["code_location"])
    assert "empty() [aten::empty_memory_format]" in where and "torch.cuda.empty_cache()" in where


def test_idle_gaps_say_what_the_host_was_doing() -> None:
    a = analyze_trace(DATA / "callstacks" / "dataloader_starved_bt.sqlite.xz")
    gaps = a.facts.get("gpu_gaps")
    load = gaps[(gaps["duration"] >= 1_000_000) & gaps["host_nvtx_path"].str.endswith("load_batch")]
    assert len(load) == 5  # one per measured step
    # the loader decodes and augments with numpy on the training thread: every gap's CPU samples
    # land in numpy
    for text in load["host_activity"]:
        assert text.startswith("CPU samples: ") and "(numpy)" in text
    finding = next(f for f in a.findings if f.rule == "gpu-idle-gaps")
    assert "host_activity" in finding.evidence_columns


def test_without_stacks_every_location_is_empty() -> None:
    a = analyze_trace(DATA / "host_sync.sqlite.xz")
    assert (a.facts.get("sync_calls")["code_location"] == "").all()
    assert a.facts.get("code_locations").empty


@pytest.mark.parametrize("symbols,modules,expected", [
    (["cudaStreamSynchronize", "at::_ops::item::call(at::Tensor const&)",
      "torch::autograd::THPVariable_item(_object*, _object*)"],
     ["libcudart.so.13", "libtorch_cpu.so", "libtorch_python.so"], "Tensor.item()"),
    (["cudaMalloc", "myapp::Trainer::step(int)", "main"], ["libcudart.so.12", "/opt/app/bin/train", "train"],
     "myapp::Trainer::step (train)"),
    (["0x7f01", "cudaLaunchKernel"], ["libcupti.so", "libcudart.so"], ""),
])
def test_native_location(symbols: list[str], modules: list[str], expected: str) -> None:
    assert native_location(symbols, modules, [0] * len(symbols)) == expected


def test_python_location_skips_libraries() -> None:
    files = ["/usr/lib/python3.12/threading.py", "", "workloads/host_sync.py", "<frozen runpy>"]
    functions = ["wait", "<built-in method item of Tensor object at 0x1>", "step_sync", "_run_code"]
    assert python_location(files, functions, [355, -1, 51, 88]) \
        == "Tensor.item() in step_sync() defined at workloads/host_sync.py:51"


@pytest.mark.parametrize("file,function,expected", [
    ("", "<built-in method item of Tensor object at 0x7fc6dd20eb20>", "Tensor.item()"),
    ("", "<built-in function _cuda_synchronize>", "_cuda_synchronize()"),
    ("", "nn.Module: Sequential_0", "Sequential(...)"),
    ("torch/cuda/__init__.py", "synchronize", "torch.cuda.synchronize()"),
    ("torch/nn/functional.py", "cross_entropy", "torch.nn.functional.cross_entropy()"),
    ("/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", "synchronize", "torch.cuda.synchronize()"),
])
def test_python_call(file: str, function: str, expected: str) -> None:
    assert python_call(file, function) == expected


def test_short_symbol() -> None:
    assert short_symbol("at::native::copy_(at::Tensor&, at::Tensor const&, bool)") == "at::native::copy_"
    assert short_symbol("void foo<float, 2>::bar<int>(int)") == "void foo<>::bar<>"


@pytest.mark.parametrize("name,busy_range,tensor_range", [
    ("tiny_kernels_gm", (5, 30), None),
    ("healthy_gm", (90, 100), (85, 100)),
    ("fp32_gemm_gm", (90, 100), (0, 2)),
    ("fp32_gemm_fixed_gm", (90, 100), (80, 100)),
])
def test_measured_sm_and_tensor_activity(name: str, busy_range: tuple, tensor_range: tuple | None) -> None:
    a = analyze_trace(DATA / "gpu_metrics" / f"{name}.sqlite.xz")
    act = a.facts.get("sm_activity").iloc[0]
    assert busy_range[0] <= act["sm_active_busy"] <= busy_range[1]
    if tensor_range is not None:
        assert tensor_range[0] <= act["tensor_active_gemm"] <= tensor_range[1]
    assert act["period_ns"] == pytest.approx(500_000, rel=0.01)  # 2 kHz


def test_energy_from_the_counter_and_from_readings() -> None:
    trace = DATA / "power" / "fp32_gemm_pw.sqlite.xz"
    counter = analyze_trace(trace, options=AnalysisOptions(power_files=(DATA / "power" / "fp32_gemm_pw.power.csv",)))
    e = counter.facts.get("energy").iloc[0]
    assert e["source"] == "energy counter" and e["steps"] == 8
    # fp32 SIMT GEMMs for 0.35 s: 600-700 W on an H100 SXM (700 W TDP)
    assert 550 < e["avg_power_w"] < 720
    assert e["energy_per_step_j"] == pytest.approx(e["energy_j"] / 8)
    assert not e["per_step_measured"]  # 86 ms steps vs a 100 ms counter
    smi = analyze_trace(trace, options=AnalysisOptions(power_files=(DATA / "power" / "fp32_gemm_pw.nvidia-smi.csv",)))
    r = smi.facts.get("energy").iloc[0]
    assert r["source"] == "power readings" and r["avg_power_w"] < e["avg_power_w"]  # power.draw lags
