"""Facts freed after their last reader (FactStore.plan_reads), on real committed traces: the report
reads only REPORT_FACTS, nothing is computed twice, freed facts and the phase index are gone after the
rules, and reports are the same bytes as from an analysis that kept every fact."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from analyzer.analysis import REPORT_FACTS
from analyzer.facts import FactStore
from analyzer.facts.registry import dependency_order
from analyzer.loading import load_trace
from analyzer.pipeline import AnalysisOptions, analyze_loaded, finish, load_rules, prepare
from analyzer.reports import build_report, render

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
CASES = [
    ("healthy.sqlite.xz", {}),
    ("host_sync.sqlite.xz", {"window_spec": "full"}),
    ("callstacks/host_sync_bt.sqlite.xz", {}),
    ("gpu_metrics/fp32_gemm_gm.sqlite.xz", {}),
    ("power/fp32_gemm_pw.sqlite.xz", {"power_files": (DATA / "power" / "fp32_gemm_pw.power.csv",)}),
]


def _reports(analysis) -> list[str]:
    view = build_report([analysis], created=CREATED)
    return [render(view, fmt) for fmt in ("json", "md", "html")]


@pytest.mark.parametrize(("name", "options"), CASES, ids=[c[0] for c in CASES])
def test_freed_facts_leave_reports_unchanged(name: str, options: dict) -> None:
    opts = AnalysisOptions(**options)
    pack = load_rules(opts)
    trace = load_trace(DATA / name)
    planned = analyze_loaded(trace, pack, options=opts)  # keeps REPORT_FACTS only
    store = planned.facts
    assert isinstance(store, FactStore)
    reads: list[str] = []
    real_get = store.get
    depth = [0]

    def recording_get(fact: str) -> pd.DataFrame:  # the report's own reads (not a fact's inside it)
        if depth[0] == 0:
            reads.append(fact)
        depth[0] += 1
        try:
            return real_get(fact)
        finally:
            depth[0] -= 1

    store.get = recording_get  # type: ignore[method-assign,assignment]
    planned_reports = _reports(planned)
    # the report read only facts the pipeline kept for it, and no fact was computed twice
    assert set(reads) <= REPORT_FACTS, sorted(set(reads) - REPORT_FACTS)
    assert {n: c for n, c in store.computations.items() if c > 1} == {}
    # what is left is what the report needed (and what those facts were computed from)
    assert set(store.computed()) <= set(dependency_order(sorted(REPORT_FACTS)))
    assert "phase_index" not in store._memo
    # a store that kept everything gives the same reports
    kept = finish(prepare(trace, opts), pack)
    assert _reports(kept) == planned_reports


def test_a_freed_fact_read_again_is_computed_again_the_same() -> None:
    opts = AnalysisOptions()
    trace = load_trace(DATA / "healthy.sqlite.xz")
    analysis = analyze_loaded(trace, load_rules(opts), options=opts)
    store = analysis.facts
    assert isinstance(store, FactStore)
    assert "kernel_categories" not in store.computed()  # read by rules and report facts only
    assert store.computations["kernel_categories"] == 1
    again = store.get("kernel_categories")
    assert store.computations["kernel_categories"] == 2
    pd.testing.assert_frame_equal(again, prepare(trace, opts).get("kernel_categories"), check_exact=True)


def test_plan_frees_after_the_last_reader_and_computes_kept_facts_early() -> None:
    trace = load_trace(DATA / "healthy.sqlite.xz")
    store = prepare(trace, AnalysisOptions())
    store.plan_reads([("gpu_gaps",), ("phases",), ("gpu_gaps", "launch_stats")], keep=("nvtx_projection",))
    store.get("gpu_gaps")
    assert {"gpu_ops", "gpu_gaps"} <= set(store.computed())  # gpu_ops: nvtx_projection needs it later
    store.done_with(("gpu_gaps",))
    assert "gpu_gaps" in store.computed()  # a third reader still reads it
    store.get("phases")
    assert "phase_index" in store._memo
    store.done_with(("phases",))
    # phases is read; nvtx_instances (which nvtx_projection needs) was the last to need the index: it
    # was computed at once and the index freed; then nvtx_projection had all its inputs at hand and
    # was the last to need them (nvtx_instances, gpu_ops): computed, and they were freed
    assert set(store.computed()) == {"gpu_gaps", "nvtx_projection"}
    assert "phase_index" not in store._memo
    store.get("launch_stats")
    store.done_with(("gpu_gaps", "launch_stats"))
    assert set(store.computed()) == {"nvtx_projection"}
    store.get("nvtx_projection")
    assert {n: c for n, c in store.computations.items() if c > 1} == {}


def test_without_a_plan_every_fact_is_kept() -> None:
    store = prepare(load_trace(DATA / "healthy.sqlite.xz"), AnalysisOptions())
    store.get("phases")
    store.get("nvtx_instances")
    store.done_with(("phases", "nvtx_instances"))  # no plan: nothing to do
    assert {"phases", "nvtx_instances"} <= set(store.computed()) and "phase_index" in store._memo


def test_phase_index_is_freed_before_the_timeline_segments_are_built() -> None:
    """The phase index (GPU ops expanded onto every enclosing NVTX range: 130 MB at a million kernels)
    is freed as soon as its last user can be computed, here before the timeline segments (the largest
    transient of the analysis) are built: ``phases`` is computed as soon as ``nvtx_instances``, the
    index's other user, is at hand, not after the reader that built the segments is done."""
    from analyzer.facts.scalars import SCALAR_FACTS

    store = prepare(load_trace(DATA / "host_sync.sqlite.xz"), AnalysisOptions())
    store.plan_reads([SCALAR_FACTS, ("gpu_gaps",)], keep=REPORT_FACTS)
    held: list[bool] = []
    compute = store._compute

    def spy(spec):  # type: ignore[no-untyped-def]
        if spec.name == "timeline_segments":
            held.append("phase_index" in store._memo)
        return compute(spec)

    store._compute = spy  # type: ignore[method-assign]
    store.get("timeline_breakdown")
    assert held == [False]
    assert {"phases", "nvtx_instances", "steps"} <= set(store.computed())


def test_the_timeline_segments_are_freed_before_the_other_rules_build_their_facts(monkeypatch) -> None:
    """The rules reading the largest fact (``timeline_segments``, computed alone: 48 M rows, about 2 GB at
    10 M kernels) are evaluated first (:func:`analyzer.rules.engine.evaluation_order`), so it is freed
    after them, before the facts of the other rules (``launch_stats``, ``occupancy``...) are built beside
    it; the findings stay in pack order and are the same as from a store that kept every fact."""
    from analyzer.rules.engine import evaluation_order

    monkeypatch.setenv("ANALYZER_FACT_THREADS", "1")
    opts = AnalysisOptions()
    pack = load_rules(opts)
    order = [pack.rules[i].id for i in evaluation_order(pack.rules)]
    readers = [r.id for r in pack.rules if "timeline_segments" in r.reads]
    assert {"GPU004", "GPU005", "LNC003", "SYN001"} <= set(readers)
    assert order[:len(readers)] == readers  # first, in pack order; then the others in pack order
    assert order[len(readers):] == [r.id for r in pack.rules if r.id not in readers]
    trace = load_trace(DATA / "host_sync.sqlite.xz")
    held: dict[str, bool] = {}
    real_prepare = prepare(trace, opts)
    compute = FactStore._compute

    def spy(self, spec):  # type: ignore[no-untyped-def]
        held.setdefault(spec.name, "timeline_segments" in self.computed())
        return compute(self, spec)

    monkeypatch.setattr(FactStore, "_compute", spy)
    planned = analyze_loaded(trace, pack, options=opts)
    assert held["timeline_breakdown"] is True  # built from the segments
    assert held["launch_stats"] is False and held["occupancy"] is False
    assert isinstance(planned.facts, FactStore)
    assert "timeline_segments" not in planned.facts.computed()
    kept = finish(real_prepare, pack)  # every fact kept, rules evaluated as above
    assert [(f.id, f.message, f.impact_ns) for f in planned.findings] == [
        (f.id, f.message, f.impact_ns) for f in kept.findings]
    assert {f.id for f in planned.findings} >= {"SYN001"}  # a reader of the segments fired
