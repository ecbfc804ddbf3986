"""The fact cache (analyzer/facts/cache.py): facts read back exactly, reports byte for byte the same, never
stale (a changed option, window, file or code signature misses), never required, bounded."""
from __future__ import annotations

import json
import os
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from analyzer.facts import cache as fc
from analyzer.facts.registry import all_specs
from analyzer.loading import cache as tc
from analyzer.loading import load_trace
from analyzer.trace_analysis import AnalysisOptions, prepare

REPO = Path(__file__).resolve().parents[3]
CREATED = datetime(2026, 1, 1, tzinfo=timezone.utc)
DATA = REPO / "tests" / "data"
#: real traces of both formats: nsys exports (tests/data, round 3) and torch.profiler JSON (round 3)
TRACES = [
    DATA / "healthy.sqlite.xz",
    DATA / "round3" / "memory_peak.sqlite.xz",
    DATA / "round3" / "copy_on_compute_stream.pt.trace.json.gz",
    DATA / "round3" / "compile_train.pt.trace.json.gz",
]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ANALYZER_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("ANALYZER_NO_CACHE", raising=False)
    monkeypatch.delenv("ANALYZER_CACHE_MAX", raising=False)
    return tmp_path / "c"


def _store(path: Path, options: AnalysisOptions):
    trace = load_trace(path, cache=tc.TraceCache(limit=10**9) if options.cache else None)
    return prepare(trace, options)


def _all_facts(store) -> dict[str, object]:
    """Every fact of ``store`` (no plan: each computed fact is offered to the cache), or its error."""
    out: dict[str, object] = {}
    for name in all_specs():
        try:
            out[name] = store.get(name)
        except Exception as err:  # noqa: BLE001 - a fact this trace cannot give: the same error both times
            out[name] = f"{type(err).__name__}: {err}"
    fc.wait_all()
    return out


def _entries(cache_dir: Path) -> list[Path]:
    """The meta.json of each fact entry (not the window's and scalars' entries, which have no Arrow file)."""
    return sorted(m for m in (cache_dir / "facts").glob("*/meta.json") if (m.parent / tc.FACT_FILE).exists())


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
@pytest.mark.parametrize("window", [None, "full"])
def test_cached_facts_are_exactly_the_computed_ones(path, window, cache_dir):
    options = AnalysisOptions(cache=True, window_spec=window)
    fresh = _all_facts(prepare(load_trace(path), AnalysisOptions(window_spec=window)))
    first_store = _store(path, options)
    assert first_store.disk is not None
    first = _all_facts(first_store)
    stored = len(_entries(cache_dir))
    assert stored >= 20  # every fact of these traces can be stored exactly
    second_store = _store(path, options)
    hits = fc.fact_cache().hits
    second = _all_facts(second_store)
    assert fc.fact_cache().hits - hits == stored  # every stored fact read back, none computed again
    assert len(_entries(cache_dir)) == stored
    for name, want in fresh.items():
        for got in (first[name], second[name]):
            if isinstance(want, str):
                assert got == want, name
            else:
                pd.testing.assert_frame_equal(got, want, check_exact=True, check_categorical=True, obj=name)
                assert list(got.dtypes) == list(want.dtypes), name  # categorical categories, int widths


def test_reports_identical_from_cached_facts(cache_dir):
    """The reference cases' reports (all three formats, the automatic window, ``--window full`` and NVTX
    steps with a ``--set``) from cached facts equal the references byte for byte."""
    sys.path.insert(0, str(REPO / "tests"))
    import reference_reports as refs

    from analyzer.pipeline import analyze_paths
    from analyzer.reports import build_report, render

    index = refs.load_index()
    names = ("dataloader_starved", "host_sync-window-full", "small_training_ctx128-steps-set")
    for case in [c for c in refs.cases() if c.name in names]:
        for attempt in range(2):  # compute and store, then read
            hits = fc.fact_cache().hits
            options = AnalysisOptions(cache=True, window_spec=case.window, sets=case.sets)
            report = build_report(analyze_paths(list(case.traces), options), created=refs.CREATED)
            got = {fmt: refs._portable(render(report, fmt)) for fmt in refs.FORMATS}
            assert not list(refs.compare(case, got, index)), case.name
            fc.wait_all()
            assert (fc.fact_cache().hits > hits) == (attempt == 1), case.name


def test_kineto_report_identical_from_cached_facts(cache_dir):
    """A torch.profiler trace (not stored by the trace cache, its facts are): its reports from cached facts
    are the computed ones, in every format, with the automatic window and ``--window full``."""
    from analyzer.pipeline import analyze_paths
    from analyzer.reports import build_report, render

    path = DATA / "round3" / "decode_eager.pt.trace.json.gz"
    for window in (None, "full"):
        got = []
        for cache in (False, True, True):  # computed, computed and stored, read
            hits = fc.fact_cache().hits
            report = build_report(analyze_paths([path], AnalysisOptions(cache=cache, window_spec=window)),
                                  created=CREATED)
            got.append({fmt: render(report, fmt) for fmt in ("md", "json", "html")})
            fc.wait_all()
        assert fc.fact_cache().hits > hits
        assert got[0] == got[1] == got[2]


def test_a_changed_option_window_file_or_code_misses(cache_dir, tmp_path, monkeypatch):
    path = DATA / "healthy.sqlite.xz"
    base = AnalysisOptions(cache=True)

    def key(options: AnalysisOptions, trace=None) -> str | None:
        store = prepare(trace or load_trace(path, cache=tc.TraceCache(limit=10**9)), options)
        return None if store.disk is None else store.disk.key

    k0 = key(base)
    assert k0 is not None and key(base) == k0  # the same inputs: the same entries
    cats = tmp_path / "categories.yaml"
    shutil.copyfile(REPO / "analyzer" / "facts" / "categories.yaml", cats)
    others = [
        AnalysisOptions(cache=True, window_spec="full"),
        AnalysisOptions(cache=True, exclude_ranges=()),
        AnalysisOptions(cache=True, only_ranges="step*"),
        AnalysisOptions(cache=True, fact_options={"utilization_bins": 50}),
        AnalysisOptions(cache=True, fact_options={"utilization_bins": 50.0}),
        AnalysisOptions(cache=True, fact_options={"categories_file": str(cats)}),
    ]
    keys = [key(o) for o in others]
    assert None not in keys and len({k0, *keys}) == len(keys) + 1
    with_file = key(others[-1])
    cats.write_text(cats.read_text() + "\n# another table\n")  # the file's content, not its name, counts
    assert key(others[-1]) not in (None, with_file)
    monkeypatch.setattr(fc, "_SIGNATURE", "other code")
    assert key(base) not in (None, k0)


def test_unkeyable_or_changed_stores_are_not_cached(cache_dir, monkeypatch, capsys):
    monkeypatch.setenv("ANALYZER_DEBUG", "1")
    path = DATA / "healthy.sqlite.xz"
    assert prepare(load_trace(path), AnalysisOptions(cache=True)).disk is None  # not loaded through the cache
    store = _store(path, AnalysisOptions(cache=True, fact_options={"hook": object()}))
    assert store.disk is None
    assert "facts not cached: hook is a object" in capsys.readouterr().err
    store = _store(path, AnalysisOptions(cache=True))
    store.update_options({"job_rank": None})
    assert store.disk is None  # its options changed after it was keyed
    monkeypatch.setenv("ANALYZER_NO_CACHE", "1")
    assert _store(path, AnalysisOptions(cache=True)).disk is None


def test_a_cached_fact_needs_no_input_fact(cache_dir):
    """A fact read from the cache is not computed, nor are the facts it is computed from."""
    path = DATA / "healthy.sqlite.xz"
    options = AnalysisOptions(cache=True)
    store = _store(path, options)
    want = store.get("timeline_breakdown")
    fc.wait_all()
    assert "timeline_segments" in store.computations
    store = _store(path, options)
    got = store.get("timeline_breakdown")
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert set(store.computations) == {"timeline_breakdown"}


def test_damaged_entries_are_computed_again(cache_dir, monkeypatch, capsys):
    path = DATA / "healthy.sqlite.xz"
    options = AnalysisOptions(cache=True)
    want = _all_facts(_store(path, options))
    for meta in _entries(cache_dir):
        arrow = meta.parent / tc.FACT_FILE
        data = bytearray(arrow.read_bytes())
        data[len(data) // 2] ^= 0xFF
        arrow.write_bytes(bytes(data))
    got = _all_facts(_store(path, options))
    for name, frame in want.items():
        if not isinstance(frame, str):
            pd.testing.assert_frame_equal(got[name], frame, check_exact=True, obj=name)
    assert capsys.readouterr().err.count("does not match its checksum") == 1


def test_entries_are_private_and_within_the_shared_limit(cache_dir, monkeypatch):
    path = DATA / "healthy.sqlite.xz"
    _all_facts(_store(path, AnalysisOptions(cache=True)))
    entries = _entries(cache_dir)
    assert entries
    for meta in entries:
        assert os.stat(meta.parent).st_mode & 0o777 == 0o700
        assert os.stat(meta).st_mode & 0o777 == 0o600
        assert json.loads(meta.read_text())["fact"] in all_specs()
    facts = sum(size for _, size, _ in tc.entries_in(cache_dir / "facts"))
    traces = sum(size for _, size, _ in tc.entries_in(cache_dir / "traces"))
    # the trace cache's eviction counts both folders against one limit
    tc.evict_entries(cache_dir / "traces", traces + facts // 2)
    left = sum(size for _, size, _ in tc.entries_in(cache_dir / "facts")) + \
        sum(size for _, size, _ in tc.entries_in(cache_dir / "traces"))
    assert left <= traces + facts // 2
    limit = traces + facts // 3
    monkeypatch.setenv("ANALYZER_CACHE_MAX", str(limit))  # a run's writes end with an eviction to the limit
    _all_facts(_store(path, AnalysisOptions(cache=True, window_spec="full")))
    assert sum(size for d in ("facts", "traces") for _, size, _ in tc.entries_in(cache_dir / d)) <= limit
    monkeypatch.setenv("ANALYZER_CACHE_MAX", "0")  # 0: nothing written
    shutil.rmtree(cache_dir / "facts")
    _all_facts(_store(path, AnalysisOptions(cache=True, window_spec="full")))
    assert not _entries(cache_dir)


def test_a_facts_folder_others_can_write_is_not_used(cache_dir, monkeypatch, capsys):
    """Anyone could have put entries in a facts folder writable by others: it is neither read nor
    written, and a note names it once, as the fact cache's (the trace cache's own check, shared)."""
    monkeypatch.setattr(tc, "_SAID", set())  # said once per process: another test may have said it
    path = DATA / "healthy.sqlite.xz"
    (cache_dir / "facts").mkdir(parents=True)
    (cache_dir / "facts").chmod(0o777)
    for _ in range(2):
        store = _store(path, AnalysisOptions(cache=True))
        assert store.disk is None
    assert not list((cache_dir / "facts").iterdir())
    err = capsys.readouterr().err
    assert err.count(f"note: fact cache: {cache_dir / 'facts'} is not private to you") == 1


@pytest.mark.parametrize("spec", [None, "full", "step_*", "1ms:"])
def test_cached_window_is_exactly_the_chosen_one(spec, cache_dir):
    """The window (bounds, source, text, steps with their types) read back is the one chosen; another
    spec or exclusion is another entry."""
    from analyzer.window import choose_window

    path = DATA / "small_training_ctx128.sqlite.xz"
    trace = load_trace(path, cache=tc.TraceCache(limit=10**9))
    want = choose_window(load_trace(path), spec)
    hits = fc.fact_cache().hits
    first = fc.choose_window(trace, spec, ("warmup*",), cached=True, choose=choose_window)
    again = fc.choose_window(load_trace(path, cache=tc.TraceCache(limit=10**9)), spec, ("warmup*",), cached=True,
                             choose=choose_window)
    assert fc.fact_cache().hits == hits + 1
    for got in (first, again):
        assert got == want and got.steps == want.steps
        assert fc._canonical(got) == fc._canonical(want)  # the same types (tuples, ints) all the way down
    assert fc.window_key(trace, spec, ()) != fc.window_key(trace, spec, ("warmup*",))


def test_cached_scalars_are_exactly_the_computed_ones(cache_dir):
    """The rules' scalars read back equal those computed (values and order), and a cached run then reads
    no trace frame for them."""
    from analyzer.facts.scalars import trace_scalars

    path = DATA / "host_sync.sqlite.xz"
    options = AnalysisOptions(cache=True)
    want = trace_scalars(prepare(load_trace(path), AnalysisOptions()))
    first = fc.trace_scalars(_store(path, options))
    store = _store(path, options)
    hits = fc.fact_cache().hits
    again = fc.trace_scalars(store)
    assert fc.fact_cache().hits == hits + 1 and store.computations == {}
    for got in (first, again):
        assert list(got.items()) == list(want.items())


def test_cli_no_cache_writes_no_fact_and_debug_says_why(cache_dir, tmp_path, monkeypatch, capsys):
    """``--no-cache`` neither reads nor writes facts; a cached run's report is the computed one; with
    ANALYZER_DEBUG=1 a damaged fact entry is named on stderr, the report unchanged."""
    from analyzer.cli import main

    path = DATA / "round3" / "copy_on_compute_stream.pt.trace.json.gz"
    out = tmp_path / "r.json"
    assert main([str(path), "--format", "json", "-o", str(out), "-q", "--no-cache"]) == 0
    fc.wait_all()
    assert not (cache_dir / "facts").exists()
    want = json.loads(out.read_text())
    want.pop("created", None)
    for run in range(2):
        assert main([str(path), "--format", "json", "-o", str(out), "-q"]) == 0
        fc.wait_all()
        got = json.loads(out.read_text())
        got.pop("created", None)
        assert got == want, run
    for meta in _entries(cache_dir):  # every one: which the next run reads depends on the report, and the
        (meta.parent / tc.FACT_FILE).write_bytes(b"not arrow")  # first by digest moves with the code
    monkeypatch.setenv("ANALYZER_DEBUG", "1")
    monkeypatch.setattr(tc, "_SAID", set())  # said once per process: another test may have said it
    capsys.readouterr()
    assert main([str(path), "--format", "json", "-o", str(out), "-q"]) == 0
    got = json.loads(out.read_text())
    got.pop("created", None)
    assert got == want
    assert "fact cache: the cached fact" in capsys.readouterr().err


def test_torch_profiler_file_stays_in_the_identity_index(cache_dir):
    """A torch.profiler trace has fact entries but no trace entry: the trace cache's eviction keeps its
    identity index entry (it is not hashed again on every run)."""
    kineto = DATA / "round3" / "copy_on_compute_stream.pt.trace.json.gz"
    cache = tc.TraceCache(limit=10**9)
    cache_ident = tc.Identity.of(kineto)
    _all_facts(_store(kineto, AnalysisOptions(cache=True)))
    index = cache.root / "ident" / cache_ident.key()
    assert index.read_text() == tc.file_digest(kineto)
    load_trace(DATA / "healthy.sqlite.xz", cache=cache)  # writes a trace entry, then evicts
    assert index.exists()
