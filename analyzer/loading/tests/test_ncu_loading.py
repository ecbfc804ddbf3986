"""Nsight Compute loading: content detection, value/unit parsing, the two public real exports, bad input,
and the launch-matching algorithm of ``join_ncu``.

Real files: ``../shared/traces-public/CodeGandee__llm-perf-opt__ncu.details.csv`` (ncu 2025, RTX 5090,
one cuBLAS GEMV) and ``AveryClapp__ESMM-Research__profile.ncu-rep`` (ncu 2023.1.1, A10G, 12 SGEMM
launches). Small hand-written CSV snippets below only exercise the parser on layouts (raw page with a
units row, the 2020 'Kernel Time' column); they are not evidence about any GPU.
"""
from __future__ import annotations

import sys
import types
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.errors import InputError, UnsupportedFormatError
from analyzer.loading.model import (
    KERNEL_COLUMNS,
    Trace,
    TraceInfo,
    empty_frame,
)
from analyzer.loading.ncu import (
    NCU_JOIN_COLUMNS,
    NCU_KERNEL_COLUMNS,
    NCU_RULE_COLUMNS,
    NcuReport,
    detect_ncu,
    empty_ncu_frame,
    join_ncu,
    kernel_base_name,
    load_ncu,
    normalize_kernel_name,
    parse_unit,
    parse_values,
)
from analyzer.testing import PUBLIC_DIR

REPO = Path(__file__).resolve().parents[3]
PUBLIC = PUBLIC_DIR
DETAILS_CSV = PUBLIC / "CodeGandee__llm-perf-opt__ncu.details.csv"
NCU_REP = PUBLIC / "AveryClapp__ESMM-Research__profile.ncu-rep"
NSYS_SQLITE = PUBLIC / "LeiWang1999__memfusion_artifact__report1.sqlite"

needs_details = pytest.mark.skipif(not DETAILS_CSV.exists(), reason=f"public ncu CSV not found at {DETAILS_CSV}")
needs_rep = pytest.mark.skipif(not NCU_REP.exists(), reason=f"public .ncu-rep not found at {NCU_REP}")


def _has_ncu_report() -> bool:
    try:
        import ncu_report  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    "unit, factor, base",
    [
        ("", 1.0, ""),
        ("%", 1.0, "%"),
        ("ns", 1e-9, "second"),
        ("nsecond", 1e-9, "second"),
        ("us", 1e-6, "second"),
        ("usecond", 1e-6, "second"),
        ("ms", 1e-3, "second"),
        ("msecond", 1e-3, "second"),
        ("second", 1.0, "second"),
        ("byte", 1.0, "byte"),
        ("Kbyte", 1e3, "byte"),
        ("Mbyte", 1e6, "byte"),
        ("Gbyte", 1e9, "byte"),
        ("Kibyte", 1024.0, "byte"),
        ("Gbyte/s", 1e9, "byte/second"),
        ("Tbyte/second", 1e12, "byte/second"),
        ("Ghz", 1e9, "hz"),
        ("Mhz", 1e6, "hz"),
        ("cycle/nsecond", 1e9, "hz"),
        ("cycle/second", 1.0, "hz"),
        ("cycle", 1.0, "cycle"),
        ("Kcycle", 1e3, "cycle"),
        ("register/thread", 1.0, "register/thread"),
        ("byte/block", 1.0, "byte/block"),
        ("inst/cycle", 1.0, "inst/cycle"),
        ("block", 1.0, "block"),
    ],
)
def test_parse_unit(unit: str, factor: float, base: str) -> None:
    got_factor, got_base = parse_unit(unit)
    assert got_base == base
    assert got_factor == pytest.approx(factor)


def test_parse_values_thousands_separators_na_and_units() -> None:
    values = pd.Series(["13,485", "9,495.42", "n/a", "", "6.75", "2.33", "1,215,000,000.00", "1.5e3", "-1,234",
                        "(32, 4, 1)", "0"])
    units = pd.Series(["cycle", "cycle", "", "%", "us", "Mbyte", "hz", "byte", "", "", "byte"])
    got, base = parse_values(values, units)
    expected = [13485, 9495.42, np.nan, np.nan, 6.75e-6, 2.33e6, 1.215e9, 1500, -1234, np.nan, 0]
    np.testing.assert_allclose(got.to_numpy(), np.array(expected, dtype=float), equal_nan=True)
    assert list(base[:6]) == ["cycle", "cycle", "", "%", "second", "byte"]


# ---------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    "name, base",
    [
        ("basic(int, int, int, const float *, const float *, float *)", "basic"),
        ("void gmem_coalesce<(int)32>(int, int, int, const float *, const float *, float *)", "gmem_coalesce"),
        (
            ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char *, 1>>(int, T2, T3)"),
            "vectorized_elementwise_kernel",
        ),
        ("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16, float, 0, 1>(T13)", "kernel"),
        ("ampere_sgemm_128x64_nn", "ampere_sgemm_128x64_nn"),
        ("void (anonymous namespace)::softmax_warp_forward<float, float, 10>(float *, const float *, int)",
         "softmax_warp_forward"),
    ],
)
def test_kernel_base_name(name: str, base: str) -> None:
    assert kernel_base_name(name) == base


def test_normalize_kernel_name_matches_ncu_and_nsys_spellings() -> None:
    ncu = "void gmem_coalesce<(int)32>(int, int, int, const float *, const float *, float *)"
    nsys = "void gmem_coalesce<32>(int, int, int, const float*, const float*, float*)"
    assert normalize_kernel_name(ncu) == normalize_kernel_name(nsys)


# ---------------------------------------------------------------------------------------------- detection


@needs_details
def test_detect_real_details_csv() -> None:
    assert detect_ncu(DETAILS_CSV) == "ncu-details-csv"


@needs_rep
def test_detect_real_ncu_rep_by_magic(tmp_path: Path) -> None:
    assert detect_ncu(NCU_REP) == "ncu-rep"
    renamed = tmp_path / "report.bin"  # content, not extension
    renamed.write_bytes(NCU_REP.read_bytes()[:4096])
    assert detect_ncu(renamed) == "ncu-rep"


@needs_details
def test_detect_details_behind_console_noise(tmp_path: Path) -> None:
    noisy = tmp_path / "console.txt"
    noisy.write_text(
        "==PROF== Connected to process 1740670 (/usr/bin/python3.12)\n"
        "loading model... done\n"
        "==PROF== Profiling \"kernel\" - 0: 0%....50%....100% - 9 passes\n"
        "==PROF== Disconnected from process 1740670\n" + DETAILS_CSV.read_text()
    )
    assert detect_ncu(noisy) == "ncu-details-csv"
    report = load_ncu(noisy)
    plain = load_ncu(DETAILS_CSV)
    pd.testing.assert_frame_equal(
        report.kernels.drop(columns=["source"]), plain.kernels.drop(columns=["source"])
    )


def test_detect_layouts_and_non_ncu(tmp_path: Path) -> None:
    raw = tmp_path / "a.csv"
    raw.write_text('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
                   '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum"\n')
    assert detect_ncu(raw) == "ncu-raw-csv"
    old = tmp_path / "b.csv"
    old.write_text('"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream",'
                   '"Section Name","Metric Name","Metric Unit","Metric Value"\n')
    assert detect_ncu(old) == "ncu-details-csv"
    other = tmp_path / "c.csv"
    other.write_text("a,b,c\n1,2,3\n")
    assert detect_ncu(other) is None
    empty = tmp_path / "d.csv"
    empty.write_text("")
    assert detect_ncu(empty) is None
    assert detect_ncu(tmp_path / "missing.csv") is None


@pytest.mark.skipif(not NSYS_SQLITE.exists(), reason=f"public nsys export not found at {NSYS_SQLITE}")
def test_detect_nsys_sqlite_is_not_ncu() -> None:
    assert detect_ncu(NSYS_SQLITE) is None


# ---------------------------------------------------------------------------------------------- real files


@needs_details
def test_load_real_details_csv() -> None:
    report = load_ncu(DETAILS_CSV)
    assert isinstance(report, NcuReport)
    assert report.format == "ncu-details-csv"
    k = report.kernels
    assert list(k.columns) == list(NCU_KERNEL_COLUMNS)
    assert len(k) == 1
    row = k.iloc[0]
    assert row["short_name"] == "kernel"
    assert row["name"].startswith("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16")
    assert (row["grid_x"], row["grid_y"], row["grid_z"]) == (224, 1, 1)
    assert (row["block_x"], row["block_y"], row["block_z"]) == (32, 4, 1)
    assert row["cc"] == "12.0" and row["device"] == 0 and row["stream"] == 7
    assert row["duration_ns"] == pytest.approx(6750.0)
    assert row["sm_frequency_hz"] == pytest.approx(1.99e9)
    assert row["sm_throughput_pct"] == pytest.approx(9.15)
    assert row["memory_throughput_pct"] == pytest.approx(19.66)
    assert row["dram_throughput_pct"] == pytest.approx(19.66)
    assert row["achieved_occupancy"] == pytest.approx(11.32)
    assert row["theoretical_occupancy"] == pytest.approx(16.67)
    assert row["occupancy_limit_registers"] == 2 and row["occupancy_limit_shared_mem"] == 4
    assert row["occupancy_limiter"] == "registers"  # ncu's own TheoreticalOccupancy rule says the same
    assert row["dram_bytes"] == pytest.approx(2.33e6)  # dram__bytes_read.sum 2.33 Mbyte + write 0
    assert row["dram_bandwidth"] == pytest.approx(345.14e9)  # "Memory Throughput" in Gbyte/s
    assert np.isnan(row["flop_count"])  # flop_count_*.sum are n/a in this export
    # Every metric is also kept, display metrics keyed by section, thousands separators parsed.
    m = report.metrics.loc[0]
    assert m["GPU Speed Of Light Throughput: Elapsed Cycles"] == 13485
    assert m["GPU Speed Of Light Throughput: SM Active Cycles"] == pytest.approx(9495.42)
    assert m["gpu__time_duration.sum"] == pytest.approx(6.75e-6)
    assert report.units["gpu__time_duration.sum"] == "second"
    assert "flop_count_hp.sum" not in report.metrics.columns  # n/a everywhere: no numeric value


@needs_details
def test_real_details_csv_rules() -> None:
    rules = load_ncu(DETAILS_CSV).rules
    assert list(rules.columns) == list(NCU_RULE_COLUMNS)
    assert list(rules["rule"]) == ["SOLBottleneck", "SOLFPRoofline", "IssueSlotUtilization", "TheoreticalOccupancy"]
    assert list(rules["type"]) == ["OPT", "INF", "OPT", "OPT"]
    occ = rules.set_index("rule").loc["TheoreticalOccupancy"]
    assert occ["speedup_type"] == "global" and occ["speedup_pct"] == pytest.approx(80.34)
    assert "limited by the number of required registers" in occ["description"]
    assert np.isnan(rules.set_index("rule").loc["SOLBottleneck", "speedup_pct"])


@needs_rep
@pytest.mark.skipif(not _has_ncu_report(), reason="ncu_report module not installed (pip install ncu-report)")
def test_load_real_ncu_rep() -> None:
    report = load_ncu(NCU_REP)
    assert report.format == "ncu-rep"
    k = report.kernels
    assert list(k.columns) == list(NCU_KERNEL_COLUMNS)
    assert len(k) == 12
    assert list(k["short_name"][:3]) == ["basic", "gmem_coalesce", "smem_blocking"]
    assert list(k["short_name"][-2:]) == ["ampere_sgemm_128x64_nn"] * 2
    assert k["mangled"].iloc[0] == "_Z5basiciiiPKfS0_Pf"
    assert set(k["device_name"]) == {"NVIDIA A10G"} and set(k["cc"]) == {"8.6"}
    first = k.iloc[0]
    assert (first["grid_x"], first["grid_y"], first["block_x"], first["block_y"]) == (32, 32, 32, 32)
    assert first["duration_ns"] == pytest.approx(10_776_992)
    assert first["registers_per_thread"] == 36
    assert first["theoretical_occupancy"] == pytest.approx(200 / 3)  # 32 of 48 warps
    assert first["waves_per_sm"] == pytest.approx(12.8)
    assert first["sm_count"] == 80
    # No peak_sustained counters in this report: peaks come from device attributes.
    assert first["peak_source"] == "device-attributes"
    assert first["peak_bandwidth"] == pytest.approx(6_251_000e3 * 2 * 384 / 8)  # 600 GB/s, the A10G's
    assert first["peak_flops"] == pytest.approx(80 * 128 * 2 * 1.71e9)
    # The report collected a single stall metric (dispatch_stall): no share without other reasons.
    assert set(report.stalls["reason"]) == {"dispatch_stall"}
    assert report.stalls["share"].isna().all() and (k["stall_reason"] == "").all()
    # tail: 1.6 waves -> the second wave is 60% full
    one_block = k[k["short_name"] == "one_blocktiling"].iloc[0]
    assert one_block["waves_per_sm"] == pytest.approx(1.6)
    assert one_block["tail_wave_fill_pct"] == pytest.approx(60.0)
    assert one_block["tail_effect_pct"] == pytest.approx(20.0)  # (1 - 0.6) / 2 waves
    assert k[k["waves_per_sm"] < 1]["small_grid"].all()


@needs_rep
def test_ncu_rep_without_module_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ncu_report", None)  # import fails
    with pytest.raises(UnsupportedFormatError) as err:
        load_ncu(NCU_REP)
    msg = str(err.value)
    assert "\n" not in msg
    assert "pip install ncu-report" in msg
    assert "ncu --import AveryClapp__ESMM-Research__profile.ncu-rep --csv --page raw" in msg


@needs_rep
def test_ncu_rep_the_module_cannot_read(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("ncu_report")

    def load_report(path: str) -> None:
        raise RuntimeError("Report version 99 is not supported\nmore detail")

    fake.load_report = load_report  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ncu_report", fake)
    with pytest.raises(UnsupportedFormatError) as err:
        load_ncu(NCU_REP)
    msg = str(err.value)
    assert "\n" not in msg
    assert "cannot read this report (Report version 99 is not supported)" in msg
    assert "--csv --page raw" in msg


# ---------------------------------------------------------------------------------------------- layouts

RAW_LAYOUT = (
    "==PROF== Connected to process 1 (python)\n"
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
    '"Device","CC","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed",'
    '"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","dram__bytes.sum",'
    '"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",'
    '"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",'
    '"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum","smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",'
    '"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",'
    '"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","launch__waves_per_multiprocessor",\n'
    '"","","","","","","","","","","","msecond","%","%","Mbyte","inst","inst","inst","inst","inst","","","",\n'
    '"0","7","python","h","k_a(float*)","1","7","(256, 1, 1)","(4, 2, 1)","0","9.0","1.5","12.5","85.25",'
    '"1,024","3","1","1","2,000","500","10","100","2.5",\n'
    '"1","7","python","h","k_b","1","7","(128, 1, 1)","(1, 1, 1)","0","9.0","0.002","n/a","n/a","0",'
    '"","","","","","","","0.01",\n'
)


def test_raw_layout_units_row_and_trailing_commas(tmp_path: Path) -> None:
    path = tmp_path / "x.raw.csv"
    path.write_text(RAW_LAYOUT)
    assert detect_ncu(path) == "ncu-raw-csv"
    report = load_ncu(path)
    k = report.kernels.set_index("id")
    assert k.loc[0, "duration_ns"] == pytest.approx(1.5e6)
    assert k.loc[1, "duration_ns"] == pytest.approx(2000.0)
    assert k.loc[0, "dram_bytes"] == pytest.approx(1.024e9)
    assert (k.loc[0, "grid_x"], k.loc[0, "grid_y"], k.loc[0, "block_x"]) == (4, 2, 256)
    assert k.loc[0, "flop_count"] == 2 * 2000 + 500
    assert k.loc[0, "achieved_flops"] == pytest.approx(4500 / 1.5e-3)
    assert k.loc[0, "flop_precision"] == "fp32"
    assert k.loc[0, "bank_conflict_pct"] == pytest.approx(10.0)
    # 3 of 3 + 1 + 1 (selected counts in the total, as in ncu's CPIStall text)
    assert k.loc[0, "stall_reason"] == "long_scoreboard" and k.loc[0, "stall_share"] == pytest.approx(60.0)
    assert np.isnan(k.loc[1, "sm_throughput_pct"])
    assert k.loc[1, "small_grid"]
    assert report.stalls.set_index("reason").loc["selected", "share"] != report.stalls.set_index("reason").loc[
        "selected", "share"]  # NaN: 'selected' is not a stall
    assert report.rules.empty and list(report.rules.columns) == list(NCU_RULE_COLUMNS)


def test_2020_details_layout_with_kernel_time(tmp_path: Path) -> None:
    path = tmp_path / "old.csv"
    path.write_text(
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream",'
        '"Section Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","21524","cfd","127.0.0.1","cuda_compute_step_factor","2020-Apr-07 17:01:05","1","7",'
        '"GPU Speed Of Light","SOL FB","%","39.60"\n'
        '"0","21524","cfd","127.0.0.1","cuda_compute_step_factor","2020-Apr-07 17:01:05","1","7",'
        '"GPU Speed Of Light","Duration","usecond","12.40"\n'
        '"0","21524","cfd","127.0.0.1","cuda_compute_step_factor","2020-Apr-07 17:01:05","1","7",'
        '"GPU Speed Of Light","Elapsed Cycles","cycle","11,733"\n'
    )
    k = load_ncu(path).kernels.iloc[0]
    assert k["dram_throughput_pct"] == pytest.approx(39.6)
    assert k["duration_ns"] == pytest.approx(12400.0)
    assert k["grid_x"] == -1  # the 2020 layout has no grid/block columns


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_ncu(tmp_path / "nope.csv")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not an Nsight Compute export") as err:
        load_ncu(other)
    assert "\n" not in str(err.value)
    headonly = tmp_path / "head.csv"
    headonly.write_text('"ID","Process ID","Process Name","Host Name","Kernel Name","Section Name","Metric Name",'
                        '"Metric Unit","Metric Value"\n==PROF== Disconnected\n')
    with pytest.raises(InputError, match="no rows"):
        load_ncu(headonly)
    with pytest.raises(InputError, match="directory"):
        load_ncu(tmp_path)


@needs_details
def test_merge_two_files_renumbers_ids(tmp_path: Path) -> None:
    report = load_ncu([DETAILS_CSV, DETAILS_CSV])
    assert list(report.kernels["id"]) == [0, 1]
    assert list(report.kernels["ncu_id"]) == [0, 0]
    assert sorted(report.rules["id"].unique()) == [0, 1]
    assert list(report.metrics.index) == [0, 1]


# ---------------------------------------------------------------------------------------------- join


def _trace(kernels: pd.DataFrame) -> Trace:
    info = TraceInfo(path=Path("t.sqlite"), source_format="nsys-sqlite", nsys_version=None, schema_version=None,
                     origin_ns=0, duration_ns=int(kernels["end"].max()) if len(kernels) else 0)
    return Trace.from_frames(info, kernels=kernels)


def _nsys_kernels(rows: list[tuple[str, tuple[int, int, int], tuple[int, int, int], int, int]]) -> pd.DataFrame:
    """Minimal kernels frames for the matching algorithm: (name, grid, block, start, duration)."""
    base = empty_frame(KERNEL_COLUMNS)
    data: dict[str, list[Any]] = {c: [] for c in base.columns}
    for i, (name, grid, block, start, dur) in enumerate(rows):
        rec: dict[str, Any] = {c: -1 for c in base.columns}
        rec.update({c: "" for c in ("short_name", "api_name", "nvtx_range", "nvtx_path", "attribution")})
        rec.update(start=start, end=start + dur, duration=dur, name=name, short_name=kernel_base_name(name),
                   grid_x=grid[0], grid_y=grid[1], grid_z=grid[2], block_x=block[0], block_y=block[1],
                   block_z=block[2], nvtx_path=f"step/{i}", nvtx_range=str(i), correlation_id=i)
        for c in base.columns:
            data[c].append(rec[c])
    return pd.DataFrame(data)


def _ncu(rows: list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]) -> NcuReport:
    k = empty_ncu_frame(NCU_KERNEL_COLUMNS)
    recs = []
    for i, (name, grid, block) in enumerate(rows):
        rec: dict[str, Any] = {c: np.nan for c in NCU_KERNEL_COLUMNS}
        rec.update(id=i, ncu_id=i, name=name, short_name=kernel_base_name(name), grid_x=grid[0], grid_y=grid[1],
                   grid_z=grid[2], block_x=block[0], block_y=block[1], block_z=block[2])
        recs.append(rec)
    k = pd.DataFrame(recs, columns=list(NCU_KERNEL_COLUMNS))
    empty = pd.DataFrame()
    return NcuReport(source=(Path("x.csv"),), format="ncu-raw-csv", kernels=k, metrics=empty,
                     rules=empty_ncu_frame(NCU_RULE_COLUMNS), stalls=empty)


G1, G2, B = (32, 32, 1), (8, 8, 1), (256, 1, 1)


def test_join_kth_launch_of_a_config_matches_kth_nsys_launch() -> None:
    nsys = _nsys_kernels([
        ("void gemm<32>(float*)", G1, B, 0, 100),
        ("void gemm<32>(float*)", G2, B, 200, 50),
        ("void gemm<32>(float*)", G1, B, 300, 110),
        ("softmax(float*)", G1, B, 500, 10),
        ("void gemm<32>(float*)", G1, B, 600, 120),
    ])
    report = _ncu([("void gemm<(int)32>(float *)", G1, B), ("void gemm<(int)32>(float *)", G1, B),
                   ("void gemm<(int)32>(float *)", G2, B)])
    k = join_ncu(report, _trace(nsys)).kernels
    assert set(NCU_JOIN_COLUMNS) <= set(k.columns)
    assert list(k["matched"]) == [True, True, True]
    assert list(k["match_key"]) == ["name+grid+block"] * 3
    assert list(k["nsys_index"]) == [0, 2, 1]
    assert list(k["matched_ns"]) == [330, 330, 50]
    assert list(k["timeline_count"]) == [3, 3, 1]
    assert k["gpu_time_share"].iloc[0] == pytest.approx(330 / 390)
    assert list(k["nvtx_path"]) == ["step/0", "step/2", "step/1"]


def test_join_falls_back_to_base_name_then_name_only_and_reports_unmatched() -> None:
    nsys = _nsys_kernels([
        ("void ns::reduce<float, 4>(float*, int)", G1, B, 0, 100),  # ncu exported function names only
        ("layernorm(float*)", G2, B, 100, 40),  # profiled with another grid
        ("layernorm(float*)", G2, B, 200, 60),
    ])
    report = _ncu([
        ("reduce", G1, B),
        ("layernorm(float *)", G1, B),
        ("reduce", G1, B),  # one launch more than the timeline has
        ("flash_fwd(float *)", G1, B),  # not on the timeline at all
    ])
    k = join_ncu(report, _trace(nsys)).kernels.set_index("id")
    assert k.loc[0, "match_key"] == "base+grid+block" and k.loc[0, "nsys_index"] == 0
    assert k.loc[1, "match_key"] == "base" and k.loc[1, "nsys_index"] == 1
    assert k.loc[1, "matched_ns"] == 100 and k.loc[1, "timeline_count"] == 2
    assert not k.loc[2, "matched"] and "more profiled launches of this configuration" in k.loc[2, "unmatched_reason"]
    assert not k.loc[3, "matched"] and k.loc[3, "unmatched_reason"] == "no kernel with this name on the nsys timeline"
    assert k.loc[3, "nsys_index"] == -1 and np.isnan(k.loc[3, "matched_ns"])
    assert len(k) == 4  # never dropped


def test_join_window_restricts_timeline_totals_not_matching() -> None:
    nsys = _nsys_kernels([("k(int)", G1, B, 0, 10), ("k(int)", G1, B, 100, 20), ("k(int)", G1, B, 200, 30)])
    k = join_ncu(_ncu([("k(int)", G1, B)]), _trace(nsys), window=(50, 1000)).kernels
    assert k["nsys_index"].iloc[0] == 0  # launch order over the whole trace
    assert k["matched_ns"].iloc[0] == 50 and k["timeline_count"].iloc[0] == 2
    assert k["gpu_time_share"].iloc[0] == pytest.approx(1.0)


def test_join_against_trace_without_kernels() -> None:
    k = join_ncu(_ncu([("k(int)", G1, B)]), _trace(_nsys_kernels([]))).kernels
    assert not k["matched"].iloc[0] and k["unmatched_reason"].iloc[0] == "the nsys trace has no kernels"


@needs_details
@pytest.mark.skipif(not NSYS_SQLITE.exists(), reason=f"public nsys export not found at {NSYS_SQLITE}")
def test_join_real_files_from_different_workloads_reports_unmatched() -> None:
    from analyzer.loading import load_trace

    trace = load_trace(NSYS_SQLITE)
    k = join_ncu(load_ncu(DETAILS_CSV), trace).kernels
    assert len(k) == 1 and not k["matched"].iloc[0]
    assert k["unmatched_reason"].iloc[0] == "no kernel with this name on the nsys timeline"
