"""Phase tables on real public nsys exports, checked against independent SQL (``sqlref``).

The traces live in ``../shared/traces-public/`` (not ours to copy); tests skip when it is absent.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.phases import phase_table, top_kernels
from analyzer.phases.tests import sqlref
from analyzer.testing import PUBLIC_DIR

PUBLIC = PUBLIC_DIR
TRACES = ["LeiWang1999__memfusion_artifact__report1.sqlite", "quasiben__nvtx-examples__cudf.sqlite"]
COLUMNS = ["count", "cpu_total_ns", "kernel_ns", "kernel_count", "gpu_ns", "op_count"]


def public(name: str) -> Path:
    path = PUBLIC / name
    if not path.is_file():
        pytest.skip(f"public trace {name} not found under {PUBLIC}")
    return path


@pytest.fixture(scope="module", params=TRACES)
def loaded(request):
    from analyzer.loading import load_trace

    path = public(request.param)
    return path, load_trace(path)


def test_phase_table_matches_sql_to_the_nanosecond(loaded):
    path, trace = loaded
    ref = sqlref.range_totals(path).set_index("name")[COLUMNS]
    ours = phase_table(trace, exclude=()).set_index("name")[COLUMNS]
    assert sorted(ref.index) == sorted(ours.index)
    diff = ref.compare(ours.loc[ref.index].astype("int64"))
    assert diff.empty, diff


def test_kernel_totals_match_sql(loaded):
    path, trace = loaded
    ref = sqlref.kernel_totals(path).set_index("name").sort_index()
    ours = top_kernels(trace, exclude=()).set_index("name").sort_index()[["count", "total_ns"]]
    assert ref.equals(ours.astype("int64"))


def test_phases_fact_through_the_store(loaded):
    from analyzer.analysis import Window
    from analyzer.facts import FactStore, get_spec

    _, trace = loaded
    assert get_spec("phases").columns["busy_share"]
    window = Window(0, trace.info.duration_ns + 1, "full", "everything")
    fact = FactStore(trace, window, options={"phase_exclude": ()}).get("phases")
    assert fact.equals(phase_table(trace, exclude=(), window=(window.start_ns, window.end_ns)))
