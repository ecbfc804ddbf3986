"""Smoke tests of the benchmark scripts: each runs on a small committed input, in seconds.

Benchmarks are measured elsewhere (benchmarks/RESULTS*.md); these only keep the scripts runnable on the
dependency versions CI installs (msgspec 0.22 broke ``make_big_kineto`` once, unnoticed until a
benchmark run).
"""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KINETO = REPO / "tests" / "data" / "kineto" / "healthy.pt.trace.json.gz"


def _timed(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") != "M" and "ts" in e]


def test_make_big_kineto_replays_every_timed_event_exactly(tmp_path: Path) -> None:
    out = tmp_path / "big.pt.trace.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_big_kineto.py"), str(KINETO), str(out),
                    "--copies", "3"], check=True, capture_output=True, cwd=REPO)
    src = json.loads(gzip.decompress(KINETO.read_bytes()))
    big = json.loads(out.read_bytes())
    assert len(_timed(big)) == 3 * len(_timed(src))
    # the first copy keeps every timestamp's exact text (nanosecond decimals are not rounded)
    first = {(e.get("name"), str(e["ts"])) for e in _timed(big)[: len(_timed(src))]}
    assert first == {(e.get("name"), str(e["ts"])) for e in _timed(src)}
    steps = sorted(e["name"] for e in _timed(big) if str(e.get("name", "")).startswith("ProfilerStep#"))
    assert len(steps) == len(set(steps)) == 3 * sum(
        1 for e in _timed(src) if str(e.get("name", "")).startswith("ProfilerStep#"))


# -- every other script, on the smallest input and options (issue 34: benchmarks that run) ------------
TINY = REPO / "tests" / "data" / "tiny_kernels.sqlite.xz"  # 14,403 kernels, 28,834 runtime calls
TINY_KERNELS = 14_403


def _run(*args: object, timeout: float = 300) -> str:
    """A benchmark script in its own process, from the repository root; its stdout (stderr on failure)."""
    proc = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)
    assert proc.returncode == 0, (args, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout


def _row(text: str, first: str) -> list[str]:
    """The cells of the Markdown / space-separated table row starting with ``first``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else line.split()
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{text}")


def test_make_big_trace_and_bench_load(tmp_path: Path) -> None:
    """The committed ``.sqlite.xz`` is a valid source (decompressed on the fly); the copy holds whole
    replays of its window; bench_load times our loader on it."""
    import sqlite3

    big = tmp_path / "big.sqlite"
    _run(REPO / "benchmarks" / "make_big_trace.py", TINY, big, "--kernels", TINY_KERNELS + 1)
    con = sqlite3.connect(big)
    (n,), = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.close()
    assert n == 2 * TINY_KERNELS  # two whole copies of the window
    out = _run(REPO / "benchmarks" / "bench_load.py", big, "--repeat", "1", "--only", "load_trace")
    cells = _row(out, "load_trace")
    assert float(cells[1]) > 0 and float(cells[2]) > 0 and cells[3] == "1.00"
    bad = subprocess.run([sys.executable, REPO / "benchmarks" / "make_big_trace.py", REPO / "README.md",
                          tmp_path / "x.sqlite"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "not an nsys SQLite export" in bad.stderr


def test_run_py_end_to_end_on_a_tiny_size(tmp_path: Path) -> None:
    committed = (REPO / "benchmarks" / "RESULTS.md").read_bytes()
    results = tmp_path / "RESULTS.md"
    _run(REPO / "benchmarks" / "run.py", "--sizes", "1k", "--source", TINY, "--workdir", tmp_path,
         "--results", results, "--only", "analyze", "load cached", "--no-chromium", "--timeout", "240")
    rows = {cells[1]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in results.read_text().splitlines() if line.startswith("|  "))}
    for contender in ("analyze", "load cached"):
        assert rows[contender][0] == "1k" and float(rows[contender][2]) > 0, rows  # a measured wall time
    assert (REPO / "benchmarks" / "RESULTS.md").read_bytes() == committed  # --results was honoured


def test_bench_kineto_with_a_replayed_copy() -> None:
    """Ours and HTA's parser on a committed trace and a 2x replay (make_big_kineto through --scale); the
    scale check (--big-gb) on a 1 MB replay: ours loads and analyzes it."""
    out = _run(REPO / "benchmarks" / "bench_kineto.py", KINETO, "--repeat", "1", "--scale", "2",
               "--big-gb", "0.001")
    for name in ("healthy.pt.trace.json.gz", "healthy_x2.pt.trace.json"):
        cells = _row(out, name)
        assert all(float(c) > 0 for c in cells[2:5]), cells  # ours: wall s, CPU s, peak MB
        try:
            import hta  # noqa: F401
        except ImportError:
            continue
        assert all(float(c) > 0 for c in cells[5:8]), cells  # HTA ran too (it failed on relative paths once)
    assert "Over the 2 traces both read" in out
    assert "Start-up alone (interpreter and imports, no trace" in out  # the floor both sides share
    assert "numpy and msgspec alone (all the streaming decode imports)" in out  # a loader without pandas
    assert "What each side produces: ours, ``load_trace``: the whole trace model" in out  # not the same work
    # healthy.pt.trace.json.gz holds 0.2 MB of JSON: 5 copies make the first replay of at least 1 MB
    assert "healthy.pt.trace.json.gz replayed 5 times" in out
    for what in ("load_trace", "analyze --no-cache"):
        cells = _row(out, what)
        assert len(cells) == 4 and all(float(c.replace(",", "")) > 0 for c in cells[1:]), cells


def test_hta_crosscheck_agrees() -> None:
    import pytest

    pytest.importorskip("hta")
    out = _run(REPO / "benchmarks" / "hta_crosscheck.py", KINETO)
    assert "0 quantities outside the tolerance" in out and " ok  rank 0" in out


def test_facts_snapshot_write_and_compare(tmp_path: Path) -> None:
    _run(REPO / "benchmarks" / "facts_snapshot.py", "write", tmp_path / "a", TINY)
    (snap,) = (tmp_path / "a").iterdir()
    assert snap.stat().st_size > 1000
    out = _run(REPO / "benchmarks" / "facts_snapshot.py", "compare", tmp_path / "a", tmp_path / "a")
    assert "1 traces compared, 0 differences" in out


def test_facts_snapshot_categorical_text(tmp_path: Path) -> None:
    """A text column narrowed to a categorical is a difference, unless --categorical-text: then it is
    compared by value (a changed value still counts) and listed as a dtype change."""
    import pickle

    import pandas as pd

    _run(REPO / "benchmarks" / "facts_snapshot.py", "write", tmp_path / "a", TINY)
    (snap,) = (tmp_path / "a").iterdir()
    facts = pickle.loads(snap.read_bytes())
    key = next(k for k, v in facts.items() if k.endswith("/timeline_breakdown") and isinstance(v, pd.DataFrame)
               and len(v))
    narrowed = dict(facts)
    narrowed[key] = facts[key].astype({"cause": "category"})
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / snap.name).write_bytes(pickle.dumps(narrowed))
    cmd = [sys.executable, str(REPO / "benchmarks" / "facts_snapshot.py"), "compare", str(tmp_path / "a"),
           str(tmp_path / "b")]
    plain = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert plain.returncode == 1 and "1 differences" in plain.stdout
    out = _run(*cmd[1:], "--categorical-text")
    assert "1 traces compared, 0 differences" in out
    assert "dtype changed, values identical: timeline_breakdown.cause (1 traces)" in out
    changed = facts[key].astype({"cause": "category"})
    narrowed[key] = changed.assign(duration_ns=changed["duration_ns"] + 1)  # narrowed and a value changed
    (tmp_path / "b" / snap.name).write_bytes(pickle.dumps(narrowed))
    bad = subprocess.run([*cmd, "--categorical-text"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 1 and "1 differences" in bad.stdout


def test_stages_and_memstages_with_an_output_file(tmp_path: Path) -> None:
    """Both run the real CLI in their process, with the user's -o and format (they crashed on -o once)."""
    out = _run(REPO / "benchmarks" / "stages.py", TINY, "--no-cache", "--format", "md", "-o", tmp_path / "s.md")
    assert "# " in (tmp_path / "s.md").read_text()
    stages = {line[:44].strip(): line[44:].split() for line in out.splitlines()}
    for stage in ("loading", "rules", "building the report", "whole process"):
        assert float(stages[stage][0]) > 0, (stage, out)  # wall seconds of each top-level stage
    out = _run(REPO / "benchmarks" / "memstages.py", TINY, "--format", "md", "-o", tmp_path / "m.md")
    assert (tmp_path / "m.md").stat().st_size > 0
    assert "process peak (VmHWM):" in out and " loading" in out


def test_bench_jobs_two_ranks_serial_and_one_spilling_worker(tmp_path: Path) -> None:
    """Serially and on one Dask worker whose spill thresholds make it write every result it holds to disk
    (what once failed to pickle): the straggler is found both ways, the worker really spilled, and the
    table and the 1,024-rank estimate are written."""
    import pytest

    pytest.importorskip("distributed")
    jobs = tmp_path / "JOBS.md"
    for _attempt in range(3):  # Dask spills from its own memory monitor: now and then a run ends before it acts
        _run(REPO / "benchmarks" / "bench_jobs.py", "--sizes", "2", "--workers", "1", "--serial-up-to", "2",
             "--modes", "spill", "--spill-mb", "0.001", "--timeout", "300", "--workdir", tmp_path, "--out", jobs)
        text = jobs.read_text()
        rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| 2 |")]
        if len(rows) == 2 and rows[1][5].split()[0].isdigit() and int(rows[1][5].split()[0]) >= 2:
            break
    assert "spill thresholds set to 0.001 MB" in text and "Estimate for 1,024 ranks" in text
    assert [r[1] for r in rows] == ["serial", "Dask, 1 worker, spilling"], rows
    assert all(r[7].startswith("yes: rank [0]") for r in rows), rows  # the planted straggler
    assert int(rows[1][5].split()[0]) >= 2, rows  # the worker wrote its task results to disk


def test_breakdown_calibration_one_pair() -> None:
    """The script's own command line on one pair (tests/test_breakdown_calibration.py checks its table
    against docs/breakdown-calibration.md)."""
    out = _run(REPO / "benchmarks" / "breakdown_calibration.py", "--only", "tiny_kernels")
    rows = [line for line in out.splitlines() if line.startswith("| tiny_kernels |")]
    assert {r.split("|")[2].strip() for r in rows} == {"nsys", "torch.profiler"}, out
    assert all(" launch-bound " in r for r in rows)
    bad = subprocess.run([sys.executable, REPO / "benchmarks" / "breakdown_calibration.py", "--only", "x",
                          "--write"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "cannot be combined" in bad.stderr


def test_breakdown_vs_hta_check() -> None:
    """The script's command line (tests/test_breakdown_vs_hta.py checks its numbers): every round-3 trace
    compared and docs/breakdown-vs-hta.md current."""
    import pytest

    pytest.importorskip("hta")
    round3 = REPO / "tests" / "data" / "round3"
    if not any(round3.glob("*.pt.trace.json.gz")):
        pytest.skip("round-3 traces absent")
    out = _run(REPO / "benchmarks" / "breakdown_vs_hta.py", "--check")
    for name in ("decode_eager", "optimizer_loop", "host_work_in_range", "copy_on_compute_stream"):
        assert f"| {name} |" in out and f"| {name}_fixed |" in out, name
