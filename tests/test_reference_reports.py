"""Reports on the committed real traces are byte-identical to the references (see reference_reports.py),
and each one's HTML reads well in a browser.

A failure means the report changed. If that was the intent, regenerate the references in the same
commit (``.venv/bin/python tests/reference_reports.py --write``) so that the review shows the Markdown
diff; if not (a performance change, a refactoring), the change altered what users read: fix it.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from reference_reports import cases, compare, load_index, render_case

from analyzer.reports.tests.layout import CHROMIUM, NO_CHROMIUM, assert_layout

CASES = cases()


@pytest.fixture(scope="session")
def html_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each case's HTML as the reference test rendered it: the layout test reads it from here, so no
    trace is analyzed twice (either test may run first)."""
    return tmp_path_factory.mktemp("reference-html")


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_report_matches_reference(case, html_dir):
    got = render_case(case)
    (html_dir / f"{case.name}.html").write_text(got["html"], encoding="utf-8")
    problems = list(compare(case, got, load_index()))
    assert not problems, "\n".join(problems) + (
        "\n(if the change is meant: .venv/bin/python tests/reference_reports.py --write, commit the result)")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reference_report_reads_well_in_a_browser(case, html_dir):
    """At 1,280 and 1,920 px: no clipped table, no squeezed column (issue 32; the check:
    analyzer/reports/tests/layout.py)."""
    page = html_dir / f"{case.name}.html"
    if not page.is_file():
        page.write_text(render_case(case)["html"], encoding="utf-8")
    assert_layout(page)
