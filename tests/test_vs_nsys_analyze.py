"""Our facts against NVIDIA's own expert system on the same real traces.

Each trace in tests/data has the output of ``nsys analyze`` (Nsight Systems 2025.3.1) beside it
(``<name>.analyze.txt``). Its rules run over the whole trace and print at most 50 rows (longest
first), so we compare over the whole trace too: where nsys printed fewer than 50 rows the counts
must be equal, and in every case the durations it printed must be our longest ones. Then a problem
it misses: the data-loader-starved trace loses 54% of its steady state to gaps far below the 500 ms
threshold of its ``gpu_gaps`` rule.
"""
from __future__ import annotations

import functools
import re

import pandas as pd
import pytest

from analyzer.analysis import Window
from analyzer.facts import FactStore
from analyzer.loading import load_trace
from analyzer.pipeline import analyze_trace
from analyzer.rules import load_pack
from analyzer.testing import DATA_DIR, real_file, real_trace

ROWS_LIMIT = 50  # nsys analyze's default `rows`
SMALL_H2D = 64 * 1024  # cuda_memcpy_sync ignores H2D copies of 64 KB or less
TRACES = sorted(p.name.removesuffix(".analyze.txt") for p in DATA_DIR.glob("*.analyze.txt")) if DATA_DIR.is_dir() else []


def parse_analyze(text: str) -> dict[str, pd.DataFrame]:
    """``nsys analyze`` text output -> {rule name: its table} (an empty frame for "no problems" or
    SKIPPED rules). Columns are located from the dashed rule under the header; numbers lose their
    thousands separators."""
    out: dict[str, pd.DataFrame] = {}
    for block in re.split(r"\nProcessing \[", "\n" + text):
        m = re.search(r"\*\* .*?\((\w+)\):\n", block)
        if not m:
            continue
        lines = block[m.end():].splitlines()
        dash = next((i for i, line in enumerate(lines) if re.fullmatch(r"\s*-[-\s]*", line)), None)
        if dash is None:
            out[m.group(1)] = pd.DataFrame()
            continue
        spans = [s.span() for s in re.finditer(r"-+", lines[dash])]
        header = [lines[dash - 1][a:b + 2].strip() for a, b in spans]  # headers may overhang a little
        rows = []
        for line in lines[dash + 1:]:
            if not line.strip():
                break
            rows.append([line[a:b].strip() for a, b in spans])
        frame = pd.DataFrame(rows, columns=header)
        for col in frame.columns:
            cleaned = frame[col].str.replace(",", "", regex=False)
            numeric = pd.to_numeric(cleaned, errors="coerce")
            if numeric.notna().all() and len(frame):
                frame[col] = numeric
        out[m.group(1)] = frame
    return out


@functools.cache
def nsys(name: str) -> dict[str, pd.DataFrame]:
    return parse_analyze(real_file(f"{name}.analyze.txt").read_text())


@functools.cache
def whole_trace_store(name: str) -> FactStore:
    """Facts over the whole trace, as nsys analyze sees it (no steady-state window)."""
    trace = load_trace(real_trace(name))
    return FactStore(trace, Window(0, 1 << 62, "full", "whole trace"), {})


def durations(frame: pd.DataFrame, column: str = "Duration (ns)") -> list[int]:
    return sorted((int(v) for v in frame[column]), reverse=True) if len(frame) else []


def agree(ours: pd.Series, theirs: list[int]) -> None:
    """Counts equal when nsys printed everything; its printed durations are our longest ones."""
    mine = sorted((int(v) for v in ours), reverse=True)
    if len(theirs) < ROWS_LIMIT:
        assert len(mine) == len(theirs)
    else:
        assert len(mine) >= ROWS_LIMIT
    assert mine[: len(theirs)] == theirs


def test_parser_reads_a_real_table():
    tables = nsys("pageable_h2d")
    assert len(tables["cuda_memcpy_async"]) == 12
    assert tables["cuda_memcpy_async"]["Duration (ns)"].iloc[0] == 16_299_809
    assert tables["cuda_memcpy_async"]["Src Kind"].eq("Pageable").all()
    assert tables["cuda_memcpy_sync"].empty and tables["gpu_gaps"].empty
    assert set(tables["cuda_api_sync"]["API Name"]) == {"cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_v3020"}


@pytest.mark.parametrize("name", TRACES)
def test_pageable_async_copies_agree(name):
    """nsys cuda_memcpy_async: async copies touching pageable memory (its Duration is the copy's)."""
    table = nsys(name).get("cuda_memcpy_async", pd.DataFrame())
    store = whole_trace_store(name)
    syncs = store.get("sync_calls")
    pageable_api = syncs[syncs["sync_kind"] == "pageable_async_memcpy"]
    copies = store.get("copy_throughput")
    pageable_copies = copies[copies["pageable"] & copies["is_async"]]
    assert len(pageable_api) == len(pageable_copies)
    agree(pageable_copies["duration"], durations(table))


@pytest.mark.parametrize("name", TRACES)
def test_synchronization_calls_agree(name):
    """nsys cuda_api_sync: cudaDeviceSynchronize / cudaStreamSynchronize calls."""
    table = nsys(name).get("cuda_api_sync", pd.DataFrame())
    syncs = whole_trace_store(name).get("sync_calls")
    explicit = syncs[syncs["name"].isin(["cudaDeviceSynchronize", "cudaStreamSynchronize"])]
    agree(explicit["duration"], durations(table))


@pytest.mark.parametrize("name", TRACES)
def test_synchronous_memcpy_agrees(name):
    """nsys cuda_memcpy_sync (none on these PyTorch/CuPy traces: they copy with cudaMemcpyAsync)."""
    table = nsys(name).get("cuda_memcpy_sync", pd.DataFrame())
    syncs = whole_trace_store(name).get("sync_calls")
    sync_copies = syncs[(syncs["sync_kind"] == "memcpy") & (syncs["direction"] != "D2D")
                        & ~((syncs["direction"] == "H2D") & (syncs["bytes"] <= SMALL_H2D))]
    agree(sync_copies["duration"], durations(table))


def test_gaps_nsys_analyze_misses():
    """dataloader_starved: nsys gpu_gaps (500 ms) only sees the one-time setup gap; the steady state
    loses 199 ms (54%) to 12 gaps of 16-20 ms, which our gpu-idle-gaps reports with their total."""
    table = nsys("dataloader_starved")["gpu_gaps"]
    assert len(table) == 1 and table["Duration (ns)"].iloc[0] > 500_000_000
    store = whole_trace_store("dataloader_starved")
    all_gaps = store.get("gpu_gaps")
    setup_gap = all_gaps[all_gaps["duration"] == table["Duration (ns)"].iloc[0]]
    assert len(setup_gap) == 1  # the same gap, found by its exact duration

    analysis = analyze_trace(real_trace("dataloader_starved"), load_pack(DATA_DIR.parents[1] / "rules" / "default.yaml"))
    assert int(setup_gap["end"].iloc[0]) <= analysis.window.start_ns  # it is setup, before the steady state
    gaps = analysis.facts.get("gpu_gaps")
    long = gaps[gaps["duration"] >= 1_000_000]
    assert len(long) == 12
    assert long["duration"].max() < 500_000_000 / 20  # every one is 25x below nsys's threshold
    assert long["duration"].sum() > 0.5 * analysis.window.duration_ns  # and they starve the GPU
    (finding,) = [f for f in analysis.findings if f.rule == "gpu-idle-gaps"]
    assert finding.impact_ns == int(long["duration"].sum())
    assert "load_batch" in {str(row[finding.evidence_columns.index("host_nvtx_path")]).split("/")[-1]
                            for row in finding.evidence}
