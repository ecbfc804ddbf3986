"""Evaluation: findings with capped evidence, impact, links between rules, ranking, typed failures."""
from __future__ import annotations

import pytest

from analyzer.errors import ParameterError
from analyzer.findings import Severity
from analyzer.rules import apply_overrides, evaluate, load_pack
from analyzer.rules.model import RuleEvaluationError

from .conftest import FACTS, MS, SCALARS, WINDOW, FakeStore, pack_text, rule

UTIL = rule(
    id="GPU002", name="low-gpu-utilization", title="GPU mostly idle", severity="error", source="gaps",
    parameters={"max_busy": {"default": "90%", "unit": "percent", "doc": "busy share below which it fires"}},
    where=None, let={"idle": "sum(duration)", "busy": "1 - idle / window_ns"}, condition="busy < max_busy",
    impact=None, evidence={"columns": ["start", "end"], "limit": 1},
    message="GPU {{ device }} busy {{ busy | pct }}",
)
SYNCS = rule(
    id="SYN001", name="too-many-stream-syncs", title="Many cudaStreamSynchronize per step", category="sync",
    severity="warning", scope="nvtx_range", source="syncs",
    parameters={"max_syncs": {"default": 3, "unit": "count", "doc": "syncs per range"}},
    where='name == "cudaStreamSynchronize"', let={"n": "count()", "blocked": "sum(duration)"},
    condition="n > max_syncs", impact="blocked", evidence={"columns": ["start", "duration"], "limit": 2},
    message="{{ n }} syncs in {{ nvtx_path }} blocked the host {{ blocked | ms }}",
)


def make_pack(write, *rules):
    return load_pack(write(pack_text(*rules)), facts=FACTS, scalars=SCALARS)


def test_finding_fields_evidence_capping_and_impact(write):
    pack = make_pack(write, rule())
    (finding,) = evaluate(pack, FakeStore(), WINDOW, {})
    assert finding.rule == "gpu-idle-gaps" and finding.id == "GPU001"
    assert finding.severity is Severity.WARNING
    assert finding.scope.kind == "device" and finding.scope.device == 0
    assert finding.message == "GPU 0 sat idle 20.0 ms (20.0%) in 5 gaps"
    assert finding.impact_ns == 20 * MS and finding.impact_pct == pytest.approx(20.0)
    assert finding.evidence_columns == ("start", "duration", "host_nvtx_path")
    assert finding.evidence_total == 5
    assert [row[1] for row in finding.evidence] == [6 * MS, 5 * MS, 4 * MS]  # sorted -duration, capped at 3
    assert finding.evidence[0] == (20 * MS, 6 * MS, "step_2/data")
    assert finding.metrics == {"idle_ns": 20 * MS, "gaps": 5, "share": pytest.approx(0.2)}
    assert finding.what.startswith("Time when") and finding.references


def test_override_changes_the_outcome(write):
    pack = make_pack(write, rule())
    assert [f.scope.device for f in evaluate(apply_overrides(pack, ["gpu-idle-gaps.min_gap=100us"]),
                                             FakeStore(), WINDOW, {})] == [0]
    assert evaluate(apply_overrides(pack, ["GPU001.min_share=25%"]), FakeStore(), WINDOW, {}) == []
    p2 = apply_overrides(pack, ["GPU001.min_gap=1us", "GPU001.min_share=1%"])
    assert sorted(f.scope.device for f in evaluate(p2, FakeStore(), WINDOW, {})) == [0]  # GPU 1: 2 gaps < 3
    assert p2.get("GPU001").parameter("min_gap").text == "1us"


SET_ERRORS = [
    ("gpu-idle-gap.min_gap=2ms", 'unknown rule "gpu-idle-gap"; did you mean "gpu-idle-gaps"?'),
    ("gpu-idle-gaps.min_gaps=2ms", 'has no parameter "min_gaps" (parameters: min_gap, min_share); did you mean'),
    ("gpu-idle-gaps.min_gap=2", "needs a time unit"),
    ("gpu-idle-gaps.min_share=2ms", "cannot read '2ms' as a percent"),
    ("gpu-idle-gaps.min_gap", "expected RULE.PARAM=VALUE"),
    ("min_gap=2ms", "expected RULE.PARAM=VALUE"),
]


@pytest.mark.parametrize(("text", "message"), SET_ERRORS, ids=[t for t, _ in SET_ERRORS])
def test_override_errors(text, message, write):
    pack = make_pack(write, rule())
    with pytest.raises(ParameterError) as info:
        apply_overrides(pack, [text])
    assert message in str(info.value)


def test_override_errors_quote_a_long_value_cut_so_the_reason_stays_on_the_line(write):
    """A 5,000-digit value: the message quoted all of it before the reason, and the CLI's one-line cap
    (2,000 characters) cut the reason off."""
    pack = make_pack(write, rule())
    for text in ["gpu-idle-gaps.min_gap=" + "9" * 5000 + "ms", "gpu-idle-gaps=" + "9" * 5000]:
        with pytest.raises(ParameterError) as info:
            apply_overrides(pack, [text])
        message = str(info.value)
        assert len(message) < 600 and ("is not a finite number" in message or "expected RULE.PARAM" in message), message
    with pytest.raises(ParameterError) as info:
        apply_overrides(pack, ["gpu-idle-gaps.min_gap=" + "9" * 5000 + "ms"], origin="pyproject.toml:9")
    assert str(info.value).startswith("pyproject.toml:9: set gpu-idle-gaps.min_gap=999") and len(str(info.value)) < 600


def test_parameter_bounds(write):
    pack = make_pack(write, rule(parameters={
        "min_gap": {"default": "1ms", "unit": "duration", "doc": "d", "min": "1us", "max": "1s"},
        "min_share": {"default": "10%", "unit": "percent", "doc": "d"},
    }))
    with pytest.raises(ParameterError, match="above the maximum 1s"):
        apply_overrides(pack, ["GPU001.min_gap=2s"])


def test_only_needed_facts_are_read(write):
    store = FakeStore()
    evaluate(make_pack(write, SYNCS), store, WINDOW, {})
    # the rule's source; then, for the finding's footprint (its rows are host calls), the GPU idle gaps
    assert store.asked == ["syncs", "gpu_gaps"]


def test_nvtx_scope_and_stream_syncs(write):
    (finding,) = evaluate(make_pack(write, SYNCS), FakeStore(), WINDOW, {})
    assert finding.scope.kind == "nvtx_range" and finding.scope.nvtx_path == "step/loss"
    assert finding.message == "10 syncs in step/loss blocked the host 3.0 ms"
    assert finding.evidence_total == 10 and len(finding.evidence) == 2
    assert finding.key == "too-many-stream-syncs-step-loss"


def test_links_need_overlapping_evidence_and_results_are_ranked(write):
    idle = rule(explains=["low-gpu-utilization"])
    pack = make_pack(write, idle, UTIL, SYNCS)
    findings = evaluate(pack, FakeStore(), WINDOW, {})
    by_rule = {f.rule: f for f in findings}
    assert by_rule["gpu-idle-gaps"].explains == ("low-gpu-utilization-0",)
    assert by_rule["low-gpu-utilization"].explained_by == ("gpu-idle-gaps-0",)
    # ranked: known impact first (largest first), then unknown impact by severity
    assert [f.id for f in findings] == ["GPU001", "SYN001", "GPU002"]
    assert [f.impact_ns for f in findings] == [20 * MS, 3 * MS, None]
    assert not any(by_rule["too-many-stream-syncs"].explains)


def test_no_link_when_evidence_does_not_overlap(write):
    store = FakeStore()
    gaps = store.frames["gaps"]
    early = gaps[gaps["start"] < 25 * MS]
    store.frames["early"] = early
    facts = {**FACTS, "early": FACTS["gaps"]}
    util_early = {**UTIL, "source": "early", "where": "start < 15ms", "condition": "idle > 0"}
    idle_late = rule(where="start > 25ms and duration >= min_gap", explains=["low-gpu-utilization"],
                     condition="gaps >= 1")
    pack = load_pack(write(pack_text(idle_late, util_early)), facts=facts, scalars=SCALARS)
    findings = evaluate(pack, store, WINDOW, {})
    assert {f.rule for f in findings} == {"gpu-idle-gaps", "low-gpu-utilization"}
    assert all(not f.explains and not f.explained_by for f in findings)


def test_trace_scope_fires_on_an_empty_fact(write):
    none = rule(id="GPU009", name="no-gaps", scope="trace", where="duration > 1s", parameters=None,
                let={"n": "count()"}, condition="n == 0", impact=None, evidence=None, message="{{ n }} gaps")
    (finding,) = evaluate(make_pack(write, none), FakeStore(), WINDOW, {})
    assert finding.scope.kind == "trace" and finding.message == "0 gaps" and finding.evidence_total == 0


def test_fact_functions_join_on_scope_keys(write):
    busy = rule(id="GPU003", name="share-of-kernels", scope="device", source="gaps", parameters=None,
                where=None, let={"k": 'fact_count("kernels")', "kt": 'fact_sum("kernels", "duration")',
                                 "all_syncs": 'fact_count("syncs")'},
                condition="k > 0", impact=None, evidence=None, message="{{ k }} {{ kt }} {{ all_syncs }}")
    store = FakeStore()
    (finding,) = evaluate(make_pack(write, busy), store, WINDOW, {})
    assert finding.scope.device == 0
    assert finding.message == "20 4195000 12"  # kernels joined on device; syncs has no device: whole fact
    assert set(store.asked) == {"gaps", "kernels", "syncs"}


def test_scalars_and_builtins(write):
    r = rule(id="KRN001", name="kernel-time", scope="trace", source="kernels", parameters=None, where=None,
             let={"t": "sum(duration)"}, condition="t / kernel_time_ns > 0.5 and gpu_count == 1",
             impact=None, evidence=None, message="{{ t | ms }} of {{ kernel_time_ns | ms }} on {{ gpu_count }}")
    scalars = {"kernel_time_ns": 5 * MS, "device_count": 1}
    (finding,) = evaluate(make_pack(write, r), FakeStore(), WINDOW, scalars)
    assert finding.message == "4.2 ms of 5.0 ms on 1"


def test_missing_scalar_is_a_typed_error_naming_the_rule(write):
    r = rule(condition="gaps > 0 and gpu_busy_ns > 0")
    with pytest.raises(RuleEvaluationError, match=r"GPU001 \(gpu-idle-gaps\): condition .*gpu_busy_ns"):
        evaluate(make_pack(write, r), FakeStore(), WINDOW, {})


def test_missing_fact_is_a_typed_error_naming_the_rule(write):
    store = FakeStore()
    del store.frames["gaps"]
    with pytest.raises(RuleEvaluationError, match=r'GPU001 \(gpu-idle-gaps\): cannot compute fact "gaps"'):
        evaluate(make_pack(write, rule()), store, WINDOW, {})


def test_missing_column_on_this_trace_is_a_typed_error(write):
    store = FakeStore()
    store.frames["gaps"] = store.frames["gaps"].drop(columns=["host_nvtx_path"])
    with pytest.raises(RuleEvaluationError, match='has no column.*host_nvtx_path'):
        evaluate(make_pack(write, rule()), store, WINDOW, {})


def test_kernel_scope_with_regex(write):
    r = rule(id="KRN002", name="elementwise-time", scope="kernel", source="kernels", parameters={
        "pattern": {"default": "elementwise|reduce", "unit": "text", "doc": "kernels to look at"}},
        where="matches(name, pattern)", let={"n": "count()", "t": "sum(duration)"}, condition="n >= 5",
        impact="t", evidence={"columns": ["stream", "duration"], "sort": ["-duration", "stream"], "limit": 2},
        message="{{ name }} x{{ n }}")
    findings = evaluate(make_pack(write, r), FakeStore(), WINDOW, {})
    assert [(f.scope.kernel, f.impact_ns) for f in findings] == [("reduce_kernel", 150_000),
                                                                  ("elementwise_kernel", 45_000)]
    pack = apply_overrides(make_pack(write, r), ["KRN002.pattern=^reduce"])
    assert [f.scope.kernel for f in evaluate(pack, FakeStore(), WINDOW, {})] == ["reduce_kernel"]
    with pytest.raises(ParameterError, match="back-references"):
        apply_overrides(pack, ["KRN002.pattern=(a)\\1"])
    apply_overrides(pack, ["KRN002.pattern=(a+)+$"])  # linear time on RE2: accepted
