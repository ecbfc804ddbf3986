"""The verdict on real traces: its total is the union of the problems' time (never double-counted), its
biggest is the first row of the findings table, symptoms are shown as what the causes explain, and
the numbers agree in the JSON, Markdown and terminal renderings. The traces: four nsys recordings of
round 1, two of round 3 on an H200 (a torch.compile training loop under torch.profiler, and an eager
loop launch-bound in two NVTX ranges) and TraceLens' SGLang prefill on an MI300X (ROCm)."""
from __future__ import annotations

import functools
import html
import json
import re
from pathlib import Path

import markupsafe
import pytest

from analyzer.impacts import is_problem, report_order
from analyzer.pipeline import AnalysisOptions, analyze_paths
from analyzer.reports import build_report, render
from analyzer.reports.summary import summary_text
from analyzer.reports.sections.findings import cause_name
from analyzer.reports.viewmodel import BREAKDOWN_CAUSES

DATA = Path(__file__).resolve().parent / "data"
# a data-loading gap per step; host syncs + fp32 GEMMs + tiny kernels; allocation churn whose gaps are
# also idle gaps (two causes on the same time); a launch-bound loop; torch.compile'd code launch-bound
# (torch.profiler, two symptoms); an eager loop launch-bound in two NVTX ranges (one rule, two rows); a
# ROCm inference trace
TRACES = ("dataloader_starved.sqlite.xz", "host_sync.sqlite.xz", "alloc_churn.sqlite.xz", "tiny_kernels.sqlite.xz",
          "round3/compile_train.pt.trace.json.gz", "round3/optimizer_loop_fixed.sqlite.xz",
          "public/tracelens_sglang_prefill_mi300x.pt.trace.json.xz")


@functools.cache
def _analyzed(name: str):
    analysis = analyze_paths([DATA / name], AnalysisOptions())[0]
    return analysis, build_report([analysis])


@pytest.fixture(scope="module", params=TRACES)
def case(request):
    return _analyzed(request.param)


def _union_by_sweep(findings) -> float:
    """The union of the findings' time, computed independently of analyzer.impacts: a sweep over the
    footprints' edges keeping the densities of the findings open at each point (the largest counts),
    plus the impact no footprint holds."""
    events: dict[int, list[tuple[int, int, float]]] = {}
    unplaced = 0.0
    for i, f in enumerate(findings):
        fp = f.footprint
        length = fp.length_ns if fp is not None else 0
        if length <= 0:
            unplaced += f.impact_ns
            continue
        density = min(1.0, f.impact_ns / length)
        unplaced += max(0, f.impact_ns - length)
        for d, s, e in zip(fp.device.tolist(), fp.start.tolist(), fp.end.tolist()):
            events.setdefault(d, []).extend([(s, 1, i, density), (e, -1, i, density)])
    total = 0.0
    for evs in events.values():
        evs.sort()
        open_: dict[int, float] = {}
        last = None
        for t, kind, i, density in evs:
            if last is not None and open_:
                total += (t - last) * max(open_.values())
            if kind > 0:
                open_[i] = density
            else:
                open_.pop(i, None)
            last = t
    return total + unplaced


def test_total_is_the_union_of_the_problems_time(case):
    analysis, report = case
    h = report.traces[0].header
    problems = [f for f in analysis.findings if is_problem(f) and f.impact_ns is not None]
    assert problems and all(f.footprint is not None and len(f.footprint) for f in problems)
    assert h.problem_impact_ns == pytest.approx(_union_by_sweep(problems), abs=len(problems))
    assert max(f.impact_ns for f in problems) <= h.problem_impact_ns <= sum(f.impact_ns for f in problems)
    assert h.problem_impact_sum_ns == sum(f.impact_ns for f in problems)
    assert h.problem_impact_ns <= h.analyzed_ns  # one GPU: never more than the window
    views = [f for f in report.traces[0].findings if f.adds_ns is not None]
    assert sum(f.adds_ns for f in views) == h.problem_impact_ns


def test_time_two_causes_share_is_counted_once():
    """On at least one committed trace two causes name the same time (allocation calls inside idle gaps,
    launch overhead inside launch-bound idle time): the total is less than the sum of the impacts, by
    the shared time, and the tally says so."""
    shared = []
    for name in TRACES:
        h = _analyzed(name)[1].traces[0].header
        if h.problem_impact_sum_ns > h.problem_impact_ns:
            shared.append(name)
            assert "time they share, counted once" in h.tally
        else:
            assert "no two of them share time" in h.tally or "impact of the 1 problem" in h.tally
    assert shared


def test_biggest_is_the_first_row_and_symptoms_follow_the_causes(case):
    analysis, report = case
    section = report.traces[0]
    first = section.findings[0]
    assert first.rule == report_order(analysis.findings)[0].rule and first.kind == "cause"
    assert first.impact_ns == max(f.impact_ns or 0 for f in section.findings if f.kind == "cause")
    verdict = section.header.verdict
    lead = next(f for f in analysis.findings if f.key == first.key).headline
    assert verdict.startswith(lead + ". ") if lead else f"biggest: {first.title}" in verdict
    kinds = [f.kind for f in section.findings if f.severity != "info"]
    assert kinds == sorted(kinds)  # "cause" < "symptom": every symptom after every cause
    symptoms = [f for f in section.findings if f.kind == "symptom"]
    for f in symptoms:
        assert f.adds_ns is None and f.explained
    if symptoms:  # the biggest symptom, with what explains it
        assert symptoms[0].explained in verdict


def test_low_utilization_is_a_symptom_explained_by_its_causes():
    report = build_report(analyze_paths([DATA / "dataloader_starved.sqlite.xz"], AnalysisOptions()))
    section = report.traces[0]
    low = next(f for f in section.findings if f.rule == "low-gpu-utilization")
    causes = [f for f in section.findings if f.kind == "cause" and f.severity != "info"]
    assert low.kind == "symptom" and low.rank > max(f.rank for f in causes)
    explained = low.record["explained"]
    assert explained["by"] and {p["rule"] for p in explained["by"]} <= {f.rule for f in causes}
    assert explained["explained_ns"] + explained["unexplained_ns"] == low.impact_ns
    assert explained["explained_ns"] >= 0.9 * low.impact_ns  # the data-loading stall is most of the idle time
    assert low.explained in section.header.verdict


def _md_unescape(text: str) -> str:
    return html.unescape(re.sub(r"\\(.)", r"\1", text))


def test_numbers_agree_across_formats(case):
    analysis, report = case
    doc = json.loads(render(report, "json"))
    md = render(report, "md")
    term = summary_text(report, width=400)
    trace = doc["traces"][0]
    verdict = trace["summary"]["verdict"]
    # the same verdict in every format (Markdown escapes it, the terminal prints it as it is)
    md_verdict = re.search(r"^\*\*Verdict:\*\* (.*)$", md, re.M).group(1)
    assert _md_unescape(md_verdict) == verdict
    assert f"  verdict: {verdict}" in term.splitlines()
    page = render(report, "html")
    assert f'<span class="verdict-text">{markupsafe.escape(verdict)}</span>' in page
    for f in trace["findings"]:  # the HTML table's impact cells
        if f["impact_ns"] is not None:
            assert f'<td class="num">{f["impact_pct"]:.1f}%</td>' in page
    # its total and share are the summary's numbers
    total = trace["summary"]["problem_impact_ns"]
    m = re.search(r"worth ([\d.,]+) ms \(([\d.]+)% of the analyzed time", verdict)
    assert float(m.group(1).replace(",", "")) == pytest.approx(total / 1e6, rel=0.006)
    assert float(m.group(2)) == pytest.approx(100 * total / trace["window"]["duration_ns"], abs=0.051)
    assert float(m.group(2)) <= 100.0
    # every finding's impact: JSON, the Markdown table and the terminal line, row by row (one rule can
    # have several rows: launch-bound per NVTX range)
    rows = re.findall(r"^\| (\d+) \| [^|]+\| (\S+) (\S+) \| ([\d.,—]+) \| ([\d.]+%|—) \| (.*) \|$", md, re.M)
    assert len(rows) == len(trace["findings"])
    lines = [ln for ln in term.splitlines() if re.match(r"^  [WEis] ", ln)]
    assert [ln.split()[1] for ln in lines] == [f["id"] for f in trace["findings"]]
    for f, (rank, fid, rule, ms, pct, _), line in zip(trace["findings"], rows, lines):
        assert fid == f["id"] and _md_unescape(rule) == f["rule"]
        if f["impact_ns"] is None:
            assert ms == "—"
            continue
        assert float(ms.replace(",", "")) == pytest.approx(f["impact_ns"] / 1e6, abs=0.051)
        assert float(pct.rstrip("%")) == pytest.approx(f["impact_pct"], abs=0.051) and f["impact_pct"] <= 100
        assert f"{float(pct.rstrip('%')):.1f}%" in line
    # each symptom's explanation: the same parts in the JSON record and in its Markdown row; the
    # biggest symptom's in the verdict too
    symptoms = [(f, row[-1]) for f, row in zip(trace["findings"], rows) if f["kind"] == "symptom"]
    for i, (f, message) in enumerate(symptoms):
        for part in f["explained"]["by"]:
            share = 100 * part["ns"] / trace["window"]["duration_ns"]
            if f"{share:.1f}" != "0.0":  # parts under 0.05% of the window are not listed
                said = f"{cause_name(part['rule'], part['range'])} ({share:.1f}%)"
                assert said in _md_unescape(message)
                assert i > 0 or said in verdict


def test_markdown_verdict_and_symptom_rows_render_as_text(case):
    """What the verdict and the symptom rows take from the trace (NVTX names, code locations in
    backticks) renders as plain text: no code span, emphasis or link appears in the rendered HTML."""
    markdown_it = pytest.importorskip("markdown_it")
    _, report = case
    md = render(report, "md")
    verdict_line = next(ln for ln in md.splitlines() if ln.startswith("**Verdict:**"))
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(verdict_line)
    assert rendered.count("<strong>") == 1 and "<code>" not in rendered and "<em>" not in rendered
    assert "<a " not in rendered
    lines = md.splitlines()
    first = lines.index("| # | Severity | Rule | Impact (ms) | % of window | Finding |")
    last = next(i for i in range(first, len(lines)) if not lines[i].startswith("|"))
    table = "\n".join(lines[first:last])
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(table)
    assert rendered.count("<tr>") == len(report.traces[0].findings) + 1  # every row stays one table row
    assert "<code>" not in rendered


def test_readme_shows_the_demo_report_as_the_code_writes_it():
    """The README's Markdown excerpt is the opening of the demo trace's report, as the reference reports
    hold it (tests/test_reference_reports.py checks those against the code)."""
    readme = (DATA.parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```markdown\n(.*?)\n```", readme, re.S).group(1)
    reference = (DATA / "reference-reports" / "dataloader_starved.md").read_text(encoding="utf-8")
    assert reference.startswith(block + "\n"), ("README's excerpt differs from the demo report: copy the "
                                                 "opening of tests/data/reference-reports/dataloader_starved.md")


def test_breakdown_agrees_across_formats(case):
    """The timeline breakdown: in the JSON it sums to the window; the Markdown table, the terminal line and
    the HTML charts show the same shares."""
    _, report = case
    doc = json.loads(render(report, "json"))
    trace = doc["traces"][0]
    (b,) = trace["overview"]["breakdown"]
    window = trace["window"]["duration_ns"]
    assert b["window_ns"] == window and sum(b["causes"].values()) == window
    assert all(ns > 0 for ns in b["causes"].values())
    for bar in b["steps"] + b["ranges"]:
        assert sum(bar["causes"].values()) == bar["total_ns"]
    assert sum(bar["total_ns"] for bar in b["steps"]) <= window
    # the terminal prints the JSON's one-line summary; its shares are the causes' shares of the window
    term = summary_text(report, width=400)
    assert f"  time on GPU {b['device']}: {b['summary']}" in term.splitlines()
    labels = dict(BREAKDOWN_CAUSES)
    for cause, ns in b["causes"].items():
        assert f"{labels[cause]} {100 * ns / window:.1f}%" in b["summary"]
    # the Markdown table: one row per cause, same time shares
    md = render(report, "md")
    rows = re.findall(r"^\| ([a-z -]+) \| [^|]+ \| ([\d.]+)% \| .* \|$", md, re.M)
    shown = {cause: float(pct) for cause, pct in rows if cause in labels.values()}
    assert shown == {labels[c]: pytest.approx(100 * ns / window, abs=0.051) for c, ns in b["causes"].items()}
    # the HTML: a stacked bar of the window, and of the steps and ranges when there are any
    page = render(report, "html")
    assert page.count('<svg class="chart breakdown"') == 1 + bool(b["steps"]) + bool(b["ranges"])


def _one_rule_pack(tmp_path, body: str):
    from analyzer.rules.loader import load_pack

    path = tmp_path / "pack.yaml"
    path.write_text("version: 1\nrules:\n" + body, encoding="utf-8")
    return load_pack(str(path))


def test_footprint_of_breakdown_rows_is_their_timeline_segments(tmp_path):
    """A rule over the breakdown (no times in its rows) gets the timeline segments the breakdown summed:
    its footprint is exactly its impact, so the union counts it at full density."""
    from analyzer.rules.engine import evaluate

    pack = _one_rule_pack(tmp_path, """
  - id: TST001
    name: host-work-time
    title: t
    severity: warning
    scope: device
    source: timeline_breakdown
    where: scope == "range" and cause == "host_work"
    let:
      held: sum(duration_ns)
    condition: held > 0
    impact: held
    message: m
    what: w
    why: y
    fix: f
""")
    analysis = analyze_paths([DATA / "dataloader_starved.sqlite.xz"], AnalysisOptions())[0]
    (finding,) = evaluate(pack, analysis.facts, analysis.window, {})
    assert pack.rules[0].reads == ("timeline_breakdown", "timeline_segments")
    assert finding.footprint.source == "breakdown"
    assert finding.footprint.length_ns == finding.impact_ns > 0.5 * analysis.window.duration_ns


def test_tiny_kernels_footprint_is_the_idle_time_before_them():
    """tiny-kernels' impact is launch overhead: its footprint is the idle gaps that end where its kernels
    start, not the kernels' own (busy) time, so it never overlaps the kernel-time findings."""
    analysis = analyze_paths([DATA / "tiny_kernels.sqlite.xz"], AnalysisOptions())[0]
    by_rule = {f.rule: f for f in analysis.findings}
    tiny = by_rule["tiny-kernels"]
    assert tiny.footprint.source == "idle_before"
    gaps = analysis.facts.get("gpu_gaps")
    assert tiny.impact_ns <= tiny.footprint.length_ns <= int(gaps["duration"].sum())
    assert set(tiny.footprint.end.tolist()) <= set(gaps["end"].tolist())
    report = build_report([analysis])
    adds = {f.rule: f.adds_ns for f in report.traces[0].findings}
    launch = by_rule["launch-bound"]
    assert adds["launch-bound"] == launch.impact_ns  # first row: all of it
    # the idle gaps before the tiny kernels are launch-bound time already: tiny-kernels adds little
    assert adds["tiny-kernels"] <= 0.05 * tiny.impact_ns



def test_host_wait_footprints_are_their_calls_host_sync_segments():
    """host-sync-in-loop and sync-memcpy (balanced host_sync: host and GPU take turns) hold the breakdown's
    host-sync time of their calls, waits and refills: each footprint is exactly its impact, the two share
    no time, and the verdict's total is their sum, the host-sync time the breakdown table shows."""
    path = DATA / "round3" / "host_sync_balanced.sqlite.xz"
    if not path.is_file():
        pytest.skip("round3/host_sync_balanced not in tests/data")
    analysis = analyze_paths([path], AnalysisOptions())[0]
    by_rule = {f.rule: f for f in analysis.findings}
    sync, copy = by_rule["host-sync-in-loop"], by_rule["sync-memcpy"]
    for f in (sync, copy):
        assert f.footprint.source == "host" and f.footprint.length_ns == f.impact_ns
    report = build_report([analysis])
    adds = {f.rule: f.adds_ns for f in report.traces[0].findings}
    assert adds["host-sync-in-loop"] + adds["sync-memcpy"] == sync.impact_ns + copy.impact_ns
    seg = analysis.facts.get("timeline_segments")
    held = seg.loc[seg["cause"] == "host_sync", "duration"].sum()
    assert sync.impact_ns + copy.impact_ns == held
