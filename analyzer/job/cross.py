"""Cross-rank facts: the same collective on every rank, a common clock, and who waited for whom.

Every rank of a communicator runs its collectives in the same order, and all ranks *leave* a
collective together (its kernel ends once the last rank's data has arrived), while they *arrive*
(the kernel starts) whenever each got there. So:

* **Matching.** Per communicator (NCCL's NVTX payload; one group when the trace does not say), each
  rank's communication kernels in start order form a sequence. A rank's sequence is matched to the
  reference rank's (the lowest) at the shift that makes the kernels' *end* times agree best (the
  smallest spread of end differences, among shifts whose collective names agree), preferring the
  shift whose clock offset is closest to what the traces' own clocks say (so that a shift by a whole
  step, which also ends in step, is not taken).
* **Clock.** The median end difference of the matched kernels is the rank's offset onto the
  reference clock; the difference from the traces' own clock offset is the estimated *skew* (0 for
  ranks of one report, which share a clock).
* **Waits.** For each collective instance matched on every rank: arrival of each rank (kernel start),
  the last arrival and which rank it was, each rank's wait (last arrival - own arrival), the lead of
  the last rank over the second last (what the job would gain if it had been on time), and the
  transfer time (kernel end - last arrival, the median over ranks).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: shifts tried when matching sequences (a rank's profile may start some collectives later)
MAX_SHIFT = 64
#: kernels compared per shift (enough to tell shifts apart; bounds the cost on long traces)
MAX_PAIRS = 4096
#: names must agree on at least this share of the compared kernels
MIN_NAME_MATCH = 0.9


@dataclass(frozen=True)
class RankComm:
    """One rank's communication kernels (its own trace clock, ns) and its clock origin."""

    rank: int
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # collective (or kernel short name), object
    group: np.ndarray  # communicator id ("" unknown), object
    origin_ns: int  # the trace's clock origin: absolute time of its t = 0
    clock_id: str  # traces with the same clock id share a clock (one report, or one host)


@dataclass
class Alignment:
    """Offsets onto the reference rank's clock and the matched collective instances."""

    offset_ns: dict[int, int]  # rank -> add to the rank's times to get reference-clock times
    skew_ns: dict[int, int]  # rank -> offset minus what the traces' clocks said (the estimated skew)
    matched: dict[int, int]  # rank -> kernels matched to the reference
    instances: pd.DataFrame  # long: inst, rank, kernel (index into the rank's arrays), start, end (ref clock)
    notes: list[str] = field(default_factory=list)


def _shift_score(ref_end: np.ndarray, ref_name: np.ndarray, end: np.ndarray, name: np.ndarray,
                 shift: int) -> tuple[float, float, float, int]:
    """(name match share, spread of end differences, median end difference, pairs) for pairing
    kernel ``i`` of the rank with kernel ``i + shift`` of the reference."""
    lo = max(0, -shift)
    hi = min(len(end), len(ref_end) - shift)
    if hi - lo < 1:
        return 0.0, np.inf, 0.0, 0
    idx = np.arange(lo, min(hi, lo + MAX_PAIRS))
    same = ref_name[idx + shift] == name[idx]
    if not same.any():
        return 0.0, np.inf, 0.0, len(idx)
    diff = (ref_end[idx + shift] - end[idx])[same].astype(np.float64)
    med = float(np.median(diff))
    spread = float(np.median(np.abs(diff - med)))
    return float(same.mean()), spread, med, len(idx)


def _best_shift(ref_end: np.ndarray, ref_name: np.ndarray, end: np.ndarray, name: np.ndarray,
                clock_offset: float | None) -> tuple[int, float, float] | None:
    """(shift, median end difference, name match) of the best pairing, or None."""
    scores = []
    for shift in range(-min(MAX_SHIFT, len(end) - 1), min(MAX_SHIFT, len(ref_end) - 1) + 1):
        match, spread, med, pairs = _shift_score(ref_end, ref_name, end, name, shift)
        if pairs and match >= MIN_NAME_MATCH:
            scores.append((shift, match, spread, med, pairs))
    if not scores:
        return None
    # a shift pairing only a few kernels (the sequences barely overlap) proves nothing
    most = max(s[4] for s in scores)
    scores = [s for s in scores if s[4] >= max(1, most // 2)]
    best_spread = min(s[2] for s in scores)
    # ranks leave a collective within microseconds of each other, so the right pairing has the
    # smallest spread of end differences; shifts nearly as good are ambiguous (back-to-back
    # collectives of equal length, or a whole step in a very regular loop): the clock decides
    tol = 1.5 * best_spread + 1_000.0
    good = [s for s in scores if s[2] <= tol]
    if clock_offset is not None:
        good.sort(key=lambda s: (abs(s[3] - clock_offset), abs(s[0])))
    else:
        good.sort(key=lambda s: (s[2], abs(s[0]), -s[4]))
    shift, match, _spread, med, _pairs = good[0]
    return shift, med, match


def align(ranks: Sequence[RankComm]) -> Alignment:
    """Match every rank's collectives to the reference rank (the lowest) and put them on its clock."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    ref = ranks[0]
    offsets = {ref.rank: 0}
    skews = {ref.rank: 0}
    matched = {ref.rank: len(ref.start)}
    notes: list[str] = []
    groups = sorted(set(ref.group.tolist())) if len(ref.group) else [""]
    rows: list[pd.DataFrame] = []
    ref_rows = []
    inst_base = 0
    ref_inst: dict[str, np.ndarray] = {}
    for g in groups:
        sel = np.flatnonzero(ref.group == g)
        ref_inst[g] = inst_base + np.arange(len(sel))
        ref_rows.append(pd.DataFrame({"inst": ref_inst[g], "rank": ref.rank, "kernel": sel,
                                      "start": ref.start[sel], "end": ref.end[sel]}))
        inst_base += len(sel)
    rows.extend(ref_rows)
    for r in ranks[1:]:
        # ranks of one report share a clock exactly; UTC session starts are only close (ms)
        same_clock = r.clock_id == ref.clock_id and r.clock_id.startswith("report:")
        known = r.clock_id == ref.clock_id and r.clock_id != ""
        clock_offset = float(r.origin_ns - ref.origin_ns) if known else None
        diffs, parts = [], []
        for g in groups:
            rsel = np.flatnonzero(ref.group == g)
            sel = np.flatnonzero(r.group == g) if g else np.arange(len(r.start))
            if not len(sel) or not len(rsel):
                continue
            # compare on the reference clock as the traces' clocks say (0 when unknown)
            base = clock_offset or 0.0
            best = _best_shift(ref.end[rsel], ref.name[rsel], r.end[sel] + base, r.name[sel],
                               0.0 if clock_offset is not None else None)
            if best is None:
                continue
            shift, med, _match = best
            lo, hi = max(0, -shift), min(len(sel), len(rsel) - shift)
            k = np.arange(lo, hi)
            same = ref.name[rsel][k + shift] == r.name[sel][k]
            k = k[same]
            diffs.append((ref.end[rsel][k + shift] - (r.end[sel][k] + base)))
            parts.append((sel[k], ref_inst[g][k + shift]))
        if not parts:
            notes.append(f"rank {r.rank}: no collective matches rank {ref.rank}'s; left out of the "
                         "cross-rank facts")
            continue
        d = np.concatenate(diffs)
        corr = 0 if same_clock else int(np.median(d))
        offset = int((clock_offset or 0.0) + corr)
        offsets[r.rank] = offset
        skews[r.rank] = corr
        kern = np.concatenate([p[0] for p in parts])
        inst = np.concatenate([p[1] for p in parts])
        matched[r.rank] = len(kern)
        rows.append(pd.DataFrame({"inst": inst, "rank": r.rank, "kernel": kern,
                                  "start": r.start[kern] + offset, "end": r.end[kern] + offset}))
    long = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["inst", "rank", "kernel", "start", "end"])
    return Alignment(offsets, skews, matched, long, notes)


def waits(instances: pd.DataFrame, ranks: Sequence[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per instance matched on every rank in ``ranks``: arrivals and waits.

    Returns ``(per_rank, per_instance)``: ``per_rank`` adds ``wait_ns`` (last arrival - own arrival)
    and ``is_last`` to the instance rows; ``per_instance`` has ``first_arrival``, ``last_arrival``,
    ``last_rank``, ``second_arrival`` (the second latest), ``lead_ns`` (last - second latest),
    ``end`` (median end), ``transfer_ns`` (median of end - last arrival), ``spread_ns``."""
    n = len(ranks)
    cols = ["inst", "rank", "kernel", "start", "end"]
    if instances.empty or n == 0:
        empty = pd.DataFrame(columns=[*cols, "wait_ns", "is_last"])
        return empty, pd.DataFrame(columns=["inst", "first_arrival", "last_arrival", "last_rank",
                                            "second_arrival", "lead_ns", "end", "transfer_ns", "spread_ns"])
    inst = instances.loc[instances["rank"].isin(list(ranks))]
    counts = inst.groupby("inst")["rank"].nunique()
    full = counts.index[counts.to_numpy() == n]
    inst = inst.loc[inst["inst"].isin(full)].sort_values(["inst", "start", "rank"], kind="stable")
    inst = inst.drop_duplicates(["inst", "rank"]).reset_index(drop=True)
    if inst.empty:
        return waits(pd.DataFrame(columns=cols), [])
    start = inst["start"].to_numpy(dtype=np.int64)
    end = inst["end"].to_numpy(dtype=np.int64)
    codes = inst["inst"].to_numpy()
    g = pd.Series(start).groupby(codes)
    last = g.max()
    first = g.min()
    # rows are sorted by (inst, start): the last row of each instance arrived last
    last_pos = inst.groupby("inst").tail(1)
    last_rank = pd.Series(last_pos["rank"].to_numpy(), index=last_pos["inst"].to_numpy())
    second = pd.Series(start).groupby(codes).apply(lambda s: s.iloc[-2] if len(s) > 1 else s.iloc[-1])
    end_med = pd.Series(end).groupby(codes).median()
    last_map = last.reindex(codes).to_numpy()
    transfer = pd.Series(np.maximum(end - last_map, 0)).groupby(codes).median()
    per_instance = pd.DataFrame({
        "inst": last.index.to_numpy(),
        "first_arrival": first.to_numpy(dtype=np.int64),
        "last_arrival": last.to_numpy(dtype=np.int64),
        "last_rank": last_rank.reindex(last.index).to_numpy(dtype=np.int64),
        "second_arrival": second.reindex(last.index).to_numpy(dtype=np.int64),
        "end": end_med.reindex(last.index).to_numpy().astype(np.int64),
        "transfer_ns": transfer.reindex(last.index).to_numpy().astype(np.int64),
    })
    per_instance["lead_ns"] = per_instance["last_arrival"] - per_instance["second_arrival"]
    per_instance["spread_ns"] = per_instance["last_arrival"] - per_instance["first_arrival"]
    per_rank = inst.copy()
    per_rank["wait_ns"] = (last_map - start).astype(np.int64)
    per_rank["is_last"] = per_rank["rank"].to_numpy() == last_rank.reindex(codes).to_numpy()
    return per_rank, per_instance


__all__ = ["Alignment", "RankComm", "align", "waits"]
