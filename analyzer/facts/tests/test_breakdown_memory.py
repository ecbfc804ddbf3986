"""``timeline_segments`` in less memory, same values (issue 34: 10 M kernels, about 48 M segments): on one
device its ``start`` and ``end`` are two views of one array of edges and its constant id columns are
broadcast (:func:`analyzer.facts.breakdown_pieces.shared_columns`); on several devices nothing is shared."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts import FactStore, load_all
from analyzer.facts.breakdown_pieces import shared_columns
from analyzer.loading import load_trace
from analyzer.testing import real_trace
from analyzer.window import choose_window

load_all()


def _segments(name: str) -> pd.DataFrame:
    t = load_trace(real_trace(name))
    return FactStore(t, choose_window(t), {}).get("timeline_segments")


def _bytes(seg: pd.DataFrame) -> int:
    """The bytes the frame's columns hold, each array once (a view counts its base)."""
    roots: dict[int, int] = {}
    for c in seg.columns:
        arr = seg[c].array._codes if isinstance(seg[c].dtype, pd.CategoricalDtype) else seg[c].to_numpy()
        while isinstance(arr.base, np.ndarray):
            arr = arr.base
        roots[id(arr)] = arr.nbytes
    return sum(roots.values())


def test_one_device_segments_share_their_edges_and_broadcast_constant_ids() -> None:
    seg = _segments("medium_training_ctx128")
    n = len(seg)
    assert n == 27_198 and set(seg["device"]) == {0} and set(seg["waited_tid"]) == {-1}
    start, end = seg["start"].to_numpy(), seg["end"].to_numpy()
    assert start.dtype == end.dtype == np.int64 and seg["device"].dtype == seg["waited_tid"].dtype == np.int32
    assert np.shares_memory(start, end) and np.array_equal(end[:-1], start[1:])
    assert seg["device"].to_numpy().strides == seg["waited_tid"].to_numpy().strides == (0,)
    assert (seg["duration"].to_numpy() == end - start).all()
    # 40 bytes a row before (3 int64, 3 int32, 6 one-byte category codes): 8 + 8 + 4 + 6 now
    assert _bytes(seg) == 8 * (n + 1) + 8 * n + 4 * n + 6 * n + 4 + 4
    # a copy holds the same values in ordinary arrays: the readers see one frame or the other alike
    plain = pd.DataFrame({c: seg[c].to_numpy().copy() if not isinstance(seg[c].dtype, pd.CategoricalDtype)
                          else seg[c] for c in seg.columns})
    pd.testing.assert_frame_equal(plain, seg)
    assert plain.groupby(["device", "cause"], observed=True)["duration"].sum().equals(
        seg.groupby(["device", "cause"], observed=True)["duration"].sum())


def test_segments_of_several_devices_keep_their_own_columns() -> None:
    seg = _segments("ddp/ddp_exposed_comm_2gpu")
    assert set(seg["device"]) == {0, 1}
    start, end = seg["start"].to_numpy(), seg["end"].to_numpy()
    assert not np.shares_memory(start, end)
    assert seg["device"].to_numpy().strides == (4,)
    # each device tiles the window: its last end is not the next device's first start
    first = np.flatnonzero(np.diff(seg["device"].to_numpy()))
    assert len(first) == 1 and end[first[0]] > start[first[0] + 1]
    assert seg["waited_tid"].to_numpy().strides == (0,)  # constant there too (no cross-thread wait)
    assert shared_columns(seg) is seg  # nothing more to share


def test_segments_placed_and_split_span_by_span_as_in_one_pass(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The build reads its millions of segments a chunk at a time (the per-op split's sums, the places by
    start span by span): the same frame as placing by one stable sort of all starts, in whatever chunks."""
    import analyzer.facts.breakdown_overhead as overhead
    import analyzer.facts.breakdown_pieces as pieces
    from analyzer.facts.breakdown_overhead import PER_OP_DETAIL

    name = "heldout/h100_run5/detect_anomaly"
    seen: list[int] = []
    runs = pieces._runs

    def counted(starts):  # type: ignore[no-untyped-def]
        out = runs(starts)
        seen.append(-1 if out is None else len(out))
        return out

    monkeypatch.setattr(pieces, "_runs", counted)
    seg = _segments(name)
    # the busy part's runs and a few per chunk of gaps: placed span by span
    assert len(seg) == 67_337 and seen == [8]
    # the per-op split cut segments in two: the forward's (9,872) and, joined to it by its per-op
    # synchronizations, the backward's launch-bound pieces
    assert (seg["detail"] == PER_OP_DETAIL).sum() == 34_980
    monkeypatch.setattr(overhead, "_CHUNK", 1_000)
    monkeypatch.setattr(pieces, "_PLACE_CHUNK", 1_000)  # 68 spans, the split's sums over 68 chunks
    pd.testing.assert_frame_equal(_segments(name), seg)
    monkeypatch.setattr(pieces, "_PLACE_RUNS", 0)  # one stable sort of all starts
    pd.testing.assert_frame_equal(_segments(name), seg)
    assert seen[1:] == [8, -1]
