"""Layout of real reports in headless Chromium at 1280 and 1920 px (issue 32): with every <details>
open, no table is clipped (it fits its box, or sits in a wrapper that scrolls sideways) and no column is
squeezed to a few characters (a cell of eight or more characters narrower than 56 px, about eight
characters of the table font). On the committed
demo report (reports/demo.html), the report of a two-rank job and a diff of two real traces."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.reports.tests.cdp import Browser, find_chromium
from analyzer.reports.tests.helpers import REPO

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium found (apt-get install chromium)"),
]
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
DATA = REPO / "tests" / "data"

LAYOUT_PROBLEMS = """(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.more-toggle').forEach(t => { t.checked = true; });
  const bad = [];
  for (const t of document.querySelectorAll('table')) {
    if (t.offsetParent === null) continue;
    const tr = t.getBoundingClientRect();
    let box = t.parentElement, scrolls = false;
    for (let e = t.parentElement; e; e = e.parentElement) {
      const o = getComputedStyle(e).overflowX;
      if (o === 'auto' || o === 'scroll') { scrolls = true; break; }
      if (e.tagName === 'SECTION' || e.tagName === 'MAIN' || e.tagName === 'BODY') { box = e; break; }
    }
    if (!scrolls && tr.right > box.getBoundingClientRect().right + 1)
      bad.push('clipped table: ' + (t.querySelector('th') || t).textContent.trim().slice(0, 40));
    for (const cell of t.querySelectorAll('th, td')) {
      const text = cell.textContent.trim();
      const w = cell.getBoundingClientRect().width;
      if (text.length >= 8 && w > 0 && w < 56) bad.push('squeezed column: ' + text.slice(0, 40) + ' (' + Math.round(w) + ' px)');
    }
  }
  return bad;
})()"""


@pytest.fixture(scope="module")
def browser():
    with Browser(CHROMIUM) as b:
        yield b


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    from analyzer.diff.compare import DiffSettings, diff_runs
    from analyzer.diff.report import render_diff
    from analyzer.pipeline import AnalysisOptions, analyze_paths, analyze_trace
    from analyzer.reports import build_report, render
    from analyzer.reports.baseline import summarize

    out = tmp_path_factory.mktemp("layout")
    pages = {}
    if (REPO / "reports" / "demo.html").is_file():
        pages["demo"] = REPO / "reports" / "demo.html"
    job = DATA / "ddp" / "ddp_straggler_2gpu.sqlite.xz"
    if job.is_file():
        pages["job"] = out / "job.html"
        pages["job"].write_text(render(build_report(analyze_paths([job], AnalysisOptions()), created=CREATED),
                                       "html"), encoding="utf-8")
    base, head = DATA / "dataloader_starved.sqlite.xz", DATA / "dataloader_starved_fixed.sqlite.xz"
    if base.is_file() and head.is_file():
        result = diff_runs(summarize(analyze_trace(base)), summarize(analyze_trace(head)), DiffSettings(),
                           created=CREATED)
        pages["diff"] = out / "diff.html"
        pages["diff"].write_text(render_diff(result, "html"), encoding="utf-8")
    if not pages:
        pytest.skip("no committed traces or demo report in this checkout")
    return pages


@pytest.mark.parametrize("width", [1280, 1920])
@pytest.mark.parametrize("name", ["demo", "job", "diff"])
def test_tables_fit_or_scroll_and_no_column_is_squeezed(browser, pages, name, width):
    if name not in pages:
        pytest.skip(f"{name} report not available")
    browser.navigate(pages[name].as_uri(), width=width)
    problems = browser.evaluate(LAYOUT_PROBLEMS)
    assert problems == [], json.dumps(problems[:10], indent=1)
