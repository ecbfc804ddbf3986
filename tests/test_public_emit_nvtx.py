"""Held-out public nsys traces recorded under PyTorch's ``torch.autograd.profiler.emit_nvtx()``
(tests/data/MANIFEST.md, "Held-out public traces"): every operator and ``record_function`` scope is
an NVTX range whose text ends in per-call numbers (``FlashAttnFunc, seq = 46588, op_id = 995009``).

Two captures of one FSDP training program on two H100s (nsys 2026.2.1, export schema 3.25.0), before
and after a change: the same operators, so their phases must match from one capture to the other.
"""
from __future__ import annotations

import lzma
import re
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import pytest

from analyzer.loading import load_trace
from analyzer.pipeline import AnalysisOptions, analyze_paths, load_rules
from analyzer.reports.baseline import RunSummary, summarize

PUBLIC = Path(__file__).resolve().parent / "data" / "public"
BEFORE = PUBLIC / "nsysai_mfu_2gpu_before.sqlite.xz"
AFTER = PUBLIC / "nsysai_mfu_2gpu_after.sqlite.xz"


def _raw_texts(path: Path) -> list[str]:
    """The NVTX range texts as the export stores them, read with sqlite3, not the analyzer's loader."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "t.sqlite"
        db.write_bytes(lzma.decompress(path.read_bytes()))
        con = sqlite3.connect(db)
        try:
            rows = con.execute("SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n "
                               "LEFT JOIN StringIds s ON s.id = n.textId "
                               "WHERE n.end IS NOT NULL AND n.end > n.start").fetchall()
        finally:
            con.close()
    return [r[0] for r in rows]


def test_emit_nvtx_texts_name_the_operator_and_autograd_ops_are_operators():
    raw = _raw_texts(BEFORE)
    assert sum(", op_id = " in t for t in raw) > 0.9 * len(raw)  # the decoration is on nearly every range
    nv = load_trace(BEFORE).nvtx
    texts = nv["text"].astype(str)
    assert not texts.str.contains(r", (?:op_id|seq) = \d", regex=True).any()
    # the names are the raw texts cut before the first ", seq = " / ", op_id = ", one range for one
    expected = Counter(re.split(r", (?:seq|op_id) = ", t)[0] for t in raw)
    got = Counter(texts[nv["kind"] == "pushpop"])
    for name in ("aten::linear", "FlashAttnFunc", "detach_"):
        assert got[name] == expected[name] > 0, name
    domain = dict(zip(texts, nv["domain"].astype(str)))
    # autograd recorded these (a seq number): operators, as torch.profiler's cpu_op category says
    assert domain["FlashAttnFunc"] == domain["aten::linear"] == "cpu_op"
    # FSDP's record_function scopes carry an op_id only: annotations, as in torch.profiler
    assert all(d == "" for t, d in domain.items() if t.startswith("FSDP::pre_forward"))


@pytest.fixture(scope="module")
def summaries() -> dict[str, RunSummary]:
    pack = load_rules(AnalysisOptions())
    return {p.name: summarize(analyze_paths([p], AnalysisOptions(), pack=pack)[0]) for p in (BEFORE, AFTER)}


def test_the_same_program_has_the_same_phases_in_both_captures(summaries):
    """What ``analyze diff`` compares: before the per-call numbers were cut, 12,015 distinct phases
    (every call its own) and 0.01% of HEAD's GPU time in phases BASE also had; now a few hundred, and
    nearly all of HEAD's GPU time is in phases BASE has too."""
    base, head = summaries[BEFORE.name].phases, summaries[AFTER.name].phases
    for table in (base, head):
        assert 0 < table.total_rows < 1000
        assert not any("op_id" in r.path or "seq =" in r.path for r in table.rows)
    in_base = {r.path for r in base.rows}
    total = sum(r.gpu_ns for r in head.rows)
    shared = sum(r.gpu_ns for r in head.rows if r.path in in_base)
    assert shared >= 0.95 * total, shared / total
    for table in (base, head):  # the attention operator, most of the GPU time, is one phase in each
        top = {r.path for r in table.rows[:10]}
        assert "FlashAttnFunc" in top, top


def test_each_rank_of_the_job_counts_the_steps_its_own_analysis_found():
    """The FSDP slice has no step ranges: each rank's analysis finds its iterations from one ``detach_``
    annotation to the next, and the job counts those (it said "0 steps" and no step time when it counted
    NVTX step ranges only), saying how they were found."""
    from analyzer.analysis import step_spans
    from analyzer.pipeline import analyze_inputs

    out = analyze_inputs([BEFORE], AnalysisOptions())
    assert out.job is not None
    window = out.job.window
    assert "'detach_' annotation" in window.description
    assert len(step_spans(window)) == 15
    ranks = out.job.tables.tables["job_ranks"]
    for res in out.job.ranks:
        assert res.window.steps is not None and res.window.steps.source == "annotation"
        assert len(res.step_ns) == len(res.window.steps) == 15
    assert (ranks["steps"] == 15).all() and ranks["step_ns"].notna().all()
    assert (ranks["compute_per_step_ns"] > 0).all()


def test_a_job_without_nvtx_steps_does_not_say_zero_steps():
    """The two ranks of AFTER have no NVTX step ranges; each rank's window is its iterations from one
    ``detach_`` annotation to the next (14). The job's header said "279.4 ms (0 steps, ...)" above
    them in the terminal, Markdown and HTML; the job now counts the iterations its ranks' analyses
    found (14) and says how, in every format alike."""
    import analyzer
    from analyzer.reports.summary import summary_text

    result = analyzer.analyze(AFTER)
    job = result.report().job
    assert job is not None and job.steps == 14
    texts = {"terminal": summary_text(result.report()), "md": result.to_markdown(), "html": result.to_html()}
    for fmt, text in texts.items():
        assert "14 steps" in text and " 0 steps" not in text and "(0 steps" not in text, fmt
    assert "iterations from one 'detach_' annotation" in texts["terminal"]
