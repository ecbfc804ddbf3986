"""The layout check of a report page in headless Chromium (issue 32), shared by the browser layout tests
that run where the pages are built anyway, so no trace is analyzed twice for them: the committed HTML
files (test_browser_layout.py), every reference report (tests/test_reference_reports.py), every job
(tests/test_jobs.py), every diff of a trace with its twin (analyzer/diff/tests/test_diff_real.py) and of
a job with its twin (analyzer/diff/tests/test_diff_jobs.py). One Chromium per test process.

With every <details> open and every "show more rows" toggle on, no table is clipped (it fits its box, or
sits in a wrapper that scrolls sideways) and no column is squeezed to a few characters (a cell of eight
or more characters narrower than 56 px, about eight characters of the table font). Checked at 1,280 and
1,920 px, the widths the issue names.
"""
from __future__ import annotations

import atexit
import json
from pathlib import Path

import pytest

from analyzer.reports.tests.cdp import Browser, find_chromium

WIDTHS = (1280, 1920)
CHROMIUM = find_chromium()
NO_CHROMIUM = "no chromium found (apt-get install chromium)"

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


_BROWSER: list[Browser] = []


def shared_browser() -> Browser:
    """One headless Chromium for every page this test process checks (started on first use, closed at
    exit): a page costs a navigation and a layout pass, not a browser start. Skips the calling test when
    there is no Chromium."""
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM)
    if _BROWSER and _BROWSER[0].proc.poll() is not None:  # it died (a crash, a timeout): start another
        _BROWSER.pop().close()
    if not _BROWSER:
        _BROWSER.append(Browser(CHROMIUM))
        atexit.register(_BROWSER[0].close)
    return _BROWSER[0]


def layout_problems(b: Browser, page: Path) -> list[str]:
    """Every layout problem of ``page`` at each of :data:`WIDTHS` (``"1280 px: clipped table: ..."``), any
    console error or exception while it loaded, and a page with no table at all (it did not load: a
    report always has one); ``[]`` when it reads well."""
    out: list[str] = []
    b.navigate(page.resolve().as_uri(), width=WIDTHS[0])  # loaded once; the other widths resize the window
    out += [f"load: {p}" for p in b.problems()]
    if not b.evaluate("document.querySelectorAll('table').length"):
        out.append("no table on the page (did it load?)")
    for width in WIDTHS:
        b.call("Emulation.setDeviceMetricsOverride",
               {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=True)
        if b.evaluate("window.innerWidth") != width:
            out.append(f"{width} px: the window did not take that width")
        out += [f"{width} px: {p}" for p in b.evaluate(LAYOUT_PROBLEMS)]
    return out


def assert_layout(page: Path) -> None:
    """Fail with the first problems when ``page`` does not read well at 1,280 and 1,920 px (skip
    without Chromium)."""
    problems = layout_problems(shared_browser(), page)
    assert problems == [], f"{page.name}: {len(problems)} layout problems\n" + json.dumps(problems[:10], indent=1)


def assert_html_layout(html: str, folder: Path, name: str) -> None:
    """:func:`assert_layout` of a rendering not on disk yet: written to ``folder/name.html`` first."""
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM)
    page = folder / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    assert_layout(page)
