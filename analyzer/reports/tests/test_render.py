"""Renderings: golden files, Markdown size cap, escaping, offline HTML, JSON schema basics.

Regenerate the goldens with ``UPDATE_GOLDEN=1 python -m pytest analyzer/reports/tests``.
"""
from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.findings import Finding, Scope, Severity
from analyzer.reports import build_report, render
from analyzer.reports.markdown import MAX_CHARS, md_text
from analyzer.reports.tests.helpers import (
    HOSTILE,
    assert_no_injection,
    external_links,
    external_loads,
    scrub,
)
from analyzer.reports.tests.synthetic import MS, make_analysis

GOLDEN = Path(__file__).parent / "golden"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    text = scrub(text)
    if os.environ.get("UPDATE_GOLDEN") == "1" or not path.exists():
        if not os.environ.get("UPDATE_GOLDEN") and os.environ.get("CI"):
            pytest.fail(f"golden file {path} is missing; run with UPDATE_GOLDEN=1")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from its golden file; if intended, rerun with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("fmt,ext", [("html", "html"), ("md", "md"), ("json", "json")])
def test_golden_single(fmt, ext):
    report = build_report([make_analysis()], created=datetime.now(timezone.utc))
    _check_golden(f"single.{ext}", render(report, fmt))


@pytest.mark.parametrize("fmt,ext", [("html", "html"), ("md", "md"), ("json", "json")])
def test_golden_multi_with_missing_facts(fmt, ext):
    analyses = [make_analysis("run_a.sqlite"),
                make_analysis("run_b.sqlite", with_ncu=False, with_phases=False,
                              drop_facts=("utilization", "nvtx_projection"))]
    report = build_report(analyses, created=datetime.now(timezone.utc))
    _check_golden(f"multi.{ext}", render(report, fmt))


def test_scrub_removes_only_time_and_version():
    a = render(build_report([make_analysis()], created=datetime(2020, 5, 6, 7, 8, 9, tzinfo=timezone.utc)), "json")
    b = render(build_report([make_analysis()], created=CREATED), "json")
    assert a != b and scrub(a) == scrub(b)


# -- Markdown ------------------------------------------------------------------------------------------


def _big_findings(n: int, rows: int, text: str = "m") -> list[Finding]:
    evidence = tuple((i, f"{HOSTILE[2]}_{i}", i * 1000) for i in range(rows))
    return [
        Finding(rule=f"rule-{i}", id=f"R{i:05d}", severity=Severity.ERROR if i % 3 == 0 else Severity.WARNING,
                title=f"Problem {i}", message=text, category="c", scope=Scope("kernel", kernel=f"k{i}"),
                impact_ns=1_000_000 + i, impact_pct=0.1, evidence_columns=("n", "kernel", "duration"),
                evidence=evidence, evidence_total=rows, what=text, why=text, fix=text)
        for i in range(n)
    ]


@pytest.mark.parametrize("n,rows,text", [
    (3, 100_000, "m"),  # huge evidence
    (5_000, 3, "m"),  # thousands of findings
    (400, 50, "y" * 20_000),  # huge texts
], ids=["100k-evidence-rows", "5000-findings", "huge-texts"])
def test_markdown_always_under_limit(n, rows, text):
    a = make_analysis(extra_findings=_big_findings(n, rows, text))
    report = build_report([a, make_analysis("b.sqlite", extra_findings=_big_findings(n, rows, text))],
                          created=CREATED)
    md = render(report, "md")
    assert len(md) <= MAX_CHARS
    assert "GitHub's size limit" in md or "99,975 more rows not shown" in md


def test_markdown_degrades_evidence_before_details():
    a = make_analysis(extra_findings=_big_findings(60, 25))
    md = render(build_report([a], created=CREATED), "md")
    assert len(md) <= MAX_CHARS
    assert md.count("<details>") >= 60  # every finding keeps its details block ...
    assert "GitHub's size limit" in md and "more rows not shown" in md  # ... with fewer evidence rows


def test_markdown_small_report_is_complete():
    md = render(build_report([make_analysis()], created=CREATED), "md")
    assert "GitHub's size limit" not in md
    assert md.count("<details>") == 4 + 3  # four findings, categories, top kernels, phases
    # the phases table says which number measures each phase
    assert "| forward | 8 | 280.0 ms | 190.0 ms | 600.0 ms | no | GPU timeline | 600.0 ms |" in md
    assert "1 phase is measured on the GPU timeline (forward: CPU wall 35.0 ms, phase time 75.0 ms per instance)" in md
    assert "| 1 | **error** | GPU001 gpu\\-idle\\-gaps | 212.0 | 21.2% |" not in md  # '-' is not escaped in cells
    assert "| 1 | **error** | GPU001 gpu-idle-gaps | 212.0 | 21.2% |" in md
    assert "20 more rows not shown" in md


def test_markdown_escapes_trace_strings():
    names = list(HOSTILE)
    a = make_analysis(kernel_names=names, nvtx_texts=names, process=HOSTILE[0])
    md = render(build_report([a], created=CREATED), "md")
    rendered = pytest.importorskip("markdown_it").MarkdownIt("gfm-like").render(md)  # as GitHub shows it
    assert "<script" not in rendered and "<img" not in rendered and "&lt;script&gt;" in rendered
    assert "`" not in md.replace("\\`", "")
    # every table row keeps its column count: no raw '|' from a kernel name splits a cell
    for block in re.split(r"\n\n", md):
        lines = [ln for ln in block.splitlines() if ln.startswith("|")]
        if len(lines) >= 2:
            widths = {len(re.findall(r"(?<!\\)\|", ln)) for ln in lines}
            assert len(widths) == 1, lines


def test_md_text_escaping_rules():
    assert md_text("a|b") == "a\\|b"
    assert md_text("<b>&") == "\\<b>\\&"  # backslash escapes, no entities: the raw text reads right too
    assert md_text("> q", block=True) == "\\> q" and md_text("30 -> 13 ms") == "30 -> 13 ms"
    assert md_text("@user www.x.org") == "\u200d@\u200duser www\u200d.x.org"
    assert md_text("`x` *y* _z_ [l](u)") == "\\`x\\` \\*y\\* \\_z\\_ \\[l\\](u)"
    assert md_text("# head", block=True) == "\\# head"
    assert md_text("1. item", block=True) == "1\\. item"
    assert md_text("900.0 ms") == "900.0 ms"
    assert md_text("two\nlines") == "two lines"


# -- HTML ----------------------------------------------------------------------------------------------


def test_html_escapes_hostile_strings_everywhere():
    names = list(HOSTILE)
    extra = [Finding(rule="hostile", id="H001", severity=Severity.ERROR, title=HOSTILE[1], message=HOSTILE[0],
                     category=HOSTILE[1], scope=Scope("kernel", kernel=HOSTILE[0], nvtx_path=HOSTILE[1]),
                     impact_ns=5, impact_pct=None, evidence_columns=(HOSTILE[1], "name"),
                     evidence=((HOSTILE[0], HOSTILE[1]),), what=HOSTILE[0], why=HOSTILE[1], fix=HOSTILE[0],
                     references=(HOSTILE[0], 'https://x.example/"><script>alert(1)</script>',
                                 "javascript:alert(1)"),
                     explains=(HOSTILE[1],))]
    a = make_analysis(HOSTILE[1], kernel_names=names, nvtx_texts=names, process=HOSTILE[0], extra_findings=extra)
    b = make_analysis(HOSTILE[0], kernel_names=names, nvtx_texts=names)
    html = render(build_report([a, b], title=HOSTILE[0], created=CREATED), "html")
    assert_no_injection(html)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text
    assert 'href="javascript:' not in html
    # the SVG charts carry the hostile kernel / NVTX names too, escaped
    svg_titles = re.findall(r"<title>([^<]*)</title>", html)
    assert any("&lt;script&gt;" in t for t in svg_titles)


def test_html_is_offline():
    html = render(build_report([make_analysis(), make_analysis("b.sqlite")], created=CREATED), "html")
    assert external_loads(html) == []
    refs = {r for f in make_analysis().findings for r in f.references}
    assert set(external_links(html)) <= refs  # references are plain links: nothing is loaded from them
    assert "<style>" in html and "<svg" in html


def test_html_has_anchors_and_self_links():
    report = build_report([make_analysis()], created=CREATED)
    html = render(report, "html")
    for f in report.traces[0].findings:
        assert f'id="{f.anchor}"' in html
        assert f'href="#{f.anchor}"' in html
    # utilization, categories, NVTX, roofline; per GPU the breakdown of the window, its steps, its ranges
    assert html.count('<svg class="chart') == 4 + 2 * 3


def test_html_template_autoescape_is_on():
    from analyzer.reports.html import environment

    assert environment().autoescape is True


# -- JSON ----------------------------------------------------------------------------------------------


def test_json_shape():
    doc = json.loads(render(build_report([make_analysis()], created=CREATED), "json"))
    assert list(doc) == ["schema_version", "tool", "created", "title", "verdict", "traces"]
    assert doc["schema_version"] == "1.2"
    t = doc["traces"][0]
    assert list(t) == ["info", "window", "summary", "findings", "findings_total", "overview", "notes", "baseline"]
    assert list(t["baseline"]) == ["steps", "totals", "phases", "kernels", "categories", "copies", "rules",
                                  "findings", "latent_impacts", "graph_hidden_rules"]
    assert list(t["overview"]) == ["categories", "top_kernels", "nvtx", "gaps", "breakdown", "phases", "signals",
                                   "ncu", "roofline"]
    (b0, b1) = t["overview"]["breakdown"]
    assert list(b0) == ["device", "summary", "window_ns", "causes", "details", "largest", "steps", "steps_total",
                        "ranges", "ranges_total"]
    assert b0["causes"] == {"compute": 500 * MS, "launch_bound": 100 * MS, "host_work": 300 * MS}
    assert sum(b0["causes"].values()) == b0["window_ns"] == t["window"]["duration_ns"]
    assert b0["summary"] == "compute 55.6% \u00b7 host work 33.3% \u00b7 launch-bound 11.1%"
    assert len(b0["steps"]) == b0["steps_total"] == 8 and b0["ranges_total"] == 3
    f = t["findings"][0]
    assert f["key"] == "gpu-idle-gaps-0" and f["severity"] == "error"
    assert f["evidence"]["total_rows"] == 40 and len(f["evidence"]["rows"]) == 20
    assert t["summary"]["findings_by_severity"] == {"error": 1, "warning": 2, "info": 1}


def test_json_keeps_hostile_strings_verbatim():
    a = make_analysis(kernel_names=[HOSTILE[0]])
    doc = json.loads(render(build_report([a], created=CREATED), "json"))
    assert doc["traces"][0]["overview"]["top_kernels"]["rows"][0]["name"] == HOSTILE[0]


def test_html_runs_no_code_from_the_cache_directory(tmp_path):
    """Anything in ``<cache>/jinja`` (a shared or restored cache) is never loaded: Jinja's bytecode cache
    unpickles its entries. A pickle that would create a marker file is planted under every name a bytecode
    cache would use; a report is rendered in a fresh process; the marker must not appear."""
    import pickle
    import subprocess
    import sys

    from jinja2 import PackageLoader
    from jinja2.bccache import FileSystemBytecodeCache, bc_magic

    marker = tmp_path / "ran-code"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    folder = tmp_path / "cache" / "jinja"
    folder.mkdir(parents=True)
    fs_cache = FileSystemBytecodeCache(str(folder))
    from analyzer.reports.html import environment

    env = environment()
    loader = PackageLoader("analyzer.reports", "templates")
    for name in loader.list_templates():
        _, filename, _ = loader.get_source(env, name)
        key = fs_cache.get_cache_key(name, filename)
        (folder / (fs_cache.pattern % key)).write_bytes(bc_magic + pickle.dumps(Payload()))
    code = ("from analyzer.reports import build_report, render\n"
            "from analyzer.reports.tests.synthetic import make_analysis\n"
            "print(len(render(build_report([make_analysis()]), 'html')))\n")
    env_vars = {**os.environ, "ANALYZER_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env_vars, capture_output=True, text=True,
                         cwd=str(Path(__file__).resolve().parents[3]), timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 1000
    assert not marker.exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted(  # nothing written there either
        fs_cache.pattern % fs_cache.get_cache_key(n, loader.get_source(env, n)[1]) for n in loader.list_templates())


def test_names_are_capped_in_every_format():
    """A damaged trace's 2 MB kernel name (issue 33: 10 MB names made a 63 MB HTML report, 1 MB ones 24 MB of
    JSON): every format holds at most 4,000 characters of it in one place (format.MAX_TEXT_CHARS), and the
    report stays small."""
    name = "void huge<" + "A" * 2_000_000 + ">(int)"
    report = build_report([make_analysis(kernel_names=[name])], created=CREATED)
    for fmt in ("html", "md", "json"):
        text = render(report, fmt)
        longest = max((len(m) for m in re.findall(r"A{100,}", text)), default=0)
        assert 0 < longest < 4000, (fmt, longest)
        assert len(text) < 1_000_000, (fmt, len(text))
