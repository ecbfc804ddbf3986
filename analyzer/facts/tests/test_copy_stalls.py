"""The ``copy_stalls`` fact: the part of each exposed host-device copy a fix can give back, on the committed
copy workloads, checked against the trace's own tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analyzer.facts import FactStore, load_all
from analyzer.loading import load_trace
from analyzer.testing import trace_file
from analyzer.window import choose_window

load_all()


def _store(name: str) -> FactStore:
    t = load_trace(trace_file(name))
    return FactStore(t, choose_window(t), {})


def _stalls(st: FactStore) -> pd.DataFrame:
    c = st.get("copy_stalls")
    return c.drop_duplicates(["device", "stall_start"]).reset_index(drop=True)


def test_pinned_copy_on_the_compute_stream_gives_back_the_copy_after_the_next_launch():
    # H100 copy_on_compute_stream: one 32 MiB pinned H2D copy per step, the step's first GEMM queued
    # behind it; the host submitted the op after each copy (the GEMM's workspace memset) 35-45 us into
    # the copy, so removing the copy buys the copy less those microseconds
    st = _store("h100/copy_on_compute_stream.sqlite.xz")
    c = st.get("copy_stalls")
    seg = st.get("timeline_segments")
    exposed = seg[(seg["cause"] == "exposed_copy") & seg["detail"].astype(str).str.startswith("H2D")]
    assert len(c) == len(exposed) == 10 and c["duration"].sum() == exposed["duration"].sum()
    s = _stalls(st)
    assert (s["host_blocked_ns"] < 1000).all()  # a pinned non_blocking copy returns at once
    # the next op's submission, from the trace's own tables: the first op of the device starting at the
    # stall's end or later, and the end of the API call with its correlation id
    ops = st.get("gpu_ops").sort_values("start")
    api = st.trace.api
    for row in s.itertuples():
        nxt = ops[ops["start"] >= row.stall_end].iloc[0]
        call = api[(api["correlation_id"] == nxt["correlation_id"]) & (api["pid"] == nxt["pid"])]
        assert row.next_submit == int(call["end"].iloc[0])
        assert row.stall_start < row.next_submit < row.stall_end
    avoid = c["avoidable_ns"].to_numpy()
    assert (avoid == (s["stall_end"] - s["next_submit"]).to_numpy()).all()
    share = avoid.sum() / c["duration"].sum()
    assert 0.9 < share < 0.97


def test_pageable_copy_blocks_the_host_and_is_given_back_whole():
    # pageable_h2d: 128 MiB from pageable memory per step; the host waits inside the copy call until
    # it is done, so the next launch comes after the copy, yet a pinned, prefetched copy frees the host
    # too: nearly all of the copy time is avoidable
    st = _store("pageable_h2d.sqlite.xz")
    s = _stalls(st)
    assert len(s) == 10
    assert (s["next_submit"] > s["stall_end"]).all()
    assert (s["host_blocked_ns"] >= 0.99 * (s["stall_end"] - s["stall_start"])).all()
    c = st.get("copy_stalls")
    assert c["avoidable_ns"].sum() > 0.97 * c["duration"].sum()


@pytest.mark.parametrize("name", ["round3/copy_on_compute_stream.pt.trace.json.gz",
                                  "round3/copy_on_compute_stream.sqlite.xz"])
def test_both_tools_give_the_same_reading(name):
    # the H200 recording under torch.profiler and nsys: every step's copy is found, part of it was the
    # host's time to the next launch, next to none the host inside the copy call (its last microsecond
    # after the copy began, at most)
    st = _store(name)
    c = st.get("copy_stalls")
    s = _stalls(st)
    assert len(s) >= 9 and (s["host_blocked_ns"] < 0.01 * (s["stall_end"] - s["stall_start"])).all()
    assert (c["avoidable_ns"] <= c["duration"]).all() and (c["avoidable_ns"] >= 0).all()
    share = c["avoidable_ns"].sum() / c["duration"].sum()
    assert 0.8 < share < 0.98


def test_no_exposed_copies_no_rows():
    st = _store("tiny_kernels.sqlite.xz")
    c = st.get("copy_stalls")
    assert c.empty and list(c.columns) == list(st.get("copy_stalls").columns)
    assert np.issubdtype(c["avoidable_ns"].dtype, np.integer)


def test_weights_streamed_from_pinned_memory_buy_at_most_the_window_less_the_link_time():
    """nsys-ai's h100_2gpu_1s fixture (public, tests/data/MANIFEST.md): an FSDP model whose parameters are
    copied from pinned host memory each layer (25 GB a GPU in 0.97 s, 27.7 GB/s), 22 ms of kernels. The
    copies are 95% of the window with no kernel beside them, but they already run at the link's rate:
    prefetching can hide them only behind the little compute there is, so the avoidable time is at most
    the window less the pinned H2D copy time (the union of the copies, from the memcpy table)."""
    t = load_trace(trace_file("public/nsysai_h100_2gpu_1s.sqlite.xz"))
    st = FactStore(t, choose_window(t), {})
    c = st.get("copy_stalls")
    w0, w1 = st.window.start_ns, st.window.end_ns
    mc = t.memcpy
    for dev in (0, 1):
        mine = c[c["device"] == dev]
        h2d = mc[(mc["device"] == dev) & (mc["direction"].astype(str) == "H2D")
                 & (mc["src_kind"].astype(str) == "pinned")].sort_values("start")
        covered, at = 0, w0  # union of the copies clipped to the window, walked by hand
        for s, e in zip(h2d["start"].clip(w0, w1), h2d["end"].clip(w0, w1)):
            covered += max(0, e - max(s, at))
            at = max(at, e)
        assert (mine["link_floor_ns"] == covered).all()
        assert covered > 0.9 * (w1 - w0)
        assert mine["duration"].sum() > 0.9 * (w1 - w0)  # exposed: nearly the whole window
        avoidable = mine["avoidable_ns"].sum()
        assert 0.9 * (w1 - w0 - covered) <= avoidable <= w1 - w0 - covered


def test_a_queue_of_copies_is_one_stall_and_waits_for_the_next_kernel():
    """snapshot_to_host (held out, H100): the pathology copies its 26 state_dict tensors with `.cpu()`
    (pageable, synchronous) at the end of each step, the twin queues the same bytes as pinned copies on a
    side stream at the start of the next step. Both are runs of copies with nothing else between them:
    one stall per run, held up to the first op that is not a host-device copy. The pathology's host was
    blocked in its copies, so nearly all of them is avoidable; the twin's copies ran before the host had
    submitted the forward's first kernel, so next to none of them is (they counted whole while the op after
    each copy was the next copy, submitted before it). Nothing waited for them: the host's time in its
    asynchronous pinned copy calls is not time a fix frees it from (a side-stream prefetch makes the same
    calls)."""
    sick = _store("heldout/h100_run3/snapshot_to_host.sqlite.xz")
    c = sick.get("copy_stalls")
    ops = sick.get("gpu_ops")
    s = _stalls(sick)
    assert (c["detail"].astype(str) == "D2H pageable").all()
    per_run = c.groupby("stall_start").size()
    # a run per step (the last step's copies, with no kernel after them, are a stall each)
    assert (per_run == 26).sum() >= 19
    for row in s[s["stall_start"].isin(per_run.index[per_run == 26])].itertuples():
        after = ops[(ops["device"] == row.device) & (ops["start"] >= row.stall_end)]
        first = after[~after["label"].astype(str).str.startswith(("memcpy H2D", "memcpy D2H"))].iloc[0]
        assert first["op"] == "kernel" and row.next_submit > row.stall_start
    assert c["avoidable_ns"].sum() > 0.9 * c["duration"].sum()
    twin = _store("heldout/h100_run3/snapshot_to_host_fixed.sqlite.xz")
    t = twin.get("copy_stalls")
    assert (t["detail"].astype(str) == "D2H pinned").all()
    # the twin's host made only asynchronous pinned copy calls between its copies and the forward's first
    # launch: nothing that blocks it on the device, so nothing a fix frees it from (they counted 2.3 ms
    # over the window, and the twin's exposed-copies finding stated 2.8 ms, while a copy call was one)
    assert (t["host_blocked_ns"] == 0).all()
    assert t["avoidable_ns"].sum() < 0.05 * t["duration"].sum()
