"""Values that are not finite or out of range are refused by the validators with one line, exit 2
(issue 33): ``--timeout 1e300`` printed a watchdog traceback and enforced nothing, ``nan`` and ``inf``
passed click's FloatRange."""
from __future__ import annotations

import pytest

from analyzer.cli import main
from analyzer.errors import ParameterError
from analyzer.testing import real_trace
from analyzer.watchdog import Watchdog


@pytest.mark.parametrize("argv", [["--timeout", "1e300"], ["--timeout", "nan"], ["--timeout", "inf"],
                                  ["--timeout", "-1"], ["--timeout", "1e6"], ["--accepted-growth", "nan"],
                                  ["--accepted-growth", "inf"]])
def test_non_finite_or_out_of_range_options_are_one_line(argv, tmp_path, capsys):
    rc = main([str(real_trace("healthy")), "-q", "-o", str(tmp_path / "r.md"), *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "finite number" in err[0], err
    assert not (tmp_path / "r.md").exists()


def test_timeout_from_the_environment_is_checked_too(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANALYZER_TIMEOUT", "inf")
    assert main([str(real_trace("healthy")), "-q", "-o", str(tmp_path / "r.md")]) == 2
    assert "finite number" in capsys.readouterr().err
    monkeypatch.setenv("ANALYZER_TIMEOUT", "600")
    assert main([str(real_trace("healthy")), "-q", "-o", str(tmp_path / "r.md")]) in (0, 1)


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 1e300])
def test_watchdog_refuses_what_it_cannot_wait_for(seconds):
    """Library callers (AnalysisOptions(timeout=...)) reach the watchdog without the CLI's check."""
    with pytest.raises(ParameterError, match="not a finite number of seconds"):
        Watchdog(seconds, "x")


def test_nsys_timestamps_beyond_the_int64_safe_range_are_refused(tmp_path, capsys):
    """A kernel start moved by -2^63 (the fuzz's nsys seed 1, case 2,094) read as 72 kernels and 5.99 ms
    where SQLite sums 6.6e20 ns: end - start overflowed int64 silently. Such a file is refused, unchanged."""
    import shutil
    import sqlite3

    db = tmp_path / "t.sqlite"
    shutil.copyfile(real_trace("alloc_churn_fixed"), db)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start - 9223372036854775807 "
                    "WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    con.close()
    before = db.read_bytes()
    rc = main([str(db), "-q", "--no-cache", "-o", str(tmp_path / "r.md")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "beyond 2^62 ns" in err[0] and "export it again" in err[0], err
    assert db.read_bytes() == before and not (tmp_path / "r.md").exists()


def test_kineto_durations_whose_sum_overflows_are_refused(tmp_path, capsys):
    """Each kernel's dur set to 1e15 us (1e18 ns, each within int64) summed to -4.9e18 ns where Python's
    json reads 3.2e19 (the fuzz's kineto seed 2): such a trace is refused with one line, unchanged."""
    import gzip
    import json

    from analyzer.testing import DATA_DIR

    doc = json.loads(gzip.decompress((DATA_DIR / "kineto" / "occupancy_fixed.pt.trace.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e, dict) and e.get("cat") == "kernel":
            e["dur"] = 1e15
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(doc))
    before = path.read_bytes()
    rc = main([str(path), "-q", "--no-cache", "-o", str(tmp_path / "r.md")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "add up to more than 2^62 ns" in err[0], err
    assert path.read_bytes() == before and not (tmp_path / "r.md").exists()


def test_fuzz_reference_reader_takes_a_list_category():
    """The kineto harness's own json reader (the property's reference) failed with TypeError on a "cat"
    set to a list (unhashable); such an event is no kernel, for the loader and the reader alike."""
    import json

    from analyzer.fuzz.kineto import json_kernel_totals

    doc = {"traceEvents": [{"ph": "X", "cat": ["kernel"], "ts": 1, "dur": 2},
                           {"ph": "X", "cat": "kernel", "ts": 1, "dur": 2}]}
    assert json_kernel_totals(json.dumps(doc).encode()) == (1, 2000)
