"""The Python API (analyzer.analyze): the README's example runs as written, and the API gives what the
command gives on the same real trace (findings, verdict, facts, the three renderings)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

import analyzer
from analyzer.facts import UnknownFactError
from analyzer.pipeline import AnalysisOptions, analyze_paths
from analyzer.reports import build_report, render

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "tests" / "data" / "dataloader_starved.sqlite.xz"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def readme_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## From Python: `analyzer.analyze`", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def test_readme_example_runs_as_written(monkeypatch):
    monkeypatch.chdir(REPO)  # the example names the committed trace relative to the checkout
    out = io.StringIO()
    scope: dict[str, object] = {}
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    result = scope["result"]
    printed = out.getvalue().splitlines()
    assert printed[0] == result.verdict and "load_batch" in printed[0]
    assert printed[1].startswith(f"{result.findings[0].id} {result.findings[0].rule} ")
    assert scope["markdown"].startswith("# GPU trace diagnosis: dataloader\\_starved.sqlite.xz")
    assert any(line.endswith("...") and "facts:" in line for line in printed)


def test_the_api_gives_what_the_command_gives():
    """Same findings and byte-identical renderings as the CLI's path (analyze_paths + build_report)."""
    result = analyzer.analyze(str(TRACE), created=CREATED)
    (reference,) = analyze_paths([TRACE], AnalysisOptions())
    report = build_report([reference], created=CREATED)
    assert [(f.rule, f.impact_ns) for f in result.findings] == [(f.rule, f.impact_ns) for f in reference.findings]
    assert result.verdict == report.verdict
    assert result.to_markdown() == render(report, "md")
    assert result.to_html() == render(report, "html")
    assert json.loads(result.to_json())["traces"][0]["findings"] == json.loads(render(report, "json"))["traces"][0]["findings"]
    gaps = result.fact("gpu_gaps")
    assert len(gaps) and (gaps["duration"] > 0).all()
    assert result.facts["gpu_busy"].equals(result.fact("gpu_busy"))
    assert "gpu_gaps" in set(result.facts)


def test_unknown_fact_is_its_own_error_not_a_key_error():
    result = analyzer.analyze(TRACE, rules="default")
    with pytest.raises(UnknownFactError, match="unknown fact 'gpu_idle_gap'.*gpu_gaps") as err:
        result.fact("gpu_idle_gap")
    assert not isinstance(err.value, KeyError)
    with pytest.raises(IndexError):
        result.fact("gpu_gaps", trace=1)


def test_bad_input_raises_the_cli_error(tmp_path):
    from analyzer.errors import InputError

    with pytest.raises(InputError, match="no such file"):
        analyzer.analyze(tmp_path / "missing.sqlite")
    assert not os.listdir(tmp_path)
