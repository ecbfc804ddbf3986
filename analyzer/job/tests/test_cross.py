"""Matching collectives across ranks, clock alignment and waits, on synthetic timelines (the
arithmetic; the real DDP traces are tested in tests/test_jobs.py)."""
from __future__ import annotations

import numpy as np

from analyzer.job.cross import RankComm, align, waits
from analyzer.job.ranks import RankHint, number_ranks


def _timeline(steps=20, per_step=5, late=3_000_000):
    """Rank 0's kernel starts/ends and rank 1's starts: rank 1 reaches each step's first collective
    ``late`` ns after rank 0; both leave together."""
    s0, e = [], []
    for step in range(steps):
        t = (step + 1) * 10_000_000
        for k in range(per_step):
            st = t + k * 500_000
            s0.append(st)
            e.append(st + 300_000 + (late if k == 0 else 0))
    s0, e = np.array(s0), np.array(e)
    s1 = s0.copy()
    s1[::per_step] += late
    return s0, s1, e


def _names(n):
    return np.array(["AllReduce"] * n, dtype=object), np.array([""] * n, dtype=object)


def test_align_finds_offset_skew_and_truncation():
    s0, s1, e = _timeline()
    name, grp = _names(len(e))
    off, skew = 1_000_000_000, 7_000
    r0 = RankComm(0, s0, e, name, grp, 5_000_000_000, "utc")
    # rank 1's trace starts 1 s later, its session clock 7 us off the UTC estimate; its profile missed
    # the first 3 collectives
    r1 = RankComm(1, (s1 - off + skew)[3:], (e - off + skew)[3:], name[3:], grp[3:], 5_000_000_000 + off, "utc")
    a = align([r1, r0])
    assert a.offset_ns == {0: 0, 1: off - skew} and a.skew_ns == {0: 0, 1: -skew}
    assert a.matched == {0: 100, 1: 97} and not a.notes
    per_rank, per_inst = waits(a.instances, [0, 1])
    assert len(per_inst) == 97  # only instances every rank has
    late = per_inst[per_inst["lead_ns"] > 0]
    assert len(late) == 19 and (late["last_rank"] == 1).all() and (late["lead_ns"] == 3_000_000).all()
    assert (per_inst["transfer_ns"] == 300_000).all()
    assert per_rank.groupby("rank")["wait_ns"].sum().to_dict() == {0: 19 * 3_000_000, 1: 0}


def test_same_clock_ranks_keep_their_offset_and_a_whole_step_shift_is_refused():
    # one report: the clock is shared; rank 1's sequence starts a whole step later (5 kernels),
    # which also lines the ends up in steady state: the clock must decide
    s0, s1, e = _timeline(late=0)
    name, grp = _names(len(e))
    r0 = RankComm(0, s0, e, name, grp, 10, "report:x")
    r1 = RankComm(1, s1[5:], e[5:], name[5:], grp[5:], 10, "report:x")
    a = align([r0, r1])
    assert a.offset_ns[1] == 0 and a.skew_ns[1] == 0
    inst = a.instances
    first1 = inst[(inst["rank"] == 1) & (inst["kernel"] == 0)]["inst"].item()
    assert first1 == 5  # rank 1's first kernel is the reference's sixth


def test_no_common_collective_is_a_note():
    s0, _s1, e = _timeline(steps=3)
    name, grp = _names(len(e))
    other = np.array(["AllGather"] * len(e), dtype=object)
    a = align([RankComm(0, s0, e, name, grp, 0, ""), RankComm(1, s0, e, other, grp, 0, "")])
    assert 1 not in a.offset_ns and "no collective matches" in a.notes[0]


def test_rank_numbering_sources():
    hint = lambda r, how, dev: RankHint(r, None, how, dev, 100 + dev)  # noqa: E731
    assert number_ranks([hint(1, "nccl", 0), hint(0, "nccl", 1)])[:2] == ([1, 0], "nccl")
    assert number_ranks([hint(None, "", 1), hint(None, "", 0)])[:2] == ([1, 0], "device")
    ranks, how, notes = number_ranks([hint(0, "file name", 0), hint(0, "file name", 0)])
    assert (ranks, how) == ([0, 1], "process order") and "repeat" in notes[0]
