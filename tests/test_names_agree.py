"""Issue 27: the verdict, the terminal, the Markdown breakdown table, the HTML and the JSON name the same
thing with the same (generic) name and state the same numbers, on committed torch.profiler and nsys traces.

Before: on torch.profiler traces the breakdown table's "Largest part" of host work named one step
(``ProfilerStep#11 (212.1 us)``, tiny_kernels) while the verdict named ``ProfilerStep#N/...``; host work's
detail was the innermost NVTX range of each stretch as recorded, so every step was its own small row.
"""
from __future__ import annotations

import functools
import json
import re

import pytest

from analyzer.facts._util import generic_path
from analyzer.pipeline import AnalysisOptions, analyze_paths
from analyzer.testing import DATA_DIR

TRACES = (
    "kineto/tiny_kernels.pt.trace.json.xz",  # launch-bound in ProfilerStep#N/step_N/update
    "kineto/pageable_h2d.pt.trace.json.xz",  # copy-bound in ProfilerStep#N/step_N/h2d
    "kineto/dataloader_starved.pt.trace.json.xz",  # host work in load_batch
    "round3/optimizer_loop.sqlite.xz",  # nsys: launch-bound in step_N/optimizer
    "round3/host_work_in_range.sqlite.xz",  # nsys: host work in load_weights
)
#: traces whose verdict names no range (a compute-bound one), with host work at the step level (``step_N``)
MORE = ("medium_forward_backward_ctx256.sqlite.xz",)


@functools.cache
def rendered(name: str) -> tuple[object, dict[str, str]]:
    from analyzer.reports import build_report, render
    from analyzer.reports.summary import summary_text

    (analysis,) = analyze_paths([DATA_DIR / name], AnalysisOptions())
    report = build_report([analysis])
    out = {fmt: render(report, fmt) for fmt in ("md", "json", "html")}  # type: ignore[arg-type]
    out["terminal"] = summary_text(report, width=400)
    return analysis, out


def _names(doc: dict) -> set[str]:
    """Every name the JSON breakdown gives: range keys and details."""
    out: set[str] = set()
    for t in doc["traces"]:
        for b in t["overview"].get("breakdown", []):
            out |= {r["key"] for r in b["ranges"]} | {r["detail"] for r in b["details"]["rows"]}
            out |= {x["detail"] for x in b["largest"]}
    return out


@pytest.mark.parametrize("name", TRACES)
def test_the_name_in_the_verdict_is_in_the_breakdown(name):
    if not (DATA_DIR / name).is_file():
        pytest.skip(f"{name} not committed here")
    _, out = rendered(name)
    doc = json.loads(out["json"])
    named = re.findall(r"`([^`]+)`", doc["verdict"])
    assert named, doc["verdict"]
    names = _names(doc)
    for n in named:
        assert n in names or all(p in names for p in n.split(" + ")), (n, sorted(names))
        # the same words in the terminal and the Markdown verdict
        assert n in out["terminal"]
        assert n.replace("_", "\\_") in out["md"]


@pytest.mark.parametrize("name", TRACES + MORE)
def test_host_work_is_named_by_its_generic_range(name):
    """Host work's detail is the range made generic (``ProfilerStep#N``, ``step_N``), as the NVTX paths
    are: one row for the same code in every step, never a concrete instance."""
    if not (DATA_DIR / name).is_file():
        pytest.skip(f"{name} not committed here")
    analysis, out = rendered(name)
    bd = analysis.facts.get("timeline_breakdown")
    details = {str(d) for d in bd.loc[bd["cause"] == "host_work", "detail"]}
    assert details and all(d == generic_path(d) for d in details), details
    assert not re.search(r"ProfilerStep#\d|step\\?_\d", out["md"].split("**Where GPU")[1].split("<details>")[0])


@pytest.mark.parametrize("name", TRACES + MORE)
def test_the_breakdown_numbers_agree_across_surfaces(name):
    """Markdown's table, the JSON's causes and largest parts and the terminal's line state one number
    each: the same share of the window, the same largest part."""
    if not (DATA_DIR / name).is_file():
        pytest.skip(f"{name} not committed here")
    from analyzer.reports.format import fmt_duration, fmt_impact_pct
    from analyzer.reports.viewmodel import cause_label

    _, out = rendered(name)
    doc = json.loads(out["json"])
    (b,) = doc["traces"][0]["overview"]["breakdown"]
    total = b["window_ns"]
    assert sum(b["causes"].values()) == total
    largest = {x["cause"]: x for x in b["largest"]}
    for cause, ns in b["causes"].items():
        if ns <= 0:
            continue
        pct = fmt_impact_pct(100.0 * ns / total)
        label = cause_label(cause)
        part = largest[cause]
        row = (f"| {label} | {fmt_duration(ns)} | {pct} | {part['detail']} ({fmt_duration(part['duration_ns'])}) |"
               .replace("_", "\\_"))
        assert row in out["md"], row
        assert f"{label} {pct}" in b["summary"] and f"{label} {pct}" in out["terminal"]
        assert f"{label} {fmt_duration(ns)} ({pct})" in out["html"]  # the window bar's part
    # the largest part of each cause is the JSON details' first row of that cause
    rows = b["details"]["rows"]
    for cause, part in largest.items():
        first = next((r for r in rows if r["cause"] == cause), None)
        if first is not None:
            assert (first["detail"], first["duration_ns"]) == (part["detail"], part["duration_ns"])
