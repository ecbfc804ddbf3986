"""``make docs`` output is what the code gives today: the README's example output, reports/demo.* and
docs/rules.md (tests/generated_docs.py writes them; this fails with a diff when one drifts)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

import generated_docs  # noqa: E402


def test_generated_docs_match_the_code(capsys):
    if not generated_docs.DEMO_TRACE.is_file():
        pytest.skip("the demo trace is not in this checkout")
    assert generated_docs.main(["--check"]) == 0, capsys.readouterr().out


def test_demo_report_is_the_reference_report():
    """reports/demo.md is the demo trace's reference report (tests/test_reference_reports.py checks those
    against the code in every format)."""
    ref = TESTS / "data" / "reference-reports" / "dataloader_starved.md"
    demo = TESTS.parent / "reports" / "demo.md"
    if not ref.is_file():
        pytest.skip("no reference reports in this checkout")
    assert demo.read_text(encoding="utf-8") == ref.read_text(encoding="utf-8")


def test_the_config_example_is_filled():
    page = (TESTS.parent / "docs" / "writing-rules.md").read_text(encoding="utf-8")
    block = next(m for m in generated_docs.BLOCK.finditer(page) if m.group("name") == "config-example")
    assert "$ analyze config --ignore NCU" in block.group("body") and "rule pack:" in block.group("body")


def test_every_readme_block_is_filled():
    readme = (TESTS.parent / "README.md").read_text(encoding="utf-8")
    blocks = list(generated_docs.BLOCK.finditer(readme))
    assert {m.group("name") for m in blocks} == {"demo-terminal", "demo-markdown"}
    assert all(m.group("body").strip() for m in blocks)


def test_make_demo_writes_an_ignored_path():
    import subprocess

    makefile = (TESTS.parent / "Makefile").read_text(encoding="utf-8")
    demo_recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "--output" not in demo_recipe and "-o " not in demo_recipe  # the default: reports/<trace>.html
    ignored = subprocess.run(["git", "check-ignore", "-q", generated_docs.DEMO_OUTPUT], cwd=TESTS.parent,
                             check=False).returncode
    assert ignored == 0, f"{generated_docs.DEMO_OUTPUT} is not ignored by git"
