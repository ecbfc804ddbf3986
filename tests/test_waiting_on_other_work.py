"""Idle time with the next op already queued (the breakdown's wait_other) names the stream and the
stream-wait call, and waiting-on-other-work (GPU005) states it, on the public SGLang MI300X traces
(tests/data/public, see MANIFEST.md) whose stalls only showed as gpu-idle-gaps before."""
from __future__ import annotations

import functools

from analyzer.pipeline import analyze_trace
from analyzer.testing import DATA_DIR

DECODE = DATA_DIR / "public" / "tracelens_sglang_decode_mi300x.pt.trace.json.xz"
PREFILL = DATA_DIR / "public" / "tracelens_sglang_prefill_mi300x.pt.trace.json.xz"


@functools.cache
def analysis(path):  # type: ignore[no-untyped-def]
    return analyze_trace(path)


def test_the_stall_is_a_stream_waiting_on_an_event():
    a = analysis(DECODE)
    seg = a.facts.get("timeline_segments")
    longest = seg.loc[seg["duration"].idxmax()]
    assert longest["cause"] == "wait_other"
    # the kernel that ends it was launched on stream 3 right after a hipStreamWaitEvent on its thread
    assert longest["detail"] == "stream 3 waited on an event (cudaStreamWaitEvent)"
    assert longest["duration"] > 0.95 * a.window.duration_ns


def test_the_rule_states_the_wait_with_the_breakdown_number():
    for path in (DECODE, PREFILL):
        a = analysis(path)
        (f,) = [f for f in a.findings if f.rule == "waiting-on-other-work"]
        seg = a.facts.get("timeline_segments")
        mine = seg[(seg["cause"] == "wait_other") & (seg["duration"] >= 20_000)
                   & (seg["detail"] != "collective (another rank)")]
        assert f.impact_ns == int(mine["duration"].sum()) > 0.4 * a.window.duration_ns
        assert "stream 3 waited on an event" in f.headline
        # it is the cause of the idle-gaps symptom, which the verdict no longer counts on its own
        (gaps,) = [g for g in a.findings if g.rule == "gpu-idle-gaps"]
        assert f.key in gaps.explained_by


def test_waits_without_a_stream_wait_call_keep_the_plain_detail():
    """healthy's few short waits follow no stream-wait call: they stay 'queued (another stream or an event)'."""
    from analyzer.testing import real_trace

    a = analyze_trace(real_trace("healthy"))
    seg = a.facts.get("timeline_segments")
    waits = seg[seg["cause"] == "wait_other"]
    assert len(waits) and set(waits["detail"]) == {"queued (another stream or an event)"}
    assert not [f for f in a.findings if f.rule == "waiting-on-other-work"]


def test_low_utilization_counts_the_window_before_the_repeating_work():
    """The decode window opens at the program's annotation, 463 ms before the repeating GPU work: the
    periods low-gpu-utilization reads (window_periods) start with that stretch, so its least busy part
    is in the evidence and the wait that fills it explains the symptom (it said "no finding explains
    it" while waiting-on-other-work held 97.8% of the window)."""
    for path in (DECODE, PREFILL):
        a = analysis(path)
        periods = a.facts.get("window_periods")
        assert int(periods["start"].min()) == a.window.start_ns
        (wait,) = [f for f in a.findings if f.rule == "waiting-on-other-work"]
        (low,) = [f for f in a.findings if f.rule == "low-gpu-utilization"]
        assert wait.key in low.explained_by
    first = periods.sort_values("start").iloc[0]
    assert first["label"].startswith("before ") and first["util"] < 0.05
