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
