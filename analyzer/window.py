"""Choosing the analysis window: the steady-state span that rules judge.

Real traces open with one-time setup (CUDA context, library handles, weight init, compilation,
autotuning, warmup). On a healthy GEMM loop more than half of the first-to-last-kernel span can be
setup; calling that idle GPU time cries wolf. So rules look at a window, chosen by ``--window``:

``None`` / ``"auto"`` (default), in this order:

1. **NVTX steps**: the user's repeated ranges. Ranges whose text matches an ``exclude`` glob
   (default ``warmup*``), and everything nested in them, are dropped first. Texts are reduced to a
   stem by stripping a trailing number (``step_12`` -> ``step``, ``ProfilerStep#3`` ->
   ``ProfilerStep``). A stem qualifies when its instances do not overlap and either

   * it is a well-known loop name (step, iter, iteration, batch, epoch, train_step, ProfilerStep,
     ...) launching any GPU work, or
   * it repeats at least 3 times, its numbers (if any) mostly count up by one, and the GPU work
     launched inside its instances is at least 30 % of the trace's GPU op time (this keeps
     per-layer names such as ``Conv_12``/``Identity_3`` of inference engines out).

   The best stem is the well-known one, then the outermost, then the one covering most GPU work.
   When no warmup range was found and there are at least 4 instances, the first instance is left
   out: it pays lazy module loading, autotuning and allocator growth.
2. **Periodic GPU op sequence** (no usable NVTX): the labels of all GPU ops in start order (kernel
   short names, ``memcpy H2D``...) are checked for a period ``P`` (the candidate distances between
   the last ops and earlier occurrences of the same label; the smallest one with a near-best
   match rate ``label[i] == label[i-P]`` over the second half of the trace). The steady state begins
   at the change point that best splits "does not repeat" from "repeats" (fewest matches before plus
   fewest mismatches after, one cumulative sum). Because ``label[i]`` is compared with the op one
   period earlier, the first steady iteration is also left out, as in 1. At least 3 periods must
   remain, with >= 60 % of ops repeating.
3. Otherwise the whole GPU activity span (first op start to last op end).

Explicit specs: ``"full"`` (whole GPU activity span), ``"2.5s:7s"`` (trace-relative times with
units ns/us/ms/s, either side may be empty), or a glob on NVTX range text (``"step_*"``).

``Window.setup_ns`` is the time from the first GPU op to the window start (reported as info). The end
of an NVTX-based window is extended to the end of the GPU work launched inside the selected ranges.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analyzer.analysis import Window
from analyzer.errors import WindowError
from analyzer.facts._util import column, factorize_objects, text
from analyzer.facts.nvtx import parent_positions, ranges_only
from analyzer.loading.model import Trace
from analyzer.saferegex import PatternError, UserPattern, compile_glob

KNOWN_STEP_STEMS = frozenset({
    "step", "steps", "iter", "iters", "iteration", "batch", "epoch", "train_step", "training_step",
    "trainstep", "train_iter", "train_batch", "profilerstep", "microbatch", "micro_batch", "loop",
})
MIN_GENERIC_REPEATS = 3
MIN_GENERIC_COVERAGE = 0.3
MIN_PERIODIC_MATCH = 0.6
_TIME_SPEC = re.compile(r"^\s*(?P<a>[0-9]*\.?[0-9]+\s*(ns|us|ms|s))?\s*:\s*(?P<b>[0-9]*\.?[0-9]+\s*(ns|us|ms|s))?\s*$")
_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_STEM = re.compile(r"^(?P<stem>.*?)[\s_\-#:.]*(?P<num>\d+)$")


def choose_window(trace: Trace, spec: str | None = None, *, exclude: Sequence[str] = ("warmup*",)) -> Window:
    """The analysis window for ``trace`` per ``spec`` (see the module docstring).

    Raises :class:`WindowError` for a malformed spec or one that selects nothing.
    """
    ops = _ops(trace)
    first = int(ops["start"].min()) if len(ops) else 0
    last = int(ops["end"].max()) if len(ops) else int(trace.info.duration_ns)
    raw = (spec or "").strip()
    if raw.lower() in ("", "auto"):
        return _auto(trace, ops, first, last, tuple(exclude))
    if raw.lower() == "full":
        return Window(first, max(last, first), "full", "whole GPU activity span", 0)
    m = _TIME_SPEC.match(raw)
    if m and (m.group("a") or m.group("b")):
        return _time_window(trace, ops, raw, m, first, last)
    return _glob_window(trace, ops, raw, first, tuple(exclude))


# ---------------------------------------------------------------------------------------------------
def _ops(trace: Trace) -> pd.DataFrame:
    parts = []
    for op, frame in (("kernel", trace.kernels), ("memcpy", trace.memcpy), ("memset", trace.memset)):
        if frame.empty:
            continue
        if op == "kernel":
            label = text(column(frame, "short_name", ""))
        elif op == "memcpy":
            label = "memcpy " + text(column(frame, "direction", ""))
        else:
            label = pd.Series("memset", index=frame.index, dtype=object)
        parts.append(pd.DataFrame({
            "start": frame["start"].to_numpy(dtype=np.int64),
            "end": frame["end"].to_numpy(dtype=np.int64),
            "api_start": column(frame, "api_start", -1).fillna(-1).to_numpy(dtype=np.int64),
            # an object Series: pandas 3 would copy every label into an Arrow string column
            "label": pd.Series(label.to_numpy(dtype=object), dtype=object, copy=False),
        }, copy=False))  # concat below copies once; no copy per part
    if not parts:
        return pd.DataFrame({"start": pd.Series(dtype="int64"), "end": pd.Series(dtype="int64"),
                             "api_start": pd.Series(dtype="int64"), "label": pd.Series(dtype=object)})
    return pd.concat(parts, ignore_index=True).sort_values(["start", "end"], kind="stable", ignore_index=True)


def _fmt(ns: float) -> str:
    ns = float(ns)
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.3g} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.3g} us"
    return f"{ns:.0f} ns"


def _parse_time(value: str) -> int:
    m = re.match(r"^\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)\s*$", value)
    assert m is not None
    return round(float(m.group(1)) * _UNITS[m.group(2)])


def _time_window(trace: Trace, ops: pd.DataFrame, raw: str, m: re.Match[str], first: int, last: int) -> Window:
    end_of_trace = max(int(trace.info.duration_ns), last)
    start = _parse_time(m.group("a")) if m.group("a") else 0
    end = _parse_time(m.group("b")) if m.group("b") else end_of_trace
    if end <= start:
        raise WindowError(f"--window {raw!r}: the end must be after the start")
    if not len(ops) or not ((ops["end"] > start) & (ops["start"] < end)).any():
        span = f"GPU activity spans {_fmt(first)}..{_fmt(last)}" if len(ops) else "the trace has no GPU activity"
        raise WindowError(f"--window {raw!r} contains no GPU activity ({span})")
    return Window(start, end, "user", f"{_fmt(start)}..{_fmt(end)} (user window)",
                  max(0, min(start, last) - first))


def _excluded(nv: pd.DataFrame, patterns: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(own match, own match or nested in a matching range) per range row."""
    texts = text(nv["text"])
    uniq = texts.unique()
    globs = [_glob(p, "--exclude-ranges") for p in patterns]
    hit = {t: any(g.search(t) for g in globs) for t in uniq}  # distinct texts only
    own = texts.map(hit).to_numpy(dtype=bool)
    inherited = own.copy()
    parent = parent_positions(nv)
    cur = parent.copy()
    for _ in range(int(column(nv, "depth", 0).max()) + 66):  # walk up one level per pass
        valid = cur >= 0
        if not valid.any():
            break
        inherited[valid] |= own[cur[valid]]
        cur[valid] = parent[cur[valid]]
    return own, inherited


def _glob(pattern: str, option: str) -> UserPattern:
    """A user glob, matched in linear time (:mod:`analyzer.saferegex`)."""
    try:
        return compile_glob(pattern, what=f"{option} glob")
    except PatternError as err:
        raise WindowError(str(err), hint=err.hint) from None


def _launch_times(ops: pd.DataFrame) -> np.ndarray:
    api = ops["api_start"].to_numpy(dtype=np.int64)
    return np.where(api >= 0, api, ops["start"].to_numpy(dtype=np.int64))


def _span_window(ops: pd.DataFrame, starts: np.ndarray, ends: np.ndarray) -> tuple[int, int]:
    """[first start, last end] of the ranges, the end extended to the GPU work launched inside."""
    s, e = int(starts.min()), int(ends.max())
    if len(ops):
        launch = _launch_times(ops)
        inside = (launch >= s) & (launch < e)
        if inside.any():
            e = max(e, int(ops["end"].to_numpy()[inside].max()))
    return s, e


def _glob_window(trace: Trace, ops: pd.DataFrame, raw: str, first: int, exclude: tuple[str, ...]) -> Window:
    nv = ranges_only(trace.nvtx).reset_index(drop=True)
    if nv.empty:
        hint = " (time spans need units: 2.5s:7s)" if ":" in raw else ""
        raise WindowError(f"--window {raw!r}: the trace has no NVTX ranges to match{hint}; "
                          "use a time span such as 2.5s:7s, 'full' or 'auto'")
    texts = text(nv["text"])
    uniq = texts.unique()
    glob = _glob(raw, "--window")
    hit = {t: glob.search(t) for t in uniq}
    match = texts.map(hit).to_numpy(dtype=bool)
    if not match.any():
        common = ", ".join(texts.value_counts().index[:5])
        hint = "; time spans need units (2.5s:7s)" if re.search(r"\d\s*:", raw) else ""
        raise WindowError(f"--window {raw!r} matches no NVTX range (most frequent: {common}){hint}")
    _own, inherited = _excluded(nv, exclude) if exclude else (np.zeros(len(nv), bool),) * 2
    selected = match & ~inherited
    note = ", warmup excluded" if (match & inherited).any() else ""
    if not selected.any():  # the user asked for exactly these ranges
        selected, note = match, ""
    start, end = _span_window(ops, nv["start"].to_numpy()[selected], nv["end"].to_numpy()[selected])
    n = int(selected.sum())
    return Window(start, end, "nvtx", f"{n} NVTX ranges matching {raw!r}{note}", max(0, start - first))


# ---------------------------------------------------------------------------------------------------
def _auto(trace: Trace, ops: pd.DataFrame, first: int, last: int, exclude: tuple[str, ...]) -> Window:
    if not len(ops):
        return Window(0, int(trace.info.duration_ns), "auto", "whole trace (no GPU activity)", 0)
    steps = _nvtx_steps(trace, ops, exclude)
    if steps is not None:
        start, end, desc = steps
        return Window(start, end, "nvtx", desc, max(0, start - first))
    periodic = _periodic(trace, ops, exclude)
    if periodic is not None:
        start, desc = periodic
        return Window(start, last, "auto", desc, max(0, start - first))
    return Window(first, last, "auto",
                  "whole GPU activity span (no repeated NVTX step ranges, no repeating GPU op sequence)", 0)


def _nvtx_steps(trace: Trace, ops: pd.DataFrame, exclude: tuple[str, ...]) -> tuple[int, int, str] | None:
    nv = ranges_only(trace.nvtx).reset_index(drop=True)
    if nv.empty:
        return None
    own, inherited = _excluded(nv, exclude) if exclude else (np.zeros(len(nv), bool),) * 2
    warmup_found = bool(own.any())
    cand = nv.loc[~inherited].reset_index(drop=True)
    if cand.empty:
        return None
    texts = text(cand["text"])
    parts = texts.str.extract(_STEM)
    stem = parts["stem"].where(parts["stem"].notna(), texts).astype(object)
    stem = stem.where(stem.str.len() > 0, texts)
    num = pd.to_numeric(parts["num"], errors="coerce")
    df = pd.DataFrame({
        "stem": stem.to_numpy(), "key": stem.str.lower().to_numpy(), "num": num.to_numpy(),
        "start": cand["start"].to_numpy(dtype=np.int64), "end": cand["end"].to_numpy(dtype=np.int64),
        "depth": column(cand, "depth", 0).fillna(0).to_numpy(dtype=np.int64), "text": texts.to_numpy(),
    }).sort_values(["stem", "start"], kind="stable", ignore_index=True)
    df["known"] = df["key"].str.replace(r"[\s#:.\-]+$", "", regex=True).isin(KNOWN_STEP_STEMS)
    g = df.groupby("stem", sort=False)
    nxt_start = g["start"].shift(-1)
    nxt_num = g["num"].shift(-1)
    df["overlap"] = nxt_start.notna() & (nxt_start < df["end"])
    df["consecutive"] = (nxt_num - df["num"]) == 1
    df["has_next"] = nxt_start.notna()
    stats = g.agg(count=("start", "size"), known=("known", "first"), depth=("depth", "min"),
                  overlaps=("overlap", "sum"), consecutive=("consecutive", "sum"),
                  numbered=("num", "count"), pairs=("has_next", "sum"))
    pairs = stats["pairs"].clip(lower=1)
    ok = (stats["overlaps"] <= 0.1 * pairs)
    numbered = stats["numbered"] >= 0.9 * stats["count"]
    generic = (stats["count"] >= MIN_GENERIC_REPEATS) & (~numbered | (stats["consecutive"] >= 0.5 * pairs))
    stats = stats.loc[ok & (stats["known"] | generic)]
    if stats.empty:
        return None
    total_gpu = float((ops["end"] - ops["start"]).sum())
    launch = _launch_times(ops)
    order = np.argsort(launch, kind="stable")
    launch_sorted = launch[order]
    dur_cum = np.concatenate(([0], np.cumsum((ops["end"] - ops["start"]).to_numpy()[order])))
    coverage = {}
    for name in stats.index:  # candidate stems only (a handful)
        rows = df.loc[df["stem"] == name]
        lo = np.searchsorted(launch_sorted, rows["start"].to_numpy(), side="left")
        hi = np.searchsorted(launch_sorted, rows["end"].to_numpy(), side="left")
        coverage[name] = float((dur_cum[hi] - dur_cum[lo]).sum()) / total_gpu if total_gpu > 0 else 0.0
    stats = stats.assign(coverage=pd.Series(coverage))
    stats = stats.loc[(stats["coverage"] > 0)
                      & (stats["known"] | (stats["coverage"] >= MIN_GENERIC_COVERAGE))]
    if stats.empty:
        return None
    best = stats.sort_values(["known", "depth", "coverage", "count"],
                             ascending=[False, True, False, False]).index[0]
    rows = df.loc[df["stem"] == best].sort_values("start")
    skipped = ""
    if not warmup_found and len(rows) >= 4:
        skipped = f", first instance ({rows['text'].iat[0]}) skipped as warmup"
        rows = rows.iloc[1:]
    start, end = _span_window(ops, rows["start"].to_numpy(), rows["end"].to_numpy())
    first_t, last_t = rows["text"].iat[0], rows["text"].iat[-1]
    span = f"{first_t}..{last_t}" if len(rows) > 1 else first_t
    warm = ", warmup excluded" if warmup_found else ""
    return start, end, f"{len(rows)} NVTX steps {span}{warm}{skipped}"


def _periodic(trace: Trace, ops: pd.DataFrame, exclude: tuple[str, ...]) -> tuple[int, str] | None:
    codes, _ = factorize_objects(ops["label"])
    n = len(codes)
    if n < 6:
        return None
    # candidate periods: distances from each of the last ops to earlier ops with the same label
    cands: set[int] = set()
    for i in range(n - 1, max(n - 9, -1), -1):  # the last 8 ops only
        prev = np.flatnonzero(codes[:i] == codes[i])[-32:]
        cands.update((i - prev).tolist())
    cands = {p for p in cands if 0 < p <= n // 3}
    if not cands:
        return None
    half = n // 2
    rates = {}
    for p in sorted(cands)[:64]:
        h = max(p, half)
        rates[p] = float(np.mean(codes[h:] == codes[h - p: n - p]))
    best = max(rates.values())
    if best < MIN_PERIODIC_MATCH:
        return None
    period = min(p for p, r in rates.items() if r >= best - 0.05)
    match = codes[period:] == codes[:-period]
    cm = np.concatenate(([0], np.cumsum(match)))
    total = len(match)
    s = np.arange(total + 1)
    cost = cm[s] + ((total - s) - (cm[-1] - cm[s]))  # matches before s + mismatches from s on
    split = int(np.argmin(cost))
    first_op = split + period
    if n - first_op < 3 * period or float(np.mean(match[split:])) < MIN_PERIODIC_MATCH:
        return None
    start = int(ops["start"].iat[first_op])
    note = ""
    if exclude and not trace.nvtx.empty:
        nv = ranges_only(trace.nvtx)
        own, _ = _excluded(nv.reset_index(drop=True), exclude)
        if own.any():
            warm_end = int(nv["end"].to_numpy()[own].max())
            later = ops.loc[_launch_times(ops) >= warm_end, "start"]
            if len(later) and int(later.iat[0]) > start:
                start, note = int(later.min()), ", after the warmup ranges"
    rate = float(np.mean(match[split:]))
    return start, (f"steady state: the GPU op sequence repeats every {period} ops ({rate:.0%} match) "
                   f"from op {first_op} of {n}{note}")
