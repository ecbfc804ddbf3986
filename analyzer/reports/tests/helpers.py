"""Shared checks for report tests: hostile strings, an HTML structure scan, scrubbing, real traces."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from analyzer.testing import PUBLIC_DIR

REPO = Path(__file__).resolve().parents[3]
PUBLIC = PUBLIC_DIR
MEMFUSION = PUBLIC / "LeiWang1999__memfusion_artifact__report1.sqlite"
CUDF = PUBLIC / "quasiben__nvtx-examples__cudf.sqlite"

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "kern|el`tick`<T>&amp;*bold*_u_[x](y)",
)


class ElementScan(HTMLParser):
    """Collects every element and attribute the browser would create."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []  # (tag, name, value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    handle_startendtag = handle_starttag


def scan(html_text: str) -> ElementScan:
    parser = ElementScan()
    parser.feed(html_text)
    parser.close()
    return parser


def assert_no_injection(html_text: str) -> None:
    """No hostile string survives unescaped: no script/img/iframe element, no on* attribute, no raw
    hostile text (in text nodes, SVG or attributes)."""
    for raw in HOSTILE[:2]:
        assert raw not in html_text
    assert "<img" not in html_text.lower()
    assert "<script" not in html_text.lower()
    found = scan(html_text)
    assert not {"script", "img", "iframe", "object", "embed"} & set(found.tags)
    bad = [(t, k) for t, k, _ in found.attrs if k.lower().startswith("on")]
    assert not bad, bad


def external_loads(html_text: str) -> list[str]:
    """Anything in the page that would make the browser fetch from outside the file."""
    found = scan(html_text)
    out = [f"<{t} {k}={v}>" for t, k, v in found.attrs if k in ("src", "srcset", "data", "poster", "background")]
    out += [f"<{t}>" for t in found.tags if t in ("script", "link", "iframe", "object", "embed", "img", "video",
                                                 "audio", "source", "base")]
    lowered = html_text.lower()
    out += [m for m in ("@import", "url(") if m in lowered]
    out += [f"xlink:href={v}" for _, k, v in found.attrs if k == "xlink:href"]
    return out


def external_links(html_text: str) -> list[str]:
    return [v for _, k, v in scan(html_text).attrs if k == "href" and not v.startswith("#")]


_VOLATILE = (
    (re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\+00:00| UTC)?"), "<CREATED>"),
    (re.compile(r"(gpu-trace-analyzer\"?,? ?(\"version\": \")?)\d+\.\d+\.\d+\S*?(?=[\" <·])"), r"\1<VERSION>"),
    (re.compile(r'("version": ")[^"]+(")'), r"\1<VERSION>\2"),
)


def scrub(text: str) -> str:
    """Remove the creation time and the tool version (the only parts allowed to differ)."""
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text
