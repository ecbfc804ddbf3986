"""``analyze rules list | explain | validate | test`` and the rule-test runner."""
from __future__ import annotations

import lzma
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.commands import rules as rules_cli
from analyzer.findings import Finding, Scope, Severity
from analyzer.rules import load_pack
from analyzer.rules.testing import decompress, run_rule_tests

from .conftest import FACTS, SCALARS, pack_text, rule


@pytest.fixture(autouse=True)
def _test_facts(monkeypatch):
    """The CLI loads packs against the registry: point it at the test facts."""
    from analyzer.rules import loader

    monkeypatch.setattr(loader, "all_specs", lambda: dict(FACTS))
    monkeypatch.setattr(loader, "known_scalars", lambda: dict.fromkeys(SCALARS, ""))


def invoke(*args: str):
    return CliRunner().invoke(rules_cli.rules, list(args))


def test_list_and_explain(write):
    path = write(pack_text(rule()))
    result = invoke("list", "--rules", str(path))
    assert result.exit_code == 0
    assert "GPU001  gpu-idle-gaps  on     warning   utilization  device  GPU idle between operations" in result.output
    result = invoke("explain", "GPU001", "--rules", str(path))
    assert result.exit_code == 0
    assert "min_gap = 1ms (duration): shorter gaps are launch latency" in result.output
    assert "condition" in result.output.lower() and "share >= min_share" in result.output
    result = invoke("explain", "gpu-idle-gap", "--rules", str(path))
    assert result.exit_code == 2 and 'did you mean "gpu-idle-gaps"?' in result.output


def test_validate_reports_each_problem(write):
    good = write(pack_text(rule()), "good.yaml")
    bad = write(pack_text(rule(severity="fatal", condition="sum(durration) > 0")), "bad.yaml")
    result = invoke("validate", str(good))
    assert result.exit_code == 0 and "good.yaml: OK (1 rules)" in result.output
    result = invoke("validate", str(good), str(bad))
    assert result.exit_code == 2
    assert "unknown severity 'fatal'" in result.output
    assert 'unknown column "durration" in GPU001.condition; did you mean "duration"?' in result.output
    assert "Traceback" not in result.output


def test_validate_hostile_file_is_a_clean_error(write):
    path = write('version: 1\nrules: !!python/object/apply:os.system ["echo pwned"]\n')
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "YAML tag not allowed" in result.output and "pwned" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _fake_analyze(fired_on: set[str]):
    calls = []

    def analyze(path, pack, sets, window):
        calls.append((path.name, tuple(r.id for r in pack.rules), tuple(sets)))
        if path.name not in fired_on:
            return []
        return [Finding(rule=r.name, id=r.id, severity=Severity.WARNING, title=r.title, message="m",
                        category=r.category, scope=Scope("trace"), impact_ns=None, impact_pct=None)
                for r in pack.rules]

    return analyze, calls


def test_rule_tests_group_runs_by_trace(write, tmp_path):
    (tmp_path / "starved.sqlite").write_bytes(b"")
    (tmp_path / "fixed.sqlite").write_bytes(b"")
    tests = [{"trace": "starved.sqlite", "expect": "fire"}, {"trace": "fixed.sqlite", "expect": "silent"},
             {"trace": "fixed.sqlite", "expect": "fire", "set": ["gpu-idle-gaps.min_gap=1us"]},
             {"trace": "absent.sqlite", "expect": "fire"}]
    other = rule(id="GPU002", name="other", tests=[{"trace": "starved.sqlite", "expect": "silent"}])
    pack = load_pack(write(pack_text(rule(tests=tests), other)), facts=FACTS, scalars=SCALARS)
    analyze, calls = _fake_analyze({"starved.sqlite"})
    results = run_rule_tests(pack, analyze=analyze)
    assert [(r.id, r.trace, r.outcome) for r in results] == [
        ("GPU001", "absent.sqlite", "missing"),
        ("GPU001", "starved.sqlite", "pass"),
        ("GPU001", "fixed.sqlite", "pass"),
        ("GPU001", "fixed.sqlite", "fail"),
        ("GPU002", "starved.sqlite", "fail"),
    ]
    assert ("starved.sqlite", ("GPU001", "GPU002"), ()) in calls  # one analysis for both rules
    assert len(calls) == 3
    assert run_rule_tests(pack, ["GPU002"], analyze=analyze)[0].detail == "expected silent, rule was fire"


def test_rules_test_command_exit_codes(write, tmp_path, monkeypatch):
    (tmp_path / "starved.sqlite").write_bytes(b"")
    path = write(pack_text(rule(tests=[{"trace": "starved.sqlite", "expect": "fire"}])))
    analyze, _ = _fake_analyze({"starved.sqlite"})
    monkeypatch.setattr("analyzer.commands.rules.default_analyze", analyze)
    result = invoke("test", "--rules", str(path))
    assert result.exit_code == 0, result.output
    assert "PASS    GPU001  gpu-idle-gaps  fire    starved.sqlite" in result.output
    assert "1 passed, 0 failed" in result.output
    analyze, _ = _fake_analyze(set())
    monkeypatch.setattr("analyzer.commands.rules.default_analyze", analyze)
    result = invoke("test", "--rules", str(path), "gpu-idle-gaps")
    assert result.exit_code == 1 and "FAIL" in result.output


def test_decompress_xz(tmp_path):
    source = tmp_path / "t.sqlite.xz"
    with lzma.open(source, "wb") as out:
        out.write(b"SQLite format 3\x00" + b"\x00" * 100)
    target_dir = tmp_path / "out"
    target_dir.mkdir()
    target = decompress(source, target_dir)
    assert target == target_dir / "t.sqlite" and target.read_bytes().startswith(b"SQLite format 3")
    plain = tmp_path / "plain.sqlite"
    assert decompress(plain, target_dir) == plain
    assert isinstance(target, Path)


def test_builtin_cases_without_their_traces_are_skipped(write, tmp_path, monkeypatch):
    """An installed package has the built-in pack but not the repository's tests/data: its cases are
    skipped with one line saying where the traces are (exit 0), a user pack's missing trace still fails,
    and --data points at a folder holding them."""
    from analyzer.rules import loader

    builtin = write(pack_text(rule(tests=[{"trace": "data/starved.sqlite", "expect": "fire"}])), "builtin.yaml")
    monkeypatch.setattr(loader, "BUILTIN_PACKS", {"default": builtin})
    monkeypatch.chdir(tmp_path)
    analyze, calls = _fake_analyze({"starved.sqlite"})
    monkeypatch.setattr("analyzer.commands.rules.default_analyze", analyze)
    pack = load_pack(builtin, facts=FACTS, scalars=SCALARS)
    assert [r.outcome for r in run_rule_tests(pack, analyze=analyze)] == ["skipped"]
    result = invoke("test", "--rules", str(builtin))
    assert result.exit_code == 0, result.output
    assert "0 passed, 0 failed, 1 skipped" in result.output and "RESULT" not in result.output
    assert "traces (data/starved.sqlite) that ship with the source repository" in result.output
    assert "--data CLONE" in result.output and not calls
    clone = tmp_path / "clone"
    (clone / "data").mkdir(parents=True)
    (clone / "data" / "starved.sqlite").write_bytes(b"")
    result = invoke("test", "--rules", str(builtin), "--data", str(clone))
    assert result.exit_code == 0 and "1 passed, 0 failed" in result.output and "skipped" not in result.output
    assert calls and calls[0][0] == "starved.sqlite"
    user = write(pack_text(rule(tests=[{"trace": "data/starved.sqlite", "expect": "fire"}])), "mine.yaml")
    result = invoke("test", "--rules", str(user))
    assert result.exit_code == 1 and "MISSING" in result.output and "trace file not found" in result.output
