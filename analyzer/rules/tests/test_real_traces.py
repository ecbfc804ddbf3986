"""The engine over real facts of real public traces (skipped when ../shared/traces-public is absent).

The expected values are computed independently with pandas from the same fact frames."""
from __future__ import annotations

import pytest

from analyzer.analysis import Window
from analyzer.rules import evaluate, load_pack
from analyzer.testing import PUBLIC_DIR

from .conftest import pack_text, rule

TRACES = PUBLIC_DIR
CASES = ["quasiben__nvtx-examples__cudf.sqlite", "LeiWang1999__memfusion_artifact__report1.sqlite"]

IDLE = rule(source="gpu_gaps", evidence={"columns": ["start", "duration", "host_nvtx_path"], "sort": "-duration",
                                          "limit": 5}, explains=["kernel-families"],
            parameters={"min_gap": {"default": "100us", "unit": "duration", "doc": "d"},
                        "min_share": {"default": "0%", "unit": "percent", "doc": "d"}},
            condition="gaps >= 1")
FAMILIES = rule(id="KRN001", name="kernel-families", scope="kernel", source="kernel_categories",
                parameters=None, where=None, let={"n": "count()", "t": "sum(duration)"}, condition="n >= 2",
                impact="t", evidence={"columns": ["start", "end", "duration"], "limit": 3},
                message="{{ name }} ran {{ n }} times, {{ t | duration }}")


@pytest.mark.parametrize("trace", CASES)
def test_engine_on_real_facts(trace, tmp_path):
    path = TRACES / trace
    if not path.exists():
        pytest.skip(f"{path} not present")
    from analyzer.facts import FactStore
    from analyzer.loading import load_trace

    loaded = load_trace(path)
    window = Window(0, loaded.info.duration_ns, "full", "whole trace")
    store = FactStore(loaded, window)
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(pack_text(IDLE, FAMILIES))
    pack = load_pack(rules_file)  # validated against the real fact registry
    findings = evaluate(pack, store, window, {})

    gaps = store.get("gpu_gaps")
    big = gaps[gaps["duration"] >= 100_000]
    idle = [f for f in findings if f.rule == "gpu-idle-gaps"]
    assert sorted(f.scope.device for f in idle) == sorted(big["device"].unique().tolist())
    for finding in idle:
        mine = big[big["device"] == finding.scope.device]
        assert finding.impact_ns == int(mine["duration"].sum())
        assert finding.evidence_total == len(mine)
        assert len(finding.evidence) == min(5, len(mine))
        assert finding.evidence[0][1] == mine["duration"].max()

    kernels = store.get("kernel_categories")
    counts = kernels.groupby("name")["duration"].agg(["count", "sum"])
    expected = counts[counts["count"] >= 2]
    families = {f.scope.kernel: f for f in findings if f.rule == "kernel-families"}
    assert set(families) == set(expected.index)
    for name, finding in families.items():
        assert finding.impact_ns == int(expected.loc[name, "sum"])
    impacts = [f.impact_ns for f in findings]
    assert impacts == sorted(impacts, reverse=True)  # ranked
    assert set(store.computed()) >= {"gpu_gaps", "kernel_categories"}
    assert "utilization" not in store.computed()  # only what the rules need
