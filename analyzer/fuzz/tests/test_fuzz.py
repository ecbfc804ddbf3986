"""Bounded, seeded runs of every fuzz harness (``make fuzz`` runs many more, see docs/robustness.md),
and the cases the long runs found, kept as regression tests."""
from __future__ import annotations

import re

from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

from analyzer.fuzz import diff, kineto, ncu, nsys, rules  # noqa: E402
from analyzer.fuzz.harness import Stats  # noqa: E402

# cases per harness in `make test`: about a minute in all on one core; each harness also stops after
# SMOKE_SECONDS (a loaded CI machine runs fewer cases, never longer)
CASES = {"nsys": 12, "ncu": 20, "rules": 40, "kineto": 12, "diff": 20}
SMOKE_SECONDS = 60.0
#: the harnesses that check the property that matters on every accepted case (issue 33): the report's
#: kernel count and total kernel time equal what SQLite / Python's json read from the same file
PROPERTY = {"nsys": "kernel_totals_checked_against_sqlite", "kineto": "kernel_totals_checked_against_json"}


@pytest.mark.parametrize("harness", [nsys, ncu, rules, kineto, diff], ids=["nsys", "ncu", "rules", "kineto", "diff"])
def test_seeded_fuzz_cases(harness, tmp_path):
    import time

    from analyzer.fuzz.harness import OutOfTime

    name = harness.__name__.rsplit(".", 1)[-1]
    if name == "nsys" and not nsys.base_traces():
        pytest.skip("no real nsys export to start from")
    if name == "kineto" and not (kineto.is_available() and kineto.base_traces()):
        pytest.skip("the Kineto loader (issue 13) has not landed")
    stats = Stats(name, deadline=time.time() + SMOKE_SECONDS, started_cpu=time.process_time())
    try:
        harness.run_cases(CASES[name], 0, tmp_path, stats=stats, derandomize=True)
    except OutOfTime:
        assert stats.cases >= 3, "the smoke run's time ran out before 3 cases"
    else:
        assert stats.cases >= CASES[name]
    assert not stats.failures
    if name in PROPERTY:
        assert stats.extra.get(PROPERTY[name], 0) >= 1, stats.as_dict()
    # the CPU a case costs, whole process (docs/robustness.md's 2-core projection), in the summary table
    from analyzer.fuzz.__main__ import summary_table

    per_case = stats.cpu_per_case()
    assert per_case is not None and 0 < per_case < 30 and stats.extra["setup_cpu_s"] >= 0
    (tmp_path / "results").mkdir()
    stats.dump(tmp_path / "results" / f"fuzz-{name}-seed0.json")
    table = summary_table(tmp_path / "results")
    # the dump reads the process's CPU clock again a moment later: the shown mean may move by a few ms
    shown = re.search(r"\| (\d+\.\d{3}) s \| \d", table)
    assert shown and "minutes on 2 cores" in table, table
    assert abs(float(shown.group(1)) - per_case) <= max(0.003, 0.05 * per_case), table


def test_the_property_check_catches_a_wrong_kernel_read(tmp_path):
    """The checks fail a run whose trace differs from SQLite's / json's read by one kernel (what the
    damaged-tree fallback did before: rows skipped), and pass the trace as loaded."""
    import gzip

    from analyzer.fuzz.harness import FuzzFailure
    from analyzer.loading import load_trace

    base = nsys.base_traces()[0]
    trace = load_trace(base)
    assert nsys.check_kernels_as_sqlite_reads_them(base, trace) == 1
    trace.kernels = trace.kernels.iloc[1:]
    with pytest.raises(FuzzFailure, match="where SQLite reads"):
        nsys.check_kernels_as_sqlite_reads_them(base, trace)
    json_base = next(p for p in kineto.base_traces() if p.suffix == ".gz")
    data = gzip.open(json_base).read()
    trace = load_trace(json_base)
    assert kineto.check_kernels_as_json_reads_them(data, trace) == 1
    trace.kernels = trace.kernels.iloc[:-1]
    with pytest.raises(FuzzFailure, match="where Python's json reads"):
        kineto.check_kernels_as_json_reads_them(data, trace)


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


# ---------------------------------------------------------------------------------------------------
# found by the runs on the lent 32-core machine (seeds 1000-1011; each an internal error or a
# misattributed message before its fix)

def _public(name):
    from analyzer.testing import PUBLIC_DIR

    path = PUBLIC_DIR / name
    if not path.is_file():
        pytest.skip(f"public trace {name} not present")
    return path


LEI = "LeiWang1999__memfusion_artifact__report1.sqlite"
CUDF = "quasiben__nvtx-examples__cudf.sqlite"


@pytest.mark.parametrize("base, mutations, rc", [
    # no NVTX left: the phases fact indexed an empty range table for unexplained sync records
    # (reported as an error of rule NVTX001 in the rule file)
    (LEI, [nsys.Mutation("drop-table", "NVTX_EVENTS")], (0, 1)),
    (LEI, [nsys.Mutation("set", "NVTX_EVENTS", "eventType", "big")], (0, 1)),
    # DomainStrings.id NULL: int(None)
    (CUDF, [nsys.Mutation("set", "DomainStrings", "id", "null")], (0, 1)),
    # GPU properties as text, huge reals or absurd values: int('abc'), int64 overflow
    ("alloc_churn_fixed", [nsys.Mutation("set", "TARGET_INFO_GPU", "id", "text")], (0, 1)),
    ("alloc_churn_fixed", [nsys.Mutation("set", "TARGET_INFO_GPU", "l2CacheSize", "huge-real")], (0, 1)),
    (CUDF, [nsys.Mutation("set", "TARGET_INFO_CUDA_GPU", "globalMemorySize", "text")], (0, 1)),
    (CUDF, [nsys.Mutation("add", "TARGET_INFO_CUDA_GPU", "globalMemorySize", -1_000_000_000_000_000)], (0, 1)),
    # a flipped byte in the schema: sqlite3 could not decode its own error message (UnicodeDecodeError)
    (LEI, [nsys.Mutation("flip-bytes", arg=(0.8986158538846082, 1))], (2,)),
], ids=["no-nvtx", "nvtx-eventType-text", "domain-id-null", "gpu-id-text", "l2-huge-real", "memory-text",
        "memory-negative", "schema-byte-flipped"])
def test_nsys_regressions_found_on_the_lent_machine(nsys_runner, base, mutations, rc):
    from analyzer.testing import real_trace

    path = real_trace(base) if "." not in base else _public(base)
    outcome, applied = nsys_runner.case(path, mutations)
    assert applied and outcome.rc in rc, outcome.stderr


@pytest.mark.parametrize("mutations", [
    # an ID with thousands separators, or 1e400: the rules table cast NaN/inf ids to int64
    [ncu.CsvMutation("set-named", ("ID", "1,234,567", 1), 0.0)],
    [ncu.CsvMutation("set-cell", ("1e400", False), 0.0)],
], ids=["id-with-commas", "id-1e400"])
def test_ncu_id_regressions(ncu_runner, mutations):
    outcome = ncu_runner.case(NCU_DATA / "naive_attention.details.csv", mutations)
    assert outcome.rc in (0, 1, 2)  # check_outcome inside case() rejects exit 3 and stray tracebacks


@pytest.mark.skipif(not kineto.is_available(), reason="no Kineto loader")
@pytest.mark.parametrize("key, value", [("ph", "list"), ("ph", "dict"), ("cat", "list"), ("name", "dict")])
def test_kineto_list_where_a_scalar_belongs(tmp_path, key, value):
    """A JSON list or object as an event's ``ph``: pandas.factorize raised 'unhashable type: list'."""
    from analyzer.testing import DATA_DIR

    runner = kineto.Runner(tmp_path)
    base = DATA_DIR / "kineto" / "occupancy_fixed.pt.trace.json.gz"
    outcome = runner.case(base, [kineto.JsonMutation("set-key", "kernel", key, value, 1)], None)
    assert outcome.rc in (0, 1, 2)


def test_rule_evidence_sorted_twice_by_one_column(tmp_path):
    """``evidence.sort: [device, device]`` selected the column twice and sorting raised
    'The column label is not unique' (internal error) once the rule fired; now the rule file is refused."""
    import yaml

    from analyzer.cli import cli
    from analyzer.fuzz.harness import run_guarded
    from analyzer.rules.loader import DEFAULT_PACK
    from analyzer.testing import real_trace

    pack = yaml.safe_load(DEFAULT_PACK.read_text())
    rule = next(r for r in pack["rules"] if r["id"] == "GPU001")
    rule.pop("explains", None)
    rule["evidence"]["sort"] = ["device", "device"]
    rule["where"] = "duration >= 0"
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "rules": [rule]}))
    args = [str(real_trace("dataloader_starved")), "--rules", str(path), "-q", "-o", str(tmp_path / "r.md")]
    out = run_guarded(lambda: cli.main(args=args, prog_name="analyze", standalone_mode=False))
    assert out.rc == 2 and "names \"device\" more than once" in out.stderr, out.stderr



@pytest.mark.parametrize("base, mutations, rc", [
    # kernel starts moved 2^62 ns back: window - busy overflowed int64 in GPU002's let (reported against the
    # rule file); now one line naming the trace
    (CUDF, [nsys.Mutation("end-before-start", "CUPTI_ACTIVITY_KIND_KERNEL", arg=-(2**62)),
            nsys.Mutation("add", "CUPTI_ACTIVITY_KIND_MEMSET", "start", -(2**62))], (0, 1, 2)),
    (LEI, [nsys.Mutation("add", "CUPTI_ACTIVITY_KIND_KERNEL", "start", -(2**62))] * 2, (0, 1, 2)),
    # metadata cells as text or NULL: int('abc') / int(None)
    ("alloc_churn_fixed", [nsys.Mutation("set", "ANALYSIS_DETAILS", "startTime", "text")], (0, 1)),
    ("alloc_churn_fixed", [nsys.Mutation("set", "TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "text")], (0, 1)),
    ("alloc_churn_fixed", [nsys.Mutation("retype-column", "ENUM_CUDA_MEMCPY_OPER", "id", "TEXT"),
                           nsys.Mutation("set", "ENUM_CUDA_MEMCPY_OPER", "id", "null")], (0, 1)),
], ids=["kernel-start-2^62-back", "kernel-start-2^63-back", "analysis-start-text", "utc-start-text",
        "memcpy-enum-id-null"])
def test_nsys_regressions_second_run(nsys_runner, base, mutations, rc):
    from analyzer.testing import real_trace

    path = real_trace(base) if "." not in base else _public(base)
    outcome, applied = nsys_runner.case(path, mutations)
    assert applied and outcome.rc in rc, outcome.stderr
    if outcome.rc == 2:
        # refused by the loader (timestamps beyond +-2^62 ns) or by the analysis (sums beyond int64)
        assert ("too large for 64-bit arithmetic" in outcome.stderr
                or "overflow 64-bit integers" in outcome.stderr), outcome.stderr


@pytest.mark.parametrize("base, mutations", [
    # a truncated raw export: pandas 3.0 refused str + object when building "metric|unit"
    ("occupancy.raw.csv", [ncu.CsvMutation("truncate", None, 0.801)]),
    # a launch dimension / device cell of 1e400: inf cast to int64
    ("naive_attention.details.csv", [ncu.CsvMutation("set-named", ("Device", "1e400", 1), 0.0)]),
    ("naive_attention.details.csv", [ncu.CsvMutation("set-cell", ("1e400", True), 0.5)]),
], ids=["raw-truncated", "device-1e400", "cell-1e400"])
def test_ncu_regressions_second_run(ncu_runner, base, mutations):
    outcome = ncu_runner.case(NCU_DATA / base, mutations)
    assert outcome.rc in (0, 1, 2)


def test_nsys_process_pid_as_text(nsys_runner):
    """Third lent-machine run: PROCESSES.pid as text raised int('abc') (internal error)."""
    from analyzer.testing import real_trace

    outcome, applied = nsys_runner.case(real_trace("alloc_churn_fixed"),
                                        [nsys.Mutation("set", "PROCESSES", "pid", "text")])
    assert applied and outcome.rc in (0, 1), outcome.stderr


def test_ncu_compute_capability_not_a_whole_number(ncu_runner):
    """Third lent-machine run: a carriage return inside a raw export's row left a compute-capability cell
    that Int64 could not hold ('cannot safely cast non-equivalent object to int64')."""
    outcome = ncu_runner.case(NCU_DATA / "tiny_kernels_fixed.raw.csv",
                              [ncu.CsvMutation("drop-rows", 5, 0.0), ncu.CsvMutation("drop-rows", 5, 0.0),
                               ncu.CsvMutation("insert", "\r", 0.92665)])
    assert outcome.rc in (0, 1, 2)



@pytest.mark.parametrize("base, mutations", [
    ("alloc_churn_fixed", [nsys.Mutation("view-table", "CUPTI_ACTIVITY_KIND_KERNEL", arg="junk")]),
    (LEI, [nsys.Mutation("view-table", "CUPTI_ACTIVITY_KIND_KERNEL", arg="junk")]),
    ("alloc_churn_fixed", [nsys.Mutation("end-before-start", "CUPTI_ACTIVITY_KIND_KERNEL", arg=0, rows="all"),
                           nsys.Mutation("end-before-start", "CUPTI_ACTIVITY_KIND_MEMCPY", arg=0, rows="all")]),
], ids=["kernels-a-view-2025.3", "kernels-a-view-2023.1", "every-op-zero-length"])
def test_nsys_no_op_covering_any_time_on_a_device(nsys_runner, base, mutations):
    """Found profiling the harness (seed 5, this round's timeline breakdown): with the kernel table a view
    of no kernels, or every kernel and copy of zero length, no op covers any time on a device and the
    breakdown indexed an empty owner array for that device's one gap (IndexError, internal error)."""
    from analyzer.testing import real_trace

    path = real_trace(base) if "." not in base else _public(base)
    outcome, applied = nsys_runner.case(path, mutations)
    assert applied and outcome.rc in (0, 1), outcome.stderr


@pytest.mark.parametrize("base, mutations, fired", [
    ("naive_attention.raw.csv", [ncu.CsvMutation("crlf")], {"memory-bound-softmax-measured", "compute-bound"}),
    ("naive_attention_fixed.raw.csv", [ncu.CsvMutation("drop-rows", 7, 0.4)], {"shared-bank-conflicts"}),
], ids=["raw", "raw-rows-dropped"])
def test_ncu_rules_shared_between_cases_give_the_full_report(ncu_runner, tmp_path, base, mutations, fired):
    """The ncu harness evaluates the rules that read no ncu fact once (``Runner.known``); a case's JSON
    report equals the one of a runner that evaluates every rule on every case, and the rules reading ncu
    facts fire per case."""
    import json

    full = ncu.Runner(tmp_path / "full", share_trace_rules=False, reuse=False)
    ncu_runner.outcomes.clear()  # no outcome of an earlier test to reuse: this case runs in full
    assert ncu_runner.known and not full.known
    assert len(ncu_runner.known) < len(ncu_runner.pack.rules)
    reports = []
    for runner, name in ((ncu_runner, "shared"), (full, "full")):
        target = tmp_path / name / "case.csv"
        target.parent.mkdir()
        ncu.build_case(NCU_DATA / base, target, mutations)
        outcome = runner.analyze(target, tmp_path / name / "report.json")
        assert outcome.rc == 0, outcome.stderr
        doc = json.loads((tmp_path / name / "report.json").read_text().replace(str(target), "CASE"))
        doc.pop("created", None)
        reports.append(doc)
    assert reports[0] == reports[1]
    assert {f["rule"] for t in reports[0]["traces"] for f in t["findings"]} >= fired


def test_ncu_rules_shared_only_while_the_scalars_they_saw_hold(tmp_path):
    """A rule that reads no ncu fact may still read a scalar that does: memory-bound-softmax stays silent
    once ncu measured the softmax kernels (``ncu_softmax_launches``). On the naive-attention trace with
    its own ncu export the shared runner's report equals a full evaluation's (the trace-only verdict
    fires without ncu data, and is not carried into the case)."""
    import json

    shared = ncu.Runner(tmp_path / "shared", trace_name="naive_attention", reuse=False)
    full = ncu.Runner(tmp_path / "full", trace_name="naive_attention", share_trace_rules=False, reuse=False)
    assert shared.known.get("KRN001"), "memory-bound-softmax (KRN001) fires on the trace alone"
    docs = []
    for runner, name in ((shared, "shared"), (full, "full")):
        target = tmp_path / name / "case.csv"
        target.parent.mkdir(exist_ok=True)
        ncu.build_case(NCU_DATA / "naive_attention.raw.csv", target, [ncu.CsvMutation("crlf")])
        assert runner.analyze(target, tmp_path / name / "report.json").rc == 0
        doc = json.loads((tmp_path / name / "report.json").read_text().replace(str(target), "CASE"))
        doc.pop("created", None)
        docs.append(doc)
    assert docs[0] == docs[1]
    rules = {f["rule"] for t in docs[0]["traces"] for f in t["findings"]}
    assert "memory-bound-softmax-measured" in rules and "memory-bound-softmax" not in rules, rules


def test_ncu_case_reading_as_an_earlier_one_reuses_its_outcome(ncu_runner):
    """A damaged file the reader reads exactly as an earlier case's (CRLF line ends, console noise around
    the CSV) reuses that case's outcome; one read differently (rows dropped) runs in full."""
    base = NCU_DATA / "naive_attention.raw.csv"
    ncu_runner.outcomes.clear()
    before = ncu_runner.reused
    first = ncu_runner.case(base, [ncu.CsvMutation("crlf")], 0)
    again = ncu_runner.case(base, [ncu.CsvMutation("noise")], 1)
    assert ncu_runner.reused == before + 1 and (again.rc, again.stderr) == (first.rc, first.stderr)
    ncu_runner.case(base, [ncu.CsvMutation("drop-rows", 7, 0.4)], 2)
    assert ncu_runner.reused == before + 1
