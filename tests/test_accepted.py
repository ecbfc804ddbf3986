"""Accepted findings: fingerprints that survive reruns, the file (written, read back, validated with file
and line), growth past the allowed factor, and how reports show it. The CI gate on real traces is in
tests/test_team_setup.py."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from analyzer.accepted import (
    DEFAULT_MAX_GROWTH,
    AcceptedEntry,
    AcceptedFindings,
    apply_accepted,
    load_accepted,
    step_count,
    unmatched,
    write_accepted,
)
from analyzer.errors import ConfigError
from analyzer.findings import Finding, Scope, Severity, fingerprint, stable_scope
from analyzer.pipeline import AnalysisOptions, analyze_paths
from analyzer.testing import DATA_DIR

MS = 1_000_000


def finding(rule: str = "gpu-idle-gaps", impact_ms: float | None = 10.0, **scope: object) -> Finding:
    return Finding(rule=rule, id="GPU001", severity=Severity.WARNING, title="t", message="m", category="utilization",
                   scope=Scope(**({"kind": "device", "device": 0} | scope)),  # type: ignore[arg-type]
                   impact_ns=None if impact_ms is None else int(impact_ms * MS), impact_pct=None)


@dataclass
class FakeWindow:
    duration_ns: int = 100 * MS
    steps: object = None


def test_fingerprint_ignores_counters_addresses_and_numbers_but_keeps_identity() -> None:
    a = Scope("nvtx_range", nvtx_path="step_3/micro_11/host_check")
    b = Scope("nvtx_range", nvtx_path="step_7/micro_2/host_check")
    assert fingerprint("r", a) == fingerprint("r", b)
    assert stable_scope(a) == {"kind": "nvtx_range", "nvtx_path": "step_#/micro_#/host_check"}
    assert fingerprint("r", a) != fingerprint("r", Scope("nvtx_range", nvtx_path="step_3/forward"))
    assert fingerprint("r", a) != fingerprint("other-rule", a)
    # kernel names keep their template numbers (distinct kernels) but not pointers or process ids
    k1 = Scope("kernel", kernel="sm80_xmma_gemm_f32f32_128x64 pid 123456 at 0x7f3a2b00")
    k2 = Scope("kernel", kernel="sm80_xmma_gemm_f32f32_128x64 pid 654321 at 0x55aa0000")
    assert fingerprint("r", k1) == fingerprint("r", k2)
    assert fingerprint("r", k1) != fingerprint("r", Scope("kernel", kernel="sm80_xmma_gemm_f32f32_64x64"))
    assert fingerprint("r", Scope("device", device=0)) != fingerprint("r", Scope("device", device=1))
    # the normalisation is idempotent: a file's stable scope gives the same fingerprint
    assert fingerprint("r", Scope(**stable_scope(k1))) == fingerprint("r", k1)
    # what the finding says (message, impact, evidence) is not part of it
    f = finding()
    assert replace(f, message="other", impact_ns=1, evidence=((1,),)).fingerprint == f.fingerprint


def test_fingerprints_survive_another_run_of_the_same_program() -> None:
    """Pathology and twin are the same program with one change: the findings both have, on the same
    scope, keep their fingerprints (elementwise-dominance, low-gpu-utilization on GPU 0)."""
    pairs = [("dataloader_starved", "elementwise-dominance"), ("alloc_churn", "low-gpu-utilization"),
             ("alloc_churn", "elementwise-dominance"), ("host_sync", "fp32-gemm-no-tensor-cores")]
    for name, rule in pairs:
        runs = analyze_paths([DATA_DIR / f"{name}.sqlite.xz", DATA_DIR / f"{name}_fixed.sqlite.xz"], AnalysisOptions())
        prints = [{f.fingerprint for f in a.findings if f.rule == rule} for a in runs]
        assert prints[0] and prints[0] == prints[1], (name, rule)


def test_write_then_read_back_keeps_reasons(tmp_path: Path) -> None:
    [analysis] = analyze_paths([DATA_DIR / "host_sync.sqlite.xz"], AnalysisOptions())
    path = tmp_path / ".gpu" / "accepted.yaml"
    count = write_accepted(path, [analysis])
    text = path.read_text()
    assert count == len({f.fingerprint for f in analysis.findings}) == 8  # launch-bound, fp32-gemm, tiny-kernels, host-sync, small-grid, sync-memcpy, low-util, setup
    assert text.startswith("# Accepted findings for gpu-trace-analyzer") and "version: 1" in text
    assert "scope: {kind: device, device: 0}" in text and "impact_ms: 29.694" in text  # host-sync-in-loop: waits, returns and 0.2 ms of refill
    accepted = load_accepted(path)
    assert set(accepted.entries) == {f.fingerprint for f in analysis.findings}
    entry = next(e for e in accepted.entries.values() if e.rule == "host-sync-in-loop")
    assert entry.impact_ns == 29_694_000 and entry.scope == {"kind": "trace"} and entry.reason == ""
    # the team writes its reasons; a rewrite keeps them (and a per-entry max-growth)
    path.write_text(text.replace("rule: host-sync-in-loop\n", "rule: host-sync-in-loop\n  max-growth: 3\n")
                    .replace("reason: ''", "reason: 'known: logging every micro-batch, see #123'", 1))
    before = load_accepted(path)
    write_accepted(path, [analysis], before)
    after = load_accepted(path)
    assert {e.fingerprint: (e.reason, e.max_growth) for e in after.entries.values()} == {
        e.fingerprint: (e.reason, e.max_growth) for e in before.entries.values()}
    assert after.entries[entry.fingerprint].max_growth == 3
    assert not list(tmp_path.joinpath(".gpu").glob(".accepted.yaml.*"))  # no temporary left behind


def test_growth_counts_again_past_the_factor_only() -> None:
    f = finding(impact_ms=20.0)
    entry = AcceptedEntry(rule=f.rule, scope=stable_scope(f.scope), fingerprint=f.fingerprint, impact_ns=10 * MS)
    accepted = AcceptedFindings("acc.yaml", {f.fingerprint: entry})
    [marked] = apply_accepted([f], accepted, FakeWindow())
    assert marked.acceptance is not None and marked.acceptance.growth == pytest.approx(2.0)
    assert marked.acceptance.counts and marked.counts  # 2x > 1.5x and +10 ms >= 1% of 100 ms
    [held] = apply_accepted([finding(impact_ms=14.0)], accepted, FakeWindow())
    assert not held.counts and held.acceptance is not None and not held.acceptance.counts
    # a per-entry limit wins over the file's
    loose = AcceptedFindings("acc.yaml", {f.fingerprint: replace(entry, max_growth=3.0)})
    assert not apply_accepted([f], loose, FakeWindow())[0].counts
    # a tiny impact doubling is noise (< 1% of the window)
    small = AcceptedFindings("acc.yaml", {f.fingerprint: replace(entry, impact_ns=100_000)})
    assert not apply_accepted([finding(impact_ms=0.3)], small, FakeWindow())[0].counts
    # more steps in this profile: the recorded impact is scaled per step before comparing
    per_step = AcceptedFindings("acc.yaml", {f.fingerprint: replace(entry, steps=10)})
    assert not apply_accepted([f], per_step, FakeWindow(steps=20))[0].counts
    assert apply_accepted([f], per_step, FakeWindow(steps=10))[0].counts
    assert step_count(FakeWindow(steps=type("S", (), {"starts": (1, 2, 3)})())) == 3
    # an unknown impact never grows; an unmatched finding is untouched; entries that matched nothing
    assert not apply_accepted([finding(impact_ms=None)], accepted, FakeWindow())[0].counts
    other = finding(rule="tiny-kernels")
    assert apply_accepted([other], accepted, FakeWindow())[0].acceptance is None
    assert unmatched(accepted, [other]) == [entry] and unmatched(accepted, [f]) == []
    assert DEFAULT_MAX_GROWTH == 1.5


@pytest.mark.parametrize("text, line, words", [
    ("version: 2\naccepted: []\n", 1, ["unsupported accepted-findings file version 2"]),
    ("version: 1\naccept: []\n", 2, ['unknown key "accept"', 'did you mean "accepted"?']),
    ("version: 1\naccepted:\n  - rule: gpu-idle-gaps\n    scope: {kind: device, devcie: 0}\n", 4,
     ['unknown key "devcie" in accepted[0].scope', 'did you mean "device"?']),
    ("version: 1\naccepted:\n  - rule: gpu-idle-gaps\n    scope: {kind: trace}\n    reasn: x\n", 5,
     ['unknown key "reasn"', 'did you mean "reason"?']),
    ("version: 1\naccepted:\n  - scope: {kind: trace}\n", 3, ["accepted[0] needs `rule:`"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {device: 0}\n", 4, ["needs `kind:`"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {kind: device, device: zero}\n", 4,
     ["scope.device must be a whole number"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {kind: trace}\n    fingerprint: 0123456789abcdef\n", 5,
     ["does not match its rule and scope", "delete the fingerprint line"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {kind: trace}\n    impact_ms: -3\n", 5,
     ["impact_ms must be a number >= 0"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {kind: trace}\n    max-growth: 0.5\n", 5,
     ["max-growth must be a number >= 1"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {kind: trace}\n  - rule: r\n    scope: {kind: trace}\n", 5,
     ["accepts the same finding as the entry at line 3"]),
    ("version: 1\naccepted: !!python/object/apply:os.system [echo]\n", 2, ["YAML tag not allowed"]),
    ("version: 1\naccepted: [\n", 3, ["invalid YAML"]),
])
def test_bad_files_name_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, line: int,
                                      words: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acc.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_accepted(tmp_path / "acc.yaml")
    message = str(err.value)
    assert message.startswith(f"acc.yaml:{line}: "), message
    assert all(w in message for w in words) and "\n" not in message, message


@pytest.mark.parametrize("text, words", [
    ("version: 1\naccepted: !!python/object/apply:os.system [echo]\n",
     ["YAML tag not allowed in an accepted-findings file", "an accepted-findings file is plain data"]),
    ("version: 1\naccepted: " + "[" * 50_000 + "]" * 50_000 + "\n",
     ["invalid YAML: lists or mappings nested too deeply", "an accepted-findings file nests a few levels"]),
    ("version: 1\naccepted:\n  - rule: r\n    scope: {kind: trace}\n    impact_ms: " + "9" * 5000 + "\n",
     ["4300 digits", "numbers in an accepted-findings file are short"]),
])
def test_hostile_yaml_is_named_as_the_file_it_is(tmp_path: Path, text: str, words: list[str]) -> None:
    """The safe YAML reader's messages name the kind of file read (they said "a accepted-findings file",
    "numbers in a rule file" for an accepted-findings file and "invalid YAML: RecursionError")."""
    (tmp_path / "acc.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_accepted(tmp_path / "acc.yaml")
    message = str(err.value)
    assert all(w in message for w in words) and "\n" not in message and "rule file" not in message, message


def test_a_hand_written_entry_needs_no_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "acc.yaml"
    path.write_text("version: 1\naccepted:\n  - rule: gpu-idle-gaps\n    scope: {kind: device, device: 0}\n"
                    "    reason: the loader is rewritten in Q3\n")
    accepted = load_accepted(path)
    f = finding()
    assert list(accepted.entries) == [f.fingerprint]
    [marked] = apply_accepted([f], accepted, FakeWindow())
    assert not marked.counts and marked.acceptance is not None
    assert marked.acceptance.note() == f"accepted in {accepted.path}: the loader is rewritten in Q3"
    (tmp_path / "empty.yaml").write_text("version: 1\n")
    assert len(load_accepted(tmp_path / "empty.yaml")) == 0
    with pytest.raises(ConfigError, match="no such accepted-findings file.*--write-accepted"):
        load_accepted(tmp_path / "missing.yaml")
