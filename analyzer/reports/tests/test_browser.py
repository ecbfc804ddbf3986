"""The HTML report in a real headless Chromium (CDP over --remote-debugging-pipe, no extra dependency).

Checks: no console errors or exceptions, no network request beyond the file itself, every chart drew
marks, a finding's anchor scrolls to it, the evidence "show more rows" toggle works without JavaScript.
And a screenshot of the demo report (the committed ``reports/demo.png`` is written by ``make docs``,
never by a test: a test run leaves ``git status`` clean).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.reports import build_report, render
from analyzer.reports.tests.cdp import Browser, find_chromium
from analyzer.reports.tests.helpers import REPO
from analyzer.reports.tests.synthetic import make_analysis

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium found (apt-get install chromium)"),
]
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def browser():
    with Browser(CHROMIUM) as b:
        yield b


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    report = build_report([make_analysis()], created=CREATED)
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render(report, "html"), encoding="utf-8")
    return path, report


def test_loads_without_errors_or_network(browser, page):
    path, _ = page
    browser.navigate(path.as_uri())
    assert browser.problems() == []
    assert browser.requests() == [path.as_uri()]
    assert browser.evaluate("document.title").startswith("GPU trace diagnosis")


def test_every_chart_has_marks(browser, page):
    path, _ = page
    browser.navigate(path.as_uri())
    counts = browser.evaluate(
        "JSON.stringify([...document.querySelectorAll('svg.chart')].map(s => ["
        "s.classList[1], s.querySelectorAll('rect.bar, rect.gap, rect.span, circle.dot').length, "
        "s.getBoundingClientRect().height]))"
    )
    charts = json.loads(counts)
    # per GPU, the breakdown's three charts (window, steps, ranges) come first, then the overview's
    gpus = len(page[1].traces[0].breakdown)
    assert gpus == 2
    assert [c[0] for c in charts] == ["breakdown"] * 3 * gpus + ["util", "bars", "paired", "roofline"]
    for name, marks, height in charts:
        assert marks > 0, name
        assert height > 50, name


def test_anchor_scrolls_to_finding(browser, page):
    path, report = page
    target = report.traces[0].findings[2]
    browser.navigate("about:blank")  # a fresh load of the page with the fragment, as a clicked link does
    browser.navigate(f"{path.as_uri()}#{target.anchor}")
    assert browser.evaluate("location.hash") == f"#{target.anchor}"
    top = browser.evaluate(f"document.getElementById({json.dumps(target.anchor)}).getBoundingClientRect().top")
    assert 0 <= top <= 40
    assert browser.evaluate("window.scrollY") > 500
    assert browser.evaluate("document.querySelector(':target').id") == target.anchor


def test_show_more_rows_toggle_without_javascript(browser, page):
    path, report = page
    anchor = report.traces[0].findings[0].anchor
    browser.navigate(path.as_uri())
    visible = (f"[...document.getElementById({json.dumps(anchor)}).querySelectorAll('table.evidence tbody tr')]"
               ".filter(r => r.getClientRects().length).length")
    assert browser.evaluate(visible) == 8
    browser.evaluate(f"document.querySelector('label[for={json.dumps(anchor + '-more')}]').click()")
    assert browser.evaluate(visible) == 20


def test_demo_screenshot(browser, tmp_path):
    """The README's demo (``make demo``): the real H100 trace of a training loop starved by its data
    loader, through the whole pipeline with the default pack, opens cleanly, its top finding's link
    scrolls to it and it screenshots (into tmp_path: ``make docs`` writes ``reports/demo.png``)."""
    from analyzer.pipeline import analyze_trace

    demo = REPO / "tests" / "data" / "dataloader_starved.sqlite.xz"
    analyses = [analyze_trace(demo)]
    assert {f.rule for f in analyses[0].findings} >= {"gpu-idle-gaps", "low-gpu-utilization"}
    html = tmp_path / "demo.html"
    html.write_text(render(build_report(analyses), "html"), encoding="utf-8")
    browser.navigate(html.as_uri())
    assert browser.problems() == []
    anchor = analyses[0].findings[0].key
    browser.navigate(html.as_uri() + "#" + anchor)  # the top finding's link scrolls to it
    top = browser.evaluate(f"document.getElementById({json.dumps(anchor)}).getBoundingClientRect().top")
    assert 0 <= top < 40  # at the top of the viewport (the stylesheet keeps a small scroll margin)
    browser.navigate(html.as_uri())
    out = tmp_path / "demo.png"
    browser.screenshot(out, max_height=3200)  # verdict, findings and the overview charts
    assert out.stat().st_size > 10_000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_print_layout_has_no_errors(browser, page):
    path, _ = page
    browser.navigate(path.as_uri())
    browser.call("Emulation.setEmulatedMedia", {"media": "print"}, session=True)
    assert browser.evaluate("document.querySelectorAll('tr.extra')[0].getClientRects().length") == 1
    browser.call("Emulation.setEmulatedMedia", {"media": ""}, session=True)
    assert browser.problems() == []
    assert isinstance(Path(path).read_text(), str)
