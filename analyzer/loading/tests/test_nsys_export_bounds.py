"""The ``nsys export`` of an ``.nsys-rep`` runs within a time limit and a size limit: past either, the
exporter is killed, its partial output removed and the analysis ends with one line.

No nsys is needed: a stand-in ``nsys`` script on the PATH plays a hung or runaway exporter (these are
bad-input tests; the report bytes are never read by anything but the stand-in)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analyzer.errors import InputError, StageTimeoutError
from analyzer.loading import load_trace, nsys_rep
from analyzer.watchdog import Watchdog

REPO = Path(__file__).resolve().parents[3]


def _fake_nsys(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``nsys`` on the PATH whose ``export`` writes its pid to ``pid`` then runs ``body`` with
    ``$out`` the output path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "nsys"
    fake.write_text("#!/bin/sh\n"
                    f'echo $$ > {tmp_path / "pid"}\n'
                    'while [ "$1" != "--output" ]; do shift; done; out="$2"\n' + body + "\n")
    fake.chmod(0o755)
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert nsys_rep.find_nsys() == str(fake)
    return fake


def _report(tmp_path: Path) -> Path:
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00" * 4096)
    return rep


def _gone(tmp_path: Path) -> None:
    """The exporter was killed and nothing it wrote is left in the cache."""
    pid = int((tmp_path / "pid").read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the exporter (pid {pid}) still runs")
    left = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert left == [], left


def test_a_hung_export_is_stopped_at_the_default_limit(tmp_path, monkeypatch):
    _fake_nsys(tmp_path, 'echo partial > "$out"; sleep 600', monkeypatch)
    monkeypatch.setattr(nsys_rep, "EXPORT_BASE_SECONDS", 0.5)
    monkeypatch.setattr(nsys_rep, "EXPORT_SECONDS_PER_MB", 0.0)
    rep = _report(tmp_path)
    started = time.monotonic()
    with pytest.raises(InputError) as info:
        load_trace(rep, cache_dir=tmp_path / "cache")
    assert time.monotonic() - started < 30
    msg = str(info.value)
    assert "\n" not in msg and "ran past 0.5 s" in msg and "--timeout" in msg, msg
    assert "nsys export --type sqlite" in msg
    _gone(tmp_path)
    assert rep.read_bytes() == b"\x00" * 4096


def test_the_default_limit_scales_with_the_report(tmp_path):
    small, large = tmp_path / "s.nsys-rep", tmp_path / "l.nsys-rep"
    small.write_bytes(b"\x00" * 10)
    with open(large, "wb") as fh:
        fh.truncate(500 * 10**6)  # sparse: no disk used
    s, big = nsys_rep.ExportBounds.for_report(small), nsys_rep.ExportBounds.for_report(large)
    assert s.seconds == pytest.approx(nsys_rep.EXPORT_BASE_SECONDS, abs=1)
    assert big.seconds == pytest.approx(nsys_rep.EXPORT_BASE_SECONDS + 1000)
    assert s.max_bytes == 64 * 2**20 and big.max_bytes == 8 * 2**30


def test_the_analysis_timeout_bounds_the_export(tmp_path, monkeypatch):
    """Under ``--timeout`` (the watchdog) the export takes that limit, and its interrupt also kills
    the exporter and removes its output."""
    _fake_nsys(tmp_path, 'echo partial > "$out"; sleep 600', monkeypatch)
    rep = _report(tmp_path)
    with Watchdog(1.0, str(rep)):
        assert nsys_rep.ExportBounds.for_report(rep).seconds == 1.0
    assert nsys_rep.ExportBounds.for_report(rep).seconds >= nsys_rep.EXPORT_BASE_SECONDS
    with pytest.raises(StageTimeoutError), Watchdog(1.0, str(rep)):
        load_trace(rep, cache_dir=tmp_path / "cache")
    _gone(tmp_path)


def test_a_runaway_export_is_stopped_at_the_size_limit(tmp_path, monkeypatch):
    _fake_nsys(tmp_path, 'yes 0123456789abcdef > "$out"', monkeypatch)
    monkeypatch.setenv("ANALYZER_MAX_INPUT", "2MB")
    rep = _report(tmp_path)
    with pytest.raises(InputError) as info:
        load_trace(rep, cache_dir=tmp_path / "cache")
    msg = str(info.value)
    assert "\n" not in msg and "more than 2 MB of SQLite" in msg and "ANALYZER_MAX_INPUT" in msg, msg
    _gone(tmp_path)


def test_the_exporters_chatter_is_bounded_and_its_last_line_reported(tmp_path, monkeypatch):
    _fake_nsys(tmp_path, 'yes noise | head -c 3000000; echo "ERROR: the report is damaged"; exit 3',
               monkeypatch)
    with pytest.raises(InputError) as info:
        load_trace(_report(tmp_path), cache_dir=tmp_path / "cache")
    assert "the report is damaged" in str(info.value)


def test_cli_one_line_for_a_runaway_export(tmp_path, monkeypatch):
    _fake_nsys(tmp_path, 'yes 0123456789abcdef > "$out"', monkeypatch)
    env = {**os.environ, "ANALYZER_MAX_INPUT": "1MB", "ANALYZER_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "analyzer.cli", str(_report(tmp_path)), "-o",
                           str(tmp_path / "r.md")], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr and "ANALYZER_MAX_INPUT" in lines[0], proc.stderr
    _gone(tmp_path)
