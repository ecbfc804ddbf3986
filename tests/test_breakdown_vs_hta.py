"""The ``timeline_breakdown`` fact's idle time and host-caused share agree with HTA's idle-time breakdown
on the round-3 torch.profiler pairs, and ``docs/breakdown-vs-hta.md`` holds the current numbers.

Definitions, why ours is restricted to HTA's span, and the tolerances: ``benchmarks/breakdown_vs_hta.py``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("hta")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.breakdown_vs_hta import DOC, ORDER_MIN_GAP, PAIRS, ROUND3, SHARE_TOL, Row, rows, table  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not any(ROUND3.glob("*.pt.trace.json.gz")), reason="round-3 traces absent")]


@pytest.fixture(scope="module")
def measured() -> dict[str, Row]:
    return {r.trace: r for r in rows()}


def test_every_round3_trace_is_compared(measured):
    assert {f"{b}{s}" for b in PAIRS for s in ("", "_fixed")} <= set(measured)
    assert sum(not r.skipped for r in measured.values()) >= 6


def test_idle_time_agrees(measured):
    for r in measured.values():
        if r.skipped:
            continue
        if r.streams == 1:  # the device is idle exactly when its one stream is
            assert abs(r.our_idle_us - r.hta_idle_us) <= r.idle_tolerance_us, r
        else:  # other streams fill some of the compute stream's gaps
            assert r.our_idle_us <= r.hta_idle_us + r.idle_tolerance_us, r


def test_host_share_agrees_on_single_stream_traces(measured):
    for r in measured.values():
        if not r.skipped and r.streams == 1:
            assert abs(r.our_host_share - r.hta_host_share) <= SHARE_TOL, r


def test_pairs_rank_the_same_way(measured):
    checked = 0
    for base in PAIRS:
        a, b = measured.get(base), measured.get(base + "_fixed")
        if a is None or b is None or a.skipped or b.skipped:
            continue
        if abs(a.hta_host_share - b.hta_host_share) > ORDER_MIN_GAP:
            checked += 1
            assert (a.our_host_share > b.our_host_share) == (a.hta_host_share > b.hta_host_share), (a, b)
    assert checked >= 1


def test_table_is_current(measured):
    assert DOC.read_text() == table(list(measured.values())), \
        "docs/breakdown-vs-hta.md is stale: python benchmarks/breakdown_vs_hta.py --write"
