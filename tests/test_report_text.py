"""Report text speaks to the reader about their trace, never about the project's own test traces.

The calibration of each rule (which committed traces, what they measured) lives in the rule's
``calibration`` field, rendered only in docs/rules.md and ``analyze rules explain``. These tests check
the default pack's reader-facing fields and, end to end, the three renderings of real reports.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from analyzer.pipeline import AnalysisOptions, analyze_trace, default_rules_path
from analyzer.reports import build_report, render
from analyzer.reports.viewmodel import BREAKDOWN_CAUSES
from analyzer.rules import load_pack
from analyzer.testing import DATA_DIR, real_file, real_trace

READER_FIELDS = ("title", "what", "why", "fix", "message")
#: project-speak that means nothing to a user reading a report of their own trace
PROJECT_WORDS = ("tests/data", "fixed twin", "our traces", "the team's", "the transformer traces",
                 "the real occupancy workload", "on healthy")


def committed_trace_names() -> set[str]:
    """Stems of every committed trace and export (``dataloader_starved``, ``small_training_ctx128``,
    ``naive_attention_fixed``...) and the workload names they share. Single words that are also
    ordinary English (``healthy``, ``occupancy``) are left to PROJECT_WORDS."""
    names: set[str] = set()
    for path in [*DATA_DIR.glob("*.sqlite*"), *DATA_DIR.glob("*.nsys-rep"), *(DATA_DIR / "ncu").glob("*.csv")]:
        stem = path.name.split(".")[0]
        names.add(stem)
        names.add(stem.removesuffix("_fixed"))
    return {n for n in names if "_" in n}


def offending(text: str, names: set[str]) -> list[str]:
    found = [n for n in names if re.search(rf"(?<![\w/]){re.escape(n)}(?!\w)", text)]
    low = text.lower()
    return sorted(found + [w for w in PROJECT_WORDS if w in low])


def test_the_committed_names_are_found() -> None:
    names = committed_trace_names()
    if not names:
        pytest.skip("no committed traces in this checkout")
    assert {"dataloader_starved", "tiny_kernels", "naive_attention", "small_training_ctx128"} <= names
    assert offending("On dataloader_starved the GPU was busy 42.9%", names) == ["dataloader_starved"]
    assert offending("the fixed twin cut the step", names) == ["fixed twin"]
    assert offending("tiny kernels, data loader starved", names) == []


def test_default_pack_reader_fields_name_no_test_trace() -> None:
    names = committed_trace_names() | {"dataloader_starved", "tiny_kernels", "pageable_h2d", "host_sync",
                                       "naive_attention", "fp32_gemm", "alloc_churn"}
    pack = load_pack(default_rules_path())
    problems = {}
    for rule in pack:
        for field in READER_FIELDS:
            bad = offending(getattr(rule, field), names)
            if bad:
                problems[f"{rule.id}.{field}"] = bad
    assert not problems, f"move these to the rule's `calibration` field: {problems}"


def test_calibration_is_in_the_docs_only() -> None:
    pack = load_pack(default_rules_path())
    calibrated = [r for r in pack if r.calibration]
    assert len(calibrated) >= 15  # every trace-calibrated rule of the default pack says how
    docs = (Path(__file__).resolve().parents[1] / "docs" / "rules.md").read_text(encoding="utf-8")
    for rule in calibrated:
        assert " ".join(rule.calibration.split())[:60] in " ".join(docs.split()), rule.id


CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("name,ncu", [
    ("dataloader_starved", None),        # four findings incl. the verdict
    ("host_sync", None),                 # syncs, readbacks, small grids, setup
    ("occupancy", "occupancy.raw.csv"),  # trace and ncu rules on one kernel
])
def test_reports_of_real_traces_name_no_other_test_trace(name: str, ncu: str | None) -> None:
    options = AnalysisOptions()
    ncu_report = None
    if ncu:
        from analyzer.loading.ncu import load_ncu

        ncu_report = load_ncu([real_file(f"ncu/{ncu}")])
    analysis = analyze_trace(real_trace(name), options=options, ncu=ncu_report)
    assert analysis.findings
    names = committed_trace_names()
    for finding in analysis.findings:
        for field in ("title", "message", "what", "why", "fix"):
            assert offending(getattr(finding, field), names) == [], (finding.rule, field)
    report = build_report([analysis], created=CREATED)
    for fmt in ("html", "md", "json"):
        text = render(report, fmt)
        # the report names its own input file (and its folder): that is the reader's trace
        own = {name, f"{name}.sqlite", f"{name}.sqlite.xz", ncu or "", str(real_trace(name))}
        for word in sorted(own, key=len, reverse=True):
            if word:
                text = text.replace(word, "")
        if fmt == "json":  # the timeline breakdown's causes are schema words (one is named like a trace)
            text = re.sub(r'"(?:%s)"' % "|".join(c for c, _ in BREAKDOWN_CAUSES), '""', text)
        assert offending(text, names) == [], fmt
