"""HTML rendering: one self-contained file (inline CSS, inline SVG, no scripts, nothing loaded from
outside) from a :class:`ReportView`, through Jinja2 templates shipped as package data.

Autoescape is on for every template; the only values marked safe are the SVG charts, which
:mod:`analyzer.reports.svg` escapes itself, and the stylesheet, which ships with the package.

Templates are compiled in memory, once per process, from the package's own files: no bytecode cache
on disk (Jinja's unpickles its entries, so anyone able to write to a cache directory could run code
inside ``analyze``). Their Python code is generated ahead of time and shipped with them
(:mod:`analyzer.reports.templates_code`).
"""
from __future__ import annotations

import functools
import re
from typing import Any

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup, escape

from analyzer.reports import jobsvg, svg
from analyzer.reports.format import (
    DASH,
    fmt_cell,
    fmt_duration,
    fmt_float,
    fmt_int,
    fmt_ms,
    fmt_pct,
    fmt_share,
    fmt_si,
    fmt_time,
    inert_output,
    plural,
)
from analyzer.reports.templates_code import PrecompiledLoader
from analyzer.reports.viewmodel import Column, Link, ReportView

SAFE_SCHEMES = ("https://", "http://")


def cell(value: Any, column: Column) -> Markup:
    """One table cell: formatted by the column kind; links to anchors in the report become ``<a>``."""
    if isinstance(value, Link):
        return Markup('<a href="#{}">{}</a>').format(value.anchor, value.text)
    text = fmt_cell(value, column.kind)
    if column.kind == "code" and value is not None:
        return Markup("<code>{}</code>").format(text)
    return escape(text)


def prose(text: str) -> Markup:
    """A rule's prose (what / why / fix): escaped text whose code spans (```torch.compile```) become
    ``<code>`` (their content escaped like the rest)."""
    return Markup(re.sub(r"`([^`\n]+)`", r"<code>\1</code>", str(escape(text))))


def reference(ref: str) -> Markup:
    """A reference: an ``http(s)`` URL becomes a plain link (nothing is loaded from it), anything else
    is shown as text."""
    if ref.startswith(SAFE_SCHEMES) and not any(ch.isspace() for ch in ref):
        return Markup('<a href="{0}" rel="noopener noreferrer">{0}</a>').format(ref)
    return escape(ref)


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PrecompiledLoader("analyzer.reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        finalize=inert_output,  # a diff's names reach the templates without the report's cap_text
    )
    env.filters.update(
        cell=cell,
        prose=prose,
        ref=reference,
        ms=fmt_ms,
        dur=fmt_duration,
        pct=fmt_pct,
        share=fmt_share,
        time=fmt_time,
        int=fmt_int,
        plural=plural,
        si=fmt_si,
        float=fmt_float,
    )
    env.globals.update(
        DASH=DASH,
        utilization_svg=svg.utilization_svg,
        bars_svg=svg.bars_svg,
        paired_svg=svg.paired_svg,
        breakdown_svg=svg.breakdown_svg,
        roofline_svg=svg.roofline_svg,
        swimlanes_svg=jobsvg.swimlanes_svg,
    )
    return env


def stylesheet() -> Markup:
    """The report's CSS, shipped as package data and inlined."""
    env = environment()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, "report.css")
    return Markup(source)


def render_html(report: ReportView) -> str:
    """The whole report as one HTML document."""
    template = environment().get_template("report.html.j2")
    return template.render(report=report, css=stylesheet())
