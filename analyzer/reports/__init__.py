"""Diagnosis reports: one typed view model (:mod:`analyzer.reports.viewmodel`, built by
:mod:`analyzer.reports.build`), three renderings.

    report = build_report(analyses)             # list[Analysis] -> ReportView (aggregates, capped tables)
    text = render(report, "html")               # or "md", "json"

Same inputs give the same bytes, apart from the creation time.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from analyzer.reports.build import build_report
from analyzer.reports.viewmodel import Limits, ReportView

__all__ = ["FORMATS", "Limits", "ReportView", "build_report", "render", "render_parts"]

Format = Literal["html", "md", "json"]
FORMATS: tuple[str, ...] = ("html", "md", "json")


def render(report: ReportView, fmt: Format) -> str:
    """Render ``report`` as ``"html"`` (one self-contained file), ``"md"`` (GitHub Markdown, under
    65,000 characters) or ``"json"`` (schema in ``docs/report-schema.md``)."""
    if fmt == "html":
        from analyzer.reports.html import render_html

        return render_html(report)
    if fmt == "md":
        from analyzer.reports.markdown import render_markdown

        return render_markdown(report)
    if fmt == "json":
        from analyzer.reports.jsonout import render_json

        return render_json(report)
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def render_parts(report: ReportView, fmt: Format) -> Iterable[str]:
    """:func:`render`'s text in parts, in order (to write them one after the other): a JSON report one
    trace section at a time (a report of many ranks is never one string), the other formats whole."""
    if fmt == "json":
        from analyzer.reports.jsonout import json_parts

        return json_parts(report)
    return (render(report, fmt),)
