"""CUDA graph replays on real traces: kernels a replay ran are marked, one graph launch is one launch,
unknown launch configurations are unknown (tests/data/public, see tests/data/MANIFEST.md)."""
from __future__ import annotations

import gzip
import json
import lzma
from functools import lru_cache
from pathlib import Path

import numpy as np



PUBLIC = Path(__file__).resolve().parents[3] / "tests" / "data" / "public"
VLLM = PUBLIC / "tracelens_vllm_decode_graph_mi300x.pt.trace.json.gz"
SGLANG = PUBLIC / "tracelens_sglang_decode_mi300x.pt.trace.json.xz"


@lru_cache(maxsize=4)
def _analysis(path: Path):
    from analyzer.pipeline import analyze_trace

    return analyze_trace(path)


def _raw_graph_kernels(path: Path) -> tuple[int, int]:
    """From the JSON itself: kernels whose correlation id is a hipGraphLaunch's, and those without grid."""
    opener = lzma.open if path.suffix == ".xz" else gzip.open
    doc = json.loads(opener(path).read())
    events = doc["traceEvents"]
    launches = {e["args"]["correlation"] for e in events
                if e.get("cat") == "cuda_runtime" and e.get("name") == "hipGraphLaunch"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    in_graph = sum(1 for e in kernels if e["args"].get("correlation") in launches)
    no_grid = sum(1 for e in kernels if "grid" not in e["args"])
    return in_graph, no_grid


def test_graph_kernels_are_marked_from_their_launch_call():
    for path in (VLLM, SGLANG):
        a = _analysis(path)
        k = a.trace.kernels
        expected, _ = _raw_graph_kernels(path)
        assert expected > 300
        assert int((k["in_graph"] == 1).sum()) == expected
        assert set(k.loc[k["in_graph"] == 1, "api_name"].astype(str)) == {"hipGraphLaunch"}
        assert set(k.loc[k["in_graph"] == 0, "api_name"].astype(str)) != {"hipGraphLaunch"}


def test_one_graph_launch_is_charged_once():
    a = _analysis(VLLM)
    stats = a.facts.get("launch_stats")
    k = a.trace.kernels
    w = a.window
    inside = k[(k["start"] >= w.start_ns) & (k["start"] < w.end_ns)]
    graph_launches = inside.loc[inside["in_graph"] == 1, "correlation_id"].nunique()
    other = int((inside["in_graph"] == 0).sum())
    assert graph_launches == 1
    # every eager kernel has its launch call, the replay's 383 kernels one between them
    assert int(stats["launch_count"].sum()) == other + graph_launches
    replays = a.facts.get("graph_replays")
    assert len(replays) == 1 and int(replays["kernels"].iloc[0]) == int((inside["in_graph"] == 1).sum())
    assert str(replays["api_name"].iloc[0]) == "hipGraphLaunch"
    # the replay spans its kernels: first start to last end
    graph = inside[inside["in_graph"] == 1]
    assert int(replays["start"].iloc[0]) == int(graph["start"].min())
    assert int(replays["end"].iloc[0]) == int(graph["end"].max())


def test_unknown_launch_configuration_is_not_a_small_grid():
    for path in (VLLM, SGLANG):
        a = _analysis(path)
        names = [f.rule for f in a.findings]
        assert "small-grid" not in names, names
        assert "tiny-kernels" not in names, names
        assert names.count("unknown-launch-config") == 1, names  # said once
        _, no_grid = _raw_graph_kernels(path)
        unknown = a.facts.get("unknown_launch_config")
        k = a.trace.kernels
        inside = k[(k["start"] >= a.window.start_ns) & (k["start"] < a.window.end_ns)]
        assert int(unknown["unknown_count"].sum()) == int((inside["grid_x"] <= 0).sum()) > 0
        assert int((k["grid_x"] <= 0).sum()) == no_grid
        occ = a.facts.get("occupancy")
        assert (occ["grid_blocks"] > 0).all() and (occ["block_size"] > 0).all()


def test_graph_replay_gaps_are_between_replays():
    from analyzer.facts.graphs import graph_replays  # noqa: F401  (registered fact)

    a = _analysis(SGLANG)
    r = a.facts.get("graph_replays")
    assert len(r) == 1
    assert np.isnan(r["gap_before_ns"].iloc[0])  # a device's first replay has no gap before it


COMPILE = Path(__file__).resolve().parents[3] / "tests" / "data" / "kineto" / "compile_train_default_h200.pt.trace.json.xz"


def test_torch_compile_compilation_is_setup_with_its_duration():
    a = _analysis(COMPILE)
    setup = a.facts.get("setup_activity").set_index("kind")
    compile_ = setup.loc["torch.compile"]
    # the compilation ran in step_0, which the window leaves out: all of it inside the setup, none in the window
    assert compile_["in_window_ns"] == 0
    assert 0.9 * a.window.setup_ns < compile_["before_window_ns"] <= a.window.setup_ns
    # the outermost 'dynamo' range, read from the trace's own events, bounds the union from below
    nv = a.trace.nvtx
    dynamo = nv.loc[nv["text"].astype(str) == "dynamo", "duration"]
    assert len(dynamo) == 1 and compile_["total_ns"] >= int(dynamo.iloc[0])
    found = [f for f in a.findings if f.rule == "setup-time"]
    assert len(found) == 1 and "torch.compile compiled for" in found[0].message
    # the runtime ranges of the compiled code are never compilation
    assert not setup.empty and set(setup.index) == {"torch.compile"}


# --------------------------------------------------------------------------------------------------
# nsys, graph-level (default) and node-level tracing: the round-3 decode loop and its CUDA graph twin
ROUND3 = Path(__file__).resolve().parents[3] / "tests" / "data" / "round3"
GRAPH_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


@lru_cache(maxsize=4)
def _sqlite(name: str, tmp: str) -> Path:
    import shutil

    out = Path(tmp) / f"{name}.sqlite"
    if not out.exists():
        with lzma.open(ROUND3 / f"{name}.sqlite.xz") as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def _sql_busy_share(db: Path, origin: int, start: int, end: int) -> float:
    """The union of every GPU table's intervals (graph executions included) inside [start, end), straight
    from the export. With node-level tracing, each graph execution is its nodes' span (first kernel's
    start to last kernel's end, per launch correlation id), as the graph-level trace records it."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    rows = sorted([r for t in GRAPH_TABLES if t in tables
                   for r in con.execute(f"select start - {origin}, end - {origin} from {t}")]
                  + list(con.execute(
                      f"select min(start) - {origin}, max(end) - {origin} from CUPTI_ACTIVITY_KIND_KERNEL "
                      "where graphNodeId is not null group by globalPid, deviceId, correlationId")))
    busy, cur_s, cur_e = 0, None, None
    for s, e in rows:
        s, e = max(s, start), min(e, end)
        if e <= s:
            continue
        if cur_s is None or s > cur_e:
            busy += 0 if cur_s is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += 0 if cur_s is None else cur_e - cur_s
    return busy / (end - start)


LAUNCH_OR_IDLE = {"tiny-kernels", "gpu-idle-gaps", "low-gpu-utilization", "small-grid"}


def test_graph_level_trace_counts_graph_executions_as_gpu_work(tmp_path_factory):
    db = _sqlite("decode_eager_fixed", str(tmp_path_factory.getbasetemp()))
    a = _analysis(ROUND3 / "decode_eager_fixed.sqlite.xz")
    k = a.trace.kernels
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    executions = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0]
    assert int((k["in_graph"] == 2).sum()) == executions == a.trace.extras["cuda_graphs"]["without_kernels"]
    w = a.window
    busy = a.facts.get("gpu_busy")["duration"].sum() / w.duration_ns
    sql = _sql_busy_share(db, a.trace.info.origin_ns, w.start_ns, w.end_ns)
    assert abs(busy - sql) < 0.02 and busy > 0.9  # was 0.2% before graph executions were GPU work
    assert w.source == "nvtx" and w.steps is not None and all(s.startswith("step_") for s in w.steps.names)
    rules = {f.rule for f in a.findings}
    assert not rules & LAUNCH_OR_IDLE, rules
    replays = [f for f in a.findings if f.rule == "graph-replays"]
    assert len(replays) == 1 and "--cuda-graph-trace=node" in replays[0].message
    # executions are no kernels: the unknown-launch-config note is not about them
    assert "unknown-launch-config" not in rules
    # each replay is attributed to the step range that launched it
    r = a.facts.get("graph_replays")
    assert len(r) == len(w.steps.names) * 8 and set(r["nvtx_path"].astype(str).str.split("/").str[0]) <= set(
        w.steps.names)


def test_node_level_trace_does_not_count_a_replay_twice(tmp_path_factory):
    db = _sqlite("decode_eager_fixed_node", str(tmp_path_factory.getbasetemp()))
    a = _analysis(ROUND3 / "decode_eager_fixed_node.sqlite.xz")
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    node_kernels = con.execute(
        "select count(*) from CUPTI_ACTIVITY_KIND_KERNEL where graphNodeId is not null").fetchone()[0]
    k = a.trace.kernels
    assert int((k["in_graph"] == 1).sum()) == node_kernels > 10_000
    assert int((k["in_graph"] == 2).sum()) == 0
    w = a.window
    busy = a.facts.get("gpu_busy")["duration"].sum() / w.duration_ns
    # each execution whole, nodes and the GPU's own time between them: 87% (the kernels' union is 74%)
    assert abs(busy - _sql_busy_share(db, a.trace.info.origin_ns, w.start_ns, w.end_ns)) < 0.005 and busy > 0.85
    seg = a.facts.get("timeline_segments")
    between = seg.loc[seg["detail"] == "CUDA graph (between nodes)", "duration"].sum()
    assert (seg.loc[seg["detail"] == "CUDA graph (between nodes)", "cause"] == "compute").all()
    assert 0.1 < between / w.duration_ns < 0.2  # ~140 dependent nodes a replay, a few hundred ns apart
    waiting = seg.loc[seg["cause"] == "wait_other", "duration"].sum()
    assert waiting / w.duration_ns < 0.03  # was 14.6%: the gaps inside each replay
    rules = {f.rule for f in a.findings}
    assert "tiny-kernels" not in rules and "graph-replays" in rules
    stats = a.facts.get("launch_stats")
    replays = a.facts.get("graph_replays")
    assert int(stats["launch_count"].sum()) == len(replays) + int(
        ((k["in_graph"] == 0) & (k["start"] >= w.start_ns) & (k["start"] < w.end_ns)).sum())


def test_eager_twin_is_launch_bound_in_every_recording():
    for path in (ROUND3 / "decode_eager.sqlite.xz", ROUND3 / "decode_eager.pt.trace.json.gz"):
        assert "tiny-kernels" in {f.rule for f in _analysis(path).findings}, path.name
    torch_graph = _analysis(ROUND3 / "decode_eager_fixed.pt.trace.json.gz")
    rules = {f.rule for f in torch_graph.findings}
    assert "tiny-kernels" not in rules and "graph-replays" in rules


def test_compilers_the_program_started_are_setup_in_an_nsys_trace():
    a = _analysis(ROUND3 / "compile_train.sqlite.xz")
    setup = a.facts.get("setup_activity").set_index("kind")
    assert "compiler processes" in setup.index and "torch.compile" not in setup.index  # no ranges under nsys
    row = setup.loc["compiler processes"]
    threads = a.trace.threads
    ptxas = set(threads.loc[threads["name"].astype(str) == "ptxas", "pid"].astype(int))
    assert ptxas and row["count"] >= len(ptxas)
    assert 0 < row["before_window_ns"] <= a.window.setup_ns and row["in_window_ns"] == 0
    assert "compilers the program started" in next(f.message for f in a.findings if f.rule == "setup-time")


def test_host_bound_graph_loop_is_idle_time_between_replays():
    a = _analysis(ROUND3 / "compile_train_fixed.sqlite.xz")
    r = a.facts.get("graph_replays")
    w = a.window
    idle = w.duration_ns - int(a.facts.get("gpu_busy")["duration"].sum())
    between = float(np.nansum(r["idle_before_ns"]))
    # idle time before each replay is GPU idle time: never more than the window's, never more than the gap
    assert 0 < between <= idle
    gaps = r["gap_before_ns"].to_numpy()
    assert (np.nan_to_num(r["idle_before_ns"].to_numpy()) <= np.nan_to_num(gaps)).all()
    found = [f for f in a.findings if f.rule == "host-bound-graph-loop"]
    host = float(np.nansum(r["host_idle_before_ns"]))
    assert len(found) == 1 and abs(found[0].impact_ns - host) < 1
    # the host's part leaves out the eager AdamW step's launch gaps between the replays: launch-bound's
    # finding in step_N/optimizer, never counted twice (together within the idle time between replays)
    (eager,) = [f for f in a.findings if f.rule == "launch-bound"]
    assert eager.scope.nvtx_path == "step_N/optimizer"
    assert 0.5 * between < host < between and host + eager.impact_ns <= between + 1
    low = [f for f in a.findings if f.rule == "low-gpu-utilization"]
    assert low and found[0].key in low[0].explained_by
    # the CUDA graph decode loop is GPU-bound: silent
    assert "host-bound-graph-loop" not in {f.rule for f in _analysis(ROUND3 / "decode_eager_fixed.sqlite.xz").findings}


# -- bad input, on temporary copies of the graph-level export (the real file never changes) -----------
def _damaged(tmp_path: Path, *sql: str) -> tuple[Path, str]:
    """A copy of the export changed by ``sql``, and its digest."""
    import hashlib
    import sqlite3

    out = tmp_path / "damaged.sqlite"
    with lzma.open(ROUND3 / "decode_eager_fixed.sqlite.xz") as src:
        out.write_bytes(src.read())
    con = sqlite3.connect(out)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return out, hashlib.sha256(out.read_bytes()).hexdigest()


def _replays_finding(damaged: tuple[Path, str]):
    import hashlib

    from analyzer.pipeline import analyze_trace

    path, digest = damaged
    a = analyze_trace(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # the input is never modified
    return a, next(f for f in a.findings if f.rule == "graph-replays")


LAUNCHES = ("nameId in (select id from StringIds where value like 'cudaGraphLaunch%')")


def test_graph_updates_between_replays_are_counted_once(tmp_path):
    # three instantiations dated between replays of the window (CUDA_GRAPH_EVENTS class 94)
    damaged = _damaged(tmp_path, "insert into CUDA_GRAPH_EVENTS select g.start - 1000, g.start - 1000, 94, "
                    "(select globalTid from CUDA_GRAPH_EVENTS limit 1), 760, 1, NULL, 2 "
                    "from CUPTI_ACTIVITY_KIND_GRAPH_TRACE g order by g.start limit 3 offset 60")
    a, found = _replays_finding(damaged)
    assert int(a.facts.get("graph_replays")["updates_before"].sum()) == 3
    assert found.message.count("updated or instantiated again 3") == 1
    plain = _analysis(ROUND3 / "decode_eager_fixed.sqlite.xz")
    assert int(plain.facts.get("graph_replays")["updates_before"].sum()) == 0


def test_graphs_launched_from_several_threads(tmp_path):
    damaged = _damaged(tmp_path, f"update CUPTI_ACTIVITY_KIND_RUNTIME set globalTid = globalTid + 1 "
                              f"where {LAUNCHES} and rowid % 2 = 0")
    a, found = _replays_finding(damaged)
    replays = a.facts.get("graph_replays")
    assert replays["tid"].nunique() == 2 and len(replays) == 80
    assert "launched by cudaGraphLaunch from 2 threads" in found.message
    assert not {f.rule for f in a.findings} & LAUNCH_OR_IDLE


def test_graph_executions_without_their_launch_calls(tmp_path):
    damaged = _damaged(tmp_path, f"delete from CUPTI_ACTIVITY_KIND_RUNTIME where {LAUNCHES}")
    a, found = _replays_finding(damaged)
    assert "launched by calls the trace does not hold" in found.message
    notes = [n for n in a.trace.extras.get("notes", []) if "no launch call" in n]
    assert len(notes) == 1
    plain = _analysis(ROUND3 / "decode_eager_fixed.sqlite.xz")
    busy = a.facts.get("gpu_busy")["duration"].sum()
    assert busy == plain.facts.get("gpu_busy")["duration"].sum()  # still GPU work, the same window
    assert a.window.start_ns == plain.window.start_ns and a.window.end_ns == plain.window.end_ns
