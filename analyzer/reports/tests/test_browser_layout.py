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


def test_the_check_finds_a_clipped_table_and_a_squeezed_column_at_each_width(tmp_path: Path) -> None:
    """The check itself, on a hand-built bad page: a 1,500 px table is clipped at 1,280 px but fits at
    1,920 (so the second width is really laid out), a 30 px column of long text is squeezed at both."""
    from analyzer.reports.tests.layout import layout_problems, shared_browser

    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body style="margin:0"><main><section>'
                    '<table style="width:1500px"><tr><th>a wide table</th></tr></table>'
                    '<table><tr><td style="width:30px;max-width:30px;word-break:break-all">squeezedtext</td>'
                    '<td>ok</td></tr></table></section></main></body></html>', encoding="utf-8")
    problems = layout_problems(shared_browser(), page)
    assert [p for p in problems if "clipped table" in p] == ["1280 px: clipped table: a wide table"], problems
    assert {p.split(":")[0] for p in problems if "squeezed column: squeezedtext" in p} == {"1280 px", "1920 px"}
