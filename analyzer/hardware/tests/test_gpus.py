"""The GPU facts table: coverage, consistency, name matching on the names real traces report, and the
per-device resolution (trace record > measurement > table > unknown) on real traces."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from analyzer.hardware import (
    PRECISIONS,
    gpu_by_key,
    gpu_table,
    is_mig,
    lookup_gpu,
    measured_pinned_bandwidth,
    normalize_gpu_name,
    resolve_device,
    trace_hardware,
)
from analyzer.testing import PUBLIC_DIR, real_trace

#: names as CUDA reports them (nsys TARGET_INFO_GPU, ncu device__attribute_display_name, Kineto
#: deviceProperties), each with the row it must resolve to
REPORTED_NAMES = {
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H100 PCIe": "h100-pcie",
    "NVIDIA H100 NVL": "h100-nvl",
    "NVIDIA H200": "h200-sxm",
    "NVIDIA H200 NVL": "h200-nvl",
    "NVIDIA A100-SXM4-40GB": "a100-sxm4-40gb",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "A100-SXM4-40GB": "a100-sxm4-40gb",  # drivers before 2021 had no NVIDIA prefix
    "NVIDIA A100-PCIE-40GB": "a100-pcie-40gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA A10": "a10",
    "NVIDIA A10G": "a10g",
    "NVIDIA L4": "l4",
    "NVIDIA L40S": "l40s",
    "Tesla T4": "t4",
    "Tesla V100-SXM2-16GB": "v100-sxm2",
    "Tesla V100-SXM2-32GB": "v100-sxm2",
    "Tesla V100-PCIE-32GB": "v100-pcie",
    "NVIDIA GeForce RTX 3090": "rtx-3090",
    "GeForce RTX 3090": "rtx-3090",
    "NVIDIA GeForce RTX 4090": "rtx-4090",
    "NVIDIA GeForce RTX 5090": "rtx-5090",
    "Quadro RTX 8000": "quadro-rtx-8000",
    "NVIDIA RTX A6000": "rtx-a6000",
    "NVIDIA B200": "b200",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb": "a100-sxm4-40gb",
    "nvidia h100 80gb hbm3": "h100-sxm",
}


@pytest.mark.parametrize("reported,key", sorted(REPORTED_NAMES.items()))
def test_reported_names_resolve(reported: str, key: str) -> None:
    spec = lookup_gpu(reported)
    assert spec is not None, reported
    assert spec.key == key


@pytest.mark.parametrize("name", ["NVIDIA A100", "NVIDIA A1000", "NVIDIA GeForce RTX 3080", "Radeon RX 7900",
                                  "", "NVIDIA H100", "NVIDIA L40G"])
def test_unknown_or_ambiguous_names_are_not_guessed(name: str) -> None:
    assert lookup_gpu(name) is None


def test_table_rows_are_complete_and_cited() -> None:
    table = gpu_table()
    assert len({s.key for s in table}) == len(table)
    for spec in table:
        assert spec.sources and all(re.match(r"https://", s) for s in spec.sources), spec.key
        assert set(spec.peak_tflops) <= set(PRECISIONS)
        assert spec.peak_tflops.get("fp32", 0) > 0, spec.key  # every GPU has an FP32 SIMT peak
        assert spec.sm_count > 0 and spec.memory_bandwidth_gbs > 0 and spec.memory_gb > 0
        assert spec.pcie.generation in (3, 4, 5) and spec.pcie.width == 16
        # a pinned copy never beats the link it crosses
        assert 0 < spec.pinned_copy_gbs <= spec.pcie.gbs, spec.key
        assert spec.pinned_copy_basis
        # tensor paths are at least as fast as the SIMT path of the same width
        for tensor, simt in (("fp16_tensor", "fp32"), ("fp64_tensor", "fp64")):
            if tensor in spec.peak_tflops and simt in spec.peak_tflops:
                assert spec.peak_tflops[tensor] >= spec.peak_tflops[simt], spec.key
        assert lookup_gpu(spec.name) is spec
        for alias in spec.match:
            assert lookup_gpu(alias) is spec


def test_the_gpus_the_issue_names_are_covered() -> None:
    keys = {s.key for s in gpu_table()}
    assert {"h100-sxm", "h100-pcie", "h200-sxm", "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb",
            "a100-pcie-80gb", "a10", "a10g", "l4", "l40s", "t4", "v100-sxm2", "v100-pcie", "rtx-3090",
            "rtx-4090", "rtx-5090", "quadro-rtx-8000", "rtx-a6000", "b200"} <= keys


def test_datasheet_figures_that_rules_depend_on() -> None:
    h100 = gpu_by_key("h100-sxm")
    assert (h100.sm_count, h100.memory_bandwidth_gbs, h100.peak_tflops["bf16_tensor"]) == (132, 3350, 989.4)
    assert h100.nvlink is not None and h100.nvlink.gbs == 450  # 900 GB/s bidirectional
    t4 = gpu_by_key("t4")
    assert t4.pcie.label() == "PCIe 3 x16"
    assert t4.pinned_copy_gbs == pytest.approx(12.6, abs=0.1)  # 80% of 15.75 GB/s
    assert t4.peak_flops("bf16_tensor") is None and t4.peak_flops("fp16_tensor") == 65e12
    assert t4.nvlink is None and t4.nvlink_bandwidth is None
    a100 = gpu_by_key("a100-sxm4-80gb")
    assert a100.peak_flops("fp8_tensor") is None and a100.peak_flops("tf32_tensor") == 156e12
    with pytest.raises(KeyError):
        a100.peak_flops("fp7")


def test_normalization() -> None:
    assert normalize_gpu_name("NVIDIA A100-SXM4-40GB") == "a100 sxm4 40gb"
    assert normalize_gpu_name("  Tesla   T4 ") == "t4"
    assert normalize_gpu_name("NVIDIA GeForce RTX 3090") == "rtx 3090"
    assert is_mig("NVIDIA H100 80GB HBM3 MIG 3g.40gb") and not is_mig("NVIDIA H100 80GB HBM3")


def test_resolution_prefers_the_trace_then_measurement_then_table() -> None:
    hw = resolve_device("Tesla T4", sm_count=40, memory_bandwidth=0)
    assert hw.sm_count.source == "trace" and hw.memory_bandwidth.source == "table"
    assert hw.memory_bandwidth.value == 320e9
    assert hw.pinned_copy.source == "table" and hw.pinned_copy.value == pytest.approx(12.6e9, rel=0.01)
    assert "NVIDIA T4" in hw.pinned_copy.detail and "PCIe 3 x16" in hw.pinned_copy.detail
    measured = resolve_device("Tesla T4", measured_pinned=(11.2e9, 6))
    assert measured.pinned_copy.source == "measured" and measured.pinned_copy.value == 11.2e9
    assert "6 pinned copies" in measured.pinned_copy.detail
    unknown = resolve_device("Some Future GPU", sm_count=96, memory_bandwidth=2.0e12)
    assert unknown.spec is None and unknown.sm_count.value == 96
    assert not unknown.pinned_copy.known and unknown.pinned_copy.source == "unknown"
    assert not unknown.peak_flops("bf16_tensor").known
    mig = resolve_device("NVIDIA A100-SXM4-40GB MIG 3g.20gb", sm_count=42)
    assert mig.peak_flops("fp32").value == pytest.approx(19.5e12 * 42 / 108)
    assert mig.memory_bandwidth.source == "unknown"  # a slice's bandwidth is not the whole GPU's


def test_measured_pinned_bandwidth_uses_large_pinned_copies_only() -> None:
    mib = 1024 * 1024
    frame = pd.DataFrame({
        "device": [0, 0, 0, 0, 1],
        "bytes": [64 * mib, 64 * mib, 64 * mib, 1024, 64 * mib],
        "duration": [6_000_000, 5_000_000, 50_000_000, 2_000, 5_000_000],
        "direction": ["H2D", "D2H", "H2D", "H2D", "H2D"],
        "src_kind": ["pinned", "device", "pageable", "pinned", "pinned"],
        "dst_kind": ["device", "pinned", "device", "device", "device"],
    })
    rates = measured_pinned_bandwidth(frame)
    assert set(rates) == {0}  # device 1 has a single copy: not a measurement
    rate, copies = rates[0]
    assert copies == 2 and rate == pytest.approx((64 * mib / 6e-3 + 64 * mib / 5e-3) / 2)


# -- real traces --------------------------------------------------------------------------------------

def test_h100_trace_resolves_from_its_record_and_its_own_pinned_copies() -> None:
    from analyzer.loading import load_trace

    trace = load_trace(real_trace("pageable_h2d_fixed"))
    hw = trace_hardware(trace)[0]
    assert hw.spec is not None and hw.spec.key == "h100-sxm"
    assert hw.sm_count.source == "trace" and hw.sm_count.value == 132
    assert hw.memory_bandwidth.source == "trace" and hw.memory_bandwidth.value == pytest.approx(3.352e12, rel=1e-3)
    # its pinned 128 MiB copies are the measurement (55.2 GB/s measured when the trace was made)
    assert hw.pinned_copy.source == "measured"
    assert 50e9 < (hw.pinned_copy.value or 0) < 58e9


def test_h100_trace_without_pinned_copies_falls_back_to_the_table() -> None:
    from analyzer.loading import load_trace

    hw = trace_hardware(load_trace(real_trace("pageable_h2d")))[0]
    assert hw.pinned_copy.source == "table" and hw.pinned_copy.value == 54.2e9


needs_public = pytest.mark.skipif(not PUBLIC_DIR.is_dir(), reason=f"{PUBLIC_DIR} is absent")


@needs_public
def test_rtx3090_public_export() -> None:
    from analyzer.loading import load_trace

    hw = trace_hardware(load_trace(PUBLIC_DIR / "LeiWang1999__memfusion_artifact__report1.sqlite"))
    assert hw, "the trace has GPUs"
    for dev in hw.values():
        assert dev.spec is not None and dev.spec.key == "rtx-3090"
        assert dev.sm_count.value == 82 and dev.sm_count.source == "trace"
        assert dev.memory_bandwidth.value == pytest.approx(936.096e9)  # TARGET_INFO_GPU.memoryBandwidth
        assert dev.pinned_copy.source in ("measured", "table")
        assert dev.nvlink.value == pytest.approx(56.25e9)


@needs_public
def test_quadro_rtx_8000_public_2020_export() -> None:
    """nsys 2020.3 records no usable memory bandwidth: the table's 672 GB/s stands in, and says so."""
    from analyzer.loading import load_trace

    hw = trace_hardware(load_trace(PUBLIC_DIR / "quasiben__nvtx-examples__cudf.sqlite"))
    assert set(hw) >= {0}
    dev = hw[0]
    assert dev.spec is not None and dev.spec.key == "quadro-rtx-8000"
    assert dev.sm_count.source == "trace" and dev.sm_count.value == 72
    assert dev.memory_bandwidth.source == "table" and dev.memory_bandwidth.value == 672e9
    assert "GPU table: NVIDIA Quadro RTX 8000" in dev.memory_bandwidth.detail
    assert dev.pcie.value == pytest.approx(15.76e9, rel=0.01)


@needs_public
def test_a10g_ncu_device_name() -> None:
    pytest.importorskip("ncu_report")
    from analyzer.loading.ncu import load_ncu

    report = load_ncu(PUBLIC_DIR / "AveryClapp__ESMM-Research__profile.ncu-rep")
    names = set(report.kernels["device_name"].astype(str))
    assert names == {"NVIDIA A10G"}
    spec = lookup_gpu("NVIDIA A10G")
    assert spec is not None and spec.sm_count == int(report.kernels["sm_count"].iloc[0])
