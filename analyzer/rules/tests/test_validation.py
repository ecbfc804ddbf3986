"""Validation before any trace is read: every message names file:line, the rule and a suggestion."""
from __future__ import annotations

import pytest

from analyzer.errors import RuleError
from analyzer.rules import load_pack, validate_pack

from .conftest import FACTS, SCALARS, line_of, pack_text, rule


def load(path):
    return load_pack(path, facts=FACTS, scalars=SCALARS)


def test_valid_pack_loads(write):
    path = write(pack_text(rule()))
    pack = load(path)
    (r,) = pack.rules
    assert (r.id, r.name, r.scope, r.source, r.requires) == ("GPU001", "gpu-idle-gaps", "device", "gaps", ("gaps",))
    assert r.params == {"min_gap": 1_000_000, "min_share": 0.1}
    assert r.key_columns == ("device",)
    assert r.columns == ("device", "duration", "host_nvtx_path", "start")
    assert r.evidence.sort == (("duration", False),)


# (changes to the base rule, text in the message, text on the reported line)
CASES = {
    "unknown-column": (
        {"condition": "sum(durration) > 0"},
        'unknown column "durration" in GPU001.condition; did you mean "duration"?', "condition:"),
    "unknown-let": ({"condition": "shar >= min_share"}, 'did you mean "share"?', "condition:"),
    "unknown-param-in-where": ({"where": "duration >= min_gapp"}, 'did you mean "min_gap"?', "where:"),
    "column-outside-aggregate": ({"impact": "duration"}, "must be inside an aggregate", "impact:"),
    "missing-fix": ({"fix": None}, 'missing required field "fix" in GPU001', "- id: GPU001"),
    "missing-condition": ({"condition": None}, 'missing required field "condition"', "- id: GPU001"),
    "bad-severity": ({"severity": "critical"}, "unknown severity 'critical'; use info, warning or error",
                     "severity:"),
    "bad-scope": ({"scope": "devices"}, 'unknown scope "devices" in GPU001; did you mean "device"?', "scope:"),
    "unknown-fact": ({"source": "gap"}, 'unknown fact "gap" in GPU001.source; did you mean "gaps"?', "source:"),
    # no close name: the hint lists them all
    "unlisted-category": ({"category": "zzz"}, 'unknown category "zzz" in GPU001; categories: ', "category:"),
    "bad-kind": ({"kind": "zzz"}, 'unknown kind "zzz" in GPU001; kinds: cause, symptom', "kind:"),
    "bad-footprint": ({"footprint": "idle_befor"},
                      'unknown footprint "idle_befor" in GPU001; did you mean "idle_before"?', "footprint:"),
    "unknown-unit": ({"parameters": {"min_gap": {"default": "1ms", "unit": "durations", "doc": "d"}}},
                     'unknown unit "durations"', "unit: durations"),
    "bad-default": ({"parameters": {"min_gap": {"default": "1", "unit": "duration", "doc": "d"}}},
                    "needs a time unit", "default: '1'"),
    "unknown-key": ({"severty": "info"}, 'unknown key "severty" in GPU001; did you mean "severity"?', "severty:"),
    "bad-id": ({"id": "gpu1"}, "must be 2-5 capital letters and 3 digits", "id: gpu1"),
    "bad-name": ({"name": "GPU_Idle"}, "must be kebab-case", "name: GPU_Idle"),
    "bad-category": ({"category": "utilisation"}, 'did you mean "utilization"?', "category:"),
    "unknown-filter": ({"message": "{{ idle_ns | msec }}"}, 'unknown filter "msec"', "message:"),
    "unknown-message-name": ({"message": "{{ idle }}"}, 'unknown name "idle" in GPU001.message; did you mean "idle_ns"?', "message:"),
    "template-syntax": ({"message": "{{ idle_ns "}, "template syntax error", "message:"),
    "evidence-column": ({"evidence": {"columns": ["strat"]}}, 'did you mean "start"?', "columns:"),
    "evidence-sort": ({"evidence": {"sort": "-durtion"}}, 'did you mean "duration"?', "sort:"),
    "evidence-limit": ({"evidence": {"limit": 5000}}, "limit must be a whole number", "limit: 5000"),
    "shadowing-let": ({"let": {"duration": "count()"}, "condition": "duration > 0"}, "shadows a column",
                      "duration: count()"),
    "bad-test-expect": ({"tests": [{"trace": "t.sqlite", "expect": "fires"}]}, "must be fire or silent",
                        "expect: fires"),
    "bad-test-set": ({"tests": [{"trace": "t.sqlite", "expect": "fire", "set": ["gpu-idle-gaps.min_gapp=1ms"]}]},
                     'no parameter "min_gapp"', "- trace: t.sqlite"),
    "group-by-column": ({"scope": "nvtx_range"}, 'groups by column "nvtx_path"', "- id: GPU001"),
    "explains-unknown": ({"explains": ["low-gpu-utilisation"]}, 'explains names unknown rule', "- id: GPU001"),
    "reference-not-url": ({"references": ["see the manual"]}, "must be an http(s) URL", "references:"),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_validation_message(case, write):
    changes, message, line_text = CASES[case]
    text = pack_text(rule(**changes))
    path = write(text)
    with pytest.raises(RuleError) as info:
        load(path)
    err = info.value
    assert message in str(err)
    assert err.file == str(path)
    assert err.line == line_of(text, line_text), str(err)
    assert str(err).startswith(f"{path}:{err.line}: ")
    assert err.rule_id == ("gpu1" if case == "bad-id" else "GPU001")


def test_bad_version_names_the_supported_one(write):
    path = write(pack_text(rule(), version=2))
    with pytest.raises(RuleError, match=r"rules.yaml:1: unsupported rule file version 2; this analyzer reads "
                                        r"version 1; write `version: 1`"):
        load(path)


def test_duplicate_ids_and_names(write):
    text = pack_text(rule(), rule(name="other-name"), rule(id="GPU002"))
    path = write(text)
    _, problems = validate_pack(path, facts=FACTS, scalars=SCALARS)
    messages = [str(p) for p in problems]
    assert any('duplicate rule id "GPU001" (first defined at' in m for m in messages)
    assert any('duplicate rule name "gpu-idle-gaps"' in m for m in messages)


def test_validate_collects_every_problem_and_load_names_the_count(write):
    path = write(pack_text(rule(severity="bad", category="nowhere", condition="sum(durration) > 0")))
    _, problems = validate_pack(path, facts=FACTS, scalars=SCALARS)
    assert len(problems) == 3
    with pytest.raises(RuleError, match=r"\(2 more problem\(s\): run `analyze rules validate"):
        load(path)


def test_duplicate_yaml_key_is_an_error(write):
    text = pack_text(rule()).replace("  title:", "  severity: info\n  title:", 1)
    path = write(text)
    with pytest.raises(RuleError, match="duplicate key 'severity'"):
        load(path)


def test_invalid_yaml_names_the_line(write):
    path = write("version: 1\nrules:\n  - id: [unclosed\n")
    with pytest.raises(RuleError, match=r"rules.yaml:\d+: invalid YAML"):
        load(path)


def test_folder_of_rule_files_is_one_pack(write):
    write(pack_text(rule()), "a.yaml")
    path = write(pack_text(rule(id="GPU002", name="gpu-idle-gaps-2")), "b.yaml")
    pack = load(path.parent)
    assert [r.id for r in pack.rules] == ["GPU001", "GPU002"]


def test_trace_scope_group_by_and_fact_functions(write):
    text = pack_text(rule(
        id="SYN001", name="stream-syncs", scope="nvtx_range", source="syncs", group_by=["nvtx_path"],
        parameters=None, where=None, let={"n": "count()", "kernels": 'fact_count("kernels")'},
        condition="n > 3", impact=None, evidence=None, message="{{ n }} syncs in {{ nvtx_path }}",
    ))
    r = load(write(text)).rules[0]
    assert r.requires == ("syncs", "kernels")
