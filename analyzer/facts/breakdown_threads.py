"""Host work held on another thread: the feeding thread blocked on a thread of its own process.

The timeline breakdown (:mod:`analyzer.facts.breakdown`) names ``host_work`` time by the innermost NVTX
range open on the *feeding* thread. When that thread is blocked waiting for another thread of its
process (a future's ``result()``, a ``queue.get()``, a lock or a join: ``sem_wait``,
``pthread_cond_wait``, ``futex``... in the OS-runtime trace), the range it waits in
(``wait_weights``) is not what held the GPU back: the other thread's work is (``load_weights`` on a
background decoder thread). :func:`cross_thread_waits` splits each host-work segment at the feeding
thread's OS-runtime wait calls and, where another thread of the same process has an NVTX range open
and is not itself blocked meanwhile, names that thread and its innermost range in the piece's detail
(``load_weights (thread 1081, waited for)``) and column ``waited_tid``, unless that range is the one
the segment already names (a feeding thread without ranges of its own, such as the autograd engine's,
is named by its process's main thread's range). The cause stays
``host_work``: the GPU waited for the program's own host code, on another thread.

What it cannot tell: traces without OS-runtime calls (torch.profiler; nsys without ``-t osrt``) do not
show whether a thread is blocked or running Python, so such time keeps the waiting thread's range; a
waited-on thread with no NVTX range open (or another process: a DataLoader worker) is not named either.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzer.facts._util import generic_path, text, text_codes
from analyzer.facts.nvtx_ranges import innermost_open, ranges_only
from analyzer.loading.columns import categorical, narrow_int
from analyzer.facts.registry import FactContext

#: OS-runtime calls that block a thread until another thread of its process acts (semaphores, condition
#: variables, mutexes, joins, futexes); I/O waits (poll, read, epoll_wait) and sleeps are not among them
WAIT_CALLS = re.compile(
    r"^(?:sem_(?:timed|clock)?wait|pthread_cond_(?:timed|clock)?wait|pthread_mutex_(?:timed|clock)?lock|"
    r"pthread_rwlock_(?:timed|clock)?(?:rd|wr)lock|pthread_join|pthread_timedjoin_np|pthread_barrier_wait|"
    r"futex|__futex\w*|syscall_futex)$")

#: at most this many waits (the longest) are looked at; the rest keep the waiting thread's range
MAX_PIECES = 5000


def _waits(ctx: FactContext) -> pd.DataFrame:
    """The trace's OS-runtime wait calls: ``tid``, ``start``, ``end``, ``name``, by thread and start."""
    osrt = ctx.trace.osrt
    codes, labels = text_codes(osrt["name"])  # a few dozen distinct calls over 100,000s of rows
    waiting = np.array([isinstance(u, str) and bool(WAIT_CALLS.match(u)) for u in labels] + [False], dtype=bool)
    codes = np.asarray(codes, dtype=np.int64)
    keep = np.flatnonzero(waiting[np.where(codes < 0, len(labels), codes)]
                          & (osrt["end"].to_numpy() > osrt["start"].to_numpy()))
    out = pd.DataFrame({"tid": osrt["tid"].to_numpy(dtype=np.int64)[keep],
                        "start": osrt["start"].to_numpy(dtype=np.int64)[keep],
                        "end": osrt["end"].to_numpy(dtype=np.int64)[keep],
                        "name": np.asarray(labels, dtype=object)[codes[keep]]})
    out = out.sort_values(["tid", "start"], kind="stable").reset_index(drop=True)
    # disjoint per thread (a call nested in another, or overlapping it, keeps only what extends the
    # thread's waiting time), so the pieces cut from a segment never overlap
    tid = out["tid"].to_numpy()
    start, end = out["start"].to_numpy().copy(), out["end"].to_numpy().copy()
    bounds = np.flatnonzero(np.r_[True, tid[1:] != tid[:-1], True])  # one run per thread
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        reach = np.maximum.accumulate(end[a:b])
        start[a + 1:b] = np.maximum(start[a + 1:b], reach[:-1])
        end[a:b] = reach
    out["start"], out["end"] = start, end
    return out.loc[end > start].reset_index(drop=True)


def _blocked(waits: pd.DataFrame, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per query: whether thread ``tid[i]`` is inside one of ``waits`` at ``t[i]``."""
    out = np.zeros(len(t), dtype=bool)
    w_tid = waits["tid"].to_numpy()
    w_start, w_end = waits["start"].to_numpy(), waits["end"].to_numpy()
    for one in np.unique(tid).tolist():
        lo, hi = np.searchsorted(w_tid, [one, one + 1])
        if hi == lo:
            continue
        q = np.flatnonzero(tid == one)
        k = np.searchsorted(w_start[lo:hi], t[q], side="right") - 1
        out[q] = (k >= 0) & (w_end[lo:hi][np.maximum(k, 0)] > t[q])
    return out


def _pieces(seg: pd.DataFrame, rows: np.ndarray, waits: pd.DataFrame) -> list[tuple[int, int, int, str]]:
    """``(row, start, end, call)``: the parts of host-work segments ``rows`` their feeding thread spent
    in a wait call, the longest :data:`MAX_PIECES`."""
    out: list[tuple[int, int, int, str]] = []
    s_start = seg["start"].to_numpy(dtype=np.int64)
    s_end = seg["end"].to_numpy(dtype=np.int64)
    s_tid = seg["host_tid"].to_numpy(dtype=np.int64)
    for tid, w in waits.groupby("tid", sort=False):
        mine = rows[s_tid[rows] == tid]
        if not len(mine):
            continue
        ws, we, wn = w["start"].to_numpy(), w["end"].to_numpy(), w["name"].to_numpy(dtype=object)
        lo = np.searchsorted(we, s_start[mine], side="right")  # waits on one thread do not overlap
        hi = np.searchsorted(ws, s_end[mine], side="left")
        for r, a, b in zip(mine.tolist(), lo.tolist(), hi.tolist()):
            for k in range(a, b):
                s, e = max(int(ws[k]), int(s_start[r])), min(int(we[k]), int(s_end[r]))
                if e > s:
                    out.append((r, s, e, str(wn[k])))
    if len(out) > MAX_PIECES:
        out = sorted(out, key=lambda p: p[1] - p[2])[:MAX_PIECES]
    return out


def _who_ran(waits: pd.DataFrame, nv: pd.DataFrame, pieces: list[tuple[int, int, int, str]], pid: np.ndarray,
             host_tid: np.ndarray) -> dict[int, tuple[int, str]]:
    """Per piece (index into ``pieces``): the thread of the feeding thread's process, other than it, that
    ran inside an NVTX range (a range open, no wait call of its own) at most of the piece's probe points
    (9, evenly spread; the thread doing so at the most of them), and its innermost range's most frequent
    text there. Pieces where no
    other thread had a range open are left out. One batched ``innermost_open`` lookup for all."""
    if nv.empty or not pieces:
        return {}
    n_pid = nv["pid"].to_numpy(dtype=np.int64)
    n_tid = nv["tid"].to_numpy(dtype=np.int64)
    threads = pd.Series(n_tid).groupby(n_pid).unique().to_dict()  # pid -> its threads with ranges
    q_piece, q_tid, q_t = [], [], []
    probes = np.linspace(0.0, 1.0, num=9)
    for i, (r, s, e, _call) in enumerate(pieces):
        at = (s + probes * (e - 1 - s)).astype(np.int64)
        for other in threads.get(int(pid[r]), ()):
            if other != host_tid[r]:
                q_piece.append(np.full(len(at), i))
                q_tid.append(np.full(len(at), other))
                q_t.append(at)
    if not q_piece:
        return {}
    qp, qt, qs = np.concatenate(q_piece), np.concatenate(q_tid), np.concatenate(q_t)
    pos = innermost_open(nv, qt, qs)
    hit = (pos >= 0) & ~_blocked(waits, qt, qs)  # the other thread inside a range, not waiting itself
    if not hit.any():
        return {}
    texts = text(nv["text"]).to_numpy(dtype=object)
    found = pd.DataFrame({"piece": qp[hit], "tid": qt[hit], "text": texts[pos[hit]]})
    score = found.groupby(["piece", "tid"], sort=True).size()
    score = score[2 * score > len(probes)]  # running there at most of the wait
    if score.empty:
        return {}
    # each (piece, thread)'s most frequent range text, then per piece the thread running at the most probes
    texts_n = found.groupby(["piece", "tid", "text"], sort=True).size().rename("n").reset_index()
    texts_n = texts_n.sort_values(["piece", "tid", "n"], ascending=[True, True, False], kind="stable")
    best_text = texts_n.drop_duplicates(["piece", "tid"]).set_index(["piece", "tid"])["text"]
    ranked = score.rename("n").reset_index().sort_values(["piece", "n"], ascending=[True, False], kind="stable")
    ranked = ranked.drop_duplicates("piece")
    return {int(i): (int(other), str(best_text[(i, other)]))
            for i, other in zip(ranked["piece"].tolist(), ranked["tid"].tolist())}


def cross_thread_waits(ctx: FactContext, seg: pd.DataFrame, pid: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """``seg`` (timeline segments, ordered by device and start; column ``waited_tid`` added in place) with each host-work piece the feeding
    thread spent blocked on another busy thread of its process relabelled (detail names that thread and
    its innermost range; ``waited_tid`` the thread), and ``pid`` (the feeding process per row) to match."""
    # in place (a million-kernel trace's frame), in 32 bits: the pieces below widen it where needed
    seg["waited_tid"] = np.full(len(seg), -1, dtype=np.int32)
    if ctx.trace.osrt.empty or seg.empty:
        return seg, pid
    rows = np.flatnonzero((seg["cause"] == "host_work").to_numpy() & (seg["host_tid"] >= 0).to_numpy())
    if not len(rows):
        return seg, pid
    waits = _waits(ctx)
    if waits.empty:
        return seg, pid
    nv = ranges_only(ctx.trace.nvtx)
    pieces = _pieces(seg, rows, waits)
    named: dict[int, list[tuple[int, int, str, int]]] = {}
    for i, (other, label) in _who_ran(waits, nv, pieces, pid, seg["host_tid"].to_numpy(dtype=np.int64)).items():
        r, s, e, _call = pieces[i]
        # a feeding thread with no range of its own (the autograd engine's) is already named by its
        # process's main thread's range: when that is the range waited for, the segment says it already
        label = generic_path(label) if label else label  # named as the segment's own range is
        if label != str(seg["detail"].iat[r]):
            named.setdefault(r, []).append((s, e, f"{label or '(no NVTX range)'} (thread {other}, waited for)",
                                            other))
    if not named:
        return seg, pid
    labels = sorted({d for parts in named.values() for _, _, d, _ in parts})
    seg["detail"] = seg["detail"].cat.add_categories([x for x in labels if x not in seg["detail"].cat.categories])
    pieces_out: list[tuple[int, int, int, object, int]] = []  # (row, start, end, detail, waited_tid)
    for r, parts in named.items():
        cur = int(seg["start"].iat[r])
        own = seg["detail"].iat[r]
        for s, e, d, other in sorted(parts):
            if s > cur:
                pieces_out.append((r, cur, s, own, -1))
            pieces_out.append((r, s, e, d, other))
            cur = e
        end = int(seg["end"].iat[r])
        if end > cur:
            pieces_out.append((r, cur, end, own, -1))
    # each relabelled row replaced where it stands by its pieces (they cover it exactly, in time order),
    # so the frame keeps its (device, start) order; built one column at a time, each old column dropped
    # from ``seg`` once gathered (no whole copy of a 10 M-kernel trace's segments held beside it)
    pieces_out.sort(key=lambda p: p[0])  # stable: a row's pieces stay in time order
    new_rows, new_start, new_end, new_detail, new_waited = (list(x) for x in zip(*pieces_out))
    n = len(seg)
    counts = np.ones(n, dtype=np.int64)
    replaced = np.zeros(n, dtype=bool)
    replaced[list(named)] = True
    counts[replaced] = np.bincount(np.array(new_rows, dtype=np.int64), minlength=n)[replaced]
    src = np.repeat(np.arange(n, dtype=np.int32 if n < np.iinfo(np.int32).max else np.int64), counts)
    at = np.flatnonzero(replaced[src])  # where the pieces land, in pieces_out's order
    del counts, replaced
    piece_start = np.array(new_start, dtype=np.int64)
    piece_end = np.array(new_end, dtype=np.int64)
    given: dict[str, np.ndarray] = {"start": piece_start, "end": piece_end, "duration": piece_end - piece_start,
                                    "waited_tid": np.array(new_waited, dtype=np.int64)}
    cols: dict[str, object] = {}
    for name in list(seg.columns):
        col = seg[name]
        if name == "detail":
            codes = col.cat.codes.to_numpy()[src]
            codes[at] = pd.Categorical(new_detail, dtype=col.dtype).codes
            cols[name] = pd.Categorical.from_codes(codes, dtype=col.dtype, validate=False)
        elif isinstance(col.dtype, pd.CategoricalDtype):
            cols[name] = pd.Categorical.from_codes(col.cat.codes.to_numpy()[src], dtype=col.dtype, validate=False)
        else:
            values = col.to_numpy()
            if name in given:
                values = values.astype(np.result_type(values, narrow_int(given[name])), copy=False)
            values = values[src]
            if name in given:
                values[at] = given[name]
            cols[name] = values
        del col
        del seg[name]
    return pd.DataFrame(cols, copy=False), pid[src]


#: host-work segments shorter than this get no host_activity; at most this many (the longest) get one
HOST_ACTIVITY_MIN_NS = 50_000
HOST_ACTIVITY_MAX = 1000


def host_activity_column(ctx: FactContext, seg: pd.DataFrame, host_work: np.ndarray, pid: np.ndarray) -> object:
    """CPU samples and OS-runtime calls of the feeding thread inside the longest host-work segments (the
    text :func:`analyzer.facts.stacks.host_activity` writes; "" elsewhere or when not recorded)."""
    from analyzer.facts.stacks import host_activity

    labels: list[str] = [""]
    pick = np.empty(0, dtype=np.int64)
    t = ctx.trace
    if not (t.cpu_samples.empty and t.osrt.empty):
        dur = seg["duration"].to_numpy()
        pick = np.flatnonzero(host_work & (dur >= HOST_ACTIVITY_MIN_NS))
        if len(pick) > HOST_ACTIVITY_MAX:
            pick = pick[np.argsort(-dur[pick], kind="stable")[:HOST_ACTIVITY_MAX]]
        if len(pick):
            spans = pd.DataFrame({"start": seg["start"].to_numpy()[pick], "end": seg["end"].to_numpy()[pick],
                                  "host_pid": pid[pick], "host_tid": seg["host_tid"].to_numpy()[pick]})
            labels += list(host_activity(t, spans))
    n = len(seg)
    if len(pick) == n:
        codes = np.zeros(n, dtype=np.int64)
        codes[pick] = np.arange(1, len(pick) + 1)
        return categorical(codes, labels)
    # every other segment reads "": the categories of the few labels, then one fill (no pass over
    # millions of codes to find the used ones)
    few = categorical(np.arange(len(labels)), labels)
    few_codes = np.asarray(few.codes)
    codes_out = np.full(n, few_codes[0], dtype=few_codes.dtype)
    codes_out[pick] = few_codes[1:]
    return pd.Categorical.from_codes(codes_out, dtype=few.dtype, validate=False)
