"""The team setup of docs/writing-rules.md and the README, end to end on real traces: a pack that extends
the built-in one with a rule of its own, rules switched off by the project configuration and by
``--ignore``, ``analyze config``, and accepted findings as a CI gate."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from analyzer.cli import main

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
STARVED = DATA / "dataloader_starved.sqlite.xz"
HOST_SYNC = DATA / "host_sync.sqlite.xz"
HOST_SYNC_FIXED = DATA / "host_sync_fixed.sqlite.xz"

TEAM_PACK = """\
version: 1
extends: default                  # the built-in pack, kept in sync by the analyzer
disable: [small-grid]             # not actionable for us
override:
  gpu-idle-gaps:
    severity: error
    parameters: {min_gap: 2ms}
rules:
  - id: TEAM001
    name: sync-heavy-ranges
    title: NVTX ranges that synchronize with the GPU several times per instance
    category: sync
    severity: warning
    scope: nvtx_range
    group_by: [nvtx_range]        # one finding per range name, over all its instances
    source: sync_calls
    parameters:
      max_per_range:
        default: 4
        unit: count
        doc: blocking synchronizations one range instance may make
    where: blocking
    let:
      calls: count()
      per_range: calls / nunique(nvtx_id)
      blocked_ns: sum(duration)
    condition: per_range > max_per_range
    impact: blocked_ns
    message: "{{ nvtx_path }} synchronizes {{ per_range | round(1) }} times per instance ({{ calls | num }} calls)"
    what: The host waits for the GPU several times inside one NVTX range instance.
    why: Each synchronization drains the GPU's queue.
    fix: Keep values on the GPU until the end of the step; read them once.
"""


@pytest.fixture()
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository checkout as the working directory: the team pack under ``.gpu/``."""
    (tmp_path / ".gpu").mkdir()
    (tmp_path / ".gpu" / "team.yaml").write_text(TEAM_PACK)
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def findings(path: Path) -> dict[str, dict]:
    [trace] = json.loads(path.read_text())["traces"]
    return {f["rule"]: f for f in trace["findings"]}


def test_extends_default_plus_a_rule_runs_both(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = project / "r.json"
    code, _, err = run(capsys, HOST_SYNC, "--rules", ".gpu/team.yaml", "-o", out, "-q")
    assert code == 0, err
    fired = findings(out)
    # the built-in rules still run...
    assert {"host-sync-in-loop", "sync-memcpy", "fp32-gemm-no-tensor-cores"} <= set(fired)
    # ...and the team's own rule fires on the loop that calls .item() per micro-batch
    team = fired["sync-heavy-ranges"]
    assert team["id"] == "TEAM001" and team["scope"] == {"kind": "nvtx_range", "nvtx_path": "host_check"}
    assert "host_check synchronizes 5.0 times per instance" in team["message"]
    # the fixed twin keeps values on the GPU: silent
    code, _, _ = run(capsys, HOST_SYNC_FIXED, "--rules", ".gpu/team.yaml", "-o", out, "-q")
    assert code == 0 and "sync-heavy-ranges" not in findings(out) and "small-grid" not in findings(out)
    # the report names both pack files and what the pack switched off
    label = json.loads(out.read_text())["traces"][0]["info"]["rules_file"]
    assert label == "built-in default pack (rules/default.yaml) + .gpu/team.yaml; 1 rule switched off: small-grid"


def test_override_changes_severity_and_parameter(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = project / "r.json"
    run(capsys, STARVED, "-o", out, "-q", "--isolated")
    before = findings(out)["gpu-idle-gaps"]
    code, _, _ = run(capsys, STARVED, "--rules", ".gpu/team.yaml", "-o", out, "-q", "--isolated",
                     "--fail-on", "error")
    after = findings(out)["gpu-idle-gaps"]
    assert before["severity"] == "warning" and after["severity"] == "error"
    assert code == 1  # the team made idle gaps an error: the gate fails on them
    # the starved loop's gaps are 16-20 ms: a 2 ms minimum keeps all 12
    assert after["evidence"]["total_rows"] == before["evidence"]["total_rows"] == 12


def test_pyproject_and_ignore_switch_rules_off(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "trainer"

        [tool.gpu-trace-analyzer]
        rules = ["default", ".gpu/team.yaml"]
        ignore = ["gpu-idle-gaps", "KRN002"]
        fail-on = "warning"
        format = "json"
        """))
    (project / ".gpu" / "team.yaml").write_text(TEAM_PACK.replace("extends: default", "extends: []"))
    out = project / "r.json"
    # run from a sub-folder: the configuration is found upwards, its paths are relative to it
    os.chdir(project / "src")
    code, _, err = run(capsys, STARVED, "-o", out)
    assert code == 1, err  # fail-on = "warning" from the file: pageable-memcpy and low utilization remain
    fired = findings(out)
    assert "gpu-idle-gaps" not in fired and "elementwise-dominance" not in fired
    assert {"low-gpu-utilization", "pageable-memcpy"} <= set(fired)
    # the command line adds to the file's ignore, and wins for single values
    code, _, _ = run(capsys, STARVED, "-o", out, "--ignore", "utilization,transfer", "--fail-on", "error")
    assert code == 0 and not {"gpu-idle-gaps", "low-gpu-utilization", "pageable-memcpy"} & set(findings(out))
    # --isolated: no configuration, every rule of the built-in pack
    code, _, _ = run(capsys, STARVED, "-o", out, "--isolated")
    assert code == 0 and {"gpu-idle-gaps", "elementwise-dominance"} <= set(findings(out))


def test_analyze_config_says_where_each_setting_came_from(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "pyproject.toml").write_text(
        '[tool.gpu-trace-analyzer]\nrules = [".gpu/team.yaml"]\nignore = ["tiny-kernels"]\n'
        'set = ["low-gpu-utilization.max_busy=30%"]\nfail-on = "warning"\n')
    code, out, err = run(capsys, "config", "--fail-on", "error", "--ignore", "NCU")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "configuration: pyproject.toml [tool.gpu-trace-analyzer] (found from the working directory)"
    row = {tuple(line.split()[:1]) + (line.split()[-1],): line for line in lines if line[:1].isalpha()}
    assert ("rules", "pyproject.toml:2") in row and ("ignore", "pyproject.toml:3") in row
    assert ("ignore", "line") in row and ("fail-on", "line") in row  # "command line"
    assert ("set", "pyproject.toml:4") in row and ("window", "default") in row
    assert "built-in default pack (rules/default.yaml) + .gpu/team.yaml" in out
    assert "off  LNC001   tiny-kernels" in out and "ignore tiny-kernels (pyproject.toml:3)" in out
    assert "off  LNC002   small-grid" in out and "disable small-grid (.gpu/team.yaml:3)" in out
    assert "off  NCU004" in out and "ignore NCU (--ignore)" in out
    assert "low-gpu-utilization.max_busy = 30% (default 50%)" in out
    assert "gpu-idle-gaps.min_gap = 2ms (default 1ms)" in out


@pytest.mark.parametrize("text, expected", [
    ('[tool.gpu-trace-analyzer]\nfail-on = "warn"\n', "pyproject.toml:2: fail-on: 'warn' is not one of"),
    ('[tool.gpu-trace-analyzer]\n\nignroe = ["x"]\n', 'pyproject.toml:3: unknown key "ignroe"; did you mean "ignore"?'),
    ('[tool.gpu-trace-analyzer]\nignore = ["tiny-kernal"]\n',
     'pyproject.toml:2: "tiny-kernal" is not a rule name, id or category of this pack; did you mean "tiny-kernels"?'),
    ('[tool.gpu-trace-analyzer]\nset = ["gpu-idle-gaps.min_gap=fast"]\n',
     "pyproject.toml:2: set gpu-idle-gaps.min_gap=fast: cannot read 'fast' as a duration"),
    ('[tool.gpu-trace-analyzer]\nrules = ["nope.yaml"]\n', 'rule pack "'),
    ('[tool.gpu-trace-analyzer\n', "pyproject.toml:1: invalid TOML"),
])
def test_configuration_errors_are_one_line_with_file_and_line(
    project: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    (project / "pyproject.toml").write_text(text)
    for argv in ([STARVED, "-o", project / "r.md"], ["config"]):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert expected in err, err
    assert not (project / "r.md").exists()  # nothing is read or written before the settings are good


# -- accepted findings: a gate that fails on new problems only -------------------------------------------

STARVED_FIXED = DATA / "dataloader_starved_fixed.sqlite.xz"


def test_accepted_findings_gate_on_new_problems_only(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    accepted = project / ".gpu" / "accepted.yaml"
    # on main: record what the (fixed) loader's run reports today
    code, out, _ = run(capsys, STARVED_FIXED, "--isolated", "--write-accepted", accepted, "-o", project / "r.json")
    recorded = len(findings(project / "r.json"))  # elementwise-dominance and the info notes
    assert code == 0 and f"accepted: wrote {recorded} findings to" in out and accepted.is_file()
    # CI on the same program: passes, every finding shown as accepted in all three formats
    for fmt in ("md", "html", "json"):
        target = project / f"same.{fmt}"
        code, out, _ = run(capsys, STARVED_FIXED, "--isolated", "--accepted", accepted, "--fail-on", "info",
                           "-o", target)
        assert code == 0, out
        assert f"accepted: {recorded} findings accepted by" in out
    assert "| warning (accepted) | KRN002 elementwise-dominance |" in (project / "same.md").read_text()
    assert "No new problems found" in (project / "same.md").read_text()
    html = (project / "same.html").read_text()
    assert html.count('<span class="badge acc-accepted">accepted</span>') == 2 * recorded  # table + article
    for f in findings(project / "same.json").values():
        assert f["accepted"]["counts"] is False and f["accepted"]["file"] == ".gpu/accepted.yaml"
        assert len(f["fingerprint"]) == 16
    summary = json.loads((project / "same.json").read_text())["traces"][0]["summary"]
    assert summary["accepted"] == recorded and summary["problems"] == 0
    # a pull request that brings the starved loader back: new problems fail the gate...
    target = project / "pr.json"
    code, out, _ = run(capsys, STARVED, "--isolated", "--accepted", accepted, "--fail-on", "warning", "-o", target)
    assert code == 1
    fired = findings(target)
    new = {name for name, f in fired.items() if f["accepted"] is None and f["severity"] != "info"}
    assert new == {"gpu-idle-gaps", "host-work-in-loop", "low-gpu-utilization", "pageable-memcpy"}
    assert fired["elementwise-dominance"]["accepted"]["counts"] is False  # 41.4 ms then and now
    assert "2 new problems worth" in out and "1 accepted finding not counted" in out
    # ...and the same run without the accepted file fails as well (the gate is the file, not the trace)
    assert run(capsys, STARVED, "--isolated", "--fail-on", "warning", "-o", target)[0] == 1


def test_an_accepted_finding_that_grew_counts_again(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    accepted = project / "accepted.yaml"
    run(capsys, DATA / "alloc_churn_fixed.sqlite.xz", "--isolated", "--write-accepted", accepted, "-q",
        "-o", project / "r.md")
    # allocations come back into the loop: alloc-in-loop is new (ignored here), and the idle gaps the
    # fixed run had (25.8 ms) grew 28x: they count again
    argv = [DATA / "alloc_churn.sqlite.xz", "--isolated", "--accepted", accepted, "--ignore", "alloc-in-loop",
            "--fail-on", "warning", "-o", project / "r.md"]
    code, out, _ = run(capsys, *argv)
    assert code == 1 and "2 grew past their acceptance" in out
    md = (project / "r.md").read_text()
    assert "| **warning** (grew past acceptance) (symptom) | GPU001 gpu-idle-gaps |" in md
    assert "its impact is now 28.6x that, more than the 1.5x allowed, so it counts again" in md
    # a team that tolerates more growth
    code, out, _ = run(capsys, *argv, "--accepted-growth", "50")
    assert code == 0 and "No new problems found" in out


def test_accepted_file_from_the_project_configuration(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, STARVED, "--isolated", "--write-accepted", project / ".gpu" / "accepted.yaml", "-q",
        "-o", project / "r.json")
    (project / "pyproject.toml").write_text(
        '[tool.gpu-trace-analyzer]\naccepted = ".gpu/accepted.yaml"\nfail-on = "warning"\n')
    os.chdir(project / "src")
    code, out, _ = run(capsys, STARVED, "-o", project / "r.md")
    assert code == 0, out
    code, out, _ = run(capsys, "config")
    rows = [line.split() for line in out.splitlines()]
    assert code == 0 and ["accepted", str(project / ".gpu" / "accepted.yaml"), f"{project / 'pyproject.toml'}:2"] in rows
    entries = len(findings(project / "r.json"))
    assert f"{entries} entries; one counts again when its impact grows more than 1.5x" in out
    assert "gpu-idle-gaps [device 0]" in out
    # a broken entry stops the run before any trace is read, naming file and line
    path = project / ".gpu" / "accepted.yaml"
    path.write_text(path.read_text().replace("rule: gpu-idle-gaps", "rule: gpu-idle-gaps\n  reasn: x", 1))
    code, _, err = run(capsys, STARVED, "-o", project / "r2.md")
    assert code == 2 and 'unknown key "reasn"' in err and 'did you mean "reason"?' in err
    assert not (project / "r2.md").exists()


SECOND_RUNS = sorted(DATA.glob("*_run2.sqlite.xz"))


@pytest.mark.skipif(not SECOND_RUNS, reason="no second runs of a workload under tests/data yet (*_run2.sqlite.xz)")
@pytest.mark.parametrize("second", SECOND_RUNS, ids=lambda p: p.name.removesuffix("_run2.sqlite.xz"))
def test_fingerprints_survive_a_second_run_of_the_same_program(
    project: Path, capsys: pytest.CaptureFixture[str], second: Path
) -> None:
    """Two profiles of the same workload, same flags: the second run's findings are all accepted by the
    file written from the first, and none grew past 1.5x."""
    first = second.with_name(second.name.replace("_run2.sqlite.xz", ".sqlite.xz"))
    accepted = project / "accepted.yaml"
    run(capsys, first, "--isolated", "--write-accepted", accepted, "-q", "-o", project / "one.json")
    code, out, _ = run(capsys, second, "--isolated", "--accepted", accepted, "--fail-on", "info",
                       "-o", project / "two.json")
    one, two = findings(project / "one.json"), findings(project / "two.json")
    assert {f["fingerprint"] for f in one.values()} == {f["fingerprint"] for f in two.values()}
    assert code == 0, out


def test_the_accepted_file_is_read_once_per_run(project: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One orchestration: the accepted-findings file is read once, before any trace, and that reading is
    what marks the findings and what the summary line counts (was 2 readings, 3 with --no-job)."""
    import analyzer.accepted as acc

    accepted = project / ".gpu" / "accepted.yaml"
    code, out, _ = run(capsys, STARVED_FIXED, "--isolated", "--write-accepted", accepted, "-o", project / "r.json")
    assert code == 0 and accepted.is_file()
    reads: list[object] = []
    real = acc.load_accepted
    monkeypatch.setattr(acc, "load_accepted", lambda *a, **k: reads.append(a) or real(*a, **k))
    for extra in ((), ("--no-job",)):
        reads.clear()
        code, out, _ = run(capsys, STARVED_FIXED, "--isolated", "--accepted", accepted, *extra, "-o", project / "a.json")
        assert code == 0 and "findings accepted by" in out, out
        assert len(reads) == 1, (extra, reads)
