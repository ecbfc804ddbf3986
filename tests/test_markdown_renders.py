"""The Markdown reports as a reader sees them: rendered by a CommonMark renderer with GFM tables and GFM
autolinks (markdown-it-py with linkify, fuzzy links off as on GitHub), compared with the text they carry.

Checked on every committed reference report (tests/data/reference-reports/*.md), on the reports of a
real trace whose kernel and NVTX names were replaced by injection strings, on a diff of two real traces
with injected names, and on arbitrary text (hypothesis): no stray backslash or HTML entity in what the
reader sees, code spans show their text verbatim, nothing from a trace mentions anyone (``@user``),
links or autolinks anything, or opens HTML.
"""
from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.reports.format import inert_text
from analyzer.reports.markdown import ZWJ, md_code, md_prose, md_text

markdown_it = pytest.importorskip("markdown_it")
pytest.importorskip("linkify_it")

REPO = Path(__file__).resolve().parents[1]
REF_DIR = REPO / "tests" / "data" / "reference-reports"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
#: the raw HTML the Markdown renderer writes itself (collapsible sections, bold summary, the footer)
OWN_TAGS = {"details", "summary", "b", "sub"}
INJECTIONS = (
    "@everyone ping @org/team and @user",
    "see https://evil.example/x and www.evil.example/y or ftp://evil.example",
    "mail a@b.example",
    "[click](https://evil.example) ![img](https://evil.example/i.png) <https://evil.example>",
    "<b>bold</b> &amp; &lt; <!-- c --> <script>alert(1)</script>",
    "`code` ``two`` *em* _em_ ~~del~~ | pipe \\ back",
    "# heading",
    "1. list",
    "> quote",
)


def renderer():
    md = markdown_it.MarkdownIt("gfm-like")
    md.linkify.set({"fuzzy_link": False})  # GitHub autolinks www., http(s)://, ftp:// and e-mails only
    return md


def seen(markdown: str) -> tuple[list[str], list[str], list[str]]:
    """(the text of each rendered block as a reader sees it, every link target, every HTML tag)."""
    texts, links, tags = [], [], []
    for tok in renderer().parse(markdown):
        if tok.type == "html_block":
            tags += re.findall(r"</?\s*([A-Za-z][\w-]*)", tok.content)
        if tok.type != "inline":
            continue
        parts = []
        for child in tok.children or []:
            if child.type in ("text", "code_inline"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
            elif child.type in ("link_open", "image"):
                links.append(child.attrs.get("href") or child.attrs.get("src") or "")
            elif child.type == "html_inline":
                tags += re.findall(r"</?\s*([A-Za-z][\w-]*)", child.content)
        texts.append("".join(parts))
    return texts, links, tags


def mentions(text: str) -> list[str]:
    """What GitHub would turn into a mention: ``@`` then a user or team name character."""
    return re.findall(r"(?<![\w`])@[A-Za-z0-9]", text)


def check_inert(markdown: str, allowed_links: set[str], entities: bool = True) -> list[str]:
    """What would be active in a posted comment: links not from the rule pack, HTML tags the renderer
    did not write, mentions, and (``entities``) HTML entities the reader would see spelled out."""
    texts, links, tags = seen(markdown)
    problems = [f"link {x}" for x in links if x not in allowed_links]
    problems += [f"tag <{t}>" for t in tags if t.lower() not in OWN_TAGS]
    for t in texts:
        problems += [f"mention {m} in {t[:80]!r}" for m in mentions(t)]
        if entities:
            problems += [f"entity {e} in {t[:80]!r}" for e in re.findall(r"&(?:[A-Za-z]+|#\d+|#x[0-9a-f]+);", t)]
    return problems


def rule_references() -> set[str]:
    from analyzer.pipeline import default_rules_path
    from analyzer.rules import load_pack

    return {r for rule in load_pack(default_rules_path()) for r in rule.references}


# -- every committed reference report ------------------------------------------------------------------

#: every committed report: the reference reports, the demo report, the seeds' grid sweep (docs/sweep-h100)
REFERENCE_MD = [*sorted(REF_DIR.glob("*.md")),
                *(p for p in (REPO / "reports" / "demo.md", REPO / "docs" / "sweep-h100" / "sweep.md") if p.is_file())]


def stray_backslashes(texts: list[str]) -> list[str]:
    """Texts a reader sees with a backslash in them: the committed traces' names carry none, so any is an
    escape shown literally. The sweep's key pattern (a regex, in a code span) is the one backslash meant."""
    from analyzer.phases.sweep import DEFAULT_KEY_PATTERN

    return [f"backslash in {t[:100]!r}" for t in texts if "\\" in t.replace(DEFAULT_KEY_PATTERN, "")]


@pytest.mark.skipif(not REFERENCE_MD, reason="no reference reports in this checkout")
def test_every_reference_report_renders_as_plain_text():
    """No stray backslash, entity, link or HTML in what a reader of each committed report sees; code
    spans carry their text verbatim (``step_N/load_batch``, never ``step\\_N/load\\_batch``)."""
    allowed = rule_references()
    problems = {}
    for path in REFERENCE_MD:
        md = path.read_text(encoding="utf-8")
        bad = check_inert(md, allowed)
        bad += stray_backslashes(seen(md)[0])
        if bad:
            problems[path.name] = bad[:5]
    assert not problems, problems
    assert any(p.name == "sweep.md" for p in REFERENCE_MD) or not (REPO / "docs" / "sweep-h100").is_dir()


def test_sweep_markdown_shows_kernel_names_as_text():
    """``analyze sweep`` on the committed grid subset (tests/data/sweep): the 2.7B training run's top
    kernel ``at::native::<unnamed>::...`` is text, not an HTML tag GitHub would drop, the attention
    note's ``B*H*T*T`` is not emphasis, and nothing is active or shown escaped."""
    from analyzer.phases.render import render_sweep
    from analyzer.phases.sweep import build_sweep
    from analyzer.testing import DATA_DIR

    if not any((DATA_DIR / "sweep").glob("*.sqlite.xz")):
        pytest.skip("tests/data/sweep not in this checkout")
    md = render_sweep(build_sweep([DATA_DIR / "sweep"]), "md")
    assert check_inert(md, set()) == []
    texts = seen(md)[0]
    assert stray_backslashes(texts) == []
    assert any("at::native::<unnamed>::distribution" in x for x in texts)
    assert any("B*H*T*T" in x for x in texts)


# -- injection strings through the real pipeline ---------------------------------------------------------

def _poisoned_analysis(name: str):
    from analyzer.analysis import Analysis
    from analyzer.facts import FactStore
    from analyzer.loading import load_trace
    from analyzer.testing import real_trace
    from analyzer.window import choose_window

    trace = load_trace(real_trace(name))
    k, n = trace.kernels, trace.nvtx
    for i, col in enumerate(("name", "short_name")):
        k[col] = k[col].astype(object)
        for j, text in enumerate(INJECTIONS):
            k.loc[k.index[j::len(INJECTIONS)], col] = text
    for col in ("text", "path"):
        n[col] = n[col].astype(object)
        for j, text in enumerate(INJECTIONS):
            n.loc[n.index[j::len(INJECTIONS)], col] = text
    trace.processes["name"] = INJECTIONS[0]
    window = choose_window(trace, None, exclude=("warmup*",))
    return Analysis(trace=trace, window=window, findings=[], facts=FactStore(trace, window, {}))


def _reader_sees(text: str) -> str:
    return " ".join(inert_text(text).split()).replace(ZWJ, "")  # control characters shown as U+FFFD


def test_injected_names_of_a_real_trace_render_as_the_text_they_are():
    from analyzer.reports import build_report, render

    report = build_report([_poisoned_analysis("dataloader_starved")], title=INJECTIONS[3], created=CREATED)
    md = render(report, "md")
    assert check_inert(md, set(), entities=False) == []
    texts = [t.replace(ZWJ, "") for t in seen(md)[0]]
    assert any(_reader_sees(INJECTIONS[3]) in t for t in texts)  # the title, as typed
    shown = [s for s in INJECTIONS if any(_reader_sees(s) in t for t in texts)]
    assert len(shown) >= 5, shown  # the kernel / NVTX tables show the names as they are


def test_injected_names_in_a_diff_of_real_traces_render_as_text():
    from analyzer.diff.compare import DiffSettings, diff_runs
    from analyzer.diff.report import render_diff_markdown
    from analyzer.pipeline import analyze_trace
    from analyzer.reports.baseline import summarize
    from analyzer.testing import real_trace

    def poisoned(name: str):
        s = summarize(analyze_trace(real_trace(name)))
        kernels = tuple(replace(r, name=INJECTIONS[i % len(INJECTIONS)] + f" {i}",
                                key=INJECTIONS[i % len(INJECTIONS)] + f" {i}")
                        for i, r in enumerate(s.kernels.rows))
        return replace(s, name=INJECTIONS[0], path="/tmp/" + INJECTIONS[5],
                       kernels=replace(s.kernels, rows=kernels))

    result = diff_runs(poisoned("dataloader_starved"), poisoned("dataloader_starved_fixed"), DiffSettings(),
                       created=CREATED)
    md = render_diff_markdown(result)
    assert check_inert(md, set(), entities=False) == []
    texts = [t.replace(ZWJ, "") for t in seen(md)[0]]
    assert any(_reader_sees("/tmp/" + INJECTIONS[5]) in t for t in texts)  # the path, in a code span
    assert not any("&gt;" in t or "-\\>" in t for t in texts)  # "30.3 -> 13.6 ms", not an entity


# -- the escaping functions on arbitrary text ------------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="\x7f"), max_size=60)


@pytest.mark.parametrize("text", INJECTIONS)
def test_injections_are_inert_text(text):
    for block in (False, True):
        md = md_text(text, block=block)
        lead = "" if block else "x "  # inline text (block=False) never starts a paragraph
        assert check_inert(lead + md, set(), entities=False) == []
        assert [t.replace(ZWJ, "") for t in seen(lead + md)[0]] == [lead + _reader_sees(text)]


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(TEXT, st.booleans())
def test_md_text_shows_exactly_its_text(text, block):
    lead = "" if block else "x "  # inline text (block=False) never starts a paragraph
    want = _reader_sees(text)
    hypothesis.assume(want)
    texts, links, tags = seen(lead + md_text(text, block=block))
    want = lead + want
    assert (links, tags) == ([], [])
    assert [t.replace(ZWJ, "") for t in texts] == [want]
    assert mentions(texts[0]) == []


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(TEXT)
def test_md_code_is_one_code_span_of_its_text(text):
    want = " ".join(inert_text(text).split())
    hypothesis.assume(want.strip())
    md = "x " + md_code(text)
    tokens = renderer().parseInline(md)[0].children
    assert [t.type for t in tokens] == ["text", "code_inline"]
    assert tokens[1].content == want.strip() if want.strip() != want else tokens[1].content == want


def test_md_prose_keeps_code_spans_verbatim():
    md = md_prose("wrap `step_N/load_batch` in `torch.no_grad()` & see @user")
    texts, links, tags = seen(md)
    assert texts == [f"wrap step_N/load_batch in torch.no_grad() & see \u200d@{ZWJ}user"]
    assert "`step_N/load_batch`" in md and "\\_" not in md.split("&")[0]
