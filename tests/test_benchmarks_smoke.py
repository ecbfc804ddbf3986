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
