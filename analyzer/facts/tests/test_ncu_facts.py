"""ncu facts: bound classification (ncu's SOLBottleneck logic, checked against ncu's own verdict in the
public details CSV), roofline placement, and the facts' behaviour with and without ncu data attached."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.analysis import Window
from analyzer.facts import FactStore, get_spec
from analyzer.facts.ncu import classify_bound, roofline
from analyzer.loading.model import (
    Trace,
    TraceInfo,
)
from analyzer.loading.ncu import load_ncu
from analyzer.testing import PUBLIC_DIR

REPO = Path(__file__).resolve().parents[3]
PUBLIC = PUBLIC_DIR
DETAILS_CSV = PUBLIC / "CodeGandee__llm-perf-opt__ncu.details.csv"
NSYS_SQLITE = PUBLIC / "LeiWang1999__memfusion_artifact__report1.sqlite"
needs_details = pytest.mark.skipif(not DETAILS_CSV.exists(), reason=f"public ncu CSV not found at {DETAILS_CSV}")

FACTS = ("ncu_kernels", "ncu_stalls", "ncu_rules")
# Columns the YAML ncu rules (memory-bound-softmax, memory-bound, compute-bound, latency-bound, low-occupancy,
# uncoalesced-access, shared-bank-conflicts, tail-effect, warp-stall-dominant) read.
RULE_COLUMNS = {
    "ncu_kernels": {
        "name", "short_name", "nvtx_path", "bound", "small_grid", "sm_throughput_pct", "memory_throughput_pct",
        "dram_throughput_pct", "achieved_occupancy", "theoretical_occupancy", "occupancy_limiter",
        "registers_per_thread", "smem_per_block", "block_size", "grid_size", "waves_per_sm", "tail_effect_pct",
        "tail_wave_fill_pct", "uncoalesced_excess_pct", "sectors_per_request", "bank_conflict_pct",
        "stall_reason", "stall_share", "arithmetic_intensity", "ridge_point", "roofline_side", "attainable_flops",
        "roofline_pct", "achieved_flops", "peak_flops", "peak_bandwidth", "duration_ns", "matched",
        "matched_ns", "timeline_count", "gpu_time_share",
    },
    "ncu_stalls": {"id", "name", "reason", "share", "rank", "matched_ns", "nvtx_path"},
    "ncu_rules": {"id", "name", "rule", "type", "description", "speedup_pct", "speedup_type"},
}


def _empty_trace() -> Trace:
    info = TraceInfo(path=Path("t.sqlite"), source_format="nsys-sqlite", nsys_version=None, schema_version=None,
                     origin_ns=0, duration_ns=0)
    return Trace.from_frames(info)


WINDOW = Window(start_ns=0, end_ns=10**18, source="full", description="whole trace")


@pytest.mark.parametrize(
    "sm, mem, bound",
    [
        (9.15, 19.66, "latency"),
        (59.0, 59.9, "latency"),
        (65.0, 40.0, "compute"),  # both < 80, >= 10 points apart: the higher one
        (40.0, 65.0, "memory"),
        (65.0, 70.0, "balanced"),  # both < 80, within 10 points
        (85.0, 90.0, "memory"),  # either >= 80: the higher one
        (92.0, 30.0, "compute"),
        (80.0, 80.0, "compute"),
        (np.nan, 50.0, "unknown"),
    ],
)
def test_classify_bound_follows_ncu_sol_logic(sm: float, mem: float, bound: str) -> None:
    assert classify_bound(pd.Series([sm]), pd.Series([mem])).iloc[0] == bound


def test_roofline_placement() -> None:
    k = pd.DataFrame({"peak_flops": [100e12, 100e12, np.nan], "peak_bandwidth": [2e12, 2e12, 2e12],
                      "arithmetic_intensity": [10.0, 200.0, 5.0], "achieved_flops": [10e12, 50e12, 1e12]})
    r = roofline(k)
    assert r["ridge_point"].iloc[0] == pytest.approx(50.0)
    assert list(r["roofline_side"]) == ["memory", "compute", ""]
    assert r["attainable_flops"].iloc[0] == pytest.approx(20e12)  # AI 10 * 2 TB/s
    assert r["roofline_pct"].iloc[0] == pytest.approx(50.0)
    assert r["roofline_pct"].iloc[1] == pytest.approx(50.0)  # capped by the compute peak
    assert np.isnan(r["roofline_pct"].iloc[2])


def _ncu_verdict(text: str) -> str:
    """ncu's SOLBottleneck message -> the bound it states."""
    if "too small to fill" in text or "latency issues" in text:
        return "latency"
    if "Memory is more heavily utilized" in text:
        return "memory"
    if "Compute is more heavily utilized" in text:
        return "compute"
    if "well-balanced" in text:
        return "balanced"
    return "unknown"


@needs_details
def test_bound_agrees_with_ncu_on_public_details_csv() -> None:
    report = load_ncu(DETAILS_CSV)
    trace = _empty_trace()
    trace.ncu = report
    kernels = FactStore(trace, WINDOW).get("ncu_kernels")
    sol = report.rules[report.rules["rule"] == "SOLBottleneck"].set_index("id")["description"]
    theirs = kernels["id"].map(sol).map(_ncu_verdict)
    for (_, row), their in zip(kernels.iterrows(), theirs):
        agree = "agree" if row["bound"] == their else "DIFFER"
        print(f"{row['short_name']}: ours={row['bound']} ncu={their} ({agree}); "
              f"sm={row['sm_throughput_pct']}% mem={row['memory_throughput_pct']}%")
    assert list(kernels["bound"]) == list(theirs) == ["latency"]
    # ncu also says the grid is < 1 wave; this export lacks Launch Statistics (no waves), so we cannot.
    assert not kernels["small_grid"].iloc[0] and np.isnan(kernels["waves_per_sm"].iloc[0])
    # And its TheoreticalOccupancy rule names registers, as our limiter does.
    occ = report.rules.set_index("rule").loc["TheoreticalOccupancy", "description"]
    assert "registers" in occ and kernels["occupancy_limiter"].iloc[0] == "registers"


@pytest.mark.parametrize("name", FACTS)
def test_facts_empty_without_ncu(name: str) -> None:
    frame = FactStore(_empty_trace(), WINDOW).get(name)
    assert frame.empty
    assert list(frame.columns) == list(get_spec(name).columns)


@pytest.mark.parametrize("name", FACTS)
def test_declared_columns_cover_what_the_ncu_rules_need(name: str) -> None:
    spec = get_spec(name)
    missing = RULE_COLUMNS[name] - set(spec.columns)
    assert not missing
    assert all(desc.strip() for desc in spec.columns.values())


@needs_details
def test_facts_with_details_csv_and_no_timeline() -> None:
    trace = _empty_trace()
    trace.ncu = load_ncu(DETAILS_CSV)
    store = FactStore(trace, WINDOW)
    kernels = store.get("ncu_kernels")
    assert len(kernels) == 1
    assert not kernels["matched"].iloc[0] and kernels["unmatched_reason"].iloc[0] == "the nsys trace has no kernels"
    rules = store.get("ncu_rules")
    assert list(rules["rule"]) == ["SOLBottleneck", "SOLFPRoofline", "IssueSlotUtilization", "TheoreticalOccupancy"]
    assert (rules["nvtx_path"] == "").all()
    assert store.get("ncu_stalls").empty  # the details page carries no stall breakdown


@needs_details
@pytest.mark.skipif(not NSYS_SQLITE.exists(), reason=f"public nsys export not found at {NSYS_SQLITE}")
def test_facts_on_real_trace_keep_unmatched_launches() -> None:
    from analyzer.loading import load_trace

    trace = load_trace(NSYS_SQLITE)
    trace.ncu = load_ncu(DETAILS_CSV)
    kernels = FactStore(trace, WINDOW).get("ncu_kernels")
    assert len(kernels) == 1 and not kernels["matched"].iloc[0]
    assert kernels["unmatched_reason"].iloc[0] == "no kernel with this name on the nsys timeline"
    assert kernels["bound"].iloc[0] == "latency"


NCU_REP = PUBLIC / "AveryClapp__ESMM-Research__profile.ncu-rep"


@pytest.mark.skipif(not NCU_REP.exists(), reason=f"public .ncu-rep not found at {NCU_REP}")
def test_facts_with_real_ncu_rep() -> None:
    pytest.importorskip("ncu_report", reason="ncu_report module not installed (pip install ncu-report)")
    trace = _empty_trace()
    trace.ncu = load_ncu(NCU_REP)
    store = FactStore(trace, WINDOW)
    kernels = store.get("ncu_kernels")
    assert len(kernels) == 12
    # The report has no SOL throughput metrics (collected with a narrow --metrics regex): no verdict.
    assert set(kernels["bound"]) == {"unknown"}
    # Peaks from device attributes give the A10G's ridge point (~58 FLOP/byte) even without FLOP counters.
    assert kernels["ridge_point"].iloc[0] == pytest.approx(35.0208e12 / 600.096e9)
    assert (kernels["roofline_side"] == "").all()
    stalls = store.get("ncu_stalls")
    assert len(stalls) == 12 and set(stalls["rank"]) == {1} and stalls["share"].isna().all()
    assert store.get("ncu_rules").empty  # this report stored no rule results
