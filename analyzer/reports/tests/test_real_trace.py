"""Reports over real public nsys exports (../shared/traces-public), with the real loader and facts."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.analysis import Analysis
from analyzer.reports import build_report, render
from analyzer.reports.markdown import MAX_CHARS
from analyzer.reports.tests.helpers import CUDF, HOSTILE, MEMFUSION, assert_no_injection, external_loads

CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
pytestmark = pytest.mark.skipif(not MEMFUSION.exists() or not CUDF.exists(),
                                reason="public traces not found under ../shared/traces-public")


def analysis_of(path: Path, mutate=None) -> Analysis:
    """Load, choose the window, wire the real fact store. Findings come from the rule pipeline when it
    runs; the report layer is what these tests check."""
    from analyzer.facts import FactStore
    from analyzer.loading import load_trace
    from analyzer.window import choose_window

    trace = load_trace(path)
    if mutate:
        mutate(trace)
    window = choose_window(trace, None, exclude=("warmup*",))
    return Analysis(trace=trace, window=window, findings=[], facts=FactStore(trace, window, {}))


@pytest.mark.parametrize("path", [MEMFUSION, CUDF], ids=["memfusion-2023", "cudf-2020"])
def test_real_trace_renders_every_overview_section(path):
    report = build_report([analysis_of(path)], created=CREATED)
    s = report.traces[0]
    assert s.notes == (), s.notes
    assert s.utilization is not None and s.utilization.series
    assert s.categories is not None and s.categories.bars
    assert s.top_kernels is not None and s.top_kernels.rows
    assert s.nvtx is not None and s.nvtx.rows
    assert s.header.kernel_count and s.header.gpu_busy_share is not None and 0 < s.header.gpu_busy_share <= 1
    html = render(report, "html")
    assert external_loads(html) == []
    assert len(render(report, "md")) <= MAX_CHARS
    text = render(report, "json")  # written section by section: the bytes of the whole document at once
    from analyzer.reports.jsonout import report_dict

    assert text == json.dumps(report_dict(report), indent=2, ensure_ascii=False, allow_nan=False, default=str) + "\n"


def test_real_gpu_label_counts_only_used_devices():
    h = build_report([analysis_of(MEMFUSION)], created=CREATED).traces[0].header
    assert h.gpus == "NVIDIA GeForce RTX 3090 (1 of 4 used)"
    assert h.device_count == 1


def test_two_real_traces_compare():
    report = build_report([analysis_of(MEMFUSION), analysis_of(CUDF)], created=CREATED)
    assert report.comparison is not None and report.comparison.total_rows == 2
    html = render(report, "html")
    assert 'id="trace-1"' in html and 'id="trace-2"' in html


def _poison(trace) -> None:
    """Hostile strings in kernel names, NVTX texts and process names of a real trace."""
    k = trace.kernels
    for col in ("name", "short_name"):
        k[col] = k[col].astype(object)
        k.loc[k.index[::3], col] = HOSTILE[0]
        k.loc[k.index[1::3], col] = HOSTILE[1]
    n = trace.nvtx
    for col in ("text", "path"):
        n[col] = n[col].astype(object)
        n.loc[n.index[::2], col] = HOSTILE[1]
        n.loc[n.index[1::2], col] = HOSTILE[0]
    trace.processes["name"] = HOSTILE[0]
    for col in ("nvtx_range", "nvtx_path"):
        k[col] = k[col].astype(object)
        k.loc[k[col] != "", col] = HOSTILE[1]


TERMINAL = "k\x1b]0;PWNED\x07\x1b[2J\x1b[31mred\rX\u202eRLO\x00"  # title, clear screen, colour, CR, bidi


def test_control_characters_from_a_trace_are_inert_in_every_format():
    """ESC sequences and bidirectional overrides in kernel and NVTX names of a real trace: the terminal
    summary printed them raw (a kernel name could clear the user's screen or set the window title) and
    Markdown and HTML carried them; now every format shows each as U+FFFD, the diff's renderers too."""
    from analyzer.reports.html import environment
    from analyzer.reports.markdown import md_code, md_text
    from analyzer.reports.summary import summary_text

    def poison(trace) -> None:
        k = trace.kernels
        for col in ("name", "short_name"):
            k[col] = k[col].astype(object)
            k.loc[:, col] = TERMINAL
        object.__setattr__(trace.info, "path", trace.info.path.with_name(TERMINAL + ".sqlite"))  # a file's name
        n = trace.nvtx  # a range the tables name; the steps (GROUPBY_AGG) stay
        for col in ("text", "path"):
            n[col] = n[col].astype(object).str.replace("DATAFRAME_COLUMNS_GETTER", TERMINAL, regex=False)

    report = build_report([analysis_of(CUDF, poison)], created=CREATED)
    outputs = {fmt: render(report, fmt) for fmt in ("html", "md", "json")}
    outputs["terminal"] = summary_text(report)
    for fmt, text in outputs.items():
        assert not any(ch in text for ch in "\x1b\x07\r\x00\u202e"), fmt
    for fmt in ("terminal", "html", "md"):  # the names are there, made inert (Markdown escapes brackets)
        assert "k\ufffd]0;PWNED\ufffd\ufffd[2J" in outputs[fmt].replace("\\", ""), fmt
    # the pieces a diff or sweep report renders names with (no view model of this report in between)
    assert "\x1b" not in md_text(TERMINAL) + md_code(TERMINAL, cell=True)
    assert environment().from_string("{{ x }}").render(x=TERMINAL) == TERMINAL.translate(
        {ord(c): "\ufffd" for c in "\x1b\x07\r\u202e\x00"})


@pytest.mark.parametrize("path", [MEMFUSION, CUDF], ids=["memfusion-2023", "cudf-2020"])
def test_hostile_strings_in_real_trace_are_escaped(path):
    report = build_report([analysis_of(path, _poison)], title=HOSTILE[1], created=CREATED)
    s = report.traces[0]
    # the hostile names reached the report through the real facts ...
    assert any(HOSTILE[0] in str(r[0]) or HOSTILE[1] in str(r[0]) for r in s.top_kernels.rows)
    assert any(HOSTILE[0] in str(r[0]) or HOSTILE[1] in str(r[0]) for r in s.nvtx.rows)
    html = render(report, "html")
    # ... and come out as text only, in tables, SVG <title>s, NVTX lane labels and attributes
    assert_no_injection(html)
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") > 3
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html or "&quot;&gt;&lt;img" in html
    md = render(report, "md")
    # Markdown keeps them text by backslash escapes (``\\<script>``), which only a renderer can judge: the
    # HTML a CommonMark renderer (raw HTML on, as GitHub's) makes of the report holds no element from a name
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark").render(md)
    assert "<script" not in rendered and "<img" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered


def test_html_templates_run_their_shipped_code(monkeypatch):
    """The report templates' Python code ships in ``templates/compiled.json`` (current: its keys match the
    templates as they are); rendering a real trace's report takes it from there without generating any
    (Jinja's ``compile`` is never called) and gives the same bytes as generating it, which is what a
    template edited since (a key that no longer matches) falls back to."""
    from jinja2 import Environment

    from analyzer.reports import html
    from analyzer.reports.templates_code import COMPILED, PrecompiledLoader, template_key

    env = html.environment()
    shipped = json.loads(COMPILED.read_text(encoding="utf-8"))
    names = env.list_templates(extensions=["j2"])
    assert sorted(shipped) == sorted(names) == ["diff.html.j2", "job.html.j2", "report.html.j2"]
    for name in names:
        assert shipped[name]["key"] == template_key(env, env.loader.get_source(env, name)[0]), name
    report = build_report([analysis_of(MEMFUSION)], created=CREATED)

    def fresh(entry):
        html.environment.cache_clear()
        monkeypatch.setattr(PrecompiledLoader, "_entry", entry)
        return render(report, "html")

    calls = []
    real_compile = Environment.compile

    def counted(self, *args, **kwargs):
        calls.append(args[1])
        return real_compile(self, *args, **kwargs)

    monkeypatch.setattr(Environment, "compile", counted)
    shipped_code = fresh(PrecompiledLoader._entry)
    assert calls == []
    stale = fresh(lambda self, name: {"key": "edited since", "code": "raise AssertionError"})
    assert calls == ["report.html.j2"]
    html.environment.cache_clear()
    assert stale == shipped_code and len(shipped_code) > 50_000
