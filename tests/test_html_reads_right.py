"""The HTML report reads right (issue 32, point 5), on real traces: headers carry no unit word the cells
already show (no "Busy ns" over values in ms), no cell of a share column exceeds 100% (a ratio that can
pass 1 is shown as a ratio and labelled so), rule prose shows its code spans as code, and no evidence
column is empty in every row."""
from __future__ import annotations

import re
from datetime import datetime, timezone
from html.parser import HTMLParser

import pytest

from analyzer.pipeline import analyze_paths
from analyzer.reports import build_report, render
from analyzer.testing import DATA_DIR, real_trace
from analyzer.trace_analysis import AnalysisOptions

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Tables(HTMLParser):
    """Every <table>: its header texts and rows of cell texts; and the What/Why/Fix paragraphs."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self.evidence: list[int] = []  # indexes of the tables inside a finding's evidence
        self._depth_evidence = 0
        self.prose: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._in_th = False
        self._h5 = ""
        self._in_h5 = False
        self._p: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "div" and ("class", "evidence") in attrs:
            self._depth_evidence = 1
        elif tag == "div" and self._depth_evidence:
            self._depth_evidence += 1
        if tag == "table":
            if self._depth_evidence:
                self.evidence.append(len(self.tables))
            self.tables.append(([], []))
        elif tag == "tr" and self.tables:
            self._row = []
        elif tag in ("td", "th") and self.tables:
            self._cell, self._in_th = [], tag == "th"
        elif tag == "h5":
            self._in_h5, self._h5 = True, ""
        elif tag == "p" and self._h5 in ("What", "Why it matters", "How to fix"):
            self._p = []
        elif tag == "code" and self._p is not None:
            self._p.append("<code>")

    def handle_endtag(self, tag):
        if tag == "div" and self._depth_evidence:
            self._depth_evidence -= 1
        if tag in ("td", "th") and self._cell is not None and self.tables:
            text = " ".join("".join(self._cell).split())
            if self._in_th and self._row is not None and not self.tables[-1][1]:
                self.tables[-1][0].append(text)
            elif self._row is not None:
                self._row.append(text)
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            if self._row:
                self.tables[-1][1].append(self._row)
            self._row = None
        elif tag == "h5":
            self._in_h5 = False
        elif tag == "p" and self._p is not None:
            self.prose.append("".join(self._p))
            self._p, self._h5 = None, ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._in_h5:
            self._h5 += data
        if self._p is not None:
            self._p.append(data)


@pytest.fixture(scope="module", params=["dataloader_starved", "ddp_straggler_2gpu"])
def parsed(request) -> Tables:
    if request.param.startswith("ddp"):
        path = DATA_DIR / "ddp" / f"{request.param}.sqlite.xz"
        if not path.is_file():
            pytest.skip("tests/data/ddp not in this checkout")
    else:
        path = real_trace(request.param)
    report = build_report(analyze_paths([path], AnalysisOptions()), created=CREATED)
    doc = Tables()
    doc.feed(render(report, "html"))
    assert doc.tables and doc.prose
    return doc


def test_headers_carry_no_unit_word_the_cells_show(parsed):
    bad = [h for head, _ in parsed.tables for h in head if re.search(r"\b(ns|pct)$", h, re.I)]
    assert bad == []


def test_no_share_above_100_percent(parsed):
    bad = []
    for head, rows in parsed.tables:
        for row in rows:
            for label, text in zip(head, row):
                m = re.fullmatch(r"(\d[\d,]*(?:\.\d+)?)%", text)
                if m and float(m.group(1).replace(",", "")) > 100.05 and "change" not in label.lower():
                    bad.append((label, text))
    assert bad == []


def test_rule_prose_shows_code_spans_as_code(parsed):
    assert not any("`" in p for p in parsed.prose)
    assert any("<code>" in p for p in parsed.prose)


def test_no_evidence_column_is_empty_in_every_row(parsed):
    assert parsed.evidence
    bad = []
    for head, rows in (parsed.tables[i] for i in parsed.evidence):
        if not rows or not head or any(len(r) != len(head) for r in rows):
            continue
        for i, label in enumerate(head):
            if all(r[i] in ("", "—") for r in rows) and label:
                bad.append(label)
    assert bad == []
