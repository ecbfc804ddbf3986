"""Facts computed on two threads (FactStore.start_prefetch), on real committed traces: the second thread
really computes facts, each fact is computed once, the findings and reports are the same bytes as from
one thread, and a fact failing on the second thread fails the analysis exactly as it does on one."""
from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from analyzer.facts import FactStore
from analyzer.facts import registry
from analyzer.loading import load_trace
from analyzer.pipeline import AnalysisOptions, analyze_loaded, load_rules
from analyzer.reports import build_report, render
from analyzer.rules.model import RuleEvaluationError
from analyzer.rules import engine

DATA = Path(__file__).resolve().parents[3] / "tests" / "data"
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
TRACES = ["healthy.sqlite.xz", "host_sync.sqlite.xz", "callstacks/host_sync_bt.sqlite.xz",
          "gpu_metrics/fp32_gemm_gm.sqlite.xz"]


def _analyze(trace, monkeypatch: pytest.MonkeyPatch, threads: int, computed_on: dict[str, str] | None = None):
    """The default pack's analysis of ``trace`` on ``threads`` threads; ``computed_on``: filled with the
    thread that computed each fact."""
    opts = AnalysisOptions()
    with monkeypatch.context() as m:
        m.setenv("ANALYZER_FACT_THREADS", str(threads))
        if computed_on is not None:
            real = FactStore._compute

            def recording(self: FactStore, spec: registry.FactSpec) -> pd.DataFrame:
                computed_on[spec.name] = threading.current_thread().name
                return real(self, spec)

            m.setattr(FactStore, "_compute", recording)
        return analyze_loaded(trace, load_rules(opts), options=opts)


def _no_second_thread_left() -> bool:
    for thread in threading.enumerate():
        if thread.name == "analyzer-facts":
            thread.join(30)
    return not any(t.name == "analyzer-facts" for t in threading.enumerate())


def _reports(analysis) -> list[str]:
    view = build_report([analysis], created=CREATED)
    return [render(view, fmt) for fmt in ("json", "md", "html")]


@pytest.mark.parametrize("name", TRACES)
def test_two_threads_compute_each_fact_once_and_give_the_same_reports(name: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    trace = load_trace(DATA / name)
    computed_on: dict[str, str] = {}
    two = _analyze(trace, monkeypatch, 2, computed_on)
    assert "analyzer-facts" in computed_on.values(), "the second thread computed nothing"
    assert {n: c for n, c in two.facts.computations.items() if c > 1} == {}
    assert not two.facts._running and not two.facts._memo_running
    one = _analyze(trace, monkeypatch, 1)
    assert [f.to_dict() for f in two.findings] == [f.to_dict() for f in one.findings]
    assert _reports(two) == _reports(one)


def test_the_second_thread_ends_with_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    analysis = _analyze(load_trace(DATA / "healthy.sqlite.xz"), monkeypatch, 2)
    assert analysis.facts._prefetcher is None
    assert not [t for t in threading.enumerate() if t.name == "analyzer-facts"]  # joined, not left running


@pytest.mark.parametrize("failing", ["sync_calls", "gpu_gaps", "phases"])
def test_a_fact_failing_on_the_second_thread_fails_the_analysis_as_on_one(failing: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    trace = load_trace(DATA / "host_sync.sqlite.xz")
    spec = registry.get_spec(failing)

    def broken(ctx: registry.FactContext) -> pd.DataFrame:
        raise ValueError(f"{failing} cannot be computed")

    monkeypatch.setitem(registry.FACTS, failing, replace(spec, compute=broken))
    errors = []
    for threads in (2, 1):
        with pytest.raises((RuleEvaluationError, ValueError)) as err:
            _analyze(trace, monkeypatch, threads)
        errors.append((type(err.value), str(err.value)))
    assert errors[0] == errors[1]
    assert f"{failing} cannot be computed" in errors[0][1]
    assert _no_second_thread_left()


def test_the_watchdog_names_what_the_second_thread_computes() -> None:
    from analyzer.watchdog import current_stage, stage

    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with stage("fact phases"):
            inside.set()
            leave.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert inside.wait(5)
        with stage("rules"), stage("rule GPU001 (gpu-idle-gaps)"):
            assert current_stage() == "rules > rule GPU001 (gpu-idle-gaps); meanwhile fact phases"
    finally:
        leave.set()
        thread.join()
    assert current_stage() == "starting"


def test_two_failing_rules_fail_as_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """With rules evaluated on two threads, the error is the first failing rule's in pack order."""
    trace = load_trace(DATA / "healthy.sqlite.xz")
    for failing in ("launch_stats", "copy_throughput", "occupancy"):
        spec = registry.get_spec(failing)

        def broken(ctx: registry.FactContext, name: str = failing) -> pd.DataFrame:
            raise ValueError(f"{name} cannot be computed")

        monkeypatch.setitem(registry.FACTS, failing, replace(spec, compute=broken))
    errors = []
    for threads in (2, 1, 2):
        with pytest.raises(RuleEvaluationError) as err:
            _analyze(trace, monkeypatch, threads)
        errors.append(str(err.value))
    assert errors[0] == errors[1] == errors[2]
    assert _no_second_thread_left()


@pytest.mark.parametrize("name", ["host_sync.sqlite.xz", "callstacks/host_sync_bt.sqlite.xz"])
def test_a_fact_computed_alone_holds_no_fact_computed_ahead(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``timeline_segments`` (``alone``: the run's memory peak) is computed by its reader, not ahead on
    the second thread; while it is computed no other fact starts, and while its inputs are computed only
    they start (what would start then is held through its peak); the reports are those of one thread."""
    trace = load_trace(DATA / name)
    assert registry.get_spec("timeline_segments").alone
    spans: list[tuple[str, str, float, float]] = []
    real = FactStore._compute

    def timed(self: FactStore, spec: registry.FactSpec) -> pd.DataFrame:
        import time

        t0 = time.perf_counter()
        try:
            return real(self, spec)
        finally:
            spans.append((spec.name, threading.current_thread().name, t0, time.perf_counter()))

    monkeypatch.setattr(FactStore, "_compute", timed)
    two = _analyze(trace, monkeypatch, 2)
    assert {thread for _, thread, _, _ in spans} >= {"MainThread", "analyzer-facts"}
    (seg,) = [s for s in spans if s[0] == "timeline_segments"]
    assert seg[1] == "MainThread"
    started_meanwhile = [n for n, _, a, _ in spans if seg[2] < a < seg[3] and n != "timeline_segments"]
    inputs = registry._inputs_of(["timeline_segments"]) or set()
    assert set(started_meanwhile) <= inputs  # only facts it reads itself, on its own thread
    monkeypatch.undo()
    one = _analyze(trace, monkeypatch, 1)
    assert _reports(two) == _reports(one)


def test_helpers_stop_above_their_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``ANALYZER_HELPER_MEMORY`` the helper threads (the fact thread and the second rules thread)
    take no new work: every fact is computed and every rule run on the main thread, and the reports are
    those of two threads without a limit."""
    import analyzer.resources as resources

    trace = load_trace(DATA / "host_sync.sqlite.xz")
    free = _reports(_analyze(trace, monkeypatch, 2))
    ran_on: set[str] = set()
    real_rule = engine._evaluate_one

    def recording(rule, *args):
        ran_on.add(threading.current_thread().name)
        return real_rule(rule, *args)

    monkeypatch.setattr(engine, "_evaluate_one", recording)
    monkeypatch.setattr(resources, "_limit", 1)  # one byte: always above it
    computed_on: dict[str, str] = {}
    limited = _reports(_analyze(trace, monkeypatch, 2, computed_on))
    assert limited == free
    assert set(computed_on.values()) == {"MainThread"} and ran_on == {"MainThread"}
    assert _no_second_thread_left()


def test_the_helpers_memory_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import analyzer.resources as resources

    for raw, want in [("6GiB", 6 * 1024**3), ("500MB", 500 * 1000**2), ("off", None), ("0", None)]:
        monkeypatch.setenv("ANALYZER_HELPER_MEMORY", raw)
        monkeypatch.setattr(resources, "_limit", False)
        assert resources.helper_limit() == want, raw
    monkeypatch.delenv("ANALYZER_HELPER_MEMORY")
    monkeypatch.setattr(resources, "_limit", False)
    assert 0 < (resources.helper_limit() or 0) <= resources.DEFAULT_LIMIT
    assert (resources.rss_bytes() or 1) > 0


def test_small_traces_run_on_one_thread_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below TWO_THREADS_FROM_ROWS events a trace's facts and rules run on one thread (the GIL hand-offs
    of two cost more CPU than they save on milliseconds-long facts); ``ANALYZER_FACT_THREADS`` overrides."""
    import os

    from analyzer import trace_analysis

    trace = load_trace(DATA / "healthy.sqlite.xz")
    rows = sum(len(getattr(trace, name)) for name in ("kernels", "memcpy", "memset", "api"))
    monkeypatch.delenv("ANALYZER_FACT_THREADS", raising=False)
    assert 0 < rows < trace_analysis.TWO_THREADS_FROM_ROWS
    assert trace_analysis.fact_threads(trace) == 1
    monkeypatch.setattr(trace_analysis, "TWO_THREADS_FROM_ROWS", rows)  # at the threshold: as many as the cores allow
    assert trace_analysis.fact_threads(trace) == (2 if len(os.sched_getaffinity(0)) >= 2 else 1)
    monkeypatch.setenv("ANALYZER_FACT_THREADS", "2")
    monkeypatch.setattr(trace_analysis, "TWO_THREADS_FROM_ROWS", rows + 1)
    assert trace_analysis.fact_threads(trace) == 2
    monkeypatch.setenv("ANALYZER_FACT_THREADS", "1")
    assert trace_analysis.fact_threads(trace) == 1


@pytest.mark.parametrize("threshold,trims", [(None, False), (0, True)])
def test_freed_facts_return_memory_only_on_big_traces(monkeypatch: pytest.MonkeyPatch, threshold, trims) -> None:
    """Freeing facts trims the heap (malloc_trim) only for traces of TRIM_FROM_ROWS events or more; the
    findings are the same either way."""
    calls: list[int] = []
    monkeypatch.setattr(registry, "_return_freed_memory", lambda: calls.append(1))
    if threshold is not None:
        monkeypatch.setattr(registry, "TRIM_FROM_ROWS", threshold)
    analysis = _analyze(load_trace(DATA / "healthy.sqlite.xz"), monkeypatch, 1)
    assert bool(calls) is trims
    assert analysis.findings
