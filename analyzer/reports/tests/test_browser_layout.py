"""Layout of the committed HTML pages in headless Chromium at 1280 and 1920 px (issue 32; the check is
analyzer/reports/tests/layout.py): the demo report, the golden reports, the sweep pages under docs/.
The reports built from the committed traces are checked where their tests build them: every reference
report (tests/test_reference_reports.py), every job (tests/test_jobs.py), every diff of a pathology
with its twin (analyzer/diff/tests/test_diff_real.py, test_diff_jobs.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.reports.tests.helpers import REPO
from analyzer.reports.tests.layout import CHROMIUM, NO_CHROMIUM, assert_layout

pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)]


def committed_pages() -> list[Path]:
    """Every HTML file the repository ships as a page to read (not test inputs)."""
    pages = [REPO / "reports" / "demo.html", *sorted((REPO / "analyzer" / "reports" / "tests" / "golden").glob("*.html")),
             *sorted((REPO / "docs").rglob("*.html"))]
    return [p for p in pages if p.is_file()]


PAGES = committed_pages()


def test_there_are_committed_pages() -> None:
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"reports/demo.html", "docs/sweep-h100/sweep.html"} <= names, names


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_tables_fit_or_scroll_and_no_column_is_squeezed(page: Path) -> None:
    assert_layout(page)
