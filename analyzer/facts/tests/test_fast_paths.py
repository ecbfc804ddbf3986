"""The numpy fast paths of the facts, checked against the pandas code they replace, on real traces.

Each fast path (packed keys, code-based text columns, sorted lookups, per-device aggregates) must give
exactly what the general path gives (``assert_frame_equal`` with exact values and dtypes), including
the cases where it has to hand over to the general path.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
import pytest

from analyzer.analysis import Window
from analyzer.facts import FactStore
from analyzer.facts._util import (
    categorical_parts,
    concat_codes,
    first_positions,
    key_groups,
    text_array,
    text_codes,
    union_intervals,
    union_length_sorted,
    union_sorted,
)
from analyzer.facts.phase_index import union_length
from analyzer.loading.columns import categorical
from analyzer.testing import real_trace

TRACES = ["small_training_ctx128", "tiny_kernels", "pageable_h2d", "host_sync"]


@lru_cache(maxsize=2)
def _trace(name: str):
    from analyzer.loading import load_trace

    return load_trace(real_trace(name))


def _store(name: str) -> FactStore:
    t = _trace(name)
    window = Window(start_ns=0, end_ns=int(t.info.duration_ns) + 1, source="user", description="all")
    return FactStore(t, window, {})


@pytest.mark.parametrize("name", TRACES)
def test_key_groups_equals_a_stable_sort(name):
    t = _trace(name)
    for keys in (t.api["tid"].to_numpy(np.int64), t.kernels["stream"].to_numpy(np.int64),
                 t.api["correlation_id"].to_numpy(np.int64) % 5, t.api["correlation_id"].to_numpy(np.int64)):
        order, starts, ends = key_groups(keys)
        expected = np.argsort(keys, kind="stable")
        np.testing.assert_array_equal(order, expected)
        sk = keys[expected]
        cut = np.flatnonzero(sk[1:] != sk[:-1]) + 1
        np.testing.assert_array_equal(starts, np.r_[0, cut])
        np.testing.assert_array_equal(ends, np.r_[cut, len(sk)])


def _union_by_loop(start: np.ndarray, end: np.ndarray) -> list[tuple[int, int]]:
    """The textbook merge, one interval at a time (touching intervals merge; end before start: empty)."""
    blocks: list[list[int]] = []
    for s, e in sorted(zip(start.tolist(), np.maximum(end, start).tolist())):
        if blocks and s <= blocks[-1][1]:
            blocks[-1][1] = max(blocks[-1][1], e)
        else:
            blocks.append([s, e])
    return [(s, e) for s, e in blocks]


@pytest.mark.parametrize("name", TRACES)
def test_one_interval_union_behind_every_entry_point(name):
    """union_intervals (per group), union_sorted (one group, sorted) and union_length (per key) merge
    the real kernels and API calls exactly as the one-at-a-time merge does."""
    t = _trace(name)
    for frame, key in ((t.kernels, "stream"), (t.api, "tid")):
        start, end = frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64)
        keys = frame[key].to_numpy(np.int64)
        u = union_intervals(start, end, keys)
        lengths = union_length(pd.DataFrame({"k": keys, "start": start, "end": end}), "k")
        for k in np.unique(keys)[:8]:
            sel = keys == k
            expected = _union_by_loop(start[sel], end[sel])
            assert list(zip(u.start[u.group == k].tolist(), u.end[u.group == k].tolist())) == expected
            order = np.argsort(start[sel], kind="stable")
            us, ue = union_sorted(start[sel][order], end[sel][order].copy())
            assert list(zip(us.tolist(), ue.tolist())) == expected
            assert lengths[k] == sum(e - s for s, e in expected)
        order = np.lexsort((start, keys))
        assert union_length_sorted(keys[order], start[order], end[order]).equals(lengths)


@pytest.mark.parametrize("name", TRACES)
def test_first_positions_equals_the_first_match(name):
    t = _trace(name)
    table = t.api["correlation_id"].to_numpy(np.int64)
    query = t.kernels["correlation_id"].to_numpy(np.int64)

    def expected(tab: np.ndarray, q: np.ndarray) -> np.ndarray:
        first: dict[int, int] = {}
        for i, k in enumerate(tab.tolist()):
            first.setdefault(k, i)
        return np.array([first.get(k, -1) for k in q.tolist()], dtype=np.int64)

    for tab in (table, table[::-1], np.sort(np.unique(table))):  # as loaded, unsorted, strictly increasing
        q = np.r_[query, -5, tab[:3], 10**12]  # with keys that are absent
        np.testing.assert_array_equal(first_positions(tab, q), expected(tab, q))
    assert (first_positions(np.empty(0, np.int64), query) == -1).all()


@pytest.mark.parametrize("name", TRACES)
def test_text_array_is_the_column_a_frame_makes(name):
    t = _trace(name)
    codes, labels = text_codes(t.kernels["short_name"])
    made = pd.DataFrame({"x": np.arange(len(codes))})
    made["t"] = labels[codes]
    ours = pd.DataFrame({"x": np.arange(len(codes))})
    ours["t"] = text_array(codes, labels)
    pd.testing.assert_frame_equal(made, ours, check_exact=True)
    mixed = np.array(["a", None], dtype=object)  # not all text: left to the frame, as before
    assert isinstance(text_array(np.array([0, 1, 1]), mixed), np.ndarray)


@pytest.mark.parametrize("name", TRACES)
def test_categorical_parts_equals_concatenated_codes(name):
    t = _trace(name)
    parts = [text_codes(f[c]) for f, c in ((t.kernels, "nvtx_path"), (t.memcpy, "nvtx_path"), (t.api, "nvtx_path"))
             if c in f.columns]
    parts.append((np.array([0, -1, 1], dtype=np.int64), np.array(["zz", "a"], dtype=object)))  # -1 reads ""
    codes, labels = concat_codes(parts)
    rng = np.random.default_rng(0)
    for order in (None, rng.permutation(len(codes))):
        expected = categorical(codes if order is None else codes[order], labels)
        got = categorical_parts(parts, order)
        pd.testing.assert_series_equal(pd.Series(expected), pd.Series(got), check_exact=True)


@pytest.mark.parametrize("name", TRACES)
def test_top_kernels_and_occupancy_equal_their_groupbys(name, monkeypatch):
    import analyzer.facts.categories as categories
    import analyzer.facts.occupancy as occupancy

    fast = _store(name)
    top, occ = fast.get("top_kernels"), fast.get("occupancy")
    monkeypatch.setattr(categories, "_per_code", lambda *a: None)
    monkeypatch.setattr(occupancy, "_configs", lambda *a: None)
    slow = _store(name)
    pd.testing.assert_frame_equal(top, slow.get("top_kernels"), check_exact=True)
    pd.testing.assert_frame_equal(occ, slow.get("occupancy"), check_exact=True)


@pytest.mark.parametrize("name", TRACES)
def test_launch_stats_equals_its_groupby(name, monkeypatch):
    import analyzer.facts.api as api

    fast = _store(name).get("launch_stats")
    monkeypatch.setattr(api, "_device_stats", lambda *a: None)
    pd.testing.assert_frame_equal(fast, _store(name).get("launch_stats"), check_exact=True)


def test_launch_stats_per_device_on_several_devices(monkeypatch):
    """Two devices (the trace's kernels split by parity), launches matched and unmatched."""
    import analyzer.facts.api as api

    t = _trace("small_training_ctx128")
    device = np.arange(len(t.kernels)) % 2
    duration = t.kernels["duration"].to_numpy(np.int64)
    tiny = duration < api.TINY_KERNEL_NS
    api_ns = np.where(device == 0, duration.astype(np.float64) / 3, np.nan)
    api_ns[::7] = np.nan
    delay = np.where(np.arange(len(device)) % 5 == 0, np.nan, duration * 2.0)
    for launches in (api_ns, duration * 3):  # float with missing, integer (every kernel matched)
        got = api._device_stats(device, duration, tiny, launches, delay)
        frame = pd.DataFrame({"device": device, "duration": duration, "tiny": tiny,
                              "tiny_ns": np.where(tiny, duration, 0), "api_ns": launches, "delay": delay})
        expected = frame.groupby("device", sort=True).agg(
            kernel_count=("duration", "size"), kernel_ns=("duration", "sum"), median_ns=("duration", "median"),
            mean_ns=("duration", "mean"), tiny_count=("tiny", "sum"), tiny_ns=("tiny_ns", "sum"),
            launch_count=("api_ns", "count"), launch_api_ns=("api_ns", "sum"),
            launch_api_median_ns=("api_ns", "median"), launch_api_mean_ns=("api_ns", "mean"),
            launch_delay_median_ns=("delay", "median"),
        ).reset_index()
        pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert api._device_stats(device, duration * 2**40, tiny, api_ns, delay) is None  # sums past 2**52


@pytest.mark.parametrize("name", ["small_training_ctx128", "medium_training_ctx128"])
def test_phase_index_sorted_by_instance_equals_the_unsorted_index(name):
    """The index keeps its expanded ops in (instance, start) order; aggregates over them equal those of
    the same rows in expansion order (the per-query sort the index used to do)."""
    from dataclasses import replace

    from analyzer.phases import PhaseIndex

    t = _trace(name)
    idx = PhaseIndex.build(t)
    assert idx.ops_by_instance
    ops = idx.ops
    inst, start = ops["instance"].to_numpy(), ops["start"].to_numpy()
    assert (np.diff(inst) >= 0).all() and (start[1:] >= start[:-1])[inst[1:] == inst[:-1]].all()
    shuffled = ops.iloc[np.random.default_rng(1).permutation(len(ops))].reset_index(drop=True)
    plain = replace(idx, ops=shuffled, ops_by_instance=False, _cache={}, _excluded={})
    ids = idx.ranges["range_id"].to_numpy()
    some = ids[::3]
    lo, hi = int(start.min()), int(np.median(start))
    for args, kwargs in (((), {}), ((some,), {}), ((ids,), {"op_window": (lo, hi), "busy": False})):
        pd.testing.assert_frame_equal(idx.instance_gpu(*args, **kwargs), plain.instance_gpu(*args, **kwargs),
                                      check_exact=True)
    key = ["instance", "row"]
    ours = idx.kernel_rows(some).sort_values(key).reset_index(drop=True)
    theirs = plain.kernel_rows(some).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)


@pytest.mark.parametrize("name", ["host_sync", "small_training_ctx128"])
def test_ancestor_pairs_by_position_equals_the_sorted_lookup(name):
    """ancestor_pairs looks parents up by position when the range ids are the row numbers (the model's
    contract) and by a sorted lookup otherwise: the same pairs either way (rows shuffled, ids kept),
    and a parent that is no range (a dangling link) is the last ancestor of a chain in both."""
    from analyzer.facts.phase_index import ancestor_pairs

    nvtx = _trace(name).nvtx
    assert len(nvtx) and (nvtx["range_id"].to_numpy() == np.arange(len(nvtx))).all()
    key = ["range_id", "distance"]
    by_position = ancestor_pairs(nvtx).sort_values(key).reset_index(drop=True)
    assert (by_position["distance"] >= 2).any()  # nested ranges: more than one level looked up
    shuffled = nvtx.iloc[np.random.default_rng(2).permutation(len(nvtx))]
    by_lookup = ancestor_pairs(shuffled).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(by_position, by_lookup, check_exact=True)
    # without a root that has children (its descendants' links to it dangle): the same pairs but its own
    parent = nvtx["parent_id"].fillna(-1).to_numpy(np.int64)
    roots = nvtx["range_id"].to_numpy()[parent < 0]
    root = int(parent[np.isin(parent, roots)][0])
    expected = by_position.loc[by_position["range_id"] != root].reset_index(drop=True)
    assert (expected["ancestor_id"] == root).any()
    for frame in (nvtx.loc[nvtx["range_id"] != root], shuffled.loc[shuffled["range_id"] != root]):
        ours = ancestor_pairs(frame).sort_values(key).reset_index(drop=True)
        pd.testing.assert_frame_equal(ours, expected, check_exact=True)


@pytest.mark.parametrize("name", TRACES)
def test_device_blocks_last_op_is_the_latest_ending(name):
    """Each busy block's last op: the latest-ending op of the block, ties to the later one in start
    order (what a stable sort by (block, end) puts last), here also with ops ending together."""
    from analyzer.facts._util import union_intervals
    from analyzer.facts.intervals import _device_blocks

    ops = _store(name).get("gpu_ops")
    tied = ops.assign(end=(ops["end"] // 50_000 + 1) * 50_000)  # many ops of a block end at once
    for frame in (ops, tied):
        blocks = _device_blocks(frame)
        u = union_intervals(frame["start"].to_numpy(), frame["end"].to_numpy(), frame["device"].to_numpy())
        ends = frame["end"].to_numpy(np.int64)[u.order]
        by_end = np.lexsort((ends, u.block))
        last = np.r_[u.block[by_end][1:] != u.block[by_end][:-1], True]
        np.testing.assert_array_equal(blocks["last_op"].to_numpy(), u.order[by_end][last])


@pytest.mark.parametrize("name", ["small_training_ctx128", "host_sync", "tiny_kernels", "pageable_h2d"])
def test_instance_gpu_table_equals_the_outer_join(name, monkeypatch):
    """instance_gpu's numpy table (op aggregates and sync calls looked up per id) equals the pandas outer
    join, reindex and fillna it replaces: all instances, a third of them with repeats and unknown ids, an
    op window, and ids beyond 2^53 (handed to pandas)."""
    from analyzer.facts import phase_index
    from analyzer.phases import PhaseIndex

    idx = PhaseIndex.build(_trace(name))
    ids = idx.ranges["range_id"].to_numpy()
    start = idx.ops["start"].to_numpy()
    some = np.r_[ids[::3], ids[:2], [ids.max() + 7, -5]].astype(np.int64)
    window = (int(start.min()), int(np.median(start))) if len(start) else (0, 1)
    cases = (((), {}), ((some,), {}), ((ids,), {"op_window": window, "busy": False}),
             ((np.r_[ids[:3], [2**60]],), {}))
    ours = [idx.instance_gpu(*a, **k) for a, k in cases]
    monkeypatch.setattr(phase_index, "_instance_table", lambda *a, **k: None)
    theirs = [idx.instance_gpu(*a, **k) for a, k in cases]
    assert len(ours[0]) and ours[0]["sync_count"].sum() + ours[0]["op_count"].sum() > 0
    for a, b in zip(ours, theirs):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("name", ["small_training_ctx128", "host_sync"])
def test_expand_to_ancestors_equals_the_merge(name):
    """The phase index's expansion of ops onto their enclosing ranges finds each op's pairs in a table
    indexed by range id (the ids are the range rows) and otherwise by a binary search (ids far apart:
    here every id shifted by 2**40): both give the rows of the pandas merge it replaces, stably sorted by
    (instance, start), with instance and row in 32 bits; ops outside any range (id -1) give none."""
    from analyzer.facts.phase_index import _expand_to_ancestors, ancestor_pairs

    t = _trace(name)
    k = t.kernels
    pairs = ancestor_pairs(t.nvtx)
    nid = k["nvtx_id"].to_numpy(np.int64)
    nid = np.where(np.arange(len(nid)) % 7 == 0, -1, nid)  # every 7th op as if launched outside any range
    base = {"op": np.zeros(len(k), np.int8), "row": np.arange(len(k), dtype=np.int64),
            "start": k["start"].to_numpy(np.int64), "end": k["end"].to_numpy(np.int64),
            "duration": k["duration"].to_numpy(np.int64)}
    merged = pd.DataFrame({**base, "nvtx_id": nid}).merge(pairs, left_on="nvtx_id", right_on="range_id",
                                                           how="inner", sort=False)
    merged = merged.iloc[np.lexsort((merged["start"].to_numpy(), merged["ancestor_id"].to_numpy()))]
    expected = pd.DataFrame({"instance": merged["ancestor_id"].to_numpy(np.int32),
                             "own": merged["distance"].to_numpy() == 0,
                             **{c: merged[c].to_numpy() for c in ("op", "row", "start", "end", "duration")}})
    expected["row"] = expected["row"].astype(np.int32)
    assert len(expected) > len(k) // 2
    by_table = _expand_to_ancestors({**base, "nvtx_id": nid}, pairs, by_instance=True)
    pd.testing.assert_frame_equal(by_table, expected, check_exact=True)
    shift = 2**40
    far = pairs.assign(range_id=pairs["range_id"] + shift, ancestor_id=pairs["ancestor_id"] + shift)
    by_search = _expand_to_ancestors({**base, "nvtx_id": np.where(nid >= 0, nid + shift, -1)}, far, by_instance=True)
    assert by_search["instance"].dtype == np.int64  # beyond 32 bits: kept wide
    by_search["instance"] = (by_search["instance"] - shift).astype(np.int32)
    pd.testing.assert_frame_equal(by_search, expected, check_exact=True)
    # ids too large for one sort key (instance, start rank, own): the lexsort of the two keys
    huge = 2**58
    wide = pairs.assign(range_id=pairs["range_id"] + huge, ancestor_id=pairs["ancestor_id"] + huge)
    by_lexsort = _expand_to_ancestors({**base, "nvtx_id": np.where(nid >= 0, nid + huge, -1)}, wide,
                                      by_instance=True)
    by_lexsort["instance"] = (by_lexsort["instance"] - huge).astype(np.int32)
    pd.testing.assert_frame_equal(by_lexsort, expected, check_exact=True)


@pytest.mark.parametrize("name", ["small_training_ctx128", "host_sync", "pageable_h2d"])
def test_instance_op_totals_equal_the_expanded_rows(name):
    """instance_gpu's op aggregates, added up the range tree from each op's innermost range, equal the
    same aggregates grouped over the index's ops expanded once per enclosing range (with their launch
    times), for every instance and for ops starting in a window; instances with no op get the fill."""
    from analyzer.phases import PhaseIndex

    t = _trace(name)
    idx = PhaseIndex.build(t)
    ops = idx.ops
    frames = (t.kernels, t.memcpy, t.memset)
    launch = np.concatenate([np.where(f["api_start"].to_numpy(np.int64) >= 0, f["api_start"].to_numpy(np.int64),
                                      f["start"].to_numpy(np.int64)) for f in frames])
    offset = np.cumsum([0] + [len(f) for f in frames])[ops["op"].to_numpy()]
    rows = ops.assign(launch=launch[offset + ops["row"].to_numpy()], kernel=ops["op"].to_numpy() == 0,
                      own_ns=np.where(ops["own"].to_numpy(), ops["duration"].to_numpy(), 0))
    rows["kernel_ns"] = np.where(rows["kernel"], rows["duration"], 0)
    start = ops["start"].to_numpy()
    ids = idx.ranges["range_id"].to_numpy()
    for window in (None, (int(np.quantile(start, 0.3)), int(np.quantile(start, 0.7)))):
        sel = rows if window is None else rows[(rows["start"] >= window[0]) & (rows["start"] < window[1])]
        expected = sel.groupby("instance").agg(
            gpu_ns=("duration", "sum"), gpu_ns_exclusive=("own_ns", "sum"), kernel_ns=("kernel_ns", "sum"),
            kernel_count=("kernel", "sum"), op_count=("duration", "size"), first_op_start=("start", "min"),
            last_op_end=("end", "max"), first_launch=("launch", "min"))
        expected = expected.reindex(ids).fillna({"first_op_start": -1, "last_op_end": -1, "first_launch": -1})
        expected = expected.fillna(0).astype(np.int64)
        got = idx.instance_gpu(ids, op_window=window, busy=False)[list(expected.columns)]
        assert (got["op_count"] > 0).sum() > 10 and (got["kernel_count"] < got["op_count"]).any()
        np.testing.assert_array_equal(got.to_numpy(), expected.to_numpy())


@pytest.mark.parametrize("name", TRACES)
def test_sync_call_rows_copy_lookup_equals_the_merge(name):
    """The copies joined to the calls by a lookup of their integer correlation ids give the rows the
    frame merge gives (the merge still serves ids that are not integers: here the same ids as floats)."""
    from analyzer.facts.api import sync_call_rows

    t = _trace(name)
    fast = sync_call_rows(t.api, t.memcpy)
    api = t.api.assign(correlation_id=t.api["correlation_id"].astype(np.float64))
    slow = sync_call_rows(api, t.memcpy)
    assert len(fast) and fast["correlation_id"].dtype.kind in "iu" and slow["correlation_id"].dtype.kind == "f"
    pd.testing.assert_frame_equal(fast.drop(columns="correlation_id"), slow.drop(columns="correlation_id"))
    np.testing.assert_array_equal(fast["correlation_id"].to_numpy(np.float64), slow["correlation_id"].to_numpy())
    if name == "pageable_h2d":
        assert (fast["sync_kind"] == "pageable_async_memcpy").any() and (fast["direction"] != "").any()


@pytest.mark.parametrize("name", TRACES)
def test_gaps_host_call_time_equals_the_union_of_calls(name):
    """``host_api_overlap_ns``, each gap's time inside CUDA calls of its host thread, read from the calls'
    running reach and union length (no union built, :func:`analyzer.facts.intervals._host_api`), equals
    the time the union of that thread's calls covers in the gap (:func:`union_sorted`, ``covered_between``)."""
    from analyzer.facts._util import covered_between

    gaps, api = _store(name).get("gpu_gaps"), _trace(name).api
    got = gaps["host_api_overlap_ns"].to_numpy()
    tid, start, end = (gaps[c].to_numpy(np.int64) for c in ("host_tid", "start", "end"))
    expected = np.zeros(len(gaps), dtype=np.int64)
    for t in np.unique(tid).tolist():
        calls = api.loc[api["tid"].to_numpy() == t].sort_values("start", kind="stable")
        if calls.empty:
            continue
        us, ue = union_sorted(calls["start"].to_numpy(np.int64), calls["end"].to_numpy(np.int64).copy())
        expected[tid == t] = covered_between(us, ue, start[tid == t], end[tid == t])
    assert (got > 0).sum() > 10 and ((got > 0) & (got < end - start)).any()  # calls cover gaps fully and in part
    np.testing.assert_array_equal(got, expected)
