"""Dispatch handed from one launching thread to another (split from :mod:`analyzer.facts.breakdown`).

A program launching from several threads of one process hands the work from one to the other: the
main thread's forward launches its last kernel and calls ``loss.backward()``, the autograd engine's
thread wakes up and launches the first backward kernel; backward done, the main thread launches the
optimizer's. Each thread alone has been free for a whole phase (the engine thread since the previous
backward), longer than ``dispatch_gap_ns``, so its own timeline calls that time its own code
(``host_work``). But the process was between two consecutive launches for only the handoff: the
framework's code between the last launch of one thread and the first of the next, which a CUDA graph
removes with the launches. The committed eager-vs-graphed pairs measure it (``round3/host_sync_graph*``:
about 300 such pieces a run, 0.1-0.8 ms each, 65-77 ms of host_work in ``step_N/micro_N`` that the
graph bought and launch-bound did not state).

So a host-work piece of the feeding thread (its own code, the GPU idle) whose end comes less than
``dispatch_gap_ns`` after another thread of the same process launched GPU work is ``launch_bound``
``dispatch`` from that launch on; the part before it, if any, stays host work. Only between two eager
launches, where the handoff is the eager program's dispatch:

- not *out of* a CUDA graph replay: where the other thread's latest launch was a replay's (a graph
  launch call, whose ops ``in_graph`` marks), the waking thread was waiting for the graphed work, not
  dispatching (compile_train's cudagraph-tree twin: the engine thread replays the backward graph, the
  main thread then wakes for the eager optimizer, 0.2 ms a step that would make launch-bound fire on
  the graphed ``step_N/backward``);
- not *into* one: a gap that a replay's op (or its input copy) ends is the replay's preparation
  (:data:`analyzer.facts.breakdown.GRAPH_NEXT`), whose host time the graph keeps; it stays host work.

Where one thread launches everything (most traces) nothing changes.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyzer.facts._util import column, key_groups
from analyzer.facts.registry import FactContext

_NONE = np.iinfo(np.int64).min


class Handoffs:
    """Per process with several launching threads, each thread's view of the others' launches: the
    sorted ends of the launch calls of the ops the other threads launched, and whether each launched a
    CUDA graph replay (made per thread on first use)."""

    def __init__(self, ctx: FactContext, ops: pd.DataFrame, otid: np.ndarray, opid: np.ndarray,
                 op_submit: np.ndarray | None = None) -> None:
        """``op_submit``: every op's :func:`~analyzer.facts.breakdown_launch.submission` where already
        made (read, not looked up again)."""
        from analyzer.facts.breakdown_launch import submission
        from analyzer.loading.model import NOT_IN_GRAPH

        self._ends: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._by_pid: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        if not len(ops):
            return
        key = (opid.astype(np.int64) << 32) | (otid.astype(np.int64) & 0xFFFFFFFF)
        if (key == key[0]).all():  # one launching thread (most traces): nothing to hand off
            return
        pids, counts = np.unique(np.unique(key) >> 32, return_counts=True)
        multi = pids[counts > 1]
        if not len(multi):
            return
        rows = np.flatnonzero(np.isin(opid, multi))
        graph = column(ops, "in_graph", NOT_IN_GRAPH).fillna(NOT_IN_GRAPH).to_numpy(dtype=np.int64)[rows] != NOT_IN_GRAPH
        end = op_submit[rows] if op_submit is not None else submission(ctx, ops, rows)
        ok = end >= 0
        rows, end, graph = rows[ok], end[ok], graph[ok]
        order, first, last = key_groups(opid[rows].astype(np.int64))
        for a, b in zip(first.tolist(), last.tolist()):
            r = order[a:b]
            o = r[np.argsort(end[r], kind="stable")]
            self._by_pid[int(opid[rows[r[0]]])] = (end[o], otid[rows[o]].astype(np.int64), graph[o])

    def __bool__(self) -> bool:
        return bool(self._by_pid)

    def _others(self, pid: int, tid: int) -> tuple[np.ndarray, np.ndarray]:
        key = (pid, tid)
        if key not in self._ends:
            empty = np.empty(0, np.int64)
            ends, tids, graph = self._by_pid.get(pid, (empty, empty, np.empty(0, dtype=bool)))
            self._ends[key] = (ends[tids != tid], graph[tids != tid])
        return self._ends[key]

    def last_other_launch(self, tid: np.ndarray, pid: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per query, the latest end before ``t`` of a launch call by another thread of the process (an
        int64 minimum where none) and whether that launch was a CUDA graph replay's."""
        out = np.full(len(t), _NONE, dtype=np.int64)
        replay = np.zeros(len(t), dtype=bool)
        key = (pid.astype(np.int64) << 32) | (tid.astype(np.int64) & 0xFFFFFFFF)
        order, first, last = key_groups(key)
        for a, b in zip(first.tolist(), last.tolist()):
            q = order[a:b]
            ends, graph = self._others(int(pid[q[0]]), int(tid[q[0]]))
            if not len(ends):
                continue
            at = np.searchsorted(ends, t[q], side="left") - 1
            hit = at >= 0
            out[q[hit]] = ends[at[hit]]
            replay[q[hit]] = graph[at[hit]]
        return out, replay


def hand_off(handoffs: Handoffs, idx: np.ndarray, s: np.ndarray, e: np.ndarray, c: np.ndarray, d: np.ndarray,
             feeder: np.ndarray, fpid: np.ndarray, into_graph: np.ndarray | None, host_work: int, launch_bound: int,
             dispatch: int, dispatch_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pieces ``(idx, s, e, c, d)`` of gaps (``idx``: the gap of each, ``feeder``/``fpid``: each gap's
    feeding thread and process, ``into_graph``: the gaps a replay's op or its input copy ends, None
    without graphs) with the host-work pieces of the thread's own code (detail -1) that end less than
    ``dispatch_ns`` after another thread's eager launch turned into dispatch from that launch on."""
    mine = (c == host_work) & (d < 0) & (fpid[idx] >= 0)
    if into_graph is not None:
        mine &= ~into_graph[idx]
    own = np.flatnonzero(mine)
    if not len(own):
        return idx, s, e, c, d
    last, replay = handoffs.last_other_launch(feeder[idx[own]], fpid[idx[own]], e[own])
    near = (last > _NONE) & (e[own] - last < dispatch_ns) & ~replay
    own, last = own[near], last[near]
    if not len(own):
        return idx, s, e, c, d
    c, d = c.copy(), d.copy()
    whole = last <= s[own]
    c[own[whole]], d[own[whole]] = launch_bound, dispatch
    cut, at = own[~whole], last[~whole]  # another thread launched during the piece: its tail is dispatch
    if not len(cut):
        return idx, s, e, c, d
    e = e.copy()
    tail_e = e[cut]
    e[cut] = at
    return (np.r_[idx, idx[cut]], np.r_[s, at], np.r_[e, tail_e],
            np.r_[c, np.full(len(cut), launch_bound, dtype=c.dtype)], np.r_[d, np.full(len(cut), dispatch, dtype=d.dtype)])
