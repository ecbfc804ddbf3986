"""Rules with a hardware constant take it from the trace's GPU, and the rule fixes of issue 15, each on
real traces (fire and silent): pageable-memcpy at the GPU's own pinned rate (an H100 on PCIe 5, a
Quadro RTX 8000 on PCIe 3 - the link class of a T4), fp32-gemm capped by the GPU's Tensor Core gain,
alloc-in-loop only for allocations that recur across steps, low-gpu-utilization pointing at the least
busy steps; plus the small report fixes (console columns, ratios, code spans in Markdown)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.hardware import gpu_by_key
from analyzer.pipeline import AnalysisOptions, analyze_trace
from analyzer.reports import build_report, render
from analyzer.reports.summary import summary_text
from analyzer.rules.templates import FILTERS
from analyzer.testing import PUBLIC_DIR, real_trace

CUDF = PUBLIC_DIR / "quasiben__nvtx-examples__cudf.sqlite"  # 2 x Quadro RTX 8000, nsys 2020.3
needs_public = pytest.mark.skipif(not CUDF.is_file(), reason=f"public traces not in {PUBLIC_DIR}")


def findings(path: Path, *sets: str, window: str | None = None):
    analysis = analyze_trace(path, options=AnalysisOptions(sets=sets, window_spec=window))
    return {f.rule: f for f in analysis.findings}, analysis


# -- pageable-memcpy ----------------------------------------------------------------------------------

def test_pageable_on_h100_uses_the_h100_pinned_rate() -> None:
    found, _ = findings(real_trace("pageable_h2d"))
    f = found["pageable-memcpy"]
    assert "at 54.2 GB/s (GPU table: NVIDIA H100 SXM5 80GB on PCIe 5 x16" in f.message
    # 10 x 128 MiB at 9.4 GB/s (142.7 ms) would take 10 x (2 us + 134 MB / 54.2 GB/s) = 24.8 ms pinned
    assert f.impact_ns == pytest.approx(117.9e6, rel=0.01)
    fixed, _ = findings(real_trace("pageable_h2d_fixed"))
    assert "pageable-memcpy" not in fixed


@needs_public
def test_pageable_on_a_pcie3_gpu_uses_its_own_link() -> None:
    """The cuDF trace's Quadro RTX 8000 sits on PCIe 3 x16, the T4's link: its 132 pageable copies
    (163 MiB at 8.5 GB/s, 20.1 ms) would save about 6.3 ms pinned at 12.6 GB/s. The H100 figure the rule
    used before (50 GB/s) promised 16.5 ms of the 20.1 ms, more than pinning can give on that link."""
    found, _ = findings(CUDF, window="full")
    f = found["pageable-memcpy"]
    assert "at 12.6 GB/s (GPU table: NVIDIA Quadro RTX 8000 on PCIe 3 x16" in f.message
    assert 5.5e6 < f.impact_ns < 7.0e6
    forced, _ = findings(CUDF, "pageable-memcpy.pinned_gbps=50", window="full")
    g = forced["pageable-memcpy"]
    assert "set with --set pageable-memcpy.pinned_gbps" in g.message
    assert g.impact_ns > 2.5 * f.impact_ns  # the H100 constant overstated the saving
    t4 = gpu_by_key("t4")  # no T4 trace exists; its row gives the same link rate
    assert t4.pcie == gpu_by_key("quadro-rtx-8000").pcie and t4.pinned_copy_gbs == 12.6


# -- fp32-gemm-no-tensor-cores ------------------------------------------------------------------------

def test_fp32_gemm_is_capped_by_this_gpus_tensor_core_gain() -> None:
    found, analysis = findings(real_trace("fp32_gemm"))
    f = found["fp32-gemm-no-tensor-cores"]
    assert "at a 4.0x speed-up (this GPU's bf16 Tensor Core peak is 15x its fp32 peak)" in f.message
    hw = analysis.facts.get("hardware")
    assert hw["tensor_speedup"].iloc[0] == pytest.approx(989.4 / 67)
    fixed, _ = findings(real_trace("fp32_gemm_fixed"))
    assert "fp32-gemm-no-tensor-cores" not in fixed


@needs_public
def test_geforce_tensor_cores_gain_2x_at_most() -> None:
    """On the RTX 3090 of the memfusion export TF32 runs at the fp32 rate and bf16 at twice it: the
    rule's estimate there would use 2x, not 4x."""
    from analyzer.analysis import Window
    from analyzer.facts import FactStore
    from analyzer.loading import load_trace

    trace = load_trace(PUBLIC_DIR / "LeiWang1999__memfusion_artifact__report1.sqlite")
    hw = FactStore(trace, Window(0, 1, "full", "")).get("hardware")
    assert set(hw["gpu"]) == {"NVIDIA GeForce RTX 3090"}
    assert hw["tensor_speedup"].round(2).tolist() == [1.99] * len(hw)
    assert set(hw["tensor_path"]) == {"bf16"}
    assert gpu_by_key("t4").peak_flops("fp16_tensor") / gpu_by_key("t4").peak_flops("fp32") == pytest.approx(8.02, 0.01)


# -- alloc-in-loop ------------------------------------------------------------------------------------

def test_alloc_in_loop_fires_when_every_step_allocates() -> None:
    found, _ = findings(real_trace("alloc_churn"))
    f = found["alloc-in-loop"]
    assert f.message.startswith("10 of 10 steps allocate: 120 allocation/free calls")
    for name in ("alloc_churn_fixed", "healthy"):
        assert "alloc-in-loop" not in findings(real_trace(name))[0]


@needs_public
def test_alloc_in_loop_is_silent_when_one_step_of_three_allocates() -> None:
    """cuDF's window (3 GROUPBY_AGG steps): 169 allocation calls, 8 ms, but only the first step
    allocates inside a step (the rest are one JOIN between steps): a one-off, no longer a warning."""
    found, analysis = findings(CUDF)
    assert "alloc-in-loop" not in found
    calls = analysis.facts.get("alloc_calls")
    assert len(calls) == 169 and calls.loc[calls["step"] >= 0, "step"].nunique() == 1
    assert len(analysis.window.steps) == 3
    # over the whole capture the window keeps the 3 steps inside it: 270 calls, most of them setup
    # outside every step, still one step of three allocates: silent
    full, analysis = findings(CUDF, window="full")
    assert "alloc-in-loop" not in full
    calls = analysis.facts.get("alloc_calls")
    assert len(calls) == 270 and (calls["step"] < 0).sum() == 198 and set(calls["step"]) == {-1, 0}


# -- low-gpu-utilization evidence ---------------------------------------------------------------------

def test_low_utilization_evidence_is_the_least_busy_steps() -> None:
    found, _ = findings(real_trace("dataloader_starved"))
    f = found["low-gpu-utilization"]
    assert "12 of its 12 steps were under 50.0% busy" in f.message
    assert f.evidence_columns[0] == "label"
    labels = [row[0] for row in f.evidence]
    assert all(re.fullmatch(r"step_\d+", label) for label in labels)
    utils = [row[f.evidence_columns.index("util")] for row in f.evidence]
    assert utils == sorted(utils) and 0.35 < utils[0] < 0.5
    assert "low-gpu-utilization" not in findings(real_trace("dataloader_starved_fixed"))[0]


# -- small report fixes -------------------------------------------------------------------------------

def test_ratio_filter_never_prints_zero() -> None:
    ratio = FILTERS["ratio"]
    assert [ratio(v) for v in (0.043, 0.0004, 2.04, 40.6, 0)] == ["0.043x", "<0.001x", "2.0x", "41x", "0x"]


def test_setup_ratio_reads_right_on_a_short_setup() -> None:
    found, _ = findings(real_trace("tiny_kernels_fixed"), "setup-time.min_setup=1ms")
    message = found["setup-time"].message
    assert "0.0x" not in message and re.search(r"\(\d[\d.,]*x the window's", message)


def test_console_columns_line_up_with_long_rule_names() -> None:
    from analyzer.loading.ncu import load_ncu
    from analyzer.testing import real_file

    analysis = analyze_trace(real_trace("naive_attention"), ncu=load_ncu(real_file("ncu/naive_attention.raw.csv")))
    text = summary_text(build_report([analysis]), width=200)
    rows = [line for line in text.splitlines() if re.match(r"  [EWi] [A-Z]{2,5}\d{3} ", line)]
    assert any("memory-bound-softmax-measured" in r for r in rows)
    # "  W NCU001   rule-name...  impact pct  message": the rule column is as wide as the longest name,
    # so the impact and the message start at the same offset on every row
    width = max(len(r.split()[2]) for r in rows)
    for r in rows:
        assert r.index(r.split()[2]) == 13, r
        assert r[13 + width] == " " and r[13 + width + 18: 13 + width + 20] == "  ", r
    assert "window: " in text and " analyzed, " in text  # the length first, then how it was chosen


def test_markdown_keeps_code_spans_in_rule_prose() -> None:
    _, analysis = findings(real_trace("dataloader_starved"))
    md = render(build_report([analysis]), "md")
    fix = next(line for line in md.splitlines() if line.startswith("**Fix:**") and "DataLoader" in line)
    assert "`DataLoader(num_workers=N, pin_memory=True, prefetch_factor=...)`" in fix
    assert "\\`" not in fix


def test_demo_install_is_quiet() -> None:
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line or "$(PIP) install" in line]
    assert installs and all("$(PIP) install" in line for line in installs)
    assert "PIP = PYTHONWARNINGS=ignore" in makefile


def test_cli_exit_code_on_the_new_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(real_trace("alloc_churn")), "-o", str(tmp_path / "r.md"), "-q", "--fail-on", "warning"])
    assert code == 1
