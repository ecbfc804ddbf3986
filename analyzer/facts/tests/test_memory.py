"""Device memory over time on real traces: nsys ``CUDA_GPU_MEMORY_USAGE_EVENTS`` (every committed nsys
trace was recorded with ``--cuda-memory-usage=true``) and torch.profiler ``[memory]`` events
(``kineto/retained_graph*``: a loop that keeps each step's loss with its graph, and its fixed twin,
recorded with ``profile_memory=True`` beside ``torch.cuda.memory_allocated()`` after every step)."""
from __future__ import annotations

import gzip
import json
import lzma
import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzer.facts.memory import theil_sen
from analyzer.pipeline import analyze_loaded, analyze_trace

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
LEAK = DATA / "kineto" / "retained_graph.pt.trace.json.gz"
FIXED = DATA / "kineto" / "retained_graph_fixed.pt.trace.json.gz"


def _allocated(trace: Path) -> list[int]:
    """``torch.cuda.memory_allocated()`` after each step (steps 0..22; the profiler saw 3..22)."""
    name = trace.name.replace(".pt.trace.json.gz", ".allocated.json")
    return json.loads((trace.parent / name).read_text())["allocated"]


@pytest.fixture(scope="module")
def leak():
    return analyze_trace(LEAK)


@pytest.fixture(scope="module")
def fixed():
    return analyze_trace(FIXED)


@pytest.fixture(scope="module")
def churn():
    return analyze_trace(DATA / "alloc_churn.sqlite.xz")


# -- loading -------------------------------------------------------------------------------------------
def test_nsys_memory_events_match_the_export(churn, tmp_path) -> None:
    db = tmp_path / "alloc_churn.sqlite"
    db.write_bytes(lzma.decompress((DATA / "alloc_churn.sqlite.xz").read_bytes()))
    con = sqlite3.connect(db)
    rows = con.execute("SELECT memKind, memoryOperationType, count(*), sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                       "GROUP BY 1, 2").fetchall()
    con.close()
    kinds = {1: "pinned", 2: "device", 5: "device_static"}
    expect = {(kinds[k], "free" if o else "alloc"): (n, b) for k, o, n, b in rows}
    m = churn.trace.memory
    got = m.groupby([m["mem_kind"].astype(str), m["op"].astype(str)])["bytes"].agg(["count", "sum"])
    assert {k: (int(v["count"]), int(v["sum"])) for k, v in got.iterrows()} == expect
    assert (m["source"] == "cuda").all() and (m["total_allocated"] == -1).all()
    # each cudaMalloc/cudaFree is joined to its API call and the NVTX range it ran in
    dev = m[m["mem_kind"] == "device"]
    assert set(dev["api_name"].astype(str)) == {"cudaMalloc", "cudaFree"}
    assert (dev.loc[dev["start"] > churn.window.start_ns, "nvtx_path"].astype(str).str.startswith("step_")).all()
    assert "memory_events" not in churn.trace.info.unavailable


def test_kineto_memory_events(leak) -> None:
    m = leak.trace.memory
    with gzip.open(LEAK, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("name") == "[memory]"]
    nonzero = [e for e in events if e["args"].get("Bytes")]
    assert len(m) == len(nonzero) > 1000
    cuda = [e for e in nonzero if e["args"].get("Device Type") == 1]
    dev = m[m["mem_kind"] == "device"]
    assert len(dev) == len(cuda) and (dev["device"] == 0).all() and (dev["source"] == "allocator").all()
    assert int(dev["bytes"].sum()) == sum(abs(e["args"]["Bytes"]) for e in cuda)
    last = max(cuda, key=lambda e: e["ts"])
    assert int(dev["total_allocated"].iloc[-1]) == last["args"]["Total Allocated"]
    # events carry the range open on their thread (record_function ranges of the step)
    assert dev["nvtx_path"].astype(str).str.match(r"step_\d+").mean() > 0.9


def test_traces_without_memory_events_say_what_to_record() -> None:
    a = analyze_trace(DATA / "kineto" / "alloc_churn.pt.trace.json.gz")
    reason = a.trace.info.unavailable["memory_events"]
    assert "--cuda-memory-usage=true" in reason and "profile_memory=True" in reason
    not_run = {n.rule: n.reason for n in a.not_checked}
    assert not_run["memory-growth"] == not_run["memory-near-capacity"] == reason
    assert len(a.facts.get("memory_growth")) == 0


# -- facts ---------------------------------------------------------------------------------------------
def test_growth_per_step_is_what_the_allocator_reports(leak) -> None:
    allocated = _allocated(LEAK)
    per_step = np.diff(allocated)
    g = leak.facts.get("memory_growth").iloc[0]
    assert g["measure"] == "allocated"
    assert abs(g["bytes_per_step"] - np.median(per_step)) <= 0.1 * np.median(per_step)
    assert g["bytes_per_step"] == 100_705_280  # exact: torch's own running total
    assert g["slope_low"] > 0 and g["growing_steps"] == 1.0
    # the step-end level is the allocator's figure after that step
    steps = leak.facts.get("memory_steps")
    for name, end in zip(steps["step"], steps["end_bytes"]):
        assert end == allocated[int(name.split("_")[1])]
    assert g["growth_range"] == "step_N/forward" and g["growth_range_share"] > 0.9
    assert g["capacity_bytes"] > 0 and 0 < g["steps_to_fill"] < 2000


def test_fixed_twin_does_not_grow(fixed) -> None:
    g = fixed.facts.get("memory_growth").iloc[0]
    assert g["bytes_per_step"] == 0 and g["total_growth"] == 0
    assert set(fixed.facts.get("memory_steps")["end_bytes"]) == set(_allocated(FIXED))


def test_peak_per_step_and_range(leak, fixed) -> None:
    steps = leak.facts.get("memory_steps")
    assert (steps["peak_bytes"] >= steps[["start_bytes", "end_bytes"]].max(axis=1)).all()
    tl = leak.facts.get("memory_timeline")
    for _, s in steps.iterrows():
        inside = tl[(tl["start"] > s["start"]) & (tl["start"] <= s["end"])]
        assert s["peak_bytes"] == max(int(inside["bytes"].max()), int(s["start_bytes"]))
    ranges = leak.facts.get("memory_ranges")
    top = ranges.sort_values("peak_steps").iloc[-1]
    assert top["peak_steps"] == len(steps) and top["nvtx_path"].startswith("step_N/backward")
    g = leak.facts.get("memory_growth").iloc[0]
    assert g["peak_bytes"] == steps["peak_bytes"].max() and g["peak_step"] == steps["step"].iloc[-1]
    assert fixed.facts.get("memory_growth").iloc[0]["peak_bytes"] < g["peak_bytes"] / 5


def test_nsys_level_is_cuda_allocations_minus_frees(churn) -> None:
    tl = churn.facts.get("memory_timeline")
    m = churn.trace.memory
    dev = m[m["mem_kind"].isin(["device", "device_static"])]
    signed = np.where(dev["op"] == "free", -dev["bytes"], dev["bytes"])
    assert tl["measure"].eq("reserved").all()
    assert int(tl["bytes"].iloc[-1]) == int(signed.sum())
    assert (tl["bytes"] >= 0).all() and tl["matched"][tl["op"] == "free"].all()


def test_theil_sen_ignores_one_outlier() -> None:
    y = np.arange(20) * 10.0
    y[7] += 1000
    mid, lo, hi = theil_sen(y)
    assert mid == 10.0 and lo <= 10.0 <= hi
    assert theil_sen(np.array([5.0])) == (0.0, 0.0, 0.0)


# -- rules ---------------------------------------------------------------------------------------------
def test_memory_growth_fires_on_the_leak_only(leak, fixed, churn) -> None:
    f = [x for x in leak.findings if x.rule == "memory-growth"]
    assert len(f) == 1
    msg = f[0].message
    assert "grows 96.0 MiB per step over 19 steps (step_4 to step_22" in msg
    g = leak.facts.get("memory_growth").iloc[0]
    assert "`step_N/forward`" in msg and f"fill in about {int(g['steps_to_fill']):,} more steps (around step_" in msg
    assert g["fill_step"] == f"step_{22 + int(g['steps_to_fill'])}"
    assert not [x for x in fixed.findings if x.rule.startswith("memory-")]
    assert not [x for x in churn.findings if x.rule.startswith("memory-")]
    churn_alloc = next(x for x in churn.findings if x.rule == "alloc-in-loop")
    assert "grows" not in churn_alloc.message


def test_alloc_in_loop_names_growth_as_the_cause(leak) -> None:
    alloc = next(x for x in leak.findings if x.rule == "alloc-in-loop")
    assert "GPU memory also grows 96.0 MiB per step" in alloc.message and "memory-growth" in alloc.message


def test_near_capacity_fires_when_the_peak_fills_the_gpu(leak) -> None:
    """The leak's own events against a GPU whose memory is its peak plus 2% (a smaller card)."""
    t = leak.trace
    peak = int(leak.facts.get("memory_growth")["peak_bytes"].iloc[0])
    gpus = t.gpus.copy()
    gpus["memory_bytes"] = int(peak * 1.02)
    small = type(t)(**{**t.__dict__, "gpus": gpus})
    a = analyze_loaded(small)
    f = next(x for x in a.findings if x.rule == "memory-near-capacity")
    assert "98.0% of its" in f.message and "in step_22" in f.message
    assert not [x for x in leak.findings if x.rule == "memory-near-capacity"]


# -- bad input -----------------------------------------------------------------------------------------
def _with_memory(analysis, memory: pd.DataFrame):
    t = analysis.trace
    return analyze_loaded(type(t)(**{**t.__dict__, "memory": memory}))


def test_frees_without_allocation_start_the_level_at_zero(churn) -> None:
    """The capture begins after the program allocated (the first events cut away): the level starts
    where nothing it frees drives it below zero, and the frees are counted."""
    m = churn.trace.memory
    a = _with_memory(churn, m.iloc[6:].reset_index(drop=True))
    tl = a.facts.get("memory_timeline")
    assert (tl["bytes"] >= 0).all() and tl["bytes"].min() == 0
    g = a.facts.get("memory_growth").iloc[0]
    assert g["unmatched_frees"] >= 1
    from analyzer.reports.build import build_report

    memory = build_report([a]).traces[0].memory
    assert memory is not None
    notes = memory.notes
    assert any("of memory allocated before the capture" in n for n in notes)
    churn_memory = build_report([churn]).traces[0].memory
    assert churn_memory is not None and not churn_memory.notes


def test_events_without_device_and_several_processes(leak) -> None:
    m = leak.trace.memory.copy()
    m["device"] = m["device"].astype("int64")
    m.loc[m.index[::7], "device"] = -1  # events that name no device: left out of every GPU's level
    m["pid"] = m["pid"].astype("int64")
    m.loc[m.index[1::2], "pid"] = 4242  # a second process on the same GPU: sizes summed
    a = _with_memory(leak, m)
    g = a.facts.get("memory_growth").iloc[0]
    assert g["processes"] == 2 and g["device"] == 0
    tl = a.facts.get("memory_timeline")
    assert (tl["device"] == 0).all() and (tl["bytes"] >= 0).all()
    from analyzer.reports.markdown import render_markdown
    from analyzer.reports.summary import summary_text
    from analyzer.reports.build import build_report

    view = build_report([a])
    memory = view.traces[0].memory
    assert memory is not None
    lost = int(((m["device"] < 0) & (m["mem_kind"] != "host")).sum())
    assert memory.notes == (
        f"{lost:,} memory events name no GPU and are left out of the memory levels",
        "GPU 0: memory events of 2 processes; their allocations are added up (each holds its own memory)")
    text, md = summary_text(view, width=400), render_markdown(view)
    assert text.count("name no GPU") == 1 and md.count("name no GPU") == 1  # said once
    only_no_device = m.assign(device=-1)
    b = _with_memory(leak, only_no_device)
    assert len(b.facts.get("memory_growth")) == 0


def test_several_devices_get_a_level_each(churn) -> None:
    m = churn.trace.memory.copy()
    m["device"] = m["device"].astype("int64")
    second = m.copy()
    second["device"] = 1
    a = _with_memory(churn, pd.concat([m, second], ignore_index=True).sort_values("start", kind="stable"))
    g = a.facts.get("memory_growth")
    assert list(g["device"]) == [0, 1]
    assert g["peak_bytes"].nunique() == 1 and g["capacity_bytes"].iloc[1] == 0  # no properties for GPU 1


def test_report_formats_agree(leak, tmp_path) -> None:
    from analyzer.reports.jsonout import report_dict
    from analyzer.reports.markdown import render_markdown
    from analyzer.reports.summary import summary_text
    from analyzer.reports.build import build_report

    view = build_report([leak])
    memory = view.traces[0].memory
    assert memory is not None
    line = memory.lines[0]
    assert line.startswith("GPU 0 memory (allocated): peak 2.4 GiB in step_22")
    assert "96.0 MiB per step over 19 steps" in line
    doc = report_dict(view)
    assert doc["traces"][0]["summary"]["memory"] == [line]
    steps = doc["traces"][0]["overview"]["memory"]["steps"]
    assert steps["total_rows"] == 19 and steps["rows"][0]["step"] == "step_4"
    md = render_markdown(view)
    assert "**Memory:** GPU 0 memory (allocated): peak 2.4 GiB in step\\_22" in md
    assert "<summary>Peak memory per step</summary>" in md
    text = summary_text(view, width=400)
    assert f"  {line}" in text
    assert re.search(r"GPU 0 peak per step: 769\.5 MiB \(step_4\) to 2\.4 GiB \(step_22\) over 19 steps", text)


def test_summary_of_steps_with_one_peak_says_so():
    """The fixed twin's steps all peak at the same level: the terminal says so once, not as a range
    from one step to the same step ("361.3 MiB (step_4) to 361.3 MiB (step_4)")."""
    from analyzer.reports.build import build_report
    from analyzer.reports.summary import summary_text

    view = build_report([analyze_trace(FIXED)])
    steps = view.traces[0].memory.steps.records()
    assert {r["peak_bytes"] for r in steps} == {378_890_240}  # one level, to the byte
    assert f"  GPU 0 peak per step: 361.3 MiB in each of {len(steps)} steps" in summary_text(view, width=400).splitlines()


def test_summary_of_a_single_step_says_its_one_step():
    """TraceLens' BERT capture on an MI300X holds one ProfilerStep: the terminal said "139.6 MiB in
    each of 1 steps"; it names the step."""
    from analyzer.reports.build import build_report
    from analyzer.reports.summary import summary_text

    view = build_report([analyze_trace(DATA / "public" / "tracelens_bert_small_mi300x.pt.trace.json.xz")])
    assert len(view.traces[0].memory.steps.records()) == 1
    text = summary_text(view, width=400)
    assert "GPU 2 peak per step: 139.6 MiB in its one step (ProfilerStep#6)" in text and "each of 1 steps" not in text


# -- analyze diff --------------------------------------------------------------------------------------
def test_diff_reports_the_peak_going_down(leak, fixed) -> None:
    from datetime import datetime, timezone

    from analyzer.diff.compare import DiffSettings, diff_runs
    from analyzer.reports import build_report, render
    from analyzer.reports.baseline import from_report, summarize

    created = datetime(2026, 1, 1, tzinfo=timezone.utc)
    base, head = summarize(leak), summarize(fixed)
    assert base.memory_peak_bytes == int(leak.facts.get("memory_growth")["peak_bytes"].iloc[0])
    assert base.memory_growth_bytes == 100_705_280 and head.memory_growth_bytes == 0
    result = diff_runs(base, head, DiffSettings(), created=created)
    metrics = {m.key: m for m in result.metrics}
    peak_head, peak_base = metrics["memory_peak_bytes"].head, metrics["memory_peak_bytes"].base
    assert peak_head is not None and peak_base is not None and peak_head < peak_base / 5
    assert metrics["memory_growth_bytes"].base == 100_705_280 and metrics["memory_growth_bytes"].head == 0
    note = next(n for n in result.notes if n.startswith("peak GPU memory"))
    assert note.startswith("peak GPU memory went down: 2.44 GiB in BASE, 361 MiB in HEAD (-86%)")
    assert {f.rule for f in result.findings if f.status == "resolved"} >= {"memory-growth", "alloc-in-loop"}
    # a JSON report carries the same figures for a diff against it
    doc = json.loads(render(build_report([leak], created=created), "json"))
    again = from_report(doc, "leak.json")
    assert (again.memory_peak_bytes, again.memory_growth_bytes) == (base.memory_peak_bytes, base.memory_growth_bytes)


# -- round 3: memory_leak and memory_peak, each with its twin, recorded with nsys and torch.profiler ----------
R3 = DATA / "round3"


@pytest.fixture(scope="module")
def r3():
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = analyze_trace(R3 / name)
        return cache[name]

    return get


def _allocator_growth(trace: Path) -> float:
    """Median growth per profiler step of the allocator's own ``Total Allocated`` (the last ``[memory]``
    event before each ``ProfilerStep#N`` ends), read straight from the JSON."""
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    mem = sorted((e["ts"], e["args"]["Total Allocated"]) for e in events
                 if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
    ends = sorted(e["ts"] + e["dur"] for e in events
                  if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X")
    ts = np.array([t for t, _ in mem])
    total = np.array([v for _, v in mem])
    at_end = total[np.searchsorted(ts, ends, side="right") - 1]
    return float(np.median(np.diff(at_end)))


@pytest.mark.parametrize("ext", ["sqlite.xz", "pt.trace.json.gz"])
def test_round3_leak_grows_as_the_allocator_says_and_its_twin_does_not(r3, ext) -> None:
    reported = _allocator_growth(R3 / "memory_leak.pt.trace.json.gz")
    assert 250 * 2**20 < reported < 270 * 2**20  # ~260 MiB per step, as the workload describes
    leak, fixed = r3(f"memory_leak.{ext}"), r3(f"memory_leak_fixed.{ext}")
    g = leak.facts.get("memory_growth").iloc[0]
    assert abs(g["bytes_per_step"] - reported) <= 0.1 * reported
    f = next(x for x in leak.findings if x.rule == "memory-growth")
    first, last = ("step_0", "step_19") if ext == "sqlite.xz" else ("ProfilerStep#3", "ProfilerStep#21")
    assert f"grows 256.0 MiB per step over {g['steps']} steps ({first} to {last}" in f.message
    if ext == "pt.trace.json.gz":  # the allocator's blocks: the range that keeps them
        assert "100.0% of what stays is allocated in `ProfilerStep#N/step_N/validate`" in f.message
    else:  # CUDA allocations: where the cache ran short, said as such
        assert "the allocator asked CUDA for" in f.message
    assert not [x for x in fixed.findings if x.rule.startswith("memory-")]
    alloc = next(x for x in leak.findings if x.rule == "alloc-in-loop")
    assert "GPU memory also grows 256.0 MiB per step" in alloc.message


@pytest.mark.parametrize("ext", ["sqlite.xz", "pt.trace.json.gz"])
def test_round3_peak_per_step_in_every_format_and_diff_says_it_went_down(r3, ext) -> None:
    from datetime import datetime, timezone

    from analyzer.diff.compare import DiffSettings, diff_runs
    from analyzer.reports import build_report, render
    from analyzer.reports.baseline import summarize

    leak, fixed = r3(f"memory_leak.{ext}"), r3(f"memory_leak_fixed.{ext}")
    view = build_report([leak])
    steps = leak.facts.get("memory_steps")
    doc = json.loads(render(view, "json"))
    assert doc["traces"][0]["overview"]["memory"]["steps"]["total_rows"] == len(steps)
    md = render(view, "md")
    assert "<summary>Peak memory per step</summary>" in md and f"| 0 | {steps['step'].iloc[0]}".replace("_", "\\_") in md
    from analyzer.reports.summary import summary_text
    assert "GPU 0 peak per step:" in summary_text(view, width=300)
    result = diff_runs(summarize(leak), summarize(fixed), DiffSettings(),
                       created=datetime(2026, 1, 1, tzinfo=timezone.utc))
    peak = next(m for m in result.metrics if m.key == "memory_peak_bytes")
    assert peak.head is not None and peak.base is not None and peak.head < peak.base / 4
    assert any(n.startswith("peak GPU memory went down") for n in result.notes)


@pytest.mark.parametrize("ext", ["sqlite.xz", "pt.trace.json.gz"])
def test_round3_peak_near_capacity(r3, ext) -> None:
    peak, fixed = r3(f"memory_peak.{ext}"), r3(f"memory_peak_fixed.{ext}")
    g = peak.facts.get("memory_growth").iloc[0]
    assert 0.85 < g["peak_share"] < 0.95 and g["peak_held_share"] > 0.99
    f = next(x for x in peak.findings if x.rule == "memory-near-capacity")
    assert "89.7% of its 139.8 GiB" in f.message
    assert "score" in g["peak_held_in"]  # the phase that holds the peak: the score matrix
    assert not [x for x in fixed.findings if x.rule.startswith("memory-")]
    assert fixed.facts.get("memory_growth").iloc[0]["peak_share"] < 0.02


def test_damaged_memory_events_load_without_traceback(tmp_path) -> None:
    """The real trace with some ``[memory]`` events damaged: no device, a text size, a null total, an
    unknown device type. They are read as far as they go; the rest analyses as before."""
    with gzip.open(LEAK, "rt") as fh:
        doc = json.load(fh)
    mem = [e for e in doc["traceEvents"] if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1]
    mem[0]["args"].pop("Device Id")
    mem[1]["args"]["Bytes"] = "lots"
    mem[2]["args"]["Total Allocated"] = None
    mem[3]["args"]["Device Type"] = 99
    path = tmp_path / "damaged.pt.trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    a = analyze_trace(path)
    m = a.trace.memory
    assert len(m) == len(analyze_trace(LEAK).trace.memory) - 1  # the text size reads as no size
    assert (m["device"] == -1).sum() >= 2  # no device id, unknown device type
    g = a.facts.get("memory_growth").iloc[0]
    assert g["bytes_per_step"] == 100_705_280
    assert any(f.rule == "memory-growth" for f in a.findings)
    # the event without a total takes the one before it plus its own size: the levels stay the allocator's
    steps = a.facts.get("memory_steps")
    assert list(steps["end_bytes"]) == [_allocated(LEAK)[int(n.split("_")[1])] for n in steps["step"]]
