"""Bounded, seeded runs of every fuzz harness (``make fuzz`` runs many more, see docs/robustness.md),
and the cases the long runs found, kept as regression tests."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

from analyzer.fuzz import diff, kineto, ncu, nsys, rules  # noqa: E402
from analyzer.fuzz.harness import Stats  # noqa: E402

# cases per harness in `make test`: about a minute in all on one core
CASES = {"nsys": 12, "ncu": 20, "rules": 40, "kineto": 12, "diff": 20}


@pytest.mark.parametrize("harness", [nsys, ncu, rules, kineto, diff], ids=["nsys", "ncu", "rules", "kineto", "diff"])
def test_seeded_fuzz_cases(harness, tmp_path):
    name = harness.__name__.rsplit(".", 1)[-1]
    if name == "nsys" and not nsys.base_traces():
        pytest.skip("no real nsys export to start from")
    if name == "kineto" and not (kineto.is_available() and kineto.base_traces()):
        pytest.skip("the Kineto loader (issue 13) has not landed")
    stats = harness.run_cases(CASES[name], 0, tmp_path, stats=Stats(name), derandomize=True)
    assert stats.cases >= CASES[name]
    assert not stats.failures


# ---------------------------------------------------------------------------------------------------
# regressions found by the long runs (each was a failure before its fix)


@pytest.fixture(scope="module")
def ncu_runner(tmp_path_factory):
    return ncu.Runner(tmp_path_factory.mktemp("ncu"))


NCU_DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "ncu"


@pytest.mark.parametrize("mutations", [
    # a details row cut to nothing: a kernel without timeline time made NCU006's message compare None > 0
    [ncu.CsvMutation("ragged-row", 0.0, 0.0)],
    # a column renamed to "ID": two "ID" columns made frame["ID"] a DataFrame (internal error, exit 3)
    [ncu.CsvMutation("rename-column", "ID", 0.5)],
    [ncu.CsvMutation("duplicate-column", None, 0.3)],
], ids=["details-row-emptied", "column-renamed-to-ID", "column-duplicated"])
def test_ncu_regressions(ncu_runner, mutations):
    outcome = ncu_runner.case(NCU_DATA / "naive_attention_fixed.details.csv", mutations)
    assert outcome.rc in (0, 1)


@pytest.fixture(scope="module")
def nsys_runner(tmp_path_factory):
    return nsys.Runner(tmp_path_factory.mktemp("nsys"))


@pytest.mark.parametrize("mutations", [
    # NVTX_EVENTS without eventType: the loader's WHERE named the missing column (internal error, exit 3)
    [nsys.Mutation("rename-column", "NVTX_EVENTS", "eventType", "renamed")],
    [nsys.Mutation("drop-column", "NVTX_EVENTS", "eventType")],
], ids=["nvtx-eventType-renamed", "nvtx-eventType-dropped"])
def test_nsys_regressions(nsys_runner, mutations):
    from analyzer.testing import real_trace

    outcome, applied = nsys_runner.case(real_trace("alloc_churn_fixed"), mutations)
    assert len(applied) == len(mutations)
    assert outcome.rc in (0, 1)


@pytest.mark.parametrize("value", ["big", "max-int"])
def test_string_ids_far_beyond_the_row_count(nsys_runner, value):
    """A StringIds id of 2^32+1 (or 2^63-1) made the id-indexed string table 34 GB ("out of memory")
    or raised "Maximum allowed dimension exceeded" (exit 3): such tables are now indexed by sorted ids."""
    from analyzer.testing import real_trace

    outcome, _ = nsys_runner.case(real_trace("alloc_churn_fixed"), [nsys.Mutation("set", "StringIds", "id", value,
                                                                                   "last")])
    assert outcome.rc in (0, 1) and outcome.rss_mb < 2048


@pytest.fixture(scope="module")
def diff_runner(tmp_path_factory):
    return diff.Runner(tmp_path_factory.mktemp("diff"))


def test_diff_reads_a_report_with_a_byte_order_mark(diff_runner):
    """A JSON report saved with a UTF-8 byte-order mark (PowerShell's Out-File, Notepad) was refused as
    'not valid JSON (Unexpected UTF-8 BOM)' although it was recognised as a report."""
    outcome = diff_runner.case([([], ("bom", 0.0)), ([], None)])
    assert outcome.rc == 0, outcome.stderr


def test_diff_mutations_reach_the_comparison(diff_runner):
    """Damage a diff can still read (a kernel row duplicated, a phase list reversed) is compared, not refused."""
    outcome = diff_runner.case([([diff.ReportMutation("duplicate", 0)], None),
                                ([diff.ReportMutation("reverse", 3)], None)])
    assert outcome.rc in (0, 1), outcome.stderr
