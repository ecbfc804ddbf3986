"""Choosing the analysis window: the steady-state span that rules judge.

Real traces open with one-time setup (CUDA context, library handles, weight init, compilation,
autotuning, warmup). On a healthy GEMM loop more than half of the first-to-last-kernel span can be
setup; calling that idle GPU time cries wolf. So rules look at a window, chosen by ``--window``:

``None`` / ``"auto"`` (default), in this order:

1. **NVTX steps**: the user's repeated ranges. Ranges whose text matches an ``exclude`` glob
   (default ``warmup*``), and everything nested in them, are dropped first, and so are ranges that
   libraries open (domains NCCL, NVSHMEM, cuDNN ...: see :mod:`analyzer.facts.nccl_nvtx`). Texts are reduced to a
   stem by stripping a trailing number (``step_12`` -> ``step``, ``ProfilerStep#3`` ->
   ``ProfilerStep``). A stem qualifies when its instances do not overlap and either

   * it is a well-known loop name (step, iter, iteration, batch, epoch, train_step, ProfilerStep,
     ...) launching any GPU work, or
   * it repeats at least 3 times, its numbers (if any) mostly count up by one, and the GPU work
     launched inside its instances is at least 30 % of the trace's GPU op time (this keeps
     per-layer names such as ``Conv_12``/``Identity_3`` of inference engines out).

   Framework operators never qualify (Kineto's ``cpu_op`` events, ``aten::*``, ``vllm::*``, autograd
   nodes, ``CompiledFunction``: :func:`analyzer.facts.nvtx.operator_ranges`): they repeat more often
   than any iteration; nor do PyTorch's annotations around one part of each iteration
   (``Optimizer.step#...``, ``enumerate(DataLoader)#...``: :func:`analyzer.facts.nvtx.framework_marks`),
   which mark iterations (below) without enclosing them. The best stem is the well-known one, then the outermost, then the one covering most GPU work.
   When no warmup range was found and there are at least 4 instances, the first instance is left
   out: it pays lazy module loading, autotuning and allocator growth.
2. **Periodic GPU op sequence** (no usable NVTX): the labels of all GPU ops in start order (kernel
   short names, ``memcpy H2D``...) are checked for a period ``P`` (the candidate distances between
   the last ops and earlier occurrences of the same label; the smallest one with a near-best
   match rate ``label[i] == label[i-P]`` over the second half of the trace). The steady state begins
   at the change point that best splits "does not repeat" from "repeats" (fewest matches before plus
   fewest mismatches after, one cumulative sum). Because ``label[i]`` is compared with the op one
   period earlier, the first steady iteration is also left out, as in 1. Periods whose length is far from the
   steady state's (more than 4x longer or shorter than the median of the second half) at the start are
   left out too: the op sequence repeats from the first iteration on, but a whole-process recording
   without NVTX holds that iteration's one-time work (lazy module loading, warm-up, compilation). At least 3 periods must
   remain, with >= 60 % of ops repeating. When no candidate repeats, the spacings of the rarest labels
   of the second half are tried (a capture ending inside an iteration ends on ops that recur many
   times per iteration, whose last occurrences all lie in the last iteration).
3. Otherwise the whole GPU activity span (first op start to last op end), judged as one pass: a capture
   without repeated GPU work (model loading, one serving step, a single forward) has no steady state and
   no setup to leave out, and rules about what a loop repeats do not apply to it (the window's
   ``steady_state_loop`` capability, :func:`analyzer.loading.capabilities.window_capabilities`).

Explicit specs: ``"full"`` (whole GPU activity span), ``"2.5s:7s"`` (trace-relative times with
units ns/us/ms/s, either side may be empty), or a glob on NVTX range text (``"step_*"``).

``Window.setup_ns`` is the time from the first GPU op to the window start (reported as info). The end
of an NVTX-based window is extended to the end of the GPU work launched inside the selected ranges.

``Window.steps`` records the loop iterations found on the way (:class:`analyzer.analysis.StepSpans`):
the NVTX step ranges of 1. (or the ranges an NVTX glob selected, outermost only), else the periods of 2.
For a time span or ``full`` window the same detection runs and keeps the iterations inside the window.
The ``steps`` fact turns them into per-step durations (what ``analyze diff`` compares).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from analyzer.analysis import StepSpans, Window
from analyzer.errors import WindowError
from analyzer.facts._util import column, concat_codes, factorize_objects, new_frame, text, text_codes
from analyzer.facts.nccl_nvtx import internal_ranges
from analyzer.facts.nvtx import framework_marks, operator_ranges
from analyzer.facts.nvtx_ranges import parent_positions, ranges_only
from analyzer.facts.phase_index import match_ranges
from analyzer.facts.range_patterns import parse_patterns
from analyzer.loading.capabilities import MIN_LOOP_OPS
from analyzer.loading.columns import categorical
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
        window = Window(first, max(last, first), "full", "whole GPU activity span", 0)
        return _with_steps_inside(window, trace, ops, tuple(exclude))
    m = _TIME_SPEC.match(raw)
    if m and (m.group("a") or m.group("b")):
        return _with_steps_inside(_time_window(trace, ops, raw, m, first, last), trace, ops, tuple(exclude))
    return _glob_window(trace, ops, raw, first, tuple(exclude))


def _with_steps_inside(window: Window, trace: Trace, ops: pd.DataFrame, exclude: tuple[str, ...]) -> Window:
    """``window`` with the automatically detected iterations that lie inside it."""
    if not len(ops):
        return window
    found = _nvtx_steps(trace, ops, exclude) or _annotation_marks(trace, ops, exclude)
    steps = found[3] if found is not None else None
    if steps is None:
        periodic = _periodic(trace, ops, exclude)
        steps = periodic[2] if periodic is not None else None
    if steps is None:
        return window
    keep = [i for i, (a, b) in enumerate(zip(steps.starts, steps.ends))
            if a >= window.start_ns and b <= window.end_ns]
    if not keep:
        return window
    inside = replace(
        steps,
        names=tuple(steps.names[i] for i in keep),
        starts=tuple(steps.starts[i] for i in keep),
        ends=tuple(steps.ends[i] for i in keep),
        range_ids=tuple(steps.range_ids[i] for i in keep) if steps.range_ids else (),
        description=f"{steps.description} ({len(keep)} inside the window)",
    )
    return replace(window, steps=inside)


# ---------------------------------------------------------------------------------------------------
def _ops(trace: Trace) -> pd.DataFrame:
    """Every kernel, copy and memset: ``start, end, api_start, label`` ordered by (start, end), the
    label (kernel short name, ``memcpy <direction>``, ``memset``) a categorical built from the frames'
    text codes (no string per op)."""
    times: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    texts: list[tuple[np.ndarray, np.ndarray]] = []
    for op, frame in (("kernel", trace.kernels), ("memcpy", trace.memcpy), ("memset", trace.memset)):
        if frame.empty:
            continue
        if op == "kernel":
            texts.append(_codes(frame, "short_name"))
        elif op == "memcpy":
            codes, labels = _codes(frame, "direction")
            texts.append((codes, np.array(["memcpy " + x for x in labels], dtype=object)))
        else:
            texts.append((np.zeros(len(frame), dtype=np.int8), np.array(["memset"], dtype=object)))
        times.append((frame["start"].to_numpy(dtype=np.int64), frame["end"].to_numpy(dtype=np.int64),
                      column(frame, "api_start", -1).fillna(-1).to_numpy(dtype=np.int64)))
    if not times:
        return pd.DataFrame({"start": pd.Series(dtype="int64"), "end": pd.Series(dtype="int64"),
                             "api_start": pd.Series(dtype="int64"), "label": pd.Series(dtype=object)})
    start, end, api = (np.concatenate([t[i] for t in times]) for i in range(3))
    codes, labels = concat_codes(texts)
    order = np.lexsort((end, start))  # a stable sort by (start, end)
    # the taken arrays as columns (no copy into one 2-D block: 30 ms at a million kernels)
    return new_frame({"start": start[order], "end": end[order], "api_start": api[order],
                      "label": categorical(codes[order], labels)})


def _codes(frame: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``text_codes`` of a text column, ``""`` for every row when the frame lacks it."""
    if name in frame.columns:
        return text_codes(frame[name])
    return np.zeros(len(frame), dtype=np.int8), np.array([""], dtype=object)


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
    if nv.empty:  # e.g. a trace whose NVTX events are all marks or zero-length
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
    # the one meaning of --exclude-ranges (analyzer.facts.phase_index.exclude_option): a glob on the
    # range's name, on its path when it holds a '/', or re:REGEX, as the phase tables match it
    own = match_ranges(parse_patterns(patterns), text(nv["text"]), text(column(nv, "path", "")))
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
    desc = f"{n} NVTX ranges matching {raw!r}{note}"
    return Window(start, end, "nvtx", desc, max(0, start - first),
                  steps=_outermost_spans(nv.loc[selected], desc))


def _outermost_spans(rows: pd.DataFrame, description: str) -> StepSpans:
    """Ranges as steps, in start order, dropping any that starts inside an earlier one (nested or
    overlapping instances would count the same time twice)."""
    rows = rows.sort_values(["start", "end"], ascending=[True, False], kind="stable")
    names: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    ids: list[int] = []
    last_end = None
    for rid, t, a, b in zip(column(rows, "range_id", -1).tolist(), text(rows["text"]).tolist(),
                            rows["start"].tolist(), rows["end"].tolist()):
        if last_end is not None and a < last_end:
            continue
        names.append(str(t))
        starts.append(int(a))
        ends.append(int(b))
        ids.append(int(rid))
        last_end = int(b)
    return StepSpans("nvtx", description, tuple(names), tuple(starts), tuple(ends), tuple(ids))


# ---------------------------------------------------------------------------------------------------
def _auto(trace: Trace, ops: pd.DataFrame, first: int, last: int, exclude: tuple[str, ...]) -> Window:
    if not len(ops):
        return Window(0, int(trace.info.duration_ns), "auto", "whole trace (no GPU activity)", 0)
    steps = _nvtx_steps(trace, ops, exclude)
    if steps is not None:
        start, end, desc, spans = steps
        return Window(start, end, "nvtx", desc, max(0, start - first), steps=spans)
    marks = _annotation_marks(trace, ops, exclude)
    if marks is not None:
        start, end, desc, spans = marks
        return Window(start, end, "auto", desc, max(0, start - first), steps=spans)
    periodic = _periodic(trace, ops, exclude)
    if periodic is not None:
        start, desc, spans = periodic
        opened = _program_annotation_open_at(trace, start, exclude)
        if opened is not None and opened < start:
            # the program's own annotation began before the steady state: what ran inside it (a host
            # stall, a blocking copy) is the program's work, never one-time setup
            start = max(first, opened)
            desc += "; from the start of the program's annotation open there"
        return Window(start, last, "auto", desc, max(0, start - first), steps=spans)
    what = (f"setup or a single call ({len(ops)} GPU op{'s' if len(ops) != 1 else ''}, too few for a loop)"
            if len(ops) < MIN_LOOP_OPS else "one pass")
    return Window(first, last, "auto",
                  f"{what}: the whole GPU activity span (no repeated GPU work: no step ranges or annotations "
                  "repeating like iterations, no repeating GPU op sequence)", 0)


def _nvtx_steps(
    trace: Trace, ops: pd.DataFrame, exclude: tuple[str, ...]
) -> tuple[int, int, str, StepSpans] | None:
    every = ranges_only(trace.nvtx)  # the range kinds below are worked out once per range table
    nv = every.reset_index(drop=True)
    if nv.empty:
        return None
    own, inherited = _excluded(nv, exclude) if exclude else (np.zeros(len(nv), bool),) * 2
    warmup_found = bool(own.any())
    # ranges opened by libraries (NCCL's ncclAllReduce in domain NCCL, NVSHMEM, cuDNN ...) repeat as
    # often as steps do but are never the user's training loop
    # and so are the framework's operators (aten::linear, autograd nodes, CompiledFunction: Kineto's
    # cpu_op events, PyTorch's emit_nvtx ranges), which repeat more often than any iteration
    # and so are PyTorch's own once-per-iteration annotations (Optimizer.step#...), which enclose one
    # part of an iteration only: they mark iterations (_annotation_marks), never enclose them
    cand = nv.loc[~inherited & ~internal_ranges(every) & ~operator_ranges(every)
                  & ~framework_marks(every)].reset_index(drop=True)
    if cand.empty:
        return None
    texts = text(cand["text"])
    # stems, numbers and known names worked out once per distinct text (ranges repeat every step),
    # then spread to the rows
    codes, uniq = factorize_objects(texts)
    utexts = pd.Series(uniq, dtype=object)
    parts = utexts.str.extract(_STEM)
    stem = parts["stem"].where(parts["stem"].notna(), utexts).astype(object)
    stem = stem.where(stem.str.len() > 0, utexts)
    num = pd.to_numeric(parts["num"], errors="coerce")
    key = stem.str.lower()
    known = key.str.replace(r"[\s#:.\-]+$", "", regex=True).isin(KNOWN_STEP_STEMS)
    df = pd.DataFrame({
        "stem": stem.to_numpy()[codes], "key": key.to_numpy()[codes], "num": num.to_numpy()[codes],
        "start": cand["start"].to_numpy(dtype=np.int64), "end": cand["end"].to_numpy(dtype=np.int64),
        "depth": column(cand, "depth", 0).fillna(0).to_numpy(dtype=np.int64), "text": texts.to_numpy(),
        "range_id": column(cand, "range_id", -1).fillna(-1).to_numpy(dtype=np.int64),
        "known": known.to_numpy()[codes],
    }).sort_values(["stem", "start"], kind="stable", ignore_index=True)
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
    desc = f"{len(rows)} NVTX step{'' if len(rows) == 1 else 's'} {span}{warm}{skipped}"
    spans = StepSpans("nvtx", desc, tuple(str(t) for t in rows["text"].tolist()),
                      tuple(int(v) for v in rows["start"].tolist()), tuple(int(v) for v in rows["end"].tolist()),
                      tuple(int(v) for v in rows["range_id"].tolist()))
    return start, end, desc, spans


def _annotation_marks(
    trace: Trace, ops: pd.DataFrame, exclude: tuple[str, ...]
) -> tuple[int, int, str, StepSpans] | None:
    """Iterations marked by a program annotation that occurs once per iteration without enclosing it
    (``enumerate(DataLoader)#...``, ``Optimizer.step#SGD.step``, a user's ``record_function("log")``):
    each iteration runs from one instance's start to the next. A stem qualifies when its instances do
    not overlap, at least 4 occur, and the GPU work launched between consecutive ones repeats like an
    iteration: the same number of GPU ops in at least 60% of the intervals, none empty, and the
    intervals hold at least 30% of the trace's GPU op time. The best is the one whose intervals agree
    most, then the earliest in the iteration. As for steps, the first interval is left out as warmup."""
    nv = ranges_only(trace.nvtx)
    if nv.empty or not len(ops):
        return None
    nv, keep = _program_annotations(nv, exclude)
    cand = nv.loc[keep]
    if cand.empty:
        return None
    texts = text(cand["text"])
    stems = texts.str.extract(_STEM)["stem"].where(lambda x: x.notna() & (x.str.len() > 0), texts)
    launch = np.sort(_launch_times(ops))
    order = np.argsort(_launch_times(ops), kind="stable")
    dur = (ops["end"] - ops["start"]).to_numpy(dtype=np.int64)[order]
    dur_cum = np.concatenate(([0], np.cumsum(dur)))
    total = float(dur_cum[-1])
    best: tuple[float, int, str, np.ndarray, np.ndarray, int] | None = None
    for stem, rows in cand.groupby(stems.to_numpy(), sort=False):
        if len(rows) < 4:
            continue
        rows = rows.sort_values("start", kind="stable")
        st = rows["start"].to_numpy(dtype=np.int64)
        en = rows["end"].to_numpy(dtype=np.int64)
        if (st[1:] < en[:-1]).any():  # overlapping instances: not once per iteration
            continue
        lo = np.searchsorted(launch, st[:-1], side="left")
        hi = np.searchsorted(launch, st[1:], side="left")
        count = hi - lo
        if (count == 0).any() or total <= 0:
            continue
        values, freq = np.unique(count, return_counts=True)
        agree = float(freq.max()) / len(count)
        if agree < MIN_PERIODIC_MATCH or float((dur_cum[hi] - dur_cum[lo]).sum()) / total < MIN_GENERIC_COVERAGE:
            continue
        key = (agree, -int(st[0]))
        if best is None or key > (best[0], -best[1]):
            best = (agree, int(st[0]), str(stem), st, rows["range_id"].to_numpy(dtype=np.int64),
                    int(values[np.argmax(freq)]))
    if best is None:
        return None
    agree, _first, stem, st, ids, per = best
    starts, ends, ids = st[:-1], st[1:], ids[:-1]
    skipped = ""
    if len(starts) >= 4:
        starts, ends, ids = starts[1:], ends[1:], ids[1:]
        skipped = ", the first one skipped as warmup"
    start, end = _span_window(ops, starts, ends)
    desc = (f"{len(starts)} iterations from one {stem!r} annotation to the next ({per} GPU ops in "
            f"{agree:.0%} of them{skipped}; no step ranges)")
    spans = StepSpans("annotation", desc, tuple(f"iteration {i}" for i in range(len(starts))),
                      tuple(int(v) for v in starts), tuple(int(v) for v in ends),
                      tuple(int(v) for v in ids), per)
    return start, end, desc, spans


def _program_annotations(nv: pd.DataFrame, exclude: tuple[str, ...]) -> tuple[pd.DataFrame, np.ndarray]:
    """``nv`` (ranges, index reset) and which of them are the program's own annotations: not framework
    operators, not library ranges, not excluded (``exclude``: the warmup patterns)."""
    keep = ~internal_ranges(nv) & ~operator_ranges(nv)  # on the range table as given: worked out once
    nv = nv.reset_index(drop=True)
    if exclude:
        keep &= ~_excluded(nv, exclude)[1]
    return nv, keep


def _program_annotation_open_at(trace: Trace, t: int, exclude: tuple[str, ...]) -> int | None:
    """The earliest start of the program's own annotations (not framework operators, not library ranges,
    not excluded warmup) open at ``t``; None when none is."""
    nv = ranges_only(trace.nvtx)
    if nv.empty:
        return None
    nv, keep = _program_annotations(nv, exclude)
    starts = nv["start"].to_numpy(dtype=np.int64)
    ends = nv["end"].to_numpy(dtype=np.int64)
    open_at = keep & (starts < t) & (ends > t)
    return int(starts[open_at].min()) if open_at.any() else None


def _periodic(trace: Trace, ops: pd.DataFrame, exclude: tuple[str, ...]) -> tuple[int, str, StepSpans] | None:
    codes, uniques = factorize_objects(ops["label"])
    n = len(codes)
    if n < MIN_LOOP_OPS:
        return None
    # candidate periods: distances from each of the last ops to earlier ops with the same label
    cands: set[int] = set()
    for i in range(n - 1, max(n - 9, -1), -1):  # the last 8 ops only
        prev = np.flatnonzero(codes[:i] == codes[i])[-32:]
        cands.update((i - prev).tolist())
    cands = {p for p in cands if 0 < p <= n // 3}
    found = _steady(codes, sorted(cands)[:64])
    if found is None:
        # a capture that ends inside an iteration ends on ops that recur many times per iteration (the
        # same convolution in every block): their last occurrences are all in the last iteration. The
        # spacing of the rarest labels of the second half (the loss, the optimizer, the batch copy)
        # gives the iteration length there
        counts = np.bincount(codes[n // 2:])
        rare = [int(c) for c in np.argsort(counts, kind="stable") if counts[c] >= 3][:32]
        spaced = {int(np.median(np.diff(np.flatnonzero(codes == lab)[-32:]))) for lab in rare}
        found = _steady(codes, sorted(p for p in spaced if 0 < p <= n // 3))
    if found is None:
        return None
    period, split, first_op, match = found
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
    desc = (f"steady state: the GPU op sequence repeats every {period} ops ({rate:.0%} match) "
            f"from op {first_op} of {n}{note}")
    iteration, head, label = _iteration(codes, first_op, period, rate)
    what = (f"iterations of {iteration} GPU ops, each from a {uniques[label]!r}" if label is not None
            else f"periods of {iteration} GPU ops")
    spans = _period_spans(ops, head, iteration, start, what)
    skip = 0 if note else _unsteady_head(spans)  # warmup ranges: the program said where its loop starts
    if skip:
        typical = float(np.median(np.subtract(spans.ends, spans.starts)[skip:]))
        head_ns = spans.starts[skip] - spans.starts[0]
        start = spans.starts[skip]
        unit = "period" if label is None else "iteration"
        desc += (f", after the first {skip} {unit}{'s' if skip > 1 else ''} ({_fmt(head_ns)}: one-time "
                 f"work, {'their lengths' if skip > 1 else 'its length'} far from the steady {_fmt(typical)})")
        spans = _period_spans(ops, head, iteration, start, what)
    elif not note and len(spans) >= 3:
        # the iterations found by their marking op may begin well after the repetition does (that op's
        # first iterations ran another kernel variant): the ops before the first iteration are at most
        # an iteration or two, so a stretch there far longer than the steady iterations is one-time work
        # (lazy module loading in the program's first iteration), not steady state
        dur = np.subtract(spans.ends, spans.starts)
        typical = float(np.median(dur[len(dur) // 2:]))
        before = spans.starts[0] - start
        if typical > 0 and before > UNSTEADY_FACTOR * typical:
            start = spans.starts[0]
            desc += (f", from the first iteration ({_fmt(before)} before it: one-time work, far from the "
                     f"steady {_fmt(typical)})")
    return start, desc, spans


#: a period this many times longer or shorter than the steady state's median is not steady. Measured on the
#: held-out bare recordings (period length / median of the second half): the heads it must cut are 80-728x
#: (decode_eager_bare, nsys: the cold first tokens) and 7.2x (optimizer_loop_bare, nsys: setup in the first
#: period); the steady recordings it must leave alone reach 2.09x (decode_eager_bare under torch.profiler,
#: its first half's periods twice the second's) and 0.63x. 4 lies between 2.1 and 7.2 (their geometric mean
#: is 3.9)
UNSTEADY_FACTOR = 4.0


def _unsteady_head(spans: StepSpans) -> int:
    """How many leading periods are not yet the steady state in time. The op sequence can repeat from
    the first iteration on while its first iterations still pay one-time work (lazy module loading,
    cuBLAS and allocator warm-up, compilation, a program's warm-up steps before CUDA-graph capture):
    a whole-process recording (nsys) of a program without NVTX ranges holds them. A period whose length
    is more than :data:`UNSTEADY_FACTOR` times the median of the second half's periods, or less than
    that median divided by it, is unsteady; the head ends at the change point that best splits
    "unsteady" from "steady" (fewest steady periods before plus fewest unsteady ones after; the
    latest among equals), so an occasional long period later in the loop (logging, a checkpoint)
    stays in the window. At least 3 periods, and a third of them, remain."""
    n = len(spans)
    if n < 6:
        return 0
    dur = np.subtract(spans.ends, spans.starts).astype(np.float64)
    typical = float(np.median(dur[n // 2:]))
    if typical <= 0:
        return 0
    off = (dur > UNSTEADY_FACTOR * typical) | (dur < typical / UNSTEADY_FACTOR)
    limit = n - max(3, n // 3)  # the latest cut
    if not off[:limit].any():
        return 0
    cost = _split_costs(~off)[: limit + 1]
    return int(np.flatnonzero(cost == cost.min())[-1])  # the latest: an unsteady period at the start is one-time


def _split_costs(good: np.ndarray) -> np.ndarray:
    """For each split ``s`` in ``0..len(good)``: how many ``good`` come before it plus how many not good
    from it on (one cumulative sum); its minimum is the change point from "not yet" to "steady"."""
    before = np.concatenate(([0], np.cumsum(good)))
    return before + ((len(good) - np.arange(len(good) + 1)) - (before[-1] - before))


def _steady(codes: np.ndarray, cands: list[int]) -> tuple[int, int, int, np.ndarray] | None:
    """The repeating period among ``cands`` (the smallest with a near-best match rate over the second half)
    and where the repetition starts: ``(period, split, first op of the steady state, matches)``, or None
    when none repeats well enough for at least 3 periods."""
    n = len(codes)
    if not cands:
        return None
    half = n // 2
    rates = {}
    for p in cands:
        h = max(p, half)
        rates[p] = float(np.mean(codes[h:] == codes[h - p: n - p]))
    best = max(rates.values())
    if best < MIN_PERIODIC_MATCH:
        return None
    period = min(p for p, r in rates.items() if r >= best - 0.05)
    match = codes[period:] == codes[:-period]
    split = int(np.argmin(_split_costs(match)))  # matches before it + mismatches from it on: the earliest
    first_op = split + period
    if n - first_op < 3 * period or float(np.mean(match[split:])) < MIN_PERIODIC_MATCH:
        return None
    return period, split, first_op, match


def _iteration(codes: np.ndarray, first_op: int, period: int, rate: float) -> tuple[int, int, int | None]:
    """The loop iteration in ops, which the smallest repeating period often is not: a training step's
    op sequence repeats per layer too (the chooser above may find one layer, 9 ops, in a 234-op
    step). The op label that occurs fewest times in the steady state (the batch's host-to-device copy,
    the loss, the optimizer) marks iterations: when it recurs at a regular spacing ``L`` (longer than
    ``period``, at least 3 times; not necessarily a multiple of it: an iteration holds its layers plus
    the embedding, loss and optimizer) and the sequence repeats with ``L`` at least as well as with
    ``period``, the iteration is ``L`` ops starting at that label's first occurrence. Returns
    ``(ops per iteration, index of the first iteration's first op, the marking label's code or None)``."""
    n = len(codes)
    tail = codes[first_op:]
    if len(tail) < 3 * period:
        return period, first_op, None
    counts = np.bincount(tail)
    for lab in [int(c) for c in np.argsort(counts, kind="stable") if counts[c] >= 3][:8]:
        pos = np.flatnonzero(tail == lab)
        spacing = np.diff(pos)
        size = int(np.median(spacing))
        if size <= period:
            break  # the rarest label repeats every period: the period is the iteration
        head = first_op + int(pos[0])
        if float(np.mean(spacing == size)) < 0.8 or (n - head) // size < 3:
            continue
        h = max(size, head)
        if float(np.mean(codes[h:] == codes[h - size: n - size])) >= rate - 0.02:
            return size, head, lab
    return period, first_op, None


def _period_spans(ops: pd.DataFrame, first_op: int, period: int, start: int, what: str) -> StepSpans:
    """Whole periods of ``period`` ops from ``first_op`` on, those starting at or after ``start``: each
    from its first op's start to the next period's first op's start (the last one: to its last op's
    start, so the span holds exactly its own ops)."""
    starts_all = ops["start"].to_numpy(dtype=np.int64)
    heads = np.arange(first_op, len(ops) - period + 1, period)
    begin = starts_all[heads]
    nxt = np.append(starts_all[heads[1:]], starts_all[heads[-1] + period - 1] + 1) if len(heads) else begin
    keep = begin >= start
    begin, nxt = begin[keep], nxt[keep]
    names = tuple(f"iteration {i}" for i in range(len(begin)))
    return StepSpans("periodic", f"{len(begin)} {what} (no NVTX steps)", names,
                     tuple(int(v) for v in begin), tuple(int(v) for v in nxt), (), period)
