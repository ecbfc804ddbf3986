"""A host-wait finding's footprint follows its own calls: the host_sync time the timeline breakdown
charged to the calls the finding grouped (the wait in each, the return from it, the refill before its
return), never that of other calls of the same name, left out by the rule's ``where`` or lying in
another finding's range (analyzer.rules.footprint._host_waits, analyzer.facts.breakdown_sync.owning_calls).
On real traces: the public cuDF trace (pageable copies both ways, sync-memcpy counts only the readbacks)
and round3/host_sync_balanced (a .item() and two .cpu() per micro-step)."""
from __future__ import annotations

import functools

import numpy as np
import pytest

from analyzer.findings import Scope
from analyzer.pipeline import analyze_trace
from analyzer.rules.footprint import footprint, merge_intervals
from analyzer.rules.loader import load_pack
from analyzer.rules.overrides import apply_overrides
from analyzer.testing import PUBLIC_DIR, real_trace

CUDF = PUBLIC_DIR / "quasiben__nvtx-examples__cudf.sqlite"


def _overlap(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Time (ns) two sets of intervals share (each merged first)."""
    (s1, e1), (s2, e2) = merge_intervals(*map(np.asarray, a)), merge_intervals(*map(np.asarray, b))
    s = np.concatenate([s1, s2]).astype(float)
    e = np.concatenate([e1, e2]).astype(float)
    edges = np.r_[s, e]
    step = np.r_[np.ones(len(s)), -np.ones(len(e))]
    order = np.lexsort((step, edges))
    edges, depth = edges[order], np.cumsum(step[order])
    return int(((edges[1:] - edges[:-1]) * (depth[:-1] >= 2)).sum())


def _inside(seg, calls) -> np.ndarray:
    """Segments lying inside one of ``calls`` (same thread): the waits in those calls."""
    hit = np.zeros(len(seg), dtype=bool)
    st, en, tid = seg["start"].to_numpy(), seg["end"].to_numpy(), seg["host_tid"].to_numpy()
    for s, e, t in calls[["start", "end", "tid"]].itertuples(index=False):
        hit |= (tid == t) & (st >= s) & (en <= e)
    return hit


@functools.cache
def _cudf():  # type: ignore[no-untyped-def]
    if not CUDF.is_file():
        pytest.skip(f"{CUDF} not beside the checkout (../shared/traces-public)")
    # sync-memcpy's thresholds lowered so that it fires on the 24 readbacks of this short capture
    pack = apply_overrides(load_pack("default"), ["sync-memcpy.min_calls=2", "sync-memcpy.min_impact=1us"])
    return analyze_trace(CUDF, pack)


def test_sync_memcpy_footprint_holds_the_readbacks_waits_not_the_uploads():
    a = _cudf()
    (f,) = [f for f in a.findings if f.rule == "sync-memcpy"]
    assert f.evidence_total == 24 and f.footprint is not None and f.footprint.source == "host"
    seg = a.facts.get("timeline_segments")
    copies = seg[(seg["cause"].astype(str) == "host_sync") & (seg["detail"].astype(str) == "cudaMemcpyAsync")]
    calls = a.facts.get("sync_calls")
    pageable = calls[(calls["sync_kind"] == "pageable_async_memcpy") & (calls["name"] == "cudaMemcpyAsync")]
    uploads = copies[_inside(copies, pageable[pageable["direction"] == "H2D"])]
    readbacks = copies[_inside(copies, pageable[pageable["direction"] == "D2H"])]
    # the trace has both: the 54 pageable uploads block the host too, but the rule leaves them out
    assert len(uploads) and len(readbacks) and (uploads["end"] - uploads["start"]).sum() > 100_000
    fp = (f.footprint.start, f.footprint.end)
    assert _overlap(fp, (uploads["start"].to_numpy(), uploads["end"].to_numpy())) == 0
    assert _overlap(fp, (readbacks["start"].to_numpy(), readbacks["end"].to_numpy())) == int(
        (readbacks["end"] - readbacks["start"]).sum())


@functools.cache
def _balanced():  # type: ignore[no-untyped-def]
    return analyze_trace(real_trace("round3/host_sync_balanced"))


def test_each_steps_syncs_own_their_waits_only():
    """host-sync-in-loop's rows split by step: each part's footprint lies in its own step, the parts are
    disjoint and together make the whole finding's footprint (its impact)."""
    a = _balanced()
    (f,) = [f for f in a.findings if f.rule == "host-sync-in-loop"]
    rule = next(r for r in load_pack("default").rules if r.name == "host-sync-in-loop")
    rows = a.facts.get("sync_calls")
    rows = rows[rows["blocking"] & rows["sync_kind"].isin(["device", "stream", "event"])].reset_index(drop=True)
    step = rows["nvtx_path"].astype(str).str.split("/").str[0].to_numpy()
    steps = a.facts.get("steps").sort_values("start")
    assert len(steps) >= 5
    # a step's syncs own time from its start to the next step's (the return from its last sync may
    # follow the step's end)
    span = dict(zip(steps["step"].astype(str), zip(steps["start"], np.r_[steps["start"].to_numpy()[1:], 2**62])))
    whole = footprint(rows, np.arange(len(rows)), Scope("trace"), a.window, a.facts.get, source=rule.source)
    assert whole is not None and whole.length_ns == f.impact_ns == f.footprint.length_ns
    parts = []
    for name in sorted(set(step)):
        part = footprint(rows, np.flatnonzero(step == name), Scope("trace"), a.window, a.facts.get,
                         source=rule.source)
        assert part is not None and part.source == "host"
        if name in span:
            lo, hi = span[name]
            assert part.start.min() >= lo and part.end.max() <= hi, name
        parts.append(part)
    assert len(parts) >= 5
    assert sum(p.length_ns for p in parts) == whole.length_ns  # a partition: no wait claimed twice


@pytest.mark.parametrize("which", ["cudf", "balanced"])
def test_every_host_sync_nanosecond_is_charged_to_one_call(which):
    """sync_calls' and alloc_calls' gpu_wait_ns partition the breakdown's host_sync time: each segment
    belongs to exactly one call, so findings summing their own calls never count one twice."""
    a = _cudf() if which == "cudf" else _balanced()
    seg = a.facts.get("timeline_segments")
    total = int(seg.loc[seg["cause"].astype(str) == "host_sync", "duration"].sum())
    syncs, allocs = a.facts.get("sync_calls"), a.facts.get("alloc_calls")
    assert total > 0
    assert int(syncs["gpu_wait_ns"].sum()) + int(allocs["gpu_wait_ns"].sum()) == total
    assert int(syncs.loc[~syncs["blocking"], "gpu_wait_ns"].sum()) == 0


def test_sync_memcpy_impact_is_its_readbacks_time():
    """The impact sums the counted copies' own time (it was every blocking copy's, uploads included),
    the same time as its footprint."""
    (f,) = [f for f in _cudf().findings if f.rule == "sync-memcpy"]
    assert f.footprint is not None and f.impact_ns == f.footprint.length_ns
    calls = _cudf().facts.get("sync_calls")
    d2h = calls[(calls["sync_kind"] == "pageable_async_memcpy") & (calls["direction"] == "D2H")]
    assert f.impact_ns == int(d2h["gpu_wait_ns"].sum()) < int(calls["gpu_wait_ns"][calls["name"] == "cudaMemcpyAsync"].sum())
