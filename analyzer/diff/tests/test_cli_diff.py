"""The ``analyze diff`` command: exit codes, formats, JSON baselines, one-line errors on bad input."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from analyzer.cli import main
from analyzer.testing import real_trace

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"


def run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """JSON reports of the demo pair, written by the CLI as CI would keep them."""
    out = tmp_path_factory.mktemp("reports")
    paths = {}
    for name in ("dataloader_starved", "dataloader_starved_fixed", "small_training_ctx128"):
        target = out / f"{name}.json"
        assert main([str(real_trace(name)), "--format", "json", "-o", str(target), "-q"]) == 0
        paths[name] = target
    return paths


def test_traces_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, head = DATA / "dataloader_starved.sqlite.xz", DATA / "dataloader_starved_fixed.sqlite.xz"
    code, out, _ = run(["diff", base, head, "-o", tmp_path / "d.html", "--fail-on-regression", "5%"], capsys)
    assert code == 0
    assert out.startswith("HEAD is 55% faster per step (30.3 -> 13.6 ms") and "report:" in out
    html = (tmp_path / "d.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "<script" not in html.lower()


def test_json_baseline_and_exit_codes(reports: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    fast, slow = reports["dataloader_starved_fixed"], reports["dataloader_starved"]
    code, out, _ = run(["diff", fast, slow, "-o", tmp_path / "d.json", "--fail-on-regression", "5"], capsys)
    assert code == 1 and "slower" in out
    doc = json.loads((tmp_path / "d.json").read_text())
    assert doc["kind"] == "diff" and doc["regression"] is True
    assert list(doc["step"])[:6] == ["status", "significant", "base_median_ns", "head_median_ns", "change_pct",
                                     "ci_low_pct"]
    assert "gpu-idle-gaps" in doc["findings"]["new"] and doc["base"]["input"] == "report"
    # no gate, or a gate above the slowdown: exit 0
    assert run(["diff", fast, slow, "-o", tmp_path / "d.md"], capsys)[0] == 0
    assert run(["diff", fast, slow, "-o", tmp_path / "d.md", "--fail-on-regression", "500%"], capsys)[0] == 0
    md = (tmp_path / "d.md").read_text()
    assert md.startswith("# GPU trace diff") and len(md) < 65_000
    # a trace against a JSON report
    code, out, _ = run(["diff", slow, DATA / "dataloader_starved_fixed.sqlite.xz", "-o", "-", "--format", "md"], capsys)
    assert code == 0 and "**Verdict:** HEAD is 55% faster" in out


def test_markdown_to_stdout_puts_the_verdict_on_stderr(reports: dict[str, Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["diff", reports["dataloader_starved"], reports["dataloader_starved_fixed"],
                          "--format", "md", "-o", "-"], capsys)
    assert code == 0 and out.startswith("# GPU trace diff") and err.startswith("HEAD is 55% faster")


def test_too_few_steps_never_fails_the_gate(reports: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    code, out, _ = run(["diff", reports["small_training_ctx128"], reports["dataloader_starved"],
                        "-o", tmp_path / "x.md", "--fail-on-regression", "1"], capsys)
    assert code == 0 and out.startswith("Too few steps to call a change")


def _one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


def test_bad_inputs_are_one_line_errors(reports: dict[str, Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    good = reports["dataloader_starved"]
    doc = json.loads(good.read_text())
    cases: dict[str, tuple[object, str]] = {}
    old = dict(doc, schema_version="1.0")
    del old["traces"][0]["baseline"]
    cases["old.json"] = (old, "schema 1.0, which has no per-step data")
    cases["newer.json"] = (dict(doc, schema_version="2.0"), "cannot read")
    cases["two.json"] = (dict(doc, traces=doc["traces"] * 2), "holds 2 traces")
    broken = json.loads(good.read_text())
    broken["traces"][0]["baseline"]["steps"]["durations_ns"] = ["12"]
    cases["broken.json"] = (broken, "durations_ns is not a list of whole numbers")
    rows = json.loads(good.read_text())
    rows["traces"][0]["baseline"]["kernels"]["rows"][0][4] = "a lot"
    cases["rows.json"] = (rows, "kernels.rows[0].total_ns has the wrong type")
    diff_doc = {"kind": "diff", "schema_version": "1.1", "tool": {"name": "gpu-trace-analyzer"}}
    cases["diff.json"] = (diff_doc, "is a diff report")
    for name, (content, expected) in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(content))
        line = _one_line_error(*run(["diff", path, good, "-o", tmp_path / "x.md"], capsys)[::2])
        assert expected in line and name in line, line
    huge = tmp_path / "huge.json"  # valid JSON that Python's int() refuses: was an internal error (exit 3)
    good_text = good.read_text()
    huge.write_text(good_text.replace('"traces":', '"x": ' + "9" * 5000 + ', "traces":', 1))
    line = _one_line_error(*run(["diff", huge, good, "-o", tmp_path / "x.md"], capsys)[::2])
    assert "huge.json: holds a value no report of this analyzer has" in line, line
    truncated = tmp_path / "cut.json"
    truncated.write_text(good.read_text()[:5000])
    assert "not valid JSON" in _one_line_error(*run(["diff", good, truncated, "-o", tmp_path / "x.md"], capsys)[::2])
    assert "no such file" in _one_line_error(*run(["diff", good, tmp_path / "nope.json"], capsys)[::2])
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    assert "not a trace this analyzer reads" in _one_line_error(*run(["diff", text, good], capsys)[::2])
    bad_pct = _one_line_error(*run(["diff", good, good, "--fail-on-regression", "lots"], capsys)[::2])
    assert "not a percentage" in bad_pct


def test_inputs_are_not_modified(reports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = reports["dataloader_starved"]
    before = (base.read_bytes(), os.stat(base).st_mtime_ns, sorted(p.name for p in base.parent.iterdir()))
    run(["diff", base, DATA / "dataloader_starved_fixed.sqlite.xz", "-o", tmp_path / "x.json"], capsys)
    after = (base.read_bytes(), os.stat(base).st_mtime_ns, sorted(p.name for p in base.parent.iterdir()))
    assert before == after


@pytest.fixture(scope="module")
def accepted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The accepted-findings file a team writes on main (here: from the starved loader's trace)."""
    out = tmp_path_factory.mktemp("accepted")
    path = out / "accepted.yaml"
    code = main([str(real_trace("dataloader_starved")), "--write-accepted", str(path), "--format", "json",
                 "-o", str(out / "x.json"), "-q"])
    assert code == 0 and path.exists()
    return path


def test_accepted_findings_file(reports: dict[str, Path], accepted: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--accepted FILE`` (issue 19's format): findings the team accepted are not news in the verdict;
    a slower step still fails the gate; one grown past its limit counts again."""
    import yaml

    fast, slow = reports["dataloader_starved_fixed"], reports["dataloader_starved"]
    code, out, _ = run(["diff", fast, slow, "-o", tmp_path / "plain.json"], capsys)
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert {"gpu-idle-gaps", "pageable-memcpy"} <= set(plain["findings"]["new"]) and "new: " in plain["verdict"]

    code, out, _ = run(["diff", fast, slow, "-o", tmp_path / "d.json", "--accepted", accepted,
                        "--fail-on-regression", "5"], capsys)
    assert code == 1  # accepting findings never hides a slower step
    doc = json.loads((tmp_path / "d.json").read_text())
    details = {d["rule"]: d for d in doc["findings"]["details"]}
    for rule in ("gpu-idle-gaps", "pageable-memcpy", "low-gpu-utilization"):
        assert details[rule]["status"] == "new" and details[rule]["accepted"], details[rule]
        assert details[rule]["accepted_count"] == details[rule]["head_count"] and details[rule]["grown_count"] == 0
    assert doc["verdict"].startswith("HEAD is 2.2x slower per step") and "new: " not in doc["verdict"]
    assert doc["settings"]["accepted_file"] == str(accepted)
    assert any(n.startswith(f"accepted findings from {accepted}: ") and "gpu-idle-gaps" in n for n in doc["notes"])
    assert f"note: accepted findings from {accepted}" in out
    run(["diff", fast, slow, "-o", tmp_path / "d.md", "--accepted", accepted], capsys)
    assert "new (accepted)" in (tmp_path / "d.md").read_text()

    # an entry recorded with a tenth of today's impact: the finding grew 10x, past 1.5x, and counts again
    data = yaml.safe_load(accepted.read_text())
    for entry in data["accepted"]:
        if entry["rule"] == "gpu-idle-gaps":
            entry["impact_ms"] = round(entry["impact_ms"] / 10, 3)
    grown = tmp_path / "grown.yaml"
    grown.write_text(yaml.safe_dump(data, sort_keys=False))
    run(["diff", fast, slow, "-o", tmp_path / "g.json", "--accepted", grown], capsys)
    doc = json.loads((tmp_path / "g.json").read_text())
    gaps = next(d for d in doc["findings"]["details"] if d["rule"] == "gpu-idle-gaps")
    assert not gaps["accepted"] and gaps["grown_count"] >= 1
    assert "new: gpu-idle-gaps" in doc["verdict"] and "pageable-memcpy" not in doc["verdict"]
    assert any("counted again: gpu-idle-gaps" in n for n in doc["notes"])
    # ... unless the growth allowed is larger
    run(["diff", fast, slow, "-o", tmp_path / "g2.json", "--accepted", grown, "--accepted-growth", "20"], capsys)
    assert "new: " not in json.loads((tmp_path / "g2.json").read_text())["verdict"]


def test_accepted_file_from_the_project_configuration(reports: dict[str, Path], accepted: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``accepted`` in ``[tool.gpu-trace-analyzer.diff]`` (or the shared table) is diff's --accepted."""
    project = tmp_path / "project"
    (project / ".gpu").mkdir(parents=True)
    (project / ".gpu" / "accepted.yaml").write_text(accepted.read_text())
    (project / "pyproject.toml").write_text('[tool.gpu-trace-analyzer.diff]\naccepted = ".gpu/accepted.yaml"\n')
    monkeypatch.chdir(project)
    fast, slow = reports["dataloader_starved_fixed"], reports["dataloader_starved"]
    run(["diff", fast, slow, "-o", tmp_path / "c.json"], capsys)
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["settings"]["accepted_file"] and "new: " not in doc["verdict"]
    run(["diff", fast, slow, "-o", tmp_path / "i.json", "--isolated"], capsys)
    verdict = json.loads((tmp_path / "i.json").read_text())["verdict"]
    assert "new: " in verdict and "gpu-idle-gaps" in verdict.split("new: ")[1]


def test_bad_accepted_file_is_a_one_line_error_before_any_trace_is_read(
        reports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "accepted.yaml"
    bad.write_text("version: 1\naccepted:\n  - rule: gpu-idle-gaps\n    scope: {kind: trace}\n    fingerprint: 0123\n")
    missing_trace = tmp_path / "nope.sqlite"  # never reached: the file is checked first
    line = _one_line_error(*run(["diff", reports["dataloader_starved"], missing_trace, "--accepted", bad], capsys)[::2])
    assert "accepted.yaml:5" in line and "fingerprint" in line, line
    line = _one_line_error(*run(["diff", reports["dataloader_starved"], missing_trace, "--accepted",
                                 tmp_path / "none.yaml"], capsys)[::2])
    assert "no such accepted-findings file" in line, line


def test_default_report_name_of_a_glob_has_no_wildcards() -> None:
    from analyzer.diff.cli import _targets

    [(path, fmt)] = _targets((), None, Path("main/ddp_rank*.sqlite.xz"), Path("pr/ddp_rank?.sqlite"))
    assert str(path) == "reports/diff-ddp_rank-ddp_rank.html" and fmt == "html"
