"""HTML rendering: one self-contained file (inline CSS, inline SVG, no scripts, nothing loaded from
outside) from a :class:`ReportView`, through Jinja2 templates shipped as package data.

Autoescape is on for every template; the only values marked safe are the SVG charts, which
:mod:`analyzer.reports.svg` escapes itself, and the stylesheet, which ships with the package.
"""
from __future__ import annotations

import functools
import os
from typing import Any

from jinja2 import BytecodeCache, Environment, FileSystemBytecodeCache, PackageLoader, StrictUndefined
from jinja2.bccache import Bucket
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
    plural,
)
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


def reference(ref: str) -> Markup:
    """A reference: an ``http(s)`` URL becomes a plain link (nothing is loaded from it), anything else
    is shown as text."""
    if ref.startswith(SAFE_SCHEMES) and not any(ch.isspace() for ch in ref):
        return Markup('<a href="{0}" rel="noopener noreferrer">{0}</a>').format(ref)
    return escape(ref)


def _bytecode_cache() -> BytecodeCache | None:
    """Compiled templates kept in the user's cache directory (``<cache>/jinja``): compiling the report
    templates costs more than rendering a big report. Jinja checks each entry against the template's
    source, so an edited template is compiled again; without a writable directory, none."""
    from analyzer.loading.cache import cache_home

    folder = cache_home() / "jinja"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _TolerantBytecodeCache(str(folder)) if os.access(folder, os.W_OK) else None


class _TolerantBytecodeCache(FileSystemBytecodeCache):
    """The cache is never required: a damaged entry is compiled again, a full or vanished directory
    is not written to, and neither stops the report."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 - unpickling a damaged entry can raise anything
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


@functools.lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("analyzer.reports", "templates"),
        bytecode_cache=_bytecode_cache(),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(
        cell=cell,
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
